"""The algorithms side by side: CartPole-v1 (100k steps) and Pendulum-v1 (150k steps), three
seeds each, every algorithm at its preset (the Pendulum budget set to 150k for all).

    python benchmarks/algorithms.py [--jobs 2] [--seeds 1 2 3] [--out runs/algorithms]

Prints a Markdown table: final greedy return (mean ± std over seeds, each seed's return the
mean of 10 greedy episodes), mean exact KL(pi_old || pi) per update, mean k3 approx KL per
update, median iteration SPS (mean over seeds; runs share the cores `--jobs` at a time), and
for TRPO the largest KL of an accepted step against delta.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ALGOS = ["ppo", "ppo-penalty", "trpo", "npg", "ppo-noclip", "pg"]
ENVS = {"CartPole-v1": 100_000, "Pendulum-v1": 150_000}


def run(algo: str, env: str, steps: int, seed: int, out: Path) -> Path:
    cmd = [sys.executable, "-m", "trustrl", "train", algo, "--env", env, "--seed", str(seed),
           "--total-steps", str(steps), "--preset", "chapter", "--runs-dir", str(out / env / algo),
           "--quiet",
           "--set", "tensorboard=false"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{p.stderr}")
    return Path(next(line for line in p.stdout.splitlines() if line.startswith("run: "))[5:])


def summarise(dirs: list[Path]) -> dict[str, float]:
    finals, kl, k3, sps, max_acc = [], [], [], [], 0.0
    for d in dirs:
        finals.append(json.loads((d / "eval.json").read_text())["mean"])
        rows = list(csv.DictReader(open(d / "metrics.csv")))
        kl.append(statistics.mean(float(r["kl_exact"]) for r in rows))
        k3.append(statistics.mean(float(r["approx_kl"]) for r in rows))
        sps.append(statistics.median(float(r["sps"]) for r in rows))
        for r in rows:
            if r.get("ls_accepted") == "1":
                max_acc = max(max_acc, float(r["kl_exact"]))
    return {"mean": statistics.mean(finals), "std": statistics.pstdev(finals),
            "kl": statistics.mean(kl), "k3": statistics.mean(k3), "sps": statistics.mean(sps),
            "max_accepted_kl": max_acc, "finals": finals}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--out", default="runs/algorithms")
    ap.add_argument("--algos", nargs="+", default=ALGOS)
    ap.add_argument("--summarise-only", action="store_true",
                    help="re-read the run folders already under --out instead of training")
    a = ap.parse_args()
    out = Path(a.out)
    by: dict[tuple[str, str], list[Path]] = {}
    if a.summarise_only:
        for env in ENVS:
            for algo in a.algos:
                by[(env, algo)] = sorted(p for p in (out / env / algo).iterdir() if p.is_dir())
    else:
        jobs = [(algo, env, steps, seed) for env, steps in ENVS.items() for algo in a.algos
                for seed in a.seeds]
        with ThreadPoolExecutor(a.jobs) as pool:
            dirs = list(pool.map(lambda j: run(*j, out), jobs))
        for (algo, env, _, _), d in zip(jobs, dirs, strict=True):
            by.setdefault((env, algo), []).append(d)
    for env, steps in ENVS.items():
        print(f"\n{env}, {steps:,} steps, seeds {a.seeds}\n")
        print("| algo | greedy return (mean ± std) | per seed | mean KL/update (exact) "
              "| mean approx KL (k3) | SPS |")
        print("|---|---|---|---|---|---|")
        for algo in a.algos:
            s = summarise(by[(env, algo)])
            per = " / ".join(f"{x:.1f}" for x in s["finals"])
            print(f"| {algo} | {s['mean']:.1f} ± {s['std']:.1f} | {per} | {s['kl']:.3g} "
                  f"| {s['k3']:.3g} | {s['sps']:,.0f} |")
            if algo == "trpo":
                print(f"|  | largest KL of an accepted TRPO step: {s['max_accepted_kl']:.5f} "
                      "(delta 0.01) | | | | |")


if __name__ == "__main__":
    main()
