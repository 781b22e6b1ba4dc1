"""TRPO on the batched collector against the Gymnasium collector: training-loop SPS, paired
(issue "One algorithm core", point 8: batched >= 3x).

    python benchmarks/trpo_collectors.py [-n 3] [--env CartPole-v1] [--algo trpo] \\
        [--total-steps 99840] [--backends compiled closed-form] [-- EXTRA TRAIN ARGS]

For each gradient backend and each of n pairs, `trustrl train ALGO --vector torch` and
`--vector sync` run one after the other (the order alternates from pair to pair), each a fresh
process with one torch thread, evaluation off (eval_every 0), the algorithm's preset for the
env. Loop SPS is the run's last global_step over its last wall_time in metrics.csv (the
training loop, from its start to the last iteration: imports, env construction and the
compiled backend's kernel loading come before it). The ratio is taken pair by pair, so a drift
of the machine's speed moves both sides alike; printed as median (min-max). Run from the
repository root; standard library only besides trustrl itself.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def loop_sps(cmd: list[str]) -> float:
    with tempfile.TemporaryDirectory(prefix="bench-trpo-") as tmp:
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        subprocess.run(cmd + ["--runs-dir", tmp], check=True, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        (run,) = Path(tmp).iterdir()
        with open(run / "metrics.csv", newline="") as f:
            last = list(csv.DictReader(f))[-1]
    return int(last["global_step"]) / float(last["wall_time"])


def summary(xs: list[float], fmt: str) -> str:
    return (f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}-"
            f"{fmt.format(max(xs))})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=3, help="pairs per backend")
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--algo", default="trpo")
    p.add_argument("--total-steps", type=int, default=99_840)
    p.add_argument("--backends", nargs="+", default=["auto"],
                   help="grad_backend values to measure (auto, compiled, closed-form, ...)")
    p.add_argument("extra", nargs="*", help="more `trustrl train` arguments (after --)")
    a = p.parse_args()
    if a.n < 1:
        p.error("-n must be at least 1")
    for backend in a.backends:
        base = [sys.executable, "-m", "trustrl", "train", a.algo, "--env", a.env,
                "--total-steps", str(a.total_steps), "--quiet", "--set", "eval_every=0",
                "--set", "torch_threads=1", "--set", f"grad_backend={backend}", *a.extra]
        sps: dict[str, list[float]] = {"torch": [], "sync": []}
        ratios = []
        for i in range(a.n):
            order = ("torch", "sync") if i % 2 == 0 else ("sync", "torch")
            got = {v: loop_sps(base + ["--vector", v]) for v in order}
            for v, x in got.items():
                sps[v].append(x)
            ratios.append(got["torch"] / got["sync"])
            print(f"  {backend} pair {i + 1}: batched {got['torch']:,.0f}, Gymnasium "
                  f"{got['sync']:,.0f} loop SPS: {ratios[-1]:.2f}x", file=sys.stderr,
                  flush=True)
        print(f"{a.algo} {a.env} grad_backend={backend}: batched "
              f"{summary(sps['torch'], '{:,.0f}')}, Gymnasium {summary(sps['sync'], '{:,.0f}')} "
              f"loop SPS; batched / Gymnasium {summary(ratios, '{:.2f}')}x ({a.n} pairs)",
              flush=True)


if __name__ == "__main__":
    main()
