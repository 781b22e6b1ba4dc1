"""Learning curves from run folders (matplotlib, Agg backend: works without a display)."""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


@dataclass(frozen=True)
class Curve:
    """Which metrics.csv columns a learning curve draws (the default: a `trustrl train` run's
    return; a language-model run names its reward, spread and KL, an RLHF stage its loss)."""

    kind: str = "trustrl train"
    """The kind of run it draws, as `trustrl plot` names it when refusing a mixture."""
    x: str = "global_step"
    x_label: str = "environment steps"
    y: str = "ep_return_mean"
    y_label: str = "episode return"
    raw_label: str = "per-batch return (raw)"
    evals: str = "eval_return_mean"
    eval_label: str = "greedy evaluation"
    initial: str = "eval_initial.json"
    """A JSON file beside metrics.csv holding the evaluation at x = 0 ('' = none)."""
    initial_key: tuple[str, ...] = ("mean",)
    """The keys leading to that evaluation's number in the file."""
    spread: str = ""
    """A column drawn as y +- it around the raw curve of one run ('' = none)."""
    spread_label: str = ""
    below: tuple[tuple[str, str], ...] = ()
    """(column, label) of further panels under the first, sharing its x axis; a column empty
    on some rows (an evaluation every few steps) is drawn at its rows, as points."""
    top: str = ""
    """A column proportional to x (e.g. iteration) shown as a second x axis on top."""


RETURN_CURVE = Curve()


def plot_runs(run_dirs: list[str | Path], out: str | Path, title: str | None = None,
              curve: Curve = RETURN_CURVE) -> Path:
    """One run: raw per-batch return, 5-iteration moving average and greedy evaluations (like
    the blog's graph 1). Several runs: their moving averages and greedy points overlaid.
    `curve` names other columns (and panels) to draw the same way. A metrics.csv with no rows
    or without the columns, or a figure path that cannot be written, is a TrustrlError (one
    line)."""
    out = check_figure_path(out)
    c = curve
    tables = []
    for rd in run_dirs:
        path = Path(rd) / "metrics.csv"
        try:
            rows = read_csv(path)
        except (OSError, UnicodeDecodeError, csv.Error) as e:
            raise TrustrlError(f"cannot read {path}: {str(e).splitlines()[0][:120]}") from None
        need = (c.x, c.y, *(k for k, _ in c.below))
        missing = [k for k in need if not rows or k not in rows[0]]
        if not rows:
            raise TrustrlError(f"{path} has no rows yet: nothing to plot")
        if missing:
            raise TrustrlError(f"{path} has no column {missing[0]}: not a trustrl metrics file")
        try:
            for col in (*need, c.evals, c.spread, c.top):
                if col:
                    _floats(rows, col)
        except (TypeError, ValueError):
            raise TrustrlError(f"{path} holds a value that is not a number") from None
        tables.append(rows)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 1 + len(c.below)
    fig, axes = plt.subplots(panels, 1, figsize=(8, 4.5 + 2.5 * (panels - 1)), sharex=True,
                             squeeze=False)
    ax = axes[0, 0]
    single = len(run_dirs) == 1
    for k, (rd, rows) in enumerate(zip(run_dirs, tables, strict=True)):
        step = _floats(rows, c.x)
        raw = _floats(rows, c.y)
        ev = _floats(rows, c.evals) if c.evals else np.full(len(rows), np.nan)
        color = f"C{k % 10}"
        label = Path(rd).name
        if single:
            ax.plot(step, raw, color=color, alpha=0.3, lw=1, label=c.raw_label)
            ax.plot(step, moving_average(raw), color=color, lw=2.2,
                    label="5-iteration moving average")
            if c.spread:
                s = _floats(rows, c.spread)
                ax.fill_between(step, raw - s, raw + s, color=color, alpha=0.12, lw=0,
                                label=c.spread_label or f"+- {c.spread}")
        else:
            ax.plot(step, moving_average(raw), color=color, lw=2, label=label)
        for j, (col, _) in enumerate(c.below, start=1):
            y = _floats(rows, col)
            m = np.isfinite(y)
            axes[j, 0].plot(step[m], y[m], color=color, lw=1.5, marker=None if m.all() else "o",
                            ms=3, label=col if single else label)
        init = Path(rd) / c.initial if c.initial else None
        first = (_initial_eval(init, c.initial_key) if init is not None and init.is_file()
                 else None)
        if first is not None:
            step = np.concatenate([[0.0], step])
            ev = np.concatenate([[first], ev])
        m = np.isfinite(ev)
        if m.any():
            ax.plot(step[m], ev[m], color="k" if single else color, ls="--", marker="o", ms=3,
                    lw=1.2, label=c.eval_label if single else None)
    axes[-1, 0].set_xlabel(c.x_label)
    ax.set_ylabel(c.y_label)
    for j, (_, ylabel) in enumerate(c.below, start=1):
        axes[j, 0].set_ylabel(ylabel)
        axes[j, 0].grid(alpha=0.3)
    if c.top:
        _top_axis(ax, _floats(tables[0], c.x), _floats(tables[0], c.top), c.top)
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


def _top_axis(ax: Any, x: np.ndarray, top: np.ndarray, label: str) -> None:
    """A second x axis on top showing `top` where `top` = x / per (per from the first row)."""
    ok = np.isfinite(x) & np.isfinite(top) & (top > 0)
    if not ok.any():
        return
    per = float(x[ok][0] / top[ok][0])
    if not per > 0:
        return
    sec = ax.secondary_xaxis("top", functions=(lambda v: v / per, lambda v: v * per))
    sec.set_xlabel(label)


def _initial_eval(path: Path, keys: tuple[str, ...]) -> float | None:
    """The step-0 evaluation under `keys` in a JSON file such as eval_initial.json (None when
    the file is not usable)."""
    import json

    try:
        v = json.loads(path.read_text())
        for k in keys:
            v = v[k]
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def metrics_header(run_dir: str | Path) -> list[str]:
    """The column names of a run folder's metrics.csv (its first line; [] when empty); a
    TrustrlError (one line) when it cannot be read."""
    path = Path(run_dir) / "metrics.csv"
    try:
        with open(path, newline="") as f:
            return next(csv.reader(f), [])
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise TrustrlError(f"cannot read {path}: {str(e).splitlines()[0][:120]}") from None
