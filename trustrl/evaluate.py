"""Greedy (or stochastic) evaluation of an agent on fresh envs with fixed seeds."""

from __future__ import annotations

import numpy as np
import torch

from trustrl.agent import Agent
from trustrl.envs.make import make_vec_env

EVAL_SEED_OFFSET = 10_000


@torch.no_grad()
def evaluate(
    agent: Agent,
    env_id: str,
    episodes: int = 10,
    deterministic: bool = True,
    seed: int = EVAL_SEED_OFFSET,
    max_parallel: int = 32,
) -> np.ndarray:
    """Returns of `episodes` episodes, episode i started from reset(seed=seed + i).

    The agent's normaliser is frozen for the evaluation. Greedy acts at the mode (argmax or the
    Gaussian mean); stochastic samples and so uses the global torch RNG.
    """
    agent = agent.frozen()
    returns: list[float] = []
    for first in range(0, episodes, max_parallel):
        n = min(max_parallel, episodes - first)
        envs = make_vec_env(env_id, n, "sync")
        try:
            obs, _ = envs.reset(seed=[seed + first + i for i in range(n)])
            total = np.zeros(n)
            running = np.ones(n, bool)
            while running.any():
                d = agent.policy.dist(agent.obs_tensor(obs))
                action = agent.env_action(d.mode() if deterministic else d.sample())
                obs, reward, term, trunc, _ = envs.step(action)
                total += np.where(running, reward, 0.0)
                running &= ~np.logical_or(term, trunc)
            returns.extend(total.tolist())
        finally:
            envs.close()
    return np.asarray(returns)
