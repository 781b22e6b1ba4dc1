"""TRPO, one iteration, as in the chapter's box (steps 1 and 2 are shared with PPO):

    1. Collect a batch with pi_old; compute advantages A (GAE).
    2. g <- gradient of L(theta) at theta_old                  (the ordinary policy gradient)
    3. x ~= F^-1 g  via ~10 steps of conjugate gradient, using only products F v
    4. step <- sqrt(2 delta / x^T F x) * x                     (the natural-gradient step)
    5. for j = 0, 1, 2, ...:                                   (backtracking line search)
           theta <- theta_old + 0.5^j * step
           if mean KL(pi_old || pi_theta) <= delta and L(theta) > L(theta_old): accept, stop
    6. Fit the critic V by regression on the returns (a separate optimizer).

for P members at once (an ordinary run is P = 1): vectors are rows [P, D] of the full parameter
layout with zeros in the critic's columns (g and F v have none there), CG solves the P systems
in step (trust/cg.py, a member frozen once its residual is small), and the line search
(trust/line_search.py) tries each fraction for the members still searching, accepting per
member. g and the Fisher-vector products come from the gradient backend (trustrl.compute.backends):
double backprop, or J^T M J written out. `line_search=False` is the natural policy gradient
(npg.py).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import torch
from torch import Tensor

from trustrl.algos.common import (
    DIAGNOSTIC_COLUMNS,
    Algorithm,
    diagnostics,
    fit_critic,
    normalize_advantages,
)
from trustrl.compute.backends import Backend
from trustrl.maths.distributions import mask_logits
from trustrl.maths.losses import policy_ratio, surrogate_objective
from trustrl.maths.optim import PopAdam
from trustrl.maths.trust.cg import natural_step
from trustrl.maths.trust.line_search import population_line_search
from trustrl.nets.popnet import PopNet


def _masked(mask: Tensor | None) -> dict[str, Tensor]:
    """The backends' action_mask argument, passed only on a masked run."""
    return {} if mask is None else {"action_mask": mask}


class TRPO(Algorithm):
    extra_columns = ("surrogate_improvement", "expected_improvement", "xFx", "step_size",
                     "cg_iters_run", "cg_residual", "ls_steps", "ls_accepted", "step_fraction",
                     "grad_norm")
    int_columns = ("cg_iters_run", "ls_steps", "ls_accepted")
    kernels = ("critic_fit", "fisher_product", "natural_step", "surrogate_kl", "line_search",
               "policy_gradient")

    def __init__(self, net: PopNet, cfg: Any, backend: Backend, keys: Tensor,
                 line_search: bool = True):
        super().__init__(net, cfg, backend, keys)
        # the critic's own Adam, over the critic's columns of the flat parameters
        self.opt = PopAdam(net.flat.detach()[:, net.critic_slice], cfg.adam_eps)
        self.line_search = line_search
        self.eager = True  # False under CUDA-graph capture: no host synchronisation
        self.columns = ("value_loss",) + DIAGNOSTIC_COLUMNS + self.extra_columns

    def learning_rate(self, progress: float) -> float:
        return self.cfg.vf_lr  # the critic's Adam, constant

    def _surrogate_kl(self, batch: dict[str, Tensor], adv: Tensor, old_out: Tensor,
                      flat_old: Tensor, cand: Tensor) -> tuple[Tensor, Tensor]:
        """L(theta) = mean(rho A) and mean KL(pi_old || pi_theta) per member, at cand [P, D]:
        the backend's compiled evaluation where it has one (an MLP on the CPU, masked or not),
        else torch."""
        net = self.net
        compiled = getattr(self.backend, "surrogate_kl", None)
        if compiled is not None:
            got = compiled(net, batch, adv, old_out, flat_old, cand)
            if got is not None:
                return got
        params = net.views(cand)  # type: ignore[attr-defined]
        out = net.actor(batch["obs"], params)  # type: ignore[attr-defined]
        out = mask_logits(out, batch.get("action_mask"))  # a masked run: the valid actions
        logp = net.log_prob(out, batch["actions"], params)
        L = surrogate_objective(policy_ratio(logp, batch["logp_old"]), adv).mean(1)
        return L, net.kl_from(old_out, out, flat_old, params).mean(1)

    @torch.no_grad()
    def update(self, batch: dict[str, Tensor], counter: Tensor | int,
               lr: Tensor | float) -> dict[str, Tensor]:
        cfg, net, backend = self.cfg, self.net, self.backend
        P = batch["logp_old"].shape[0]
        dev = net.flat.device
        flat_old = net.flat.detach().clone()
        adv = normalize_advantages(batch["advantages"]) if cfg.norm_adv else batch["advantages"]
        # a masked run: every log-prob and KL below is over the valid actions each sample was
        # drawn under (old_out comes back masked), as pi_old's were
        mask = batch.get("action_mask")
        # 2. g = dL/dtheta at theta_old
        g, L_old, old_out = backend.policy_gradient(net, batch["obs"], batch["actions"],
                                                    batch["logp_old"], adv, flat_old,
                                                    **_masked(mask))
        # 3. x ~= F^-1 g by conjugate gradient on Fisher-vector products, per member (on every
        #    k-th sample with fisher_subsample k: F is the step's metric, not its direction)
        k = cfg.fisher_subsample
        fvp = backend.fisher_product(net, batch["obs"][:, ::k], old_out[:, ::k], flat_old,
                                     cfg.damping,
                                     **_masked(None if mask is None else mask[:, ::k]))
        # 4. the step that spends the KL budget: 1/2 s^T F s = delta (trust.cg.natural_step:
        #    the backend's compiled binding where the products have one, one call with the CG)
        natural = getattr(fvp, "natural_step", None)
        if natural is None:
            natural = partial(natural_step, fvp)
        _, cg_iters, cg_residual, xFx, step_size, full_step, expected, ok = natural(
            g, cfg.cg_iters, cfg.cg_residual_tol, not self.eager, cfg.max_kl)
        m: dict[str, Tensor] = {
            "xFx": xFx, "cg_iters_run": cg_iters.float(), "cg_residual": cg_residual,
            "grad_norm": torch.linalg.vector_norm(g, dim=1), "step_size": step_size,
            "expected_improvement": expected,
        }
        nan = torch.full((P,), math.nan, device=dev)
        # 5. backtracking line search per member (TRPO), or the whole step (NPG)
        if self.line_search:
            # the compiled backend's evaluation brings the whole search compiled (its search)
            make = getattr(backend, "line_search_evaluation", None)
            evaluate = None if make is None else make(net, batch, adv, old_out, flat_old)
            ls = population_line_search(
                flat_old, full_step,
                evaluate or (lambda cand: self._surrogate_kl(batch, adv, old_out, flat_old,
                                                             cand)), L_old,
                cfg.max_kl, cfg.backtrack_ratio, cfg.backtrack_iters, searching=ok,
                lockstep=not self.eager)
            net.flat.copy_(ls.theta)
            m.update(ls_steps=ls.steps_tried, ls_accepted=ls.accepted.float(),
                     step_fraction=ls.step_fraction,
                     surrogate_improvement=torch.where(ls.accepted, ls.improvement, 0.0))
        else:
            net.flat.copy_(flat_old + full_step)
            L_new, _ = self._surrogate_kl(batch, adv, old_out, flat_old, net.flat)
            # no line search: blank, except where no step was taken (0)
            m.update(ls_steps=torch.where(ok, nan, 0.0), ls_accepted=torch.where(ok, nan, 0.0),
                     step_fraction=ok.float(),
                     surrogate_improvement=torch.where(ok, L_new - L_old, 0.0))
        # 6. the critic: vf_epochs of shuffled minibatches of 1/2 (V - R)^2, its own Adam
        #    (the compiled fit's shuffles drawn ahead for several iterations: the same orders)
        compiled_fit = self.eager and hasattr(backend, "fit_critic") and dev.type == "cpu"
        orders = (self.epoch_orders(int(counter), batch["returns"].shape[1], cfg.vf_epochs)
                  if compiled_fit else None)
        m["value_loss"] = fit_critic(net, self.opt, backend, batch, self.keys, counter,
                                     cfg.vf_epochs, cfg.vf_minibatch_size, lr,
                                     self.epoch_buffers if self.eager else None, orders)
        m.update(diagnostics(net, batch, old_out, flat_old, cfg.clip_eps, self.backend))
        return m
