"""Generalized advantage estimation with terminated and truncated kept apart.

The recursion is written once, `gae_step` (elementwise) and `gae_into` (the backward loop),
over a free array namespace ``o`` (torch here; read ``o.zeros_like`` as torch's), as
trustrl.maths.losses' terms are: `gae` runs it on torch tensors (any device), `gae_numpy` on NumPy
arrays (the batched collector's CPU path: a NumPy operation on a few numbers costs a third of
a torch one's dispatch), and the compiled backend compiles the same code with Numba over
trustrl.compute.compiled.xp (trustrl.compute.compiled.kernels.gae_into). The three compute the same
float operations in the same order, so the same bits (tests/test_compiled.py, tests/test_fast.py;
tests/test_one_source.py checks that each is this function's code).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from trustrl.util.rebind import rebound

o: Any = torch
"""The array namespace of the functions below (see the module's docstring)."""


def gae_step(last: Any, reward: Any, value: Any, next_value: Any, not_term: Any,
             not_done: Any, gamma: Any, gamma_lam: Any) -> Any:
    """One step of GAE's backward recursion, elementwise: A_t from A_{t+1} = `last`,

        delta_t = r_t + gamma * (1 - terminated_t) * next_value_t - value_t
        A_t     = delta_t + gamma * lam * (1 - done_t) * A_{t+1},  done = terminated | truncated

    with not_term = 1 - terminated and not_done = 1 - done as numbers (0 or 1). The easy
    mistake: bootstrapping through a truncation with not_done (a time limit is not the end of
    the world), or carrying the trace across it with not_term (the next row is another
    episode's)."""
    return reward + gamma * not_term * next_value - value + gamma_lam * not_done * last


def gae_into(adv: Any, rewards: Any, values: Any, next_values: Any, not_term: Any,
             not_done: Any, gamma: Any, gamma_lam: Any) -> Any:
    """GAE over [T, M] arrays written into `adv` [T, M] (and returned): `gae_step` from the
    last row back, A_T = 0. not_term and not_done are [T, M] numbers of the values' dtype;
    gamma and gamma_lam (= gamma * lambda) scalars (of the values' dtype in compiled code,
    where a float64 scalar would promote float32 arithmetic)."""
    last = o.zeros_like(values[0])
    for t in range(values.shape[0] - 1, -1, -1):
        last = gae_step(last, rewards[t], values[t], next_values[t], not_term[t], not_done[t],
                        gamma, gamma_lam)
        adv[t] = last
    return adv


def normalize_advantages(adv: Any, eps: Any = 1e-8) -> Any:
    """(A - mean) / (std + eps) over the last axis (each member's batch or minibatch), the
    std unbiased (torch's default, as CleanRL's); fewer than two samples are left as they are.
    PPO.loss runs it on [P, M] tensors, the compiled minibatch step on a member's [1, M]
    (``o.mean`` and ``o.std`` over the last axis, eps of the array's dtype)."""
    if adv.shape[-1] < 2:
        return adv
    return (adv - o.mean(adv, -1)[..., None]) / (o.std(adv, -1)[..., None] + eps)


def done_masks(terminated: Any, truncated: Any, dtype: Any) -> tuple[Any, Any]:
    """not_term = 1 - terminated and not_done = 1 - (terminated | truncated) as arrays of
    `dtype` from boolean (or 0/1) flags, on torch or NumPy."""
    if isinstance(terminated, torch.Tensor):
        term, trunc = terminated.bool(), truncated.bool()
        return (~term).to(dtype), (~(term | trunc)).to(dtype)
    term, trunc = terminated.astype(bool), truncated.astype(bool)
    return (~term).astype(dtype), (~(term | trunc)).astype(dtype)


def gae(
    rewards: Tensor,
    values: Tensor,
    next_values: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    gamma: float,
    lam: float,
) -> tuple[Tensor, Tensor]:
    """GAE(gamma, lambda) on [T, N] tensors; returns (advantages, returns), both [T, N].

    next_values[t] is V(s_{t+1}) for the state the step actually reached: on a truncated step
    it is V(final observation), not V of the reset observation that follows.

        delta_t = r_t + gamma * (1 - terminated_t) * next_values_t - values_t
        A_t     = delta_t + gamma * lam * (1 - done_t) * A_{t+1},  done = terminated | truncated

    The bootstrap uses not-terminated (a time limit is not the end of the world); the trace is
    cut on both (the next row belongs to another episode). lam=1 gives discounted returns minus
    V; lam=0 gives one-step TD errors. returns = advantages + values (the critic's targets).
    """
    not_term, not_done = done_masks(terminated, truncated, values.dtype)
    advantages = gae_into(torch.empty_like(values), rewards, values, next_values, not_term,
                          not_done, gamma, gamma * lam)
    return advantages, advantages + values


_NUMPY = rebound("_trustrl_advantages_numpy", "trustrl.maths.advantages over NumPy", globals(),
                 (gae_step, gae_into), {"o": np})


def gae_numpy(rewards: Tensor, values: Tensor, next_values: Tensor, terminated: Tensor,
              truncated: Tensor, gamma: float, lam: float) -> tuple[Tensor, Tensor]:
    """`gae` on CPU tensors, with `gae_into` run over NumPy: the same float operations in the
    same order (so the same bits), at a third of the cost per step."""
    v = values.numpy()
    not_term, not_done = done_masks(terminated.numpy(), truncated.numpy(), v.dtype)
    adv = _NUMPY.gae_into(np.empty_like(v), rewards.numpy(), v, next_values.numpy(), not_term,
                          not_done, gamma, gamma * lam)
    a = torch.from_numpy(adv)
    return a, a + values
