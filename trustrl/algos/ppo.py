"""PPO-clip, step for step as in the chapter's "PPO-clip, actor-critic style" box:

    3. for epoch = 1..K:
         shuffle the T samples; for each minibatch M:
           A <- (A - mean_M(A)) / std_M(A)                 (advantage normalisation)
           rho = exp(log pi_theta(a|s) - logp_old)
           loss = -L_clip + c1 L_V - c2 H
           one Adam step on loss, after clipping the global gradient norm
         if approx_kl(full batch) > target_kl: stop        (early stopping)

for P members at once (an ordinary run is P = 1): the batch is [P, B], each member shuffles,
steps and stops on its own (a member whose KL passed the target is masked out of the remaining
epochs, its parameters and Adam state untouched). Steps 1 and 2 (rollout with frozen logp_old
and V_old, GAE) are the collectors' and advantages.py's; the loop around them is the learner's.
`clip=False` gives the chapter's ablation, the plain surrogate optimised for K epochs
(`ppo-noclip`). The gradient comes from a backend (trustrl.compute.backends): autograd, or the
closed
form built from the derivatives beside each loss term in trustrl.maths.losses.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from trustrl.algos.common import (
    DIAGNOSTIC_COLUMNS,
    QUANTILES,
    Algorithm,
    annealed,
    clip_grad_norm,
    cut_sequences,
    diagnostics,
    epoch_order,
    minibatch,
    minibatch_units,
    normalize_advantages,
)
from trustrl.compute.backends import Backend, Heads, LossTerms
from trustrl.maths.distributions import mask_logits
from trustrl.maths.losses import (
    Objective,
    PPOCoefficients,
    clipped_surrogate_objective,
    clipped_surrogate_objective_grad,
    policy_ratio,
    ppo_loss,
    ppo_loss_grads,
    surrogate_objective,
    surrogate_objective_grad,
    value_error,
    value_error_grad,
)
from trustrl.maths.trust.kl_control import k_epochs
from trustrl.nets.popnet import PopNet
from trustrl.util.errors import NotCompilable


class PPO(Algorithm):
    """PPO-clip (or, with clip=False, the unclipped K-epoch ablation) with one Adam over all
    parameters and a linearly annealed learning rate.

    A variant that changes the policy objective sets `objective_fn` and `objective_grad` (module
    functions written over the array namespace ``o``, as trustrl.maths.losses' terms are: each
    binding, the compiled one included, runs them) and `objective_args` (their arguments after
    the ratio and the advantages); the K-epoch loop, the value loss and both collectors are
    this class's. A subclass that overrides `loss`, `surrogate` or `surrogate_grad` in torch
    runs that code eagerly, and the run says so in one line."""

    objective_fn: Callable[..., Any] = staticmethod(clipped_surrogate_objective)
    """The per-sample objective to maximise, fn(ratio, advantages, *objective_args())."""
    objective_grad: Callable[..., Any] = staticmethod(clipped_surrogate_objective_grad)
    """d objective_fn / d ratio per sample, same arguments (for the closed-form gradient)."""

    extra_columns = ("policy_loss", "epochs_run", "early_stopped", "clip_fraction_mb",
                     "grad_norm")
    mb_stat = "clip_fraction_mb"  # the loss's own minibatch statistic
    int_columns = ("epochs_run", "early_stopped")

    def __init__(self, net: PopNet, cfg: Any, backend: Backend, keys: Tensor,
                 clip: bool = True):
        super().__init__(net, cfg, backend, keys)
        self.clip = clip
        # pg and ppo-penalty, built on this loop, set their own (their configs lack some)
        self.epochs = getattr(cfg, "update_epochs", 1)
        self.minibatch_size = getattr(cfg, "minibatch_size", cfg.batch_size)
        self.target_kl = getattr(cfg, "target_kl", None)
        self.clip_value_loss = getattr(cfg, "clip_value_loss", False)
        self.clip_eps = cfg.clip_eps  # the current clip range (anneal_clip: set_progress)
        self.needs_old = False  # whether the loss reads pi_old's output (a KL term)
        self.kl_coef: Tensor | None = None
        """The coefficient beta [P] of a penalty beta * mean KL(pi_old || pi) in the loss
        (ppo-penalty's adaptive one; it sets needs_old), or None."""
        self.eager = True  # False under CUDA-graph capture: no host synchronisation
        self.columns = ("value_loss",) + DIAGNOSTIC_COLUMNS + self.extra_columns
        self._minibatch_buffers: dict[int, dict[str, Tensor]] = {}
        self.eager_reason: str | None = None
        """Why this algorithm's update runs eagerly on the compiled backend (None: it does
        not, or has not been asked yet)."""

    def set_progress(self, progress: float) -> None:
        if getattr(self.cfg, "anneal_clip", False):
            self.clip_eps = annealed(self.cfg.clip_eps, True, progress)

    # --- the minibatch loss, written once for every backend --------------------------------
    def objective_args(self) -> tuple[float, ...]:
        """The objective's arguments after the ratio and the advantages: (clip_eps,)."""
        return (self.clip_eps,)

    def objective(self) -> Objective:
        """The policy objective as every binding runs it: L_clip, or rho A for the ablation
        (clip=False: nothing stops the ratio from running away)."""
        if not self.clip:
            return Objective(surrogate_objective, surrogate_objective_grad, ())
        return Objective(self.objective_fn, self.objective_grad, tuple(self.objective_args()))

    def surrogate(self, ratio: Tensor, adv: Tensor) -> Tensor:
        """The per-sample objective to maximise (`objective`'s, on torch)."""
        f = self.objective()
        return f.fn(ratio, adv, *f.args)

    def surrogate_grad(self, ratio: Tensor, adv: Tensor) -> Tensor:
        """d surrogate / d rho per sample (for the closed form)."""
        f = self.objective()
        return f.grad(ratio, adv, *f.args)

    def compiled_objective(self) -> Objective | None:
        """The objective the compiled kernels run for this algorithm, or None where its update
        has torch code of its own (then `eager_reason` says which)."""
        cls = type(self)
        own = [m for m in ("loss", "surrogate", "surrogate_grad")
               if getattr(cls, m) is not getattr(PPO, m)]
        if own:
            self.eager_reason = (f"{cls.__name__}.{own[0]} is torch code (the compiled "
                                 "kernels run objective_fn/objective_grad written over o)")
        if self.eager_reason is not None:
            return None
        return self.objective()

    def _eager_note(self, error: BaseException | None = None) -> None:
        """Say once, in one line on stderr, that the compiled backend runs this update
        eagerly, and why."""
        if error is not None:
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            self.eager_reason = (f"{type(self).__name__}'s objective does not compile "
                                 f"({type(error).__name__}: {first[:160]})")
        print(f"trustrl: note: the update runs eagerly (closed form in torch): "
              f"{self.eager_reason}", file=sys.stderr, flush=True)

    def loss(self, h: Heads, mb: dict[str, Tensor], want: bool) -> LossTerms:
        """-L_clip + c1 L_V - c2 H per member (+ beta KL with a penalty), combined by
        trustrl.maths.losses.ppo_loss (the compiled step's too); with `want`, its derivatives
        in the heads (ppo_loss_grads)."""
        cfg = self.cfg
        adv = normalize_advantages(mb["advantages"]) if cfg.norm_adv else mb["advantages"]
        ratio = policy_ratio(h.logp, mb["logp_old"])
        v_old, v_eps = (mb["values_old"], self.clip_eps) if self.clip_value_loss else (None, None)
        kl = None
        if self.kl_coef is not None:  # beta * mean KL(pi_old || pi), exact
            kl = h.net.kl_from(mb["old_out"], h.out, mb["flat_old"], h.params)
        c = PPOCoefficients(self.clip_eps, cfg.vf_coef, cfg.ent_coef,
                            0.0 if kl is None else self.kl_coef.to(kl.dtype))  # type: ignore[union-attr]  # noqa: E501
        loss, pl, vl, clipped, kl_mean = ppo_loss(
            ratio, self.surrogate(ratio, adv), value_error(h.value, mb["returns"], v_old, v_eps),
            h.entropy if cfg.ent_coef != 0.0 else None, kl, c)
        stats = {"policy_loss": pl, "value_loss": vl, "clip_fraction_mb": clipped}
        if kl_mean is not None:
            stats["kl_penalty"] = kl_mean
        t = LossTerms(loss, stats)
        if want:
            t.d_logp, t.d_value, d_entropy, d_kl = ppo_loss_grads(
                ratio, self.surrogate_grad(ratio, adv),
                value_error_grad(h.value, mb["returns"], v_old, v_eps), c)
            if cfg.ent_coef != 0.0:
                t.d_entropy = torch.full_like(ratio, d_entropy)
            if kl is not None:
                t.d_kl = d_kl[:, None].expand_as(kl)
        return t

    # --- the K-epoch update ------------------------------------------------------------------
    def update(self, batch: dict[str, Tensor], counter: Tensor | int,
               lr: Tensor | float) -> dict[str, Tensor]:
        """K epochs of shuffled minibatch steps (`k_epochs`), each member masked out once its
        full-batch approx KL passed target_kl. Metrics [P]: the last epoch each member ran
        (mean minibatch losses, its statistic, the pre-clip gradient norm), epochs_run,
        early_stopped (= epochs_run < K) and full-batch diagnostics against pi_old."""
        net = self.net
        if "state0" in batch and getattr(self.cfg, "sequence_length", 0):
            # a recurrent batch trained on shorter sequences than its segments
            batch = cut_sequences(net, batch, self.cfg.sequence_length)
        with torch.no_grad():
            # pi_old's outputs: the collector's, from its rollout, or one pass of the actor
            # (masked on a masked batch, as the collector's are)
            old_out = batch["old_out"] if "old_out" in batch else mask_logits(
                net.actor(batch["obs"]), batch.get("action_mask"))  # type: ignore[attr-defined]
            flat_old = net.flat.detach().clone()
        if self.needs_old:
            batch = {**batch, "old_out": old_out, "flat_old": flat_old}
        elif "old_out" in batch:  # the loss does not read it: no gathers of it per epoch
            batch = {k: x for k, x in batch.items() if k != "old_out"}
        # the compiled backend runs k_epochs compiled, with the algorithm's objective compiled
        # from its source: every epoch, the KL stop included, in one call
        kernel = getattr(self.backend, "ppo_epochs", None) if self.eager else None
        objective = None
        if kernel is not None and self.eager_reason is None:
            objective = self.compiled_objective()
            if objective is None:
                self._eager_note()
        out = None
        if kernel is not None and objective is not None:
            try:
                out = kernel(self, batch, self.epoch_orders(int(counter), batch["obs"].shape[1],
                                                      self.epochs),
                             lr, old_out, flat_old, objective, QUANTILES)
            except NotCompilable as e:  # a user's objective: typing failed, nothing moved
                self._eager_note(e.__cause__ or e)
        if out is None:
            out = self._eager_epochs(batch, counter, lr, old_out, flat_old)
        with torch.no_grad():
            if "approx_kl" not in out:  # without the KL stop, the diagnostics after the update
                out.update(diagnostics(net, batch, old_out, flat_old, self.clip_eps,
                                       self.backend))
            # early stopping means epochs were skipped: a KL past the target after the last
            # epoch stops nothing
            out["early_stopped"] = (out["epochs_run"] < self.epochs).float()
        return out

    def _eager_epochs(self, batch: dict[str, Tensor], counter: Tensor | int, lr: Tensor | float,
                      old_out: Tensor, flat_old: Tensor) -> dict[str, Tensor]:
        """`k_epochs` bound to torch: its step the backend's value_and_grad on the minibatch,
        clip_grad_norm and an Adam step; its KL the diagnostics (kept: the last are of every
        member's final policy). Returns the last epoch's metrics, epochs_run and, with a KL
        target, the diagnostics."""
        net, cfg = self.net, self.cfg
        P, dev = batch["logp_old"].shape[0], net.flat.device
        use_mask = self.target_kl is not None
        names = ("policy_loss", "value_loss", "grad_norm", self.mb_stat)
        # views of the parameters, made once: Adam updates `flat` in place, so they stay current
        params = net.views(net.flat.detach())  # type: ignore[attr-defined]
        units, size = minibatch_units(batch, self.minibatch_size)
        steps = torch.arange(self.epochs, device=self.keys.device)[:, None]
        order = epoch_order(self.keys, counter * self.epochs + steps, units).to(dev)
        diag: dict[str, Tensor] = {}

        def minibatch_step(idx: Tensor, active: Tensor) -> Tensor:
            buffers = None
            if self.eager:  # a minibatch's copies, kept per size (common.take)
                buffers = self._minibatch_buffers.setdefault(idx.shape[1], {})
            mb = minibatch(batch, idx, buffers)
            g, t = self.backend.value_and_grad(net, params, mb, self.loss)
            with torch.no_grad():
                g, norm = clip_grad_norm(g, cfg.max_grad_norm)
                self.opt.step(g, lr, active if use_mask else None)
                return torch.stack([norm if k == "grad_norm" else t.stats[k] for k in names], 1)

        def approx_kl() -> Tensor:
            with torch.no_grad():
                diag.update(diagnostics(net, batch, old_out, flat_old, self.clip_eps,
                                        self.backend))
            return diag["approx_kl"]

        active = torch.ones(P, dtype=torch.bool, device=dev)
        last = torch.zeros(P, len(names), device=dev)
        epochs_run = torch.zeros(P, device=dev)
        k_epochs((minibatch_step, approx_kl), order, size, active, use_mask, self.target_kl,
                 self.eager, last, epochs_run)
        out = {k: last[:, j] for j, k in enumerate(names)}
        out.update(diag)
        out["epochs_run"] = epochs_run
        return out
