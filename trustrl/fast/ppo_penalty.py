"""ppo-penalty on the batched collector: the adaptive-KL PPO of algos/ppo_penalty.py,

    L = mean(rho * A) - beta * mean(KL(pi_old(.|s) || pi_theta(.|s)))   (exact KL)
    loss = -L + c1 L_V - c2 H ; K epochs of minibatch Adam steps
    d = mean exact KL after the update; beta /2 below d_targ/1.5, x2 above 1.5 d_targ,

as PPO's population engine without the clip, its minibatch loss plus the KL term, on the
autograd gradient backend (the closed form has no KL term), with one beta per member. The
K-epoch loop, Adam, the diagnostics and the collectors are the engine's. tests/test_batched_
ppo_penalty.py checks it against algos.ppo_penalty.PPOPenalty on the same batch.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from trustrl.config import PPOConfig, PPOPenaltyConfig
from trustrl.fast.engine import ROW_COLUMNS, PopulationPPO
from trustrl.fast.engine import ppo_view as _ppo_view


def ppo_view(cfg: PPOPenaltyConfig) -> PPOConfig:
    """The PPO config of ppo-penalty's K epochs: no KL early stopping, no value clipping."""
    return _ppo_view(cfg, target_kl=None, clip_value_loss=False)


class PopulationPPOPenalty(PopulationPPO):
    columns = tuple(c for c in ROW_COLUMNS if c != "clip_fraction_mb") + ("beta", "kl_penalty")
    mb_stat = "kl_penalty"
    loss_needs_old = True

    def __init__(self, cfg: PPOPenaltyConfig, seeds: list[int], **kw: Any):
        kw["autograd"] = True
        super().__init__(ppo_view(cfg), seeds, clip=False, **kw)
        self.kl_target = cfg.kl_target
        self.beta = torch.full((self.P,), float(cfg.beta_init), dtype=torch.float64,
                               device=self.device)

    def _minibatch_loss(self, flat: Tensor, o: Tensor, a: Tensor, lpo: Tensor, adv: Tensor,
                        ret: Tensor, v_old: Tensor, old_o: Tensor = None,  # type: ignore[assignment]
                        flat_old: Tensor = None) -> tuple[Tensor, ...]:  # type: ignore[assignment]
        loss, pl, vl, _, out = self._ppo_terms(flat, o, a, lpo, adv, ret, v_old)
        kl = self.net.kl_from(old_o, out, flat_old, flat).mean(1)
        penalty = self.beta.float() * kl
        return loss + penalty, pl + penalty, vl, kl.detach()

    def _update(self, b: dict[str, Tensor]) -> dict[str, Tensor]:
        beta = self.beta.clone()  # the beta of this update
        out = super()._update(b)
        with torch.no_grad():
            d = out["kl_exact"].double()
            self.beta.copy_(torch.where(d < self.kl_target / 1.5, self.beta / 2.0,
                                        torch.where(d > self.kl_target * 1.5, self.beta * 2.0,
                                                    self.beta)))
        out["beta"] = beta
        return out

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "beta": self.beta.detach().cpu().clone()}

    def load_state_dict(self, s: dict[str, Any]) -> None:
        super().load_state_dict(s)
        with torch.no_grad():
            self.beta.copy_(s["beta"])
