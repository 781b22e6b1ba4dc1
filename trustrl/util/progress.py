"""A rich progress bar for training: steps, SPS, recent return, approx KL, clip fraction."""

from __future__ import annotations

import sys
from collections import deque
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


def mode_word(deterministic: object) -> str:
    """How an evaluation acts, in every printed line, table and plot: 'greedy' (the mode) or
    'sampled' (eval_deterministic false, `--stochastic`); a missing value (None: a run from
    before the key) was greedy."""
    return "sampled" if deterministic is False else "greedy"


class TrainProgress:
    def __init__(self, cfg: Any, start_step: int, enabled: bool = True):
        self.cfg, self.enabled = cfg, enabled
        self.total = cfg.num_iterations * cfg.batch_size
        self.start_step = start_step
        self.recent: deque[float] = deque(maxlen=5)
        self.console = Console(stderr=True)
        self.interactive = enabled and self.console.is_terminal
        self.progress: Progress | None = None
        self.last_eval: float | None = None
        self.eval_word = mode_word(getattr(cfg, "eval_deterministic", True))

    def __enter__(self) -> TrainProgress:
        if self.interactive:
            self.progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=self.console,
            )
            self.progress.start()
            self.task = self.progress.add_task(
                f"{self.cfg.algo} {getattr(self.cfg.env_id, '__name__', self.cfg.env_id)}",
                total=self.total,
                completed=self.start_step, info="")
        return self

    def update(self, row: dict[str, Any]) -> None:
        if not self.enabled:
            return
        if row.get("ep_return_mean") is not None:
            self.recent.append(row["ep_return_mean"])
        ret = sum(self.recent) / len(self.recent) if self.recent else float("nan")
        ev = row.get("eval_return_mean")
        if ev is not None:
            self.last_eval = ev
        shown = self.last_eval if self.progress is not None else ev
        info = (f"sps {row['sps']:,.0f}  return {ret:8.1f}  kl {row['approx_kl']:.4f}  "
                f"clipfrac {row['clip_fraction']:.3f}"
                + (f"  {self.eval_word} {shown:.1f}" if shown is not None else ""))
        if self.progress is not None:
            self.progress.update(self.task, completed=row["global_step"], info=info)
        elif ev is not None or row["iteration"] == self.cfg.num_iterations:
            # not a terminal: one plain line per evaluation instead of a live bar
            print(f"step {row['global_step']:>9,}/{self.total:,}  {info}", file=sys.stderr,
                  flush=True)

    def __exit__(self, *exc: Any) -> None:
        if self.progress is not None:
            self.progress.stop()
