"""Read-only access to the run folders under the dashboard's runs root.

Everything here refuses to leave the root: a run is named by one or two path segments of safe
characters (no '..', no leading dot, no separators), its resolved path (symlinks followed) must
lie inside the resolved root, and only a fixed list of file names is ever read. Anything else is
NotFound, so a traversal attempt looks exactly like a run that does not exist.

CSV files are read up to their last complete line: `trustrl train` appends rows while we read,
and a half-written last line must not reach the page. Standard library only.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
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
    except (ValueError, OSError):
        return False
    return True


def resolve_run(root: Path, parts: list[str]) -> Path:
    """The run folder named by parts (1 or 2 segments), or NotFound."""
    if not 1 <= len(parts) <= MAX_DEPTH or not all(SEGMENT.fullmatch(p) for p in parts):
        raise NotFound("no such run")
    path = root.joinpath(*parts)
    if not inside(root, path) or not (path / "config.json").is_file():
        raise NotFound("no such run")
    return path


def resolve_file(root: Path, parts: list[str]) -> Path:
    """A servable file: <run parts...>/<one of SERVED_FILES>, inside root, or NotFound."""
    if len(parts) < 2 or parts[-1] not in SERVED_FILES:
        raise NotFound("no such file")
    run = resolve_run(root, parts[:-1])
    path = run / parts[-1]
    if not inside(root, path) or not path.is_file():
        raise NotFound("no such file")
    return path


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _candidates(root: Path) -> list[tuple[list[str], Path]]:
    found: list[tuple[list[str], Path]] = []
    if not root.is_dir():
        return found
    for child in sorted(root.iterdir()):
        if not SEGMENT.fullmatch(child.name) or not child.is_dir() or not inside(root, child):
            continue
        if (child / "config.json").is_file():
            found.append(([child.name], child))
            continue
        for sub in sorted(child.iterdir()):
            if (SEGMENT.fullmatch(sub.name) and sub.is_dir() and inside(root, sub)
                    and (sub / "config.json").is_file()):
                found.append(([child.name, sub.name], sub))
    return found


def planned_iterations(config: dict[str, Any]) -> int | None:
    """total_steps // (num_envs * num_steps), as RunConfig computes it; None if unknown."""
    try:
        return int(config["total_steps"]) // (int(config["num_envs"]) * int(config["num_steps"]))
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


def run_summary(root: Path, parts: list[str], path: Path) -> dict[str, Any]:
    config = _read_json(path / "config.json")
    config = config if isinstance(config, dict) else {}
    status = _read_json(path / "status.json")
    status = status if isinstance(status, dict) else {}
    metrics = path / "metrics.csv"
    return {
        "name": "/".join(parts),
        "env_id": config.get("env_id"), "algo": config.get("algo"), "seed": config.get("seed"),
        "status": status.get("status", "unknown"), "iteration": status.get("iteration"),
        "iterations": planned_iterations(config),
        "mtime": max((p.stat().st_mtime for p in (metrics, path / "status.json")
                      if p.is_file()), default=None),
    }


def list_runs(root: Path) -> list[dict[str, Any]]:
    """Every run folder under root (depth 1 or 2), newest activity first."""
    runs = [run_summary(root, parts, path) for parts, path in _candidates(root)]
    return sorted(runs, key=lambda r: (-(r["mtime"] or 0.0), r["name"]))


def _cell(s: str) -> float | str | None:
    """A CSV cell as a JSON value: number, None for empty or non-finite, else the string."""
    if s == "":
        return None
    try:
        x = float(s)
    except ValueError:
        return s
    return x if math.isfinite(x) else None


def read_complete_rows(path: Path) -> tuple[list[str], list[list[float | str | None]]]:
    """Header and rows of a CSV file, ignoring a trailing line not yet ended by a newline."""
    try:
        data = path.read_bytes()
    except OSError:
        return [], []
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


def table_since(path: Path, since: int) -> dict[str, Any]:
    """Rows from index `since` on. `total` lets the page notice a file that shrank (a resumed
    run drops the rows written after its checkpoint): then it asks again from 0."""
    columns, rows = read_complete_rows(path)
    return {"columns": columns, "since": since, "total": len(rows),
            "rows": rows[since:] if since <= len(rows) else []}


def run_info(root: Path, parts: list[str]) -> dict[str, Any]:
    path = resolve_run(root, parts)
    info = run_summary(root, parts, path)
    info["config"] = _read_json(path / "config.json")
    info["status_detail"] = _read_json(path / "status.json")
    info["eval_initial"] = _read_json(path / "eval_initial.json")
    info["eval_final"] = _read_json(path / "eval.json")
    return info
