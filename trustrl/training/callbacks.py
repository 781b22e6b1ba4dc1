"""Callbacks: code of yours that the trainer calls during a run, seeing the agent, the env
and the metrics (Stable-Baselines3's callbacks, in trustrl's terms).

Pass one, or a list, as `callback` of `trustrl.train`, `trustrl.resume` or a model's
`learn`. A callback is a `Callback` (override what you need) or, as before, a function of
the iteration's metrics row. Each event gets an `Info`:

    on_training_start(info)   before the first iteration of this call
    on_rollout_end(info)      after each rollout, before the update: info.episodes the
                              episodes it finished, info.global_step counting its steps,
                              info.iteration the iterations before it (fused: see below)
    on_iteration_end(info)    after each iteration: its metrics row logged, its evaluation
                              (if one was due) in info.evaluation
    on_training_end(info)     when this call ends (finished or stopped)

On the batched collector (vector 'torch') where the rollout is fused into the iteration (the
compiled fused PPO iteration, a CUDA graph's replay), on_rollout_end runs once per iteration
after the update, before on_iteration_end: it sees that rollout's episodes and env steps, but
info.iteration counts the iteration and info.agent is already updated. Everywhere else
(Gymnasium sync or async, Ray runners, the batched eager iteration) it runs before the update.
On the batched collector info.env is None, and a population's info.episodes carry "member"
(the seed's index).

on_rollout_end and on_iteration_end returning False stop the run at the end of the iteration
(status "stopped", resumable). Callbacks run in the order given and share the Info, so a
callback later in the list sees what an earlier one set (EvalCallback's evaluation for
StopOnReward, say).

Shipped: EvalCallback (an evaluation every N steps on an env of your choice, the best agent
kept), StopOnReward, StopOnNoImprovement and CheckpointCallback (agent files every N steps,
the last k kept).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trustrl.util.errors import ConfigError


class Info:
    """What a callback sees. metrics: the iteration's metrics row (a population: the summary
    over its seeds, with each member's row under "members"); at rollout end, the episodes
    finished in the rollout. evaluation: the returns of this iteration's evaluation (one
    seed: [episodes]; a population: [seeds, episodes]), else None.

    Args:
        trainer: the running trainer (trustrl.training.train.Trainer); made by the trainer, not by
            users.
    """

    def __init__(self, trainer: Any):
        self._trainer = trainer
        self.metrics: dict[str, Any] = {}
        self.evaluation: np.ndarray | None = None
        self.episodes: list[dict[str, Any]] = []

    @property
    def agent(self) -> Any:
        """The current agent (trustrl.Agent, a frozen copy: safe to keep or save); in a
        population, the first seed's."""
        return self._trainer.learner.agent(0)

    @property
    def env(self) -> Any:
        """The run's Gymnasium vector env (training's own: stepping it changes the run), or
        None on the batched collector."""
        return getattr(self._trainer.learner, "envs", None)

    @property
    def config(self) -> Any:
        """The run's config (a RunConfig)."""
        return self._trainer.cfg

    @property
    def run_dir(self) -> Path:
        """The run folder."""
        return self._trainer.root.path

    @property
    def iteration(self) -> int:
        """Iterations done."""
        return int(self._trainer.learner.iteration)

    @property
    def global_step(self) -> int:
        """Env steps done (summed over the envs)."""
        return int(self._trainer.learner.global_step)


class Callback:
    """Override the events you need (module docstring); each does nothing by default."""

    def on_training_start(self, info: Info) -> None:
        """Before the first iteration of this process (also on resume and each learn).

        Args:
            info: the run as it stands.
        """
        return None

    def on_rollout_end(self, info: Info) -> bool | None:
        """After each rollout, before the update (info.episodes: the episodes it finished);
        where the rollout is fused into the iteration, after the update (module docstring).

        Args:
            info: the run as it stands.

        Returns:
            False to stop the run cleanly (checkpoint, status "stopped"); None or True goes on.
        """
        return None

    def on_iteration_end(self, info: Info) -> bool | None:
        """After each iteration's update, row and evaluation (info.metrics, info.evaluation).

        Args:
            info: the run as it stands.

        Returns:
            False to stop the run cleanly (checkpoint, status "stopped"); None or True goes on.
        """
        return None

    def on_training_end(self, info: Info) -> None:
        """After the last iteration of this process (finished or stopped).

        Args:
            info: the run as it stands.
        """
        return None


class _RowCallback(Callback):
    """A function of the metrics row (train's callback before Callback existed)."""

    def __init__(self, fn: Callable[[dict[str, Any]], Any]):
        self.fn = fn

    def on_iteration_end(self, info: Info) -> bool | None:
        return self.fn(info.metrics)


def as_callbacks(callback: Any) -> list[Callback]:
    """None, a Callback, a function of the row, or a list of them -> a list of Callbacks."""
    if callback is None:
        return []
    items = list(callback) if isinstance(callback, (list, tuple)) else [callback]
    out: list[Callback] = []
    for c in items:
        if isinstance(c, Callback):
            out.append(c)
        elif callable(c):
            out.append(_RowCallback(c))
        else:
            raise ConfigError(f"callback must be a trustrl.Callback or a function of "
                              f"the metrics row, got {type(c).__name__}")
    return out


def wants_rollouts(callbacks: Sequence[Callback]) -> bool:
    """Whether any callback overrides on_rollout_end."""
    return any(type(c).on_rollout_end is not Callback.on_rollout_end for c in callbacks)


def _mean(evaluation: np.ndarray) -> float:
    """One number for an evaluation: the mean return (a population: its worst seed's mean)."""
    e = np.asarray(evaluation, float)
    return float(e.mean()) if e.ndim == 1 else float(e.mean(axis=1).min())


class _EverySteps(Callback):
    """A callback that acts every `every_steps` env steps (at the first iteration end at or
    past each multiple, counted from the run's start, so a continued run keeps the beat)."""

    def __init__(self, every_steps: int):
        if isinstance(every_steps, bool) or not isinstance(every_steps, int) or every_steps < 1:
            raise ConfigError(f"every_steps must be a positive whole number, got "
                              f"{every_steps!r:.40}")
        self.every_steps = every_steps
        self._next = every_steps

    def _due(self, step: int) -> bool:
        """Whether a multiple of every_steps was reached at `step` (and move past it)."""
        due = step >= self._next
        while self._next <= step:
            self._next += self.every_steps
        return due

    def on_training_start(self, info: Info) -> None:
        self._due(info.global_step)


class EvalCallback(_EverySteps):
    """An evaluation every `every_steps` env steps on `env` (None: the run's own env, as
    trustrl.evaluate plays it), its mean kept in `results` [(global_step, mean, std)] and
    set as info.evaluation for the callbacks after it; the best agent so far saved to
    `best_path` (None: <run>/best_eval/agent.pt, with eval.json beside it).

    Args:
        env: the env to evaluate on (any form trustrl.evaluate takes; None: the run's own).
        every_steps: env steps between evaluations.
        episodes: episodes per evaluation.
        deterministic: greedy (True) or sampled (False) actions.
        best_path: where the best agent goes.
    """

    def __init__(self, env: Any = None, every_steps: int = 10_000, episodes: int = 10,
                 deterministic: bool = True, best_path: str | Path | None = None):
        super().__init__(every_steps)
        self.env, self.episodes = env, episodes
        self.deterministic, self.best_path = deterministic, best_path
        self.results: list[tuple[int, float, float]] = []
        self.best = -np.inf

    def on_iteration_end(self, info: Info) -> bool | None:
        from trustrl.collect.evaluate import EVAL_SEED_OFFSET, evaluate
        from trustrl.envs.factory import env_factory
        from trustrl.util.safeio import atomic_write_bytes

        if not self._due(info.global_step):
            return None
        agent = info.agent
        env = self.env if self.env is not None else env_factory(info.config)
        returns = evaluate(agent, env, self.episodes, self.deterministic,
                           seed=info.config.seed + EVAL_SEED_OFFSET,
                           max_steps=info.config.eval_max_steps)
        mean, std = float(returns.mean()), float(returns.std())
        self.results.append((info.global_step, mean, std))
        info.evaluation = returns
        if mean > self.best:
            self.best = mean
            path = Path(self.best_path) if self.best_path is not None else \
                info.run_dir / "best_eval" / "agent.pt"
            path.parent.mkdir(parents=True, exist_ok=True)
            agent.save(path)
            atomic_write_bytes(path.parent / "eval.json", (json.dumps(
                {"global_step": info.global_step, "mean": mean, "std": std,
                 "returns": returns.tolist()}, indent=2) + "\n").encode())
        return None


class StopOnReward(Callback):
    """Stop once an evaluation's mean return (info.evaluation: the run's own evaluations,
    every eval_every iterations, or an EvalCallback's earlier in the list) reaches
    `threshold` (SB3's StopTrainingOnRewardThreshold).

    Args:
        threshold: the mean return that stops the run.
    """

    def __init__(self, threshold: float):
        self.threshold = float(threshold)

    def on_iteration_end(self, info: Info) -> bool | None:
        if info.evaluation is not None and _mean(info.evaluation) >= self.threshold:
            return False
        return None


class StopOnNoImprovement(Callback):
    """Stop after `patience` evaluations in a row that do not beat the best mean return so
    far by more than `min_delta` (SB3's StopTrainingOnNoModelImprovement); the first
    `min_evals` evaluations never stop the run.

    Args:
        patience: evaluations in a row without improvement that stop the run.
        min_delta: the least gain over the best mean that counts as an improvement.
        min_evals: evaluations that never stop the run (a warm-up).
    """

    def __init__(self, patience: int = 5, min_delta: float = 0.0, min_evals: int = 0):
        self.patience, self.min_delta, self.min_evals = patience, float(min_delta), min_evals
        self.best = -np.inf
        self.evals = self.stale = 0

    def on_iteration_end(self, info: Info) -> bool | None:
        if info.evaluation is None:
            return None
        mean = _mean(info.evaluation)
        self.evals += 1
        if mean > self.best + self.min_delta:
            self.best, self.stale = mean, 0
            return None
        self.stale += 1
        if self.evals > self.min_evals and self.stale >= self.patience:
            return False
        return None


class CheckpointCallback(_EverySteps):
    """The agent every `every_steps` env steps as <path>/agent_<global step>.pt (path None:
    <run>/checkpoints/agents), keeping the last `keep` (None: all). Agent files load with
    trustrl.Agent.load; the resumable checkpoint history is the config key checkpoint_keep.

    Args:
        every_steps: env steps between two agent files.
        keep: how many of the latest files to keep (None: all).
        path: the folder of the files.
    """

    def __init__(self, every_steps: int, keep: int | None = None,
                 path: str | Path | None = None):
        super().__init__(every_steps)
        if keep is not None and (not isinstance(keep, int) or keep < 1):
            raise ConfigError(f"keep must be a positive whole number or None, got {keep!r:.40}")
        self.keep, self.path = keep, path
        self.saved: list[Path] = []

    def on_iteration_end(self, info: Info) -> bool | None:
        if not self._due(info.global_step):
            return None
        folder = Path(self.path) if self.path is not None else \
            info.run_dir / "checkpoints" / "agents"
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"agent_{info.global_step}.pt"
        info.agent.save(target)
        self.saved.append(target)
        while self.keep is not None and len(self.saved) > self.keep:
            self.saved.pop(0).unlink(missing_ok=True)
        return None


__all__ = ["Callback", "CheckpointCallback", "EvalCallback", "Info", "StopOnNoImprovement",
           "StopOnReward", "as_callbacks", "wants_rollouts"]
