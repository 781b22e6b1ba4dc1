"""The batched learner with the handles the tests use: `Pop(cfg, seeds, ...)` builds it with
the old engine's switches (clip, autograd, numpy_rollout, compile, graph), `iterate()` returns
the device tensors (metrics [P, columns], done, returns, lengths), `evaluate()` a tensor, and
the collector's carried state reads as attributes."""

from __future__ import annotations

import dataclasses
from typing import Any

from trustrl.learn.learners import BatchedLearner
from trustrl.settings.config import CONFIGS


def with_algo(cfg: Any, algo: str) -> Any:
    """The same settings under another algorithm's config class (fields both have)."""
    cls = CONFIGS[algo]
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in dataclasses.asdict(cfg).items() if k in names})


class Pop(BatchedLearner):
    def __init__(self, cfg: Any, seeds: list[int], clip: bool = True, autograd: bool = False,
                 numpy_rollout: bool | None = None, compile: bool = False,
                 graph: bool = False, algo: str | None = None):
        if algo is None:
            algo = (("ppo" if clip else "ppo-noclip") if cfg.algo in ("ppo", "ppo-noclip")
                    else cfg.algo)
        cfg = with_algo(cfg, algo)
        changes: dict[str, Any] = {}
        if autograd:
            changes["grad_backend"] = "autograd"
        if compile:
            changes["jit"] = "compile"
        if graph:
            changes["jit"] = "cuda-graph"
        cfg = dataclasses.replace(cfg, **changes)
        super().__init__(cfg, seeds, numpy_rollout=numpy_rollout)

    def iterate(self):  # type: ignore[override]
        return self.step()

    def evaluate(self, episodes: int):  # type: ignore[override]
        return self.collector.evaluate(episodes)

    def __getattr__(self, name: str) -> Any:
        if name in ("env_state", "obs", "ep_ret", "obs_mean", "obs_var", "ret_var", "elapsed",
                    "_np_env", "D", "P", "N", "T", "obs_count", "ret_mean", "disc_return"):
            return getattr(self.collector, name)
        raise AttributeError(name)
