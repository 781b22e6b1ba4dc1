"""Natural policy gradient (Kakade, 2001): TRPO's steps 1 to 4 and 6, without the line search.

The step sqrt(2 delta / x^T F x) * x solves max g^T d subject to 1/2 d^T F d <= delta for the
quadratic model of the KL; it is taken as it is, so the true KL after the step can exceed delta
where the model is poor (logged as kl_exact, to compare with TRPO's).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from trustrl.algos.trpo import TRPO
from trustrl.compute.backends import Backend
from trustrl.nets.popnet import PopNet


class NPG(TRPO):
    def __init__(self, net: PopNet, cfg: Any, backend: Backend, keys: Tensor):
        super().__init__(net, cfg, backend, keys, line_search=False)
