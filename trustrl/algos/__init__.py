"""One readable file per algorithm, each over a population of P members (an ordinary run is
P = 1); `make_algorithm` picks one by the config's algo name. Adding one: docs/architecture.md,
"Adding an algorithm"."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from trustrl.algos.common import Algorithm
from trustrl.compute.backends import Backend
from trustrl.nets.popnet import PopNet


def algorithm_class(algo: str) -> type[Algorithm]:
    """The class of an algorithm name (its `extra_columns` are the metrics.csv columns it adds,
    on every collector)."""
    from trustrl.algos.npg import NPG
    from trustrl.algos.pg import PG
    from trustrl.algos.ppo import PPO
    from trustrl.algos.ppo_dualclip import PPODualClip
    from trustrl.algos.ppo_penalty import PPOPenalty
    from trustrl.algos.spo import SPO
    from trustrl.algos.trpo import TRPO

    return {"ppo": PPO, "ppo-noclip": PPO, "ppo-penalty": PPOPenalty, "trpo": TRPO,
            "npg": NPG, "pg": PG, "ppo-dualclip": PPODualClip, "spo": SPO}[algo]


def user_class(path: str, algo: str) -> type[Algorithm]:
    """The class at import path `path` ('module:Class'), checked to be a subclass of `algo`'s
    class; ConfigError with one line where it is not."""
    from trustrl.util.errors import ConfigError
    from trustrl.util.importing import resolve

    base = algorithm_class(algo)
    cls = resolve(path, "algo_class", ConfigError)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ConfigError(f"algo_class {path!r} is not a subclass of {base.__module__}."
                          f"{base.__qualname__} (the class of algo {algo!r})")
    return cls


def make_algorithm(cfg: Any, net: PopNet, backend: Backend, keys: Tensor) -> Algorithm:
    """The config's algorithm over the population network `net`, with shuffle keys [P]."""
    cls = algorithm_class(cfg.algo)
    if getattr(cfg, "algo_class", None):
        cls = user_class(cfg.algo_class, cfg.algo)
    if cfg.algo in ("ppo", "ppo-noclip"):
        return cls(net, cfg, backend, keys, clip=cfg.algo == "ppo")  # type: ignore[call-arg]
    return cls(net, cfg, backend, keys)  # type: ignore[call-arg]


__all__ = ["Algorithm", "algorithm_class", "make_algorithm", "user_class"]
