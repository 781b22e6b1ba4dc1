"""The KL leash to pi_ref: per-token estimators and the adaptive coefficient of Ziegler et al.

Samples come from the policy pi; the leash is KL(pi || pi_ref). With log_ratio = log pi_ref(a)
- log pi(a) (note the order: reference over policy) the three estimators of Schulman's note are

    k1 = -log_ratio                 unbiased, can be negative per sample
    k2 = log_ratio^2 / 2            biased (exact only to second order), >= 0
    k3 = (e^log_ratio - 1) - log_ratio   unbiased and >= 0 per sample

k1 and k3 are the core's `trustrl.maths.diagnostics.kl_k1/kl_k3` (written for KL(pi_old || pi) with
samples from pi_old: the same formulas with pi_old -> pi and pi -> pi_ref).

Which estimator optimises which KL depends on where it goes (Tang & Munos 2025, "On a few
pitfalls in KL divergence gradient estimation for RL"). Let k1 = log pi - log pi_ref, a ~ pi.

- In the reward (a number, no gradient through it): the update follows E_pi[grad log pi * k].
  That is grad KL(pi || pi_ref) for k1 only. With k2 or k3 it is the gradient of no KL (the
  bandit collapses onto the best arm), so those combinations are refused. With returns over the
  answer (PPO's GAE with gamma = 1, GRPO's summed sequence penalty) the gradient is the full one
  of the sequence KL: a token's log-prob also pays for the later tokens' penalties.
- In the loss (differentiated at the sampled token): grad k1 = grad log pi, whose mean under pi
  is 0 (no leash: refused); grad k2 = k1 * grad log pi, mean grad KL(pi || pi_ref); grad k3 =
  (1 - pi_ref / pi) grad log pi, mean grad KL(pi_ref || pi): the REVERSE direction. Summed over
  tokens, a loss-placed KL is the gradient of each token's KL at the states reached, with those
  states held fixed: it ignores how earlier tokens change the distribution of later ones, a
  partial gradient of the sequence KL (exact for one token).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from trustrl.maths.diagnostics import kl_k1, kl_k3
from trustrl.util.errors import ConfigError

KL_ESTIMATORS = ("k1", "k2", "k3")
KL_PLACEMENTS = ("reward", "loss")

# (placement, estimator) -> what its gradient is, or why it is refused
KL_OPTIONS: dict[tuple[str, str], str] = {
    ("reward", "k1"): "k1 in the reward: gradient of the sequence KL(pi || pi_ref), full (later "
                      "tokens' penalties reach earlier tokens through the return)",
    ("loss", "k2"): "k2 in the loss: per-token gradient of KL(pi || pi_ref); partial over a "
                    "sequence (ignores how earlier tokens change later tokens' distributions)",
    ("loss", "k3"): "k3 in the loss: per-token gradient of KL(pi_ref || pi), the reverse "
                    "direction; partial over a sequence",
}
_REFUSED: dict[tuple[str, str], str] = {
    ("reward", "k2"): "k2 in the reward optimises no KL: the penalty enters without its gradient, "
                      "so the update follows E_pi[grad log pi * k2], the gradient of "
                      "KL(pi || pi_ref) only for k1; use k1 in the reward (or k2 in the loss)",
    ("reward", "k3"): "k3 in the reward optimises no KL: the penalty enters without its gradient, "
                      "so the update follows E_pi[grad log pi * k3], the gradient of "
                      "KL(pi || pi_ref) only for k1; use k1 in the reward (or k2 in the loss)",
    ("loss", "k1"): "k1 in the loss is no leash: its gradient grad log pi has mean 0 under pi; "
                    "use k2 (gradient of KL(pi || pi_ref)) or k3 (of KL(pi_ref || pi)) in the "
                    "loss, or k1 in the reward",
}


def kl_k2(log_ratio: Tensor) -> Tensor:
    """Per-sample k2 = (log r)^2 / 2: low variance, >= 0, biased when the policies differ."""
    return 0.5 * log_ratio**2


def check_estimator(name: str) -> str:
    if name not in KL_ESTIMATORS:
        raise ConfigError(f"unknown KL estimator {name!r}; use one of {', '.join(KL_ESTIMATORS)}")
    return name


def check_kl_option(placement: str, estimator: str) -> str:
    """The honest description of a (placement, estimator) pair; a ConfigError for an unknown
    name or for a pair whose gradient is that of no KL."""
    check_estimator(estimator)
    if placement not in KL_PLACEMENTS:
        raise ConfigError(f"unknown kl_placement {placement!r}; use one of "
                          f"{', '.join(KL_PLACEMENTS)}")
    if (placement, estimator) in _REFUSED:
        raise ConfigError(_REFUSED[(placement, estimator)])
    return KL_OPTIONS[(placement, estimator)]


def kl_to_ref(logp: Tensor, logp_ref: Tensor, estimator: str = "k1") -> Tensor:
    """Per-token estimate of KL(pi || pi_ref) from log-probs of tokens sampled from pi (its
    value; what its gradient optimises depends on the placement, see the module docstring)."""
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
        if beta == 0:
            raise ConfigError("the adaptive KL controller needs an initial beta > 0: it is "
                              "multiplicative, so from beta = 0 it can never move")
        if target <= 0:
            raise ConfigError(f"the KL target must be positive, got {target}")
        if horizon <= 0:
            raise ConfigError(f"the KL controller horizon must be positive, got {horizon}")
        self.beta, self.target, self.horizon = float(beta), float(target), float(horizon)

    def update(self, kl: float, n_samples: int) -> float:
        error = min(max(kl / self.target - 1.0, -0.2), 0.2)
        self.beta *= 1.0 + error * n_samples / self.horizon
        return self.beta
