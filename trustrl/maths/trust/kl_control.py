"""PPO's two ways of holding the policy near pi_old by its KL: the adaptive coefficient of
PPO-penalty (Schulman et al., 2017, section 4), and the K-epoch loop with its early stop
(`k_epochs`: a member stops once its approx KL passed a target), written once over an array
namespace and bound to torch (trustrl.algos.ppo.PPO.update) and to Numba
(trustrl.compute.compiled.ppo.epochs_kernel: PPO's compiled epochs and the fused iteration)."""

from __future__ import annotations

from typing import Any

import torch

o: Any = torch
"""The array namespace of `k_epochs` (trustrl.compute.compiled binds NumPy's under Numba)."""


class AdaptiveKL:
    """beta <- beta / 2 when d < d_targ / 1.5; beta <- 2 beta when d > 1.5 d_targ.

    d is the mean KL(pi_old || pi) measured after an update. Between the two thresholds beta
    stays. The rule reacts one update late, which is its weakness (Exercise 9.6).
    """

    def __init__(self, beta: float = 1.0, target: float = 0.01):
        if target <= 0:
            raise ValueError("the KL target must be positive")
        self.beta, self.target = float(beta), float(target)

    def update(self, kl: float) -> float:
        if kl < self.target / 1.5:
            self.beta /= 2.0
        elif kl > self.target * 1.5:
            self.beta *= 2.0
        return self.beta

    def state_dict(self) -> dict[str, float]:
        return {"beta": self.beta, "target": self.target}

    def load_state_dict(self, s: dict[str, float]) -> None:
        self.beta, self.target = float(s["beta"]), float(s["target"])


def step(args: Any, idx: Any, active: Any) -> Any:
    """One minibatch step of every active member on its samples idx [P, M]: the loss and its
    gradient, the clip of the gradient's global norm, one Adam step; returns the step's
    metrics [P, m]. The eager binding's: `args[0](idx, active)` (PPO's Python step). The
    compiled binding of `k_epochs` (trustrl.compute.compiled.ppo) sets this name to the compiled
    minibatch step of (its arguments, idx, active)."""
    return args[0](idx, active)


def diagnose(args: Any) -> Any:
    """Each member's full-batch approx KL [P] after an epoch (the diagnostics of the updated
    policy against pi_old). The eager binding's: `args[1]()`; the compiled binding's, the
    compiled diagnostics."""
    return args[1]()


def k_epochs(args: Any, order: Any, minibatch_size: int, active: Any, kl_stop: bool,
             target_kl: Any, stop_early: bool, last: Any, epochs_run: Any) -> None:
    """Step 3 of the chapter's box for P members, written once over the array namespace `o`
    (torch eagerly, PPO.update; NumPy under Numba, trustrl.compute.compiled.ppo): for each epoch e,
    the minibatches of `minibatch_size` units sliced in turn from its shuffle order[e]
    [P, n], each a `step(args, idx, active)` of the members still active; then each active
    member's metrics `last` [P, m] become the means over that epoch's minibatches and its
    `epochs_run` [P] counts the epoch; with `kl_stop`, a member whose full-batch approx KL
    (`diagnose(args)`) passed `target_kl` is masked out of `active` [P] for the epochs left
    (its parameters and Adam state untouched), and, with `stop_early` (not under CUDA-graph
    capture: the test synchronises the host), the loop ends once no member is active.
    `active`, `last` and `epochs_run` are updated in place."""
    n = order.shape[2]
    for e in range(order.shape[0]):
        sums = o.zeros_like(last)
        n_mb = 0
        for s in range(0, n, minibatch_size):
            sums += step(args, order[e, :, s:s + minibatch_size], active)
            n_mb += 1
        last[:] = o.where(active[:, None], sums / n_mb, last)
        epochs_run[:] = epochs_run + active
        if kl_stop:
            active[:] = active & (diagnose(args) <= target_kl)
            if stop_early and not o.any(active):
                break
