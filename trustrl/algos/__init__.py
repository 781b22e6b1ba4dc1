"""One readable file per algorithm; `make_algorithm` picks one by the config's algo name."""

from __future__ import annotations

from typing import Any

from trustrl.algos.common import Algorithm
from trustrl.policies import ActorCritic


def make_algorithm(cfg: Any, policy: ActorCritic) -> Algorithm:
    from trustrl.algos.npg import NPG
    from trustrl.algos.pg import PG
    from trustrl.algos.ppo import PPO
    from trustrl.algos.ppo_penalty import PPOPenalty
    from trustrl.algos.trpo import TRPO

    builders = {
        "ppo": lambda: PPO(policy, cfg),
        "ppo-noclip": lambda: PPO(policy, cfg, clip=False),
        "ppo-penalty": lambda: PPOPenalty(policy, cfg),
        "trpo": lambda: TRPO(policy, cfg),
        "npg": lambda: NPG(policy, cfg),
        "pg": lambda: PG(policy, cfg),
    }
    return builders[cfg.algo]()


def algorithm_class(algo: str) -> type:
    """The class of an algorithm name (its `extra_columns` are the metrics.csv columns it adds,
    on every collector)."""
    from trustrl.algos.pg import PG
    from trustrl.algos.ppo import PPO
    from trustrl.algos.ppo_penalty import PPOPenalty
    from trustrl.algos.trpo import TRPO

    # NPG is TRPO without the line search (algos/npg.py builds a TRPO)
    return {"ppo": PPO, "ppo-noclip": PPO, "ppo-penalty": PPOPenalty, "trpo": TRPO,
            "npg": TRPO, "pg": PG}[algo]


__all__ = ["Algorithm", "algorithm_class", "make_algorithm"]
