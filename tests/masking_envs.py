"""Envs for tests/test_masking.py: masks given only in info, a MultiDiscrete masked env, and
envs whose masks are wrong."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from trustrl.envs.masked_pick import MaskedPick


class InfoOnlyPick(gym.Env):
    """MaskedPick whose masks come only in info["action_mask"] (no action_masks method)."""

    def __init__(self, **kw):
        self._game = MaskedPick(**kw)
        self.observation_space = self._game.observation_space
        self.action_space = self._game.action_space

    def reset(self, *, seed=None, options=None):
        return self._game.reset(seed=seed, options=options)

    def step(self, action):
        return self._game.step(action)


class MultiPick(gym.Env):
    """MultiDiscrete([3, 4]): each step a random non-empty set of valid values per dimension;
    a valid action pays 0.1, an invalid one ends the episode with -1. Episodes of 20 steps
    at most. The masks (3 + 4 booleans) by action_masks() and in info."""

    nvec = (3, 4)

    def __init__(self):
        self.observation_space = gym.spaces.Box(0.0, 1.0, (7,), np.float32)
        self.action_space = gym.spaces.MultiDiscrete(self.nvec)
        self.mask = np.ones(7, bool)
        self.t = 0

    def _draw(self):
        parts = []
        for n in self.nvec:
            m = self.np_random.random(n) < 0.5
            m[self.np_random.integers(n)] = True
            parts.append(m)
        self.mask = np.concatenate(parts)
        return self.mask.astype(np.float32), {"action_mask": self.mask.copy()}

    def action_masks(self):
        return self.mask.copy()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._draw()

    def step(self, action):
        a = np.asarray(action)
        ok = self.mask[a[0]] and self.mask[self.nvec[0] + a[1]]
        self.t += 1
        obs, info = self._draw()
        if not ok:
            return obs, -1.0, True, False, info
        return obs, 0.1, False, self.t >= 20, info


class BadMaskPick(MaskedPick):
    """MaskedPick whose action_masks() is wrong in the way `kind` says."""

    def __init__(self, kind: str = "shape"):
        super().__init__()
        self.kind = kind

    def action_masks(self):
        m = ~self.taken
        if self.kind == "shape":
            return m[:-1]
        if self.kind == "dtype":
            return m.astype(np.float32) * 0.5
        return np.zeros_like(m)  # "empty": no valid action
