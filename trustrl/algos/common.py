"""What every algorithm shares: the Algorithm contract, pi_old, diagnostics, critic regression."""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import Tensor, nn

from trustrl import diagnostics as diag
from trustrl.distributions import Categorical, DiagGaussian
from trustrl.losses import value_loss
from trustrl.policies import ActorCritic
from trustrl.rollout import Batch
from trustrl.trust.fisher import detached


class Algorithm(Protocol):
    """One policy-optimisation method. The training loop calls `update` once per batch, with
    `progress` = the fraction of training done before this update (for schedules)."""

    extra_columns: tuple[str, ...]  # its own metrics.csv columns, beyond the shared ones

    def update(self, batch: Batch, progress: float) -> dict[str, float]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def normalize_advantages(adv: Tensor, eps: float = 1e-8) -> Tensor:
    """(A - mean) / (std + eps); a single sample is left as it is."""
    if adv.numel() < 2:
        return adv
    return (adv - adv.mean()) / (adv.std() + eps)


@torch.no_grad()
def old_distribution(policy: ActorCritic, batch: Batch) -> Categorical | DiagGaussian:
    """pi_old at every state of the batch, for exact KLs. Call before the first step of the
    update: the policy is then still the one that collected the batch."""
    return detached(policy.dist(batch.obs))


@torch.no_grad()
def full_batch_diagnostics(
    policy: ActorCritic, batch: Batch, old: Categorical | DiagGaussian, clip_eps: float
) -> dict[str, float]:
    """How far the updated policy moved from pi_old on the whole batch.

    approx_kl (k3) and approx_kl_k1 from the stored logp_old; kl_exact, the analytic mean
    KL(pi_old || pi); clip fraction with the band clip_eps (reported even by methods that do
    not clip); ratio quantiles; entropy of the updated policy.
    """
    d = policy.dist(batch.obs)
    log_ratio = d.log_prob(batch.actions) - batch.logp_old
    ratio = log_ratio.exp()
    return {
        "approx_kl": diag.approx_kl(log_ratio, "k3"),
        "approx_kl_k1": diag.approx_kl(log_ratio, "k1"),
        "kl_exact": float(old.kl(d).mean()),  # type: ignore[arg-type]
        "clip_fraction": diag.clip_fraction(ratio, clip_eps),
        "clip_eps": clip_eps,
        "entropy": float(d.entropy().mean()),
        **diag.ratio_stats(ratio),
    }


def grad_step(optimizer: torch.optim.Optimizer, loss: Tensor, params: list[nn.Parameter],
              max_grad_norm: float) -> float:
    """zero_grad, backward, global grad-norm clip (when > 0), step; returns the pre-clip norm."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if max_grad_norm > 0:
        norm = nn.utils.clip_grad_norm_(params, max_grad_norm)
    else:
        norm = torch.linalg.vector_norm(
            torch.stack([p.grad.norm() for p in params if p.grad is not None]))
    optimizer.step()
    return float(norm)


def fit_critic(policy: ActorCritic, optimizer: torch.optim.Optimizer, batch: Batch,
               epochs: int, minibatch_size: int) -> float:
    """Regress V on the targets R = A + V_old: `epochs` passes of shuffled minibatches of
    0.5*(V - R)^2, touching critic parameters only. Returns the last epoch's mean loss."""
    n = len(batch)
    losses: list[float] = []
    for _ in range(epochs):
        losses.clear()
        perm = torch.randperm(n, device=batch.obs.device)
        for start in range(0, n, minibatch_size):
            idx = perm[start:start + minibatch_size]
            loss = value_loss(policy.value(batch.obs[idx]), batch.returns[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return sum(losses) / len(losses)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def annealed(lr: float, anneal: bool, progress: float) -> float:
    """Linear decay to 0: lr * (1 - progress), progress = fraction of training already done."""
    return lr * (1.0 - progress) if anneal else lr
