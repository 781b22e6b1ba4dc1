"""The two action distributions trustrl's policies produce, with analytic entropy and KL.

Small classes instead of torch.distributions: no argument validation on the hot path, log-probs
already summed over action dimensions, and an exact KL for the trust-region code.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

_LOG_2PI = math.log(2.0 * math.pi)


class Categorical:
    """pi(a|s) = softmax(logits). logits: [B, A]; actions: [B] integer."""

    def __init__(self, logits: Tensor):
        self.logits = logits - torch.logsumexp(logits, dim=-1, keepdim=True)

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
        return -(self.probs * self.logits).sum(-1)

    def kl(self, other: Categorical) -> Tensor:
        """KL(self || other) per state, exactly: sum_a p(a) (log p(a) - log q(a))."""
        return (self.probs * (self.logits - other.logits)).sum(-1)


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
        z = (actions - self.mean) / self.std
        return (-0.5 * z.pow(2) - self.log_std - 0.5 * _LOG_2PI).sum(-1)

    def entropy(self) -> Tensor:
        return (0.5 + 0.5 * _LOG_2PI + self.log_std).sum(-1)

    def kl(self, other: DiagGaussian) -> Tensor:
        """KL(self || other) per state, exactly, summed over dimensions."""
        var_ratio = (self.log_std - other.log_std).mul(2).exp()
        mean_term = ((self.mean - other.mean) / other.std).pow(2)
        return 0.5 * (var_ratio + mean_term - 1.0 - var_ratio.log()).sum(-1)


Distribution = Categorical | DiagGaussian
