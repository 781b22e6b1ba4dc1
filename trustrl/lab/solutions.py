"""Reference solutions of the PPO lab, with exactly the lab's signatures.

Each function is a thin adapter onto trustrl's own implementation (trustrl.maths.losses,
trustrl.maths.diagnostics, trustrl.algos.ppo), so the lab is graded against the code that trains
trustrl's agents. ``trustrl lab solution N`` prints these functions and the trustrl functions
they call. A lab folder can use them directly: ``from trustrl.lab.solutions import *`` in ppo.py.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor

from trustrl.algos.ppo import PPO
from trustrl.collect.rollout import Batch
from trustrl.compute.backends import Autograd
from trustrl.maths import diagnostics, losses, rng
from trustrl.maths.optim import ModuleOptimizer
from trustrl.nets.policies import ActorCritic
from trustrl.nets.popnet import ModuleNet

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

    trustrl's PPO update (trustrl.algos.ppo) for one member, with per-minibatch advantage
    normalisation on and value clipping off (the lab's defaults), stepping YOUR optimizer.
    Returns epochs_run, approx_kl, clip_fraction, entropy and more.
    """
    net = ModuleNet.from_policies([agent], agent.action, batch.obs.device)
    cfg = SimpleNamespace(
        update_epochs=epochs, minibatch_size=minibatch_size, clip_eps=clip_eps,
        vf_coef=vf_coef, ent_coef=ent_coef, max_grad_norm=max_grad_norm, target_kl=target_kl,
        norm_adv=True, clip_value_loss=False, adam_eps=1e-8, batch_size=len(batch))
    # the shuffles follow torch's global generator, as torch.randperm would
    keys = rng.shuffle_keys([int(torch.randint(0, 2**31 - 1, ()))], batch.obs.device)
    algo = PPO(net, cfg, Autograd(), keys, clip=clip)
    algo.opt = ModuleOptimizer(optimizer, agent, net.flat)  # type: ignore[assignment]
    m = algo.update({k: getattr(batch, k)[None] for k in (
        "obs", "actions", "logp_old", "values_old", "advantages", "returns")}, 0, 0.0)
    return {k: float(v[0]) for k, v in m.items()}


SOLUTIONS: dict[int, tuple[Callable[..., Any], ...]] = {
    1: (clipped_surrogate_loss,),
    2: (approx_kl, clip_fraction),
    3: (value_loss,),
    4: (ppo_update,),
}
"""Task number -> the reference functions of that task."""
