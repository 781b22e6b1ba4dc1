"""Greedy (or stochastic) evaluation of an agent on fresh envs with fixed seeds."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from trustrl.envs import masks
from trustrl.envs.atari import is_atari_id
from trustrl.envs.factory import EnvFactory, as_factory
from trustrl.envs.make import make_vec_env

EVAL_SEED_OFFSET = 10_000
DEFAULT_EVAL_MAX_STEPS = 10_000
"""The config key eval_max_steps' default: evaluation episodes of an env with no time limit of
its own end after this many steps."""


def own_time_limit(envs: object) -> int | None:
    """The max_episode_steps of a sync vector env's sub-envs (None: the env has no limit)."""
    sub = getattr(envs, "envs", None) or []
    spec = getattr(sub[0], "spec", None) if sub else None
    limit = getattr(spec, "max_episode_steps", None)
    return int(limit) if limit else None


def evaluation_env(env_id: Any) -> str | EnvFactory:
    """The env evaluations play: an Atari id (or a run's Atari EnvFactory) behind the
    evaluation chain of trustrl.envs.atari (whole games, raw scores); others as they are. An
    EnvFactory without `atari` stays bare (a run with atari_wrappers false)."""
    if not isinstance(env_id, (str, EnvFactory)):  # a class, a function, an env object
        env_id = as_factory(env_id)
    if isinstance(env_id, EnvFactory):
        return dataclasses.replace(env_id, atari="eval") if env_id.atari else env_id
    return EnvFactory(env_id, atari="eval") if is_atari_id(env_id) else env_id


@torch.no_grad()
def evaluate(
    agent: Any,  # a trustrl.Agent (not imported: Agent.evaluate calls this module)
    env_id: Any,
    episodes: int = 10,
    deterministic: bool = True,
    seed: int = EVAL_SEED_OFFSET,
    max_parallel: int = 32,
    max_steps: int = DEFAULT_EVAL_MAX_STEPS,
    action_mask: str = "auto",
) -> np.ndarray:
    """Returns of `episodes` episodes, episode i started from reset(seed=seed + i).

    An env with no time limit of its own (no max_episode_steps in its spec) has its episodes
    cut after `max_steps` steps (the config key eval_max_steps), so that a policy that never
    reaches a terminal state cannot make the evaluation run for ever. Atari games are played
    whole with raw scores (`evaluation_env`).

    The agent's normaliser is frozen for the evaluation. Greedy acts at the mode (argmax or the
    Gaussian mean); stochastic samples, from torch's generator seeded with `seed` for the
    evaluation and restored after it: the same agent gets the same returns, and the caller's
    random stream (a training run's) is left as it was.

    Args:
        agent: a trustrl.Agent (or anything with its `act`).
        env_id: the env as trustrl takes it everywhere: a Gymnasium id, 'module:Name', an env
            class or function, a gymnasium.Env or vector env object (played on deep copies of
            it, or remade from its spec: trustrl.envs.objects), or an EnvFactory (kwargs and
            wrappers).
        episodes: how many episodes.
        deterministic: greedy actions (True) or sampled ones (False).
        seed: episode i resets with seed + i; sampled actions draw from torch seeded with it.
        max_parallel: at most this many episodes played at once (one vector env).
        max_steps: the step cap of an env with no time limit of its own.
        action_mask: 'auto', 'on' or 'off' (the config key): the env's action masks, where it
            gives them (trustrl.envs.masks), restrict the actions as in training.

    Returns:
        The `episodes` returns, float64, in episode order.
    """
    if deterministic:
        return _evaluate(agent, env_id, episodes, True, seed, max_parallel, max_steps,
                         action_mask)
    # manual_seed seeds every CUDA device too: fork (and so restore) each one in use
    cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(seed)
        return _evaluate(agent, env_id, episodes, False, seed, max_parallel, max_steps,
                         action_mask)


def _evaluate(agent: Any, env_id: Any, episodes: int, deterministic: bool,
              seed: int, max_parallel: int, max_steps: int, mask_mode: str = "auto"
              ) -> np.ndarray:
    agent = agent.frozen()
    env_id = evaluation_env(env_id)
    returns: list[float] = []
    for first in range(0, episodes, max_parallel):
        n = min(max_parallel, episodes - first)
        envs = make_vec_env(env_id, n, "sync")
        try:
            obs, info = envs.reset(seed=[seed + first + i for i in range(n)])
            # the env's action masks, read as the training run reads them (action_mask
            # 'auto': wherever the env gives them)
            source = masks.find_source(envs, info) if mask_mode != "off" else None
            source = masks.resolve(mask_mode, source, agent.spec.action, "the evaluation env")
            cap = max_steps if own_time_limit(envs) is None else None
            total = np.zeros(n)
            running = np.ones(n, bool)
            steps = 0
            # a recurrent policy's state, from the episodes' starts (Agent.step_dist)
            state, started = None, None
            while running.any():
                mask = None if source is None else torch.as_tensor(masks.read_masks(
                    envs, source, info, agent.spec.action, "the evaluation env"),
                    device=agent.device)
                d, state = agent.step_dist(agent.obs_tensor(obs), mask, state, started)
                action = agent.env_action(d.mode() if deterministic else d.sample())
                obs, reward, term, trunc, info = envs.step(action)
                started = np.logical_or(term, trunc)
                total += np.where(running, reward, 0.0)
                running &= ~np.logical_or(term, trunc)
                steps += 1
                if cap is not None and steps >= cap:
                    break
            returns.extend(total.tolist())
        finally:
            envs.close()
    return np.asarray(returns)
