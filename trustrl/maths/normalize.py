"""Running mean/std normalisation for observations and reward scaling.

State is plain NumPy (float64) so that it saves into checkpoints and agents exactly, and so a
frozen copy used at evaluation never changes.

The running moments' update, `fold_moments` (its last step `merge_moments`, also how
runners' statistics combine), and the normalisation itself, `normalized`
(elementwise), are written once over a free array namespace ``o`` (NumPy here, with torch's
`clamp`): `RunningMeanStd` and `ObsNormalizer` run them on NumPy arrays, the batched collector
on torch tensors (`fold_moments_torch`, `normalized_torch`) and on NumPy arrays of P members,
and the compiled rollout compiles the same code with Numba (trustrl.compute.compiled.xp);
tests/test_one_source.py checks that each binding is this code.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from trustrl.util.rebind import Namespace, rebound


def _clamp(x: Any, low: Any, high: Any) -> Any:
    """torch.clamp's numbers in NumPy (NaN kept), without np.clip's wrapper cost."""
    return np.minimum(np.maximum(x, low), high)


o: Any = Namespace("trustrl_numpy_ops", np, clamp=_clamp)
"""The array namespace of `fold_moments` and `normalized`: NumPy, with torch's `clamp` (see
the module's docstring)."""


def normalized(x: Any, mean: Any, var: Any, clip: Any, eps: Any) -> Any:
    """(x - mean) / sqrt(var + eps) clipped to [-clip, clip], elementwise (float64): what the
    networks see of an observation (the callers cast it to float32). NaN stays NaN."""
    return o.clamp((x - mean) / o.sqrt(var + eps), -clip, clip)


def fold_moments(mean: Any, var: Any, count: Any, x: Any) -> tuple[Any, Any, Any]:
    """Fold the batch x [P, n, ...] (float64; over axis 1) into P running means and variances
    [P, ...] of `count` samples each (parallel Welford, Chan et al.): returns the new (mean,
    var, count). The batch's moments are np.mean's and np.var's arithmetic written out (a sum
    over the axis divided by n; the squared deviations from that mean summed and divided by
    n); one sample is its own mean with variance exactly 0 (what the sums give, at less cost:
    this runs once or twice per env step). The easy mistake: the unbiased variance (n - 1), or
    forgetting the delta^2 term that moves the old samples' spread to the new mean."""
    n = x.shape[1]
    if n == 1:
        b_mean = x[:, 0] * 1.0
        b_var = o.zeros_like(b_mean)
    else:
        b_mean = x.sum(1) / n
        dev = x - b_mean[:, None]
        b_var = (dev * dev).sum(1) / n
    return merge_moments(mean, var, count, b_mean, b_var, n)


def merge_moments(mean: Any, var: Any, count: Any, b_mean: Any, b_var: Any, n: Any
                  ) -> tuple[Any, Any, Any]:
    """Merge the moments of another stream (its mean, population variance and count n) into
    running ones (mean, var of `count` samples): Chan et al.'s parallel update, the one step of
    `fold_moments` after the batch's moments, and how the statistics of several processes'
    streams combine (trustrl.learn.runners). Returns the new (mean, var, count); equal, to rounding,
    to folding in every sample of that stream."""
    delta = b_mean - mean
    total = count + n
    m2 = var * count + b_var * n + delta * delta * count * n / total
    return mean + delta * n / total, m2 / total, total


class RunningMeanStd:
    """Mean and variance of a stream of batches (parallel Welford / Chan et al. update)."""

    def __init__(self, shape: tuple[int, ...] = (), epsilon: float = 1e-4):
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = float(epsilon)

    def update(self, batch: np.ndarray) -> None:
        """Fold in a batch of shape [B, *shape] (`fold_moments`, one member)."""
        batch = np.asarray(batch, np.float64)
        mean, var, self.count = fold_moments(self.mean[None], self.var[None], self.count,
                                             batch[None])
        self.mean, self.var = mean[0], var[0]

    def merge(self, mean: np.ndarray, var: np.ndarray, count: float) -> None:
        """Fold in the statistics of another stream (`merge_moments`)."""
        self.mean, self.var, self.count = merge_moments(self.mean, self.var, self.count,
                                                        mean, var, count)

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
        return normalized(obs, self.rms.mean, self.rms.var, self.clip,
                          self.epsilon).astype(np.float32)

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


_TORCH = rebound("_trustrl_normalize_torch", "trustrl.maths.normalize over torch", globals(),
                 (merge_moments, fold_moments, normalized), {"o": torch})
fold_moments_torch, normalized_torch = _TORCH.fold_moments, _TORCH.normalized
"""`fold_moments` and `normalized` over torch tensors (the batched collector's torch
rollout, any device)."""
