"""CartPoleNoVel-v1 and PendulumNoVel-v1: partially observed classic-control envs for recurrent
policies (docs/recurrent.md), built as rl-baselines3-zoo builds them (its
``rl_zoo3/import_envs.py``): the Gymnasium env with the velocities removed from the
observation, so that a memoryless policy cannot tell which way the pole is moving.

CartPoleNoVel-v1: CartPole-v1's observation (x, x_dot, theta, theta_dot) -> (x, theta), 500
steps. PendulumNoVel-v1: Pendulum-v1's (cos theta, sin theta, theta_dot) -> (cos theta,
sin theta), 200 steps. Registered on import of trustrl.envs.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

KEEP = {"CartPole-v1": (0, 2), "Pendulum-v1": (0, 1)}
"""The observation columns each env keeps (its positions)."""
IDS = {"CartPoleNoVel-v1": "CartPole-v1", "PendulumNoVel-v1": "Pendulum-v1"}


class NoVelocity(gym.ObservationWrapper):
    """The observation's position columns only (`keep`), a Box of their bounds."""

    def __init__(self, env: gym.Env, keep: tuple[int, ...]):
        super().__init__(env)
        self.keep = np.asarray(keep)
        box = env.observation_space
        assert isinstance(box, gym.spaces.Box)
        self.observation_space = gym.spaces.Box(box.low[self.keep], box.high[self.keep],
                                                dtype=box.dtype)  # type: ignore[arg-type]

    def observation(self, observation: Any) -> np.ndarray:
        return np.asarray(observation)[self.keep]


def make_no_vel(base: str, **kwargs: Any) -> gym.Env:
    """The Gymnasium env `base` without its velocities (its time limit kept)."""
    return NoVelocity(gym.make(base, **kwargs), KEEP[base])


def register() -> None:
    """Register CartPoleNoVel-v1 and PendulumNoVel-v1 with Gymnasium (once)."""
    for env_id, base in IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point="trustrl.envs.no_vel:make_no_vel",
                         kwargs={"base": base})
