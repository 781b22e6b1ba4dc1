"""Conjugate gradient: solve A x = b using only products A v (A symmetric positive-definite)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class CGResult:
    x: Tensor
    iterations: int | Tensor  # products taken (per member [P] for a population)
    residual: float | Tensor  # ||b - A x|| (the recursively updated residual)


def conjugate_gradient(
    Avp: Callable[[Tensor], Tensor], b: Tensor, iters: int = 10, residual_tol: float = 1e-10,
    lockstep: bool = False,
) -> CGResult:
    """Approximately solve A x = b from x0 = 0, in at most `iters` products A v.

    Starting at zero (not at random noise) makes the first iterate a multiple of b itself: with
    b the policy gradient and A the Fisher matrix, an early stop still gives an ascent direction.
    A member stops when ||r||^2 < residual_tol. Exact arithmetic solves an n x n system in n
    iterations.

    b [D] is one system; b [P, D] is P independent systems (a population, Avp acting row by
    row), solved in step: a member whose residual fell under the tolerance is frozen by a mask
    while the others go on. The loop ends when every member has stopped, or, with lockstep
    (no host synchronisation: what a CUDA graph can capture), after all `iters` products.
    """
    if b.dim() == 1:
        res = conjugate_gradient(lambda v: Avp(v[0])[None], b[None], iters, residual_tol,
                                 lockstep)
        return CGResult(res.x[0], int(res.iterations[0]),  # type: ignore[index]
                        float(res.residual[0]))  # type: ignore[index]
    x = torch.zeros_like(b)
    r = b.clone()  # residual b - A x, with x = 0
    p = b.clone()  # search direction
    rr = (r * r).sum(1)
    k = torch.zeros(b.shape[0], dtype=torch.int64, device=b.device)
    for _ in range(iters):
        active = rr >= residual_tol
        if not lockstep and not bool(active.any()):
            break
        Ap = Avp(p)
        alpha = torch.where(active, rr / (p * Ap).sum(1), 0.0)
        x = x + alpha[:, None] * p
        r = r - alpha[:, None] * Ap
        rr_new = (r * r).sum(1)
        p = torch.where(active[:, None], r + (rr_new / rr)[:, None] * p, p)
        rr = torch.where(active, rr_new, rr)
        k += active.long()
    return CGResult(x, k, rr.sqrt())
