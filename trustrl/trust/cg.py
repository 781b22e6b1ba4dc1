"""Conjugate gradient: solve A x = b using only products A v (A symmetric positive-definite)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class CGResult:
    x: Tensor
    iterations: int
    residual: float  # ||b - A x|| (the recursively updated residual)


def conjugate_gradient(
    Avp: Callable[[Tensor], Tensor], b: Tensor, iters: int = 10, residual_tol: float = 1e-10
) -> CGResult:
    """Approximately solve A x = b from x0 = 0, in at most `iters` products A v.

    Starting at zero (not at random noise) makes the first iterate a multiple of b itself: with
    b the policy gradient and A the Fisher matrix, an early stop still gives an ascent direction.
    Stops early when ||r||^2 < residual_tol. Exact arithmetic solves an n x n system in n
    iterations.
    """
    x = torch.zeros_like(b)
    r = b.clone()  # residual b - A x, with x = 0
    p = b.clone()  # search direction
    rr = torch.dot(r, r)
    k = 0
    while k < iters and float(rr) >= residual_tol:
        Ap = Avp(p)
        alpha = rr / torch.dot(p, Ap)
        x = x + alpha * p
        r = r - alpha * Ap
        rr_new = torch.dot(r, r)
        p = r + (rr_new / rr) * p
        rr = rr_new
        k += 1
    return CGResult(x, k, float(rr.sqrt()))
