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
    kl, improvement = float("nan"), float("nan")
    for j in range(max_backtracks):
        frac = backtrack_ratio**j
        vector_to_parameters(theta_old + frac * full_step, params)
        surrogate, kl = evaluate()
        improvement = surrogate - surrogate_old
        if kl <= max_kl and improvement > 0:
            return LineSearchResult(True, j + 1, frac, kl, improvement)
    vector_to_parameters(theta_old, params)
    return LineSearchResult(False, max_backtracks, 0.0, kl, improvement)
