"""The learning curves of the RLHF stages' run folders, told apart by their metrics.csv columns
alone (data: nothing of the folder is imported, and neither torch nor a model is loaded).

    SFT (the sort study)       the per-step cross-entropy; below, the held-out gold exact rate
    reward model (the study)   the per-step Bradley-Terry loss; below, the pair accuracies
    PPO                        objective/scores and the exact KL to pi_ref (Hugging Face or sort)
    GRPO / RLOO                reward +- its within-group std and the exact KL to pi_ref
"""

from __future__ import annotations

from trustrl.records.plotting import Curve

SFT_CURVE = Curve(kind="SFT", x="global_step", x_label="teacher answers seen", top="iteration",
                  y="loss", y_label="cross-entropy per answer token",
                  raw_label="per-step training loss (raw)", evals="", initial="",
                  below=(("gold/exact", "held-out exact-sorted rate"),))
"""`trustrl rlhf sft`: the loss every step, gold/exact every eval_every steps (points)."""

RM_CURVE = Curve(kind="reward model", x="global_step", x_label="preference pairs seen",
                 y="loss", y_label="Bradley-Terry loss", raw_label="per-step training loss (raw)",
                 evals="", initial="",
                 below=(("train_accuracy", "training pair accuracy"),
                        ("heldout_accuracy", "held-out pair accuracy")))
"""`trustrl rlhf reward-model`: the loss every Adam step, the accuracies at each epoch's end."""


def lm_curve(algo: str, evals: bool) -> Curve:
    """learning_curve.png of a language-model run: the reward (GRPO / RLOO with the mean
    within-group std around it) over completions seen and iterations, the exact KL to pi_ref
    below; eval/reward's points with eval_every, led by eval.json's start evaluation at 0."""
    ppo = algo == "ppo"
    return Curve(kind="PPO" if ppo else "GRPO / RLOO", x="global_step",
                 x_label="completions seen", top="iteration",
                 y="objective/scores" if ppo else "reward", y_label="mean reward",
                 raw_label="per-batch mean reward (raw)",
                 evals="eval/reward" if evals else "", eval_label="held-out evaluation",
                 initial="eval.json" if evals else "", initial_key=("start", "reward"),
                 spread="" if ppo else "reward_std",
                 spread_label="+- mean within-group std",
                 below=(("kl_ref/exact", "KL(pi || pi_ref) per token"),))


def curves_of(headers: list[list[str]]) -> list[Curve | None]:
    """The learning curve of each RLHF run (PPO / GRPO / RLOO of a Hugging Face model or the
    sort study, the study's SFT and reward model) from its metrics.csv columns (None: none of
    these); held-out evaluations drawn for all when one run has them, as one figure."""
    evals = any("eval/reward" in h for h in headers)

    def one(h: list[str]) -> Curve | None:
        cols = set(h)
        if {"objective/scores", "reward"} & cols:  # an RL run (a stage's never has these)
            return (lm_curve("ppo" if "objective/scores" in cols else "grpo", evals)
                    if "kl_ref/exact" in cols else None)
        for c, mark in ((RM_CURVE, "epoch"), (SFT_CURVE, "step")):
            if {mark, c.x, c.y, *(k for k, _ in c.below)} <= cols:
                return c
        return None

    return [one(h) for h in headers]
