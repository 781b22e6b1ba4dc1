"""PPO-clip, step for step as in the chapter's "PPO-clip, actor-critic style" box.

    3. for epoch = 1..K:
         shuffle the T samples; for each minibatch M:
           A <- (A - mean_M(A)) / std_M(A)                 (advantage normalisation)
           rho = exp(log pi_theta(a|s) - logp_old)
           loss = -L_clip + c1 L_V - c2 H
           one Adam step on loss, after clipping the global gradient norm
         if approx_kl(full batch) > target_kl: break       (early stopping)

Steps 1 and 2 (rollout with frozen logp_old and V_old, GAE) are shared by every algorithm and
live in rollout.py and advantages.py; the loop around them in train.py. `clip=False` gives the
chapter's ablation, the plain surrogate optimised for K epochs (`ppo-noclip`).
"""

from __future__ import annotations

from typing import Any

import torch

from trustrl import diagnostics as diag
from trustrl.algos.common import (
    annealed,
    full_batch_diagnostics,
    grad_step,
    normalize_advantages,
    old_distribution,
    set_lr,
)
from trustrl.config import PPOConfig
from trustrl.losses import clipped_surrogate_loss, entropy_bonus, surrogate_loss, value_loss
from trustrl.policies import ActorCritic
from trustrl.rollout import Batch


def ppo_update(
    policy: ActorCritic,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    *,
    update_epochs: int,
    minibatch_size: int,
    clip_eps: float,
    vf_coef: float,
    ent_coef: float,
    max_grad_norm: float,
    target_kl: float | None = None,
    norm_adv: bool = True,
    clip_value_loss: bool = False,
    clip: bool = True,
) -> dict[str, float]:
    """K epochs of shuffled minibatch steps on the PPO loss; returns the update's metrics.

    Uses the global torch RNG for the shuffles (saved in checkpoints, so resume is exact).
    Metrics: mean minibatch losses of the last epoch run, epochs_run, early_stopped, the mean
    pre-clip gradient norm, and full-batch diagnostics of the final policy against pi_old.
    """
    n = len(batch)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    old = old_distribution(policy, batch)
    epochs_run = 0
    stats: dict[str, list[float]] = {"policy_loss": [], "value_loss": [], "grad_norm": [],
                                     "clip_fraction_mb": []}
    final: dict[str, float] | None = None
    for _epoch in range(update_epochs):
        for v in stats.values():
            v.clear()
        perm = torch.randperm(n, device=batch.obs.device)
        for start in range(0, n, minibatch_size):
            idx = perm[start:start + minibatch_size]
            logp, entropy, values = policy.evaluate_actions(batch.obs[idx], batch.actions[idx])
            adv = batch.advantages[idx]
            if norm_adv:
                adv = normalize_advantages(adv)
            # logp_old is the stored one: never recompute it during the epochs.
            ratio = torch.exp(logp - batch.logp_old[idx])
            if clip:
                pl = clipped_surrogate_loss(ratio, adv, clip_eps)
            else:  # the ablation: nothing stops the ratio from running away
                pl = surrogate_loss(ratio, adv)
            vl = value_loss(values, batch.returns[idx],
                            batch.values_old[idx] if clip_value_loss else None,
                            clip_eps if clip_value_loss else None)
            loss = pl + vf_coef * vl - ent_coef * entropy_bonus(entropy)
            stats["grad_norm"].append(grad_step(optimizer, loss, params, max_grad_norm))
            stats["policy_loss"].append(pl.item())
            stats["value_loss"].append(vl.item())
            stats["clip_fraction_mb"].append(diag.clip_fraction(ratio.detach(), clip_eps))
        epochs_run += 1
        if target_kl is not None:
            final = full_batch_diagnostics(policy, batch, old, clip_eps)
            if final["approx_kl"] > target_kl:
                break
    if final is None:
        final = full_batch_diagnostics(policy, batch, old, clip_eps)
    out = {k: sum(v) / len(v) for k, v in stats.items()}
    out.update(final)
    out["epochs_run"] = epochs_run  # counters stay ints: metrics.csv shows 10, not 10.0
    # early stopping means epochs were skipped: a KL past the target after the last epoch
    # stops nothing (the batched engine counts the same way)
    out["early_stopped"] = int(epochs_run < update_epochs)
    return out


class PPO:
    """PPO-clip (or, with clip=False, the unclipped K-epoch ablation) with one Adam optimizer
    over all parameters and a linearly annealed learning rate."""

    extra_columns = ("policy_loss", "epochs_run", "early_stopped", "clip_fraction_mb",
                     "grad_norm")

    def __init__(self, policy: ActorCritic, cfg: PPOConfig, clip: bool = True):
        self.policy, self.cfg, self.clip = policy, cfg, clip
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr, eps=cfg.adam_eps)

    def update(self, batch: Batch, progress: float) -> dict[str, float]:
        cfg = self.cfg
        lr = annealed(cfg.lr, cfg.anneal_lr, progress)
        set_lr(self.optimizer, lr)
        m = ppo_update(
            self.policy, self.optimizer, batch, update_epochs=cfg.update_epochs,
            minibatch_size=cfg.minibatch_size, clip_eps=cfg.clip_eps, vf_coef=cfg.vf_coef,
            ent_coef=cfg.ent_coef, max_grad_norm=cfg.max_grad_norm, target_kl=cfg.target_kl,
            norm_adv=cfg.norm_adv, clip_value_loss=cfg.clip_value_loss, clip=self.clip,
        )
        return {"lr": lr, **m}

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
