"""Seeds and RNG states of the global generators (bottom layer: no trustrl imports).

The Gymnasium collector draws from the global torch RNG (action sampling, minibatch shuffles),
so a checkpoint saves and restores these states; the batched collector uses counter-based
random numbers (trustrl.maths.rng) and needs only `seed_everything` to build its networks.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(),
            "torch": torch.get_rng_state()}


def set_rng_state(s: dict[str, Any]) -> None:
    random.setstate(s["python"])
    np.random.set_state(s["numpy"])
    torch.set_rng_state(s["torch"])
