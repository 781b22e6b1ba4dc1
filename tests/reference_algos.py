"""Reference single-run implementations for the tests: the autograd PPO, PG, PPO-penalty and
TRPO updates trustrl had before its one algorithm core (nn.Module networks, torch.optim.Adam,
trust/ for CG, Fisher products and the line search). They share no code with trustrl.algos
beyond the leaves (losses, diagnostics, distributions, trust), so the population algorithms
are checked against an independent implementation of the same boxes."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from trustrl.collect.rollout import Batch
from trustrl.maths import diagnostics as diag
from trustrl.maths.distributions import Categorical, DiagGaussian
from trustrl.maths.losses import (
    clipped_surrogate_loss,
    entropy_bonus,
    surrogate_loss,
    surrogate_objective,
    value_loss,
)
from trustrl.maths.trust.cg import conjugate_gradient
from trustrl.maths.trust.fisher import detached, fisher_vector_product, flat_grad, mean_kl
from trustrl.maths.trust.kl_control import AdaptiveKL
from trustrl.maths.trust.line_search import backtracking_line_search
from trustrl.nets.policies import ActorCritic


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


class PG:
    extra_columns = ("policy_loss", "grad_norm")

    def __init__(self, policy: ActorCritic, cfg: Any):
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
def _index(d: Categorical | DiagGaussian, idx: torch.Tensor) -> Categorical | DiagGaussian:
    if isinstance(d, Categorical):
        return Categorical(d.logits[idx])
    return DiagGaussian(d.mean[idx], d.log_std[idx])


class PPOPenalty:
    extra_columns = ("policy_loss", "epochs_run", "beta", "kl_penalty", "grad_norm")

    def __init__(self, policy: ActorCritic, cfg: Any):
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
class TRPO:
    extra_columns = ("surrogate_improvement", "expected_improvement", "xFx", "step_size",
                     "cg_iters_run", "cg_residual", "ls_steps", "ls_accepted", "step_fraction",
                     "grad_norm")

    def __init__(self, policy: ActorCritic, cfg: Any, line_search: bool = True):
        self.policy, self.cfg, self.line_search = policy, cfg, line_search
        self.vf_optimizer = torch.optim.Adam(policy.critic_parameters(), lr=cfg.vf_lr,
                                             eps=cfg.adam_eps)

    def update(self, batch: Batch, progress: float) -> dict[str, float]:
        cfg, policy = self.cfg, self.policy
        actor = list(policy.actor_parameters())
        old = old_distribution(policy, batch)
        adv = normalize_advantages(batch.advantages) if cfg.norm_adv else batch.advantages

        def surrogate() -> torch.Tensor:  # L(theta) = mean(rho * A), logp_old frozen
            logp = policy.dist(batch.obs).log_prob(batch.actions)
            return (torch.exp(logp - batch.logp_old) * adv).mean()

        @torch.no_grad()
        def evaluate() -> tuple[float, float]:  # (L(theta), mean KL(pi_old || pi_theta))
            d = policy.dist(batch.obs)
            L = (torch.exp(d.log_prob(batch.actions) - batch.logp_old) * adv).mean()
            return float(L), float(old.kl(d).mean())  # type: ignore[arg-type]

        # 2. the policy gradient at theta_old
        L_graph = surrogate()
        g = flat_grad(L_graph, actor)
        L_old = float(L_graph.detach())
        # 3. x ~= F^-1 g by conjugate gradient on Fisher-vector products (double backprop)
        fvp = fisher_vector_product(mean_kl(old, policy.dist(batch.obs)), actor, cfg.damping)
        cg = conjugate_gradient(fvp, g, cfg.cg_iters, cfg.cg_residual_tol)
        x = cg.x
        xFx = float(torch.dot(x, fvp(x)))
        m: dict[str, float] = {"xFx": xFx, "cg_iters_run": cg.iterations,
                               "cg_residual": cg.residual, "grad_norm": float(g.norm())}
        # 4. scale the natural gradient to the KL budget: 1/2 step^T F step = delta
        if xFx > 0 and math.isfinite(xFx):
            step_size = math.sqrt(2.0 * cfg.max_kl / xFx)
            full_step = step_size * x
            m["step_size"] = step_size
            m["expected_improvement"] = float(torch.dot(g, full_step))
            # 5. backtracking line search (TRPO) or the step as it is (NPG)
            if self.line_search:
                res = backtracking_line_search(actor, full_step, evaluate, L_old,
                                               cfg.max_kl, cfg.backtrack_ratio,
                                               cfg.backtrack_iters)
                m.update(ls_steps=res.steps_tried, ls_accepted=int(res.accepted),
                         step_fraction=res.step_fraction,
                         surrogate_improvement=res.improvement if res.accepted else 0.0)
            else:
                with torch.no_grad():
                    vector_to_parameters(parameters_to_vector(actor) + full_step, actor)
                L_new, _ = evaluate()
                m.update(step_fraction=1.0, surrogate_improvement=L_new - L_old)
        else:  # zero gradient (e.g. all advantages equal): nothing to do
            m.update(step_size=0.0, expected_improvement=0.0, surrogate_improvement=0.0,
                     step_fraction=0.0, ls_steps=0, ls_accepted=0)
        # 6. critic regression with its own optimizer
        vl = fit_critic(policy, self.vf_optimizer, batch, cfg.vf_epochs, cfg.vf_minibatch_size)
        return {"lr": cfg.vf_lr, "value_loss": vl, **m,
                **full_batch_diagnostics(policy, batch, old, cfg.clip_eps)}

    def state_dict(self) -> dict[str, Any]:
        return {"vf_optimizer": self.vf_optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.vf_optimizer.load_state_dict(state["vf_optimizer"])
