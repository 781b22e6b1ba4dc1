"""Child processes that never outlive their parent, and SIGTERM taken like Ctrl-C.

A pool worker of a sweep, of `trustrl reproduce` or of the RLHF study asks the kernel, as it
starts, for SIGKILL when its parent dies (Linux: prctl PR_SET_PDEATHSIG), whatever killed
the parent (kill -9 included); a worker whose parent died before that exits at once. SIGKILL,
not SIGTERM: a training worker takes SIGTERM as "stop after this iteration" and would then
wait forever for its next task from the dead parent; its run keeps its last checkpoint and
resumes from it (a sweep's --resume does). A parent that lives stops its workers itself on
Ctrl-C and SIGTERM (the sweep asks its trials to stop with a checkpoint). Once the workers are
gone, multiprocessing's resource tracker sees the end of its pipe and exits too. Other
platforms have no parent-death signal: there the pools' own Ctrl-C and SIGTERM handling is
what stops the workers.

`child_pool` is the one way trustrl opens a process pool: spawn workers that die with the
parent, and on any exception in the parent (Ctrl-C, SIGTERM, an error) the workers are
terminated instead of being waited for.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

from trustrl.util.lifeline import die_with_parent

__all__ = ["child_pool", "die_with_parent", "pool_initializer", "run_stoppable", "stop_pool",
           "terminate_like_ctrl_c"]


class Terminated(KeyboardInterrupt):
    """SIGTERM during training: handled like Ctrl-C (status "stopped", resumable)."""


def _init(parent_pid: int, then: Callable[..., Any] | None, args: tuple[Any, ...]) -> None:
    die_with_parent(parent_pid)
    if then is not None:
        then(*args)


def pool_initializer(then: Callable[..., Any] | None = None, *args: Any
                     ) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """(initializer, initargs) for a ProcessPoolExecutor whose workers die with this process;
    `then(*args)` runs after (a module-level function: spawn workers import it)."""
    return _init, (os.getpid(), then, args)


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and terminate the workers (no waiting on their tasks)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(5)
        if p.is_alive():
            p.kill()


@contextlib.contextmanager
def child_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """A spawn ProcessPoolExecutor whose workers die with this process; an exception in the
    block (Ctrl-C, SIGTERM, an error) terminates them instead of waiting for their tasks."""
    init, initargs = pool_initializer()
    pool = ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=init,
                               initargs=initargs)
    try:
        yield pool
    except BaseException:
        stop_pool(pool)
        raise
    pool.shutdown(wait=True)


def run_stoppable(fn: Callable[..., Any], *args: Any) -> Any:
    """In a pool worker: fn(*args) with SIGTERM taken as Ctrl-C, so that stop_pool's
    terminate stops the task as Ctrl-C would (its run marked "stopped"); an idle worker keeps
    the default (it just exits). Submit as pool.submit(run_stoppable, fn, *args)."""
    previous = terminate_like_ctrl_c()
    try:
        return fn(*args)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def terminate_like_ctrl_c() -> Any:
    """SIGTERM raises Terminated (a KeyboardInterrupt) in the main thread, so
    every command stops on `kill PID` or a scheduler's stop as on Ctrl-C and says what it
    left. Returns the previous handler (None where it cannot be set: another thread, another
    platform)."""
    def handler(signum: int, frame: Any) -> None:
        raise Terminated()

    if not hasattr(signal, "SIGTERM") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        return signal.signal(signal.SIGTERM, handler)
    except (ValueError, OSError):
        return None
