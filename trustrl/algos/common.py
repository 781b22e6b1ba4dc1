"""What every algorithm shares, over a population of P members (an ordinary run is P = 1).

A batch is a dict of tensors [P, B, ...]: obs, actions, logp_old and values_old (frozen at
collection: pi_old and V_old), advantages (GAE) and returns (R = A + V_old). Parameters are the
rows of the network's flat tensor [P, D]; the optimizer (trustrl.maths.optim.PopAdam) steps each row
on its own and can leave a member out (a mask). Metrics are tensors [P], one value per member.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor

from trustrl.compute.backends import Backend, Heads, LossTerms
from trustrl.maths import rng
from trustrl.maths.advantages import normalize_advantages  # noqa: F401  (algos' name for it)
from trustrl.maths.distributions import mask_logits
from trustrl.maths.losses import value_error, value_error_grad
from trustrl.maths.optim import PopAdam, clip_coefficient
from trustrl.nets.popnet import PopNet, seq_args

ORDERS_AHEAD = 16
"""On a CPU, Algorithm.epoch_orders draws the epochs' shuffles of this many iterations at
once."""
ORDERS_AHEAD_NUMBERS = 1 << 21
"""... and at most this many indices in one draw."""

QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
DIAGNOSTIC_COLUMNS = (
    "entropy", "approx_kl", "approx_kl_k1", "kl_exact", "clip_fraction", "clip_eps",
    "ratio_min", "ratio_q05", "ratio_q25", "ratio_q50", "ratio_q75", "ratio_q95", "ratio_max",
)
"""The full-batch diagnostics every algorithm reports after its update."""


def quantiles(x: Tensor, qs: tuple[float, ...]) -> list[Tensor]:
    """Per-row quantiles of x [P, B] with linear interpolation (torch.quantile's default),
    written with sort and gather: torch.quantile checks its arguments on the host."""
    s = x.sort(dim=-1).values
    n = x.shape[-1]
    out = []
    for q in qs:
        pos = q * (n - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        out.append(s[..., lo] + (s[..., hi] - s[..., lo]) * (pos - lo))
    return out


@torch.no_grad()
def diagnostics(net: PopNet, batch: dict[str, Tensor], old_out: Tensor, flat_old: Tensor,
                clip_eps: float, backend: Any = None) -> dict[str, Tensor]:
    """How far the updated policy moved from pi_old on the whole batch, per member [P].

    approx_kl (k3) and approx_kl_k1 from the stored logp_old; kl_exact, the analytic mean
    KL(pi_old || pi); clip fraction with the band clip_eps (reported even by methods that do
    not clip); ratio quantiles; entropy of the updated policy. On a masked batch (an
    "action_mask" entry) every term is over the valid actions of its sample. A backend with
    a `diagnostics` of its own (the compiled backend's kernel, masked or not) computes them
    where it can.
    """
    compiled = getattr(backend, "diagnostics", None)
    if compiled is not None:
        d = compiled(net, batch, old_out, flat_old, clip_eps, QUANTILES)
        if d is not None:
            return d
    # masked run: the valid actions the batch was sampled under, as old_out's logits were
    out = mask_logits(net.actor(batch["obs"], **seq_args(batch)),  # type: ignore[attr-defined]
                      batch.get("action_mask"))
    logp, ent = net.log_prob_entropy(out, batch["actions"])
    log_ratio = logp - batch["logp_old"]
    ratio = log_ratio.exp()
    P = ratio.shape[0]
    d = {
        "entropy": ent.mean(1),
        "approx_kl": (torch.expm1(log_ratio) - log_ratio).mean(1),
        "approx_kl_k1": (-log_ratio).mean(1),
        "kl_exact": net.kl_from(old_out, out, flat_old).mean(1),
        "clip_fraction": ((ratio > 1 + clip_eps) | (ratio < 1 - clip_eps)).float().mean(1),
        "clip_eps": torch.full((P,), clip_eps, device=ratio.device),
        "ratio_min": ratio.min(1).values,
        "ratio_max": ratio.max(1).values,
    }
    for q, row in zip(QUANTILES, quantiles(ratio.double(), QUANTILES), strict=True):
        d[f"ratio_q{int(round(q * 100)):02d}"] = row
    return d


def clip_grad_norm(g: Tensor, max_norm: float) -> tuple[Tensor, Tensor]:
    """Each member's gradient row scaled to norm <= max_norm (when > 0), as
    torch.nn.utils.clip_grad_norm_ does for one model (the factor trustrl.maths.optim's
    clip_coefficient, the compiled step's too); returns (gradient, pre-clip norms)."""
    norm = torch.linalg.vector_norm(g, dim=1)
    if max_norm > 0:
        g = g * clip_coefficient(norm, max_norm, 1e-6, 1.0)[:, None]
    return g, norm


PER_SAMPLE = ("obs", "actions", "logp_old", "values_old", "advantages", "returns", "old_out",
              "action_mask", "starts")
"""The batch entries with one row per sample [P, B, ...]; anything else passes through."""


def take(batch: dict[str, Tensor], idx: Tensor,
         buffers: dict[str, Tensor] | None = None) -> dict[str, Tensor]:
    """The samples idx [P, M] of every per-sample entry of the batch. With `buffers`, each
    entry is copied into a kept array (made on first use, or when its shape changes) rather
    than a new one: a new array of an Atari batch (about 100 MB) costs more in page faults
    than the copy. One member copies whole rows (index_select); several gather."""
    out = {}
    for k, x in batch.items():
        if k not in PER_SAMPLE:
            out[k] = x
            continue
        buf = None
        if buffers is not None:
            shape = (x.shape[0], idx.shape[1], *x.shape[2:])
            buf = buffers.get(k)
            if buf is None or buf.shape != shape or buf.dtype != x.dtype or buf.device != x.device:
                buf = buffers[k] = torch.empty(shape, dtype=x.dtype, device=x.device)
        if x.shape[0] == 1:
            out[k] = torch.index_select(x, 1, idx[0]) if buf is None else torch.index_select(
                x, 1, idx[0], out=buf)
        else:
            i = idx.view(*idx.shape, *([1] * (x.dim() - 2))).expand(-1, -1, *x.shape[2:])
            out[k] = x.gather(1, i) if buf is None else torch.gather(x, 1, i, out=buf)
    return out


def epoch_order(keys: Tensor, counter: Tensor | int, n: int) -> Tensor:
    """Each member's order of its n samples in one epoch [P, n]: a function of the member's key
    and the counter alone (trustrl.maths.rng). A counter tensor [E, 1] gives E epochs at once
    [E, P, n] (one hash and one sort)."""
    b = rng.bits(keys, counter, n)
    if b.device.type == "cpu" and not torch.compiler.is_compiling():
        # the same order by one NumPy sort of (hash << 32 | index): the keys are unique, so
        # any sort gives the stable argsort's order (3-4x faster than NumPy's stable argsort
        # on 16 x 4 x 512, twice torch's speed or more)
        k = (b.numpy().astype(np.uint64) << np.uint64(32)) | np.arange(n, dtype=np.uint64)
        return torch.from_numpy((np.sort(k, axis=-1) & np.uint64(0xFFFFFFFF)).astype(np.int64))
    return torch.argsort(b, dim=-1, stable=True)


def shuffled_epoch(batch: dict[str, Tensor], keys: Tensor, counter: Tensor | int, size: int,
                   buffers: dict[str, Tensor] | None = None) -> Iterator[dict[str, Tensor]]:
    """The minibatches [P, <=size] of one epoch, covering each member's samples once, in an
    order that is a function of the member's key and the counter alone (trustrl.maths.rng), so a
    member shuffles exactly as it would alone, on any collector. The epoch is gathered once
    and sliced (views): one gather per entry per epoch, not per minibatch; into `buffers`
    (see take) when given, so the previous epoch's minibatches must be done with."""
    if "state0" in batch:  # a recurrent batch: whole env sequences
        yield from sequence_epoch(batch, keys, counter, size)
        return
    n = batch["obs"].shape[1]
    epoch = take(batch, epoch_order(keys, counter, n), buffers)
    for start in range(0, n, size):
        yield {k: x[:, start:start + size] if k in PER_SAMPLE else x for k, x in epoch.items()}


def sequence_epoch(batch: dict[str, Tensor], keys: Tensor, counter: Tensor | int, size: int
                   ) -> Iterator[dict[str, Tensor]]:
    """The minibatches of one epoch of a recurrent batch: whole env sequences, as CleanRL's
    ppo_atari_lstm takes them (`sequence_minibatch`), size // T envs each, the envs in an
    order that is a function of the member's key and the counter alone (epoch_order)."""
    N = batch["state0"].shape[1]
    m = minibatch_units(batch, size)[1]
    order = epoch_order(keys, counter, N).to(batch["starts"].device)  # [P, N]
    for start in range(0, N, m):
        yield sequence_minibatch(batch, order[:, start:start + m])


def sequence_minibatch(batch: dict[str, Tensor], envs: Tensor) -> dict[str, Tensor]:
    """The minibatch of a recurrent batch made of the env columns envs [P, M]: the batch holds
    T steps of N envs time-major (row t * N + e) and the state at the segment's start
    `state0` [P, N, S]; the minibatch holds all T steps of those envs, time-major, with their
    start states."""
    P, n = batch["starts"].shape
    T = n // batch["state0"].shape[1]
    steps = torch.arange(T, device=envs.device)[None, :, None] * batch["state0"].shape[1]
    mb = take(batch, (steps + envs[:, None, :]).reshape(P, -1))
    s0 = batch["state0"]
    mb["state0"] = s0.gather(1, envs[..., None].expand(-1, -1, s0.shape[-1]))
    return mb


def cut_sequences(net: PopNet, batch: dict[str, Tensor], length: int) -> dict[str, Tensor]:
    """A recurrent batch of N env segments of T steps cut into N T / length sequences of
    `length` steps (a divisor of T), each with the state pi_old had at its first step, for
    truncated backpropagation through time over shorter sequences (as sb3-contrib's
    RecurrentPPO and RLlib's max_seq_len take them). The start states are those of the
    rollout: each segment is unrolled once at the current parameters (pi_old's, before the
    update; no gradient) from its start state, through its episode starts, and the state is
    kept every `length` steps. Sequence c N + e holds steps [c length, (c + 1) length) of env
    e; the rows stay time-major (row t (N T / length) + sequence), so every function of a
    recurrent batch takes it as it is. A batch of segments of `length` steps or fewer is
    returned as it is."""
    P, n = batch["starts"].shape
    s0 = batch["state0"]
    N = s0.shape[1]
    T = n // N
    if length >= T:
        return batch
    if T % length:
        raise ValueError(f"sequence length {length} does not divide the segment's {T} steps")
    C = T // length
    states = [s0]
    with torch.no_grad():
        for c in range(C - 1):  # the state at the start of sequence c + 1 of every env
            rows = slice(c * length * N, (c + 1) * length * N)
            states.append(net.step(batch["obs"][:, rows], None, batch["starts"][:, rows],  # type: ignore[attr-defined]  # noqa: E501
                                   states[-1])[2])
    dev = batch["starts"].device
    t = torch.arange(length, device=dev)[:, None, None]
    c = torch.arange(C, device=dev)[None, :, None]
    e = torch.arange(N, device=dev)[None, None, :]
    rows = ((c * length + t) * N + e).reshape(1, -1).expand(P, -1)  # new row -> old row
    out = take(batch, rows)
    out["state0"] = torch.stack(states, 1).reshape(P, C * N, s0.shape[-1])
    return out


def minibatch_units(batch: dict[str, Tensor], size: int) -> tuple[int, int]:
    """What an epoch shuffles, and how many of them a minibatch of `size` samples takes:
    (n samples, size), or, for a recurrent batch (a "state0" entry), (N env sequences of T
    steps, max(1, size // T))."""
    if "state0" in batch:
        N = batch["state0"].shape[1]
        return N, max(1, size // (batch["starts"].shape[1] // N))
    return batch["obs"].shape[1], size


def minibatch(batch: dict[str, Tensor], idx: Tensor,
              buffers: dict[str, Tensor] | None = None) -> dict[str, Tensor]:
    """The minibatch of the units idx [P, M] (`minibatch_units`): the samples idx (`take`,
    into `buffers` when given), or a recurrent batch's env sequences idx
    (`sequence_minibatch`)."""
    if "state0" in batch:
        return sequence_minibatch(batch, idx)
    return take(batch, idx, buffers)


def critic_loss(h: Heads, mb: dict[str, Tensor], want: bool) -> LossTerms:
    """1/2 mean (V - R)^2 per member: the critic regression of TRPO and NPG."""
    M = mb["returns"].shape[1]
    vl = value_error(h.value, mb["returns"]).mean(1)
    t = LossTerms(vl, {"value_loss": vl})
    if want:
        t.d_value = value_error_grad(h.value, mb["returns"]) / M
    return t


def fit_critic(net: PopNet, opt: PopAdam, backend: Backend, batch: dict[str, Tensor],
               keys: Tensor, counter: Tensor | int, epochs: int, minibatch_size: int,
               lr: Tensor | float, buffers: dict[str, Tensor] | None = None,
               orders: Tensor | None = None) -> Tensor:
    """Regress V on the targets R = A + V_old: `epochs` passes of shuffled minibatches of
    1/2 (V - R)^2 with the critic's optimizer, which steps the flat parameters'
    `net.critic_slice` (the backends' gradient of a critic-only loss covers just those).
    `orders`: the epochs' shuffles [epochs, P, n] where the caller has them drawn already
    (Algorithm.epoch_orders: the same numbers). Returns each member's mean loss over the last
    epoch [P]."""
    P, n = batch["returns"].shape
    kernel = getattr(backend, "fit_critic", None)
    if kernel is not None and buffers is not None:  # the same loop, compiled (eager CPU only)
        if orders is None:
            c = torch.as_tensor(counter) * epochs + torch.arange(epochs, device=keys.device)
            orders = epoch_order(keys, c[:, None], n)  # every epoch's, [epochs, P, n]
        return kernel(net, opt, batch["obs"], batch["returns"], orders, minibatch_size, lr)
    params = net.views(net.flat.detach())  # type: ignore[attr-defined]
    data = {"obs": batch["obs"], "returns": batch["returns"]}
    last = torch.zeros(P, device=net.flat.device)
    for epoch in range(epochs):
        acc = torch.zeros(P, device=net.flat.device)
        n_mb = 0
        for mb in shuffled_epoch(data, keys, counter * epochs + epoch, minibatch_size,
                                 buffers):
            g, t = backend.value_and_grad(net, params, mb, critic_loss, policy=False)
            with torch.no_grad():
                opt.step(g, lr)
                acc += t.loss
            n_mb += 1
        last = acc / n_mb
    return last


def annealed(lr: float, anneal: bool, progress: float) -> float:
    """Linear decay to 0: lr * (1 - progress), progress = fraction of training already done."""
    return lr * (1.0 - progress) if anneal else lr


class Algorithm:
    """One policy-optimisation method over a population. The learner calls `update` once per
    batch; `learning_rate(progress)` is the optimizer's rate with `progress` of training done,
    `set_progress(progress)` sets the other schedules (PPO's clip range).

    columns: its metrics, in order (the shared diagnostics included); int_columns: those
    written as integers. State (optimizer moments, adaptive coefficients) is in state_dict.
    """

    columns: tuple[str, ...] = ()
    int_columns: tuple[str, ...] = ()
    extra_columns: tuple[str, ...] = ()  # its own metrics.csv columns, beyond the shared ones
    # the compiled backend's kernels it calls (trustrl.compute.compiled)
    kernels: tuple[str, ...] = ()

    def __init__(self, net: PopNet, cfg: Any, backend: Backend, keys: Tensor):
        self.net, self.cfg, self.backend, self.keys = net, cfg, backend, keys
        self.opt = PopAdam(net.flat, cfg.adam_eps)
        # the shuffled epochs' copies of the batch, kept from epoch to epoch (common.take)
        self.epoch_buffers: dict[str, Tensor] = {}
        self._orders_ahead: tuple[int, int, int, Tensor] | None = None  # (counter, n, K, ...)

    def epoch_orders(self, counter: int, n: int, epochs: int) -> Tensor:
        """Every epoch's shuffle of iteration `counter` for `epochs` epochs [K, P, n]
        (epoch_order at counters counter * K + e), on a CPU drawn for up to ORDERS_AHEAD
        iterations at once (the same numbers: they are functions of the counters alone) and
        handed out in turn: PPO's epochs, TRPO's and NPG's critic fit."""
        K = epochs
        ahead = max(1, min(ORDERS_AHEAD, ORDERS_AHEAD_NUMBERS // max(1, K * self.keys.shape[0]
                                                                     * n)))
        kept = self._orders_ahead
        if (kept is None or kept[1] != n or kept[2] != K
                or not 0 <= counter - kept[0] < kept[3].shape[0] // K):
            c = counter * K + torch.arange(ahead * K)
            kept = self._orders_ahead = (counter, n, K, epoch_order(self.keys, c[:, None], n))
        first = (counter - kept[0]) * K
        return kept[3][first:first + K]

    def learning_rate(self, progress: float) -> float:
        return annealed(self.cfg.lr, self.cfg.anneal_lr, progress)

    def set_progress(self, progress: float) -> None:
        """Before each update: the schedules other than the learning rate's (PPO's clip
        range) take their values at `progress` of training done."""

    def update(self, batch: dict[str, Tensor], counter: Tensor | int,
               lr: Tensor | float) -> dict[str, Tensor]:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        return {"adam": self.opt.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.opt.load_state_dict(state["adam"])
