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
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

ENV_ID = "MaskedPick-v0"


class MaskedPick(gym.Env):
    """Pick `picks` of `n_items` random values, each at most once (see the module)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, n_items: int = 8, picks: int = 4, penalty: float = -1.0):
        if not 1 <= picks <= n_items:
            raise ValueError(f"picks must be in 1..n_items = {n_items}, got {picks}")
        self.n_items, self.picks, self.penalty = int(n_items), int(picks), float(penalty)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (2 * self.n_items,), np.float32)
        self.action_space = gym.spaces.Discrete(self.n_items)
        self.values = np.zeros(self.n_items, np.float32)
        self.taken = np.zeros(self.n_items, bool)
        self.count = 0

    def action_masks(self) -> np.ndarray:
        """The valid moves [n_items] (bool): the items not picked yet."""
        return ~self.taken

    def _obs(self) -> np.ndarray:
        return np.concatenate([self.values, self.taken.astype(np.float32)])

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.values = self.np_random.random(self.n_items).astype(np.float32)
        self.taken[:] = False
        self.count = 0
        return self._obs(), {"action_mask": self.action_masks()}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        a = int(action)
        if self.taken[a]:  # an invalid move: the episode ends with the penalty
            return self._obs(), self.penalty, True, False, {"action_mask": self.action_masks(),
                                                            "invalid": True}
        self.taken[a] = True
        self.count += 1
        done = self.count >= self.picks
        return (self._obs(), float(self.values[a]), done, False,
                {"action_mask": self.action_masks(), "invalid": False})


def register() -> None:
    """Register MaskedPick-v0 with Gymnasium (once)."""
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point="trustrl.envs.masked_pick:MaskedPick")
