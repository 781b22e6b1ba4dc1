"""Fisher-vector products by double backprop of the mean KL, never forming F.

F = E[grad log pi grad log pi^T] equals the Hessian of mean_s KL(pi_old(.|s) || pi_theta(.|s))
at theta = theta_old (the information identity). So F v = grad_theta((grad_theta KL)^T v):
two backward passes, over the actor's parameters only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from trustrl.maths.distributions import Categorical, DiagGaussian


def flat_grad(y: Tensor, params: Sequence[Tensor], **kw) -> Tensor:
    """d y / d params, flattened into one vector (zeros for parameters y does not reach)."""
    grads = torch.autograd.grad(y, params, allow_unused=True, **kw)
    return torch.cat([
        (g if g is not None else torch.zeros_like(p)).reshape(-1)
        for g, p in zip(grads, params, strict=True)
    ])


def detached(d: Categorical | DiagGaussian) -> Categorical | DiagGaussian:
    """A copy of a distribution with no graph: pi_old, held fixed while theta moves.

    Cloned, not only detached: a Gaussian's log_std is a view of the policy's parameter, which
    the optimizer (or the line search) then changes in place; a detached view would move
    with it, and KL(pi_old || pi) would miss the change of the standard deviation."""
    if isinstance(d, Categorical):
        return Categorical(d.logits.detach().clone())
    return DiagGaussian(d.mean.detach().clone(), d.log_std.detach().clone())


def mean_kl(old: Categorical | DiagGaussian, new: Categorical | DiagGaussian) -> Tensor:
    """mean over states of the exact KL(old || new) (analytic for both policy kinds)."""
    return old.kl(new).mean()  # type: ignore[arg-type]


def fisher_vector_product(
    kl: Tensor, params: Sequence[Tensor], damping: float = 0.0
) -> Callable[[Tensor], Tensor]:
    """Given the mean KL(pi_old || pi_theta) as a graph evaluated at theta = theta_old, return
    v -> (F + damping I) v.

    The first backward pass (with create_graph) is done once here; each product is one more
    backward pass through it. The easy mistakes: building the KL against a pi_old that is not
    detached (its gradient then cancels), and including critic parameters in `params`.
    """
    g = flat_grad(kl, params, create_graph=True)

    def fvp(v: Tensor) -> Tensor:
        hv = flat_grad(torch.dot(g, v), params, retain_graph=True)
        return hv + damping * v

    return fvp
