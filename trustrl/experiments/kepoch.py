"""The chapter's K-epoch demo ("Squeezing one batch"), simulated exactly and vectorised over seeds.

Two learners play the 3-armed bandit with true means A 1.0, B 0.6, C 0.0 and unit-variance
Gaussian reward noise. Each iteration each learner draws a batch of N pulls from its own current
policy pi_old = softmax(z), sets advantage = reward - batch mean, and takes K full-batch
gradient-ascent steps (learning rate lr) on its softmax logits z:

- learner PLAIN (0) maximises the plain surrogate  mean_i(rho_i A_i);
- learner PPO (1) maximises PPO-clip  mean_i(min(rho_i A_i, clip(rho_i, 1-eps, 1+eps) A_i)),

with rho_i = pi(a_i) / pi_old(a_i). The gradients are analytic:

    d/dz mean_i(rho_i A_i) = mean_i(rho_i A_i (e_{a_i} - pi)),

and for PPO-clip a sample contributes zero once it is clipped, i.e. when A_i > 0 and
rho_i > 1 + eps or A_i < 0 and rho_i < 1 - eps (the chapter's cases 2 and 4); at the band's
edge the sample still counts, as with torch.clamp's gradient.

Shared random numbers. Both learners consume the SAME stream of uniforms per seed: arms are drawn
by inverse CDF from each learner's own policy with the same uniform, and the reward noise is the
same normal, so two learners with identical policies see identical batches (Exercise 9.7 (a)).

The random number generator is mulberry32 (Tommy Ettinger's 32-bit generator), chosen because
it is a few lines in any language; it is re-implementable exactly in JavaScript with Math.imul
and `>>> 0`. The seed is used directly as the 32-bit state. Per iteration and seed, the stream is
consumed in this order (all draws are u = uint32 / 2**32, in [0, 1)):

1. N uniforms u_1..u_N: pull i picks arm 0 if u_i < pi(0), arm 1 if u_i < pi(0) + pi(1), else
   arm 2 (computed as (u_i >= pi(0)) + (u_i >= pi(0) + pi(1)));
2. N normals, each from two uniforms (v, w) drawn in that order, by the cosine branch of
   Box-Muller: noise_i = sqrt(-2 ln(1 - v)) cos(2 pi w).

So an iteration consumes 3N draws. For seeds below 800 the streams of two seeds do not overlap
within their first 680,000 draws (the state advances by 0x6D2B79F5 per draw). A JavaScript port
reproduces the uniforms bit for bit; log/cos/exp may differ in the last ulp between platforms,
which changes nothing unless a uniform falls within ~1e-16 of a CDF edge.

Everything here is pure numpy in float64: no global state, the result is a function of
(config, seeds) only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

MEANS: tuple[float, float, float] = (1.0, 0.6, 0.0)
PLAIN, PPO = 0, 1  # learner index: plain surrogate, PPO-clip
LEARNERS = ("no clip", "PPO-clip")

_MULBERRY_INC = np.uint32(0x6D2B79F5)


class Mulberry32:
    """mulberry32, one independent generator per seed, advanced in lockstep (vectorised).

    The JavaScript original, for reference (state `a` is the seed):

        a = (a + 0x6D2B79F5) | 0;
        let t = Math.imul(a ^ (a >>> 15), 1 | a);
        t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
        return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    """

    def __init__(self, seeds: ArrayLike):
        seeds_arr = np.asarray(seeds, dtype=np.int64)
        if seeds_arr.ndim != 1 or np.any(seeds_arr < 0) or np.any(seeds_arr >= 2**32):
            raise ValueError("seeds must be a 1-d sequence of integers in [0, 2**32)")
        self.state: NDArray[np.uint32] = seeds_arr.astype(np.uint32)

    def next_uint32(self) -> NDArray[np.uint32]:
        """One 32-bit output per seed (uint32 arithmetic wraps modulo 2**32, as Math.imul)."""
        self.state = self.state + _MULBERRY_INC
        a = self.state
        t = (a ^ (a >> np.uint32(15))) * (a | np.uint32(1))
        t = (t + (t ^ (t >> np.uint32(7))) * (t | np.uint32(61))) ^ t
        return t ^ (t >> np.uint32(14))

    def uniform(self, n: int) -> NDArray[np.float64]:
        """[S, n] uniforms in [0, 1): n successive draws of every seed's stream."""
        out = np.empty((self.state.shape[0], n), dtype=np.float64)
        for j in range(n):
            out[:, j] = self.next_uint32().astype(np.float64) / 4294967296.0
        return out

    def normal(self, n: int) -> NDArray[np.float64]:
        """[S, n] standard normals; normal j uses draws 2j (v) and 2j+1 (w) of this call."""
        u = self.uniform(2 * n)
        v, w = u[:, 0::2], u[:, 1::2]
        return np.sqrt(-2.0 * np.log1p(-v)) * np.cos(2.0 * np.pi * w)


@dataclass(frozen=True)
class DemoConfig:
    """The demo's knobs; the defaults are the chapter's (K=40, N=12, lr 1, eps 0.2)."""

    K: int = 40  # gradient steps (epochs) per batch
    N: int = 12  # pulls per batch
    lr: float = 1.0  # learning rate on the logits
    eps: float = 0.2  # PPO's clip range (the plain learner ignores it)
    iterations: int = 30
    means: tuple[float, ...] = MEANS


@dataclass
class DemoRun:
    """Everything recorded by `simulate`. Axes: T iterations, 2 learners, S seeds, 3 arms.

    policies[t] is the policy after t iterations (policies[0] is uniform). kl_epochs[t, k] is
    KL(pi_old || pi) after epoch k+1 of iteration t+1, pi_old being that iteration's policy.
    arms and advantages are the batches ([T, 2, S, N]).
    """

    config: DemoConfig
    seeds: NDArray[np.int64]
    policies: NDArray[np.float64]  # [T+1, 2, S, 3]
    kl_epochs: NDArray[np.float64]  # [T, K, 2, S]
    arms: NDArray[np.int64]  # [T, 2, S, N]
    advantages: NDArray[np.float64]  # [T, 2, S, N]
    means: NDArray[np.float64] = field(init=False)

    def __post_init__(self) -> None:
        self.means = np.asarray(self.config.means, dtype=np.float64)

    @property
    def J(self) -> NDArray[np.float64]:
        """Expected reward pi . means, [T+1, 2, S]."""
        return self.policies @ self.means

    @property
    def entropy(self) -> NDArray[np.float64]:
        """Policy entropy in nats, [T+1, 2, S] (0 log 0 = 0)."""
        p = self.policies
        return -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=-1)

    @property
    def argmax(self) -> NDArray[np.int64]:
        """The arm each policy favours, [T+1, 2, S]."""
        return self.policies.argmax(axis=-1)

    @property
    def kl_iteration(self) -> NDArray[np.float64]:
        """KL(pi_old || pi) at the end of each iteration's K epochs, [T, 2, S]."""
        return self.kl_epochs[:, -1]


def log_softmax(z: NDArray[np.float64]) -> NDArray[np.float64]:
    """log softmax over the last axis, stable for large logits."""
    m = z.max(axis=-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(axis=-1, keepdims=True))


def surrogate_grad(z: NDArray[np.float64], logp_old: NDArray[np.float64],
                   arms: NDArray[np.int64], adv: NDArray[np.float64],
                   eps: NDArray[np.float64] | float) -> NDArray[np.float64]:
    """Gradient of mean_i clipped-or-plain rho_i A_i with respect to the logits z.

    z, logp_old: [..., 3]; arms, adv: [..., N]; eps broadcastable to [..., 1] (np.inf for the
    plain surrogate). Returns [..., 3]: mean_i(w_i rho_i A_i (e_{a_i} - pi)) where w_i is 0 for
    a clipped sample (A > 0, rho > 1 + eps or A < 0, rho < 1 - eps) and 1 otherwise.
    """
    logp = log_softmax(z)
    pi = np.exp(logp)
    rho = np.exp(np.take_along_axis(logp, arms, -1) - np.take_along_axis(logp_old, arms, -1))
    clipped = ((adv > 0) & (rho > 1.0 + eps)) | ((adv < 0) & (rho < 1.0 - eps))
    w = np.where(clipped, 0.0, rho * adv)  # [..., N]
    n_arms = z.shape[-1]
    onehot = arms[..., None] == np.arange(n_arms)  # [..., N, 3]
    per_arm = np.sum(w[..., None] * onehot, axis=-2)  # sum_i w_i e_{a_i}
    return (per_arm - pi * w.sum(axis=-1, keepdims=True)) / arms.shape[-1]


def kl_categorical(logp: NDArray[np.float64], logq: NDArray[np.float64]) -> NDArray[np.float64]:
    """KL(p || q) over the last axis from log-probabilities (finite whenever q > 0 in floats)."""
    return np.sum(np.exp(logp) * (logp - logq), axis=-1)


def simulate(config: DemoConfig, seeds: ArrayLike) -> DemoRun:
    """Run the demo for every seed at once (both learners share each seed's random numbers)."""
    seeds_arr = np.asarray(seeds, dtype=np.int64)
    S, N, K, T = seeds_arr.shape[0], config.N, config.K, config.iterations
    means = np.asarray(config.means, dtype=np.float64)
    n_arms = means.shape[0]
    eps = np.array([np.inf, config.eps]).reshape(2, 1, 1)
    rng = Mulberry32(seeds_arr)

    z = np.zeros((2, S, n_arms))
    policies = np.empty((T + 1, 2, S, n_arms))
    policies[0] = np.exp(log_softmax(z))
    kl_epochs = np.empty((T, K, 2, S))
    arms_all = np.empty((T, 2, S, N), dtype=np.int64)
    adv_all = np.empty((T, 2, S, N))
    for t in range(T):
        u = rng.uniform(N)  # [S, N], shared by both learners
        noise = rng.normal(N)
        logp_old = log_softmax(z)
        pi_old = np.exp(logp_old)
        cdf = np.cumsum(pi_old, axis=-1)  # [2, S, 3]
        arms = np.zeros((2, S, N), dtype=np.int64)
        for j in range(n_arms - 1):
            arms += (u[None] >= cdf[..., j : j + 1]).astype(np.int64)
        rewards = means[arms] + noise[None]
        adv = rewards - rewards.mean(axis=-1, keepdims=True)
        for k in range(K):
            z = z + config.lr * surrogate_grad(z, logp_old, arms, adv, eps)
            kl_epochs[t, k] = kl_categorical(logp_old, log_softmax(z))
        policies[t + 1] = np.exp(log_softmax(z))
        arms_all[t], adv_all[t] = arms, adv
    return DemoRun(config, seeds_arr, policies, kl_epochs, arms_all, adv_all)
