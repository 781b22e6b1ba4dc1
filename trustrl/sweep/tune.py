"""`trustrl tune SPEC`: an Optuna study over a sweep folder (TPE, pruning, resumable).

The study is a sweep whose trials are asked of Optuna one at a time: the driver asks the study
for a trial, resolves its config (tune_spec), appends it to the folder's sweep.json and hands it
to the sweep's backends (local process pool or Ray), which run it with the sweep's
execute_trial in trials/<id>/. Each periodic evaluation is reported to the study as it happens;
a trial the pruner stops ends as "stopped" and is told PRUNED; a finished one is told its
objective; the best finished trial's config is rewritten to best.yaml.

    DIR/
        spec.yaml       the SPEC as the user wrote it
        tune.json       the validated SPEC, fixed at the start: --resume reads this
        study.db        the Optuna study (RDB storage, SQLite): trials, values, reports
        env.sig         where the env names code (runs.sign_env, as beside a config.json)
        sweep.json      every trial started so far with its config (`trustrl report DIR`)
        trials/<id>/    one trial, as in a sweep (run folder, attempts.jsonl, result.json)
        best.yaml       the best finished trial: `trustrl train ALGO --config best.yaml`

Where a trial reports. Locally, every worker opens study.db itself (SQLite on one machine).
On Ray, the study stays in the driver's study.db: a Ray actor pinned to the driver's node holds
it, and the trials on any node report through that actor (the files of a trial travel as in a
sweep). Optuna's own distributed mode (several `optimize` loops on one database server) would
need a database server reachable from every node; Ray Tune's Optuna search would bring a
second trial runner with its own folders and resume, beside the sweep's.

Resume. A driver that stops (Ctrl-C, SIGTERM, killed) leaves its running trials RUNNING in the
study; `--resume DIR` continues each from its checkpoint (as a sweep does), tells the ones that
had ended, and asks new trials until the study holds `trials` in all.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trustrl.records.runs import atomic_write_text
from trustrl.sweep.folder import SWEEP_FORMAT, SweepFolder
from trustrl.sweep.spec import SpecError, Trial, check_sweep_file
from trustrl.sweep.tune_spec import TuneSpec, load_tune_spec, parse_tune_spec
from trustrl.util.errors import TrustrlError

TUNE_FORMAT = 1
STUDY_DB = "study.db"
BEST_FILE = "best.yaml"
SQLITE_TIMEOUT_S = 60  # a worker waits this long for another's write to study.db


def require_optuna() -> Any:
    try:
        import optuna
    except ModuleNotFoundError:
        raise TrustrlError("trustrl tune needs Optuna: pip install 'trustrl[tune]'") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def trial_name(number: int) -> str:
    """The trial's id and folder under trials/: its Optuna number."""
    return f"trial{number:04d}"


def trial_number(name: str) -> int:
    return int(name[len("trial"):])


# ----- Optuna pieces from the SPEC's plain data -------------------------------------------------
def storage(folder: Path) -> Any:
    """The study's RDB storage: DIR/study.db (SQLite), waiting on a busy database."""
    optuna = require_optuna()
    url = f"sqlite:///{Path(folder).resolve() / STUDY_DB}"
    return optuna.storages.RDBStorage(
        url, engine_kwargs={"connect_args": {"timeout": SQLITE_TIMEOUT_S}})


def make_sampler(settings: dict[str, Any], offset: int) -> Any:
    """TPE or random; the seed is shifted by the trials the study already holds, so that a
    resumed study does not draw its first trials' values again."""
    optuna = require_optuna()
    (name, kw), = settings.items()
    seed = None if kw.get("seed") is None else int(kw["seed"]) + offset
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=kw.get("startup_trials", 10),
                                      multivariate=kw.get("multivariate", False))


def make_pruner(settings: dict[str, Any]) -> Any:
    """A step of the pruner is one periodic evaluation of the run (1, 2, ...)."""
    optuna = require_optuna()
    (name, kw), = settings.items()
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=kw.get("startup_trials", 5),
                                           n_warmup_steps=kw.get("warmup_evals", 0))
    if name == "halving":
        return optuna.pruners.SuccessiveHalvingPruner(
            min_resource=kw.get("min_evals", 1), reduction_factor=kw.get("reduction_factor", 3))
    return optuna.pruners.NopPruner()


def load_study(folder: Path, spec: TuneSpec, offset: int = 0) -> Any:
    """The study of DIR/study.db named as tune.json says; SpecError in one line where the
    file is not such a database or holds no such study."""
    optuna = require_optuna()
    try:
        return optuna.load_study(study_name=spec.name, storage=storage(folder),
                                 sampler=make_sampler(spec.sampler, offset),
                                 pruner=make_pruner(spec.pruner))
    except KeyError:
        raise SpecError(f"{Path(folder) / STUDY_DB} holds no study {spec.name!r}") from None
    except Exception as e:  # noqa: BLE001 - SQLAlchemy's errors: not a database, locked, ...
        first = (str(e).splitlines() or [type(e).__name__])[0][:160]
        raise SpecError(f"cannot open the study in {Path(folder) / STUDY_DB}: {first}"
                        ) from None


# ----- reporting evaluations from a trial (runs in the worker) --------------------------------
class StudyReporter:
    """The study as the trials see it: report(number, step, value) -> prune or not. Locally
    each worker holds one; on Ray it is the actor pinned to the driver's node."""

    def __init__(self, folder: str, spec: dict[str, Any]) -> None:
        self.spec = parse_tune_spec(spec, check_envs=False)
        self.study = load_study(Path(folder), self.spec)

    def report(self, number: int, step: int, value: float) -> bool:
        """Report trial `number`'s evaluation `step`; whether the pruner stops it."""
        import optuna

        trial_id = self.study._storage.get_trial_id_from_study_id_trial_number(
            self.study._study_id, number)
        trial = optuna.Trial(self.study, trial_id)
        with warnings.catch_warnings():  # a resumed run reports its last steps again
            warnings.simplefilter("ignore")
            trial.report(value, step)
        return bool(trial.should_prune())

    def ready(self) -> bool:
        return True


@dataclass(frozen=True)
class PruningCallbacks:
    """The sweep's CallbackFactory for a study (picklable: plain data only): each trial's
    callback reports its evaluations, as step k for the k-th, and stops it when pruned."""

    folder: str
    spec: dict[str, Any]
    actor: str | None = None  # the Ray actor's name; None: open study.db here

    def __call__(self, trial: dict[str, Any]) -> Callable[[dict[str, Any]], Any]:
        from trustrl.settings.config import config_from_dict

        cfg = config_from_dict(dict(trial["config"], runs_dir="trial"))
        eval_every, last = cfg.eval_every or 1, cfg.num_iterations
        number = trial_number(trial["id"])
        reporter: Any = None

        def report(step: int, value: float) -> bool:
            nonlocal reporter
            if self.actor is not None:
                import ray

                if reporter is None:
                    reporter = ray.get_actor(self.actor)
                return bool(ray.get(reporter.report.remote(number, step, value)))
            if reporter is None:
                reporter = StudyReporter(self.folder, self.spec)
            return reporter.report(number, step, value)

        def callback(row: dict[str, Any]) -> bool | None:
            value = row.get("eval_return_mean")
            if value is None or not math.isfinite(value):
                return None
            it = int(row["iteration"])
            step = -(-it // eval_every)  # the k-th evaluation, on resume too
            prune = report(step, float(value))
            return False if prune and it < last else None  # the last one: the trial is done

        return callback


# ----- the study folder ---------------------------------------------------------------------
def _sweep_meta(spec: TuneSpec) -> dict[str, Any]:
    return {"format": SWEEP_FORMAT, "name": spec.name,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "resources": spec.resources, "thresholds": {}, "trials": []}


def check_study_folder(path: Path) -> TuneSpec:
    """A study folder's tune.json read and validated again (a folder from elsewhere is data):
    its SPEC as a SPEC, its env's code only under the run folders' rule (env.sig), and its
    sweep.json, where there is one, through the sweep's own check."""
    from trustrl.records.runs import check_env_code

    f = Path(path) / "tune.json"
    if not Path(path).is_dir():
        raise SpecError(f"{path} is not a study folder (no such folder)")
    if not f.is_file():
        raise SpecError(f"{path} is not a study folder (no tune.json)")
    try:
        if f.stat().st_size > 1_000_000:
            raise SpecError(f"{f} is larger than 1,000,000 bytes")
        meta = json.loads(f.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise SpecError(f"cannot read {f}: {(str(e).splitlines() or [''])[0][:120]}") from None
    if not isinstance(meta, dict) or meta.get("format") != TUNE_FORMAT or not isinstance(
            meta.get("spec"), dict):
        raise SpecError(f"{f}: not a tune.json this trustrl understands")
    spec = parse_tune_spec(meta["spec"], check_envs=False)
    check_env_code(Path(path), spec.config({}), "rerun with TRUSTRL_TRUST_FILES=1")
    if not (Path(path) / STUDY_DB).is_file():
        raise SpecError(f"{path} is not a study folder (no {STUDY_DB})")
    if (Path(path) / "sweep.json").is_file():
        meta = check_sweep_file(Path(path))
        if meta.get("name") != spec.name:
            raise SpecError(f"{path}/sweep.json is another study's ({_s(meta.get('name'))})")
    return spec


def _s(v: Any) -> str:
    from trustrl.settings.config import _short

    return _short(v)


def create(spec_path: str | Path, out: str | Path | None, trials: int | None = None) -> Path:
    """Validate the SPEC (every key, each distribution's ends, the env), create the study
    folder and the study. Nothing runs. trials: the study's size instead of the SPEC's."""
    from trustrl.records.runs import sign_env
    from trustrl.sweep.folder import new_folder

    optuna = require_optuna()
    spec = load_tune_spec(spec_path)
    if trials is not None:
        spec.trials = trials
    p = Path(out) if out else Path("studies") / spec.name
    lock = new_folder(p, "tune")
    try:
        atomic_write_text(p / "spec.yaml", Path(spec_path).read_text())
        sign_env(p, spec.config({}))  # env.sig where the env names code
        study = optuna.create_study(study_name=spec.name, storage=storage(p),
                                    direction=spec.direction)
        for point in spec.first:
            study.enqueue_trial(point)
        atomic_write_text(p / "tune.json", json.dumps(
            {"format": TUNE_FORMAT, "spec": spec.as_dict()}, indent=1) + "\n")
    finally:
        lock.release()
    return p


def set_trials(path: Path, trials: int) -> None:
    """A study's size changed (`--resume DIR --trials N`): rewritten in tune.json."""
    from trustrl.util.locks import FolderLock

    lock = FolderLock(path, "study folder")
    lock.acquire()  # not while a driver runs the study
    try:
        spec = check_study_folder(path)
        spec.trials = trials
        atomic_write_text(Path(path) / "tune.json", json.dumps(
            {"format": TUNE_FORMAT, "spec": spec.as_dict()}, indent=1) + "\n")
    finally:
        lock.release()


# ----- the driver ---------------------------------------------------------------------------
@dataclass
class TuneOutcome:
    folder: Path
    ran: int
    complete: int
    pruned: int
    failed: int
    best: dict[str, Any] | None
    wall_s: float


def objective(spec: TuneSpec, folder: SweepFolder, trial: Trial,
              res: dict[str, Any]) -> float:
    """The value a finished trial is told: its final evaluation's mean return, or the mean
    over the run's periodic evaluations (sweep.report.eval_curve; step 0 left out)."""
    if spec.objective == "final":
        return float(res["final_eval"]["mean"])
    from trustrl.sweep.report import eval_curve

    steps, returns = eval_curve(folder.trial_dir(trial) / str(res["run"]))
    values = [r for s, r in zip(steps, returns, strict=True) if s > 0]
    return float(sum(values) / len(values)) if values else float(res["final_eval"]["mean"])


def run(path: str | Path, backend: str = "local", workers: int | None = None,
        address: str | None = None, echo: Callable[[str], None] | None = None) -> TuneOutcome:
    """Run the study in `path` until it holds its `trials` (those already there count);
    holds the folder's lock meanwhile."""
    from trustrl.sweep.local import default_workers
    from trustrl.sweep.runner import BACKENDS

    if backend not in BACKENDS:
        raise SpecError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    p = Path(path)
    spec = check_study_folder(p)
    optuna = require_optuna()
    if (p / "sweep.json").is_file():
        folder = SweepFolder.open(p)
    else:
        folder = SweepFolder(p, _sweep_meta(spec))
    folder._lock.what = "study folder"  # type: ignore[attr-defined]
    folder.lock()
    try:
        study = load_study(p, spec, offset=len(folder.trials))
        return _Driver(spec, folder, study, optuna, echo or (lambda s: None)).run(
            backend, workers or default_workers(), address)
    finally:
        folder.unlock()


class _Driver:
    """Asks the study for trials, runs them on a sweep backend, tells it their ends."""

    def __init__(self, spec: TuneSpec, folder: SweepFolder, study: Any, optuna: Any,
                 echo: Callable[[str], None]) -> None:
        self.spec, self.folder, self.study, self.optuna, self.echo = (
            spec, folder, study, optuna, echo)
        self.state = optuna.trial.TrialState
        self.counts = {"complete": 0, "pruned": 0, "failed": 0}
        self.dists = {k: d.optuna() for k, d in spec.space.items()}

    # --- asking -------------------------------------------------------------------------------
    def ask(self) -> Trial | None:
        """A new trial, appended to sweep.json; None when the study holds its trials."""
        while self.asked() < self.spec.trials:
            ot = self.study.ask(self.dists)
            try:
                config = self.spec.config(ot.params)
            except TrustrlError as e:  # a combination trustrl refuses: that trial fails
                self.study.tell(ot, state=self.state.FAIL)
                self.echo(f"trial {ot.number}: its values are refused: {e}")
                self.counts["failed"] += 1
                continue
            t = Trial(trial_name(ot.number), self.spec.algo, self.spec.env_id, self.spec.seed,
                      f"{self.spec.algo}#{ot.number}", dict(ot.params), config)
            self.folder.add_trials([t])
            return t
        return None

    def asked(self) -> int:
        """Trials asked so far (the points of `first` not yet asked wait, uncounted)."""
        s = self.state
        return len(self.study.get_trials(deepcopy=False, states=(
            s.RUNNING, s.COMPLETE, s.PRUNED, s.FAIL)))

    def ended(self) -> int:
        s = self.state
        return len(self.study.get_trials(deepcopy=False, states=(s.COMPLETE, s.PRUNED, s.FAIL)))

    def recover(self) -> list[Trial]:
        """Trials a stopped driver left RUNNING: told from their result.json where they had
        ended, else run again (from their checkpoints); asked but never recorded: FAIL."""
        known = {t.id: t for t in self.folder.trials}
        redo = []
        for ft in self.study.get_trials(deepcopy=False, states=(self.state.RUNNING,)):
            t = known.get(trial_name(ft.number))
            res = None if t is None else self.folder.result(t)
            if t is None:
                self.study.tell(ft.number, state=self.state.FAIL)
            elif res is not None:
                self.tell(t, res)
            else:
                redo.append(t)
        return redo

    # --- telling ------------------------------------------------------------------------------
    def tell(self, t: Trial, res: dict[str, Any]) -> str:
        number = trial_number(t.id)
        status = res.get("status")
        if status == "finished":
            value = objective(self.spec, self.folder, t, res)
            self.study.tell(number, value, skip_if_finished=True)
            self.counts["complete"] += 1
            self.write_best()
            return f"{self.spec.objective} {value:.1f}"
        if status == "stopped":
            self.study.tell(number, state=self.state.PRUNED, skip_if_finished=True)
            self.counts["pruned"] += 1
            return "pruned"
        self.study.tell(number, state=self.state.FAIL, skip_if_finished=True)
        self.counts["failed"] += 1
        return f"FAILED: {res.get('error', '?')}"

    def write_best(self) -> None:
        """best.yaml: the best finished trial as a `trustrl train --config` file."""
        import yaml

        try:
            best = self.study.best_trial
        except ValueError:  # no finished trial yet
            return
        keys = self.spec.best_file(best.params)
        head = (f"# trustrl tune {self.spec.name}: trial {best.number}, {self.spec.objective} "
                f"{best.value:.4g} ({self.spec.direction})\n"
                f"# trustrl train {self.spec.algo} --config {BEST_FILE}\n")
        atomic_write_text(self.folder.path / BEST_FILE,
                          head + yaml.safe_dump(keys, sort_keys=False))

    # --- the loop -----------------------------------------------------------------------------
    def run(self, backend: str, workers: int, address: str | None) -> TuneOutcome:
        t0 = time.perf_counter()
        first = self.recover()
        self.echo(f"study {self.spec.name}: {self.ended()} of {self.spec.trials} trials ended "
                  f"({len(first)} to continue) on the {backend} backend -> {self.folder.path}")
        while len(first) < workers:
            t = self.ask()
            if t is None:
                break
            first.append(t)
        ran = len(first)

        def on_result(t: Trial, res: dict[str, Any]) -> list[Trial]:
            nonlocal ran
            what = self.tell(t, res)
            self.echo(f"[{self.ended()}/{self.spec.trials}] {t.id} {_params(t.grid)}: {what} "
                      f"({res.get('wall_s', float('nan')):.0f} s)")
            new = self.ask()
            ran += new is not None
            return [new] if new is not None else []

        spec_dict = self.spec.as_dict()
        if first and backend == "local":
            from trustrl.sweep.local import run_local

            run_local(self.folder, first, workers, on_result,
                      make_callback=PruningCallbacks(str(self.folder.path.resolve()), spec_dict))
        elif first:
            from trustrl.sweep.ray_backend import run_ray

            actor = f"trustrl-tune-{self.spec.name}-{time.time_ns()}"
            handles: list[Any] = []  # the actor lives while the driver holds its handle
            run_ray(self.folder, first, on_result, address=address, workers=workers,
                    make_callback=PruningCallbacks(str(self.folder.path), spec_dict, actor),
                    on_start=lambda ray: handles.append(
                        _start_actor(ray, actor, self.folder.path, spec_dict)))
        best = None
        try:
            b = self.study.best_trial
            best = {"number": b.number, "value": b.value, "params": b.params}
        except ValueError:
            pass
        return TuneOutcome(self.folder.path, ran, self.counts["complete"],
                           self.counts["pruned"], self.counts["failed"], best,
                           time.perf_counter() - t0)


def _start_actor(ray: Any, name: str, folder: Path, spec: dict[str, Any]) -> Any:
    """The study's reporter as a Ray actor on this (the driver's) node, where study.db is."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    node = ray.get_runtime_context().get_node_id()
    actor = ray.remote(num_cpus=0)(StudyReporter).options(
        name=name, lifetime=None,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
    ).remote(str(Path(folder).resolve()), spec)
    ray.get(actor.ready.remote())
    return actor


def _params(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in params.items())
