"""Conjugate gradient: solve A x = b using only products A v (A symmetric positive-definite)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

o: Any = torch  # the array namespace of cg_steps (trustrl.compute.compiled binds NumPy under Numba)


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
    solve = getattr(Avp, "solve", None)  # the products' own compiled binding of cg_steps
    if solve is not None:
        x, k, residual = solve(b, iters, residual_tol, lockstep)
    else:
        x, k, residual = cg_steps(Avp, b, iters, residual_tol, lockstep)
    return CGResult(x, k.long(), residual)


def product(args: Any, v: Any) -> Any:
    """A v, where `args` is the product: the eager binding's (a function of v). The compiled
    binding of `cg_steps` (trustrl.compute.compiled) sets this name to a compiled product of (its
    arguments, v)."""
    return args(v)


def cg_steps(args: Any, b: Any, iters: int, residual_tol: float, lockstep: bool) -> Any:
    """Conjugate gradient on P systems [P, D] in step, written over the array namespace `o`
    (torch eagerly; NumPy under Numba in trustrl.compute.compiled): `product(args, v)` is A v.
    Returns (x, products taken per member, ||r|| per member)."""
    x = o.zeros_like(b)
    r = b - x  # residual b - A x, with x = 0
    p = b - x  # search direction
    rr = (r * r).sum(1)
    k = o.zeros_like(rr)
    for _ in range(iters):
        active = rr >= residual_tol
        if not lockstep and not o.any(active):
            break
        Ap = product(args, p)
        alpha = o.where(active, rr / (p * Ap).sum(1), o.zeros_like(rr))
        x = x + alpha[:, None] * p
        r = r - alpha[:, None] * Ap
        rr_new = (r * r).sum(1)
        p = o.where(active[:, None], r + (rr_new / rr)[:, None] * p, p)
        rr = o.where(active, rr_new, rr)
        k = k + active
    return x, k, o.sqrt(rr)


def natural_step(args: Any, g: Any, iters: int, residual_tol: float, lockstep: bool,
                 max_kl: float) -> Any:
    """TRPO's and NPG's steps 3 and 4 for P members [P, D], over the array namespace `o` (torch
    eagerly; NumPy under Numba in trustrl.compute.compiled, one call with its CG):
    x ~= F^-1 g by `cg_steps` on the products `product(args, v)`, x^T F x (one more
    product), and the step that spends the KL budget, 1/2 s^T F s = delta:
    s = sqrt(2 delta / x^T F x) x, taken only where x^T F x is positive and finite (else 0).
    Returns (x, products taken, ||r||, xFx, step size, s, g^T s, ok) per member."""
    x, k, residual = cg_steps(args, g, iters, residual_tol, lockstep)
    xFx = (x * product(args, x)).sum(1)
    ok = (xFx > 0) & o.isfinite(xFx)
    zero = o.zeros_like(xFx)
    step_size = o.where(ok, o.sqrt(2.0 * max_kl / o.where(xFx > 1e-30, xFx, zero + 1e-30)),
                        zero)
    full_step = o.where(ok[:, None], step_size[:, None] * x, zero[:, None])
    expected = o.where(ok, (g * full_step).sum(1), zero)
    return x, k, residual, xFx, step_size, full_step, expected, ok
