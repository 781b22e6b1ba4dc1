"""Is the suite's Pendulum-v1 goal (greedy >= -150 at 100k steps, median of 5 seeds) limited
by training time? Evaluate, on each suite seed's own 10 evaluation episodes (reset seeds
seed + 10000 + i, the suite protocol), the suite's 100k-step agents and reference agents trained
longer with the same preset, and the reference agents on 100 other episodes.

    trustrl train --env Pendulum-v1 --preset chapter --vector torch --seeds 1-3 \\
        --total-steps 500000 \\
        --set eval_every=0 --runs-dir REF
    python benchmarks/pendulum_ceiling.py --suite SWEEP_DIR --ref REF/Pendulum-v1__ppo__seeds1-3__*
"""

from __future__ import annotations

import argparse
import glob
import statistics

from trustrl.collect.evaluate import evaluate
from trustrl.records.agent import Agent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", required=True, help="the classic sweep folder (trials/ inside)")
    p.add_argument("--ref", required=True, help="a population folder of longer-trained agents")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    a = p.parse_args()
    refs = [Agent.load(f) for f in sorted(glob.glob(f"{a.ref}/Pendulum-v1__ppo__*/agent.pt"))]
    if not refs:
        raise SystemExit(f"no agents under {a.ref}")
    suite_means, ref_best = [], []
    for s in a.seeds:
        run = glob.glob(f"{a.suite}/trials/Pendulum-v1__ppo__seed{s}/Pendulum-v1__ppo__*")[0]
        mine = float(evaluate(Agent.load(run + "/agent.pt"), "Pendulum-v1", 10,
                              seed=s + 10_000).mean())
        r = [float(evaluate(x, "Pendulum-v1", 10, seed=s + 10_000).mean()) for x in refs]
        suite_means.append(mine)
        ref_best.append(max(r))
        print(f"seed {s}: suite agent {mine:.1f}; longer-trained agents on the same episodes: "
              + ", ".join(f"{x:.1f}" for x in r))
    print(f"median over seeds: suite agents {statistics.median(suite_means):.1f}, best "
          f"longer-trained agent per seed {statistics.median(ref_best):.1f}")
    wide = [float(evaluate(x, "Pendulum-v1", 100, seed=50_000).mean()) for x in refs]
    print("longer-trained agents over 100 other episodes: " + ", ".join(f"{x:.1f}" for x in wide))


if __name__ == "__main__":
    main()
