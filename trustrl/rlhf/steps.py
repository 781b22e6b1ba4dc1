"""What PPO's and GRPO's updates share, for the tiny sort model and a Hugging Face model alike.

- `LMAdapter`: how a trainer runs a policy on prompts and answers (sample, logits of the answer
  tokens, critic values, the answer mask). The tiny model's is `trustrl.rlhf.model.TINY_IO`,
  a Hugging Face causal LM's is `trustrl.rlhf.hf.HFIO`; the trainers hold no other model code.
- minibatches, micro-batches (gradient accumulation) and their loss weights, so that K
  micro-batches give the gradient of one minibatch exactly, whatever the loss aggregation;
- the trust-region diagnostics both trainers log every step: the KL to pi_ref (k1, k3 and the
  exact per-token KL over the vocabulary, at sampling time), the KL to pi_old during the update
  (k1, k3 and exact), the ratio's quantiles and the completions' lengths;
- the sampler correction: when the answers come from a sampler mu that is not the training
  model's exact forward (generation in bf16, or an inference engine such as vLLM), each token's
  policy loss is weighted by an importance weight of pi_old / mu, per token or per answer,
  truncated or masked outside [C_min, C_max]: TRL's `vllm_importance_sampling_mode`s
  token_truncate, token_mask, sequence_truncate and sequence_mask, with its diagnostics.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from trustrl.maths.diagnostics import approx_kl, ratio_stats
from trustrl.rlhf.kl import exact_kl, kl_to_ref
from trustrl.util.errors import ConfigError

EXACT_KL_OLD_MAX = 2**25
"""The exact KL to pi_old needs pi_old's whole distribution at every answer token of the batch
(B x T x V floats); it is kept (and the metric logged) only up to this many elements."""

DIAG_COLUMNS = [
    "kl_ref/k1", "kl_ref/k3", "kl_ref/exact", "kl_old/k1", "kl_old/k3", "kl_old/exact",
    "ratio_min", "ratio_q05", "ratio_q25", "ratio_q50", "ratio_q75", "ratio_q95", "ratio_max",
    "completions/mean_length", "completions/min_length", "completions/max_length",
    "completions/clipped_ratio",
]


OPT_COLUMNS = ["lr", "epochs_run", "optimizer_steps"]
"""The update's schedule, as the core logs lr and epochs_run: the learning rate and the passes
over the batch (epochs) and optimiser steps this iteration made (language-model runs' columns)."""


def opt_stats(opt: torch.optim.Optimizer, epochs: int, steps: int) -> dict[str, float]:
    """The OPT_COLUMNS of an update: the optimiser's learning rate, its epochs and steps."""
    return {"lr": float(opt.param_groups[0]["lr"]), "epochs_run": epochs,
            "optimizer_steps": steps}


SAMPLER_COLUMNS = [
    "sampling/sampling_logp_difference/mean", "sampling/sampling_logp_difference/max",
    "sampling/importance_sampling_ratio/min", "sampling/importance_sampling_ratio/mean",
    "sampling/importance_sampling_ratio/max", "sampling/importance_sampling_ratio/clipped_frac",
    "sampling/kl_mu_old/k1", "sampling/kl_mu_old/k3",
]
"""The sampler's mismatch with pi_old, logged when the sampler records its log-probs (TRL's
names where TRL has one; clipped_frac and kl_mu_old are trustrl's)."""

SAMPLER_CORRECTIONS = ("none", "token_truncate", "token_mask", "sequence_truncate",
                       "sequence_mask", "tis")
"""TRL's four modes (`vllm_importance_sampling_mode`) and none; tis is token_truncate under
its earlier name (run folders written before the other modes say tis)."""


def _mode(correction: str) -> str:
    """The TRL mode a correction names (none: token_truncate, for the logged statistics)."""
    return "token_truncate" if correction in ("none", "tis") else correction


class Sampler(Protocol):
    """A sampler that records the log-probs it sampled with: ([B, T] answer tokens, padded after
    the end as `LMAdapter.sample`'s, and [B, T] float32 log mu(token) at each of them). All an
    inference engine (vLLM) would have to supply for the correction."""

    def __call__(self, policy: nn.Module, prompts: Any, max_new: int, temperature: float,
                 generator: torch.Generator) -> tuple[Tensor, Tensor]: ...


@torch.no_grad()
def sampler_ratios(logp_old: Tensor, logp_mu: Tensor, mask: Tensor | None = None,
                   correction: str = "token_truncate", cap: float | None = 3.0,
                   cap_min: float = 0.0) -> tuple[Tensor, Tensor]:
    """(raw, weight) of the mode `correction` names: raw the ratio pi_old / mu of each token
    ([B, T]; token_*) or of each answer, the product over its valid tokens ([B, 1]; sequence_*);
    weight the raw ratio clamped to [cap_min, cap] (*_truncate) or set to 0 outside it (*_mask),
    as TRL's modes; cap None: no upper bound (TRL's clip_max None). A token whose sampling
    log-prob is NaN (not given) or that lies outside mask (after the answer's end) counts as
    pi_old / mu = 1."""
    hi = math.inf if cap is None else cap
    diff = torch.nan_to_num(logp_old.float() - logp_mu.float(), nan=0.0)
    if mask is not None:
        diff = diff * mask
    mode = _mode(correction)
    raw = (diff.sum(1, keepdim=True) if mode.startswith("sequence") else diff).exp()
    if mode.endswith("mask"):
        return raw, raw.masked_fill((raw < cap_min) | (raw > hi), 0.0)
    return raw, raw.clamp(min=cap_min, max=hi)


@torch.no_grad()
def sampler_weights(logp_old: Tensor, logp_mu: Tensor, cap: float | None,
                    correction: str = "token_truncate", mask: Tensor | None = None,
                    cap_min: float = 0.0) -> Tensor:
    """[B, T] the weights of `sampler_ratios` on every token (an answer's weight on each of its
    tokens in the sequence modes; frozen numbers)."""
    return sampler_ratios(logp_old, logp_mu, mask, correction, cap, cap_min)[1].expand_as(
        logp_old)


@torch.no_grad()
def sampler_stats(logp_old: Tensor, logp_mu: Tensor, mask: Tensor, cap: float | None,
                  correction: str = "token_truncate", cap_min: float = 0.0) -> dict[str, float]:
    """The mismatch between the sampler mu and pi_old over the valid answer tokens: |log pi_old
    - log mu| (mean, max), the weights of the mode (min, mean, max over the valid tokens, or
    over the answers in the sequence modes, as TRL logs them; the fraction outside [cap_min,
    cap], i.e. truncated or masked) and KL(mu || pi_old) per token, k1 and k3 of the log-ratio
    (tokens drawn from mu, so both estimate that direction; k3 is never negative)."""
    valid = mask.bool() & ~logp_mu.isnan()
    diff = (logp_old - logp_mu)[valid].float()
    if diff.numel() == 0:
        return dict.fromkeys(SAMPLER_COLUMNS, float("nan"))
    raw, w = sampler_ratios(logp_old, logp_mu, mask, correction, cap, cap_min)
    if not _mode(correction).startswith("sequence"):  # per token: the valid ones
        raw, w = raw[mask.bool()], w[mask.bool()]
    return {
        "sampling/sampling_logp_difference/mean": float(diff.abs().mean()),
        "sampling/sampling_logp_difference/max": float(diff.abs().max()),
        "sampling/importance_sampling_ratio/min": float(w.min()),
        "sampling/importance_sampling_ratio/mean": float(w.mean()),
        "sampling/importance_sampling_ratio/max": float(w.max()),
        "sampling/importance_sampling_ratio/clipped_frac": float(
            ((raw > (math.inf if cap is None else cap)) | (raw < cap_min)).float().mean()),
        "sampling/kl_mu_old/k1": approx_kl(diff, "k1"),
        "sampling/kl_mu_old/k3": approx_kl(diff, "k3"),
    }


@torch.no_grad()
def draw(lm: LMAdapter, sampler: Sampler | None, policy: nn.Module, prompts: Any, max_new: int,
         temperature: float, generator: torch.Generator) -> tuple[Tensor, Tensor | None]:
    """Answers [B, T] from the sampler that records its log-probs (and those [B, T]), or from
    `lm.sample` (and None)."""
    if sampler is not None:
        return sampler(policy, prompts, max_new, temperature, generator)
    return lm.sample(policy, prompts, max_new, temperature, generator), None


def check_sampler_option(correction: str, cap: float | None, sampler: Any = "unknown",
                         cap_min: float = 0.0) -> None:
    """ConfigError for an unknown correction, a cap that is neither None (no upper bound, as
    TRL's clip_max None) nor > 0, a cap_min outside [0, cap), a truncate mode with neither
    bound (TRL refuses it), or a correction with no sampler that records its log-probs (sampler
    None; the default skips that check)."""
    if correction not in SAMPLER_CORRECTIONS:
        raise ConfigError(f"unknown sampler_correction {correction!r}; use one of "
                          f"{', '.join(SAMPLER_CORRECTIONS)}")
    if cap is not None and not (isinstance(cap, (int, float)) and not isinstance(cap, bool)
                                and math.isfinite(cap) and cap > 0):
        raise ConfigError(f"sampler_cap must be a finite number > 0 or none, got {cap}")
    hi = math.inf if cap is None else cap
    if not (isinstance(cap_min, (int, float)) and 0 <= cap_min < hi):
        raise ConfigError(f"sampler_cap_min must be >= 0 and below sampler_cap ({cap}), got "
                          f"{cap_min}")
    if cap is None and cap_min == 0 and _mode(correction).endswith("truncate") \
            and correction != "none":
        raise ConfigError(f"sampler_correction {correction} with sampler_cap none needs "
                          "sampler_cap_min > 0 (a truncation with neither bound; TRL refuses "
                          "it too)")
    if correction != "none" and sampler is None:
        raise ConfigError(f"sampler_correction {correction} needs a sampler that records its "
                          "log-probs (a Hugging Face model's generate_dtype)")


@torch.no_grad()
def sampler_correction(logp_old: Tensor, logp_mu: Tensor | None, mask: Tensor, correction: str,
                       cap: float | None, cap_min: float = 0.0) -> tuple[Tensor | None,
                                                                  dict[str, float]]:
    """The correction's [B, T] weights (None when correction is none or the sampler's log-probs
    are not given; 1 after an answer's end, where no token was sampled) and the mismatch's
    statistics (empty without the sampler's log-probs; with none, those of token_truncate)."""
    if logp_mu is None:
        return None, {}
    logp_mu = logp_mu.to(logp_old.device).float()
    stats = sampler_stats(logp_old, logp_mu, mask, cap, correction, cap_min)
    if correction == "none":
        return None, stats
    weight = sampler_weights(logp_old, logp_mu, cap, correction, mask, cap_min)
    return weight.where(mask.bool(), 1.0), stats


class LMAdapter(Protocol):
    """How the trainers run a language model. Prompts are any batch indexable by a long
    tensor with len(); responses are [B, T] token ids (T = max_new), padded after the end."""

    def sample(self, policy: nn.Module, prompts: Any, max_new: int, temperature: float,
               generator: torch.Generator) -> Tensor: ...

    def answer_logits(self, model: nn.Module, prompts: Any, responses: Tensor,
                      temperature: float = 1.0) -> Tensor: ...

    def answer_values(self, critic: nn.Module, prompts: Any, responses: Tensor) -> Tensor: ...

    def response_mask(self, responses: Tensor) -> Tensor: ...

    def is_eos(self, responses: Tensor) -> Tensor: ...


def trainable(*modules: nn.Module) -> list[nn.Parameter]:
    """The parameters with requires_grad of the modules, each once (a value head on the policy
    shares the policy's trunk; LoRA leaves the base weights frozen)."""
    seen: set[int] = set()
    out = []
    for m in modules:
        for p in m.parameters():
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out


def adam(params: list[nn.Parameter], lr: float) -> torch.optim.Adam:
    """torch's Adam over the trainable parameters, with its fused kernel (one call per step
    instead of a dozen elementwise operations per tensor: the same arithmetic, to float
    rounding) where they are all floating-point tensors on a CPU or a CUDA device."""
    fused = bool(params) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda")
                                 for p in params)
    return torch.optim.Adam(params, lr=lr, fused=fused or None)


def minibatches(n: int, size: int, generator: torch.Generator) -> Iterator[Tensor]:
    """One epoch: a random permutation of range(n) cut into index blocks of `size`."""
    perm = torch.randperm(n, generator=generator)
    for i in range(0, n, size):
        yield perm[i: i + size]


def micro_batches(idx: Tensor, accum: int) -> list[Tensor]:
    """A minibatch's indices in `accum` near-equal parts (gradient accumulation)."""
    return list(idx.tensor_split(min(accum, len(idx)))) if accum > 1 else [idx]


def micro_weight(mask_micro: Tensor, mask_mini: Tensor, per: str) -> float:
    """The factor that makes a micro-batch's loss, aggregated over the micro-batch, a term of
    the minibatch's loss: answers(micro) / answers(mini) for a per-answer mean (seq-mean,
    dr-grpo), tokens(micro) / tokens(mini) for a per-token mean (token-mean, PPO's losses).
    The easy mistake: averaging micro-batch losses with equal weights, which over-weights the
    tokens of a micro-batch of short answers under a per-token mean."""
    if mask_micro.shape[0] == mask_mini.shape[0]:
        return 1.0
    if per == "token":
        return float(mask_micro.sum() / mask_mini.sum().clamp(min=1))
    return mask_micro.shape[0] / mask_mini.shape[0]


@dataclass
class Scored:
    """What collection keeps of the policy's and the reference's logits on the sampled answers
    (each [B, T]; old_all [B, T, V] or None, see EXACT_KL_OLD_MAX)."""

    logp: Tensor
    entropy: Tensor
    logp_ref: Tensor
    kl_exact: Tensor
    """Exact KL(pi || pi_ref) over the vocabulary at each answer token."""
    old_all: Tensor | None


@torch.no_grad()
def score_answers(lm: LMAdapter, policy: nn.Module, ref: nn.Module, prompts: Any,
                  responses: Tensor, temperature: float, chunk: int | None = None) -> Scored:
    """Log-probs, entropy and exact KL to pi_ref of the sampled answers, `chunk` answers per
    forward pass (None: the whole batch at once), so that no more than a chunk's logits
    (answers x tokens x vocabulary) are held at a time."""
    n = len(prompts)
    size = n if chunk is None or chunk >= n else chunk
    parts: list[Scored] = []
    for i in range(0, n, size):
        if size == n:
            p, r = prompts, responses
        else:
            idx = torch.arange(i, min(i + size, n))
            p, r = prompts[idx], responses[idx]
        logits = lm.answer_logits(policy, p, r, temperature)
        keep_old = n * logits.shape[1] * logits.shape[2] <= EXACT_KL_OLD_MAX
        parts.append(score_logits(logits, lm.answer_logits(ref, p, r, temperature), r,
                                  keep_old))
    if len(parts) == 1:
        return parts[0]
    logp, entropy, logp_ref, kl = (torch.cat(x) for x in zip(
        *((s.logp, s.entropy, s.logp_ref, s.kl_exact) for s in parts), strict=True))
    olds = [s.old_all for s in parts]
    old_all = None if any(o is None for o in olds) else torch.cat(olds)  # type: ignore[arg-type]
    return Scored(logp, entropy, logp_ref, kl, old_all)


@torch.no_grad()
def score_logits(logits: Tensor, ref_logits: Tensor, responses: Tensor,
                 keep_old: bool) -> Scored:
    """`Scored` from the policy's and the reference's logits [B, T, V] on answers [B, T]
    (pi_old's whole distribution kept when keep_old)."""
    from trustrl.rlhf.model import token_logprobs

    logp, entropy = token_logprobs(logits, responses)
    logp_ref, _ = token_logprobs(ref_logits, responses)
    old_all = torch.log_softmax(logits.detach().float(), dim=-1) if keep_old else None
    return Scored(logp, entropy, logp_ref, exact_kl(logits, ref_logits), old_all)


def sampling_stats(kl_exact: Tensor, logp: Tensor, logp_ref: Tensor,
                   mask: Tensor, ended: Tensor) -> dict[str, float]:
    """KL to pi_ref per answer token (k1, k3, exact over the vocabulary; token-weighted over the
    batch) and the completions' lengths, at sampling time. ended [B]: the answer has its EOS."""
    tokens = mask.sum().clamp(min=1)
    lengths = mask.sum(1)

    def per_token(x: Tensor) -> float:
        return float((x * mask).sum() / tokens)

    return {
        "kl_ref/k1": per_token(kl_to_ref(logp, logp_ref, "k1")),
        "kl_ref/k3": per_token(kl_to_ref(logp, logp_ref, "k3")),
        "kl_ref/exact": per_token(kl_exact),
        "completions/mean_length": float(lengths.mean()),
        "completions/min_length": float(lengths.min()),
        "completions/max_length": float(lengths.max()),
        "completions/clipped_ratio": float((~ended).float().mean()),
    }


class UpdateDiagnostics:
    """The trust region during an update: per micro-batch step, before it, the KL to pi_old
    (k1 and k3 from the sampled tokens' log-ratios, exact from pi_old's stored distribution)
    and every valid token's ratio, for the quantiles."""

    def __init__(self) -> None:
        self.k1: list[float] = []
        self.k3: list[float] = []
        self.exact: list[float] = []
        self.ratios: list[Tensor] = []

    @torch.no_grad()
    def add(self, log_ratio: Tensor, logits: Tensor | None = None,
            old_all: Tensor | None = None, mask: Tensor | None = None) -> None:
        """log_ratio: log pi - log pi_old at the valid tokens (flat). logits [b, T, V] and
        old_all [b, T, V] with mask [b, T] for the exact KL(pi_old || pi) per token."""
        log_ratio = log_ratio.detach().float()
        self.k1.append(approx_kl(log_ratio, "k1"))
        self.k3.append(approx_kl(log_ratio, "k3"))
        self.ratios.append(log_ratio.exp().cpu())
        if old_all is not None and logits is not None and mask is not None:
            new_all = torch.log_softmax(logits.detach().float(), dim=-1)
            kl = (old_all.exp() * (old_all - new_all)).sum(-1)
            self.exact.append(float((kl * mask).sum() / mask.sum().clamp(min=1)))

    def result(self) -> dict[str, float]:
        out = {"kl_old/k1": _avg(self.k1), "kl_old/k3": _avg(self.k3),
               "kl_old/exact": _avg(self.exact)}
        ratios = torch.cat(self.ratios) if self.ratios else torch.empty(0)
        out.update(ratio_stats(ratios) if ratios.numel() else {})
        return out


def _avg(x: list[float]) -> float:
    return sum(x) / len(x) if x else float("nan")
