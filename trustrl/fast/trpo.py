"""TRPO and the natural policy gradient for a population of P seeds, on the fast path.

The update is trustrl.algos.trpo's, step for step (the chapter's TRPO box): the policy
gradient g of L(theta) = mean(rho A) at theta_old, x ~= F^-1 g by conjugate gradient from
x = 0 on Fisher-vector products (damped), the step scaled so that 1/2 s^T F s = delta, a
backtracking line search on "mean KL <= delta and L improved" (none for NPG), then the critic
regressed on the returns with its own Adam. What differs is how it is computed:

- every member at once, as rows of [P, D] tensors; CG runs its iterations in lockstep, a member
  whose residual fell under the tolerance is frozen by a mask (the core stops its loop there);
  the line search tries each fraction for the members still searching, accepting per member;
- no autograd: g, the Fisher-vector products and the critic's gradient are written out.
  F v = J^T M J v: J v is a forward-mode pass through the actor (the directional derivative of
  the logits or the Gaussian mean), M the Hessian of the KL in the output space at theta_old
  (diag(p) - p p^T for a softmax, diag(1/sigma^2) for the mean, 2 for each log-std), and J^T u
  is `PopActorCritic.mlp_backward`. It is the Hessian of the mean KL at theta_old exactly,
  since the KL's gradient in the outputs vanishes there; the core gets the same matrix by
  double backprop (tests/test_fast.py compares the products, member by member).

Vectors of the actor's parameters live in the full [P, D] layout with zeros in the critic's
columns (F v has none there and CG keeps them at zero), so the layout needs no index maps.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from trustrl.algos.trpo import TRPO
from trustrl.config import TRPOConfig
from trustrl.fast import rng
from trustrl.fast.adam import PopAdam
from trustrl.fast.engine import _INT_COLUMNS, PopulationPPO

TRPO_EXTRA = TRPO.extra_columns
"""The core TRPO's own metrics.csv columns, on every collector."""
TRPO_COLUMNS = (
    "lr", "ep_return_mean", "ep_length_mean", "episodes", "value_loss", "value_loss_fresh",
    "explained_variance", "entropy", "approx_kl", "approx_kl_k1", "kl_exact", "clip_fraction",
    "ratio_min", "ratio_q05", "ratio_q25", "ratio_q50", "ratio_q75", "ratio_q95", "ratio_max",
) + TRPO_EXTRA


class PopulationTRPO(PopulationPPO):
    """P TRPO (line_search=True) or NPG (False) learners with their envs."""

    columns = TRPO_COLUMNS
    int_columns = _INT_COLUMNS + ("cg_iters_run", "ls_steps", "ls_accepted")
    cfg: TRPOConfig  # type: ignore[assignment]

    def __init__(self, cfg: TRPOConfig, seeds: list[int], line_search: bool = True,
                 compile: bool = False, graph: bool = False, numpy_rollout: bool | None = None):
        super().__init__(cfg, seeds, clip=False, compile=compile,  # type: ignore[arg-type]
                         graph=graph, numpy_rollout=numpy_rollout)
        self.line_search = line_search
        self.opt = PopAdam(self.net.flat, cfg.adam_eps)  # the critic's (actor grads are 0)
        net = self.net
        sizes = {s.name: s.size for s in net.segments}
        self._critic_cols = sum(v for k, v in sizes.items() if k.startswith("critic."))

    def learning_rate(self, progress: float) -> float:
        return self.cfg.vf_lr  # the critic's Adam, constant as in trustrl.algos.trpo

    # --- actor vectors in the flat layout ---------------------------------------------------------
    def _assemble_actor(self, actor: list[Tensor], log_std: Tensor | None) -> Tensor:
        """Actor pieces (mlp_backward's list, and the log-std part) -> [P, D], critic 0."""
        P = actor[0].shape[0]
        zeros = actor[0].new_zeros(P, self._critic_cols)
        return torch.cat(actor + [zeros] + ([log_std] if log_std is not None else []), dim=1)

    def _out_layer(self, x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
        """x W (+ b) as the network's output layer computes it (a reduction for 1 column)."""
        if w.shape[-1] == 1:
            y = (x * w.transpose(1, 2)).sum(-1, keepdim=True)
            return y if b is None else y + b
        return torch.bmm(x, w) if b is None else torch.baddbmm(b, x, w)

    def _actor_jvp(self, acts: list[Tensor], params: dict[str, Tensor],
                   dv: dict[str, Tensor]) -> Tensor:
        """J v: the change of the actor's output [P, B, n] along the parameter direction dv
        (forward mode: dz = dx W + x dW + db, dh = act'(z) dz)."""
        net = self.net
        dh: Tensor | None = None
        for i in range(len(net.hidden_sizes)):
            dz = torch.baddbmm(dv[f"actor.b{i}"], acts[i], dv[f"actor.w{i}"])
            if dh is not None:
                dz = dz + torch.bmm(dh, params[f"actor.w{i}"])
            h = acts[i + 1]
            if net.activation == "tanh":
                dh = torch.addcmul(dz, dz * h, h, value=-1.0)
            else:
                dh = dz * (h > 0)
        assert dh is not None
        return (self._out_layer(dh, params["actor.w_out"], None)
                + self._out_layer(acts[-1], dv["actor.w_out"], dv["actor.b_out"]))

    def _fvp_fn(self, acts: list[Tensor], params: dict[str, Tensor], old_out: Tensor
                ) -> Any:
        """v [P, D] -> (F + damping I) v, F the Hessian of the mean KL(pi_old || pi) at
        theta_old over the actor's parameters."""
        net, cfg = self.net, self.cfg
        B = old_out.shape[1]
        if net.discrete:
            p = torch.softmax(old_out, dim=-1)
        else:
            inv_var = torch.exp(-2.0 * params["log_std"])  # [P, 1, d]

        def fvp(v: Tensor) -> Tensor:
            dv = net.views(v)
            jv = self._actor_jvp(acts, params, dv)
            if net.discrete:  # (diag(p) - p p^T) Jv per state
                u = p * jv - p * (p * jv).sum(-1, keepdim=True)
                ls = None
            else:
                u = jv * inv_var
                ls = 2.0 * dv["log_std"].squeeze(1)  # mean over states of 2 per log-std
            grads = net.mlp_backward("actor", acts, u / B, params)
            return self._assemble_actor(grads, ls) + cfg.damping * v

        return fvp

    def _surrogate_kl(self, b: dict[str, Tensor], adv: Tensor, old_out: Tensor,
                      flat_old: Tensor, cand: Tensor) -> tuple[Tensor, Tensor]:
        """L(theta) = mean(rho A) and mean KL(pi_old || pi_theta) per member, at cand [P, D]."""
        net = self.net
        params = net.views(cand)
        out = net.actor(b["obs"], params)
        logp = net.log_prob(out, b["actions"], params)
        L = (torch.exp(logp - b["logp_old"]) * adv).mean(1)
        kl = net.kl_from(old_out, out, flat_old, params).mean(1)
        return L, kl

    # --- the update -------------------------------------------------------------------------------
    @torch.no_grad()
    def _update(self, b: dict[str, Tensor]) -> dict[str, Tensor]:
        cfg, net = self.cfg, self.net
        P, B = self.P, self.T * self.N
        dev = self.device
        flat_old = net.flat.detach().clone()
        params = net.views(flat_old)
        adv = b["advantages"]
        if cfg.norm_adv and B > 1:
            adv = (adv - adv.mean(1, keepdim=True)) / (adv.std(1, keepdim=True) + 1e-8)
        # 2. g = dL/dtheta at theta_old
        old_out, acts = net.mlp_forward("actor", b["obs"], params)
        parts = net.log_prob_parts(old_out, b["actions"], params)
        surr = torch.exp(parts["logp"] - b["logp_old"]) * adv
        L_old = surr.mean(1)
        g_out, g_ls = net.log_prob_backward(parts, b["actions"], surr / B)
        g = self._assemble_actor(net.mlp_backward("actor", acts, g_out, params), g_ls)
        # 3. x ~= F^-1 g, conjugate gradient from 0, per member, in lockstep
        fvp = self._fvp_fn(acts, params, old_out)
        x = torch.zeros_like(g)
        r, p = g.clone(), g.clone()
        rr = (r * r).sum(1)
        iters = torch.zeros(P, device=dev)
        eager = not self.graph
        for _ in range(cfg.cg_iters):
            active = rr >= cfg.cg_residual_tol
            if eager and not bool(active.any()):
                break
            Ap = fvp(p)
            alpha = torch.where(active, rr / (p * Ap).sum(1), 0.0)
            x = x + alpha[:, None] * p
            r = r - alpha[:, None] * Ap
            rr_new = (r * r).sum(1)
            p = torch.where(active[:, None], r + (rr_new / rr)[:, None] * p, p)
            rr = torch.where(active, rr_new, rr)
            iters += active.float()
        xFx = (x * fvp(x)).sum(1)
        # 4. the step that spends the KL budget: 1/2 s^T F s = delta
        ok = (xFx > 0) & torch.isfinite(xFx)
        step_size = torch.where(ok, torch.sqrt(2.0 * cfg.max_kl / xFx.clamp(min=1e-30)), 0.0)
        full_step = torch.where(ok[:, None], step_size[:, None] * x, 0.0)
        m: dict[str, Tensor] = {
            "xFx": xFx, "cg_iters_run": iters, "cg_residual": rr.sqrt(),
            "grad_norm": torch.linalg.vector_norm(g, dim=1), "step_size": step_size,
            "expected_improvement": torch.where(ok, (g * full_step).sum(1), 0.0),
        }
        nan = torch.full((P,), math.nan, device=dev)
        # 5. backtracking line search per member (TRPO), or the whole step (NPG)
        if self.line_search:
            accepted = torch.zeros(P, dtype=torch.bool, device=dev)
            steps = torch.zeros(P, device=dev)
            frac_acc, impr_acc = torch.zeros(P, device=dev), torch.zeros(P, device=dev)
            new_flat = flat_old.clone()
            for j in range(cfg.backtrack_iters):
                pending = ok & ~accepted
                if eager and not bool(pending.any()):
                    break
                frac = cfg.backtrack_ratio ** j
                cand = flat_old + frac * full_step
                L, kl = self._surrogate_kl(b, adv, old_out, flat_old, cand)
                improvement = L - L_old
                now = pending & (kl <= cfg.max_kl) & (improvement > 0)
                new_flat = torch.where(now[:, None], cand, new_flat)
                steps = torch.where(pending, float(j + 1), steps)
                frac_acc = torch.where(now, frac, frac_acc)
                impr_acc = torch.where(now, improvement, impr_acc)
                accepted |= now
            net.flat.copy_(new_flat)
            m.update(ls_steps=steps, ls_accepted=accepted.float(), step_fraction=frac_acc,
                     surrogate_improvement=impr_acc)
        else:
            net.flat.copy_(flat_old + full_step)
            L_new, _ = self._surrogate_kl(b, adv, old_out, flat_old, net.flat)
            # no line search: blank, except where no step was taken (0, as algos.trpo writes)
            m.update(ls_steps=torch.where(ok, nan, 0.0), ls_accepted=torch.where(ok, nan, 0.0),
                     step_fraction=ok.float(),
                     surrogate_improvement=torch.where(ok, L_new - L_old, 0.0))
        # 6. the critic: vf_epochs of shuffled minibatches of 1/2 (V - R)^2, its own Adam
        m["value_loss"] = self._fit_critic(b)
        m.update(self._diagnostics(b, old_out, flat_old))
        return m

    def _fit_critic(self, b: dict[str, Tensor]) -> Tensor:
        cfg, net = self.cfg, self.net
        P, B = self.P, self.T * self.N
        mb, E = cfg.vf_minibatch_size, cfg.vf_epochs
        n_mb = math.ceil(B / mb)
        params = net.views(net.flat.detach())  # Adam updates flat in place: views stay current
        obs_dim = b["obs"].shape[-1]
        n_actor = net.size - self._critic_cols - (0 if net.discrete else net.n_out)
        last = torch.zeros(P, device=self.device)
        for epoch in range(E):
            perm = torch.argsort(rng.bits(self.shuffle_keys, self.it * E + epoch, B), dim=1,
                                 stable=True)
            acc = torch.zeros(P, device=self.device)
            for i in range(n_mb):
                idx = perm[:, i * mb:(i + 1) * mb]
                o = b["obs"].gather(1, idx[..., None].expand(-1, -1, obs_dim))
                ret = b["returns"].gather(1, idx)
                v1, acts = net.mlp_forward("critic", o, params)
                err = v1.squeeze(-1) - ret
                acc += 0.5 * err.pow(2).mean(1)
                grads = net.mlp_backward("critic", acts, (err / idx.shape[1]).unsqueeze(-1),
                                         params)
                parts = [err.new_zeros(P, n_actor)] + grads  # the actor's columns: 0
                if not net.discrete:
                    parts.append(err.new_zeros(P, net.n_out))
                self.opt.step(torch.cat(parts, dim=1), self.lr)
            last = acc / n_mb
        return last
