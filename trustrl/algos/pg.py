"""Vanilla actor-critic policy gradient: one step per batch.

    loss = -mean(log pi(a|s) * A) + c1 * 0.5 * mean((V - R)^2) - c2 * H

with A normalised over the batch. This is PPO with K = 1 and a single minibatch: at theta_old
every ratio is 1, inside the band, so the clipped objective's gradient is exactly this one
(grad rho = rho * grad log pi), on either backend. The reported policy loss is pg's own,
-mean(log pi_old * A), taken before the step (where log pi = log pi_old).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from trustrl.algos.common import normalize_advantages
from trustrl.algos.ppo import PPO
from trustrl.compute.backends import Backend
from trustrl.nets.popnet import PopNet


class PG(PPO):
    extra_columns = ("policy_loss", "grad_norm")
    int_columns = ()

    def __init__(self, net: PopNet, cfg: Any, backend: Backend, keys: Tensor):
        super().__init__(net, cfg, backend, keys, clip=True)
        self.epochs, self.minibatch_size = 1, cfg.batch_size
        self.target_kl, self.clip_value_loss = None, False

    def update(self, batch: dict[str, Tensor], counter: Tensor | int,
               lr: Tensor | float) -> dict[str, Tensor]:
        out = super().update(batch, counter, lr)
        with torch.no_grad():
            adv = batch["advantages"]
            if self.cfg.norm_adv:
                adv = normalize_advantages(adv)
            out["policy_loss"] = -(batch["logp_old"] * adv).mean(1)
        for k in ("epochs_run", "early_stopped", "clip_fraction_mb"):
            del out[k]
        return out
