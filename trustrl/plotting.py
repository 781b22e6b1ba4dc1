"""Learning curves from run folders (matplotlib, Agg backend: works without a display)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trustrl.runs import read_csv


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
    the blog's graph 1). Several runs: their moving averages and greedy points overlaid."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    single = len(run_dirs) == 1
    for k, rd in enumerate(run_dirs):
        rows = read_csv(Path(rd) / "metrics.csv")
        if not rows:
            continue
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
        if init.is_file():
            import json

            step = np.concatenate([[0.0], step])
            ev = np.concatenate([[json.loads(init.read_text())["mean"]], ev])
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
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
