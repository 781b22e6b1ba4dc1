"""PPO's loss terms as pure functions.

Sign convention: `*_objective` functions return per-sample quantities to MAXIMISE (as in the
chapter); `*_loss` functions return scalars to MINIMISE (what the optimizer sees).

Beside each per-sample term sits its derivative, `*_grad`, with respect to the quantity the
network controls (the ratio, the value): the closed-form gradient backend (trustrl.compute.backends)
chains these through the networks, the autograd backend differentiates the term itself, and
tests/test_losses.py holds the two together, kinks included. Every term and derivative is
elementwise, so it serves one run [B] and a population [P, B] alike.

The array functions are looked up on the module's global ``o``, which is ``torch``: read
``o.minimum`` as ``torch.minimum``. The compiled backend (trustrl.compute.compiled.ppo) runs these
same functions on NumPy arrays under Numba by giving them another ``o``
(trustrl.compute.compiled.xp,
with
torch's names and meaning), so the per-sample terms and their derivatives are written once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor

o: Any = torch
"""The array namespace of the functions below (see the module's docstring)."""


class Objective(NamedTuple):
    """A policy objective as the K-epoch loop runs it, on every binding: `fn(ratio, advantages,
    *args)` the per-sample objective to maximise and `grad(ratio, advantages, *args)` its
    derivative in the ratio, both module functions written over ``o`` as the terms below are
    (so the compiled backend compiles them from their source), and `args` their arguments
    after the ratio and the advantages (floats: PPO-clip's (clip_eps,))."""

    fn: Callable[..., Any]
    grad: Callable[..., Any]
    args: tuple[float, ...]


def surrogate_objective(ratio: Tensor, advantages: Tensor) -> Tensor:
    """Per-sample unclipped surrogate rho * A.  Shapes: [B], [B] -> [B]."""
    return ratio * advantages


def clipped_surrogate_objective(ratio: Tensor, advantages: Tensor, clip_eps: float) -> Tensor:
    """Per-sample PPO-clip term min(rho*A, clip(rho, 1-eps, 1+eps)*A).  [B], [B] -> [B].

    torch.clamp has zero gradient outside the band and torch.min routes the gradient to the
    term it picked, so autograd gives exactly the chapter's four cases with no branches.
    The easy mistake: clipping the advantage instead of the ratio, or using max for A < 0.
    """
    unclipped = ratio * advantages
    clipped = o.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    return o.minimum(unclipped, clipped)


def surrogate_objective_grad(ratio: Tensor, advantages: Tensor) -> Tensor:
    """d(rho * A)/d rho = A, per sample."""
    return o.zeros_like(ratio) + advantages


def clipped_surrogate_objective_grad(ratio: Tensor, advantages: Tensor, clip_eps: float
                                     ) -> Tensor:
    """d L_clip / d rho per sample, the chapter's four cases: A > 0 gives slope A until the
    ratio passes 1 + eps, then 0; A < 0 gives slope A until it falls below 1 - eps, then 0.
    On the band's edges the slope is A, as autograd's (a tie of min gives half to each of
    two terms whose slopes are both A there, since clamp passes the gradient at its bounds)."""
    live = o.where(advantages > 0, ratio <= 1.0 + clip_eps, ratio >= 1.0 - clip_eps)
    return o.where(live, advantages, o.zeros_like(advantages))


def clipped_surrogate_loss(ratio: Tensor, advantages: Tensor, clip_eps: float) -> Tensor:
    """-mean(L_clip): the actor loss of PPO-clip (a scalar to minimise)."""
    return -clipped_surrogate_objective(ratio, advantages, clip_eps).mean()


def surrogate_loss(ratio: Tensor, advantages: Tensor) -> Tensor:
    """-mean(rho * A): the plain surrogate as a loss (PPO without the clip)."""
    return -surrogate_objective(ratio, advantages).mean()


def value_error(
    values: Tensor,
    returns: Tensor,
    values_old: Tensor | None = None,
    clip_eps: float | None = None,
) -> Tensor:
    """Per-sample 0.5 * (V - R)^2, or its clipped version when values_old and clip_eps are
    given: V_clip = V_old + clip(V - V_old, -eps, eps) and 0.5 * max((V - R)^2, (V_clip - R)^2),
    the pessimistic (larger) of the two, as for the policy. Elementwise."""
    err = (values - returns) ** 2
    if values_old is None or clip_eps is None:
        return 0.5 * err
    v_clip = values_old + o.clamp(values - values_old, -clip_eps, clip_eps)
    return 0.5 * o.maximum(err, (v_clip - returns) ** 2)


def value_error_grad(
    values: Tensor,
    returns: Tensor,
    values_old: Tensor | None = None,
    clip_eps: float | None = None,
) -> Tensor:
    """d value_error / d V per sample, with autograd's conventions: max gives half to each side
    of a tie, clamp passes the gradient at its bounds and none outside them."""
    e1 = values - returns
    if values_old is None or clip_eps is None:
        return e1
    d = values - values_old
    e2 = values_old + o.clamp(d, -clip_eps, clip_eps) - returns
    s1, s2 = e1 * e1, e2 * e2
    tie = o.where(s1 == s2, 0.5, 0.0)
    inside = (d >= -clip_eps) & (d <= clip_eps)
    return (e1 * (o.where(s1 > s2, 1.0, 0.0) + tie)
            + e2 * o.where(inside, o.where(s2 > s1, 1.0, 0.0) + tie, 0.0))


def value_loss(
    values: Tensor,
    returns: Tensor,
    values_old: Tensor | None = None,
    clip_eps: float | None = None,
) -> Tensor:
    """mean(value_error): 0.5 * mean((V - R)^2), or the clipped version. [B] each -> scalar."""
    return value_error(values, returns, values_old, clip_eps).mean()


def entropy_bonus(entropy: Tensor) -> Tensor:
    """Mean policy entropy over the batch; enters the loss as -c2 * H.  [B] -> scalar."""
    return entropy.mean()


# --- PPO's loss from its terms, written once -----------------------------------------------------
# PPO.loss (torch: [P, M] tensors, one row per member) and the compiled minibatch step
# (trustrl.compute.compiled.ppo: one member's [M] arrays) combine the per-sample terms above
# with these two functions, over the last axis; tests/test_one_source.py holds the compiled
# code objects to them.

class PPOCoefficients(NamedTuple):
    """PPO.loss's coefficients: the clip range (the clip fraction's band), c1 (value), c2
    (entropy) and beta, the KL penalty's (per member: a [P] tensor in torch, a float for the
    member compiled; 0 without a penalty)."""

    clip_eps: Any
    vf_coef: Any
    ent_coef: Any
    kl_coef: Any


def policy_ratio(logp: Tensor, logp_old: Tensor) -> Tensor:
    """rho = pi(a|s) / pi_old(a|s) = exp(log pi - log pi_old), elementwise (logp_old the
    stored one: never recomputed during the epochs)."""
    return o.exp(logp - logp_old)


def ppo_loss(ratio: Any, surrogate: Any, value_err: Any, entropy: Any, kl: Any,
             c: PPOCoefficients) -> tuple[Any, Any, Any, Any, Any]:
    """PPO's minibatch loss -mean(L) + c1 mean(value error) - c2 mean(H) [+ beta mean(KL)]
    over the last axis, from the per-sample objective `surrogate` (to maximise), `value_err`
    (value_error's), the entropy (read only when c2 != 0) and the KL(pi_old || pi) per state
    (None: no penalty). Returns (loss, policy loss with the penalty, value loss, clip fraction
    (the ratio outside 1 +- clip_eps), mean KL or None)."""
    pl = -o.mean(surrogate, -1)
    vl = o.mean(value_err, -1)
    loss = pl + c.vf_coef * vl
    if c.ent_coef != 0.0:
        loss = loss - c.ent_coef * o.mean(entropy, -1)
    outside = (ratio > 1 + c.clip_eps) | (ratio < 1 - c.clip_eps)
    clipped = o.mean(o.where(outside, 1.0, 0.0), -1)
    if kl is None:
        return loss, pl, vl, clipped, None
    kl_mean = o.mean(kl, -1)
    penalty = c.kl_coef * kl_mean
    return loss + penalty, pl + penalty, vl, clipped, kl_mean


def ppo_loss_grads(ratio: Any, surrogate_grad: Any, value_err_grad: Any, c: PPOCoefficients
                   ) -> tuple[Any, Any, Any, Any]:
    """`ppo_loss`'s derivatives per sample (the 1/M of the means included): in log pi(a|s)
    (d rho / d logp = rho, times the objective's slope in rho), in V(s) (value_error_grad's),
    and, the same for every sample, in the entropy and in the KL. Returns (d_logp, d_value,
    d_entropy, d_kl)."""
    M = ratio.shape[-1]
    d_logp = ratio * surrogate_grad * (-1.0 / M)
    d_value = value_err_grad * (c.vf_coef / M)
    return d_logp, d_value, -c.ent_coef / M, c.kl_coef / M
