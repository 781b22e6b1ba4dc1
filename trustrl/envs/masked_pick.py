"""MaskedPick-v0: a small game with invalid moves, for action masking (docs/masking.md).

Each episode deals `n_items` values drawn uniformly in [0, 1); the player picks `picks` of
them, one a step, and is paid each picked value. An item can be picked once: picking it again
is an invalid move, which ends the episode with `penalty` (-1) as its reward. The best play
takes the `picks` largest values (expected return 26/9 = 2.89 with the defaults); random valid
play earns 2.0 on average.

The env gives the mask of valid moves (the items not picked yet) both ways trustrl and
sb3-contrib read it: an `action_masks()` method and `info["action_mask"]` (from reset and
step). A masked policy never makes an invalid move and learns only which values to take; an
unmasked one must also learn not to pick an item twice.

Observation: Box [2 n_items] of float32, the values then the picked flags (0/1). Action:
Discrete(n_items).

The dynamics, the observation and the mask are trustrl.envs.classic's `MaskedPick`, written
once over an array namespace: this env steps them over NumPy (one row), the batched collector
(`--vector torch`, populations of seeds) over NumPy, torch or compiled by Numba. The values of
an episode come from this env's own generator (`np_random`), as before.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from trustrl.envs import classic

ENV_ID = "MaskedPick-v0"


class MaskedPick(gym.Env):
    """Pick `picks` of `n_items` random values, each at most once (see the module)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, n_items: int = 8, picks: int = 4, penalty: float = -1.0):
        if not 1 <= picks <= n_items:
            raise ValueError(f"picks must be in 1..n_items = {n_items}, got {picks}")
        self.n_items, self.picks, self.penalty = int(n_items), int(picks), float(penalty)
        self.dynamics = classic.MaskedPick(classic.NUMPY, np.float32, n_items=self.n_items,
                                           picks=self.picks, penalty=self.penalty)
        """The one source of the game (trustrl.envs.classic.MaskedPick), over NumPy."""
        self.observation_space = gym.spaces.Box(0.0, 1.0, (2 * self.n_items,), np.float32)
        self.action_space = gym.spaces.Discrete(self.n_items)
        self.state = np.zeros((1, self.dynamics.state_dim), np.float32)
        """The dynamics' state [1, state_dim]: the values, the picked flags, the picks made."""

    def __getstate__(self) -> dict[str, Any]:
        """The env's state without its dynamics (functions bound at run time, rebuilt by
        __setstate__): a pickled env resumes its episode (a checkpoint's sync envs)."""
        state = dict(self.__dict__)
        del state["dynamics"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.dynamics = classic.MaskedPick(classic.NUMPY, np.float32, n_items=self.n_items,
                                           picks=self.picks, penalty=self.penalty)

    @property
    def values(self) -> np.ndarray:
        """The items' values [n_items] (float32)."""
        return self.state[0, :self.n_items]

    @property
    def taken(self) -> np.ndarray:
        """Whether each item was picked [n_items] (bool)."""
        return self.state[0, self.n_items:2 * self.n_items] > 0.5

    @property
    def count(self) -> int:
        """The valid picks made in this episode."""
        return int(self.state[0, 2 * self.n_items])

    def action_masks(self) -> np.ndarray:
        """The valid moves [n_items] (bool): the items not picked yet."""
        mask = self.dynamics.action_mask(self.state)
        assert mask is not None
        return mask[0]

    def _obs(self) -> np.ndarray:
        return self.dynamics.observe(self.state)[0]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.state = np.zeros((1, self.dynamics.state_dim), np.float32)
        self.state[0, :self.n_items] = self.np_random.random(self.n_items).astype(np.float32)
        return self._obs(), {"action_mask": self.action_masks()}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        a = int(action)
        if not 0 <= a < self.n_items:
            raise ValueError(f"action {a} is not in 0..{self.n_items - 1}")
        mask = self.dynamics.action_mask(self.state)
        assert mask is not None
        invalid = not mask[0, a]
        self.state, reward, terminated = self.dynamics.step(self.state,
                                                            np.array([a], np.int64))
        return (self._obs(), float(reward[0]), bool(terminated[0]), False,
                {"action_mask": self.action_masks(), "invalid": invalid})


def register() -> None:
    """Register MaskedPick-v0 with Gymnasium (once)."""
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point="trustrl.envs.masked_pick:MaskedPick")
