"""The action distributions trustrl's policies produce, with analytic entropy and KL:
Categorical (Discrete), DiagGaussian (Box), MultiCategorical (MultiDiscrete: independent
categoricals) and Bernoulli (MultiBinary: independent bits).

Small classes instead of torch.distributions: no argument validation on the hot path, log-probs
already summed over action dimensions, and an exact KL for the trust-region code.

Action masks (Discrete and MultiDiscrete): `mask_logits` / `masked_log_softmax` are the one
place where invalid actions are taken out; Categorical and MultiCategorical take the mask, so
their log-prob, entropy, KL, samples and mode are over the valid actions only.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

from trustrl.util.rebind import rebound

_LOG_2PI = math.log(2.0 * math.pi)
HALF_LOG_2PI = 0.5 * _LOG_2PI
"""log(2 pi) / 2, the Gaussian's normalising constant per dimension."""

o: Any = torch
"""The array namespace of the one-source functions below (Gaussian densities, the
categorical's log-softmax, entropy and KL)."""


# --- the diagonal Gaussian's densities, written once ------------------------------------------
# Elementwise, per action dimension (a Gaussian's log-prob, entropy and KL are their sums over
# the dimensions): torch runs them on whole tensors (DiagGaussian here, trustrl.nets.popnet), NumPy
# on arrays (the batched collector's CPU rollout) and compiled code on scalars inside its loops
# (trustrl.compute.compiled: the rollouts, PPO's epochs, the diagnostics), from this source
# (tests/test_one_source.py). half, one, two and half_log_2pi are numbers of the arrays' dtype
# in compiled code (a float64 constant would promote float32 arithmetic).

def gaussian_log_density(x: Any, mean: Any, log_std: Any, inv_std: Any, half: Any,
                         half_log_2pi: Any) -> Any:
    """log N(x; mean, std^2) for one dimension, with inv_std = exp(-log_std): -z^2 / 2 -
    log std - log(2 pi) / 2, z = (x - mean) / std. The easy mistake: dropping -log std
    (harmless for a fixed std, wrong once the std is learned)."""
    z = (x - mean) * inv_std
    return (-(z * z) * half - log_std) - half_log_2pi


def gaussian_entropy_density(log_std: Any, half: Any, half_log_2pi: Any) -> Any:
    """The entropy of N(mean, std^2) for one dimension: 1/2 + log(2 pi) / 2 + log std."""
    return (half + half_log_2pi) + log_std


def gaussian_kl_density(mean_p: Any, log_std_p: Any, mean_q: Any, log_std_q: Any,
                        inv_std_q: Any, var_ratio: Any, half: Any, one: Any, two: Any) -> Any:
    """KL(N(mean_p, std_p^2) || N(mean_q, std_q^2)) for one dimension, with inv_std_q =
    exp(-log_std_q) and var_ratio = std_p^2 / std_q^2 = exp(2 (log_std_p - log_std_q)):
    (var_ratio + ((mean_p - mean_q) / std_q)^2 - 1 - 2 (log_std_p - log_std_q)) / 2. The easy
    mistake: the arguments' order (KL is not symmetric; PPO's diagnostics take pi_old as p)."""
    t = (mean_p - mean_q) * inv_std_q
    return half * (var_ratio + t * t - one - two * (log_std_p - log_std_q))


def gaussian_var_ratio(log_std_p: Any, log_std_q: Any, two: Any) -> Any:
    """std_p^2 / std_q^2 = exp(2 (log_std_p - log_std_q)), elementwise."""
    return o.exp(two * (log_std_p - log_std_q))


# --- the diagonal Gaussian's derivatives in its mean and log-std, written once ---------------
# Elementwise, per action dimension and sample, each scaled by the loss's derivative g in the
# term: torch runs them on [P, B, n] tensors (trustrl.nets.popnet's log_prob_backward,
# entropy_backward, kl_backward: the closed form), compiled code on float32 scalars in PPO's
# minibatch step (trustrl.compute.compiled.ppo); the log-std's are summed over the samples by
# the caller (tests/test_one_source.py; tests/test_backends.py holds them to autograd).

def gaussian_logp_grad_mean(g: Any, z: Any, inv_std: Any) -> Any:
    """g d log N(x; mean, std^2) / d mean = g z / std, with z = (x - mean) / std."""
    return g * z * inv_std


def gaussian_logp_grad_log_std(g: Any, z: Any, one: Any) -> Any:
    """g d log N(x; mean, std^2) / d log std = g (z^2 - 1). The easy mistake: dropping the
    -1 of d(-log std)."""
    return g * (z * z - one)


def gaussian_entropy_grad_log_std(g: Any) -> Any:
    """g dH / d log std = g: the entropy 1/2 + log(2 pi) / 2 + log std has slope 1 (and none
    in the mean)."""
    return g


def gaussian_kl_grad_mean(g: Any, diff: Any, inv_var: Any) -> Any:
    """g d KL(p || q) / d mean_q = g (mean_q - mean_p) / var_q, with diff = mean_q - mean_p
    (PPO's KL penalty: p is pi_old, q the policy being updated)."""
    return g * diff * inv_var


def gaussian_kl_grad_log_std(g: Any, diff: Any, inv_var: Any, var_p: Any, one: Any) -> Any:
    """g d KL(p || q) / d log std_q = g (1 - (var_p + (mean_q - mean_p)^2) / var_q). The easy
    mistake: differentiating in p's parameters."""
    return g * (one - (var_p + diff * diff) * inv_var)


GAUSSIAN_GRADS = ("gaussian_logp_grad_mean", "gaussian_logp_grad_log_std",
                  "gaussian_entropy_grad_log_std", "gaussian_kl_grad_mean",
                  "gaussian_kl_grad_log_std")
"""The Gaussian's derivatives above, by name (the compiled binding's elementwise functions)."""


# --- the categorical's log-softmax, entropy and KL, written once --------------------------------
# Array functions over the last axis (the actions): compiled code runs them on a batch's rows
# (trustrl.compute.compiled: both rollouts, PPO's epochs, the diagnostics) from this source
# (tests/test_one_source.py); torch runs `categorical_entropy` and `categorical_kl` as they are
# (Categorical here, trustrl.nets.popnet), and for the log-softmax calls its fused kernel,
# torch.log_softmax, the library's implementation of the same arithmetic (`masked_log_softmax`;
# tests/test_distributions.py holds the two equal).

def log_softmax(x: Any) -> Any:
    """log softmax(x) over the last axis, shifted by the row's maximum so that exp never
    overflows: (x - max) - log sum_j exp(x_j - max). The easy mistake: no shift (exp of a
    logit of 100 is inf in float32), or a softmax followed by a log (log 0 = -inf for a very
    unlikely action, where the shifted form stays finite)."""
    shifted = x - o.amax(x, -1)[..., None]
    return shifted - o.log(o.sum(o.exp(shifted), -1))[..., None]


def categorical_entropy(logp: Any) -> Any:
    """H = -sum_a p(a) log p(a) per row, from the log-probabilities over the last axis (a
    masked action's p is exactly 0, so its finite MASKED_LOGIT-like log p adds 0)."""
    return -o.sum(o.exp(logp) * logp, -1)


def categorical_kl(logp_p: Any, logp_q: Any) -> Any:
    """KL(p || q) = sum_a p(a) (log p(a) - log q(a)) per row, exactly, from log-probabilities
    over the last axis. The easy mistake: the arguments' order (PPO's diagnostics and penalty
    take pi_old as p)."""
    return o.sum(o.exp(logp_p) * (logp_p - logp_q), -1)


# --- the categorical's derivatives in the logits, written once ---------------------------------
# Elementwise, per logit k (each scaled by the loss's derivative g in the term, so that a
# binding computes the product in one order): torch runs them on [P, B, n] tensors
# (trustrl.nets.popnet's log_prob_backward, entropy_backward, kl_backward: the closed form),
# compiled
# code on float32 scalars in PPO's epoch loop (trustrl.compute.compiled.ppo), from this source
# (tests/test_one_source.py; tests/test_backends.py holds them to autograd).

def categorical_logp_grad(g: Any, onehot: Any, prob: Any) -> Any:
    """g d log p(a) / d logit_k = g ([k = a] - p_k), with onehot = [k = a] and prob = p_k.
    The easy mistake: forgetting -p_k on the logits other than a's (softmax couples them)."""
    return g * (onehot - prob)


def categorical_entropy_grad(g: Any, prob: Any, logp: Any, entropy: Any) -> Any:
    """g dH / d logit_k = -g p_k (log p_k + H), with H the row's entropy."""
    return -g * prob * (logp + entropy)


def categorical_kl_grad(g: Any, prob_q: Any, prob_p: Any) -> Any:
    """g d KL(p || q) / d logit_k of q's logits = g (q_k - p_k) (PPO's KL penalty: p is
    pi_old, q the policy being updated). The easy mistake: differentiating in p's logits."""
    return g * (prob_q - prob_p)


_NUMPY = rebound("_trustrl_distributions_numpy", "trustrl.maths.distributions over NumPy",
                 globals(), (log_softmax, categorical_entropy, categorical_kl), {"o": np})
log_softmax_numpy = _NUMPY.log_softmax
"""`log_softmax` over NumPy arrays (the batched collector's NumPy rollout)."""


# --- action masks, written once -----------------------------------------------------------------
MASKED_LOGIT = -1e8
"""The logit an invalid action gets (sb3-contrib's MaskableCategorical uses the same): finite,
so that p log p = 0 * (-1e8) = 0 in the entropy and the KL and every gradient stays finite
(-inf would give 0 * inf = NaN), and low enough that exp(MASKED_LOGIT - logsumexp) is exactly 0
in float32 and float64, so an invalid action is never sampled."""


def mask_logits(logits: Tensor, mask: Tensor | None) -> Tensor:
    """The logits with every invalid action's (mask False) set to MASKED_LOGIT; mask None:
    unchanged. logits [..., n]; mask [..., n] bool, broadcastable (a MultiDiscrete mask is
    the per-dimension masks concatenated, sum(nvec) booleans, as its logits are). The
    gradient with respect to an invalid logit is 0. The easy mistake: a row with no valid
    action (a uniform distribution over the invalid ones); the collectors refuse it.
    Written over ``o``: torch runs it as it is (the collectors, the backends, the
    diagnostics), compiled code on a member's [B, n] logits (trustrl.compute.compiled's
    kernels; tests/test_one_source.py)."""
    if mask is None:
        return logits
    fill = max(MASKED_LOGIT, o.finfo(logits.dtype).min / 2)  # finite in float16 too
    return o.where(mask, logits, o.full_like(logits, fill))


mask_logits_numpy = rebound("_trustrl_distributions_numpy",
                            "trustrl.maths.distributions over NumPy", globals(), (mask_logits,),
                            {"o": np, "MASKED_LOGIT": MASKED_LOGIT}).mask_logits
"""`mask_logits` over NumPy arrays (the batched collector's NumPy rollout and evaluation)."""


def masked_log_softmax(logits: Tensor, mask: Tensor | None = None) -> Tensor:
    """log pi(a|s) for every action a over the last dimension, with the probability of the
    invalid actions (mask False) exactly 0 and their log-probability MASKED_LOGIT-like (finite):
    `log_softmax` of mask_logits(logits, mask), by torch's fused kernel (the same arithmetic).
    Any log-softmax of a categorical's logits in torch goes through here, so a masked policy's
    log-probs, entropy and KL are over the valid actions."""
    return torch.log_softmax(mask_logits(logits, mask), dim=-1)


class Categorical:
    """pi(a|s) = softmax(logits) over the valid actions (mask True; mask None: all).
    logits: [B, A]; mask: [B, A] bool or None; actions: [B] integer."""

    def __init__(self, logits: Tensor, mask: Tensor | None = None):
        self.logits = masked_log_softmax(logits, mask)

    @property
    def probs(self) -> Tensor:
        return self.logits.exp()

    def sample(self) -> Tensor:
        flat = self.probs.reshape(-1, self.logits.shape[-1])
        return torch.multinomial(flat, 1).reshape(self.logits.shape[:-1])

    def mode(self) -> Tensor:
        return self.logits.argmax(dim=-1)

    def log_prob(self, actions: Tensor) -> Tensor:
        return self.logits.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> Tensor:
        return categorical_entropy(self.logits)

    def kl(self, other: Categorical) -> Tensor:
        """KL(self || other) per state, exactly: sum_a p(a) (log p(a) - log q(a))."""
        return categorical_kl(self.logits, other.logits)


class DiagGaussian:
    """N(mean, diag(exp(log_std))^2). mean: [B, D]; log_std: [D] or [B, D]; actions: [B, D].

    log_prob and entropy are summed over the D action dimensions.
    """

    def __init__(self, mean: Tensor, log_std: Tensor):
        self.mean = mean
        self.log_std = log_std.expand_as(mean)

    @property
    def std(self) -> Tensor:
        return self.log_std.exp()

    def sample(self) -> Tensor:
        return self.mean + self.std * torch.randn_like(self.mean)

    def mode(self) -> Tensor:
        return self.mean

    def log_prob(self, actions: Tensor) -> Tensor:
        return gaussian_log_density(actions, self.mean, self.log_std, torch.exp(-self.log_std),
                                    0.5, HALF_LOG_2PI).sum(-1)

    def entropy(self) -> Tensor:
        return gaussian_entropy_density(self.log_std, 0.5, HALF_LOG_2PI).sum(-1)

    def kl(self, other: DiagGaussian) -> Tensor:
        """KL(self || other) per state, exactly, summed over dimensions."""
        var_ratio = gaussian_var_ratio(self.log_std, other.log_std, 2.0)
        return gaussian_kl_density(self.mean, self.log_std, other.mean, other.log_std,
                                   torch.exp(-other.log_std), var_ratio, 0.5, 1.0, 2.0).sum(-1)


class MultiCategorical:
    """Independent categoricals, one per dimension of a MultiDiscrete space: logits
    [B, sum(nvec)] cut into blocks of nvec[i]; actions [B, len(nvec)] (integers, any dtype).
    log_prob, entropy and KL are summed over the dimensions. mask: [B, sum(nvec)] bool (each
    dimension's mask, concatenated, as sb3-contrib flattens them) or None."""

    def __init__(self, logits: Tensor, nvec: tuple[int, ...], mask: Tensor | None = None):
        self.nvec = tuple(nvec)
        masks = [None] * len(self.nvec) if mask is None else torch.split(mask, self.nvec, -1)
        self.parts = [Categorical(x, m)
                      for x, m in zip(torch.split(logits, self.nvec, dim=-1), masks, strict=True)]

    def sample(self) -> Tensor:
        return torch.stack([c.sample() for c in self.parts], dim=-1)

    def mode(self) -> Tensor:
        return torch.stack([c.mode() for c in self.parts], dim=-1)

    def log_prob(self, actions: Tensor) -> Tensor:
        return sum(c.log_prob(actions[..., i]) for i, c in enumerate(self.parts))  # type: ignore[return-value]

    def entropy(self) -> Tensor:
        return sum(c.entropy() for c in self.parts)  # type: ignore[return-value]

    def kl(self, other: MultiCategorical) -> Tensor:
        return sum(c.kl(o) for c, o in zip(self.parts, other.parts, strict=True))  # type: ignore[return-value]


class Bernoulli:
    """Independent bits of a MultiBinary space: P(a_i = 1) = sigmoid(logits_i). logits: [B, n];
    actions [B, n] of 0/1 (any dtype). log_prob, entropy and KL are summed over the bits."""

    def __init__(self, logits: Tensor):
        self.logits = logits

    @property
    def probs(self) -> Tensor:
        return torch.sigmoid(self.logits)

    def sample(self) -> Tensor:
        return torch.bernoulli(self.probs)

    def mode(self) -> Tensor:
        return (self.logits > 0).to(self.logits.dtype)

    def log_prob(self, actions: Tensor) -> Tensor:
        a = actions.to(self.logits.dtype)
        return (a * self.logits - torch.nn.functional.softplus(self.logits)).sum(-1)

    def entropy(self) -> Tensor:
        p = self.probs
        return (torch.nn.functional.softplus(self.logits) - p * self.logits).sum(-1)

    def kl(self, other: Bernoulli) -> Tensor:
        """sum_i p_i (log p_i - log q_i) + (1 - p_i) (log(1 - p_i) - log(1 - q_i))."""
        p = self.probs
        sp, so = torch.nn.functional.softplus, other.logits
        return (p * (self.logits - so) - sp(self.logits) + sp(so)).sum(-1)


Distribution = Categorical | DiagGaussian | MultiCategorical | Bernoulli
