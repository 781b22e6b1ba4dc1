"""Reference solutions of the PPO lab, with exactly the lab's signatures.

Each function is a thin adapter onto trustrl's own implementation (trustrl.losses,
trustrl.diagnostics, trustrl.algos.ppo), so the lab is graded against the code that trains
trustrl's agents. ``trustrl lab solution N`` prints these functions and the trustrl functions
they call. A lab folder can use them directly: ``from trustrl.lab.solutions import *`` in ppo.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from trustrl import diagnostics, losses
from trustrl.algos import ppo as ppo_algo
from trustrl.policies import ActorCritic
from trustrl.rollout import Batch

__all__ = ["approx_kl", "clip_fraction", "clipped_surrogate_loss", "ppo_update", "value_loss"]


# --- Task 1 ---------------------------------------------------------------------------------
def clipped_surrogate_loss(
    logp_new: Tensor, logp_old: Tensor, advantages: Tensor, clip_eps: float
) -> Tensor:
    """-mean(min(rho*A, clip(rho, 1-eps, 1+eps)*A)) with rho = exp(logp_new - logp_old)."""
    ratio = torch.exp(logp_new - logp_old)
    return losses.clipped_surrogate_loss(ratio, advantages, clip_eps)


# --- Task 2 ---------------------------------------------------------------------------------
def approx_kl(logp_new: Tensor, logp_old: Tensor) -> float:
    """k3 estimate of KL(pi_old || pi_new): mean((rho - 1) - log rho), as a float."""
    return diagnostics.approx_kl(logp_new - logp_old, "k3")


def clip_fraction(logp_new: Tensor, logp_old: Tensor, clip_eps: float) -> float:
    """Fraction of samples whose ratio lies outside [1 - eps, 1 + eps], as a float."""
    return diagnostics.clip_fraction(torch.exp(logp_new - logp_old), clip_eps)


# --- Task 3 ---------------------------------------------------------------------------------
def value_loss(
    values: Tensor,
    returns: Tensor,
    values_old: Tensor | None = None,
    clip_eps: float | None = None,
) -> Tensor:
    """0.5 * mean((V - R)^2), or the clipped (pessimistic, max) version when both extras are
    given."""
    return losses.value_loss(values, returns, values_old, clip_eps)


# --- Task 4 ---------------------------------------------------------------------------------
def ppo_update(
    agent: ActorCritic,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    *,
    epochs: int,
    minibatch_size: int,
    clip_eps: float,
    vf_coef: float,
    ent_coef: float,
    max_grad_norm: float,
    target_kl: float | None = None,
    clip: bool = True,
) -> dict[str, float]:
    """K epochs of shuffled minibatches on the PPO loss, with approx-KL early stopping.

    trustrl's ppo_update with per-minibatch advantage normalisation on and value clipping off
    (the lab's defaults). Returns epochs_run, approx_kl, clip_fraction, entropy and more.
    """
    return ppo_algo.ppo_update(
        agent, optimizer, batch,
        update_epochs=epochs, minibatch_size=minibatch_size, clip_eps=clip_eps,
        vf_coef=vf_coef, ent_coef=ent_coef, max_grad_norm=max_grad_norm, target_kl=target_kl,
        norm_adv=True, clip_value_loss=False, clip=clip,
    )


SOLUTIONS: dict[int, tuple[Callable[..., Any], ...]] = {
    1: (clipped_surrogate_loss,),
    2: (approx_kl, clip_fraction),
    3: (value_loss,),
    4: (ppo_update,),
}
"""Task number -> the reference functions of that task."""
