"""Local backend: a ProcessPoolExecutor with spawn workers, one trial per task.

Spawn (not fork) gives each worker a fresh interpreter: no torch thread pool or RNG state is
inherited from the driver, and the same code path runs on Linux, macOS and Windows.

A worker that dies (SIGKILL, out of memory) breaks the whole pool: every trial in flight is
then lost mid-way. The pool is rebuilt and those trials continue from their checkpoints; a
trial whose attempts end that way `max_attempts` times is recorded as failed. Trials that had
not started yet are resubmitted without counting an attempt. The workers die with the driver,
even on kill -9 (trustrl.util.children).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from trustrl.sweep.folder import SweepFolder
from trustrl.sweep.spec import Trial
from trustrl.sweep.trial import CallbackFactory, run_in_worker, worker_init
from trustrl.util.children import pool_initializer

OnResult = Callable[[Trial, dict[str, Any]], "list[Trial] | None"]
"""Called as each trial ends; the trials it returns are run next (`trustrl tune` asks its study
for a new trial there; a sweep's list is fixed and returns None)."""


def default_workers() -> int:
    """The cores this process may use (the affinity mask where the OS has one)."""
    from trustrl.learn.learners import affinity_cores

    return affinity_cores()


def worker_cores(workers: int) -> int:
    """Each of `workers` pool workers' share of the cores (at least one)."""
    return max(1, default_workers() // max(1, workers))


def _stop_workers(timeout: float = 10.0) -> None:
    """Ctrl-C: interrupt the running trials (each marks its run 'stopped' with its checkpoint
    kept), wait briefly, then terminate what is left."""
    children = mp.active_children()
    for p in children:
        if p.pid is not None:
            try:
                os.kill(p.pid, signal.SIGINT)
            except OSError:
                pass
    deadline = time.monotonic() + timeout
    for p in children:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.terminate()


def run_local(folder: SweepFolder, trials: list[Trial], workers: int, on_result: OnResult,
              max_attempts: int = 3, make_callback: CallbackFactory | None = None) -> None:
    """Run `trials` on `workers` processes; on_result(trial, result) as each one ends, and the
    trials it returns after them. make_callback: see execute_trial."""
    ctx = mp.get_context("spawn")
    queue = list(trials)
    deaths: dict[str, int] = {}
    while queue:
        before = {t.id: folder.attempts(t) for t in queue}
        lost: list[Trial] = []
        n = max(1, min(workers, len(queue)))
        init, initargs = pool_initializer(worker_init, worker_cores(n))  # die with us
        ex = ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=init,
                                 initargs=initargs)
        try:
            futures: dict[Future[dict[str, Any]], Trial] = {}
            for t in queue:
                futures[ex.submit(run_in_worker, t.as_dict(), str(folder.trial_dir(t)),
                                  make_callback)] = t
            pending = set(futures)
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in done:
                    t = futures[f]
                    try:
                        res = f.result()
                    except BrokenProcessPool:
                        lost.append(t)
                        continue
                    except Exception as e:  # noqa: BLE001 - e.g. an unpicklable result
                        res = folder.record_failure(t, f"{type(e).__name__}: {e}")
                    for new in on_result(t, res) or []:  # run next, in this pool
                        before[new.id] = folder.attempts(new)
                        try:
                            f = ex.submit(run_in_worker, new.as_dict(),
                                          str(folder.trial_dir(new)), make_callback)
                        except BrokenProcessPool:
                            lost.append(new)  # resubmitted in the next pool
                            continue
                        futures[f] = new
                        pending.add(f)
        except KeyboardInterrupt:
            ex.shutdown(wait=False, cancel_futures=True)
            _stop_workers()
            raise
        finally:
            ex.shutdown(wait=True, cancel_futures=True)
        queue = []
        for t in lost:
            if folder.attempts(t) > before[t.id]:  # it had started: its worker died
                deaths[t.id] = deaths.get(t.id, 0) + 1
            if deaths.get(t.id, 0) >= max_attempts:
                queue.extend(on_result(t, folder.record_failure(
                    t, f"its worker process died {deaths[t.id]} times")) or [])
            else:
                queue.append(t)
