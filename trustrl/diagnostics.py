"""The numbers that tell whether a trust region holds: pure functions of tensors.

All take log_ratio = log pi_theta(a|s) - log pi_old(a|s) for actions sampled from pi_old.
"""

from __future__ import annotations

import torch
from torch import Tensor


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
