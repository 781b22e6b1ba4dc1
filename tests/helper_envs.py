"""Small envs for tests, registered on import so that 'helper_envs:Id' works in gym.make
(in a subprocess, put tests/ on PYTHONPATH)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control import CartPoleEnv


class NaNCartPole(CartPoleEnv):
    """CartPole whose observation turns NaN at the `nan_at`-th step after construction."""

    def __init__(self, nan_at: int = 700, **kw):
        super().__init__(**kw)
        self.nan_at, self.count = nan_at, 0

    def step(self, action):
        obs, r, term, trunc, info = super().step(action)
        self.count += 1
        if self.count >= self.nan_at:
            obs = obs.copy()
            obs[2] = np.nan
        return obs, r, term, trunc, info


class MultiDiscreteEnv(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.MultiDiscrete([2, 3])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, False, {}


class TextObsEnv(gym.Env):
    """An observation space trustrl cannot encode (Text)."""

    observation_space = gym.spaces.Text(8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "a", {}

    def step(self, action):
        return "a", 0.0, False, False, {}


class ConstantRewardEnv(gym.Env):
    """Reward 1 every step, never terminates; a TimeLimit truncates it. The observation is the
    same every step, so V(s) has one true value: 1/(1-gamma) when truncation is bootstrapped."""

    observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 1.0, False, False, {}


class SlowCartPole(CartPoleEnv):
    """CartPole taking at least 2 ms a step: a run long enough to be signalled mid-way."""

    def step(self, action):
        import time

        time.sleep(0.002)
        return super().step(action)


class StuckCartPole(CartPoleEnv):
    """CartPole whose step never returns (sleeps 10 min) once the file named by
    $TRUSTRL_TEST_STUCK exists: a worker busy when its parent dies."""

    def step(self, action):
        import os
        import time

        flag = os.environ.get("TRUSTRL_TEST_STUCK")
        if flag and os.path.exists(flag):
            time.sleep(600)
        return super().step(action)


class EvalRaisesCartPole(CartPoleEnv):
    """CartPole whose reset raises for the evaluation seeds (>= 10,000): a run whose initial
    greedy evaluation fails after the run folder exists."""

    def reset(self, *, seed=None, options=None):
        if seed is not None and seed >= 10_000:
            raise RuntimeError("this env cannot be evaluated")
        return super().reset(seed=seed, options=options)


class LockedCartPole(CartPoleEnv):
    """CartPole holding a threading.Lock: a sub-env that cannot be pickled (as one holding a
    socket, or a local function, would be)."""

    def __init__(self, **kw):
        import threading

        super().__init__(**kw)
        self.lock = threading.Lock()


class EzCartPole(CartPoleEnv, gym.utils.EzPickle):
    """CartPole pickled the way gymnasium's Box2D, MuJoCo and Atari envs are (EzPickle): as its
    constructor's arguments, so an unpickled copy is a fresh env never reset (its step then
    fails, as BipedalWalker's does)."""

    def __init__(self, **kw):
        CartPoleEnv.__init__(self, **kw)
        gym.utils.EzPickle.__init__(self, **kw)


for _id, _entry, _kw in (
    ("SlowCartPole-v0", SlowCartPole, {"max_episode_steps": 500}),
    ("EvalRaisesCartPole-v0", EvalRaisesCartPole, {"max_episode_steps": 500}),
    ("StuckCartPole-v0", StuckCartPole, {"max_episode_steps": 500}),
    ("NaNCartPole-v0", NaNCartPole, {"max_episode_steps": 500}),
    ("MultiDiscreteToy-v0", MultiDiscreteEnv, {"max_episode_steps": 10}),
    ("TextObsToy-v0", TextObsEnv, {"max_episode_steps": 10}),
    ("ConstantReward-v0", ConstantRewardEnv, {"max_episode_steps": 50}),
    ("LockedCartPole-v0", LockedCartPole, {"max_episode_steps": 500}),
    ("EzCartPole-v0", EzCartPole, {"max_episode_steps": 500}),
):
    if _id not in gym.registry:
        gym.register(_id, entry_point=_entry, **_kw)
