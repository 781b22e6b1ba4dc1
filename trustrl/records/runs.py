"""The run folder: resolved config, metrics.csv, episodes.csv, atomic checkpoints, status.

    runs/<env>__<algo>__<seed>__<time>/
        config.json          the resolved config (what `--resume` reads back)
        metrics.csv          one row per iteration
        episodes.csv         one row per finished training episode
        checkpoints/latest.pt  written atomically (temp file + rename)
        agent.pt             the final agent (Agent.load)
        eval.json            the final greedy evaluation
        learning_curve.png   raw return, 5-iteration moving average, greedy evaluations
        status.json          running / finished / failed, with the last iteration (and a
                             "note" when the run has something to say, e.g. envs restarted)
        tb/                  TensorBoard events, when tensorboard is installed
        wandb/               W&B's files of the run (track = 'wandb')
        trackers.json        the tracker's run id, so that a resumed run logs to the same run
        env.sig              where config.json names code (an env class or function, a
                             'module:' env id, wrappers, a policy module): the HMAC of those
                             keys under the user's key, so that eval and resume import code
                             only from a config.json the user wrote
        .trustrl.lock        the writer's lock (trustrl.util.locks): one writer process at a time

Files are written with mode 0666 & ~umask; .pt files hold tensors and plain values only
(trustrl.util.safeio), except the checkpoint's pickled envs, which are signed with the user's key.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import hmac
import io
import json
import os
import re
import time
import weakref
from pathlib import Path
from typing import Any

from trustrl.records.tb_events import EventWriter
from trustrl.util.errors import ConfigError, RunError
from trustrl.util.importing import named_code
from trustrl.util.locks import FolderLock
from trustrl.util.safeio import (
    UntrustedFileError,
    atomic_write_bytes,
    key_path,
    load_safe,
    remove_stale_tmp,
    save_safe,
    sign_pickle,
    signing_key,
    trusted,
    verify_pickle,
)

# Columns every algorithm writes; each algorithm appends its own (Algorithm.extra_columns).
METRIC_COLUMNS = [
    "iteration", "global_step", "wall_time", "sps", "lr", "ep_return_mean", "ep_length_mean",
    "episodes", "eval_return_mean", "eval_return_std", "value_loss", "value_loss_fresh",
    "explained_variance",
    "entropy", "approx_kl", "approx_kl_k1", "kl_exact", "clip_fraction", "clip_eps",
    "ratio_min", "ratio_q05", "ratio_q25", "ratio_q50", "ratio_q75", "ratio_q95", "ratio_max",
]
TIMING_COLUMNS = ("wall_time", "sps")
EPISODE_COLUMNS = ["global_step", "iteration", "env_index", "return", "length"]


def atomic_torch_save(obj: Any, path: Path) -> None:
    """Save tensors and plain values (NumPy arrays included) atomically, in the safe format
    that loads with torch.load(weights_only=True) (trustrl.util.safeio)."""
    save_safe(obj, Path(path))


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(Path(path), text.encode())


def _safe(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", s)


class RunDir:
    """Owns the files of one run. Appends rows as they come, flushed at once; or, after
    `buffer_logs(seconds)` (the trainer's), kept in memory and appended at most every
    `seconds` and at `flush_logs()`."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.checkpoint_path = self.path / "checkpoints" / "latest.pt"
        self.metric_columns = list(METRIC_COLUMNS)
        self._tb: Any = None
        self._tracker: Any = None
        self._lock: FolderLock | None = None
        self.note: str | None = None  # kept in every status.json written from then on
        self._buffer_secs: float | None = None
        self._pending: dict[str, tuple[list[str], list[dict[str, Any]]]] = {}
        self.rows_logged = 0  # metrics.csv's rows (a checkpoint records it: check_logs)
        self.tables: dict[str, list[str]] = {}  # other per-iteration CSVs (log_table)
        self._last_flush = 0.0

    def _take_lock(self) -> None:
        """Lock the folder for this process. A seed folder inside a population folder (a
        parent with its own config.json) is covered by the population's lock instead: one
        lock for the whole population, shared by its RunDirs in the process that holds it."""
        parent = self.path.parent
        member = (parent / "config.json").is_file()
        lock = FolderLock(parent if member else self.path,
                          "population folder" if member else "run folder")
        lock.acquire()
        self._lock = lock
        weakref.finalize(self, lock.release)

    def release(self) -> None:
        """Give up the write lock (done by set_status when the run stops, fails or ends)."""
        if self._lock is not None:
            self._lock.release()

    # --- creation and opening ----------------------------------------------------------------
    @classmethod
    def create(cls, runs_dir: str | Path, env_id: str, algo: str, seed: int,
               config: dict[str, Any]) -> RunDir:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = Path(runs_dir) / f"{_safe(env_id)}__{algo}__{seed}__{stamp}"
        base.parent.mkdir(parents=True, exist_ok=True)
        path, k = base, 1
        while True:  # mkdir is the atomic claim: runs started in the same second by other
            try:     # processes get -2, -3, ... instead of sharing (or crashing on) a folder
                path.mkdir()
                break
            except FileExistsError:
                k += 1
                path = base.with_name(f"{base.name}-{k}")
        run = cls(path)
        run._take_lock()
        try:
            atomic_write_text(path / "config.json", json.dumps(config, indent=2) + "\n")
            sign_env(path, config)
            run.set_status("running", 0)
        except OSError as e:  # a full or read-only disk: one line, and no half-made run
            run.release()
            try:
                run.set_status("failed", 0, e.strerror or str(e))
            except OSError:
                import shutil

                shutil.rmtree(path, ignore_errors=True)  # made by this call, holds nothing
            raise RunError(f"cannot write the run folder {path}: {e.strerror or e}") from None
        return run

    @classmethod
    def open(cls, path: str | Path) -> RunDir:
        p = Path(path)
        if not (p / "config.json").is_file():
            raise RunError(f"{p} is not a trustrl run folder (no config.json)")
        run = cls(p)
        run._take_lock()
        for folder in (p, p / "checkpoints"):
            remove_stale_tmp(folder)
        return run

    def read_config(self) -> dict[str, Any]:
        try:
            return json.loads((self.path / "config.json").read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise RunError(f"cannot read {self.path / 'config.json'}: {e}") from None

    # --- status ------------------------------------------------------------------------------
    def set_status(self, status: str, iteration: int, message: str = "") -> None:
        d: dict[str, Any] = {"status": status, "iteration": iteration, "message": message,
                             "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
        if self.note:
            d["note"] = self.note
        atomic_write_text(self.path / "status.json", json.dumps(d) + "\n")
        if status in ("finished", "failed", "stopped"):
            self.release()

    def status(self) -> dict[str, Any]:
        try:
            return json.loads((self.path / "status.json").read_text())
        except (OSError, json.JSONDecodeError):
            return {"status": "unknown", "iteration": 0}

    # --- CSV logs ----------------------------------------------------------------------------
    def buffer_logs(self, seconds: float) -> None:
        """Keep the CSV rows in memory and append them at most every `seconds` (an append
        opens, writes and closes its file: about 0.1 ms a row, which is a few percent of a
        small compiled iteration, per member). The owner calls `flush_logs` before anything
        that reads the files or must find them complete (a checkpoint, the end of a run)."""
        self._buffer_secs = float(seconds)
        self._last_flush = time.monotonic()

    def flush_logs(self) -> None:
        """Append the rows kept by `buffer_logs`, and the TensorBoard events."""
        pending, self._pending = self._pending, {}
        for name, (columns, rows) in pending.items():
            self._write_rows(name, columns, rows)
        if self._tb is not None:
            self._tb.flush()
        self._last_flush = time.monotonic()

    def _append(self, name: str, columns: list[str], rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        text = [{k: _fmt(row.get(k)) for k in columns} for row in rows]  # as of now
        if self._buffer_secs is None:
            self._write_rows(name, columns, text)
            return
        kept = self._pending.get(name)
        if kept is None or kept[0] != columns:
            if kept is not None:
                self._write_rows(name, *kept)
            kept = self._pending[name] = (columns, [])
        kept[1].extend(text)
        if time.monotonic() - self._last_flush >= self._buffer_secs:
            self.flush_logs()

    def _write_rows(self, name: str, columns: list[str], text: list[dict[str, str]]) -> None:
        """Append rows already formatted (`_fmt`), the header first into a new file."""
        if not text:
            return
        path = self.path / name
        new = not path.exists() or path.stat().st_size == 0
        with open(path, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=columns)
            if new:
                w.writeheader()
            w.writerows(text)
            f.flush()

    def log_metrics(self, row: dict[str, Any]) -> None:
        if self._tb is not None:  # one event per iteration holding every scalar
            self._tb.add_scalars(int(row["global_step"]), [
                (_tb_name(k), float(v)) for k, v in row.items()
                if k not in ("iteration", "global_step") and isinstance(v, (int, float))
                and v == v])
            if self._buffer_secs is None:
                self._tb.flush()
        self._append("metrics.csv", self.metric_columns, [row])
        self.rows_logged += 1
        if self._tracker is not None:
            self._tracker.log(scalars(row), int(row["global_step"]))

    def log_episodes(self, rows: list[dict[str, Any]]) -> None:
        self._append("episodes.csv", EPISODE_COLUMNS, rows)

    def log_table(self, name: str, columns: list[str], rows: list[dict[str, Any]]) -> None:
        """Rows of another per-iteration CSV of the run (each with an `iteration`), written as
        metrics.csv's and cut with it on resume (truncate_logs)."""
        self.tables[name] = columns
        self._append(name, columns, rows)

    def read_metrics(self) -> list[dict[str, str]]:
        return read_csv(self.path / "metrics.csv")

    def check_logs(self, iteration: int, rows: int | None = None) -> bool:
        """Before a resume from the checkpoint of `iteration`: metrics.csv holds a row for
        every iteration of its log up to it (rows after it are dropped by truncate_logs): the
        `rows` the checkpoint counted (`rows_logged`), or, for a checkpoint without the
        count, every iteration from the file's first row on. A file cut, emptied or garbled
        is a one-line RunError, never a log silently shortened; a file the user removed is
        allowed (returns False: the log restarts after the checkpoint)."""
        path = self.path / "metrics.csv"
        if not path.exists():
            return False
        done = {_iteration(r) for r in _read_rows(path)}
        done.discard(-1)
        start = iteration - rows + 1 if rows is not None else min(done, default=1)
        missing = [i for i in range(max(1, start), iteration + 1) if i not in done]
        self.rows_logged = iteration - max(1, start) + 1
        if missing:
            raise RunError(
                f"{path} lacks {len(missing)} of the {iteration} rows before the checkpoint "
                f"(first missing: iteration {missing[0]}): the file was cut or edited; "
                f"restore it, or move it away to resume with a log that starts at iteration "
                f"{iteration + 1}")
        return True

    def truncate_logs(self, iteration: int) -> None:
        """Drop rows after `iteration` (written after the checkpoint we resume from), and any
        half-written last line of a killed process."""
        self.flush_logs()
        for name, columns in (("metrics.csv", self.metric_columns),
                              ("episodes.csv", EPISODE_COLUMNS), *self.tables.items()):
            path = self.path / name
            if not path.exists():
                continue
            keep = [r for r in _read_rows(path)
                    if _complete(r, columns) and _iteration(r) <= iteration]
            buf = io.StringIO()
            w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\r\n")
            w.writeheader()
            w.writerows(keep)
            atomic_write_text(path, buf.getvalue())

    # --- checkpoints -------------------------------------------------------------------------
    def save_checkpoint(self, state: dict[str, Any]) -> None:
        """Atomically, in the safe format; the pickled envs (state["envs"], bytes) signed."""
        if isinstance(state.get("envs"), bytes):
            state = {**state, "envs": sign_pickle(state["envs"])}
        atomic_torch_save(state, self.checkpoint_path)

    def load_checkpoint(self) -> dict[str, Any]:
        """The checkpoint, read without unpickling; its envs pickle (bytes) only when its
        signature is this user's (or TRUSTRL_TRUST_FILES=1). One-line RunError otherwise."""
        if not self.checkpoint_path.is_file():
            raise RunError(f"{self.path} has no checkpoint to resume from")
        opt_in = f"resume with `trustrl train --resume {self.path} --trust-checkpoint`"
        ck = load_safe(self.checkpoint_path, "checkpoint", opt_in)
        if not isinstance(ck, dict):
            raise RunError(f"{self.checkpoint_path} is not a trustrl checkpoint")
        if ck.get("envs") is not None:
            ck["envs"] = verify_pickle(ck["envs"], self.checkpoint_path, opt_in)
        return ck

    # --- tensorboard -------------------------------------------------------------------------
    def open_tensorboard(self, purge_step: int | None = None) -> bool:
        """Write TensorBoard events under tb/ (False where tensorboard is not installed). A
        resumed run passes purge_step, its checkpoint's global step: TensorBoard then drops
        the events at and after it that the killed process had written."""
        try:
            from tensorboard.compat.proto import event_pb2  # noqa: F401
        except Exception:  # noqa: BLE001 - tensorboard not installed (or not importable)
            return False
        if self._tb is not None:  # one writer at a time: a second open starts a new file
            self._tb.close()
        self._tb = EventWriter(self.path / "tb", purge_step)
        return True

    # --- experiment trackers (W&B, MLflow) ----------------------------------------------------
    def open_tracker(self, kind: str, config: dict[str, Any]) -> None:
        """Log every metrics row's scalars (TensorBoard's names) and the config to W&B or
        MLflow; a resumed run continues the tracker's run recorded in trackers.json."""
        ids_path = self.path / "trackers.json"
        try:
            ids = json.loads(ids_path.read_text()) if ids_path.is_file() else {}
        except (OSError, ValueError):
            ids = {}
        ids = ids if isinstance(ids, dict) else {}
        try:
            tracker = (_WandbTracker if kind == "wandb" else _MlflowTracker)(
                self.path, config, ids.get(kind))
        except Exception as e:  # noqa: BLE001 - the tracker's own errors, as one line
            msg = (str(e).splitlines() or [""])[0][:200] or type(e).__name__
            raise RunError(f"track {kind!r} could not start: {type(e).__name__}: {msg}"
                           ) from None
        if ids.get(kind) != tracker.run_id:
            atomic_write_text(ids_path, json.dumps({**ids, kind: tracker.run_id}) + "\n")
        self._tracker = tracker

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._tracker is not None:
            self._tracker.close(self.status().get("status", "finished"))
            self._tracker = None


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _complete(row: dict[str, Any], columns: list[str]) -> bool:
    """A row with every column, and an iteration number (a half-written last line has not)."""
    return all(k in row and row[k] is not None for k in columns) and _iteration(row) >= 0


def _iteration(row: dict[str, Any]) -> int:
    """A row's iteration number, or -1 where it has none (a half-written or garbled line)."""
    try:
        it = float(row.get("iteration") or "nan")
    except (TypeError, ValueError):
        return -1
    return int(it) if it == it and abs(it) < 2**53 and it == int(it) else -1


def _read_rows(path: Path) -> list[dict[str, str]]:
    """read_csv of a run's own log, with a file that is not one (binary, not UTF-8, a NUL) as
    a one-line RunError."""
    try:
        return read_csv(path)
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        msg = (str(e).splitlines() or [""])[0][:100]
        raise RunError(f"cannot read {path}: {type(e).__name__}: {msg}") from None


@functools.lru_cache(maxsize=1024)
def _tb_name(key: str) -> str:
    """CleanRL-style namespaces: charts/ (returns, speed, lr), losses/, diagnostics/."""
    if key.startswith(("ep_", "eval_")) or key in ("episodes", "sps", "lr", "wall_time"):
        return f"charts/{key}"
    if key in ("policy_loss", "value_loss", "value_loss_fresh", "kl_penalty"):
        return f"losses/{key}"
    return f"diagnostics/{key}"


# ----- config.json naming code: built only from the user's own runs --------------------------
ENV_SIGNATURE = "env.sig"
_ENV_DOMAIN = b"trustrl env recipe v1\0"
_CODE_DOMAIN = b"trustrl code recipe v2\0"
_RECIPE_KEYS = ("env_id", "env_kwargs", "wrappers", "policy")


def env_code(config: dict[str, Any]) -> list[str]:
    """The names of code a config holds: every import path or 'module:' env id
    (trustrl.util.importing.named_code), wherever the config holds it."""
    return named_code(config)


def _recipe(config: dict[str, Any]) -> dict[str, Any]:
    """The keys that decide which code runs and with what: env_id, env_kwargs, wrappers,
    policy, and any other key whose value names code."""
    return {k: v for k, v in config.items() if k in _RECIPE_KEYS or named_code({k: v})}


def code_mac(key: bytes, data: Any) -> str:
    """HMAC of plain data (canonical JSON) under the user's key."""
    text = json.dumps(data, sort_keys=True, default=str).encode()
    return hmac.new(key, _CODE_DOMAIN + text, hashlib.sha256).hexdigest()


def _env_mac(key: bytes, config: dict[str, Any]) -> str:
    """The first signature (env.sig's "hmac"): env_id, env_kwargs and wrappers only."""
    recipe = {k: config.get(k) for k in ("env_id", "env_kwargs", "wrappers")}
    data = json.dumps(recipe, sort_keys=True).encode()
    return hmac.new(key, _ENV_DOMAIN + data, hashlib.sha256).hexdigest()


def sign_env(folder: Path, config: dict[str, Any]) -> None:
    """env.sig beside a config.json that names code (nothing otherwise): the HMAC of its
    recipe (`_recipe`) under the user's key."""
    key = signing_key(create=True) if env_code(config) else None
    if key is not None:
        atomic_write_text(Path(folder) / ENV_SIGNATURE,
                          json.dumps({"code": code_mac(key, _recipe(config))}) + "\n")


def signed_by_user(sig: Any, key: bytes | None, config: dict[str, Any]) -> bool:
    """Whether env.sig's contents sign this config's recipe under `key` (an env.sig of the
    first kind, env_id/env_kwargs/wrappers only, counts where nothing else names code)."""
    if key is None or not isinstance(sig, dict):
        return False
    mac, old = sig.get("code"), sig.get("hmac")
    if isinstance(mac, str):
        return hmac.compare_digest(mac, code_mac(key, _recipe(config)))
    rest = {k: v for k, v in config.items() if k not in ("env_id", "env_kwargs", "wrappers")}
    return isinstance(old, str) and not named_code(rest) and hmac.compare_digest(
        old, _env_mac(key, config))


def check_env_code(folder: Path | None, config: dict[str, Any], opt_in: str) -> None:
    """A config.json read from disk is used (its env built, its network made) only when it
    names no code, or its env.sig is this user's, or the user opted in
    (TRUSTRL_TRUST_FILES=1): a run folder from someone else is data, and nothing it names is
    imported. UntrustedFileError in one line otherwise, before any import."""
    names = env_code(config)
    if not names or trusted():
        return
    sig = None
    if folder is not None:
        try:
            sig = json.loads((Path(folder) / ENV_SIGNATURE).read_text())
        except (OSError, ValueError, RecursionError):
            sig = None
    if signed_by_user(sig, signing_key(create=False), config):
        return
    where = f"{folder}/config.json" if folder is not None else "the agent file"
    listed = ", ".join(names)
    raise UntrustedFileError(
        f"{where} names code ({listed[:120]}) and is not signed with your key "
        f"({key_path()}): a run from another user or machine, or edited; importing that code "
        f"can run anything; if you trust it, {opt_in}")


def scalars(row: dict[str, Any]) -> dict[str, float]:
    """A metrics row's finite numbers by their TensorBoard names (what every logger gets)."""
    return {_tb_name(k): float(v) for k, v in row.items()
            if k not in ("iteration", "global_step") and isinstance(v, (int, float))
            and not isinstance(v, bool) and v == v}


TRACKER_EXTRAS = {"wandb": ("wandb", "wandb"), "mlflow": ("mlflow", "mlflow")}
"""track value -> (the module it imports, trustrl's extra that installs it)."""


def check_tracker(kind: str, members: int = 1) -> None:
    """ConfigError in one line, before any run folder, when the tracker's package is missing
    or the run is a population (trackers follow one-seed runs, as TensorBoard does)."""
    if kind == "none":
        return
    import importlib.util

    module, extra = TRACKER_EXTRAS[kind]
    if importlib.util.find_spec(module) is None:
        raise ConfigError(f"track {kind!r} needs the {module} package, which is not installed: "
                          f'pip install "trustrl[{extra}]"')
    if members > 1:
        raise ConfigError(f"track {kind!r} follows one-seed runs: drop --seeds (or use a sweep)")
    if kind == "mlflow":
        import os

        uri = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
        database = not uri or uri.split(":")[0].split("+")[0] in (
            "sqlite", "postgresql", "mysql", "mssql")
        if database and importlib.util.find_spec("sqlalchemy") is None:
            raise ConfigError(
                f"track 'mlflow': the tracking store {uri or 'sqlite:///mlflow.db (default)'} "
                "needs the full mlflow package (pip install mlflow); with trustrl[mlflow] "
                "(mlflow-skinny) set MLFLOW_TRACKING_URI to a server (http://...) or a local "
                "file store (file:./mlruns, with MLFLOW_ALLOW_FILE_STORE=true)")


class _WandbTracker:
    """W&B: one run per run folder (id in trackers.json), files under the folder's wandb/;
    WANDB_MODE=offline works without an account; WANDB_PROJECT (default trustrl)."""

    def __init__(self, path: Path, config: dict[str, Any], run_id: str | None):

        import wandb

        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "trustrl"),
                              name=path.name, dir=str(path), config=config,
                              id=run_id, resume="allow",
                              reinit="create_new")
        self.run.define_metric("global_step")
        self.run.define_metric("*", step_metric="global_step")
        self.run_id = self.run.id

    def log(self, values: dict[str, float], step: int) -> None:
        self.run.log({**values, "global_step": step})

    def close(self, status: str) -> None:
        self.run.finish(exit_code=0 if status in ("finished", "stopped", "running") else 1)


class _MlflowTracker:
    """MLflow: one run per run folder (id in trackers.json) in the experiment
    MLFLOW_EXPERIMENT_NAME (default trustrl), at MLFLOW_TRACKING_URI (MLflow's default
    otherwise); the config as parameters and as config.json."""

    def __init__(self, path: Path, config: dict[str, Any], run_id: str | None):

        from mlflow.tracking import MlflowClient

        self.client = MlflowClient()
        if run_id is None:
            name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "trustrl")
            exp = self.client.get_experiment_by_name(name)
            exp_id = exp.experiment_id if exp is not None else self.client.create_experiment(name)
            run_id = self.client.create_run(exp_id, run_name=path.name).info.run_id
            for k, v in config.items():
                self.client.log_param(run_id, k, json.dumps(v)[:500])
            self.client.log_dict(run_id, config, "config.json")
        else:
            self.client.update_run(run_id, status="RUNNING")
        self.run_id = run_id

    def log(self, values: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step)
                                                    for k, v in values.items()])

    def close(self, status: str) -> None:
        self.client.set_terminated(self.run_id, "FAILED" if status == "failed" else
                                   "KILLED" if status == "stopped" else "FINISHED")


def read_csv(path: Path) -> list[dict[str, str]]:
    if not Path(path).exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))
