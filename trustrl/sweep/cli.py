"""`trustrl sweep` and `trustrl report`. Standard library only at module level."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

MAX_WORKERS = 1024
"""--workers: local processes (or Ray CPUs) of one sweep."""
MAX_BOOT = 1_000_000
"""--boot: bootstrap resamples of `trustrl report` (held in memory per statistic)."""


def _until_interrupted(run: Callable[[], T], kept: str) -> T | int:
    """run(), where Ctrl-C and SIGTERM end in one line (`kept`: what is kept and how to go on)
    and the exit status 130 or 143 instead of the result."""
    from trustrl.util.children import terminate_like_ctrl_c

    previous = terminate_like_ctrl_c()  # the running trials stop with their checkpoints
    try:
        return run()
    except KeyboardInterrupt as e:
        from trustrl.training.train import Terminated

        what = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
        print(f"trustrl: {what}; {kept}", file=sys.stderr)
        return 143 if isinstance(e, Terminated) else 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)  # type: ignore[arg-type]


def _backend_options(p: argparse.ArgumentParser, ray_note: str = "") -> None:
    p.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="local process pool (default) or Ray")
    p.add_argument("--address", help="Ray cluster address (default: RAY_ADDRESS, else a new "
                   f"local Ray instance{ray_note})")
    p.add_argument("--workers", type=int,
                   help="trials at once; local: processes (default: the cores); ray, local "
                   "instance: CPUs")


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    s = subparsers.add_parser(
        "sweep", help="run algorithms x envs x seeds x settings from a SPEC file",
        description="Run every trial of a sweep SPEC (YAML) in its own run folder under the "
        "sweep folder; interrupted sweeps continue with --resume DIR. The SPEC is checked "
        "(algorithms, config keys, env ids, grids) before anything runs.")
    s.add_argument("spec", nargs="?", help="SPEC.yaml (omit with --resume)")
    s.add_argument("--resume", metavar="DIR",
                   help="continue a sweep folder: finished trials are kept, unfinished ones "
                   "rerun (from their checkpoint when they have one)")
    s.add_argument("--retry-failed", action="store_true",
                   help="with --resume: also rerun trials recorded as failed")
    _backend_options(s)
    s.add_argument("--trust-files", action="store_true",
                   help="with --resume: run a sweep folder not signed with your key (from "
                   "someone else) although its trials name code to import; only for folders "
                   "you trust")
    s.add_argument("--out", help="sweep folder (default sweeps/<spec name>)")
    s.add_argument("--dry-run", action="store_true",
                   help="check the SPEC and list its trials; run nothing")
    s.set_defaults(func=cmd_sweep)

    tu = subparsers.add_parser(
        "tune", help="tune a config's keys with Optuna (TPE, pruning, resumable) from a SPEC",
        description="Run an Optuna study over the config keys a tune SPEC (YAML) names: TPE "
        "sampling, the pruner on each run's periodic evaluations, every trial a run folder "
        "under the study folder, the study in DIR/study.db (interrupted studies continue with "
        "--resume DIR), the best trial written to DIR/best.yaml for `trustrl train --config`. "
        "Needs Optuna: pip install 'trustrl[tune]'. See docs/tune.md.")
    tu.add_argument("spec", nargs="?", help="SPEC.yaml (omit with --resume)")
    tu.add_argument("--resume", metavar="DIR",
                    help="continue a study folder: its running trials from their checkpoints, "
                    "then new trials until it holds its trials")
    tu.add_argument("--trials", type=int,
                    help="the study's size in trials, in all (default: the SPEC's); with "
                    "--resume, raises it to run more")
    _backend_options(tu, "; run the driver on a node of the cluster")
    tu.add_argument("--out", help="study folder (default studies/<spec name>)")
    tu.add_argument("--dry-run", action="store_true",
                    help="check the SPEC and print its search space; run nothing")
    tu.set_defaults(func=cmd_tune)

    r = subparsers.add_parser(
        "report", help="learning curves with confidence bands and tables for a sweep folder",
        description="Read a sweep folder and write REPORT.md and one PNG per env: greedy "
        "learning curves (mean or IQM over seeds, 95%% bootstrap band), the final-performance "
        "table (mean ± std, median, IQM with 95%% CIs), steps to threshold and diagnostics.")
    r.add_argument("dir", help="sweep folder")
    r.add_argument("--out", help="output folder (default DIR/report)")
    r.add_argument("--stat", choices=("mean", "iqm"), default="mean",
                   help="curve statistic across seeds (default mean)")
    r.add_argument("--threshold", action="append", default=[], metavar="ENV=VALUE",
                   help="steps-to-threshold level for an env (overrides the SPEC's)")
    r.add_argument("--boot", type=int, default=5000, help="bootstrap resamples (default 5000)")
    r.set_defaults(func=cmd_report)


def _check_options(args: argparse.Namespace, what: str) -> None:
    """The options `sweep` and `tune` share: SPEC or --resume DIR, the backend's, --out."""
    from trustrl.util.errors import TrustrlError

    if args.resume and args.spec:
        raise TrustrlError("give either SPEC or --resume DIR, not both")
    if not args.resume and not args.spec:
        raise TrustrlError(f"give a SPEC file, or --resume DIR to continue a {what}")
    if args.address and args.backend != "ray":
        raise TrustrlError("--address is for --backend ray")
    if args.workers is not None and not 1 <= args.workers <= MAX_WORKERS:
        raise TrustrlError(f"--workers must be in [1, {MAX_WORKERS}], got {args.workers}")
    if args.out is not None:
        from trustrl.settings.config import check_writable_dir

        if args.resume:
            raise TrustrlError("--out goes with a SPEC; --resume DIR continues in DIR")
        check_writable_dir(args.out, "--out")


def cmd_sweep(args: argparse.Namespace) -> int:
    from trustrl.sweep import runner
    from trustrl.sweep.folder import SweepFolder
    from trustrl.sweep.spec import check_sweep_file, load_spec
    from trustrl.util.errors import TrustrlError

    _check_options(args, "sweep")
    if args.retry_failed and not args.resume:
        raise TrustrlError("--retry-failed goes with --resume DIR")
    if args.trust_files:
        if not args.resume:
            raise TrustrlError("--trust-files goes with --resume DIR")
        from trustrl.util.safeio import trust_files

        trust_files()
    if args.resume is not None:
        check_sweep_file(Path(args.resume))  # sweep.json in shape before the folder is used
    if args.dry_run:
        spec = load_spec(args.spec) if args.spec else None
        trials = spec.trials if spec else SweepFolder.open(args.resume).trials
        for t in trials:
            print(f"{t.id}  total_steps={t.config['total_steps']}")
        print(f"{len(trials)} trials")
        return 0
    if args.backend == "ray":
        from trustrl.sweep.ray_backend import require_ray

        require_ray()  # before a folder is created
    folder = SweepFolder.open(args.resume) if args.resume else runner.start(args.spec, args.out)
    out = _until_interrupted(lambda: runner.run(
        folder, args.backend, args.workers, args.address, args.retry_failed,
        echo=lambda s: print(s, flush=True)),
        f"finished trials are kept; continue with `trustrl sweep --resume {folder.path}`")
    if isinstance(out, int):
        return out
    print(f"done in {out.wall_s:.0f} s: {out.finished} finished, {out.failed} failed in this "
          f"run; report with `trustrl report {folder.path}`")
    return 1 if out.failed else 0


def cmd_report(args: argparse.Namespace) -> int:
    import math

    from trustrl.settings.config import check_writable_dir
    from trustrl.sweep.report import write_report
    from trustrl.sweep.spec import check_sweep_file
    from trustrl.util.errors import TrustrlError

    thresholds: dict[str, float] = {}
    for pair in args.threshold:
        env, sep, value = pair.partition("=")
        try:
            thresholds[env.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not env.strip() or not math.isfinite(thresholds.get(env.strip(), 0.0)):
            raise TrustrlError(f"--threshold expects ENV=VALUE (a finite number), got "
                               f"{pair[:80]!r}")
    if not 100 <= args.boot <= MAX_BOOT:
        raise TrustrlError(f"--boot must be in [100, {MAX_BOOT:,}], got {args.boot}")
    check_sweep_file(Path(args.dir))
    out = Path(args.out) if args.out else Path(args.dir) / "report"
    check_writable_dir(out, "--out")
    path = write_report(Path(args.dir), out, stat=args.stat, thresholds=thresholds,
                        n_boot=args.boot)
    print(f"report: {path}")
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from trustrl.sweep import tune
    from trustrl.sweep.tune_spec import MAX_STUDY_TRIALS, load_tune_spec
    from trustrl.util.errors import TrustrlError

    _check_options(args, "study")
    if args.trials is not None and not 1 <= args.trials <= MAX_STUDY_TRIALS:
        raise TrustrlError(f"--trials must be in [1, {MAX_STUDY_TRIALS:,}], got {args.trials}")
    if args.dry_run:
        spec = (load_tune_spec(args.spec) if args.spec
                else tune.check_study_folder(Path(args.resume)))
        print(f"study {spec.name}: {spec.algo} on {spec.env_id}, seed {spec.seed}, "
              f"{spec.config({})['total_steps']:,} steps a trial, "
              f"{args.trials or spec.trials} trials, objective {spec.objective} "
              f"({spec.direction}), sampler {next(iter(spec.sampler))}, "
              f"pruner {next(iter(spec.pruner))}")
        for key, dist in spec.space.items():
            print(f"  {key}: {dist.kind} {list(dist.ends())}")
        return 0
    tune.require_optuna()
    if args.backend == "ray":
        from trustrl.sweep.ray_backend import require_ray

        require_ray()  # before a folder is created
    path = Path(args.resume) if args.resume else tune.create(args.spec, args.out, args.trials)
    if args.resume and args.trials is not None:
        tune.set_trials(path, args.trials)
    out = _until_interrupted(lambda: tune.run(
        path, args.backend, args.workers, args.address, echo=lambda s: print(s, flush=True)),
        f"the study and its ended trials are kept; continue with `trustrl tune --resume {path}`")
    if isinstance(out, int):
        return out
    best = (f"best: trial {out.best['number']}, {out.best['value']:.1f}; "
            f"config in {path / tune.BEST_FILE}" if out.best else "no trial finished")
    print(f"done in {out.wall_s:.0f} s: {out.complete} complete, {out.pruned} pruned, "
          f"{out.failed} failed in this run; {best}")
    return 0
