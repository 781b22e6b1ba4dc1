"""Supervised fine-tuning on a sloppy teacher: the starting point and the KL reference.

The teacher is right about half the time (otherwise one or two transpositions), so the SFT
model imitates a policy whose exact-sorted rate is about 0.5: RL has room to improve, and the
reference it is leashed to is a decent but imperfect sorter.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from trustrl.rlhf.common import (
    check_fraction,
    check_positive,
    make_run,
    seed_everything,
    status_on_exit,
)
from trustrl.rlhf.model import (
    ModelConfig,
    TinyLM,
    answer_logits,
    n_params,
    sample,
    save_model,
)
from trustrl.rlhf.task import VOCAB, SortTask, gold_scores

SFT_COLUMNS = ["step", "iteration", "global_step", "wall_time", "loss", "gold/score",
               "gold/exact", "gold/perm", "gold/sorted"]


@dataclass
class SFTConfig:
    seed: int = 1
    """Seeds the model, the prompts and the teacher."""
    n: int = 5
    """Digits per prompt."""
    steps: int = 1500
    """Adam steps, each on a fresh batch of teacher answers."""
    batch_size: int = 128
    """Prompts per step."""
    lr: float = 2e-3
    """Adam learning rate (cosine-decayed to 10% over the run)."""
    p_correct: float = 0.5
    """Probability that the teacher answers exactly right."""
    eval_every: int = 250
    """Steps between gold evaluations (sampled at temperature 1 on held-out prompts); the loss
    is logged every step, the gold/ columns only at these."""
    eval_prompts: int = 512
    """Held-out prompts per evaluation."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The transformer's shape; vocab and max_len follow the task."""
    runs_dir: str = "runs"
    """Where the run folder goes."""

    def validate(self) -> None:
        for name in ("steps", "batch_size", "eval_every", "eval_prompts", "n"):
            check_positive(name, getattr(self, name))
        check_positive("lr", self.lr)
        check_fraction("p_correct", self.p_correct)


@torch.no_grad()
def evaluate_gold(policy: TinyLM, task: SortTask, n_prompts: int, seed: int,
                  temperature: float = 1.0) -> dict[str, float]:
    """Mean gold quantities of answers sampled at `temperature` on `n_prompts` prompts drawn
    from their own generator (the training streams are untouched)."""
    gen = torch.Generator().manual_seed(seed)
    prompts = task.sample_prompts(n_prompts, gen)
    responses = sample(policy, prompts, task.max_new, temperature, gen)
    g = gold_scores(task, prompts, responses)
    return {f"gold/{k}": float(v.mean()) for k, v in g.items()}


EVAL_SEED = 10_000
"""Held-out prompts use seed + EVAL_SEED: disjoint streams from training."""


def train_sft(cfg: SFTConfig, echo=print) -> Path:
    """Train the SFT model; returns the run folder (model.pt inside)."""
    cfg.validate()
    torch.set_num_threads(1)
    task = SortTask(cfg.n)
    cfg.model.vocab, cfg.model.max_len, cfg.model.out_dim = VOCAB, task.seq_len, VOCAB
    gen = seed_everything(cfg.seed)
    model = TinyLM(cfg.model)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.1 + 0.45 * (1 + math.cos(math.pi * s / cfg.steps)))
    t0, done = time.perf_counter(), 0
    run = make_run(cfg.runs_dir, "sft", cfg.seed, cfg, SFT_COLUMNS)
    with status_on_exit(run, lambda: done):  # Ctrl-C, SIGTERM, an error: said, in status.json
        echo(f"sft: {n_params(model)} parameters, run folder {run.path}")
        for step in range(1, cfg.steps + 1):
            prompts = task.sample_prompts(cfg.batch_size, gen)
            answers = task.teacher_answers(prompts, gen, cfg.p_correct)
            logits = answer_logits(model, prompts, answers)
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), answers.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            row = {"step": step, "iteration": step, "global_step": step * cfg.batch_size,
                   "wall_time": time.perf_counter() - t0, "loss": float(loss.detach())}
            evaluated = step % cfg.eval_every == 0 or step == cfg.steps
            if evaluated:  # the gold columns: every eval_every steps, empty in between
                model.eval()
                row.update(evaluate_gold(model, task, cfg.eval_prompts, cfg.seed + EVAL_SEED))
                model.train()
            run.log_metrics(row)
            if evaluated:
                echo(f"sft step {step}: loss {row['loss']:.3f} gold/exact {row['gold/exact']:.3f} "
                     f"gold/perm {row['gold/perm']:.3f}")
            done = step
        save_model(model, str(run.path / "model.pt"), {"task_n": cfg.n})
    run.set_status("finished", cfg.steps)
    return run.path
