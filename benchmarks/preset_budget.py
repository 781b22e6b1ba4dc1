"""A zoo preset against trustrl's defaults at a fraction of the zoo's budget (issue 57).

Every cell is `trustrl train ppo --env ENV --preset zoo|none --total-steps N --seed S` with
N = 10%, 30% or 100% of the zoo preset's n_timesteps, its greedy evaluation over 10 episodes at
the end (eval_every 0: no evaluation before; evaluations do not touch training's generators).
Seeds 1-3 are the ones `--preset auto`'s budget rule (trustrl/presets/budget.py) is derived
from; seeds 4-6 are held out to check it. One JSON file per run under OUT/runs/; a run whose
file exists is not run again (the script resumes where it stopped). One run at a time.

    python benchmarks/preset_budget.py --out benchmarks/results/preset_budget      # run, resume
    python benchmarks/preset_budget.py --out benchmarks/results/preset_budget --until 07:10
    python benchmarks/preset_budget.py --out benchmarks/results/preset_budget --table \\
        --docs docs/presets.md                                # the table, written into the page

The plan (PLAN) is ordered by cost: the cheap cells first, so that a run stopped by its time
limit leaves whole (env, budget) cells; `--table` marks every cell of the plan and every zoo
PPO env that has no run as not measured.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FRACTIONS = (0.1, 0.3, 1.0)
SETTINGS = ("zoo", "none")
"""The preset and trustrl's defaults (`--preset none`)."""
DERIVE_SEEDS = (1, 2, 3)
HELDOUT_SEEDS = (4, 5, 6)
EVAL_EPISODES = 10

PLAN: list[tuple[str, float, tuple[int, ...]]] = [
    # (env, fraction of the zoo's budget, seeds), in the order they run
    *[(env, f, seeds) for env in ("MountainCarContinuous-v0", "Acrobot-v1", "MountainCar-v0",
                                  "LunarLander-v3", "LunarLanderContinuous-v3")
      for f in (0.1, 0.3) for seeds in (DERIVE_SEEDS, HELDOUT_SEEDS)],
    *[("MountainCarContinuous-v0", 1.0, s) for s in (DERIVE_SEEDS, HELDOUT_SEEDS)],
    *[(env, 1.0, s) for env in ("Acrobot-v1", "MountainCar-v0", "LunarLander-v3")
      for s in (DERIVE_SEEDS, HELDOUT_SEEDS)],
    *[(env, 0.1, s) for env in ("Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Swimmer-v5",
                                "BipedalWalker-v3") for s in (DERIVE_SEEDS, HELDOUT_SEEDS)],
]
"""What this script runs, cheapest first (per env: 10% then 30% of the zoo's budget, the
derivation seeds then the held-out ones, the preset then the defaults)."""


def zoo_budget(env: str) -> int:
    from trustrl.presets import ZOO_PRESETS

    return int(ZOO_PRESETS[("ppo", env)]["total_steps"])


def budget_at(env: str, fraction: float) -> int:
    return round(zoo_budget(env) * fraction)


def run_name(env: str, setting: str, fraction: float, seed: int) -> str:
    return f"{env}__{setting}__{round(fraction * 100):03d}pct__seed{seed}.json"


def _commit() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "trustrl"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return rev + ("+changes" if dirty else "")


def run_one(env: str, setting: str, fraction: float, seed: int, runs_dir: Path) -> dict[str, Any]:
    """Train one cell in a subprocess on one thread; its record (status 'finished' with the
    final evaluation, or 'refused' with trustrl's one-line error)."""
    steps = budget_at(env, fraction)
    cmd = [sys.executable, "-m", "trustrl", "train", "ppo", "--env", env, "--preset", setting,
           "--total-steps", str(steps), "--seed", str(seed), "--runs-dir", str(runs_dir),
           "--quiet", "--set", f"eval_episodes={EVAL_EPISODES}", "--set", "eval_every=0"]
    threads = {k: "1" for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")}
    record: dict[str, Any] = dict(
        env=env, setting=setting, fraction=fraction, budget=steps, zoo_budget=zoo_budget(env),
        seed=seed, command="trustrl " + " ".join(cmd[3:13] + cmd[15:]),
        trustrl=_commit(), date=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M"))
    before = set(runs_dir.iterdir()) if runs_dir.is_dir() else set()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **threads})
    record["wall_s"] = round(time.perf_counter() - t0, 1)
    new = sorted(set(runs_dir.iterdir()) - before) if runs_dir.is_dir() else []
    ev = new[-1] / "eval.json" if new else None
    if proc.returncode == 0 and ev is not None and ev.is_file():
        data = json.loads(ev.read_text())
        cfg = json.loads((new[-1] / "config.json").read_text())
        record.update(status="finished", final=data["mean"], returns=data["returns"],
                      global_step=data["global_step"], preset=cfg.get("preset"),
                      batch=cfg["num_envs"] * cfg["num_steps"])
    else:
        lines = (proc.stderr or proc.stdout).strip().splitlines() or ["no output"]
        record.update(status="refused" if proc.returncode == 2 else "failed",
                      error=lines[-1][:300], rc=proc.returncode)
    return record


def run_plan(out: Path, until: dt.datetime | None, estimate: dict[str, float]) -> None:
    runs = out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="preset_budget_"))
    for env, fraction, seeds in PLAN:
        for seed in seeds:
            for setting in SETTINGS:
                path = runs / run_name(env, setting, fraction, seed)
                if path.is_file():
                    continue
                need = estimate.get(env, 0.0) * budget_at(env, fraction)
                now = dt.datetime.now(dt.timezone.utc)
                if until is not None and now + dt.timedelta(seconds=need) > until:
                    print(f"stop: {path.name} would end after {until:%H:%M} UTC", flush=True)
                    return
                rec = run_one(env, setting, fraction, seed, scratch)
                path.write_text(json.dumps(rec, indent=1) + "\n")
                if rec["status"] == "finished":
                    estimate[env] = max(estimate.get(env, 0.0), rec["wall_s"] / rec["budget"])
                print(f"{path.name}: {rec['status']} {rec.get('final', rec.get('error'))} "
                      f"({rec['wall_s']} s)", flush=True)


def load(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*.json"))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="results folder (runs/ inside)")
    p.add_argument("--until", help="HH:MM UTC: start no run expected to end after it")
    p.add_argument("--table", action="store_true", help="write the table; run nothing")
    p.add_argument("--docs", help="with --table: the Markdown page whose generated section "
                   "is replaced")
    args = p.parse_args(argv)
    out = Path(args.out)
    if args.table:
        from benchmarks_preset_table import write_table  # type: ignore[import-not-found]

        write_table(load(out), Path(args.docs) if args.docs else None)
        return 0
    until = None
    if args.until:
        h, m = (int(x) for x in args.until.split(":"))
        today = dt.datetime.now(dt.timezone.utc)
        until = today.replace(hour=h, minute=m, second=0, microsecond=0)
    run_plan(out, until, {})
    return 0


if __name__ == "__main__":
    sys.exit(main())
