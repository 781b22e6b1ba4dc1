"""The PPO-clip update, step for step as in the chapter's "PPO-clip, actor-critic style" box.

    3. for epoch = 1..K:
         shuffle the T samples; for each minibatch M:
           A <- (A - mean_M(A)) / std_M(A)                 (advantage normalisation)
           rho = exp(log pi_theta(a|s) - logp_old)
           loss = -L_clip + c1 L_V - c2 H
           one Adam step on loss, after clipping the global gradient norm
         if approx_kl(full batch) > target_kl: break       (early stopping)

Steps 1 and 2 (rollout, GAE) live in rollout.py and advantages.py; the loop in train.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from trustrl import diagnostics as diag
from trustrl.losses import clipped_surrogate_loss, entropy_bonus, value_loss
from trustrl.policies import ActorCritic
from trustrl.rollout import Rollout


@dataclass
class Batch:
    """A rollout flattened to [B = T*N]; logp_old and values_old are frozen here."""

    obs: Tensor
    actions: Tensor
    logp_old: Tensor
    values_old: Tensor
    advantages: Tensor
    returns: Tensor

    @staticmethod
    def from_rollout(r: Rollout, advantages: Tensor, returns: Tensor) -> Batch:
        n = r.values.numel()
        return Batch(
            obs=r.obs.reshape(n, -1),
            actions=r.actions.reshape(n, *r.actions.shape[2:]),
            logp_old=r.logp.reshape(n),
            values_old=r.values.reshape(n),
            advantages=advantages.reshape(n),
            returns=returns.reshape(n),
        )

    def __len__(self) -> int:
        return self.logp_old.shape[0]


def normalize_advantages(adv: Tensor, eps: float = 1e-8) -> Tensor:
    """(A - mean) / (std + eps) within a minibatch; a single sample is left as it is."""
    if adv.numel() < 2:
        return adv
    return (adv - adv.mean()) / (adv.std() + eps)


@torch.no_grad()
def full_batch_diagnostics(policy: ActorCritic, batch: Batch, clip_eps: float) -> dict[str, float]:
    """approx KL (k3 and k1), clip fraction and ratio stats of the current policy vs pi_old."""
    logp = policy.dist(batch.obs).log_prob(batch.actions)
    log_ratio = logp - batch.logp_old
    ratio = log_ratio.exp()
    return {
        "approx_kl": diag.approx_kl(log_ratio, "k3"),
        "approx_kl_k1": diag.approx_kl(log_ratio, "k1"),
        "clip_fraction": diag.clip_fraction(ratio, clip_eps),
        **diag.ratio_stats(ratio),
    }


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
) -> dict[str, float]:
    """K epochs of shuffled minibatch steps on the clipped loss; returns the update's metrics.

    Uses the global torch RNG for the shuffles (saved in checkpoints, so resume is exact).
    Metrics: mean minibatch losses of the last epoch run, epochs_run, early_stopped, the
    mean pre-clip gradient norm, and full-batch diagnostics of the final policy vs pi_old.
    """
    n = len(batch)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    epochs_run, early_stopped = 0, False
    stats: dict[str, list[float]] = {"policy_loss": [], "value_loss": [], "entropy": [],
                                     "grad_norm": [], "clip_fraction_mb": []}
    final_diag: dict[str, float] | None = None
    for _epoch in range(update_epochs):
        for k in stats:
            stats[k].clear()
        perm = torch.randperm(n, device=batch.obs.device)
        for start in range(0, n, minibatch_size):
            idx = perm[start:start + minibatch_size]
            logp, entropy, values = policy.evaluate_actions(batch.obs[idx], batch.actions[idx])
            adv = batch.advantages[idx]
            if norm_adv:
                adv = normalize_advantages(adv)
            # logp_old is the stored one: never recompute it during the epochs.
            ratio = torch.exp(logp - batch.logp_old[idx])
            pl = clipped_surrogate_loss(ratio, adv, clip_eps)
            vl = value_loss(values, batch.returns[idx],
                            batch.values_old[idx] if clip_value_loss else None,
                            clip_eps if clip_value_loss else None)
            ent = entropy_bonus(entropy)
            loss = pl + vf_coef * vl - ent_coef * ent

            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if max_grad_norm > 0:
                gn = nn.utils.clip_grad_norm_(params, max_grad_norm)
            else:
                gn = torch.linalg.vector_norm(
                    torch.stack([p.grad.norm() for p in params if p.grad is not None]))
            optimizer.step()

            stats["policy_loss"].append(pl.item())
            stats["value_loss"].append(vl.item())
            stats["entropy"].append(ent.item())
            stats["grad_norm"].append(gn.item())
            stats["clip_fraction_mb"].append(diag.clip_fraction(ratio.detach(), clip_eps))
        epochs_run += 1
        if target_kl is not None:
            final_diag = full_batch_diagnostics(policy, batch, clip_eps)
            if final_diag["approx_kl"] > target_kl:
                early_stopped = True
                break
    if final_diag is None:
        final_diag = full_batch_diagnostics(policy, batch, clip_eps)
    out = {k: sum(v) / len(v) for k, v in stats.items()}
    out.update(final_diag)
    out["epochs_run"] = float(epochs_run)
    out["early_stopped"] = float(early_stopped)
    return out
