"""trustrl's GRPO beside TRL's GRPOTrainer: same model folder, prompts, reward and settings.

    python benchmarks/rlhf_hf_vs_trl.py [--steps 30] [--seeds 1 2 3] [--out DIR]

The model is the sort task as a GPT-2-architecture folder (tests/hf_sort.py: built from a config
and SFT'd from scratch here, nothing downloaded), the reward its gold score as a TRL reward
function. Both run on the CPU, one after the other in this process, with: 8 prompts x 8
completions per step, one optimiser step per batch (TRL num_iterations 1, trustrl epochs 1 and
one minibatch), seq-mean loss (TRL loss_type 'grpo'), group std scaling, clip 0.2, beta 0.02
with k3 in the loss (TRL use_bias_correction_kl False), Adam(W) lr 1e-3 constant, no weight
decay, grad-norm clip 1, temperature 1 with top_k 0 / top_p 1, 6 new tokens, dropout off,
no gradient checkpointing.

Prints completions per second of each (training loop only) and their ratio, and writes
results.json and curves.png (mean training reward = gold score, and the k3 KL to pi_ref, per step).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import hf_sort  # noqa: E402
import torch  # noqa: E402

G, PROMPTS, LR, BETA, MAX_NEW = 8, 8, 1e-3, 0.02, 6


def run_trustrl(model: Path, data: Path, steps: int, seed: int, runs: Path) -> dict:
    import csv

    from trustrl.rlhf.hf import HFConfig
    from trustrl.rlhf.hf_run import algo_config, train_hf

    cfg = algo_config("grpo")
    cfg.seed, cfg.runs_dir, cfg.iterations, cfg.lr, cfg.beta = seed, str(runs), steps, LR, BETA
    cfg.prompts_per_iter, cfg.group_size = PROMPTS, G
    cfg.minibatch_size, cfg.epochs = PROMPTS * G, 1
    cfg.loss_type, cfg.kl_estimator, cfg.kl_placement = "seq-mean", "k3", "loss"
    h = HFConfig(model=str(model), data=str(data), reward=["hf_sort:gold_reward"],
                 max_new_tokens=MAX_NEW, save_every=10**6)
    run = train_hf("grpo", cfg, h, echo=lambda s: None)
    with open(run / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    wall = float(rows[-1]["wall_time"])
    return {"reward": [float(r["reward"]) for r in rows], "kl": [float(r["kl"]) for r in rows],
            "seconds": wall, "completions_per_s": steps * PROMPTS * G / wall}


def run_trl(model: Path, data: Path, steps: int, seed: int, out: Path) -> dict:
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    rows = [json.loads(line) for line in data.read_text().splitlines() if line.strip()]
    args = GRPOConfig(
        output_dir=str(out), seed=seed, use_cpu=True, max_steps=steps, learning_rate=LR,
        lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
        per_device_train_batch_size=PROMPTS * G, num_generations=G, gradient_accumulation_steps=1,
        steps_per_generation=1, num_iterations=1, loss_type="grpo", scale_rewards="group",
        epsilon=0.2, beta=BETA, use_bias_correction_kl=False, temperature=1.0, top_k=0,
        top_p=1.0, max_completion_length=MAX_NEW, disable_dropout=True, logging_steps=1,
        gradient_checkpointing=False,
        save_strategy="no", report_to="none", bf16=False, dataloader_num_workers=0)
    trainer = GRPOTrainer(model=str(model), reward_funcs=[hf_sort.gold_reward], args=args,
                          train_dataset=Dataset.from_list(rows),
                          processing_class=AutoTokenizer.from_pretrained(model))
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    logs = [x for x in trainer.state.log_history if "reward" in x]
    return {"reward": [x["reward"] for x in logs], "kl": [x.get("kl", float("nan")) for x in logs],
            "seconds": wall, "completions_per_s": steps * PROMPTS * G / wall}


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for name, color in (("trustrl", "C0"), ("trl", "C3")):
        for i, r in enumerate(results[name]):
            axes[0].plot(r["reward"], color=color, alpha=0.8, label=name if i == 0 else None)
            axes[1].plot(r["kl"], color=color, alpha=0.8, label=name if i == 0 else None)
    axes[0].set(xlabel="step", ylabel="mean gold score of the training samples")
    axes[1].set(xlabel="step", ylabel="k3 KL(pi || pi_ref) per token")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--out", default="benchmarks/results/rlhf_hf_vs_trl")
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    model = hf_sort.sft_sort_model(work / "sortlm", seed=0, steps=300, batch=64)
    data = hf_sort.write_prompts(work / "prompts.jsonl", 512, 1)
    results: dict = {"trustrl": [], "trl": []}
    for seed in args.seeds:
        results["trustrl"].append(run_trustrl(model, data, args.steps, seed, work / "runs"))
        results["trl"].append(run_trl(model, data, args.steps, seed, work / "trl"))
        a, b = results["trustrl"][-1], results["trl"][-1]
        ratio = a["completions_per_s"] / b["completions_per_s"]
        print(f"seed {seed}: completions/s trustrl {a['completions_per_s']:.1f}, "
              f"TRL {b['completions_per_s']:.1f}, ratio {ratio:.2f}; "
              f"last-5 reward {sum(a['reward'][-5:]) / 5:.3f} vs {sum(b['reward'][-5:]) / 5:.3f}",
              flush=True)
    import trl

    results["versions"] = {"torch": torch.__version__, "trl": trl.__version__}
    results["settings"] = {"steps": args.steps, "seeds": args.seeds, "G": G, "prompts": PROMPTS,
                           "lr": LR, "beta": BETA, "max_new_tokens": MAX_NEW}
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    plot(results, out / "curves.png")


if __name__ == "__main__":
    main()
