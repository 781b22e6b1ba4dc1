"""Vanilla actor-critic policy gradient: one step per batch.

    loss = -mean(log pi(a|s) * A) + c1 * 0.5 * mean((V - R)^2) - c2 * H

with A normalised over the batch. This is PPO with K = 1 and a single minibatch: at theta_old
every ratio is 1, inside the band, so the clipped objective's gradient is exactly this one
(grad rho = rho * grad log pi). tests/test_algos.py checks the equality.
"""

from __future__ import annotations

from typing import Any

import torch

from trustrl.algos.common import (
    annealed,
    full_batch_diagnostics,
    grad_step,
    normalize_advantages,
    old_distribution,
    set_lr,
)
from trustrl.config import PGConfig
from trustrl.losses import entropy_bonus, value_loss
from trustrl.policies import ActorCritic
from trustrl.rollout import Batch


class PG:
    extra_columns = ("policy_loss", "grad_norm")

    def __init__(self, policy: ActorCritic, cfg: PGConfig):
        self.policy, self.cfg = policy, cfg
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr, eps=cfg.adam_eps)

    def update(self, batch: Batch, progress: float) -> dict[str, float]:
        cfg = self.cfg
        lr = annealed(cfg.lr, cfg.anneal_lr, progress)
        set_lr(self.optimizer, lr)
        old = old_distribution(self.policy, batch)
        logp, entropy, values = self.policy.evaluate_actions(batch.obs, batch.actions)
        adv = normalize_advantages(batch.advantages) if cfg.norm_adv else batch.advantages
        pl = -(logp * adv).mean()
        vl = value_loss(values, batch.returns)
        loss = pl + cfg.vf_coef * vl - cfg.ent_coef * entropy_bonus(entropy)
        params = list(self.policy.parameters())
        gn = grad_step(self.optimizer, loss, params, cfg.max_grad_norm)
        return {"lr": lr, "policy_loss": pl.item(), "value_loss": vl.item(), "grad_norm": gn,
                **full_batch_diagnostics(self.policy, batch, old, cfg.clip_eps)}

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
