"""trustrl's Gymnasium collector against Stable-Baselines3 on MuJoCo, rl-baselines3-zoo's PPO
setting for each env, CPU: train SPS and the learning curve (issue "Faster than PureJaxRL on a
CPU", point 4).

    python benchmarks/mujoco_cpu.py --sb3-python $PEERS/sb3-venv/bin/python \\
        [--envs HalfCheetah-v5 Hopper-v5] [--seeds 3] [--steps 100000] [--json out.json] \\
        [--plot curves.png]

Per env and seed the two tools alternate (SB3 first on odd seeds, trustrl first on even ones),
each one process with one torch thread (benchmarks/peers_cpu.py's thread environment), the
same seed. The setting is the zoo's PPO entry for the env (trustrl/settings/presets/zoo.py, under
the zoo's v4 id): trustrl runs `trustrl train ppo --env ENV --preset zoo --total-steps N` (the
preset maps the entry onto trustrl's keys), SB3 runs `benchmarks/peer_sb3.py zoo` with the same
entry (the zoo's defaults filled in, as JSON). Train SPS: SB3's `learn()` time; trustrl's loop,
from the run's start to its last checkpoint (no evaluation during training: eval_every 0; the
final greedy evaluation comes after). Learning: the final greedy return over 10 episodes
(each tool's deterministic policy, observations through its frozen normaliser, episode i reset
with seed S + 10000 + i for SB3, trustrl's evaluation seeds for trustrl) and both tools'
training-episode curves in one plot per env. Ratios: trustrl's median train SPS over SB3's.
Not run by the test suite (minutes per run).

SB3's venv needs MuJoCo: `pip install "gymnasium[mujoco]"` into the `sb3-venv` of
benchmarks/setup_peers.py; trustrl's needs `pip install "trustrl[mujoco]"`.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers_cpu import REPO, Result, launch, parse_trustrl_run, plot_curves  # noqa: E402

DEFAULT_ENVS = ("HalfCheetah-v5", "Hopper-v5")


def zoo_entry(env_id: str) -> dict:
    """The zoo's PPO entry for env_id with the zoo's defaults filled in (what SB3 gets)."""
    from trustrl.settings.presets import zoo

    entry = zoo.ENTRIES[("ppo", env_id)]
    return dict(zoo._ZOO_DEFAULTS["ppo"], **entry.zoo)


def run_sb3(env_id: str, seed: int, steps: int, a: argparse.Namespace) -> Result:
    cmd = [a.sb3_python, str(REPO / "benchmarks" / "peer_sb3.py"), "zoo", "--env", env_id,
           "--params", json.dumps(zoo_entry(env_id)), "--seed", str(seed),
           "--total-steps", str(steps)]
    with tempfile.TemporaryDirectory(prefix="bench-sb3-") as tmp:
        out, _, wall, rss = launch(cmd, Path(tmp))
    r = json.loads(next(x for x in out.splitlines() if x.startswith("RESULT "))[7:])
    return Result("sb3", r["steps"], r["train_seconds"], wall, rss, None,
                  {"greedy_return": r["final_mean"], "curve": r["curve"]})


def run_trustrl(env_id: str, seed: int, steps: int, a: argparse.Namespace) -> Result:
    with tempfile.TemporaryDirectory(prefix="bench-trustrl-") as tmp:
        cmd = [sys.executable, "-m", "trustrl", "train", "ppo", "--env", env_id, "--preset",
               "zoo", "--seed", str(seed), "--total-steps", str(steps), "--runs-dir",
               str(Path(tmp) / "runs"), "--quiet", "--set", "torch_threads=1", "--set",
               "eval_every=0", "--set", "device=cpu"] + shlex.split(a.trustrl_args)
        out, _, wall, rss = launch(cmd, REPO)
        run = Path(next(x for x in out.splitlines() if x.startswith("run: "))[5:])
        n, seconds, _, extras = parse_trustrl_run(run)
    return Result("trustrl", n, seconds, wall, rss, None, extras)


RUNNERS = {"sb3": run_sb3, "trustrl": run_trustrl}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sb3-python", required=True, help="the SB3 venv's python (with MuJoCo)")
    p.add_argument("--envs", nargs="+", default=list(DEFAULT_ENVS))
    p.add_argument("--seeds", type=int, default=3, help="seeds 1..N")
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--trustrl-args", default="", help="extra options for `trustrl train`")
    p.add_argument("--json", help="also write every run's numbers to this JSON file")
    p.add_argument("--plot", help="curves: one PNG per env, this path with _ENV appended")
    a = p.parse_args()
    if a.seeds < 1 or a.steps < 1:
        p.error("--seeds and --steps must be positive")
    print(f"# mujoco_cpu: {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, one torch "
          f"thread per tool, {a.steps:,} steps, seeds 1-{a.seeds}", flush=True)
    everything: dict[str, dict[str, list[Result]]] = {}
    for env_id in a.envs:
        results: dict[str, list[Result]] = {"sb3": [], "trustrl": []}
        for seed in range(1, a.seeds + 1):
            order = ("sb3", "trustrl") if seed % 2 else ("trustrl", "sb3")
            for tool in order:
                r = RUNNERS[tool](env_id, seed, a.steps, a)
                results[tool].append(r)
                print(f"  {env_id} seed {seed} {tool}: {r.sps:,.0f} SPS "
                      f"({r.train_seconds:.1f} s train), greedy "
                      f"{r.extra['greedy_return']:.1f}", file=sys.stderr, flush=True)
        everything[env_id] = results
        med = {t: statistics.median(r.sps for r in rs) for t, rs in results.items()}
        print(f"\n### {env_id}, {a.steps:,} steps, seeds 1-{a.seeds}\n")
        print("| tool | train SPS (median) | per seed | greedy return per seed | median |")
        print("|---|---:|---|---|---:|")
        for tool, rs in results.items():
            g = [r.extra["greedy_return"] for r in rs]
            print(f"| {tool} | {med[tool]:,.0f} | {', '.join(f'{r.sps:,.0f}' for r in rs)} | "
                  f"{', '.join(f'{x:.1f}' for x in g)} | {statistics.median(g):.1f} |")
        print(f"\ntrustrl / SB3 train SPS: {med['trustrl'] / med['sb3']:.2f}x", flush=True)
        if a.plot:
            base = Path(a.plot)
            plot_curves(f"{env_id}: rl-baselines3-zoo PPO setting", results,
                        str(base.with_name(f"{base.stem}_{env_id}{base.suffix or '.png'}")))
    if a.json:
        Path(a.json).write_text(json.dumps(
            {e: {t: [vars(r) for r in rs] for t, rs in res.items()}
             for e, res in everything.items()}, indent=2) + "\n")


if __name__ == "__main__":
    main()
