"""pg on the batched collector: the chapter's vanilla actor-critic policy gradient,

    loss = -mean(log pi(a|s) * A) + c1 * 0.5 * mean((V - R)^2) - c2 * H,  one step per batch,

as PPO's population engine with K = 1 epoch of one minibatch (the whole batch). At theta_old
every ratio is 1, inside the clip band, so the clipped objective's gradient is exactly the
policy gradient (grad rho = rho * grad log pi) and the closed-form gradient, the per-member
Adam, the diagnostics and every collector come from the engine unchanged. Only the reported
policy loss is pg's own, -mean(log pi_old * A) (algos/pg.py logs it before its step, where
log pi = log pi_old). tests/test_batched_pg.py checks it against algos.pg.PG.

This file (and "pg" in config.BATCHED_ALGOS) is all a variant of an existing algorithm needs
to run on the batched collector: docs/architecture.md, "Adding an algorithm".
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from trustrl.config import PGConfig, PPOConfig
from trustrl.fast.engine import PopulationPPO
from trustrl.fast.engine import ppo_view as _ppo_view


def ppo_view(cfg: PGConfig) -> PPOConfig:
    """The PPO config that performs pg's update: K = 1, one minibatch, no early stopping."""
    return _ppo_view(cfg, update_epochs=1, minibatch_size=cfg.batch_size, target_kl=None,
                     clip_value_loss=False)


class PopulationPG(PopulationPPO):
    def __init__(self, cfg: PGConfig, seeds: list[int], **kw: Any):
        super().__init__(ppo_view(cfg), seeds, clip=True, **kw)

    def _update(self, b: dict[str, Tensor]) -> dict[str, Tensor]:
        out = super()._update(b)
        with torch.no_grad():
            adv = b["advantages"]
            if self.cfg.norm_adv and adv.shape[1] > 1:
                adv = (adv - adv.mean(1, keepdim=True)) / (adv.std(1, keepdim=True) + 1e-8)
            out["policy_loss"] = -(b["logp_old"] * adv).mean(1)
        return out
