"""The numbers that tell whether a trust region holds: pure functions of tensors.

The KL and ratio functions take log_ratio = log pi_theta(a|s) - log pi_old(a|s) for actions
sampled from pi_old. `critic_stats` and `episode_stats`, the learner's per-member metrics, are
written once over a free array namespace ``o`` (torch here): the batched learner runs them on
torch tensors and the compiled iteration compiles the same code with Numba
(tests/test_one_source.py).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

o: Any = torch
"""The array namespace of `critic_stats` and `episode_stats`."""


def critic_stats(values_old: Any, returns: Any, nan: Any) -> tuple[Any, Any]:
    """Per member [P], from V_old and the returns [P, B] (float64): the explained variance
    1 - Var[R - V_old] / Var[R] (`nan` where Var[R] = 0: nothing to explain) and the fresh
    value loss 1/2 mean (V_old - R)^2 (the critic on data it has not been trained on yet: it
    rises when the critic overfits). Variances are population ones (over B, not B - 1)."""
    B = returns.shape[1]
    err = returns - values_old
    dev_r = returns - (returns.sum(1) / B)[:, None]
    dev_e = err - (err.sum(1) / B)[:, None]
    var_r = (dev_r * dev_r).sum(1) / B
    var_e = (dev_e * dev_e).sum(1) / B
    explained = o.where(var_r > 0, 1.0 - var_e / o.where(var_r > 0, var_r, 1.0), nan)
    return explained, 0.5 * (err * err).sum(1) / B


def episode_stats(done: Any, fin_ret: Any, fin_len: Any, nan: Any) -> tuple[Any, Any, Any]:
    """Per member [P], from a rollout's [T, P, N] records (done: the episode ended at that
    step; fin_ret, fin_len: its return and length there, float64): how many episodes ended,
    their mean return and mean length (`nan` where none ended)."""
    n_ep = done.sum(0).sum(1)
    ret_sum = o.where(done, fin_ret, 0.0 * fin_ret).sum(0).sum(1)
    len_sum = o.where(done, fin_len, 0.0 * fin_len).sum(0).sum(1)
    denom = o.where(n_ep > 0, n_ep, 1)
    return n_ep, o.where(n_ep > 0, ret_sum / denom, nan), o.where(n_ep > 0, len_sum / denom, nan)


def kl_k1(log_ratio: Tensor) -> Tensor:
    """Per-sample k1 = -log rho. Unbiased for KL(pi_old || pi_theta); can be negative."""
    return -log_ratio


def kl_k3(log_ratio: Tensor) -> Tensor:
    """Per-sample k3 = (rho - 1) - log rho. Unbiased, and >= 0 for every sample."""
    return torch.expm1(log_ratio) - log_ratio


def approx_kl(log_ratio: Tensor, estimator: str = "k3") -> float:
    """Batch estimate of KL(pi_old || pi_theta) with k1 or k3 (what PPO logs as approx KL)."""
    with torch.no_grad():
        if estimator == "k3":
            return float(kl_k3(log_ratio).mean())
        if estimator == "k1":
            return float(kl_k1(log_ratio).mean())
    raise ValueError(f"unknown KL estimator {estimator!r}; use 'k1' or 'k3'")


def clip_fraction(ratio: Tensor, clip_eps: float) -> float:
    """Fraction of samples with |rho - 1| > eps: how many ran into the edge of the band.

    Compared against the band edges exactly as torch.clamp sees them (not via |rho - 1|, whose
    rounding would count a ratio sitting on 1 + eps as clipped).
    """
    with torch.no_grad():
        outside = (ratio > 1.0 + clip_eps) | (ratio < 1.0 - clip_eps)
        return float(outside.float().mean())


def explained_variance(predicted: Tensor, target: Tensor) -> float:
    """1 - Var[target - predicted] / Var[target]; 1 is perfect, 0 is a constant, < 0 is worse.

    Returns nan when the target has zero variance (nothing to explain).
    """
    with torch.no_grad():
        var_y = torch.var(target, unbiased=False)
        if float(var_y) == 0.0:
            return float("nan")
        return float(1.0 - torch.var(target - predicted, unbiased=False) / var_y)


RATIO_QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


def ratio_stats(ratio: Tensor) -> dict[str, float]:
    """min, max and the 5/25/50/75/95% quantiles of the ratio: how far samples left 1."""
    with torch.no_grad():
        r = ratio.detach().flatten().double()
        q = torch.quantile(r, torch.tensor(RATIO_QUANTILES, dtype=torch.float64))
        out = {"ratio_min": float(r.min()), "ratio_max": float(r.max())}
        for p, v in zip(RATIO_QUANTILES, q.tolist(), strict=True):
            out[f"ratio_q{int(round(p * 100)):02d}"] = v
        return out
