"""Read-only access to the run folders under the dashboard's runs root.

Everything here refuses to leave the root: a run is named by one or two path segments of safe
characters (no '..', no leading dot, no separators), its resolved path (symlinks followed) must
lie inside the resolved root, and only a fixed list of file names is ever read. Every file is
read through read_inside: its resolved path must be a regular file inside the root, and it is
opened one path component at a time from the root without following any symlink (a link
swapped in between the check and the read fails too). Anything else is NotFound, so a
traversal attempt, or a file in a run folder that links elsewhere, looks exactly like a run or
file that does not exist.

CSV files are read up to their last complete line: `trustrl train` appends rows while we read,
and a half-written last line must not reach the page. Standard library only.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

from trustrl.demo.params import NotFound

SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+=-]{0,199}")
MAX_DEPTH = 2  # runs/<run> or runs/<group>/<run> (e.g. a sweep's or reproduce's sub-folder)
CSV_FILES = ("metrics.csv", "episodes.csv")
SERVED_FILES = frozenset({"config.json", "status.json", "eval.json", "eval_initial.json",
                          "metrics.csv", "episodes.csv", "learning_curve.png"})


def inside(root: Path, path: Path) -> bool:
    """True when path, with symlinks resolved, is root or lies below it."""
    try:
        path.resolve().relative_to(root.resolve())
    except (ValueError, OSError, RuntimeError):
        return False
    return True


def regular_file(root: Path, path: Path) -> Path | None:
    """path with symlinks resolved, when that is an existing regular file inside root; else
    None (missing, a folder, a FIFO or device, or a link that leads out of root)."""
    try:
        real = path.resolve(strict=True)
        real.relative_to(root.resolve())
        mode = real.stat().st_mode
    except (ValueError, OSError, RuntimeError):
        return None
    return real if stat.S_ISREG(mode) else None


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_OPEN_FLAGS = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
_DIR_FLAGS = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_DIRECTORY", 0)


def _open_below(root: Path, rel: Path) -> int:
    """A file descriptor for root/rel, opened one component at a time from root with
    O_NOFOLLOW (OSError on any symlink on the way). Where the platform lacks dir_fd support,
    a plain O_NOFOLLOW open of the whole path."""
    if os.open not in os.supports_dir_fd or not _NOFOLLOW:
        return os.open(root / rel, _OPEN_FLAGS)
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in rel.parts[:-1]:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return os.open(rel.parts[-1], _OPEN_FLAGS, dir_fd=fd)
    finally:
        os.close(fd)


def read_inside(root: Path, path: Path) -> bytes:
    """The bytes of path, which must resolve (symlinks followed) to a regular file inside root;
    NotFound otherwise. The resolved path is then opened from root without following symlinks
    and checked again to be a regular file, so the file read is the one checked."""
    real = regular_file(root, path)
    if real is None:
        raise NotFound("no such file")
    root_real = root.resolve()
    try:
        fd = _open_below(root_real, real.relative_to(root_real))
    except (OSError, ValueError):
        raise NotFound("no such file") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or not _own_file(st):
            raise NotFound("no such file")
        try:
            return f.read()
        except OSError:
            raise NotFound("no such file") from None


def _own_file(st: os.stat_result) -> bool:
    """A file with one name (a hard link may bring a file from outside root in) that belongs
    to the user running the server (POSIX; always True elsewhere)."""
    if not hasattr(os, "geteuid"):
        return True
    return st.st_nlink == 1 and st.st_uid == os.geteuid()


def _present(path: Path) -> bool:
    """Something (a file, a folder, a link, even a dangling one) exists at path (True when we
    cannot tell: read_inside then refuses it)."""
    try:
        return path.is_symlink() or path.exists()
    except OSError:
        return True


def resolve_run(root: Path, parts: list[str]) -> Path:
    """The run folder named by parts (1 or 2 segments), or NotFound. A run folder lies inside
    root and holds a config.json that is a regular file inside root."""
    if not 1 <= len(parts) <= MAX_DEPTH or not all(SEGMENT.fullmatch(p) for p in parts):
        raise NotFound("no such run")
    path = root.joinpath(*parts)
    if not inside(root, path) or regular_file(root, path / "config.json") is None:
        raise NotFound("no such run")
    return path


def resolve_file(root: Path, parts: list[str]) -> Path:
    """A servable file: <run parts...>/<one of SERVED_FILES>, inside root, or NotFound. Read it
    with read_inside(root, path)."""
    if len(parts) < 2 or parts[-1] not in SERVED_FILES:
        raise NotFound("no such file")
    run = resolve_run(root, parts[:-1])
    path = run / parts[-1]
    if regular_file(root, path) is None:
        raise NotFound("no such file")
    return path


def read_json(root: Path, path: Path) -> Any:
    """The JSON in path, None when path does not exist or is not valid JSON; NotFound when
    something is there that read_inside refuses (e.g. a link out of root)."""
    if not _present(path):
        return None
    data = read_inside(root, path)
    try:
        return json.loads(data)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, nested too deeply
        return None


def _json_or_none(root: Path, path: Path) -> Any:
    try:
        return read_json(root, path)
    except NotFound:
        return None


def _candidates(root: Path) -> list[tuple[list[str], Path]]:
    found: list[tuple[list[str], Path]] = []
    if not root.is_dir():
        return found
    for child in sorted(root.iterdir()):
        if not SEGMENT.fullmatch(child.name) or not child.is_dir() or not inside(root, child):
            continue
        if regular_file(root, child / "config.json") is not None:
            found.append(([child.name], child))
            continue
        for sub in sorted(child.iterdir()):
            if (SEGMENT.fullmatch(sub.name) and sub.is_dir() and inside(root, sub)
                    and regular_file(root, sub / "config.json") is not None):
                found.append(([child.name, sub.name], sub))
    return found


def planned_iterations(config: dict[str, Any]) -> int | None:
    """total_steps // (num_envs * num_steps), as RunConfig computes it; else the `iterations` a
    language-model run (trustrl rlhf) sets; None if unknown."""
    try:
        return int(config["total_steps"]) // (int(config["num_envs"]) * int(config["num_steps"]))
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        pass
    n = _settings(config).get("iterations")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def _settings(config: dict[str, Any]) -> dict[str, Any]:
    """The algorithm's settings: the config itself, or, for a run on a Hugging Face model
    (`trustrl rlhf grpo|rloo|ppo --model`, whose config.json is {"algo", "config", "hf"}), its
    "config" part."""
    inner = config.get("config")
    return inner if isinstance(inner, dict) and isinstance(config.get("hf"), dict) else config


def _model_name(config: dict[str, Any]) -> str | None:
    """The last part of a Hugging Face run's model folder (or hub id), else None."""
    hf = config.get("hf")
    model = hf.get("model") if isinstance(hf, dict) else None
    if not isinstance(model, str) or not model.strip("/"):
        return None
    return model.rstrip("/").rsplit("/", 1)[-1][:200]


def run_summary(root: Path, parts: list[str], path: Path) -> dict[str, Any]:
    """One row of the run list (a file that links out of root counts as missing here; the
    run's own endpoints answer 404 for it). `model`: a language-model run's model, where a
    Gymnasium run has its env_id."""
    config = _json_or_none(root, path / "config.json")
    unreadable = not isinstance(config, dict)
    config = {} if unreadable else config
    status = _json_or_none(root, path / "status.json")
    status = status if isinstance(status, dict) else {}
    stamped = [regular_file(root, path / name) for name in ("metrics.csv", "status.json")]
    return {
        "name": "/".join(parts),
        "env_id": config.get("env_id"), "model": _model_name(config),
        "algo": config.get("algo"), "seed": _settings(config).get("seed"),
        "status": "unreadable" if unreadable else status.get("status", "unknown"),
        "iteration": status.get("iteration"),
        "iterations": planned_iterations(config),
        "mtime": max((_mtime(p) for p in stamped if p is not None), default=None),
    }


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def list_runs(root: Path) -> list[dict[str, Any]]:
    """Every run folder under root (depth 1 or 2), newest activity first."""
    runs = []
    for parts, path in _candidates(root):
        try:
            runs.append(run_summary(root, parts, path))
        except Exception:  # noqa: BLE001 - one malformed run: listed as unreadable, alone
            runs.append({"name": "/".join(parts), "env_id": None, "model": None, "algo": None,
                         "seed": None,
                         "status": "unreadable", "iteration": None, "iterations": None,
                         "mtime": None})
    return sorted(runs, key=lambda r: (-(r["mtime"] if isinstance(r["mtime"], (int, float))
                                         else 0.0), r["name"]))


def _cell(s: str) -> float | str | None:
    """A CSV cell as a JSON value: number, None for empty or non-finite, else the string."""
    if s == "":
        return None
    try:
        x = float(s)
    except ValueError:
        return s
    return x if math.isfinite(x) else None


def read_complete_rows(root: Path, path: Path) -> tuple[list[str],
                                                     list[list[float | str | None]]]:
    """Header and rows of a CSV file, ignoring a trailing line not yet ended by a newline. No
    file yet: no columns, no rows; a file read_inside(root, path) refuses: NotFound."""
    if not _present(path):
        return [], []
    data = read_inside(root, path)
    end = data.rfind(b"\n")
    if end < 0:
        return [], []
    text = data[: end + 1].decode("utf-8", errors="replace")
    rows = list(csv.reader(io.StringIO(text, newline="")))
    if not rows:
        return [], []
    header, body = rows[0], rows[1:]
    width = len(header)
    return header, [[_cell(c) for c in r] for r in body if len(r) == width]


def table_since(root: Path, path: Path, since: int) -> dict[str, Any]:
    """Rows from index `since` on. `total` lets the page notice a file that shrank (a resumed
    run drops the rows written after its checkpoint): then it asks again from 0."""
    columns, rows = read_complete_rows(root, path)
    return {"columns": columns, "since": since, "total": len(rows),
            "rows": rows[since:] if since <= len(rows) else []}


def run_info(root: Path, parts: list[str]) -> dict[str, Any]:
    """A run's summary, config, status and evaluations. NotFound when any of these files is
    there but read_inside refuses it (a run folder that links out is not served at all)."""
    path = resolve_run(root, parts)
    info = run_summary(root, parts, path)
    info["config"] = read_json(root, path / "config.json")
    info["status_detail"] = read_json(root, path / "status.json")
    info["eval_initial"] = read_json(root, path / "eval_initial.json")
    info["eval_final"] = read_json(root, path / "eval.json")
    return info
