"""PPO-penalty: the adaptive-KL version (Schulman et al., 2017, section 4).

    for epoch = 1..K, for each minibatch:
        L = mean(rho * A) - beta * mean(KL(pi_old(.|s) || pi_theta(.|s)))      (exact KL)
        loss = -L + c1 L_V - c2 H ; one Adam step
    d = mean KL(pi_old || pi) on the full batch after the update
    beta <- beta / 2 if d < d_targ / 1.5 ;  beta <- 2 beta if d > 1.5 d_targ

PPO's K-epoch loop (algos/ppo.py) with the clip taken out and the KL term put in, one beta per
member (PPO.kl_coef: PPO.loss adds beta * mean KL, and the compiled epochs do too). The KL's
derivative in the actor's output (for the closed-form backend) sits beside the
KL itself, in the population network's distribution code (PopNet.kl_backward).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from trustrl.algos.ppo import PPO
from trustrl.compute.backends import Backend
from trustrl.nets.popnet import PopNet


class PPOPenalty(PPO):
    extra_columns = ("policy_loss", "epochs_run", "beta", "kl_penalty", "grad_norm")
    mb_stat = "kl_penalty"

    def __init__(self, net: PopNet, cfg: Any, backend: Backend, keys: Tensor):
        super().__init__(net, cfg, backend, keys, clip=False)
        self.target_kl, self.clip_value_loss = None, False  # the penalty does the limiting
        self.needs_old = True
        self.kl_target = cfg.kl_target
        self.beta = torch.full((net.population,), float(cfg.beta_init), dtype=torch.float64,
                               device=net.flat.device)
        self.kl_coef = self.beta  # PPO.loss's penalty term; adapted in place below

    def update(self, batch: dict[str, Tensor], counter: Tensor | int,
               lr: Tensor | float) -> dict[str, Tensor]:
        beta = self.beta.clone()  # the beta used during this update
        out = super().update(batch, counter, lr)
        with torch.no_grad():  # d: the exact mean KL after the update
            d = out["kl_exact"].double()
            self.beta.copy_(torch.where(d < self.kl_target / 1.5, self.beta / 2.0,
                                        torch.where(d > self.kl_target * 1.5, self.beta * 2.0,
                                                    self.beta)))
        out["beta"] = beta
        return out

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "beta": self.beta.detach().cpu().clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        with torch.no_grad():
            self.beta.copy_(state["beta"])
