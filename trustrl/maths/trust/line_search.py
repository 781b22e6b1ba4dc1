"""Backtracking line search of TRPO: shrink the step until the KL holds and L improved."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.nn.utils import parameters_to_vector, vector_to_parameters

o: Any = torch  # the array namespace of line_search_steps (trustrl.compute.compiled binds NumPy)


@dataclass
class LineSearchResult:
    accepted: bool
    steps_tried: int  # candidates evaluated (1 = the full step)
    step_fraction: float  # backtrack_ratio^j of the accepted step, 0 when rejected
    kl: float  # mean KL of the accepted step (of the last candidate when rejected)
    improvement: float  # L(theta) - L(theta_old) of the accepted (or last) candidate


@dataclass
class PopulationLineSearch:
    """Per member [P]: the accepted parameters and what the search found."""

    theta: Tensor  # [P, D]: the accepted candidate, theta_old where none was accepted
    accepted: Tensor  # bool
    steps_tried: Tensor  # candidates evaluated while the member was still searching
    step_fraction: Tensor  # backtrack_ratio^j of the accepted step, 0 when rejected
    kl: Tensor  # mean KL of the accepted step (of the last candidate when rejected)
    improvement: Tensor  # L(theta) - L(theta_old) of the accepted (or last) candidate


def evaluate(args: Any, cand: Any) -> Any:
    """(surrogate, mean KL to pi_old) per member at cand [P, D]: the eager binding's `args` is
    the evaluation (a function of cand). The compiled binding of `line_search_steps`
    (trustrl.compute.compiled) sets this name to a compiled evaluation of (its arguments,
    cand)."""
    return args(cand)


def line_search_steps(args: Any, theta_old: Any, full_step: Any, surrogate_old: Any,
                      max_kl: float, fracs: Any, searching: Any, lockstep: bool) -> Any:
    """The backtracking search of P members [P, D] in step, written over the array namespace
    `o` (torch eagerly; NumPy under Numba in trustrl.compute.compiled, the whole search one
    call): candidate j is theta_old + fracs[j] * full_step (fracs [J] the fractions
    backtrack_ratio^j, in theta's dtype) for every member still searching; a member accepts
    its first candidate with mean KL <= max_kl and surrogate > surrogate_old, as
    `evaluate(args, cand)` gives them. `searching` [P] leaves members out from the start. The
    loop ends when no member searches, or after every candidate with lockstep. Returns
    (theta, accepted, candidates tried, accepted fraction, kl, improvement): see
    PopulationLineSearch."""
    accepted = searching & ~searching
    steps = o.zeros_like(surrogate_old)  # candidates tried while searching
    frac_acc = o.zeros_like(surrogate_old)
    kl_acc = o.full_like(surrogate_old, math.nan)
    impr_acc = o.full_like(surrogate_old, math.nan)
    theta = o.where(searching[:, None], theta_old, theta_old)  # a copy
    for j in range(fracs.shape[0]):
        pending = searching & ~accepted  # only ever shrinks: steps counts its tries
        if not lockstep and not o.any(pending):
            break
        cand = theta_old + fracs[j] * full_step
        surrogate, kl = evaluate(args, cand)
        improvement = surrogate - surrogate_old
        now = pending & (kl <= max_kl) & (improvement > 0)
        theta = o.where(now[:, None], cand, theta)
        steps = steps + pending
        frac_acc = o.where(now, fracs[j], frac_acc)
        kl_acc = o.where(pending, kl, kl_acc)
        impr_acc = o.where(pending, improvement, impr_acc)
        accepted = accepted | now
    return theta, accepted, steps, frac_acc, kl_acc, impr_acc


@torch.no_grad()
def population_line_search(
    theta_old: Tensor,
    full_step: Tensor,
    evaluate: Callable[[Tensor], tuple[Tensor, Tensor]],
    surrogate_old: Tensor,
    max_kl: float,
    backtrack_ratio: float = 0.5,
    max_backtracks: int = 10,
    searching: Tensor | None = None,
    lockstep: bool = False,
) -> PopulationLineSearch:
    """The search for P members at once (rows of [P, D]): candidate j is theta_old + ratio^j *
    full_step for every member still searching; a member accepts its first candidate with mean
    KL <= max_kl and surrogate > surrogate_old. `evaluate(theta [P, D])` returns (surrogate,
    mean KL to pi_old), each [P]. `searching` [P] leaves members out from the start (no step to
    take). The loop ends when no member searches, or after every candidate with lockstep (no
    host synchronisation: what a CUDA graph can capture). `line_search_steps` runs it: eagerly,
    or, where `evaluate` has a `search` (the compiled backend's evaluation), that compiled
    binding of it in one call."""
    P = theta_old.shape[0]
    dev = theta_old.device
    pending0 = torch.ones(P, dtype=torch.bool, device=dev) if searching is None else searching
    fracs = torch.tensor([backtrack_ratio**j for j in range(max_backtracks)],
                         dtype=theta_old.dtype, device=dev)
    search = getattr(evaluate, "search", None)
    if search is not None:
        got = search(theta_old, full_step, surrogate_old, max_kl, fracs, pending0, lockstep)
    else:
        got = line_search_steps(evaluate, theta_old, full_step, surrogate_old, max_kl, fracs,
                                pending0, lockstep)
    return PopulationLineSearch(*got)


@torch.no_grad()
def backtracking_line_search(
    params: Sequence[Tensor],
    full_step: Tensor,
    evaluate: Callable[[], tuple[float, float]],
    surrogate_old: float,
    max_kl: float,
    backtrack_ratio: float = 0.5,
    max_backtracks: int = 10,
) -> LineSearchResult:
    """Try theta_old + ratio^j * full_step for j = 0, 1, ...; accept the first candidate with
    mean KL <= max_kl and surrogate > surrogate_old. If none passes, restore theta_old.

    `evaluate()` returns (surrogate, mean KL to pi_old) at the parameters currently set.
    """
    theta_old = parameters_to_vector(params).clone()

    def at(theta: Tensor) -> tuple[Tensor, Tensor]:
        vector_to_parameters(theta[0], params)
        surrogate, kl = evaluate()
        return torch.tensor([surrogate]), torch.tensor([kl])

    r = population_line_search(theta_old[None], full_step[None], at,
                               torch.tensor([surrogate_old]), max_kl, backtrack_ratio,
                               max_backtracks)
    vector_to_parameters(r.theta[0], params)
    return LineSearchResult(bool(r.accepted[0]), int(r.steps_tried[0]),
                            float(r.step_fraction[0]), float(r.kl[0]), float(r.improvement[0]))
