"""Start or resume a sweep: pick the trials still to run, hand them to a backend, echo results."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trustrl.sweep.folder import SweepFolder
from trustrl.sweep.spec import SpecError, Trial, load_spec
from trustrl.util.progress import mode_word

BACKENDS = ("local", "ray")


@dataclass
class SweepOutcome:
    folder: SweepFolder
    ran: int
    finished: int
    failed: int
    wall_s: float


def start(spec_path: str | Path, out: str | Path | None, check_envs: bool = True) -> SweepFolder:
    """Validate the SPEC (every trial's config, every env) and create the sweep folder."""
    spec = load_spec(spec_path, check_envs=check_envs)
    out = Path(out) if out else Path("sweeps") / spec.name
    return SweepFolder.create(out, spec, Path(spec_path).read_text())


def run(folder: SweepFolder, backend: str = "local", workers: int | None = None,
        address: str | None = None, retry_failed: bool = False,
        echo: Callable[[str], None] | None = None) -> SweepOutcome:
    """Run every unfinished trial of the folder; returns the counts of this invocation.
    Holds the folder's lock meanwhile: a second writer fails at once (FolderLockedError)."""
    if backend not in BACKENDS:
        raise SpecError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    if workers is not None and workers < 1:
        raise SpecError(f"--workers must be at least 1, got {workers}")
    folder.lock()  # one `trustrl sweep` per folder: a second one fails here, naming this one
    try:
        return _run(folder, backend, workers, address, retry_failed, echo)
    finally:
        folder.unlock()


def _run(folder: SweepFolder, backend: str, workers: int | None, address: str | None,
         retry_failed: bool, echo: Callable[[str], None] | None) -> SweepOutcome:
    from trustrl.sweep.local import default_workers, run_local

    todo = folder.pending(retry_failed)
    total, done_before = len(folder.trials), len(folder.trials) - len(todo)
    say = echo or (lambda s: None)
    say(f"sweep {folder.name}: {len(todo)} of {total} trials to run "
        f"({done_before} already recorded) on the {backend} backend -> {folder.path}")
    counts = {"finished": 0, "failed": 0}
    t0 = time.perf_counter()

    def on_result(trial: Trial, res: dict[str, Any]) -> None:
        status = res.get("status", "failed")
        counts[status if status in counts else "failed"] += 1
        n = done_before + counts["finished"] + counts["failed"]
        if status == "finished":
            ev = res.get("final_eval") or {}
            what = (f"{mode_word(ev.get('greedy'))} {ev.get('mean', float('nan')):.1f} ± "
                    f"{ev.get('std', float('nan')):.1f}")
        else:
            what = f"FAILED: {res.get('error', '?')}"
        say(f"[{n}/{total}] {trial.env_id} {trial.variant} seed {trial.seed}: {what} "
            f"({res.get('wall_s', float('nan')):.0f} s)")

    n_workers = workers or default_workers()
    started, ended = time.strftime("%Y-%m-%dT%H:%M:%S"), "interrupted"
    try:
        if todo and backend == "local":
            run_local(folder, todo, n_workers, on_result)
        elif todo:
            from trustrl.sweep.ray_backend import run_ray

            run_ray(folder, todo, on_result, address=address, workers=workers)
        ended = "completed"
    finally:
        _log_invocation(folder.path, {
            "started": started, "ended": ended, "wall_s": round(time.perf_counter() - t0, 1),
            "backend": backend, "workers": n_workers if backend == "local" else workers,
            "address": address, "to_run": len(todo), **counts})
    return SweepOutcome(folder, len(todo), counts["finished"], counts["failed"],
                        time.perf_counter() - t0)


def _log_invocation(path: Path, entry: dict[str, Any]) -> None:
    """One line per `trustrl sweep` run in DIR/invocations.jsonl: the sweep's wall time."""
    with open(path / "invocations.jsonl", "a") as f:
        f.write(json.dumps(entry) + "\n")
