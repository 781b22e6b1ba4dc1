"""Generalized advantage estimation with terminated and truncated kept apart."""

from __future__ import annotations

import torch
from torch import Tensor


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
    not_term = 1.0 - terminated.to(values.dtype)
    not_done = 1.0 - (terminated.bool() | truncated.bool()).to(values.dtype)
    deltas = rewards + gamma * not_term * next_values - values
    advantages = torch.zeros_like(values)
    last = torch.zeros_like(values[0])
    for t in range(values.shape[0] - 1, -1, -1):
        last = deltas[t] + gamma * lam * not_done[t] * last
        advantages[t] = last
    return advantages, advantages + values
