"""Running mean/std normalisation for observations and reward scaling.

State is plain NumPy (float64) so that it saves into checkpoints and agents exactly, and so a
frozen copy used at evaluation never changes.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class RunningMeanStd:
    """Mean and variance of a stream of batches (parallel Welford / Chan et al. update)."""

    def __init__(self, shape: tuple[int, ...] = (), epsilon: float = 1e-4):
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = float(epsilon)

    def update(self, batch: np.ndarray) -> None:
        """Fold in a batch of shape [B, *shape].

        The batch's mean and variance are np.mean's and np.var's arithmetic written out (a sum
        over axis 0 divided by B; the squared deviations from that mean summed and divided by
        B), so the same bits, without their wrappers: this runs once or twice per env step."""
        batch = np.asarray(batch, np.float64)
        b_count = batch.shape[0]
        if b_count == 1:  # one env: its row is the mean, the variance is exactly 0
            b_mean = batch[0]
            b_var = np.zeros_like(b_mean)
        else:
            b_mean = np.add.reduce(batch, axis=0) / b_count
            dev = batch - b_mean
            b_var = np.add.reduce(np.multiply(dev, dev, out=dev), axis=0) / b_count
        delta = b_mean - self.mean
        total = self.count + b_count
        self.mean = self.mean + delta * b_count / total
        m2 = self.var * self.count + b_var * b_count + delta**2 * self.count * b_count / total
        self.var = m2 / total
        self.count = total

    def state_dict(self) -> dict[str, Any]:
        return {"mean": self.mean.copy(), "var": self.var.copy(), "count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.mean = np.array(state["mean"], np.float64)
        self.var = np.array(state["var"], np.float64)
        self.count = float(state["count"])


class ObsNormalizer:
    """(obs - mean) / sqrt(var + eps), clipped to +-clip. Updates only while not frozen."""

    def __init__(self, shape: tuple[int, ...], clip: float = 10.0, epsilon: float = 1e-8):
        self.rms = RunningMeanStd(shape)
        self.clip, self.epsilon = clip, epsilon
        self.frozen = False

    def update(self, obs: np.ndarray) -> None:
        if not self.frozen:
            self.rms.update(obs)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        out = (obs - self.rms.mean) / np.sqrt(self.rms.var + self.epsilon)
        # np.clip's numbers (NaN kept) without its Python wrapper's cost
        return np.minimum(np.maximum(out, -self.clip), self.clip).astype(np.float32)

    def state_dict(self) -> dict[str, Any]:
        return {"rms": self.rms.state_dict(), "clip": self.clip, "epsilon": self.epsilon}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rms.load_state_dict(state["rms"])
        self.clip, self.epsilon = float(state["clip"]), float(state["epsilon"])


class RewardScaler:
    """Divides rewards by the running std of the discounted return (no mean subtraction).

    Keeps one discounted return per env, reset when its episode ends. Scales the rewards the
    learner sees; the episode returns that are logged stay raw.
    """

    def __init__(self, num_envs: int, gamma: float, clip: float = 10.0, epsilon: float = 1e-8):
        self.rms = RunningMeanStd(())
        self.returns = np.zeros(num_envs, np.float64)
        self.gamma, self.clip, self.epsilon = gamma, clip, epsilon

    def __call__(self, rewards: np.ndarray, dones: np.ndarray) -> np.ndarray:
        self.returns = self.returns * self.gamma + rewards
        self.rms.update(self.returns)
        scaled = rewards / np.sqrt(self.rms.var + self.epsilon)
        self.returns[dones] = 0.0
        return np.minimum(np.maximum(scaled, -self.clip), self.clip).astype(np.float32)

    def state_dict(self) -> dict[str, Any]:
        return {"rms": self.rms.state_dict(), "returns": self.returns.copy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rms.load_state_dict(state["rms"])
        self.returns = np.array(state["returns"], np.float64)
