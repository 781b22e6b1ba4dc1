"""PPO-penalty: the adaptive-KL version (Schulman et al., 2017, section 4).

    for epoch = 1..K, for each minibatch:
        L = mean(rho * A) - beta * mean(KL(pi_old(.|s) || pi_theta(.|s)))      (exact KL)
        loss = -L + c1 L_V - c2 H ; one Adam step
    d = mean KL(pi_old || pi) on the full batch after the update
    beta <- beta / 2 if d < d_targ / 1.5 ;  beta <- 2 beta if d > 1.5 d_targ
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
from trustrl.config import PPOPenaltyConfig
from trustrl.distributions import Categorical, DiagGaussian
from trustrl.losses import entropy_bonus, surrogate_objective, value_loss
from trustrl.policies import ActorCritic
from trustrl.rollout import Batch
from trustrl.trust.kl_control import AdaptiveKL


def _index(d: Categorical | DiagGaussian, idx: torch.Tensor) -> Categorical | DiagGaussian:
    if isinstance(d, Categorical):
        return Categorical(d.logits[idx])
    return DiagGaussian(d.mean[idx], d.log_std[idx])


class PPOPenalty:
    extra_columns = ("policy_loss", "epochs_run", "beta", "kl_penalty", "grad_norm")

    def __init__(self, policy: ActorCritic, cfg: PPOPenaltyConfig):
        self.policy, self.cfg = policy, cfg
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr, eps=cfg.adam_eps)
        self.kl_control = AdaptiveKL(cfg.beta_init, cfg.kl_target)

    def update(self, batch: Batch, progress: float) -> dict[str, float]:
        cfg, policy = self.cfg, self.policy
        lr = annealed(cfg.lr, cfg.anneal_lr, progress)
        set_lr(self.optimizer, lr)
        beta = self.kl_control.beta  # the beta used during this update
        old = old_distribution(policy, batch)
        params = list(policy.parameters())
        n = len(batch)
        stats: dict[str, list[float]] = {"policy_loss": [], "value_loss": [], "kl_penalty": [],
                                         "grad_norm": []}
        for _epoch in range(cfg.update_epochs):
            for v in stats.values():
                v.clear()  # report the last epoch's minibatch means
            perm = torch.randperm(n, device=batch.obs.device)
            for start in range(0, n, cfg.minibatch_size):
                idx = perm[start:start + cfg.minibatch_size]
                d = policy.dist(batch.obs[idx])
                logp, entropy = d.log_prob(batch.actions[idx]), d.entropy()
                adv = batch.advantages[idx]
                if cfg.norm_adv:
                    adv = normalize_advantages(adv)
                ratio = torch.exp(logp - batch.logp_old[idx])
                kl = _index(old, idx).kl(d).mean()  # type: ignore[arg-type]
                pl = -(surrogate_objective(ratio, adv).mean() - beta * kl)
                vl = value_loss(policy.value(batch.obs[idx]), batch.returns[idx])
                loss = pl + cfg.vf_coef * vl - cfg.ent_coef * entropy_bonus(entropy)
                stats["grad_norm"].append(
                    grad_step(self.optimizer, loss, params, cfg.max_grad_norm))
                stats["policy_loss"].append(pl.item())
                stats["value_loss"].append(vl.item())
                stats["kl_penalty"].append(kl.item())
        diag = full_batch_diagnostics(policy, batch, old, cfg.clip_eps)
        self.kl_control.update(diag["kl_exact"])  # d: exact mean KL after the update
        return {"lr": lr, "beta": beta, "epochs_run": cfg.update_epochs,
                **{k: sum(v) / len(v) for k, v in stats.items()}, **diag}

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "kl": self.kl_control.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.kl_control.load_state_dict(state["kl"])
