"""Acceptance figures of the core issue, measured by running the CLI as a user would.

    python benchmarks/acceptance.py [--jobs 2] [--out runs/acceptance]

- CartPole-v1 preset, seeds 1..5, greedy evaluation after every iteration: steps to the first
  greedy mean of 500 (median and range).
- Pendulum-v1 preset at 122,880 steps (the blog's 60 x 2048), seeds 1..3: final greedy return
  over 10 episodes (median), against the blog's -619.
- The CartPole preset alone (100k steps, default evaluation schedule): steps per second and
  peak resident memory of the training process.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def train(args: list[str], runs: Path) -> tuple[Path, float, float]:
    """Run `trustrl train` in a subprocess; returns (run dir, wall seconds, peak RSS MiB)."""
    runs.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "trustrl", "train", "--quiet",
                             "--runs-dir", str(runs), *args], stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"training failed: {args}")
    run_dir = Path(next(l for l in out.splitlines() if l.startswith("run: "))[5:])
    return run_dir, wall, usage.ru_maxrss / 1024


def steps_to_500(run_dir: Path) -> tuple[int | None, int | None]:
    """(first step with a greedy mean of 500, first step from which every later evaluation is
    500). The first can be luck (a near-uniform greedy policy sometimes balances the pole)."""
    with open(run_dir / "metrics.csv") as f:
        ev = [(int(r["global_step"]), float(r["eval_return_mean"]))
              for r in csv.DictReader(f) if r["eval_return_mean"]]
    first = next((s for s, v in ev if v >= 500.0), None)
    stable = next((s for i, (s, _) in enumerate(ev) if all(v >= 500.0 for _, v in ev[i:])), None)
    return first, stable


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default="runs/acceptance")
    a = ap.parse_args()
    out = Path(a.out)
    common = ["--set", "tensorboard=false"]

    # SPS and memory: one run alone on the machine.
    rd, wall, rss = train(["--seed", "1", *common], out / "sps")
    with open(rd / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    steps = int(rows[-1]["global_step"])
    print(f"CartPole-v1 preset, {steps} steps: {steps / wall:,.0f} steps/s end to end "
          f"({wall:.1f} s incl. start-up and evaluations), median iteration "
          f"{statistics.median(float(r['sps']) for r in rows):,.0f} SPS, peak RSS {rss:.0f} MiB")

    with ThreadPoolExecutor(a.jobs) as pool:
        cart = list(pool.map(lambda s: train(["--seed", str(s), "--set", "eval_every=1", *common],
                                             out / "cartpole"), range(1, 6)))
        pend = list(pool.map(lambda s: train(["--env", "Pendulum-v1", "--preset", "chapter",
                                              "--seed", str(s), *common],
                                             out / "pendulum"), range(1, 4)))
    hits = [steps_to_500(rd) for rd, _, _ in cart]
    for k, name in ((0, "first greedy 500"), (1, "greedy 500 at every later evaluation")):
        got = [h[k] for h in hits if h[k] is not None]
        print(f"CartPole-v1 steps to {name} (10 episodes), seeds 1-5:", [h[k] for h in hits])
        if got:
            print(f"  median {statistics.median(got):,.0f}, range {min(got):,}-{max(got):,}, "
                  f"{len(got)}/5 seeds")
    finals = [json.loads((rd / "eval.json").read_text())["mean"] for rd, _, _ in pend]
    print("Pendulum-v1 greedy return at 122,880 steps, seeds 1-3:",
          [round(x, 1) for x in finals])
    print(f"  median {statistics.median(finals):.1f} (blog: -619; target: -300 or better)")


if __name__ == "__main__":
    main()
