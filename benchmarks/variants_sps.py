"""Every algorithm's iteration on the batched CartPole against PPO's, in one process, round
robin (issue "One source, compiled", point 2: each at least 0.8x PPO's train SPS).

    python benchmarks/variants_sps.py [--iterations 40] [--rounds 3] [--algos ...]

One learner per algorithm, one seed, the same batch shape (4 envs x 128 steps; the PPO family
10 epochs of minibatches of 64; TRPO/NPG their presets' critic epochs), one torch thread, the
compiled backend (the `[compiled]` extra; kernels compiled or loaded before timing). Each
round times `BatchedLearner.step` for --iterations iterations of each algorithm in turn;
prints each algorithm's median SPS over rounds, its ratio to PPO's in the same rounds, and
whether its iteration is fused and its update compiled (the eager note's reason otherwise).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from trustrl.compute import compiled
from trustrl.learn.learners import BatchedLearner
from trustrl.settings.config import make_config

ALGOS = ("ppo", "ppo-noclip", "ppo-dualclip", "spo", "ppo-penalty", "pg", "trpo", "npg")
SHAPE = {"num_envs": 4, "num_steps": 128, "eval_every": 0, "torch_threads": 1,
         "grad_backend": "compiled"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--algos", nargs="+", default=list(ALGOS))
    args = ap.parse_args()
    if not compiled.available():
        raise SystemExit("needs the [compiled] extra")
    torch.set_num_threads(1)
    learners = {}
    for algo in args.algos:
        sets = dict(SHAPE)
        if algo not in ("pg", "trpo", "npg"):
            sets.update(update_epochs=10, minibatch_size=64)
        cfg = make_config(algo, env_id="CartPole-v1",
                          sets={**sets, "total_steps": 10**9})
        learner = BatchedLearner(cfg, [1])
        for _ in range(3):  # compile or load every kernel, warm the caches
            learner.step()
        learners[algo] = learner
    steps = SHAPE["num_envs"] * SHAPE["num_steps"] * args.iterations
    sps: dict[str, list[float]] = {a: [] for a in args.algos}
    for _ in range(args.rounds):
        for algo, learner in learners.items():
            t0 = time.perf_counter()
            for _ in range(args.iterations):
                learner.step()
            sps[algo].append(steps / (time.perf_counter() - t0))
    base = sps.get("ppo")
    print("| algorithm | train SPS (median of rounds) | x PPO (median of per-round ratios) "
          "| fused | update |")
    print("|---|---|---|---|---|")
    for algo, xs in sps.items():
        ratio = (statistics.median(x / b for x, b in zip(xs, base, strict=True))
                 if base else float("nan"))
        learner = learners[algo]
        why = getattr(learner.algo, "eager_reason", None)
        kind = "eager: " + why if why else ("compiled" if hasattr(learner.algo, "objective")
                                            else "compiled kernels (critic fit, Fisher)")
        print(f"| {algo} | {statistics.median(xs):,.0f} | {ratio:.2f} | "
              f"{'yes' if learner.fused else 'no'} | {kind} |")


if __name__ == "__main__":
    main()
