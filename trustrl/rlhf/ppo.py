"""PPO for a language model: the clip around pi_old and the KL leash to pi_ref, both.

One iteration, in the order of the RLHF recipe (Ziegler et al. 2019; Ouyang et al. 2022):

1. sample answers from pi_old at pure temperature; freeze logp_old, logp_ref, V_old
2. per-token reward r_t = -beta * k1(t), k1 = log pi - log pi_ref at token t, plus the
   reward model's score added to the last answer token (the EOS). Only k1 is accepted here: a
   penalty in the reward enters without its gradient, and E_pi[grad log pi * k] is the gradient
   of KL(pi || pi_ref) for k1 only (see `trustrl.rlhf.kl`); with gamma = 1 the returns carry
   later tokens' penalties back, so it is the full gradient of the sequence KL
3. GAE over answer tokens (gamma 1, lambda 0.95) with the core's `gae`; returns = A + V_old;
   advantages whitened over the batch's valid tokens
4. K epochs of minibatches: clipped surrogate (the trust region around pi_old) + clipped value
   loss; one Adam over policy and critic, global grad-norm clip
5. with a target KL: the adaptive controller moves beta

The two KLs do different jobs: the clip resets every iteration, so on its own it cannot stop a
policy drifting arbitrarily far from pi_ref in many small steps; the leash can.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from trustrl.maths.advantages import gae
from trustrl.maths.diagnostics import approx_kl, clip_fraction, explained_variance
from trustrl.maths.losses import clipped_surrogate_objective, surrogate_objective, value_loss
from trustrl.rlhf.common import (
    SORT_AGAIN,
    check_positive,
    make_run,
    seed_everything,
    status_on_exit,
)
from trustrl.rlhf.kl import AdaptiveKLController, check_kl_option, exact_kl, kl_to_ref
from trustrl.rlhf.model import (
    TINY_IO,
    TinyLM,
    answer_logits,
    load_model,
    sample,
    save_model,
    token_logprobs,
)
from trustrl.rlhf.steps import (
    DIAG_COLUMNS,
    LMAdapter,
    Sampler,
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
    trainable,
)
from trustrl.rlhf.task import SortTask, gold_scores, last_index, response_mask
from trustrl.util.errors import ConfigError

ScoreFn = Callable[[Tensor, Tensor], Tensor]
"""(prompts [B, P], responses [B, T]) -> [B] scalar score of each answer."""
PromptFn = Callable[[int, torch.Generator], Tensor]
"""(batch, generator) -> prompts [B, P]."""
GoldFn = Callable[[Tensor, Tensor], dict[str, Tensor]]
"""(prompts, responses) -> named per-sample gold quantities, each [B]."""

GOLD_KEYS = ("gold/score", "gold/exact", "gold/perm", "gold/sorted")
PPO_COLUMNS = [
    "iteration", "global_step", "wall_time", "beta", "objective/kl", "objective/kl_exact",
    "objective/scores", "objective/rlhf_reward", "objective/entropy", "policy/approxkl_avg",
    "policy/clipfrac_avg", "val/clipfrac_avg", "val/explained_variance", "loss/policy_avg",
    "loss/value_avg", "response_length", *GOLD_KEYS, *DIAG_COLUMNS,
]


@dataclass
class PPOConfig:
    seed: int = 1
    """Seeds sampling, minibatch order and the prompts."""
    sft: str = ""
    """SFT run folder: the initial policy and the frozen reference pi_ref."""
    reward_model: str = ""
    """Reward-model run folder: the score at the last token, and the critic's initial weights."""
    iterations: int = 100
    """PPO iterations (sample a batch, then K epochs on it)."""
    batch_size: int = 128
    """Prompts (one answer each) per iteration."""
    minibatch_size: int = 32
    """Answers per gradient step."""
    grad_accum: int = 1
    """Micro-batches per minibatch (gradient accumulation): same gradient, less memory."""
    epochs: int = 4
    """K: passes over each batch."""
    lr: float = 1e-4
    """Adam learning rate for policy and critic."""
    beta: float = 0.05
    """KL-leash coefficient (initial value when target_kl is set); 0 = no leash."""
    target_kl: float | None = None
    """Target sequence KL to pi_ref for the adaptive controller (None = fixed beta)."""
    horizon: float = 10000.0
    """Controller horizon in samples: beta moves by at most 1 + 0.2 * batch / horizon."""
    kl_estimator: str = "k1"
    """Per-token estimator in the reward: k1 (log pi - log pi_ref) only; k2 and k3 are refused
    (in the reward their gradient is that of no KL)."""
    clip_eps: float | None = 0.2
    """PPO clip range around pi_old; None = no clip (plain surrogate)."""
    clip_value: float | None = 0.2
    """Value clip range around V_old; None = unclipped value loss."""
    vf_coef: float = 0.5
    """Weight of the value loss (the critic is a separate network, so this scales its step)."""
    gamma: float = 1.0
    """Discount over answer tokens."""
    lam: float = 0.95
    """GAE lambda over answer tokens."""
    temperature: float = 1.0
    """Sampling temperature (pure: no top-k / top-p); log-probs use the same temperature."""
    max_grad_norm: float = 1.0
    """Global gradient-norm clip."""
    whiten_advantages: bool = True
    """Whiten advantages over the batch's valid tokens."""
    sampler_correction: str = "none"
    """none or a TRL mode (token_truncate, token_mask, sequence_truncate, sequence_mask; tis =
    token_truncate): weight each token's policy loss by pi_old / mu, as GRPO's (needs a Hugging
    Face model's generate_dtype)."""
    sampler_cap: float | None = 3.0
    """C_max of the sampler correction's weights; None = no upper bound (TRL's None)."""
    sampler_cap_min: float = 0.0
    """C_min of the sampler correction's weights (0 = none)."""
    eval_prompts: int = 1024
    """Held-out prompts for the final gold evaluation."""
    runs_dir: str = "runs"
    """Where the run folder goes."""

    def validate(self) -> None:
        if not (math.isfinite(self.beta) and self.beta >= 0):
            raise ConfigError(f"beta must be a finite number >= 0, got {self.beta}")
        check_kl_option("reward", self.kl_estimator)
        for name in ("iterations", "batch_size", "minibatch_size", "epochs", "eval_prompts",
                     "grad_accum"):
            check_positive(name, getattr(self, name))
        for name in ("lr", "temperature", "max_grad_norm", "horizon"):
            check_positive(name, getattr(self, name))
        check_positive("vf_coef", self.vf_coef, allow_zero=True)
        if self.minibatch_size > self.batch_size:
            raise ConfigError(f"minibatch_size {self.minibatch_size} exceeds batch_size "
                              f"{self.batch_size}")
        if self.target_kl is not None:
            check_positive("target_kl", self.target_kl)
            if self.beta == 0:
                raise ConfigError("target_kl needs an initial beta > 0: the adaptive controller "
                                  "is multiplicative, so from beta = 0 it can never move")
        for name in ("clip_eps", "clip_value"):
            v = getattr(self, name)
            if v is not None:
                check_positive(name, v)
        if not (0 <= self.gamma <= 1 and 0 <= self.lam <= 1):
            raise ConfigError("gamma and lam must be in [0, 1]")
        check_sampler_option(self.sampler_correction, self.sampler_cap,
                             cap_min=self.sampler_cap_min)


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


def whiten(x: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    """(x - mean) / std over the valid entries (population std); invalid ones come out 0."""
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    return (x - mean) * torch.rsqrt(var + eps) * mask


def token_rewards(scores: Tensor, kl: Tensor, mask: Tensor, beta: float) -> Tensor:
    """[B, T] r_t = -beta * kl_t on valid tokens, plus the score on each answer's last token."""
    rewards = -beta * kl * mask
    last = last_index(mask)
    return rewards.scatter_add(1, last[:, None], scores[:, None].to(rewards.dtype))


def token_gae(rewards: Tensor, values: Tensor, mask: Tensor, gamma: float,
              lam: float) -> tuple[Tensor, Tensor]:
    """GAE over answer tokens with the core's [T, N] `gae`: each answer is one episode that
    terminates at its last valid token (bootstrap 0 there). [B, T] in, ([B, T], [B, T]) out;
    entries after the last token are set to 0 and must stay masked in every loss."""
    b, t = rewards.shape
    values = values * mask
    next_values = torch.cat([values[:, 1:], values.new_zeros(b, 1)], dim=1)
    terminated = torch.zeros(b, t, dtype=torch.bool, device=values.device)
    terminated.scatter_(1, last_index(mask)[:, None], True)
    adv, ret = gae((rewards * mask).T, values.T, next_values.T, terminated.T,
                   torch.zeros_like(terminated.T), gamma, lam)
    return adv.T * mask, ret.T * mask


@dataclass
class Batch:
    prompts: Tensor
    responses: Tensor
    mask: Tensor
    logp_old: Tensor
    values_old: Tensor
    advantages: Tensor
    returns: Tensor
    old_all: Tensor | None = None
    """pi_old's log-probs over the vocabulary [B, T, V] (for the exact KL), or None."""
    weight: Tensor | None = None
    """[B, T] the sampler correction's weights (pi_old / mu, truncated or masked), when on."""


class PPOTrainer:
    """PPO with a KL-to-reference reward on any policy the adapter `lm` runs.

    `policy` is trained, `ref` frozen; `critic` gives a value per position ([B, L, 1]). The sort
    task and the bandit test (the default adapter) and a Hugging Face causal LM
    (`trustrl.rlhf.hf.HFIO`, with a value head on the policy or a separate value model) all run
    through this same class. One Adam over the trainable parameters of both, each once.
    `sampler`: one that records its log-probs, used instead of `lm.sample` (the mismatch is
    then logged, and corrected with cfg.sampler_correction).
    """

    def __init__(self, cfg: PPOConfig, policy: nn.Module, ref: nn.Module, critic: nn.Module,
                 score_fn: ScoreFn, prompt_fn: PromptFn, max_new: int,
                 gold_fn: GoldFn | None = None, generator: torch.Generator | None = None,
                 lm: LMAdapter = TINY_IO, score_chunk: int | None = None,
                 sampler: Sampler | None = None):
        cfg.validate()
        check_sampler_option(cfg.sampler_correction, cfg.sampler_cap, sampler,
                             cfg.sampler_cap_min)
        self.sampler = sampler
        self.last_batch: Batch | None = None  # the last step's (completions log)
        self.cfg, self.policy, self.ref, self.critic = cfg, policy, ref, critic
        self.score_chunk = score_chunk  # answers per forward pass when scoring a batch
        self.score_fn, self.prompt_fn, self.gold_fn = score_fn, prompt_fn, gold_fn
        self.max_new, self.lm = max_new, lm
        self.gen = generator or torch.Generator().manual_seed(cfg.seed + 1)
        for p in ref.parameters():
            p.requires_grad_(False)
        self.params = trainable(policy, critic)
        self.opt = adam(self.params, cfg.lr)
        self.kl_ctl = (AdaptiveKLController(cfg.beta, cfg.target_kl, cfg.horizon)
                       if cfg.target_kl is not None else None)
        self.beta = cfg.beta
        self.iteration = 0

    # --- steps 1-3 ---------------------------------------------------------------------------
    @torch.no_grad()
    def collect(self) -> tuple[Batch, dict[str, float]]:
        cfg = self.cfg
        self.policy.eval()
        prompts = self.prompt_fn(cfg.batch_size, self.gen)
        responses, logp_mu = draw(self.lm, self.sampler, self.policy, prompts, self.max_new,
                                  cfg.temperature, self.gen)
        mask = self.lm.response_mask(responses).float()
        scored = score_answers(self.lm, self.policy, self.ref, prompts, responses,
                               cfg.temperature, self.score_chunk)
        logp, entropy, logp_ref = scored.logp, scored.entropy, scored.logp_ref
        values = self.lm.answer_values(self.critic, prompts, responses).float() * mask
        scores = self.score_fn(prompts, responses).float().to(mask.device)
        kl = kl_to_ref(logp, logp_ref, cfg.kl_estimator) * mask
        rewards = token_rewards(scores, kl, mask, self.beta)
        adv, returns = token_gae(rewards, values, mask, cfg.gamma, cfg.lam)
        stats = {
            "objective/kl": float(kl.sum(1).mean()),
            "objective/kl_exact": float((scored.kl_exact * mask).sum(1).mean()),
            "objective/scores": float(scores.mean()),
            "objective/rlhf_reward": float(rewards.sum(1).mean()),
            "objective/entropy": float((entropy * mask).sum(1).mean()),
            "val/explained_variance": explained_variance(values[mask.bool()],
                                                         returns[mask.bool()]),
            "response_length": float(mask.sum(1).mean()),
            **sampling_stats(scored.kl_exact, logp, logp_ref, mask,
                             self.lm.is_eos(responses).any(1)),
            **getattr(self.score_fn, "last_stats", {}),
        }
        if self.gold_fn is not None:
            stats.update({f"gold/{k}": float(v.float().mean())
                          for k, v in self.gold_fn(prompts, responses).items()})
        weight, mismatch = sampler_correction(logp, logp_mu, mask, cfg.sampler_correction,
                                              cfg.sampler_cap, cfg.sampler_cap_min)
        stats.update(mismatch)
        if cfg.whiten_advantages:
            adv = whiten(adv, mask)
        self.policy.train()
        return Batch(prompts, responses, mask, logp, values, adv, returns,
                     scored.old_all, weight), stats

    # --- step 4 ------------------------------------------------------------------------------
    def update(self, batch: Batch) -> dict[str, float]:
        cfg = self.cfg
        n = len(batch.prompts)
        eps_diag = cfg.clip_eps if cfg.clip_eps is not None else 0.2
        kls, clipfracs, vclipfracs, pls, vls = [], [], [], [], []
        diag = UpdateDiagnostics()
        steps = 0
        for _ in range(cfg.epochs):
            for idx in minibatches(n, cfg.minibatch_size, self.gen):
                self.opt.zero_grad(set_to_none=True)
                for mb in micro_batches(idx, cfg.grad_accum):
                    m = batch.mask[mb].bool()
                    logits = self.lm.answer_logits(self.policy, batch.prompts[mb],
                                                   batch.responses[mb], cfg.temperature)
                    logp, _ = token_logprobs(logits, batch.responses[mb])
                    log_ratio = (logp - batch.logp_old[mb])[m]
                    ratio = log_ratio.exp()
                    adv = batch.advantages[mb][m]
                    if cfg.clip_eps is None:
                        surrogate = surrogate_objective(ratio, adv)
                    else:
                        surrogate = clipped_surrogate_objective(ratio, adv, cfg.clip_eps)
                    if batch.weight is not None:  # the sampler correction, per token
                        surrogate = surrogate * batch.weight[mb][m]
                    pg_loss = -surrogate.mean()
                    v_new = self.lm.answer_values(self.critic, batch.prompts[mb],
                                                  batch.responses[mb]).float()[m]
                    v_old, ret = batch.values_old[mb][m], batch.returns[mb][m]
                    v_loss = value_loss(v_new, ret, v_old, cfg.clip_value)
                    loss = pg_loss + cfg.vf_coef * v_loss
                    w = micro_weight(batch.mask[mb], batch.mask[idx], "token")
                    (loss if w == 1.0 else loss * w).backward()
                    kls.append(approx_kl(log_ratio.detach(), "k3"))
                    clipfracs.append(clip_fraction(ratio.detach(), eps_diag))
                    diag.add(log_ratio, logits,
                             None if batch.old_all is None else batch.old_all[mb],
                             batch.mask[mb])
                    if cfg.clip_value is not None:
                        v_clip = v_old + torch.clamp(v_new.detach() - v_old, -cfg.clip_value,
                                                     cfg.clip_value)
                        vclipfracs.append(float(((v_clip - ret) ** 2
                                                 > (v_new.detach() - ret) ** 2).float().mean()))
                    pls.append(float(pg_loss.detach()))
                    vls.append(float(v_loss.detach()))
                nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
                self.opt.step()
                steps += 1

        def avg(x: list[float]) -> float:
            return sum(x) / len(x) if x else float("nan")

        return {"policy/approxkl_avg": avg(kls), "policy/clipfrac_avg": avg(clipfracs),
                "val/clipfrac_avg": avg(vclipfracs), "loss/policy_avg": avg(pls),
                "loss/value_avg": avg(vls), **diag.result(),
                **opt_stats(self.opt, cfg.epochs, steps)}

    def step(self) -> dict[str, float]:
        """One PPO iteration; returns its metrics (beta is the one used for this batch)."""
        batch, stats = self.collect()
        self.last_batch = batch
        row = {"beta": self.beta, **stats, **self.update(batch)}
        if self.kl_ctl is not None:
            self.beta = self.kl_ctl.update(stats["objective/kl"], self.cfg.batch_size)
        self.iteration += 1
        return {"iteration": self.iteration,
                "global_step": self.iteration * self.cfg.batch_size, **row}


# --- the sort task -------------------------------------------------------------------------------
def sort_task_of(run: str | Path) -> SortTask:
    _, blob = load_model(str(Path(run) / "model.pt"))
    return SortTask(int(blob.get("task_n", 5)))


def gold_fn_for(task: SortTask) -> GoldFn:
    return lambda prompts, responses: gold_scores(task, prompts, responses)


@torch.no_grad()
def evaluate_policy(policy: nn.Module, task: SortTask, n_prompts: int, seed: int,
                    temperature: float = 1.0, ref: nn.Module | None = None) -> dict[str, float]:
    """Gold quantities (and the exact KL to ref) of temperature samples on held-out prompts."""
    gen = torch.Generator().manual_seed(seed)
    policy.eval()
    prompts = task.sample_prompts(n_prompts, gen)
    responses = sample(policy, prompts, task.max_new, temperature, gen)
    out = {f"gold/{k}": float(v.mean()) for k, v in gold_scores(task, prompts, responses).items()}
    if ref is not None:
        mask = response_mask(responses).float()
        kl = exact_kl(answer_logits(policy, prompts, responses, temperature),
                      answer_logits(ref, prompts, responses, temperature))
        out["kl_exact"] = float((kl * mask).sum(1).mean())
    return out


def train_ppo(cfg: PPOConfig, echo: Callable[[str], None] = print,
              log_every: int = 10) -> Path:
    """PPO on the sort task from an SFT run and a reward-model run; returns the run folder."""
    from trustrl.rlhf.reward_model import RewardScorer

    cfg.validate()
    torch.set_num_threads(1)
    if not cfg.sft or not cfg.reward_model:
        raise ConfigError("ppo needs --sft RUN and --reward-model RUN")
    policy, _ = load_model(str(Path(cfg.sft) / "model.pt"))
    ref, _ = load_model(str(Path(cfg.sft) / "model.pt"))
    task = sort_task_of(cfg.sft)
    scorer = RewardScorer.load(cfg.reward_model)
    critic = scorer.rm.with_head(1)
    critic.head.load_state_dict(scorer.rm.head.state_dict())
    for p in critic.parameters():
        p.requires_grad_(True)
    ref.eval()
    gen = seed_everything(cfg.seed)
    trainer = PPOTrainer(cfg, policy, ref, critic, scorer, task.sample_prompts, task.max_new,
                         gold_fn_for(task), gen)
    run = make_run(cfg.runs_dir, "ppo", cfg.seed, cfg, PPO_COLUMNS)
    return run_rl_loop("ppo", trainer, run, cfg.iterations, echo, log_every,
                       lambda: finish_sort(run.path, cfg, policy, ref, task),
                       lambda r: f"score {r['objective/scores']:+.2f} "
                       f"kl {r['objective/kl']:.2f} beta {r['beta']:.3f} "
                       f"gold/exact {r['gold/exact']:.3f} gold/perm {r['gold/perm']:.3f}")


def run_rl_loop(stage: str, trainer: Any, run: Any, iterations: int,
                echo: Callable[[str], None], log_every: int, finish: Callable[[], None],
                line: Callable[[dict[str, Any]], str], start: int = 0,
                checkpoint: Callable[[int], None] | None = None,
                again: str = SORT_AGAIN, elapsed: float = 0.0) -> Path:
    """The loop every RL run shares (PPO, GRPO and RLOO; the sort study and a Hugging Face
    model): trainer steps start + 1 .. iterations logged to the run folder (a line echoed every
    `log_every`), `checkpoint(it)` after each, then `finish()` (evaluation, saving) and the
    status. A run that raises is marked failed (stopped on Ctrl-C or SIGTERM) and keeps its
    files; `again` says how to go on (common.status_on_exit). `elapsed`: the wall time a resumed
    run had logged, where its wall_time column goes on from."""
    t0 = time.perf_counter()
    done = start
    with status_on_exit(run, lambda: done, again):
        echo(f"{stage}: run folder {run.path}")
        for it in range(start + 1, iterations + 1):
            row = trainer.step()
            row["wall_time"] = elapsed + time.perf_counter() - t0
            run.log_metrics(row)
            if it % log_every == 0 or it == iterations:
                echo(f"{stage} {it}: {line(row)}")
            if checkpoint is not None:
                checkpoint(it)
            done = it
        finish()
    run.set_status("finished", iterations)
    return run.path


def finish_sort(path: Path, cfg: Any, policy: TinyLM, ref: TinyLM, task: SortTask) -> None:
    """The sort study's end of a run: held-out gold evaluation and the policy file."""
    from trustrl.rlhf.sft import EVAL_SEED

    final = evaluate_policy(policy, task, cfg.eval_prompts, cfg.seed + EVAL_SEED, ref=ref)
    write_eval(path, final)
    save_model(policy, str(path / "policy.pt"), {"task_n": task.n})


def write_eval(path: Path, final: dict[str, float]) -> None:
    import json

    from trustrl.records.runs import atomic_write_text

    atomic_write_text(path / "eval.json", json.dumps(final, indent=2) + "\n")

