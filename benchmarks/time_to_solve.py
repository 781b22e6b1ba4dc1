"""Time to solve CartPole-v1: wall seconds from process launch to the first greedy evaluation
(10 deterministic episodes) with mean return 500, trustrl against Stable-Baselines3.

    python benchmarks/time_to_solve.py --sb3-python $PEERS/sb3-venv/bin/python
        [--seeds 1 2 3 4 5] [--eval-steps 5120] [--tools sb3 trustrl]
        [--trustrl-args "--set stop_return=500"]

SB3 runs rl-baselines3-zoo's tuned PPO setting for CartPole-v1 (hyperparams/ppo.yml in
github.com/DLR-RM/rl-baselines3-zoo, read at commit 22e3ff2): n_envs 8, n_timesteps 1e5,
MlpPolicy, n_steps 32, batch_size 256, gae_lambda 0.8, gamma 0.98, n_epochs 20, ent_coef 0.0,
learning_rate lin_0.001, clip_range lin_0.2 (benchmarks/peer_sb3.py `solve`), with SB3's
EvalCallback every --eval-steps env steps (10 deterministic episodes on a separate env) and
StopTrainingOnRewardThreshold(500) ending training at the first mean of 500.

trustrl runs `trustrl train ppo --env CartPole-v1` at its preset with the stop-on-solve config
key (`stop_return`, in --trustrl-args) and its own greedy evaluation every --eval-steps env
steps (eval_every = eval_steps / batch of 512; pass --trustrl-batch if the preset changes).

Measured per seed, every tool in its own process with OMP_NUM_THREADS=1 and one torch thread:
- solve s: launch to the end of the solving evaluation (SB3: the driver's clock when learn()
  returns; trustrl: the last write of metrics.csv, whose last row must be the solving one);
- exit s: launch to process exit (imports, teardown, trustrl's final evaluation and plot);
- steps: env steps trained when solved. A run that ends unsolved counts as infinitely slow.
Seeds alternate tools (SB3 seed 1, trustrl seed 1, SB3 seed 2, ...). Figures move with
machine load; run on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Solve:
    tool: str
    seed: int
    solved: bool
    solve_seconds: float  # inf when unsolved
    exit_seconds: float
    steps: int


def run(cmd: list[str], cwd: Path) -> tuple[str, float, float]:
    """(stdout, launch epoch, launch-to-exit seconds); a crash is an error, never a number."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    t_launch = time.time()
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        tail = "\n".join(p.stderr.strip().splitlines()[-15:])
        raise SystemExit(f"failed ({p.returncode}): {shlex.join(cmd)}\n{tail}")
    return p.stdout, t_launch, wall


def solve_sb3(seed: int, a: argparse.Namespace) -> Solve:
    cmd = [a.sb3_python, str(REPO / "benchmarks" / "peer_sb3.py"), "solve", "--seed",
           str(seed), "--eval-steps", str(a.eval_steps), "--max-steps", str(a.max_steps)]
    with tempfile.TemporaryDirectory(prefix="tts-sb3-") as tmp:
        out, t_launch, wall = run(cmd, Path(tmp))
    r = json.loads(next(x for x in out.splitlines() if x.startswith("RESULT "))[7:])
    seconds = r["solved_at_epoch"] - t_launch if r["solved"] else math.inf
    return Solve("sb3", seed, r["solved"], seconds, wall, r["steps"])


def trustrl_command(seed: int, runs: Path, a: argparse.Namespace) -> list[str]:
    """The trustrl side (edit here or through --trustrl-args)."""
    eval_every = max(1, round(a.eval_steps / a.trustrl_batch))
    return [sys.executable, "-m", "trustrl", "train", "ppo", "--env", "CartPole-v1",
            "--seed", str(seed), "--total-steps", str(a.max_steps), "--runs-dir", str(runs),
            "--quiet", "--set", f"eval_every={eval_every}", "--set", "torch_threads=1",
            *shlex.split(a.trustrl_args)]


def solve_trustrl(seed: int, a: argparse.Namespace) -> Solve:
    with tempfile.TemporaryDirectory(prefix="tts-trustrl-") as tmp:
        out, t_launch, wall = run(trustrl_command(seed, Path(tmp) / "runs", a), REPO)
        rundir = Path(next(x for x in out.splitlines() if x.startswith("run: "))[5:])
        metrics = rundir / "metrics.csv"
        with open(metrics) as f:
            rows = list(csv.DictReader(f))
        last_eval = rows[-1].get("eval_return_mean") or ""
        solved = bool(last_eval) and float(last_eval) >= 500.0
        seconds = metrics.stat().st_mtime - t_launch if solved else math.inf
    return Solve("trustrl", seed, solved, seconds, wall, int(rows[-1]["global_step"]))


SOLVERS = {"sb3": solve_sb3, "trustrl": solve_trustrl}


def summary(rs: list[Solve]) -> str:
    def f(x: float) -> str:
        return "unsolved" if math.isinf(x) else f"{x:.1f}"

    med = statistics.median(r.solve_seconds for r in rs)
    return (f"| {rs[0].tool} | {f(med)} | " + ", ".join(f(r.solve_seconds) for r in rs)
            + f" | {statistics.median(r.exit_seconds for r in rs):.1f} | "
            + ", ".join(str(r.steps) for r in rs) + f" | {sum(r.solved for r in rs)}/{len(rs)} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sb3-python", help="python of the Stable-Baselines3 venv")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    p.add_argument("--tools", nargs="+", choices=sorted(SOLVERS), default=["sb3", "trustrl"])
    p.add_argument("--eval-steps", type=int, default=5120,
                   help="env steps between greedy evaluations (default 5120)")
    p.add_argument("--max-steps", type=int, default=100_000,
                   help="training budget; the zoo's n_timesteps (default 100k)")
    p.add_argument("--trustrl-args", default="--set stop_return=500",
                   help="extra options for `trustrl train` (default: %(default)s)")
    p.add_argument("--trustrl-batch", type=int, default=512,
                   help="trustrl's batch (num_envs * num_steps) for the eval schedule")
    p.add_argument("--json", help="also write every run's numbers to this JSON file")
    a = p.parse_args()
    if "sb3" in a.tools and not a.sb3_python:
        p.error("sb3 needs --sb3-python PATH (or --tools trustrl)")
    if a.eval_steps < 1 or a.max_steps < 1 or a.trustrl_batch < 1:
        p.error("--eval-steps, --max-steps and --trustrl-batch must be positive")

    results: dict[str, list[Solve]] = {t: [] for t in a.tools}
    for seed in a.seeds:
        for tool in a.tools:
            r = SOLVERS[tool](seed, a)
            results[tool].append(r)
            print(f"  {tool} seed {seed}: solved={r.solved} at {r.solve_seconds:.1f} s, "
                  f"{r.steps} steps (exit {r.exit_seconds:.1f} s)", file=sys.stderr, flush=True)
    print(f"# time_to_solve CartPole-v1: {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} "
          f"CPUs, seeds {a.seeds}, greedy eval every {a.eval_steps} steps\n")
    print("| tool | median solve s | solve s per seed | median exit s | steps per seed "
          "| solved |")
    print("|---|---:|---|---:|---|---:|")
    for rs in results.values():
        print(summary(rs))
    if a.json:
        Path(a.json).write_text(json.dumps(
            {t: [vars(r) for r in rs] for t, rs in results.items()}, indent=2) + "\n")


if __name__ == "__main__":
    main()
