"""The sweep folder: what was asked (fixed at the start) and what each trial gave.

    DIR/
        spec.yaml              the SPEC as the user wrote it
        sweep.json             name, resources, thresholds and every trial with its resolved
                               config: `--resume` reads this, never the SPEC again, so a resumed
                               sweep runs exactly the trials it started with
        sweep.sig              where the trials name code (an env class, a 'module:' env id,
                               wrappers, a policy module): the HMAC of the trials under the
                               user's key; `--resume` of a folder from elsewhere imports none
        trials/<id>/           one trial: the runs_dir of its train() call
            <env>__<algo>__<seed>__<time>/   the run folder (metrics.csv, eval.json, ...)
            attempts.jsonl     one line per start of the trial (pid, host, fresh or resumed)
            result.json        written last: finished (final greedy return) or failed (error)
        report/                `trustrl report DIR` writes REPORT.md and PNGs here
        .trustrl.lock          held by the one process running the sweep (trustrl.util.locks)
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from trustrl.records.runs import atomic_write_text
from trustrl.sweep.spec import Spec, SpecError, Trial
from trustrl.util.locks import FolderLock
from trustrl.util.safeio import remove_stale_tmp

SWEEP_FORMAT = 1
SIGNATURE = "sweep.sig"


def _sign_trials(path: Path, trials: list[Any]) -> None:
    """sweep.sig: the trials' HMAC under the user's key, where they name code."""
    from trustrl.records.runs import code_mac
    from trustrl.util.importing import named_code
    from trustrl.util.safeio import signing_key

    key = signing_key(create=True) if named_code(trials) else None
    if key is not None:
        atomic_write_text(path / SIGNATURE, json.dumps({"code": code_mac(key, trials)}) + "\n")


def _check_trials(path: Path, trials: list[Any]) -> None:
    """Trials that name code run only from a sweep.json signed with the user's key (or with
    the opt-in TRUSTRL_TRUST_FILES=1): UntrustedFileError in one line before any import."""
    import hmac

    from trustrl.records.runs import code_mac
    from trustrl.util.importing import named_code
    from trustrl.util.safeio import UntrustedFileError, key_path, signing_key, trusted

    names = named_code(trials)
    if not names or trusted():
        return
    key = signing_key(create=False)
    try:
        mac = json.loads((path / SIGNATURE).read_text()).get("code")
    except (OSError, ValueError, AttributeError, RecursionError):
        mac = None
    if key is not None and isinstance(mac, str) and hmac.compare_digest(
            mac, code_mac(key, trials)):
        return
    raise UntrustedFileError(
        f"{path / 'sweep.json'} names code ({', '.join(names)[:120]}) and is not signed with "
        f"your key ({key_path()}): a sweep from another user or machine, or edited; importing "
        f"that code can run anything; if you trust it, rerun with --trust-files")


def new_folder(path: Path, command: str) -> FolderLock:
    """A new sweep (or study) folder with its trials/, locked; refused where `path` holds
    files (`trustrl <command> --resume` continues those)."""
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise SpecError(f"{path} already exists; continue it with `trustrl {command} --resume "
                        f"{path}` or choose another --out")
    (path / "trials").mkdir(parents=True, exist_ok=True)
    lock = FolderLock(path, f"{command} folder".replace("tune", "study"))
    lock.acquire()  # two `trustrl sweep SPEC --out DIR` at once: the second stops here
    return lock


class SweepFolder:
    def __init__(self, path: Path, meta: dict[str, Any]):
        self.path = Path(path)
        self.meta = meta
        self.trials = [Trial.from_dict(t) for t in meta["trials"]]
        self._lock = FolderLock(self.path, "sweep folder")

    # --- one writer at a time ----------------------------------------------------------------
    def lock(self) -> None:
        """Take the sweep's write lock (a second `trustrl sweep` on it fails at once, naming
        the holder), then remove temp files a killed writer left in DIR and DIR/trials/*."""
        if self._lock.held:
            return
        self._lock.acquire()
        remove_stale_tmp(self.path)
        trials = self.path / "trials"
        if trials.is_dir():
            for d in trials.iterdir():
                if d.is_dir():
                    remove_stale_tmp(d)

    def unlock(self) -> None:
        self._lock.release()

    @property
    def name(self) -> str:
        return str(self.meta["name"])

    @property
    def resources(self) -> dict[str, float]:
        return dict(self.meta.get("resources", {"cpus": 1, "gpus": 0}))

    @property
    def thresholds(self) -> dict[str, float]:
        return dict(self.meta.get("thresholds", {}))

    # --- creation and opening ----------------------------------------------------------------
    @classmethod
    def create(cls, path: str | Path, spec: Spec, spec_text: str) -> SweepFolder:
        p = Path(path)
        lock = new_folder(p, "sweep")
        meta = {"format": SWEEP_FORMAT, "name": spec.name,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "resources": spec.resources, "thresholds": spec.thresholds,
                "trials": [t.as_dict() for t in spec.trials]}
        atomic_write_text(p / "spec.yaml", spec_text)
        atomic_write_text(p / "sweep.json", json.dumps(meta, indent=1) + "\n")
        _sign_trials(p, meta["trials"])
        folder = cls(p, meta)
        folder._lock = lock
        return folder

    @classmethod
    def open(cls, path: str | Path) -> SweepFolder:
        from trustrl.sweep.spec import check_sweep_file

        p = Path(path)
        meta = check_sweep_file(p)  # sweep.json there and of the right shape, else SpecError
        if meta.get("format") != SWEEP_FORMAT:
            raise SpecError(f"{p / 'sweep.json'}: format not understood by this trustrl")
        _check_trials(p, meta["trials"])
        return cls(p, meta)

    def add_trials(self, trials: list[Trial]) -> None:
        """Append trials to sweep.json (`trustrl tune` records each trial its study asks for,
        before the trial starts)."""
        self.meta["trials"] = [*self.meta["trials"], *(t.as_dict() for t in trials)]
        self.trials.extend(trials)
        atomic_write_text(self.path / "sweep.json", json.dumps(self.meta, indent=1) + "\n")
        _sign_trials(self.path, self.meta["trials"])  # sweep.sig covers the new trials too

    # --- trials ------------------------------------------------------------------------------
    def trial_dir(self, trial: Trial) -> Path:
        return self.path / "trials" / trial.id

    def result(self, trial: Trial) -> dict[str, Any] | None:
        """The trial's result.json, or None while it has not finished or failed."""
        try:
            return json.loads((self.trial_dir(trial) / "result.json").read_text())
        except (OSError, json.JSONDecodeError):
            return None

    def status(self, trial: Trial) -> str:
        r = self.result(trial)
        return "pending" if r is None else str(r.get("status", "pending"))

    def attempts(self, trial: Trial) -> int:
        f = self.trial_dir(trial) / "attempts.jsonl"
        try:
            return sum(1 for line in f.read_text().splitlines() if line.strip())
        except OSError:
            return 0

    def record_failure(self, trial: Trial, error: str) -> dict[str, Any]:
        """For failures the trial could not record itself (its worker died, Ray lost it)."""
        res = {"status": "failed", "id": trial.id, "error": error, "run": None,
               "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
        d = self.trial_dir(trial)
        d.mkdir(parents=True, exist_ok=True)
        atomic_write_text(d / "result.json", json.dumps(res, indent=2) + "\n")
        return res

    def pending(self, retry_failed: bool = False) -> list[Trial]:
        """Trials still to run: not finished (and not failed, unless retry_failed)."""
        todo = {"pending", "failed"} if retry_failed else {"pending"}
        return [t for t in self.trials if self.status(t) in todo]
