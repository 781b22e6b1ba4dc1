"""Processes that die with their parent (Linux: prctl PR_SET_PDEATHSIG), at the bottom of the
layers so that the env layer can use it: Gymnasium's async vector env forks its workers, and
`forks_die_with_parent` makes those forks ask the kernel for SIGKILL when trustrl dies, even
by kill -9 and even while a worker is inside a step that never returns (the workers' own
pipe only tells them once they next wait on it). trustrl.util.children builds the process pools
on `die_with_parent`.

The kernel's signal follows the thread that forked: a worker forked by a thread that ends
before the process does is killed then. The vector envs are made and stepped by one thread.
Other platforms, and the spawn and forkserver start methods, fork nothing here: there the
workers' pipe is what ends them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Iterator

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent_pid: int | None = None, sig: int = signal.SIGKILL) -> bool:
    """In a child process: have the kernel send `sig` when the parent dies (Linux), and exit
    at once when `parent_pid` is given and is no longer the parent (it died before this
    call). Returns whether the kernel took the request (False on other platforms)."""
    ok = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            ok = libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
        except (OSError, AttributeError):
            ok = False
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)
    return ok


_forking = threading.local()  # .parent: this thread's pid while inside the block
_registered = False
_lock = threading.Lock()


def _after_fork_in_child() -> None:
    parent = getattr(_forking, "parent", None)  # the forking thread's value, copied
    if parent is not None:
        _forking.parent = None  # the child's own forks are its own business
        die_with_parent(parent)


@contextlib.contextmanager
def forks_die_with_parent() -> Iterator[None]:
    """Processes that this thread forks inside the block (os.fork, multiprocessing's fork
    start method) ask for SIGKILL when this process dies (Linux; nothing elsewhere)."""
    global _registered
    with _lock:
        if not _registered and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_after_fork_in_child)
            _registered = True
    outer = getattr(_forking, "parent", None)
    _forking.parent = os.getpid()
    try:
        yield
    finally:
        _forking.parent = outer


_REAPER = r"""
import sys

import psutil

procs = []
for line in sys.stdin:  # until EOF: the parent's end of the pipe closed, so it is gone
    pid, started = line.split()
    procs.append((int(pid), float(started)))
for pid, started in procs:
    try:
        p = psutil.Process(pid)
        if abs(p.create_time() - started) < 0.01:  # the same process, not a reused pid
            p.kill()
    except psutil.Error:
        pass
"""
_reapers: list[object] = []  # the reapers' Popen objects: their pipes stay open till exit


def reap_descendants_when_gone() -> bool:
    """Have every process now descending from this one (e.g. a local Ray instance: its GCS
    server, raylet and the agents the raylet starts) killed once this process is gone,
    however it ends (kill -9 included): a small reaper process reads their ids on a pipe and,
    when the pipe closes, kills those still alive (by id and start time). Ray's own
    fate-sharing ends the raylet and the GCS with their parent, but its agents (children of
    the raylet) outlived a killed driver for minutes. Returns False where psutil is missing
    (it comes with Ray) or nothing descends."""
    try:
        import psutil
    except ImportError:
        return False
    import subprocess

    try:
        kids = psutil.Process(os.getpid()).children(recursive=True)
        lines = "".join(f"{p.pid} {p.create_time()}\n" for p in kids)
    except psutil.Error:
        return False
    if not lines:
        return False
    reaper = subprocess.Popen([sys.executable, "-c", _REAPER], stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    assert reaper.stdin is not None
    reaper.stdin.write(lines.encode())
    reaper.stdin.flush()
    _reapers.append(reaper)
    return True
