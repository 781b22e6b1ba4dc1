"""One trial in its own folder: train() from scratch, or resume() from the run's checkpoint.

This is the only function the backends call in their workers, so a local and a Ray sweep run
the same code on the same config and, on CPU with one torch thread, write the same numbers.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import socket
import tarfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

CallbackFactory = Callable[[dict[str, Any]], Callable[[dict[str, Any]], Any]]
"""Picklable; called in the worker with the trial to give train()'s per-iteration callback
(`trustrl tune` reports each evaluation to its study this way, and stops a pruned trial)."""


def _run_folders(trial_dir: Path) -> list[Path]:
    return sorted(p for p in trial_dir.iterdir() if p.is_dir() and not p.name.startswith("."))


def _resumable(run: Path) -> bool:
    return (run / "config.json").is_file() and (run / "checkpoints" / "latest.pt").is_file()


def _finished(run: Path) -> bool:
    try:
        status = json.loads((run / "status.json").read_text()).get("status")
    except (OSError, json.JSONDecodeError):
        return False
    return status == "finished" and (run / "eval.json").is_file()


def _log_attempt(trial_dir: Path, mode: str, iteration: int) -> None:
    line = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "mode": mode,
                       "from_iteration": iteration, "time": time.strftime("%Y-%m-%dT%H:%M:%S")})
    with open(trial_dir / "attempts.jsonl", "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def execute_trial(trial: dict[str, Any], trial_dir: str | Path,
                  make_callback: CallbackFactory | None = None) -> dict[str, Any]:
    """Run one trial to its end in `trial_dir` and write trial_dir/result.json last.

    make_callback(trial): the callback train() calls after each iteration; one that returns
    False ends the trial as "stopped" (its run folder keeps its checkpoint).

    A run folder left by an earlier attempt is resumed from its checkpoint (bit-exact on CPU);
    one without a checkpoint (killed in its first iteration) is removed and the trial starts
    over. An exception is recorded as a failed result; KeyboardInterrupt is not caught, so an
    interrupted trial stays unfinished (its run status is 'stopped') and a resume continues it.
    """
    import torch

    from trustrl.records.runs import atomic_write_text
    from trustrl.settings.config import config_from_dict
    from trustrl.training.train import resume, train
    from trustrl.util.locks import FolderLock

    torch.set_num_threads(1)  # bit-exact and fastest for small networks
    d = Path(trial_dir)
    d.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    res: dict[str, Any] = {"id": trial["id"], "algo": trial["algo"], "env_id": trial["env_id"],
                           "seed": trial["seed"], "variant": trial["variant"]}
    callback = make_callback(trial) if make_callback is not None else None
    try:
        runs = [r for r in _run_folders(d) if _resumable(r)]
        for stale in _run_folders(d):
            if stale not in runs:
                lock = FolderLock(stale)  # refuses if some process still writes it
                lock.acquire()
                shutil.rmtree(stale)  # no checkpoint: nothing to resume, start over
                lock.release()
        if len(runs) > 1:
            raise RuntimeError(f"{d} holds {len(runs)} run folders; expected at most one")
        if runs and _finished(runs[0]):
            _log_attempt(d, "collect", -1)
            run_path = runs[0]
            final = json.loads((run_path / "eval.json").read_text())
        elif runs:
            ck_iter = json.loads((runs[0] / "status.json").read_text()).get("iteration", 0)
            _log_attempt(d, "resume", int(ck_iter))
            result = resume(runs[0], progress=False, callback=callback)
            run_path, final = result.run_dir, result.final_eval
        else:
            _log_attempt(d, "fresh", 0)
            cfg = config_from_dict(dict(trial["config"], runs_dir=str(d)))
            result = train(cfg, progress=False, callback=callback)
            run_path, final = result.run_dir, result.final_eval
        if final:
            res.update(status="finished", run=Path(run_path).name, final_eval=final)
        else:  # the callback stopped it
            res.update(status="stopped", run=Path(run_path).name, final_eval={})
    except Exception as e:  # noqa: BLE001 - a failing trial must not stop the others
        msg = (str(e).splitlines() or [""])[0]
        res.update(status="failed", run=None, error=f"{type(e).__name__}: {msg}",
                   traceback=traceback.format_exc())
    res["wall_s"] = time.perf_counter() - t0
    res["time"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    atomic_write_text(d / "result.json", json.dumps(res, indent=2) + "\n")
    return res


def worker_init(cores: int | None = None) -> None:
    """Pool worker start: one torch thread, and SIGINT ignored while idle (see run_in_worker).
    `cores`: the worker's share of the machine, which trials whose torch_threads is automatic
    (a CNN's, a batch of 8 seeds or more) take instead of every core (TRUSTRL_CORES)."""
    import torch

    from trustrl.learn.learners import CORES_ENV

    if cores is not None:
        os.environ[CORES_ENV] = str(max(1, int(cores)))
    torch.set_num_threads(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_in_worker(trial: dict[str, Any], trial_dir: str,
                  make_callback: CallbackFactory | None = None) -> dict[str, Any]:
    """execute_trial with Ctrl-C enabled only while the trial runs: an interrupted trial marks
    its run 'stopped' and leaves its checkpoint; an idle worker does not print a traceback."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return execute_trial(trial, trial_dir, make_callback)
    finally:
        signal.signal(signal.SIGINT, previous)


# ----- moving a trial folder between machines (Ray) -------------------------------------------
def pack_folder(path: str | Path) -> bytes:
    """The folder as a gzip tar (names relative to it)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for p in sorted(Path(path).rglob("*")):
            tar.add(p, arcname=str(p.relative_to(path)), recursive=False)
    return buf.getvalue()


def unpack_folder(blob: bytes, dest: str | Path) -> None:
    """Replace `dest` by the packed folder: extracted beside it, then renamed into place."""
    dest = Path(dest)
    tmp = dest.with_name(f".{dest.name}.incoming")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        for m in tar.getmembers():  # refuse absolute names and '..' (a tar from elsewhere)
            if m.name.startswith("/") or ".." in Path(m.name).parts or m.issym() or m.islnk():
                raise RuntimeError(f"unsafe path in a trial archive: {m.name!r}")
        tar.extractall(tmp)  # noqa: S202 - members checked above
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)
