"""The actor-critic of P independent agents as one flat parameter tensor [P, D].

Member p's networks are exactly trustrl.nets.policies.ActorCritic's (separate actor and critic MLPs,
orthogonal init sqrt2 / 0.01 / 1.0, state-independent log-std): `from_policies` stacks P
ActorCritic modules and `to_policy(p)` gives one back. Layers are batched matrix products
(x [P, B, in] @ W [P, in, out]) over views of one leaf tensor, so

- a forward for all P members is a handful of kernels, whatever P is (P = 1 included);
- the gradient of every member lands in one tensor flat.grad [P, D]: its per-member norm is one
  reduction, and Adam is a few elementwise operations on [P, D] (see adam.py);
- a loss that sums the members' losses gives each member exactly its own gradient, since no
  parameter is shared between members.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from trustrl.maths.distributions import (
    HALF_LOG_2PI,
    categorical_entropy,
    categorical_entropy_grad,
    categorical_kl,
    categorical_kl_grad,
    categorical_logp_grad,
    gaussian_entropy_density,
    gaussian_entropy_grad_log_std,
    gaussian_kl_density,
    gaussian_kl_grad_log_std,
    gaussian_kl_grad_mean,
    gaussian_log_density,
    gaussian_logp_grad_log_std,
    gaussian_logp_grad_mean,
    gaussian_var_ratio,
    masked_log_softmax,
)
from trustrl.nets.policies import ActionSpec, ActorCritic


def _tanh(x: Tensor) -> Tensor:
    """tanh, in place through NumPy for a CPU tensor outside autograd and torch.compile: on
    float32 NumPy's SIMD tanh is about 6x faster than torch's CPU kernel (8,192 values: 3.4 us
    against 22 us here), and tanh is the largest single cost of a small MLP's forward pass.
    Both are accurate to an ulp or two; elementwise, so a member's values do not depend on P."""
    if (x.device.type == "cpu" and not x.requires_grad and x.is_contiguous()
            and x.dtype in (torch.float32, torch.float64) and not torch.compiler.is_compiling()):
        np.tanh(x.numpy(), out=x.numpy())
        return x
    return torch.tanh(x)


# --- the MLP's chain rule, written once ---------------------------------------------------------
# An MLP is `layers`, a list of its (W, b) in order, the last the output layer (no activation).
# The functions below are written over a handful of free globals that each binding sets:
# `affine(x, W, b)` = x W + b, `linear(x, W)` = x W, `linear_t(g, W)` = g W^T,
# `activate(z, relu)` the hidden activation (tanh, or ReLU) and `layer_grad(grads, i, x, g)`,
# which records layer i's gradient (dW = x^T g, db = g summed over the rows) from its input x
# and dLoss/dz g. The torch binding is this module's own (x [P, B, a], W [P, a, b], b [P, 1, b]:
# batched products over the members; the gradients collected in a list for torch.cat);
# trustrl.compute.compiled.kernels compiles the same functions with Numba for one member (x [M, a],
# W [a, b], b [b] views of the flat parameters; each gradient written into its slice of the
# flat gradient). tests/test_one_source.py holds the compiled code objects to these.

def affine(x: Tensor, W: Tensor, b: Tensor) -> Tensor:
    """x W + b as a batched product; for one output column a reduction, since bmm's kernel
    choice for a single matrix (P = 1) differs from the batched one in the last bits."""
    if W.shape[-1] == 1:
        return (x * W.transpose(1, 2)).sum(-1, keepdim=True) + b
    return torch.baddbmm(b, x, W)


def linear(x: Tensor, W: Tensor) -> Tensor:
    """x W (`affine` without the bias)."""
    if W.shape[-1] == 1:
        return (x * W.transpose(1, 2)).sum(-1, keepdim=True)
    return torch.bmm(x, W)


def linear_t(g: Tensor, W: Tensor) -> Tensor:
    """g W^T: dLoss/dx from dLoss/d(x W)."""
    if W.shape[-1] == 1:
        return g * W.transpose(1, 2)
    return torch.bmm(g, W.transpose(1, 2))


def layer_grad(grads: list[Any], i: int, x: Tensor, g: Tensor) -> None:
    """grads[i] = (dW [P, a * b] = x^T g, db [P, b] = g summed over the batch)."""
    if g.shape[-1] == 1:
        grads[i] = ((x * g).sum(1), g.sum(1))
    else:
        grads[i] = (torch.bmm(x.transpose(1, 2), g).reshape(g.shape[0], -1), g.sum(1))


def activate(z: Tensor, relu: bool) -> Tensor:
    """The hidden activation: ReLU, or tanh (`_tanh`)."""
    return torch.relu(z) if relu else _tanh(z)


def activation_grad(g: Any, h: Any, relu: bool) -> Any:
    """g act'(z) from the activation's output h = act(z): ReLU' = [h > 0], tanh' = 1 - h^2
    (written g - g h h, one pass less than g (1 - h^2)). The easy mistake: tanh' from z
    instead of h."""
    if relu:
        return g * (h > 0)
    return g - g * h * h


def mlp_hidden_outputs(layers: Any, x: Any, relu: bool) -> Any:
    """Each layer's input [x, h_1, ..., h_L] (h_L the output layer's)."""
    acts = [x]
    for i in range(len(layers) - 1):
        W, b = layers[i]
        x = activate(affine(x, W, b), relu)
        acts.append(x)
    return acts


def mlp_output(layers: Any, x: Any, relu: bool) -> Any:
    """(the MLP's output, the layer inputs [x, h_1, ..., h_L] for `mlp_grads`)."""
    acts = mlp_hidden_outputs(layers, x, relu)
    L = len(layers) - 1
    W, b = layers[L]
    return affine(acts[L], W, b), acts


def mlp_hidden_grads(layers: Any, acts: Any, g_h: Any, relu: bool, grads: Any) -> None:
    """The chain rule back through the hidden layers from dLoss/dh_L: g_z = g_h act'(z),
    layer i's gradient from (its input, g_z), g_h = g_z W^T for the layer below."""
    for i in range(len(layers) - 2, -1, -1):
        g_z = activation_grad(g_h, acts[i + 1], relu)
        layer_grad(grads, i, acts[i], g_z)
        if i > 0:
            g_h = linear_t(g_z, layers[i][0])


def mlp_grads(layers: Any, acts: Any, g_out: Any, relu: bool, grads: Any) -> None:
    """Every layer's gradient (`layer_grad`) from dLoss/d(output) and `mlp_output`'s acts:
    the output layer's, then the hidden layers' (`mlp_hidden_grads`)."""
    L = len(layers) - 1
    layer_grad(grads, L, acts[L], g_out)
    if L > 0:
        mlp_hidden_grads(layers, acts, linear_t(g_out, layers[L][0]), relu, grads)


def mlp_jvp(layers: Any, d_layers: Any, acts: Any, relu: bool) -> Any:
    """J v: the change of the MLP's output along the parameter direction `d_layers` (its
    (dW, db) per layer), by forward mode from `mlp_output`'s acts: dz = x dW + db + dh W,
    dh = act'(z) dz (dh = 0 at the input)."""
    L = len(layers) - 1
    dh = acts[0]  # unread at i = 0 (the input does not move)
    for i in range(L):
        dW, db = d_layers[i]
        dz = affine(acts[i], dW, db)
        if i > 0:
            dz += linear(dh, layers[i][0])
        dh = activation_grad(dz, acts[i + 1], relu)
    dW, db = d_layers[L]
    jv = affine(acts[L], dW, db)
    if L > 0:
        jv += linear(dh, layers[L][0])
    return jv


def _blocks(out: Tensor, nvec: tuple[int, ...]) -> list[Tensor]:
    """The log-softmax of each MultiDiscrete dimension's block of logits."""
    return [masked_log_softmax(x) for x in torch.split(out, nvec, dim=-1)]


def _multi_logp(blocks: list[Tensor], actions: Tensor) -> Tensor:
    a = actions.long()
    return sum(lp.gather(-1, a[..., i:i + 1]).squeeze(-1)  # type: ignore[return-value]
               for i, lp in enumerate(blocks))


def _multi_entropy(blocks: list[Tensor]) -> Tensor:
    return sum(categorical_entropy(lp) for lp in blocks)  # type: ignore[return-value]


def _bernoulli_logp(out: Tensor, actions: Tensor) -> Tensor:
    return (actions.to(out.dtype) * out - torch.nn.functional.softplus(out)).sum(-1)


def _bernoulli_entropy(out: Tensor) -> Tensor:
    return (torch.nn.functional.softplus(out) - torch.sigmoid(out) * out).sum(-1)


@dataclass(frozen=True)
class Segment:
    name: str
    offset: int
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        return math.prod(self.shape)


class PopNet:
    """What every population network shares: P members in one flat leaf tensor [P, D], and the
    action distribution's maths on the actor's output (log-prob, entropy, exact KL and their
    derivatives in the output space, used by the closed-form backend). A subclass gives
    `actor`, `critic`, `log_std`, `views`, `actor_mask`, `to_policy` and `write_policy`."""

    flat: Tensor
    discrete: bool
    n_out: int
    closed_form = False
    """Whether the closed-form gradient backend applies (mlp_forward / mlp_backward)."""

    @property
    def population(self) -> int:
        return self.flat.shape[0]

    def views(self, flat: Tensor | None = None) -> dict[str, Tensor]:
        raise NotImplementedError  # each network's own layout

    def log_std(self, flat: Tensor | dict[str, Tensor] | None = None) -> Tensor:
        raise NotImplementedError  # each network's own layout

    def _params(self, flat: Tensor | dict[str, Tensor] | None) -> dict[str, Tensor]:
        return flat if isinstance(flat, dict) else self.views(flat)

    def actor_critic(self, obs: Tensor, flat: Tensor | dict[str, Tensor] | None = None
                     ) -> tuple[Tensor, Tensor]:
        """(the actor's output, V(s)) at once: a network whose actor and critic share layers
        (a CNN, a trunk) computes them once."""
        return self.actor(obs, flat), self.critic(obs, flat)  # type: ignore[attr-defined]

    @functools.cached_property
    def critic_slice(self) -> slice:
        """The columns of the flat parameters V depends on and pi does not, when they are one
        contiguous block (the MLP network's layout); else every column (a critic loss then
        gives the actor's columns zero gradient)."""
        cols = torch.nonzero(~self.actor_mask).flatten()  # type: ignore[attr-defined]
        if len(cols) and int(cols[-1] - cols[0]) + 1 == len(cols):
            return slice(int(cols[0]), int(cols[-1]) + 1)
        return slice(None)

    action: ActionSpec

    def log_prob(self, out: Tensor, actions: Tensor,
                 flat: Tensor | dict[str, Tensor] | None = None) -> Tensor:
        """log pi(a|s) [P, B] from the actor's output (what the rollout needs). MultiDiscrete
        (independent categoricals over blocks of logits) and MultiBinary (independent bits)
        sum over their dimensions, as the Gaussian does."""
        if self.action.kind == "multidiscrete":
            return _multi_logp(_blocks(out, self.action.nvec), actions)
        if self.action.kind == "multibinary":
            return _bernoulli_logp(out, actions)
        if self.discrete:
            return masked_log_softmax(out).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        log_std = self.log_std(flat)
        return gaussian_log_density(actions, out, log_std, torch.exp(-log_std), 0.5,
                                    HALF_LOG_2PI).sum(-1)

    def log_prob_parts(self, out: Tensor, actions: Tensor,
                       flat: Tensor | dict[str, Tensor] | None = None) -> dict[str, Tensor]:
        """log pi(a|s) [P, B] ("logp") with the intermediates its derivative and the entropy
        reuse: Discrete "logp_all" (log-softmax) and "prob"; Box "log_std", "inv_std" and
        "z" = (a - mean) / std; MultiDiscrete "blocks" (their log-softmaxes); MultiBinary
        "out" (the logits)."""
        if self.action.kind == "multidiscrete":
            blocks = _blocks(out, self.action.nvec)
            return {"logp": _multi_logp(blocks, actions), "blocks": blocks}  # type: ignore[dict-item]
        if self.action.kind == "multibinary":
            return {"logp": _bernoulli_logp(out, actions), "out": out}
        if self.discrete:
            logp_all = masked_log_softmax(out)
            logp = logp_all.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
            return {"logp": logp, "logp_all": logp_all, "prob": logp_all.exp()}
        log_std = self.log_std(flat)
        inv_std = torch.exp(-log_std)
        logp = gaussian_log_density(actions, out, log_std, inv_std, 0.5, HALF_LOG_2PI).sum(-1)
        z = (actions - out) * inv_std  # for the derivative (log_prob_backward)
        return {"logp": logp, "log_std": log_std, "inv_std": inv_std, "z": z}

    def log_prob_backward(self, parts: dict[str, Tensor], actions: Tensor, g_logp: Tensor
                          ) -> tuple[Tensor, Tensor | None]:
        """From dLoss/dlogp [P, B] to dLoss/d(actor output) [P, B, n] and, for a Gaussian,
        dLoss/dlog_std [P, d] (summed over the batch): d logp / d logits = onehot(a) - p;
        d logp / d mean = z / std, d logp / d log_std = z^2 - 1."""
        g = g_logp.unsqueeze(-1)
        if self.discrete:
            prob = parts["prob"]
            onehot = torch.zeros_like(prob).scatter_(-1, actions.unsqueeze(-1), 1.0)
            return categorical_logp_grad(g, onehot, prob), None
        z = parts["z"]
        return (gaussian_logp_grad_mean(g, z, parts["inv_std"]),
                gaussian_logp_grad_log_std(g, z, 1.0).sum(1))

    def log_prob_entropy(self, out: Tensor, actions: Tensor,
                         flat: Tensor | dict[str, Tensor] | None = None
                         ) -> tuple[Tensor, Tensor]:
        """log pi(a|s) and entropy, both [P, B], from the actor's output."""
        parts = self.log_prob_parts(out, actions, flat)
        return parts["logp"], self.entropy_from_parts(parts)

    def entropy_from_parts(self, parts: dict[str, Tensor]) -> Tensor:
        """The entropy [P, B] from `log_prob_parts`' intermediates."""
        if self.action.kind == "multidiscrete":
            return _multi_entropy(parts["blocks"])  # type: ignore[arg-type]
        if self.action.kind == "multibinary":
            return _bernoulli_entropy(parts["out"])
        if self.discrete:
            return categorical_entropy(parts["logp_all"])
        return gaussian_entropy_density(parts["log_std"], 0.5, HALF_LOG_2PI).sum(-1).expand_as(
            parts["logp"])

    def kl_from(self, old_out: Tensor, new_out: Tensor, flat_old: Tensor | None = None,
                flat_new: Tensor | dict[str, Tensor] | None = None) -> Tensor:
        """Exact KL(pi_old || pi_new) per state [P, B]; flat_old: pi_old's log-std source,
        flat_new: pi_new's (default: the leaf). MultiDiscrete and MultiBinary: summed over
        their independent dimensions."""
        if self.action.kind == "multidiscrete":
            return sum(categorical_kl(lo, ln)  # type: ignore[return-value]
                       for lo, ln in zip(_blocks(old_out, self.action.nvec),
                                         _blocks(new_out, self.action.nvec), strict=True))
        if self.action.kind == "multibinary":
            sp = torch.nn.functional.softplus
            return (torch.sigmoid(old_out) * (old_out - new_out) - sp(old_out)
                    + sp(new_out)).sum(-1)
        if self.discrete:
            return categorical_kl(masked_log_softmax(old_out), masked_log_softmax(new_out))
        ls_new = self.log_std(flat_new)
        ls_old = ls_new.detach() if flat_old is None else self.log_std(flat_old)
        var_ratio = gaussian_var_ratio(ls_old, ls_new, 2.0)
        return gaussian_kl_density(old_out, ls_old, new_out, ls_new, torch.exp(-ls_new),
                                   var_ratio, 0.5, 1.0, 2.0).sum(-1)

    def entropy_backward(self, parts: dict[str, Tensor], g_ent: Tensor
                         ) -> tuple[Tensor | None, Tensor | None]:
        """From dLoss/dH [P, B] to dLoss/d(actor output) (Discrete: dH/dlogits =
        -p (log p + H)) and, for a Gaussian, dLoss/dlog_std [P, d] (dH/dlog_std = 1 per
        dimension, summed over the batch)."""
        if self.discrete:
            prob, logp_all = parts["prob"], parts["logp_all"]
            ent = categorical_entropy(logp_all).unsqueeze(-1)
            return categorical_entropy_grad(g_ent.unsqueeze(-1), prob, logp_all, ent), None
        return None, gaussian_entropy_grad_log_std(g_ent).sum(1, keepdim=True).expand(
            -1, self.n_out)

    def kl_backward(self, old_out: Tensor, new_out: Tensor, flat_old: Tensor,
                    params: dict[str, Tensor], g_kl: Tensor
                    ) -> tuple[Tensor, Tensor | None]:
        """From dLoss/dKL(pi_old || pi) [P, B] to dLoss/d(new actor output) and, for a
        Gaussian, dLoss/dlog_std [P, d]: softmax p_new - p_old; Gaussian
        d/d mean = (mean - mean_old) / var, d/d log_std = 1 - (var_old + (mean - mean_old)^2)
        / var."""
        g = g_kl.unsqueeze(-1)
        if self.discrete:
            return categorical_kl_grad(g, torch.softmax(new_out, -1),
                                       torch.softmax(old_out, -1)), None
        ls_new, ls_old = params["log_std"], self.log_std(flat_old)
        inv_var = torch.exp(-2.0 * ls_new)
        diff = new_out - old_out
        g_ls = gaussian_kl_grad_log_std(g, diff, inv_var, torch.exp(2.0 * ls_old), 1.0)
        return gaussian_kl_grad_mean(g, diff, inv_var), g_ls.sum(1)


class PopActorCritic(PopNet):
    """P actor-critics in one flat tensor. `flat` [P, D] is the leaf that requires grad."""

    def __init__(self, obs_dim: int, action: ActionSpec, hidden_sizes: Sequence[int],
                 activation: str, flat: Tensor):
        if activation not in ("tanh", "relu"):
            raise ValueError(f"activation must be tanh or relu, got {activation!r}")
        self.obs_dim, self.action = obs_dim, action
        self.hidden_sizes, self.activation = tuple(hidden_sizes), activation
        self.discrete = action.kind == "discrete"
        self.n_out = action.n if self.discrete else action.dim
        self.segments = self.layout(obs_dim, self.n_out, self.hidden_sizes, not self.discrete)
        self.size = sum(s.size for s in self.segments)
        if flat.shape[-1] != self.size:
            raise ValueError(f"flat has {flat.shape[-1]} columns, the layout needs {self.size}")
        self.flat = flat
        self.relu = activation == "relu"

    closed_form = True

    @property
    def actor_mask(self) -> Tensor:
        """[D] bool: the columns pi depends on (actor MLP and log-std), not the critic's."""
        m = torch.zeros(self.size, dtype=torch.bool, device=self.flat.device)
        for s in self.segments:
            if not s.name.startswith("critic."):
                m[s.offset:s.offset + s.size] = True
        return m

    @staticmethod
    def layout(obs_dim: int, n_out: int, hidden: tuple[int, ...], box: bool) -> list[Segment]:
        segs: list[Segment] = []
        off = 0

        def add(name: str, *shape: int) -> None:
            nonlocal off
            segs.append(Segment(name, off, tuple(shape)))
            off += math.prod(shape)

        for part, head in (("actor", n_out), ("critic", 1)):
            n_in = obs_dim
            for i, h in enumerate(hidden):
                add(f"{part}.w{i}", n_in, h)
                add(f"{part}.b{i}", h)
                n_in = h
            add(f"{part}.w_out", n_in, head)
            add(f"{part}.b_out", head)
        if box:
            add("log_std", n_out)
        return segs

    # --- views --------------------------------------------------------------------------------
    def _view(self, seg: Segment, flat: Tensor) -> Tensor:
        x = flat[:, seg.offset:seg.offset + seg.size]
        if len(seg.shape) == 2:
            return x.view(flat.shape[0], *seg.shape)
        return x.unsqueeze(1)  # bias or log-std: [P, 1, n], broadcast over the batch

    def views(self, flat: Tensor | None = None) -> dict[str, Tensor]:
        """Every segment of `flat` (default: the leaf) as a view shaped for the layers. Views of
        a detached tensor can be made once and reused for a whole rollout."""
        flat = self.flat if flat is None else flat
        return {s.name: self._view(s, flat) for s in self.segments}

    def layers(self, part: str, v: dict[str, Tensor]) -> list[tuple[Tensor, Tensor]]:
        """One MLP's (W, b) views in order ("actor" or "critic"; v from `views`), as the
        chain rule's source functions take them."""
        names = [f"{i}" for i in range(len(self.hidden_sizes))] + ["_out"]
        return [(v[f"{part}.w{i}"], v[f"{part}.b{i}"]) for i in names]

    def _mlp(self, part: str, x: Tensor, v: dict[str, Tensor]) -> Tensor:
        return mlp_output(self.layers(part, v), x, self.relu)[0]  # type: ignore[no-any-return]

    def mlp_forward(self, part: str, x: Tensor, v: dict[str, Tensor]
                    ) -> tuple[Tensor, list[Tensor]]:
        """The MLP's output and the layer inputs [x, h1, ..., hL] for `mlp_backward`."""
        return mlp_output(self.layers(part, v), x, self.relu)  # type: ignore[no-any-return]

    def mlp_backward(self, part: str, acts: list[Tensor], g_out: Tensor,
                     v: dict[str, Tensor]) -> list[Tensor]:
        """Gradients [P, size] of every segment of one MLP, in layout order, from dLoss/dout
        [P, B, n_out] and the activations `mlp_forward` returned: the chain rule written out
        (`mlp_grads`), about a dozen kernels where autograd records and replays a graph of
        fifty."""
        grads: list[Any] = [None] * (len(self.hidden_sizes) + 1)
        mlp_grads(self.layers(part, v), acts, g_out, self.relu, grads)
        return [t for pair in grads for t in pair]

    def assemble_actor(self, actor: list[Tensor], log_std: Tensor | None) -> Tensor:
        """Actor pieces (mlp_backward's list, and the log-std part) -> [P, D], critic 0."""
        P = actor[0].shape[0]
        n_critic = sum(s.size for s in self.segments if s.name.startswith("critic."))
        zeros = actor[0].new_zeros(P, n_critic)
        return torch.cat(actor + [zeros] + ([log_std] if log_std is not None else []), dim=1)

    def actor_jvp(self, acts: list[Tensor], params: dict[str, Tensor],
                  dv: dict[str, Tensor]) -> Tensor:
        """J v: the change of the actor's output [P, B, n] along the parameter direction dv
        (its views) by forward mode (`mlp_jvp`); acts from mlp_forward."""
        return mlp_jvp(self.layers("actor", params),  # type: ignore[no-any-return]
                       self.layers("actor", dv), acts, self.relu)

    # --- forward ------------------------------------------------------------------------------
    def actor(self, obs: Tensor, flat: Tensor | dict[str, Tensor] | None = None) -> Tensor:
        """Logits [P, B, n] (Discrete) or Gaussian means [P, B, d] (Box); obs [P, B, obs_dim].
        flat: the parameters (default the leaf), or their views (see `views`)."""
        return self._mlp("actor", obs, self._params(flat))

    def critic(self, obs: Tensor, flat: Tensor | dict[str, Tensor] | None = None) -> Tensor:
        """V(s): [P, B, obs_dim] -> [P, B]."""
        return self._mlp("critic", obs, self._params(flat)).squeeze(-1)

    def log_std(self, flat: Tensor | dict[str, Tensor] | None = None) -> Tensor:
        """[P, 1, d] (Box only)."""
        if isinstance(flat, dict):
            return flat["log_std"]
        return self._view(self.segments[-1], self.flat if flat is None else flat)

    # --- conversion to and from ActorCritic -----------------------------------------------------
    @classmethod
    def from_policies(cls, policies: Sequence[ActorCritic], device: str | torch.device
                      ) -> PopActorCritic:
        """Stack P ActorCritic modules (separate trunks) into one population."""
        p0 = policies[0]
        if p0.shared_trunk:
            raise ValueError("the population networks have separate actor and critic trunks")
        if not p0.closed_form_ok:
            raise ValueError("the MLP population network holds plain MLPs on the flat "
                             "observation with Discrete or Box actions; use ModuleNet")
        kw = p0.kwargs()
        rows = [cls._flatten(p) for p in policies]
        flat = torch.stack(rows).to(device).requires_grad_(True)
        return cls(p0.obs_dim, p0.action, kw["hidden_sizes"], kw["activation"], flat)

    @staticmethod
    def _flatten(p: ActorCritic) -> Tensor:
        parts: list[Tensor] = []
        for trunk, head in ((p.actor_trunk, p.policy_head), (p.critic_trunk, p.value_head)):
            for layer in [m for m in trunk if isinstance(m, torch.nn.Linear)] + [head]:
                parts += [layer.weight.detach().t().reshape(-1), layer.bias.detach()]
        if p.log_std is not None:
            parts.append(p.log_std.detach())
        return torch.cat([x.float().cpu() for x in parts])

    def to_policy(self, member: int) -> ActorCritic:
        """Member `member` as an ActorCritic (on the CPU), e.g. to save it as an agent."""
        pol = ActorCritic(self.obs_dim, self.action, self.hidden_sizes, self.activation)
        self.write_policy(member, pol)
        return pol

    def write_policy(self, member: int, pol: ActorCritic) -> None:
        """Copy member `member`'s parameters into an ActorCritic of the same shape."""
        row = self.flat[member].detach().to(next(pol.parameters()).device)
        it = iter(self.segments)
        with torch.no_grad():
            for trunk, head in ((pol.actor_trunk, pol.policy_head),
                                (pol.critic_trunk, pol.value_head)):
                for layer in [m for m in trunk if isinstance(m, torch.nn.Linear)] + [head]:
                    w, b = next(it), next(it)
                    layer.weight.copy_(row[w.offset:w.offset + w.size].view(w.shape).t())
                    layer.bias.copy_(row[b.offset:b.offset + b.size])
            if pol.log_std is not None:
                s = next(it)
                pol.log_std.copy_(row[s.offset:s.offset + s.size])


def seq_args(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """What a recurrent network needs beside a batch's observations: the episode-start flags
    `starts` [P, M] and the state at the segment's start `state0` [P, m, S] (the rows are T
    steps of m envs, time-major: docs/recurrent.md); {} for a memoryless batch."""
    if "state0" not in batch:
        return {}
    return {"starts": batch["starts"], "state0": batch["state0"]}


class ModuleNet(PopNet):
    """Any actor-critic module as a population network, for the autograd backend: P copies of
    `module`'s parameters as rows of one flat leaf [P, D] (named_parameters order, tied
    parameters once), run through the module with torch.func.functional_call. The module
    needs `forward(obs, part)` returning the actor's output ("actor": logits or Gaussian
    means) or V(s) ("critic"), a `log_std` parameter for Box actions, and `actor_parameters()`
    (what pi depends on). trustrl.nets.policies.ActorCritic qualifies (with a shared trunk, a
    feature extractor, any action space), as does CustomActorCritic (a user's module)."""

    def __init__(self, module: torch.nn.Module, action: ActionSpec, flat: Tensor):
        self.module, self.action = module, action
        self.discrete = action.kind == "discrete"
        self.n_out = action.n_out
        self.names = [n for n, _ in module.named_parameters()]
        self.shapes = [p.shape for _, p in module.named_parameters()]
        self.sizes = [math.prod(sh) for sh in self.shapes]
        self.size = sum(self.sizes)
        if flat.shape[-1] != self.size:
            raise ValueError(f"flat has {flat.shape[-1]} columns, the module needs {self.size}")
        self.flat = flat

    @classmethod
    def from_policies(cls, policies: Sequence[torch.nn.Module], action: ActionSpec,
                      device: str | torch.device) -> ModuleNet:
        rows = [torch.cat([p.detach().reshape(-1).float().cpu() for p in m.parameters()])
                for m in policies]
        flat = torch.stack(rows).to(device).requires_grad_(True)
        return cls(policies[0], action, flat)

    def views(self, flat: Tensor | None = None) -> dict[str, Tensor]:
        flat = self.flat if flat is None else flat
        out, off = {}, 0
        for n, sh, k in zip(self.names, self.shapes, self.sizes, strict=True):
            out[n] = flat[:, off:off + k].view(flat.shape[0], *sh)
            off += k
        return out


    def _call(self, part: str, obs: Tensor, flat: Tensor | dict[str, Tensor] | None,
              starts: Tensor | None = None, state0: Tensor | None = None) -> Any:
        v = self._params(flat)
        outs = [torch.func.functional_call(
            self.module, {n: t[p] for n, t in v.items()},
            (obs[p], part) if state0 is None else (obs[p], part, starts[p], state0[p]))  # type: ignore[index]  # noqa: E501
            for p in range(obs.shape[0])]
        if part in ("both", "step"):  # each output stacked
            return tuple(torch.stack(x) for x in zip(*outs, strict=True))
        return torch.stack(outs)

    def actor_critic(self, obs: Tensor, flat: Tensor | dict[str, Tensor] | None = None,
                     starts: Tensor | None = None, state0: Tensor | None = None
                     ) -> tuple[Tensor, Tensor]:
        """One call of the module's forward(obs, "both"): shared layers run once. A recurrent
        module's rows are segments (`seq_args`): starts [P, M], state0 [P, m, S]."""
        return self._call("both", obs, flat, starts, state0)

    def actor(self, obs: Tensor, flat: Tensor | dict[str, Tensor] | None = None,
              starts: Tensor | None = None, state0: Tensor | None = None) -> Tensor:
        return self._call("actor", obs, flat, starts, state0)

    def critic(self, obs: Tensor, flat: Tensor | dict[str, Tensor] | None = None,
               starts: Tensor | None = None, state0: Tensor | None = None) -> Tensor:
        return self._call("critic", obs, flat, starts, state0)

    def step(self, obs: Tensor, flat: Tensor | dict[str, Tensor] | None, starts: Tensor,
             state: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """A recurrent module's one step of N envs per member (its forward(obs, "step"):
        trustrl.nets.policies.unroll with T = 1, as acting on the Gymnasium collector): obs
        [P, N, D], starts [P, N], state [P, N, S] -> (actor output [P, N, k], V [P, N], the
        next state [P, N, S])."""
        return self._call("step", obs, flat, starts, state)

    def log_std(self, flat: Tensor | dict[str, Tensor] | None = None) -> Tensor:
        return self._params(flat)["log_std"].unsqueeze(1)

    @property
    def actor_mask(self) -> Tensor:
        ids = {id(p) for p in self.module.actor_parameters()}  # type: ignore[operator]
        m = torch.zeros(self.size, dtype=torch.bool, device=self.flat.device)
        off = 0
        for (_, p), k in zip(self.module.named_parameters(), self.sizes, strict=True):
            if id(p) in ids:
                m[off:off + k] = True
            off += k
        return m

    def write_policy(self, member: int, pol: torch.nn.Module) -> None:
        row = self.flat[member].detach()
        with torch.no_grad():
            off = 0
            for p, k in zip(pol.parameters(), self.sizes, strict=True):
                p.copy_(row[off:off + k].view_as(p))
                off += k

    def to_policy(self, member: int) -> torch.nn.Module:
        import copy

        pol = copy.deepcopy(self.module).cpu()
        self.write_policy(member, pol)
        return pol
