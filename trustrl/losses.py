"""PPO's loss terms as pure functions.

Sign convention: `*_objective` functions return per-sample quantities to MAXIMISE (as in the
chapter); `*_loss` functions return scalars to MINIMISE (what the optimizer sees).
"""

from __future__ import annotations

import torch
from torch import Tensor


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
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    return torch.min(unclipped, clipped)


def clipped_surrogate_loss(ratio: Tensor, advantages: Tensor, clip_eps: float) -> Tensor:
    """-mean(L_clip): the actor loss of PPO-clip (a scalar to minimise)."""
    return -clipped_surrogate_objective(ratio, advantages, clip_eps).mean()


def surrogate_loss(ratio: Tensor, advantages: Tensor) -> Tensor:
    """-mean(rho * A): the plain surrogate as a loss (PPO without the clip)."""
    return -surrogate_objective(ratio, advantages).mean()


def value_loss(
    values: Tensor,
    returns: Tensor,
    values_old: Tensor | None = None,
    clip_eps: float | None = None,
) -> Tensor:
    """0.5 * mean((V - R)^2), or its clipped version when values_old and clip_eps are given.

    Clipped: V_clip = V_old + clip(V - V_old, -eps, eps) and the loss is
    0.5 * mean(max((V - R)^2, (V_clip - R)^2)): the pessimistic (larger) of the two, as for the
    policy. Shapes: [B] each -> scalar.
    """
    err = (values - returns) ** 2
    if values_old is None or clip_eps is None:
        return 0.5 * err.mean()
    v_clip = values_old + torch.clamp(values - values_old, -clip_eps, clip_eps)
    return 0.5 * torch.max(err, (v_clip - returns) ** 2).mean()


def entropy_bonus(entropy: Tensor) -> Tensor:
    """Mean policy entropy over the batch; enters the loss as -c2 * H.  [B] -> scalar."""
    return entropy.mean()
