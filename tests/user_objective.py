"""A user's own PPO variants, in the user's own module (tests/test_variants.py runs them by
import path, as `--set algo_class=user_objective:CappedPPO` would).

CappedPPO changes one loss term, written over the array namespace ``o`` as trustrl.maths.losses'
terms are: PPO-clip's objective minus cap * (rho - 1)^2. TorchOnlyPPO writes the same term in
torch itself (not over ``o``): it cannot be compiled and runs eagerly. OwnLossPPO overrides the
loss method in torch."""

from __future__ import annotations

from typing import Any

import torch

from trustrl.algos.ppo import PPO
from trustrl.maths.losses import clipped_surrogate_objective, clipped_surrogate_objective_grad

o: Any = torch


def capped_objective(ratio, adv, eps, cap):  # type: ignore[no-untyped-def]
    return clipped_surrogate_objective(ratio, adv, eps) - cap * (ratio - 1.0) ** 2


def capped_objective_grad(ratio, adv, eps, cap):  # type: ignore[no-untyped-def]
    return clipped_surrogate_objective_grad(ratio, adv, eps) - 2.0 * cap * (ratio - 1.0)


class CappedPPO(PPO):
    objective_fn = staticmethod(capped_objective)
    objective_grad = staticmethod(capped_objective_grad)

    def objective_args(self) -> tuple[float, ...]:
        return (self.clip_eps, 0.5)


def torch_objective(ratio, adv, eps, cap):  # type: ignore[no-untyped-def]
    return torch.minimum(ratio * adv, torch.clamp(ratio, 1 - eps, 1 + eps) * adv) \
        - cap * (ratio - 1.0) ** 2


def torch_objective_grad(ratio, adv, eps, cap):  # type: ignore[no-untyped-def]
    live = torch.where(adv > 0, ratio <= 1.0 + eps, ratio >= 1.0 - eps)
    return torch.where(live, adv, torch.zeros_like(adv)) - 2.0 * cap * (ratio - 1.0)


class TorchOnlyPPO(CappedPPO):
    objective_fn = staticmethod(torch_objective)
    objective_grad = staticmethod(torch_objective_grad)


class OwnLossPPO(PPO):
    def loss(self, h, mb, want):  # type: ignore[no-untyped-def]
        return super().loss(h, mb, want)


class NotAnAlgorithm:
    pass
