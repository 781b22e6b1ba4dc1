"""Simple Policy Optimization (Xie et al., ICML 2025, "Simple Policy Optimization",
arXiv:2401.16025): PPO with the clip replaced by a quadratic penalty on the ratio's distance
from 1, scaled by |A| / (2 eps):

    L_spo = rho A - |A| / (2 eps) (rho - 1)^2

Per sample this is a concave parabola in rho whose top sits at rho = 1 + sign(A) eps, the edge
of PPO's band: where PPO-clip's gradient vanishes past the edge (and nothing pulls the ratio
back), SPO's slope A - |A| (rho - 1) / eps turns and pulls it back towards the band.

Everything else is PPO's (algos/ppo.py): the K-epoch loop, the value loss, the backends, both
collectors. This file and SPOConfig in config.py are all the variant needs: the objective is
written over the array namespace ``o`` as trustrl.maths.losses' terms are, so the compiled backend
runs it from this source (tests/test_variants.py holds it to autograd and to the eager path).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from trustrl.algos.ppo import PPO

o: Any = torch
"""The array namespace of the terms below (as in trustrl.maths.losses)."""


def spo_objective(ratio: Tensor, adv: Tensor, eps: float) -> Tensor:
    """rho A - |A| / (2 eps) (rho - 1)^2 per sample. Elementwise."""
    return ratio * adv - o.abs(adv) / (2.0 * eps) * (ratio - 1.0) ** 2


def spo_objective_grad(ratio: Tensor, adv: Tensor, eps: float) -> Tensor:
    """d L_spo / d rho = A - |A| (rho - 1) / eps per sample."""
    return adv - o.abs(adv) * (ratio - 1.0) / eps


class SPO(PPO):
    """PPO's loop with SPO's objective; eps is the config's clip_eps."""

    objective_fn = staticmethod(spo_objective)
    objective_grad = staticmethod(spo_objective_grad)
