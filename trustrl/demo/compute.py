"""trustrl's own Python numbers for the demos, as JSON-ready dicts (the server's /api/*).

The pages compute in the browser; these functions give the same quantities from the code the
claims of `trustrl reproduce` use, so a page (its "check against trustrl" button) and the tests
can compare the two:

- K-epoch bandit: trustrl.experiments.kepoch.simulate for one seed;
- clip explorer: clip_value_and_slope from claims_exact (trustrl.maths.losses + autograd);
- natural vs plain gradient: natural_step, sigmoid_kl and sigmoid_fisher from claims_exact
  (conjugate gradient on trustrl's Fisher-vector product).

Imported lazily by the server (numpy and torch are heavy); the module itself is pure.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from numpy.typing import NDArray


def arm_mean_advantages(arms: NDArray[np.int64], adv: NDArray[np.float64],
                        n_arms: int = 3) -> list[float | None]:
    """Each arm's mean advantage in one batch ([N] arms and advantages); None for an arm that
    was not pulled (the card shows a dash)."""
    out: list[float | None] = []
    for a in range(n_arms):
        sel = arms == a
        out.append(float(adv[sel].mean()) if sel.any() else None)
    return out


def kepoch(K: int, N: int, eps: float, seed: int, iterations: int,
           lr: float = 1.0) -> dict[str, Any]:
    """The K-epoch demo for one seed: every quantity the page displays, per iteration.

    Shapes (T = iterations): policies [T+1][2][3], J and entropy [T+1][2], kl_epochs [T][K][2],
    arms and advantages [T][2][N], arm_mean_adv [T][2][3] (None: arm not in the batch).
    Learner 0 is "no clip", learner 1 PPO-clip.
    """
    from trustrl.experiments.kepoch import DemoConfig, simulate

    run = simulate(DemoConfig(K=K, N=N, lr=lr, eps=eps, iterations=iterations), [seed])
    arms, adv = run.arms[:, :, 0], run.advantages[:, :, 0]
    return {
        "config": {"K": K, "N": N, "eps": eps, "seed": seed, "iterations": iterations,
                   "lr": lr, "means": list(run.config.means)},
        "policies": run.policies[:, :, 0].tolist(),
        "J": run.J[:, :, 0].tolist(),
        "entropy": run.entropy[:, :, 0].tolist(),
        "kl_epochs": run.kl_epochs[:, :, :, 0].tolist(),
        "arms": arms.tolist(),
        "advantages": adv.tolist(),
        "arm_mean_adv": [[arm_mean_advantages(arms[t, lrn], adv[t, lrn]) for lrn in range(2)]
                         for t in range(iterations)],
    }


def clip_case(adv: float, rho: float, eps: float) -> int:
    """The chapter's case (1 to 4) of one sample: A > 0 -> 1, or 2 past 1 + eps;
    A < 0 -> 3, or 4 below 1 - eps. At the band's edge the sample is not clipped."""
    if adv > 0:
        return 2 if rho > 1 + eps else 1
    return 4 if rho < 1 - eps else 3


def clip(adv: float, rho: float, eps: float) -> dict[str, Any]:
    """rho*A, clip(rho)*A, the PPO objective (the min) and its slope d/d rho by autograd."""
    from trustrl.experiments.claims_exact import clip_value_and_slope

    unclipped, clipped, objective, slope = clip_value_and_slope(adv, rho, eps)
    return {"adv": adv, "rho": rho, "eps": eps, "unclipped": unclipped, "clipped": clipped,
            "objective": objective, "slope": slope,
            "case": clip_case(adv, rho, eps) if adv != 0 else None}


def natural(theta: float, delta: float, lr: float) -> dict[str, Any]:
    """The one-parameter policy pi(right) = sigmoid(theta), reward 1 for right: the plain
    gradient step lr * g and the natural step sqrt(2 delta / F) F^-1 g, each with its exact KL."""
    from trustrl.experiments.claims_exact import natural_step, sigmoid_fisher, sigmoid_kl

    e = math.exp(-abs(theta))  # sigma and sigma (1 - sigma) without overflow or cancellation
    s = 1.0 / (1.0 + e) if theta >= 0 else e / (1.0 + e)
    g = e / (1.0 + e) ** 2
    plain = lr * g
    nat = natural_step(theta, delta)
    return {"theta": theta, "delta": delta, "lr": lr, "pi_right": s, "g": g,
            "fisher": sigmoid_fisher(theta), "plain_step": plain,
            "plain_kl": sigmoid_kl(theta, theta + plain), "natural_step": nat,
            "natural_kl": sigmoid_kl(theta, theta + nat)}


@functools.lru_cache(maxsize=64)
def action_space(env_id: str) -> dict[str, Any]:
    """{"kind": "discrete", "n": n} / {"kind": "box", "dim": d} / {"kind": "unknown"}, by making
    the env once with Gymnasium (cached). The dashboard uses it for the entropy chart: the
    chapter's 'entropy falls to near 0' warning is about discrete policies; a Gaussian's entropy
    is not bounded below by 0.

    Only ids already in Gymnasium's registry, without a 'module:' prefix, are made: the id comes
    from a file on disk, and a prefix would import that module (run code) on a page view."""
    import warnings

    import gymnasium as gym

    if ":" in env_id or env_id not in gym.registry:
        return {"kind": "unknown"}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            env = gym.make(env_id)
        try:
            space = env.action_space
        finally:
            env.close()
    except Exception:  # noqa: BLE001 - an env we cannot make: just no band
        return {"kind": "unknown"}
    if isinstance(space, gym.spaces.Discrete):
        return {"kind": "discrete", "n": int(space.n)}
    if isinstance(space, gym.spaces.Box):
        return {"kind": "box", "dim": int(np.prod(space.shape))}
    return {"kind": "unknown"}
