"""Dual-clip PPO (Ye et al., 2020, "Mastering Complex Control in MOBA Games with Deep
Reinforcement Learning"): PPO-clip with a floor on the objective where A < 0.

    L_clip  = min(rho A, clip(rho, 1 - eps, 1 + eps) A)
    L_dual  = max(L_clip, c A)   where A < 0;   L_clip where A >= 0          (c > 1, e.g. 3)

With A < 0, L_clip = rho A for rho > 1 + eps: unbounded below, so one sample whose ratio has
run far (an action pi_old rarely took) can dominate a minibatch's gradient. The floor c A caps
it: once rho > c the sample's gradient is 0. Everything else is PPO's (algos/ppo.py): the
K-epoch loop, the value loss, the backends, the collectors.

This file and PPODualClipConfig in config.py are all a variant needs (docs/architecture.md,
"Adding an algorithm"); its objective is written over the array namespace ``o``, so the
compiled backend runs it too. tests/test_fast.py checks its closed form against autograd.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from trustrl.algos.ppo import PPO
from trustrl.compute.backends import Backend
from trustrl.maths.losses import clipped_surrogate_objective, clipped_surrogate_objective_grad
from trustrl.nets.popnet import PopNet

o: Any = torch
"""The array namespace of the terms below (as in trustrl.maths.losses)."""


def dual_clip_objective(ratio: Tensor, adv: Tensor, clip_eps: float, c: float) -> Tensor:
    """L_clip where A >= 0, max(L_clip, c A) where A < 0. Elementwise."""
    clip = clipped_surrogate_objective(ratio, adv, clip_eps)
    return o.where(adv < 0, o.maximum(clip, c * adv), clip)


def dual_clip_objective_grad(ratio: Tensor, adv: Tensor, clip_eps: float, c: float) -> Tensor:
    """L_clip's slope, 0 where the floor c A is taken (A < 0 and L_clip < c A), half of it on
    the tie (as autograd's max splits the gradient; c A has none)."""
    clip = clipped_surrogate_objective(ratio, adv, clip_eps)
    slope = clipped_surrogate_objective_grad(ratio, adv, clip_eps)
    floor = c * adv
    w = o.where(clip < floor, 0.0, o.where(clip == floor, 0.5, 1.0))
    return o.where(adv < 0, w * slope, slope)


class PPODualClip(PPO):
    objective_fn = staticmethod(dual_clip_objective)
    objective_grad = staticmethod(dual_clip_objective_grad)

    def __init__(self, net: PopNet, cfg: Any, backend: Backend, keys: Tensor):
        super().__init__(net, cfg, backend, keys, clip=True)
        self.c = cfg.dual_clip

    def objective_args(self) -> tuple[float, ...]:
        return (self.clip_eps, self.c)
