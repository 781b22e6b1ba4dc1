"""Backtracking line search of TRPO: shrink the step until the KL holds and L improved."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.nn.utils import parameters_to_vector, vector_to_parameters


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
    host synchronisation: what a CUDA graph can capture)."""
    P = theta_old.shape[0]
    dev = theta_old.device
    pending0 = torch.ones(P, dtype=torch.bool, device=dev) if searching is None else searching
    accepted = torch.zeros(P, dtype=torch.bool, device=dev)
    steps = torch.zeros(P, device=dev)
    frac_acc = torch.zeros(P, device=dev)
    kl_acc = torch.full((P,), float("nan"), device=dev)
    impr_acc = torch.full((P,), float("nan"), device=dev)
    theta = theta_old.clone()
    for j in range(max_backtracks):
        pending = pending0 & ~accepted
        if not lockstep and not bool(pending.any()):
            break
        frac = backtrack_ratio**j
        cand = theta_old + frac * full_step
        surrogate, kl = evaluate(cand)
        improvement = surrogate - surrogate_old
        now = pending & (kl <= max_kl) & (improvement > 0)
        theta = torch.where(now[:, None], cand, theta)
        steps = torch.where(pending, float(j + 1), steps)
        frac_acc = torch.where(now, frac, frac_acc)
        kl_acc = torch.where(pending, kl.to(kl_acc.dtype), kl_acc)
        impr_acc = torch.where(pending, improvement.to(impr_acc.dtype), impr_acc)
        accepted |= now
    return PopulationLineSearch(theta, accepted, steps, frac_acc, kl_acc, impr_acc)


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
