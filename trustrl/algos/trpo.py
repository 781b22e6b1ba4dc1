"""TRPO, one iteration, as in the chapter's box (steps 1 and 2 are shared with PPO):

    1. Collect a batch with pi_old; compute advantages A (GAE).
    2. g <- gradient of L(theta) at theta_old                  (the ordinary policy gradient)
    3. x ~= F^-1 g  via ~10 steps of conjugate gradient, using only products F v
    4. step <- sqrt(2 delta / x^T F x) * x                     (the natural-gradient step)
    5. for j = 0, 1, 2, ...:                                   (backtracking line search)
           theta <- theta_old + 0.5^j * step
           if mean KL(pi_old || pi_theta) <= delta and L(theta) > L(theta_old): accept, stop
    6. Fit the critic V by regression on the returns (a separate optimizer).

F and g are taken over the actor's parameters only (policy.actor_parameters(), listed
explicitly, never matched by name). `line_search=False` is the natural policy gradient (npg.py).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from trustrl.algos.common import (
    fit_critic,
    full_batch_diagnostics,
    normalize_advantages,
    old_distribution,
)
from trustrl.config import TRPOConfig
from trustrl.policies import ActorCritic
from trustrl.rollout import Batch
from trustrl.trust.cg import conjugate_gradient
from trustrl.trust.fisher import fisher_vector_product, flat_grad, mean_kl
from trustrl.trust.line_search import backtracking_line_search


class TRPO:
    extra_columns = ("surrogate_improvement", "expected_improvement", "xFx", "step_size",
                     "cg_iters_run", "cg_residual", "ls_steps", "ls_accepted", "step_fraction",
                     "grad_norm")

    def __init__(self, policy: ActorCritic, cfg: TRPOConfig, line_search: bool = True):
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
