"""One writer per run folder and per sweep folder: an advisory lock on DIR/.trustrl.lock.

The lock is `fcntl.flock` on a file that is never deleted or renamed, taken without waiting:
a second writer fails at once with a one-line error naming the holder (pid, host, start time,
command, recorded in the file). The kernel drops a flock when its process dies, however it
dies (kill -9 included), so a stale lock is simply taken by the next writer, which overwrites
the record. Locks are per process: a process that already holds a folder's lock may open it
again (the count is kept here). Not guaranteed on network file systems whose flock is local
to one machine, and absent where fcntl is (Windows: no locking).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

from trustrl.util.errors import RunError

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".trustrl.lock"

# realpath of the folder -> [fd, holders in this process]
_HELD: dict[str, list[int]] = {}


class FolderLockedError(RunError):
    """Another process holds the folder's lock."""


def _key(folder: Path) -> str:
    return os.path.realpath(folder)


def held_here(folder: Path) -> bool:
    """Whether this process holds `folder`'s lock."""
    return _key(folder) in _HELD


def _holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError):
        info = {}
    if not isinstance(info, dict) or "pid" not in info:
        return "another process"
    host = info.get("host")
    where = "" if host == socket.gethostname() else f" on {host}"
    cmd = f", `{info['cmd']}`" if info.get("cmd") else ""
    return f"pid {info['pid']}{where} (since {info.get('time', '?')}{cmd})"


class FolderLock:
    """The write lock of one folder for one owner (a RunDir, a SweepFolder)."""

    def __init__(self, folder: str | Path, what: str = "run folder"):
        self.folder, self.what = Path(folder), what
        self.held = False
        self._key = ""

    def acquire(self) -> None:
        if self.held or fcntl is None:
            return
        key = self._key = _key(self.folder)
        entry = _HELD.get(key)
        if entry is not None:
            entry[1] += 1
            self.held = True
            return
        try:
            fd = os.open(self.folder / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as e:
            raise RunError(f"cannot lock {self.what} {self.folder}: {e.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            who = _holder(fd)
            os.close(fd)
            raise FolderLockedError(
                f"{self.what} {self.folder} is being written by {who}; one writer at a time: "
                "wait for it to end or stop it") from None
        cmd = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv else ""
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                             "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "cmd": cmd[:200]})
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (record + "\n").encode(), 0)
        except OSError:
            pass  # the lock holds without its record
        _HELD[key] = [fd, 1]
        self.held = True

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        key = self._key
        entry = _HELD.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            del _HELD[key]
            os.close(entry[0])  # drops the flock
