"""The KL leash to pi_ref: per-token estimators and the adaptive coefficient of Ziegler et al.

Samples come from the policy pi; the leash is KL(pi || pi_ref). With log_ratio = log pi_ref(a)
- log pi(a) (note the order: reference over policy) the three estimators of Schulman's note are

    k1 = -log_ratio                 unbiased, can be negative per sample
    k2 = log_ratio^2 / 2            biased (exact only to second order), >= 0
    k3 = (e^log_ratio - 1) - log_ratio   unbiased and >= 0 per sample

k1 and k3 are the core's `trustrl.diagnostics.kl_k1/kl_k3` (written for KL(pi_old || pi) with
samples from pi_old: the same formulas with pi_old -> pi and pi -> pi_ref).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from trustrl.diagnostics import kl_k1, kl_k3
from trustrl.errors import ConfigError

KL_ESTIMATORS = ("k1", "k2", "k3")


def kl_k2(log_ratio: Tensor) -> Tensor:
    """Per-sample k2 = (log r)^2 / 2: low variance, >= 0, biased when the policies differ."""
    return 0.5 * log_ratio**2


def check_estimator(name: str) -> str:
    if name not in KL_ESTIMATORS:
        raise ConfigError(f"unknown KL estimator {name!r}; use one of {', '.join(KL_ESTIMATORS)}")
    return name


def kl_to_ref(logp: Tensor, logp_ref: Tensor, estimator: str = "k1") -> Tensor:
    """Per-token estimate of KL(pi || pi_ref) from log-probs of tokens sampled from pi."""
    log_ratio = logp_ref - logp
    fn = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}[check_estimator(estimator)]
    return fn(log_ratio)


def exact_kl(logits_p: Tensor, logits_q: Tensor) -> Tensor:
    """KL(p || q) over the last dimension of two logit tensors (exact, for small vocabularies)."""
    lp, lq = torch.log_softmax(logits_p, dim=-1), torch.log_softmax(logits_q, dim=-1)
    return (lp.exp() * (lp - lq)).sum(dim=-1)


class AdaptiveKLController:
    """beta <- beta * (1 + K_beta * e),  e = clip(KL / target - 1, -0.2, 0.2),  K_beta = n / H.

    Ziegler et al. (2019), section 2.2: a proportional controller on log beta. n is the number
    of samples in the batch just used and H the horizon (in samples): a KL 20% above target
    raises beta by a factor 1 + 0.2 n / H per batch. Unlike the PPO-penalty rule (x2 / ÷2), it
    moves beta smoothly, and the clip on e keeps one wild batch from throwing it off.
    """

    def __init__(self, beta: float, target: float, horizon: float):
        if beta < 0 or not math.isfinite(beta):
            raise ConfigError(f"beta must be a finite number >= 0, got {beta}")
        if target <= 0:
            raise ConfigError(f"the KL target must be positive, got {target}")
        if horizon <= 0:
            raise ConfigError(f"the KL controller horizon must be positive, got {horizon}")
        self.beta, self.target, self.horizon = float(beta), float(target), float(horizon)

    def update(self, kl: float, n_samples: int) -> float:
        error = min(max(kl / self.target - 1.0, -0.2), 0.2)
        self.beta *= 1.0 + error * n_samples / self.horizon
        return self.beta
