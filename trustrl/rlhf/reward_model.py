"""A reward model trained with the Bradley-Terry loss on noisy preferences between SFT samples.

Pairs are two SFT answers to the same prompt; the one with the higher gold score is preferred,
with the label flipped with probability `label_noise` (ties are dropped). The reward model only
ever sees SFT-like answers (nearly all permutations), so, like a real one, it is trustworthy
near that data and not far from it: that is what PPO without a KL leash exploits.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from trustrl.rlhf.common import (
    check_fraction,
    check_positive,
    make_run,
    seed_everything,
    status_on_exit,
)
from trustrl.rlhf.model import TinyLM, load_model, sample, save_model, sequence_scores
from trustrl.rlhf.task import SortTask, gold_scores, last_index, response_mask
from trustrl.util.errors import ConfigError

RM_COLUMNS = ["epoch", "iteration", "global_step", "wall_time", "loss", "train_accuracy",
              "heldout_accuracy"]
"""One row per Adam step (iteration; global_step: pairs seen), its batch's loss; the pair
accuracies on the epoch's last step, empty on the others."""


@dataclass
class RewardModelConfig:
    seed: int = 1
    """Seeds the pairs, the label noise and the head."""
    sft: str = ""
    """SFT run folder (its model.pt is sampled for pairs and initialises the trunk)."""
    pairs: int = 4000
    """Prompts sampled for training pairs (ties are dropped, so fewer pairs remain)."""
    heldout_pairs: int = 1000
    """Prompts for the held-out accuracy (clean labels)."""
    label_noise: float = 0.1
    """Probability that a training preference is flipped."""
    epochs: int = 3
    """Passes over the training pairs (one metrics row per Adam step)."""
    batch_size: int = 64
    """Pairs per Adam step."""
    lr: float = 5e-4
    """Adam learning rate."""
    runs_dir: str = "runs"
    """Where the run folder goes."""

    def validate(self) -> None:
        for name in ("pairs", "heldout_pairs", "epochs", "batch_size"):
            check_positive(name, getattr(self, name))
        check_positive("lr", self.lr)
        check_fraction("label_noise", self.label_noise)


@torch.no_grad()
def make_pairs(policy: TinyLM, task: SortTask, n_prompts: int, noise: float,
               gen: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    """(prompts [M, P], chosen [M, T], rejected [M, T]) from two samples per prompt; ties in
    gold are dropped, and each label is flipped with probability `noise`."""
    prompts = task.sample_prompts(n_prompts, gen)
    a = sample(policy, prompts, task.max_new, 1.0, gen)
    b = sample(policy, prompts, task.max_new, 1.0, gen)
    ga, gb = gold_scores(task, prompts, a)["score"], gold_scores(task, prompts, b)["score"]
    keep = ga != gb
    a_wins = (ga > gb) ^ (torch.rand(n_prompts, generator=gen) < noise)
    chosen = torch.where(a_wins[:, None], a, b)
    rejected = torch.where(a_wins[:, None], b, a)
    return prompts[keep], chosen[keep], rejected[keep]


def raw_scores(rm: TinyLM, prompts: Tensor, responses: Tensor) -> Tensor:
    """[B] the RM's unstandardised score of each answer (read at its last valid token)."""
    return sequence_scores(rm, prompts, responses, last_index(response_mask(responses)))


def bradley_terry_loss(s_chosen: Tensor, s_rejected: Tensor) -> Tensor:
    """-mean log sigmoid(s_chosen - s_rejected): the preference likelihood's negative log."""
    return -F.logsigmoid(s_chosen - s_rejected).mean()


class RewardScorer:
    """The trained RM with its standardisation: score = (raw - mean) / std on SFT samples, so
    that beta is in units of the SFT score spread per nat."""

    def __init__(self, rm: TinyLM, mean: float, std: float):
        self.rm, self.mean, self.std = rm.eval(), float(mean), float(std)
        for p in self.rm.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def __call__(self, prompts: Tensor, responses: Tensor) -> Tensor:
        return (raw_scores(self.rm, prompts, responses) - self.mean) / self.std

    @classmethod
    def load(cls, run: str | Path) -> RewardScorer:
        rm, blob = load_model(str(Path(run) / "reward_model.pt"))
        return cls(rm, blob["score_mean"], blob["score_std"])


@torch.no_grad()
def pair_accuracy(rm: TinyLM, prompts: Tensor, chosen: Tensor, rejected: Tensor) -> float:
    return float((raw_scores(rm, prompts, chosen) > raw_scores(rm, prompts, rejected))
                 .float().mean())


def train_reward_model(cfg: RewardModelConfig, echo=print) -> Path:
    """Train, report held-out accuracy, standardise on SFT samples; returns the run folder."""
    cfg.validate()
    torch.set_num_threads(1)
    sft, blob = load_model(str(Path(cfg.sft) / "model.pt"))
    task = SortTask(int(blob.get("task_n", 5)))
    gen = seed_everything(cfg.seed)
    sft.eval()
    prompts, chosen, rejected = make_pairs(sft, task, cfg.pairs, cfg.label_noise, gen)
    h_prompts, h_chosen, h_rejected = make_pairs(sft, task, cfg.heldout_pairs, 0.0, gen)
    for what, got, asked in (("training", len(prompts), "pairs"),
                             ("held-out", len(h_prompts), "heldout_pairs")):
        if got == 0:
            raise ConfigError(f"no usable {what} preference pairs: both answers of every one of "
                              f"the {getattr(cfg, asked)} sampled prompts got the same gold "
                              f"score (ties are dropped); sample more prompts ({asked}) or use "
                              f"an SFT model whose answers vary")
    rm = sft.with_head(1)
    opt = torch.optim.Adam(rm.parameters(), lr=cfg.lr)
    t0, m, heldout, done = time.perf_counter(), len(prompts), 0.0, 0
    run = make_run(cfg.runs_dir, "reward-model", cfg.seed, cfg, RM_COLUMNS)
    with status_on_exit(run, lambda: done):  # Ctrl-C, SIGTERM, an error: said, in status.json
        echo(f"reward model: {len(prompts)} training pairs, {len(h_prompts)} held-out, "
             f"run folder {run.path}")
        for epoch in range(1, cfg.epochs + 1):
            perm = torch.randperm(m, generator=gen)
            losses = []
            for i in range(0, m, cfg.batch_size):
                idx = perm[i: i + cfg.batch_size]
                loss = bradley_terry_loss(raw_scores(rm, prompts[idx], chosen[idx]),
                                          raw_scores(rm, prompts[idx], rejected[idx]))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                losses.append(float(loss.detach()))
                row = {"epoch": epoch, "iteration": done + 1,
                       "global_step": (epoch - 1) * m + i + len(idx),
                       "wall_time": time.perf_counter() - t0, "loss": losses[-1]}
                if i + cfg.batch_size >= m:  # the epoch's last step: the accuracies
                    rm.eval()
                    heldout = pair_accuracy(rm, h_prompts, h_chosen, h_rejected)
                    row.update(train_accuracy=pair_accuracy(rm, prompts, chosen, rejected),
                               heldout_accuracy=heldout)
                    rm.train()
                run.log_metrics(row)
                done += 1
            echo(f"reward model epoch {epoch}: mean loss {sum(losses) / len(losses):.3f} "
                 f"train acc {row['train_accuracy']:.3f} held-out acc {heldout:.3f}")
        rm.eval()
        with torch.no_grad():
            p = task.sample_prompts(2048, gen)
            s = raw_scores(rm, p, sample(sft, p, task.max_new, 1.0, gen))
        save_model(rm, str(run.path / "reward_model.pt"),
                   {"task_n": task.n, "score_mean": float(s.mean()), "score_std": float(s.std()),
                    "heldout_accuracy": heldout})
    run.set_status("finished", done)
    return run.path
