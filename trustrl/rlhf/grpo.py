"""GRPO: PPO's clipped objective with no critic; the baseline is the group of siblings.

For each prompt, G answers are sampled; answer i's advantage (for every one of its tokens) is

    A_i = (r_i - mean_j r_j) / (std_j r_j + eps)        (GRPO, Shao et al. 2024)
    A_i =  r_i - mean_j r_j                            (Dr. GRPO: no std scaling)

The per-token loss is -min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A) + beta * k3, with k3
the estimator of KL(pi || pi_ref) (>= 0 per token; beta = 0 by default, as in recent practice).
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

import torch
from torch import Tensor, nn

from trustrl.errors import ConfigError
from trustrl.rlhf.common import check_positive, make_run, seed_everything
from trustrl.rlhf.kl import exact_kl, kl_to_ref
from trustrl.rlhf.model import answer_logits, load_model, sample, token_logprobs
from trustrl.rlhf.ppo import GOLD_KEYS, run_rl_loop, sort_task_of
from trustrl.rlhf.task import SortTask, gold_scores, response_mask

LOSS_TYPES = ("seq-mean", "token-mean", "dr-grpo")
REWARDS = ("gold", "exact", "sorted", "rm")
GRPO_COLUMNS = [
    "iteration", "global_step", "wall_time", "reward", "reward_std", "frac_reward_zero_std",
    "kl", "kl_seq_exact", "entropy", "clip_ratio/low_mean", "clip_ratio/high_mean",
    "clip_ratio/region_mean", "loss", "response_length", *GOLD_KEYS,
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
    minibatch_size: int = 32
    """Answers per gradient step."""
    epochs: int = 2
    """K: passes over each batch (1 = on-policy: the ratio stays 1 and the clip never acts)."""
    lr: float = 1e-4
    """Adam learning rate."""
    beta: float = 0.0
    """Coefficient of the k3 KL to pi_ref in the loss; 0 = no leash."""
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
        if self.reward not in REWARDS:
            raise ConfigError(f"unknown reward {self.reward!r}; use one of {', '.join(REWARDS)}")
        if self.reward == "rm" and not self.reward_model:
            raise ConfigError("reward rm needs --reward-model RUN")
        for name in ("iterations", "prompts_per_iter", "minibatch_size", "epochs",
                     "eval_prompts", "lr", "temperature", "max_grad_norm", "clip_eps",
                     "std_eps"):
            check_positive(name, getattr(self, name))
        if self.clip_eps_high is not None:
            check_positive("clip_eps_high", self.clip_eps_high)


# --- pure pieces ---------------------------------------------------------------------------------
def group_advantages(rewards: Tensor, scale: bool = True, eps: float = 1e-4) -> Tensor:
    """[P, G] rewards -> [P, G] advantages: minus the group mean, over (sample std + eps).

    The std is the sample (n - 1) std, as torch.std: a group whose answers all got the same
    reward has advantage 0 for every answer and contributes no gradient.
    """
    centred = rewards - rewards.mean(dim=1, keepdim=True)
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


def reward_fn(cfg: GRPOConfig, task: SortTask) -> Callable[[Tensor, Tensor], Tensor]:
    if cfg.reward == "rm":
        from trustrl.rlhf.reward_model import RewardScorer

        return RewardScorer.load(cfg.reward_model)
    key = {"gold": "score", "exact": "exact", "sorted": "sorted"}[cfg.reward]
    return lambda prompts, responses: gold_scores(task, prompts, responses)[key]


# --- the trainer ---------------------------------------------------------------------------------
class GRPOTrainer:
    def __init__(self, cfg: GRPOConfig, policy: nn.Module, ref: nn.Module, task: SortTask,
                 reward: Callable[[Tensor, Tensor], Tensor], generator: torch.Generator):
        cfg.validate()
        self.cfg, self.policy, self.ref, self.task, self.reward = cfg, policy, ref, task, reward
        self.gen = generator
        for p in ref.parameters():
            p.requires_grad_(False)
        self.opt = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
        self.iteration = 0

    def step(self) -> dict[str, float]:
        cfg, task = self.cfg, self.task
        eps_high = cfg.clip_eps_high if cfg.clip_eps_high is not None else cfg.clip_eps
        with torch.no_grad():
            self.policy.eval()
            prompts = task.sample_prompts(cfg.prompts_per_iter, self.gen)
            prompts = prompts.repeat_interleave(cfg.group_size, dim=0)
            responses = sample(self.policy, prompts, task.max_new, cfg.temperature, self.gen)
            mask = response_mask(responses).float()
            logits = answer_logits(self.policy, prompts, responses, cfg.temperature)
            ref_logits = answer_logits(self.ref, prompts, responses, cfg.temperature)
            logp_old, entropy = token_logprobs(logits, responses)
            logp_ref, _ = token_logprobs(ref_logits, responses)
            rewards = self.reward(prompts, responses).float()
            grouped = rewards.view(cfg.prompts_per_iter, cfg.group_size)
            adv = group_advantages(grouped, cfg.scale_rewards, cfg.std_eps).flatten()
            gold = gold_scores(task, prompts, responses)
            row = {
                "reward": float(rewards.mean()),
                "reward_std": float(grouped.std(dim=1).mean()),
                "frac_reward_zero_std": float((grouped.std(dim=1) == 0).float().mean()),
                "entropy": float((entropy * mask).sum() / mask.sum()),
                "kl_seq_exact": float((exact_kl(logits, ref_logits) * mask).sum(1).mean()),
                "response_length": float(mask.sum(1).mean()),
                **{f"gold/{k}": float(v.mean()) for k, v in gold.items()},
            }
            self.policy.train()
        n = prompts.shape[0]
        lows, highs, regions, kls, losses = [], [], [], [], []
        for _ in range(cfg.epochs):
            perm = torch.randperm(n, generator=self.gen)
            for i in range(0, n, cfg.minibatch_size):
                idx = perm[i: i + cfg.minibatch_size]
                m = mask[idx]
                lg = answer_logits(self.policy, prompts[idx], responses[idx], cfg.temperature)
                logp, _ = token_logprobs(lg, responses[idx])
                ratio = (logp - logp_old[idx]).exp()
                a = adv[idx][:, None].expand_as(ratio)
                per_token = -clipped_objective(ratio, a, cfg.clip_eps, eps_high)
                k3 = kl_to_ref(logp, logp_ref[idx], "k3")
                if cfg.beta > 0:
                    per_token = per_token + cfg.beta * k3
                loss = aggregate(per_token, m, cfg.loss_type, task.max_new)
                self.opt.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.max_grad_norm)
                self.opt.step()
                with torch.no_grad():
                    low = (ratio < 1 - cfg.clip_eps) & (a < 0)
                    high = (ratio > 1 + eps_high) & (a > 0)
                    tokens = m.sum()
                    lows.append(float((low * m).sum() / tokens))
                    highs.append(float((high * m).sum() / tokens))
                    regions.append(float(((low | high) * m).sum() / tokens))
                    kls.append(float((k3 * m).sum() / tokens))
                    losses.append(float(loss.detach()))
        self.iteration += 1
        row.update({"kl": kls[0], "clip_ratio/low_mean": _avg(lows),
                    "clip_ratio/high_mean": _avg(highs), "clip_ratio/region_mean": _avg(regions),
                    "loss": _avg(losses)})
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
    trainer = GRPOTrainer(cfg, policy, ref, task, reward_fn(cfg, task), gen)
    run = make_run(cfg.runs_dir, "grpo", cfg.seed, cfg, GRPO_COLUMNS)
    return run_rl_loop("grpo", trainer, run, cfg, policy, ref, task, echo, log_every,
                       lambda r: f"reward {r['reward']:.3f} kl {r['kl_seq_exact']:.2f} "
                       f"gold/exact {r['gold/exact']:.3f} gold/perm {r['gold/perm']:.3f} "
                       f"gold/sorted {r['gold/sorted']:.3f}")
