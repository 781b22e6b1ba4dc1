"""Learning curves from run folders (matplotlib, Agg backend: works without a display)."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np

from trustrl.records.runs import read_csv
from trustrl.util.errors import TrustrlError

FIGURE_FORMATS = ("png", "pdf", "svg", "jpg", "jpeg")


def check_figure_path(out: str | Path) -> Path:
    """A figure path trustrl can write: a known extension, not a folder, in a folder that
    exists or can be made and is writable; TrustrlError (one line) otherwise."""
    p = Path(out)
    if not str(out).strip():
        raise TrustrlError("the figure path is empty")
    if "\x00" in str(out) or len(str(out)) > 4096:
        raise TrustrlError(f"{str(out)[:60]!r} is not a usable figure path")
    ext = p.suffix.lower().lstrip(".")
    if ext not in FIGURE_FORMATS:
        raise TrustrlError(f"cannot write a figure to {p}: the extension must be one of "
                           f"{', '.join('.' + f for f in FIGURE_FORMATS)}")
    if p.is_dir():
        raise TrustrlError(f"cannot write a figure to {p}: it is a folder")
    probe = p.parent
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        raise TrustrlError(f"cannot write a figure to {p}: {probe} is not a folder")
    if not os.access(probe, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise TrustrlError(f"cannot write a figure to {p}: permission denied")
    return p


def _floats(rows: list[dict[str, str]], key: str) -> np.ndarray:
    return np.array([float(r[key]) if r.get(key, "") != "" else np.nan for r in rows])


def moving_average(x: np.ndarray, window: int = 5) -> np.ndarray:
    """Trailing mean over the last `window` finite values (shorter at the start)."""
    out = np.full(len(x), np.nan)
    for i in range(len(x)):
        w = x[max(0, i - window + 1):i + 1]
        w = w[np.isfinite(w)]
        if len(w):
            out[i] = w.mean()
    return out


def plot_runs(run_dirs: list[str | Path], out: str | Path, title: str | None = None) -> Path:
    """One run: raw per-batch return, 5-iteration moving average and greedy evaluations (like
    the blog's graph 1). Several runs: their moving averages and greedy points overlaid.
    A metrics.csv with no rows or without the columns, or a figure path that cannot be
    written, is a TrustrlError (one line)."""
    out = check_figure_path(out)
    tables = []
    for rd in run_dirs:
        path = Path(rd) / "metrics.csv"
        try:
            rows = read_csv(path)
        except (OSError, UnicodeDecodeError, csv.Error) as e:
            raise TrustrlError(f"cannot read {path}: {str(e).splitlines()[0][:120]}") from None
        missing = [c for c in ("global_step", "ep_return_mean") if not rows or c not in rows[0]]
        if not rows:
            raise TrustrlError(f"{path} has no rows yet: nothing to plot")
        if missing:
            raise TrustrlError(f"{path} has no column {missing[0]}: not a trustrl metrics file")
        try:
            _floats(rows, "global_step"), _floats(rows, "ep_return_mean")
            _floats(rows, "eval_return_mean")
        except (TypeError, ValueError):
            raise TrustrlError(f"{path} holds a value that is not a number") from None
        tables.append(rows)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    single = len(run_dirs) == 1
    for k, (rd, rows) in enumerate(zip(run_dirs, tables, strict=True)):
        step = _floats(rows, "global_step")
        raw = _floats(rows, "ep_return_mean")
        ev = _floats(rows, "eval_return_mean")
        color = f"C{k % 10}"
        label = Path(rd).name
        if single:
            ax.plot(step, raw, color=color, alpha=0.3, lw=1, label="per-batch return (raw)")
            ax.plot(step, moving_average(raw), color=color, lw=2.2,
                    label="5-iteration moving average")
        else:
            ax.plot(step, moving_average(raw), color=color, lw=2, label=label)
        init = Path(rd) / "eval_initial.json"
        first = _initial_eval(init) if init.is_file() else None
        if first is not None:
            step = np.concatenate([[0.0], step])
            ev = np.concatenate([[first], ev])
        m = np.isfinite(ev)
        if m.any():
            ax.plot(step[m], ev[m], color="k" if single else color, ls="--", marker="o", ms=3,
                    lw=1.2, label="greedy evaluation" if single else None)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("episode return")
    ax.set_title(title or (Path(run_dirs[0]).name if single else "learning curves"))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=110)
    except OSError as e:
        raise TrustrlError(f"cannot write the figure {out}: {e.strerror or e}") from None
    finally:
        plt.close(fig)
    return out


def _initial_eval(path: Path) -> float | None:
    """The step-0 greedy mean from eval_initial.json (None when the file is not usable)."""
    import json

    try:
        v = json.loads(path.read_text())["mean"]
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None
