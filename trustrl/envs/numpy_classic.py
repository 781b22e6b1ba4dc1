"""The batched classic-control envs over NumPy, for a CPU rollout with few envs.

    dyn = make_numpy_dynamics("CartPole-v1", np.float32)
    state, elapsed, obs, reward, terminated, truncated, final_obs = dyn.transition(
        state, elapsed, actions, reset_state)

Why: with 1-64 envs on a CPU, a step costs what its operations cost to launch, not what they
compute: a torch op on a tiny tensor takes 1-5 us, a NumPy ufunc 0.3-1 us. The dynamics are
``trustrl.envs.classic``'s, the same code the torch envs (``trustrl.envs.torch_classic``) run,
here over the NumPy namespace: pure functions with ``TorchVecEnv.transition``'s semantics. The
caller owns the state, the elapsed-step counters and the reset states (drawn by the torch
``ResetSampler`` and converted with ``.numpy()``; nothing random happens here).

Equality with the torch envs: the same operations on the same operands in the same order and
dtype (constants are 0-d arrays of the state's dtype, which round a Python float the way torch
and NumPy 2 round a scalar meeting a float32 tensor), so float64 results equal torch's up to
the last-bit differences of the two libraries' sin and cos (and what later steps make of them);
see tests/test_numpy_envs.py for the measured figures.

Speed: a step is a few dozen ufunc calls on column views, with constants and lookup tables
built once per env; the autoreset and Acrobot's angle wrap are skipped when there is nothing
to do (NumPy runs on the host, so a data-dependent branch costs only its test).

Inputs and outputs: see ``trustrl.envs.classic``. Every returned array is new (none shares
memory with an input or with another output), so a caller may normalise observations in place.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trustrl.envs import classic
from trustrl.envs.classic import Dynamics as NumpyDynamics

__all__ = ["NUMPY_SUPPORTED", "NumpyDynamics", "make_numpy_dynamics"]

NUMPY_SUPPORTED: frozenset[str] = frozenset(classic.DYNAMICS)


def make_numpy_dynamics(env_id: str, dtype: Any = np.float32) -> NumpyDynamics:
    """The NumPy dynamics of ``env_id`` (one of ``NUMPY_SUPPORTED``) in ``dtype`` (np.float32
    or np.float64). Raises ValueError for any other id or dtype."""
    try:
        cls = classic.DYNAMICS[env_id]
    except KeyError:
        raise ValueError(
            f"no NumPy version of {env_id!r}; supported: {', '.join(sorted(NUMPY_SUPPORTED))}"
        ) from None
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ValueError(f"dtype must be np.float32 or np.float64, got {dt}")
    return cls(classic.NUMPY, dt)
