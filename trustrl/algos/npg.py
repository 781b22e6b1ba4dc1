"""Natural policy gradient (Kakade, 2001): TRPO's steps 1 to 4 and 6, without the line search.

The step sqrt(2 delta / x^T F x) * x solves max g^T d subject to 1/2 d^T F d <= delta for the
quadratic model of the KL; it is taken as it is, so the true KL after the step can exceed delta
where the model is poor (logged as kl_exact, to compare with TRPO's).
"""

from __future__ import annotations

from trustrl.algos.trpo import TRPO
from trustrl.config import NPGConfig
from trustrl.policies import ActorCritic


def NPG(policy: ActorCritic, cfg: NPGConfig) -> TRPO:  # noqa: N802 - reads like a class
    return TRPO(policy, cfg, line_search=False)
