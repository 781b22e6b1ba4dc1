"""GRPO: PPO's clipped objective with no critic; the baseline is the group of siblings.

For each prompt, G answers are sampled; answer i's advantage (for every one of its tokens) is

    A_i = (r_i - mean_j r_j) / (std_j r_j + eps)        (GRPO, Shao et al. 2024)
    A_i =  r_i - mean_j r_j                            (Dr. GRPO: no std scaling)
    A_i =  r_i - mean_{j != i} r_j = G / (G - 1) (r_i - mean_j r_j)     (RLOO: leave one out)

The per-token loss is -min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A), plus the KL leash to
pi_ref (beta = 0 by default, as in recent practice), placed one of three ways (`kl_placement`,
`kl_estimator`; see `trustrl.rlhf.kl` for the derivations):

    loss,   k3 (default, DeepSeek's)  + beta * k3 per token: its gradient is that of
                                      KL(pi_ref || pi), the REVERSE direction, per token
    loss,   k2                        + beta * k2 per token: gradient of KL(pi || pi_ref) per token
    reward, k1                        r_i - beta * sum_t k1_t before the group baseline: the full
                                      gradient of the sequence KL(pi || pi_ref)

A loss-placed KL is partial over a sequence (each token's KL at the states reached, the effect
of earlier tokens on later ones ignored); k1 in the loss (zero mean gradient) and k2 / k3 in
the reward (the gradient of no KL) are refused. On-policy (the first pass over a batch) the
gradients are exactly these; later passes use samples of pi_old, not pi. The KL in the reward
is weighted like the task reward: exactly with dr-grpo (a constant divisor), by 1 / |o| per
answer with seq-mean, and divided by the group std when scale_rewards is on.
eps_high > eps_low is DAPO's clip-higher. The per-token losses are aggregated three ways:

    seq-mean    mean over answers of (mean over that answer's tokens)   (GRPO paper)
    token-mean  sum over all tokens / number of valid tokens            (DAPO)
    dr-grpo     sum over all tokens / (answers * max answer length)     (Dr. GRPO: a constant)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from trustrl.rlhf.common import check_positive, make_run, seed_everything
from trustrl.rlhf.kl import check_kl_option, kl_to_ref
from trustrl.rlhf.model import TINY_IO, load_model, token_logprobs
from trustrl.rlhf.ppo import (
    GOLD_KEYS,
    GoldFn,
    PromptFn,
    finish_sort,
    gold_fn_for,
    run_rl_loop,
    sort_task_of,
)
from trustrl.rlhf.steps import (
    DIAG_COLUMNS,
    EXACT_KL_OLD_MAX,
    LMAdapter,
    Sampler,
    Scored,
    UpdateDiagnostics,
    adam,
    check_sampler_option,
    draw,
    micro_batches,
    micro_weight,
    minibatches,
    opt_stats,
    sampler_correction,
    sampling_stats,
    score_answers,
    score_logits,
    trainable,
)
from trustrl.rlhf.task import SortTask, gold_scores
from trustrl.util.errors import ConfigError

RewardFn = Callable[[Tensor, Tensor], Tensor]

LOSS_TYPES = ("seq-mean", "token-mean", "dr-grpo")
ADVANTAGES = ("group", "rloo")
REWARDS = ("gold", "exact", "sorted", "rm")
GRPO_COLUMNS = [
    "iteration", "global_step", "wall_time", "reward", "reward_std", "frac_reward_zero_std",
    "kl", "kl_seq_exact", "entropy", "clip_ratio/low_mean", "clip_ratio/high_mean",
    "clip_ratio/region_mean", "loss", "response_length", *GOLD_KEYS, *DIAG_COLUMNS,
]


@dataclass
class GRPOConfig:
    seed: int = 1
    """Seeds sampling, minibatch order and the prompts."""
    sft: str = ""
    """SFT run folder: the initial policy and the frozen reference pi_ref."""
    reward: str = "gold"
    """gold (partial credit), exact (1 if exactly sorted), sorted (1 if 5 non-decreasing digits:
    checks sortedness only, not that the answer is a permutation), rm (a reward model)."""
    reward_model: str = ""
    """Reward-model run folder, when reward = rm."""
    iterations: int = 80
    """Iterations (sample groups, then K epochs on them)."""
    prompts_per_iter: int = 16
    """Prompts per iteration."""
    group_size: int = 8
    """G: answers per prompt (at least 2: the baseline is the others)."""
    advantage: str = "group"
    """group (GRPO: minus the group mean) or rloo (minus the mean of the other G - 1 answers,
    RLOO's leave-one-out baseline: G / (G - 1) times the group-mean advantage)."""
    minibatch_size: int = 32
    """Answers per gradient step."""
    grad_accum: int = 1
    """Micro-batches per minibatch (gradient accumulation): same gradient, less memory."""
    epochs: int = 2
    """K: passes over each batch (1 = on-policy: the ratio stays 1 and the clip never acts)."""
    lr: float = 1e-4
    """Adam learning rate."""
    beta: float = 0.0
    """Coefficient of the KL leash to pi_ref; 0 = no leash."""
    kl_estimator: str = "k3"
    """k3 (in the loss: gradient of KL(pi_ref || pi)), k2 (in the loss: of KL(pi || pi_ref)) or
    k1 (in the reward only: of the sequence KL(pi || pi_ref))."""
    kl_placement: str = "loss"
    """loss (a per-token term, partial over the sequence) or reward (r - beta * sum_t k1_t
    before the group baseline: the full sequence gradient; needs kl_estimator k1)."""
    clip_eps: float = 0.2
    """Lower clip range: rho >= 1 - clip_eps for negative advantages."""
    clip_eps_high: float | None = None
    """Upper clip range (DAPO's clip-higher uses 0.28); None = clip_eps."""
    scale_rewards: bool = True
    """Divide by the group std (GRPO); False = Dr. GRPO's mean-only baseline."""
    loss_type: str = "seq-mean"
    """Loss aggregation: seq-mean, token-mean or dr-grpo."""
    std_eps: float = 1e-4
    """eps in (r - mean) / (std + eps)."""
    temperature: float = 1.0
    """Sampling temperature (pure: no top-k / top-p)."""
    max_grad_norm: float = 1.0
    """Global gradient-norm clip."""
    sampler_correction: str = "none"
    """none, or one of TRL's vllm_importance_sampling_modes: weight the policy loss by pi_old / mu
    (mu the sampler's probability) per token (token_truncate, token_mask) or per answer, the
    product over its tokens (sequence_truncate, sequence_mask), clamped to [sampler_cap_min,
    sampler_cap] (*_truncate) or 0 outside it (*_mask); tis = token_truncate. Needs a sampler
    that records its log-probs (a Hugging Face model's `generate_dtype`); the sort task has
    none."""
    sampler_cap: float | None = 3.0
    """C_max of the sampler correction (TRL's vllm_importance_sampling_clip_max, 3.0); None =
    no upper bound (TRL's None; a truncate mode then needs sampler_cap_min > 0)."""
    sampler_cap_min: float = 0.0
    """C_min of the sampler correction (TRL's vllm_importance_sampling_clip_min; 0 = none)."""
    eval_prompts: int = 1024
    """Held-out prompts for the final gold evaluation."""
    runs_dir: str = "runs"
    """Where the run folder goes."""

    def validate(self) -> None:
        if not (math.isfinite(self.beta) and self.beta >= 0):
            raise ConfigError(f"beta must be a finite number >= 0, got {self.beta}")
        if self.group_size < 2:
            raise ConfigError(f"group_size must be at least 2 (the baseline is the group's "
                              f"mean), got {self.group_size}")
        if self.loss_type not in LOSS_TYPES:
            raise ConfigError(f"unknown loss_type {self.loss_type!r}; use one of "
                              f"{', '.join(LOSS_TYPES)}")
        if self.advantage not in ADVANTAGES:
            raise ConfigError(f"unknown advantage {self.advantage!r}; use one of "
                              f"{', '.join(ADVANTAGES)}")
        if self.reward not in REWARDS:
            raise ConfigError(f"unknown reward {self.reward!r}; use one of {', '.join(REWARDS)}")
        check_kl_option(self.kl_placement, self.kl_estimator)
        if self.reward == "rm" and not self.reward_model:
            raise ConfigError("reward rm needs --reward-model RUN")
        for name in ("iterations", "prompts_per_iter", "minibatch_size", "epochs",
                     "eval_prompts", "lr", "temperature", "max_grad_norm", "clip_eps",
                     "std_eps", "grad_accum"):
            check_positive(name, getattr(self, name))
        if self.clip_eps_high is not None:
            check_positive("clip_eps_high", self.clip_eps_high)
        check_sampler_option(self.sampler_correction, self.sampler_cap,
                             cap_min=self.sampler_cap_min)


# --- pure pieces ---------------------------------------------------------------------------------
def group_advantages(rewards: Tensor, scale: bool = True, eps: float = 1e-4,
                     leave_one_out: bool = False) -> Tensor:
    """[P, G] rewards -> [P, G] advantages: minus the group mean, over (sample std + eps).

    The std is the sample (n - 1) std, as torch.std: a group whose answers all got the same
    reward has advantage 0 for every answer and contributes no gradient. With leave_one_out
    (RLOO) the baseline of answer i is the mean of the other G - 1 answers' rewards.
    """
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    if leave_one_out:
        g = rewards.shape[1]
        centred = centred * (g / (g - 1))
    if not scale:
        return centred
    return centred / (rewards.std(dim=1, keepdim=True) + eps)


def clipped_objective(ratio: Tensor, adv: Tensor, eps_low: float, eps_high: float) -> Tensor:
    """Per-token min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A) (= the core's clipped
    surrogate when eps_low = eps_high)."""
    return torch.min(ratio * adv, torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * adv)


def aggregate(per_token: Tensor, mask: Tensor, loss_type: str, max_len: int) -> Tensor:
    """[B, T] per-token losses -> scalar, by loss_type (see the module docstring)."""
    x = per_token * mask
    if loss_type == "seq-mean":
        return (x.sum(1) / mask.sum(1).clamp(min=1)).mean()
    if loss_type == "token-mean":
        return x.sum() / mask.sum().clamp(min=1)
    if loss_type == "dr-grpo":
        return x.sum() / (per_token.shape[0] * max_len)
    raise ConfigError(f"unknown loss_type {loss_type!r}; use one of {', '.join(LOSS_TYPES)}")


def sequence_rewards(rewards: Tensor, logp: Tensor, logp_ref: Tensor, mask: Tensor,
                     cfg: GRPOConfig) -> Tensor:
    """[B] the rewards the group baseline sees: the task's, minus beta * sum_t k1_t with the KL in
    the reward (frozen numbers, computed at sampling time); unchanged with the KL in the loss."""
    if cfg.kl_placement != "reward" or cfg.beta == 0:
        return rewards
    k1 = kl_to_ref(logp, logp_ref, "k1") * mask
    return rewards - cfg.beta * k1.sum(1)


def grpo_loss(logp: Tensor, logp_old: Tensor, logp_ref: Tensor, adv: Tensor, mask: Tensor,
              cfg: GRPOConfig, max_len: int,
              weight: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The scalar loss of one minibatch and the per-token ratio.

    logp [B, T] (with gradient), logp_old and logp_ref [B, T] (frozen), adv [B] (one advantage
    per answer), mask [B, T], weight [B, T] (frozen) or None: the sampler correction's
    importance weight. Per token: -weight * min(rho A, clip(rho) A), + beta * k with the KL
    in the loss (not weighted, as TRL's); aggregated by cfg.loss_type over max_len positions.
    """
    eps_high = cfg.clip_eps_high if cfg.clip_eps_high is not None else cfg.clip_eps
    ratio = (logp - logp_old).exp()
    a = adv[:, None].expand_as(ratio)
    per_token = -clipped_objective(ratio, a, cfg.clip_eps, eps_high)
    if weight is not None:
        per_token = per_token * weight
    if cfg.beta > 0 and cfg.kl_placement == "loss":
        per_token = per_token + cfg.beta * kl_to_ref(logp, logp_ref, cfg.kl_estimator)
    return aggregate(per_token, mask, cfg.loss_type, max_len), ratio


def reward_fn(cfg: GRPOConfig, task: SortTask) -> Callable[[Tensor, Tensor], Tensor]:
    if cfg.reward == "rm":
        from trustrl.rlhf.reward_model import RewardScorer

        return RewardScorer.load(cfg.reward_model)
    key = {"gold": "score", "exact": "exact", "sorted": "sorted"}[cfg.reward]
    return lambda prompts, responses: gold_scores(task, prompts, responses)[key]


# --- the trainer ---------------------------------------------------------------------------------
@dataclass
class GroupBatch:
    prompts: Tensor
    responses: Tensor
    mask: Tensor
    logp_old: Tensor
    logp_ref: Tensor
    advantages: Tensor
    old_all: Tensor | None = None
    """pi_old's log-probs over the vocabulary [B, T, V] (for the exact KL), or None."""
    logp_mu: Tensor | None = None
    """[B, T] the sampler's log-probs of the tokens, when it records them."""
    weight: Tensor | None = None
    """[B, T] the sampler correction's weights (pi_old / mu, truncated or masked), when on."""


class GRPOTrainer:
    """GRPO (and RLOO) on any policy the adapter `lm` runs: the sort task's TinyLM and the
    bandit tests (the default adapter, tokens [B, L] -> logits [B, L, V]) and a Hugging Face
    causal LM (`trustrl.rlhf.hf.HFIO`) all run through this class. `reward` scores
    (prompts, responses) -> [B]; only the policy's trainable parameters are optimised.
    `sampler`: one that records its log-probs, used instead of `lm.sample` (the mismatch is
    then logged, and corrected with cfg.sampler_correction)."""

    def __init__(self, cfg: GRPOConfig, policy: nn.Module, ref: nn.Module, reward: RewardFn,
                 prompt_fn: PromptFn, max_new: int, gold_fn: GoldFn | None = None,
                 generator: torch.Generator | None = None, lm: LMAdapter = TINY_IO,
                 score_chunk: int | None = None, sampler: Sampler | None = None):
        cfg.validate()
        check_sampler_option(cfg.sampler_correction, cfg.sampler_cap, sampler,
                             cfg.sampler_cap_min)
        self.sampler = sampler
        self.last_batch: GroupBatch | None = None  # the last step's (completions log)
        self.cfg, self.policy, self.ref, self.reward = cfg, policy, ref, reward
        self.score_chunk = score_chunk  # answers per forward pass when scoring a batch
        self.prompt_fn, self.max_new, self.gold_fn, self.lm = prompt_fn, max_new, gold_fn, lm
        self.gen = generator or torch.Generator().manual_seed(cfg.seed + 1)
        for p in ref.parameters():
            p.requires_grad_(False)
        self.params = trainable(policy)
        self.opt = adam(self.params, cfg.lr)
        self.iteration = 0

    @torch.no_grad()
    def sample(self) -> tuple[Any, Tensor, Tensor | None]:
        """G answers [B, T] to each of prompts_per_iter prompts (B = prompts x G), and the
        sampler's log-probs of their tokens [B, T] when it records them (else None)."""
        cfg = self.cfg
        self.policy.eval()
        prompts = self.prompt_fn(cfg.prompts_per_iter, self.gen)
        prompts = prompts[torch.arange(len(prompts)).repeat_interleave(cfg.group_size)]
        responses, logp_mu = draw(self.lm, self.sampler, self.policy, prompts, self.max_new,
                                  cfg.temperature, self.gen)
        self.policy.train()
        return prompts, responses, logp_mu

    @torch.no_grad()
    def collect(self) -> tuple[GroupBatch, dict[str, float]]:
        """Sample G answers per prompt, score them with pi_old and pi_ref; advantages; the
        batch's statistics."""
        prompts, responses, logp_mu = self.sample()
        self.policy.eval()
        scored = score_answers(self.lm, self.policy, self.ref, prompts, responses,
                               self.cfg.temperature, self.score_chunk)
        self.policy.train()
        return self.group_batch(prompts, responses, scored, logp_mu)

    @torch.no_grad()
    def group_batch(self, prompts: Any, responses: Tensor, scored: Scored,
                    logp_mu: Tensor | None = None) -> tuple[GroupBatch, dict[str, float]]:
        """The rewards, advantages and statistics of scored answers (and, with the sampler's
        log-probs logp_mu, its mismatch with pi_old and the correction's weights)."""
        cfg = self.cfg
        mask = self.lm.response_mask(responses).float()
        logp_old, entropy, logp_ref = scored.logp, scored.entropy, scored.logp_ref
        rewards = self.reward(prompts, responses).float().to(mask.device)
        grouped = sequence_rewards(rewards, logp_old, logp_ref, mask, cfg).view(
            cfg.prompts_per_iter, cfg.group_size)
        adv = group_advantages(grouped, cfg.scale_rewards, cfg.std_eps,
                               leave_one_out=cfg.advantage == "rloo").flatten()
        task_grouped = rewards.view(cfg.prompts_per_iter, cfg.group_size)
        tokens = mask.sum().clamp(min=1)
        stats = {
            "reward": float(rewards.mean()),
            "reward_std": float(task_grouped.std(dim=1).mean()),
            "frac_reward_zero_std": float((task_grouped.std(dim=1) == 0).float().mean()),
            "entropy": float((entropy * mask).sum() / tokens),
            # token-weighted over the whole batch: the k3 estimate of KL(pi || pi_ref) per token
            "kl": float((kl_to_ref(logp_old, logp_ref, "k3") * mask).sum() / tokens),
            "kl_seq_exact": float((scored.kl_exact * mask).sum(1).mean()),
            "response_length": float(mask.sum(1).mean()),
            **sampling_stats(scored.kl_exact, logp_old, logp_ref, mask,
                             self.lm.is_eos(responses).any(1)),
            **getattr(self.reward, "last_stats", {}),
        }
        if self.gold_fn is not None:
            stats.update({f"gold/{k}": float(v.float().mean())
                          for k, v in self.gold_fn(prompts, responses).items()})
        weight, mismatch = sampler_correction(logp_old, logp_mu, mask, cfg.sampler_correction,
                                              cfg.sampler_cap, cfg.sampler_cap_min)
        stats.update(mismatch)
        return GroupBatch(prompts, responses, mask, logp_old, logp_ref, adv,
                          scored.old_all, logp_mu, weight), stats

    def one_pass(self) -> bool:
        """One optimiser step per batch, on the whole batch (epochs 1, one minibatch, no
        gradient accumulation) and no dropout: pi_old is then the policy being differentiated,
        so its log-probs are the update's own, detached (the ratio is exactly 1, as TRL's with
        num_iterations 1), and collection needs no scoring pass of the policy."""
        cfg = self.cfg
        n = cfg.prompts_per_iter * cfg.group_size
        return (cfg.epochs == 1 and cfg.minibatch_size >= n and cfg.grad_accum == 1
                and not any(isinstance(m, nn.Dropout) and m.p > 0
                            for m in self.policy.modules()))

    def collect_and_update(self) -> tuple[GroupBatch, dict[str, float]]:
        """`collect` then `update` in one forward pass of the policy (see `one_pass`): its
        logits score the answers (as pi_old) and, with their graph, give the loss. The same
        numbers as the two steps apart, to float rounding (batch composition of the passes)."""
        cfg = self.cfg
        prompts, responses, logp_mu = self.sample()
        logits = self.lm.answer_logits(self.policy, prompts, responses, cfg.temperature)
        with torch.no_grad():
            ref_logits = self.lm.answer_logits(self.ref, prompts, responses, cfg.temperature)
            n, t, v = logits.shape
            scored = score_logits(logits.detach(), ref_logits, responses,
                                  n * t * v <= EXACT_KL_OLD_MAX)
        batch, stats = self.group_batch(prompts, responses, scored, logp_mu)
        stats.update(self.update(batch, logits))
        return batch, stats

    def update(self, batch: GroupBatch, logits: Tensor | None = None) -> dict[str, float]:
        """K epochs of minibatch steps on a batch. logits [B, T, V]: the policy's on the whole
        batch, with their graph (`collect_and_update`; only with `one_pass`)."""
        cfg = self.cfg
        eps_high = cfg.clip_eps_high if cfg.clip_eps_high is not None else cfg.clip_eps
        n = len(batch.prompts)
        per = "token" if cfg.loss_type == "token-mean" else "answer"
        lows, highs, regions, losses = [], [], [], []
        diag = UpdateDiagnostics()
        for _ in range(cfg.epochs):
            for idx in minibatches(n, cfg.minibatch_size, self.gen):
                self.opt.zero_grad(set_to_none=True)
                total = 0.0
                for mb in micro_batches(idx, cfg.grad_accum):
                    m = batch.mask[mb]
                    lg = (logits[mb] if logits is not None else self.lm.answer_logits(
                        self.policy, batch.prompts[mb], batch.responses[mb], cfg.temperature))
                    logp, _ = token_logprobs(lg, batch.responses[mb])
                    loss, ratio = grpo_loss(logp, batch.logp_old[mb], batch.logp_ref[mb],
                                            batch.advantages[mb], m, cfg, self.max_new,
                                            None if batch.weight is None else batch.weight[mb])
                    w = micro_weight(m, batch.mask[idx], per)
                    (loss if w == 1.0 else loss * w).backward()
                    total += w * float(loss.detach())
                    with torch.no_grad():
                        a = batch.advantages[mb][:, None]
                        low = (ratio < 1 - cfg.clip_eps) & (a < 0)
                        high = (ratio > 1 + eps_high) & (a > 0)
                        tokens = m.sum().clamp(min=1)
                        lows.append(float((low * m).sum() / tokens))
                        highs.append(float((high * m).sum() / tokens))
                        regions.append(float(((low | high) * m).sum() / tokens))
                        valid = m.bool()
                        diag.add((logp - batch.logp_old[mb])[valid], lg,
                                 None if batch.old_all is None else batch.old_all[mb], m)
                nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
                self.opt.step()
                losses.append(total)
        return {"clip_ratio/low_mean": _avg(lows), "clip_ratio/high_mean": _avg(highs),
                "clip_ratio/region_mean": _avg(regions), "loss": _avg(losses), **diag.result(),
                **opt_stats(self.opt, cfg.epochs, len(losses))}

    def step(self) -> dict[str, float]:
        if self.one_pass():
            batch, row = self.collect_and_update()
        else:
            batch, row = self.collect()
            row.update(self.update(batch))
        self.iteration += 1
        self.last_batch = batch
        n = len(batch.prompts)
        return {"iteration": self.iteration, "global_step": self.iteration * n, **row}


def _avg(x: list[float]) -> float:
    return sum(x) / len(x) if x else float("nan")


def train_grpo(cfg: GRPOConfig, echo: Callable[[str], None] = print,
               log_every: int = 10) -> Path:
    """GRPO on the sort task from an SFT run; returns the run folder."""

    cfg.validate()
    torch.set_num_threads(1)
    if not cfg.sft:
        raise ConfigError("grpo needs --sft RUN")
    policy, _ = load_model(str(Path(cfg.sft) / "model.pt"))
    ref, _ = load_model(str(Path(cfg.sft) / "model.pt"))
    ref.eval()
    task = sort_task_of(cfg.sft)
    gen = seed_everything(cfg.seed)
    trainer = GRPOTrainer(cfg, policy, ref, reward_fn(cfg, task), task.sample_prompts,
                          task.max_new, gold_fn_for(task), gen)
    run = make_run(cfg.runs_dir, "grpo", cfg.seed, cfg, GRPO_COLUMNS)
    return run_rl_loop("grpo", trainer, run, cfg.iterations, echo, log_every,
                       lambda: finish_sort(run.path, cfg, policy, ref, task),
                       lambda r: f"reward {r['reward']:.3f} kl {r['kl_seq_exact']:.2f} "
                       f"gold/exact {r['gold/exact']:.3f} gold/perm {r['gold/perm']:.3f} "
                       f"gold/sorted {r['gold/sorted']:.3f}")
