"""trustrl's GRPO beside TRL's GRPOTrainer: same model folder, prompts, reward and settings.

    python benchmarks/rlhf_hf_vs_trl.py [--steps 30] [--seeds 1 2 3] [--out DIR] [--profile]

The model is the sort task as a GPT-2-architecture folder (tests/hf_sort.py: built from a config
and SFT'd from scratch here, nothing downloaded), the reward its gold score as a TRL reward
function. Both run on the CPU, one thread, alternately in this process (a round per seed:
trustrl, then TRL), with: 8 prompts x 8 completions per step, one optimiser step per batch (TRL
num_iterations 1, trustrl epochs 1 and one minibatch), seq-mean loss (TRL loss_type 'grpo'),
group std scaling, clip 0.2, beta 0.02 with k3 in the loss (TRL use_bias_correction_kl False),
Adam(W) lr 1e-3 constant, no weight decay, grad-norm clip 1, temperature 1 with top_k 0 /
top_p 1, 6 new tokens, dropout off, no gradient checkpointing.

Prints each round's completions per second (training loop only), their ratio and the load
average, then the ratios' median and range, and writes results.json and curves.png (mean training
reward = gold score, and the k3 KL to pi_ref, per step). With --profile, a table of milliseconds
per step of each phase on each side (results.json keeps the seconds).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import hf_sort  # noqa: E402
import torch  # noqa: E402

G, PROMPTS, LR, BETA, MAX_NEW = 8, 8, 1e-3, 0.02, 6
PHASES = ("generation", "scoring (no grad)", "reward", "loss forward", "backward",
          "optimiser step", "diagnostics")


class PhaseTimer:
    """Exclusive wall time per phase: a phase entered inside another is subtracted from it, so
    the phases and the rest ("host overhead") add up to the loop's wall time."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.stack: list[list] = []  # [phase, start, time spent in inner phases]

    def wrap(self, fn, phase):
        def timed(*args, **kwargs):
            name = phase(*args, **kwargs) if callable(phase) else phase
            if name is None:
                return fn(*args, **kwargs)
            self.stack.append([name, time.perf_counter(), 0.0])
            try:
                return fn(*args, **kwargs)
            finally:
                name, start, inner = self.stack.pop()
                spent = time.perf_counter() - start
                self.seconds[name] += spent - inner
                if self.stack:
                    self.stack[-1][2] += spent
        return timed

    def patch(self, owner, attr: str, phase) -> None:
        setattr(owner, attr, self.wrap(getattr(owner, attr), phase))


def _forward_phase(*args, **kwargs) -> str:
    return "loss forward" if torch.is_grad_enabled() else "scoring (no grad)"


def _patch_points(side: str) -> list[tuple[object, str, object]]:
    """(owner, attribute, phase) timed on each side; shared: torch's backward, gradient clip and
    the optimisers' step."""
    points: list[tuple[object, str, object]] = [
        (torch.autograd, "backward", "backward"),
        (torch.nn.utils, "clip_grad_norm_", "optimiser step"),
        (torch.optim.Adam, "step", "optimiser step"),
        (torch.optim.AdamW, "step", "optimiser step")]
    if side == "trustrl":
        from trustrl.rlhf import grpo, hf, steps

        points += [(hf.HFIO, "sample", "generation"),
                   (hf.HFIO, "answer_logits", _forward_phase),
                   (grpo, "score_answers", "scoring (no grad)"),
                   (grpo, "token_logprobs", _forward_phase),
                   (grpo, "grpo_loss", "loss forward"),
                   (hf.TextReward, "__call__", "reward"),
                   (steps.UpdateDiagnostics, "add", "diagnostics"),
                   (grpo, "sampling_stats", "diagnostics")]
    else:
        from trl.trainer.grpo_trainer import GRPOTrainer

        points += [(GRPOTrainer, "_generate", "generation"),
                   (GRPOTrainer, "compute_loss", "loss forward"),
                   (GRPOTrainer, "_get_per_token_logps_and_entropies", _forward_phase),
                   (GRPOTrainer, "_calculate_rewards", "reward")]
    return points


@contextlib.contextmanager
def profiled(timer: PhaseTimer | None, side: str):
    """Times the phases of a run (timer None: nothing patched); restores everything after."""
    if timer is None:
        yield
        return
    points = _patch_points(side)
    originals = [(owner, attr, vars(owner).get(attr)) for owner, attr, _ in points]
    for owner, attr, phase in points:
        timer.patch(owner, attr, phase)
    try:
        yield
    finally:
        for owner, attr, original in reversed(originals):
            if original is None:
                delattr(owner, attr)  # inherited: the patch shadowed the parent's
            else:
                setattr(owner, attr, original)


def run_trustrl(model: Path, data: Path, steps: int, seed: int, runs: Path,
                timer: PhaseTimer | None = None) -> dict:
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
    with profiled(timer, "trustrl"):
        run = train_hf("grpo", cfg, h, echo=lambda s: None)
    with open(run / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    wall = float(rows[-1]["wall_time"])
    return {"reward": [float(r["reward"]) for r in rows], "kl": [float(r["kl"]) for r in rows],
            "seconds": wall, "completions_per_s": steps * PROMPTS * G / wall}


def run_trl(model: Path, data: Path, steps: int, seed: int, out: Path,
            timer: PhaseTimer | None = None) -> dict:
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
    with profiled(timer, "trl"):
        t0 = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - t0
    logs = [x for x in trainer.state.log_history if "reward" in x]
    return {"reward": [x["reward"] for x in logs], "kl": [x.get("kl", float("nan")) for x in logs],
            "seconds": wall, "completions_per_s": steps * PROMPTS * G / wall}


def profile_table(profile: dict, steps: int) -> str:
    """Milliseconds per step of each phase, trustrl beside TRL; host overhead is the rest of
    the training loop's wall time."""
    lines = ["| phase | trustrl ms/step | TRL ms/step |", "|---|---|---|"]
    rest = {name: p["wall"] - sum(p["seconds"].values()) for name, p in profile.items()}
    for phase in (*PHASES, "host overhead", "total"):
        cells = []
        for name in ("trustrl", "trl"):
            p = profile[name]
            sec = {"host overhead": rest[name], "total": p["wall"]}.get(phase)
            sec = p["seconds"][phase] if sec is None else sec
            cells.append(f"{1000 * sec / steps:.1f}")
        lines.append(f"| {phase} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


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
    ap.add_argument("--profile", action="store_true",
                    help="time each phase on both sides and print a table (results.json too)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    model = hf_sort.sft_sort_model(work / "sortlm", seed=0, steps=300, batch=64)
    data = hf_sort.write_prompts(work / "prompts.jsonl", 512, 1)
    results: dict = {"trustrl": [], "trl": [], "rounds": []}
    timers = {"trustrl": PhaseTimer(), "trl": PhaseTimer()} if args.profile else {}
    for seed in args.seeds:  # a round: trustrl then TRL, same seed
        load = os.getloadavg()[0]
        results["trustrl"].append(run_trustrl(model, data, args.steps, seed, work / "runs",
                                              timers.get("trustrl")))
        results["trl"].append(run_trl(model, data, args.steps, seed, work / "trl",
                                      timers.get("trl")))
        a, b = results["trustrl"][-1], results["trl"][-1]
        ratio = a["completions_per_s"] / b["completions_per_s"]
        results["rounds"].append({"seed": seed, "ratio": ratio, "load_before": load,
                                  "load_after": os.getloadavg()[0]})
        print(f"round {len(results['rounds'])} (seed {seed}, load average {load:.1f}): "
              f"completions/s trustrl {a['completions_per_s']:.1f}, "
              f"TRL {b['completions_per_s']:.1f}, ratio {ratio:.2f}; "
              f"last-5 reward {sum(a['reward'][-5:]) / 5:.3f} vs {sum(b['reward'][-5:]) / 5:.3f}",
              flush=True)
    ratios = [r["ratio"] for r in results["rounds"]]
    print(f"trustrl / TRL completions per second: median {statistics.median(ratios):.2f} "
          f"(range {min(ratios):.2f} to {max(ratios):.2f}); >= 1 in "
          f"{sum(r >= 1 for r in ratios)} of {len(ratios)} rounds")
    if timers:
        results["profile"] = {name: {"seconds": t.seconds,
                                     "wall": sum(r["seconds"] for r in results[name])}
                              for name, t in timers.items()}
        print(profile_table(results["profile"], args.steps * len(args.seeds)))
    import trl

    results["versions"] = {"torch": torch.__version__, "trl": trl.__version__}
    results["settings"] = {"steps": args.steps, "seeds": args.seeds, "G": G, "prompts": PROMPTS,
                           "lr": LR, "beta": BETA, "max_new_tokens": MAX_NEW}
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    plot(results, out / "curves.png")


if __name__ == "__main__":
    main()
