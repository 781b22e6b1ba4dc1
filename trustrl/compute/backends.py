"""Gradient backends: the gradient of an algorithm's loss over a population's parameters [P, D].

An algorithm writes its minibatch loss once, as a function of what the networks output (the
action's log-prob, the entropy, V(s), the actor's output for a KL term); see `LossFn`. A backend
evaluates the networks, calls that function and returns the loss's gradient:

    autograd     differentiates the loss through the networks: any architecture (ModuleNet),
                 any device, torch.compile.
    closed form  asks the loss function for its derivatives with respect to those outputs (each
                 term's derivative sits beside its formula in trustrl.maths.losses and in the
                 network's distribution code) and pushes them through the MLPs by hand
                 (PopActorCritic.mlp_backward): about a dozen kernels where autograd records and
                 replays a graph of fifty; the faster one on a CPU. Tanh/ReLU MLPs only.

TRPO also needs the policy gradient at theta_old and Fisher-vector products: `policy_gradient`
and `fisher_product` give them per backend (double backprop, or J^T M J written out).

Both backends agree to float rounding (tests/test_backends.py); `pick` chooses one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from trustrl.maths.distributions import mask_logits
from trustrl.maths.losses import policy_ratio, surrogate_objective
from trustrl.nets.popnet import PopActorCritic, PopNet, seq_args


@dataclass
class Heads:
    """The networks' outputs on a minibatch [P, M, ...] and the parameters they came from.
    The entropy is computed when a loss first reads it (from `parts` on the closed form)."""

    net: PopNet
    params: dict[str, Tensor]
    out: Tensor  # the actor's output: logits or Gaussian means
    logp: Tensor  # log pi(a|s) of the minibatch's actions
    _entropy: Tensor | None
    value: Tensor  # V(s)
    parts: dict[str, Tensor] | None = None  # log_prob_parts (closed form only)

    @property
    def entropy(self) -> Tensor:
        if self._entropy is None:
            assert self.parts is not None
            self._entropy = self.net.entropy_from_parts(self.parts)
        return self._entropy


@dataclass
class LossTerms:
    """A per-member loss [P] to minimise, its metrics [P], and (closed form) its derivatives
    with respect to each head, per sample [P, M] (the 1/M of the mean included). A derivative
    left None means the loss does not depend on that head."""

    loss: Tensor
    stats: dict[str, Tensor] = field(default_factory=dict)
    d_logp: Tensor | None = None
    d_entropy: Tensor | None = None
    d_value: Tensor | None = None
    d_kl: Tensor | None = None  # d loss / d KL(pi_old || pi) per state; needs mb old_out


LossFn = Callable[[Heads, dict[str, Tensor], bool], LossTerms]
"""(heads, minibatch, want_derivatives) -> LossTerms. The minibatch holds obs, actions,
logp_old, advantages, returns, values_old [P, M, ...] (and old_out, flat_old for a KL; and
action_mask [P, M, n] on a masked run: the actor's output is masked before any head)."""


class Autograd:
    name = "autograd"

    def __init__(self, compile: bool = False):
        self._vg = torch.compile(self._value_and_grad, dynamic=False) if compile \
            else self._value_and_grad

    def value_and_grad(self, net: PopNet, params: dict[str, Tensor], mb: dict[str, Tensor],
                       loss_fn: LossFn, policy: bool = True) -> tuple[Tensor, LossTerms]:
        """(gradient [P, D] of loss_fn's per-member loss, its LossTerms). With policy False
        the loss reads V alone, and the gradient covers `net.critic_slice` only."""
        return self._vg(net, mb, loss_fn, policy)

    @staticmethod
    def _value_and_grad(net: PopNet, mb: dict[str, Tensor], loss_fn: LossFn, policy: bool
                        ) -> tuple[Tensor, LossTerms]:
        flat = net.flat
        with torch.enable_grad():
            v = net.views(flat)  # type: ignore[attr-defined]
            if policy:
                out, value = net.actor_critic(mb["obs"], v, **seq_args(mb))
                out = mask_logits(out, mb.get("action_mask"))  # the sample's valid actions
                logp, ent = net.log_prob_entropy(out, mb["actions"], v)
            else:
                value = net.critic(mb["obs"], v, **seq_args(mb))  # type: ignore[attr-defined]
                out = logp = ent = value
            t = loss_fn(Heads(net, v, out, logp, ent, value), mb, False)
            (g,) = torch.autograd.grad(t.loss.sum(), flat)
        if not policy:
            g = g[:, net.critic_slice]
        return g, LossTerms(t.loss.detach(), {k: x.detach() for k, x in t.stats.items()})

    def policy_gradient(self, net: PopNet, obs: Tensor, actions: Tensor, logp_old: Tensor,
                        adv: Tensor, flat_old: Tensor,
                        action_mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """(g = dL/dtheta [P, D] of L = mean(rho A) at theta_old (zero in the critic's
        columns), L(theta_old) [P], the actor's output at theta_old: masked logits where
        `action_mask` [P, B, n], the samples' valid actions, is given)."""
        x = flat_old.clone().requires_grad_(True)
        with torch.enable_grad():
            out = mask_logits(net.actor(obs, x), action_mask)  # type: ignore[attr-defined]
            L = surrogate_objective(policy_ratio(net.log_prob(out, actions, x), logp_old),
                                      adv).mean(1)
            (g,) = torch.autograd.grad(L.sum(), x)
        return g * net.actor_mask, L.detach(), out.detach()  # type: ignore[attr-defined]

    def fisher_product(self, net: PopNet, obs: Tensor, old_out: Tensor, flat_old: Tensor,
                       damping: float, action_mask: Tensor | None = None
                       ) -> Callable[[Tensor], Tensor]:
        """v [P, D] -> (F + damping I) v, F the Hessian of the mean KL(pi_old || pi) at
        theta_old over the actor's columns, by double backprop (members are independent, so
        the Hessian of the summed KLs is block-diagonal: one block per member). With
        `action_mask` (old_out then masked too), the KL of the distributions over the valid
        actions."""
        x = flat_old.clone().requires_grad_(True)
        mask = net.actor_mask  # type: ignore[attr-defined]
        with torch.enable_grad():
            out = mask_logits(net.actor(obs, x), action_mask)  # type: ignore[attr-defined]
            kl = net.kl_from(old_out, out, flat_old, x).mean(1).sum()
            (gk,) = torch.autograd.grad(kl, x, create_graph=True)

        def fvp(v: Tensor) -> Tensor:
            with torch.enable_grad():
                (hv,) = torch.autograd.grad((gk * (v * mask)).sum(), x, retain_graph=True)
            return hv.detach() * mask + damping * v

        return fvp


class ClosedForm:
    name = "closed-form"

    def __init__(self, compile: bool = False):
        self._vg = torch.compile(self._value_and_grad, dynamic=False) if compile \
            else self._value_and_grad

    def value_and_grad(self, net: PopNet, params: dict[str, Tensor], mb: dict[str, Tensor],
                       loss_fn: LossFn, policy: bool = True) -> tuple[Tensor, LossTerms]:
        with torch.no_grad():
            return self._vg(net, params, mb, loss_fn, policy)

    @staticmethod
    def _value_and_grad(net: PopActorCritic, params: dict[str, Tensor],
                        mb: dict[str, Tensor], loss_fn: LossFn, policy: bool
                        ) -> tuple[Tensor, LossTerms]:
        o = mb["obs"]
        v1, acts_v = net.mlp_forward("critic", o, params)
        value = v1.squeeze(-1)
        if not policy:
            t = loss_fn(Heads(net, params, value, value, value, value), mb, True)
            assert t.d_value is not None
            crit = net.mlp_backward("critic", acts_v, t.d_value.unsqueeze(-1), params)
            return torch.cat(crit, dim=1), t  # the critic's block of the layout
        a = mb["actions"]
        out, acts_pi = net.mlp_forward("actor", o, params)
        # the sample's valid actions; d/d(an invalid logit) is 0 in every term's derivative
        out = mask_logits(out, mb.get("action_mask"))
        parts = net.log_prob_parts(out, a, params)
        t = loss_fn(Heads(net, params, out, parts["logp"], None, value, parts), mb, True)
        g_out, g_ls = net.log_prob_backward(
            parts, a, torch.zeros_like(parts["logp"]) if t.d_logp is None else t.d_logp)
        for extra in (
            net.entropy_backward(parts, t.d_entropy) if t.d_entropy is not None else None,
            net.kl_backward(mb["old_out"], out, mb["flat_old"], params, t.d_kl)
            if t.d_kl is not None else None,
        ):
            if extra is None:
                continue
            if extra[0] is not None:
                g_out = g_out + extra[0]
            if extra[1] is not None:
                g_ls = extra[1] if g_ls is None else g_ls + extra[1]
        d_value = torch.zeros_like(value) if t.d_value is None else t.d_value
        grads = (net.mlp_backward("actor", acts_pi, g_out, params)
                 + net.mlp_backward("critic", acts_v, d_value.unsqueeze(-1), params))
        if not net.discrete:
            assert g_ls is not None
            grads.append(g_ls)
        return torch.cat(grads, dim=1), t

    @torch.no_grad()
    def policy_gradient(self, net: PopActorCritic, obs: Tensor, actions: Tensor,
                        logp_old: Tensor, adv: Tensor, flat_old: Tensor,
                        action_mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        params = net.views(flat_old)
        old_out, acts = net.mlp_forward("actor", obs, params)
        old_out = mask_logits(old_out, action_mask)  # d/d(an invalid logit) = 0: p = 0 there
        parts = net.log_prob_parts(old_out, actions, params)
        surr = surrogate_objective(policy_ratio(parts["logp"], logp_old), adv)
        g_out, g_ls = net.log_prob_backward(parts, actions, surr / obs.shape[1])
        g = net.assemble_actor(net.mlp_backward("actor", acts, g_out, params), g_ls)
        return g, surr.mean(1), old_out

    @torch.no_grad()
    def fisher_product(self, net: PopActorCritic, obs: Tensor, old_out: Tensor,
                       flat_old: Tensor, damping: float, action_mask: Tensor | None = None
                       ) -> Callable[[Tensor], Tensor]:
        """F v = J^T M J v: J v forward mode through the actor, M the KL's Hessian in the output
        space at theta_old (diag(p) - p p^T for a softmax, 1/sigma^2 for the mean, 2 for each
        log-std), J^T u by mlp_backward. Exactly the Hessian of the mean KL at theta_old, since
        the KL's gradient in the outputs vanishes there. On a masked batch old_out holds the
        masked logits, so p is 0 on the invalid actions and M is already the Hessian of the
        KL over the valid actions: `action_mask` is not read again."""
        params = net.views(flat_old)
        _, acts = net.mlp_forward("actor", obs, params)
        B = obs.shape[1]
        if net.discrete:
            p = torch.softmax(old_out, dim=-1)
        else:
            inv_var = torch.exp(-2.0 * params["log_std"])

        def fvp(v: Tensor) -> Tensor:
            dv = net.views(v)
            jv = net.actor_jvp(acts, params, dv)
            if net.discrete:
                u = p * jv - p * (p * jv).sum(-1, keepdim=True)
                ls = None
            else:
                u = jv * inv_var
                ls = 2.0 * dv["log_std"].squeeze(1)
            grads = net.mlp_backward("actor", acts, u / B, params)
            return net.assemble_actor(grads, ls) + damping * v

        return fvp


Backend = Autograd | ClosedForm


def pick(net: PopNet, choice: str = "auto", compile: bool = False) -> Backend:
    """The backend for a network: 'auto' takes the closed form where it applies (tanh/ReLU
    MLPs, PopActorCritic), else autograd; 'closed-form' on a network without one is an error."""
    if choice == "autograd" or (choice == "auto" and not net.closed_form):
        return Autograd(compile)
    if not net.closed_form:
        raise ValueError("the closed-form gradient needs the MLP population network")
    return ClosedForm(compile)
