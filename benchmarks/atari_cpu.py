"""trustrl against CleanRL's ppo_atari.py on Breakout, CPU: train SPS, and a learning run.

    python benchmarks/atari_cpu.py --cleanrl $PEERS/cleanrl-atari \\
        --cleanrl-python $PEERS/cleanrl-atari-venv/bin/python [--repeats 3] [--steps 20480]
        [--tools cleanrl trustrl] [--trustrl-args "..."] [--json out.json] [--floor]
    python benchmarks/atari_cpu.py --learn --cleanrl ... --cleanrl-python ... \\
        [--steps 500000] [--seeds 3]

The setting is ppo_atari.py's own defaults, for both tools: 8 envs x 128 steps, 4 epochs x 4
minibatches, lr 2.5e-4 annealed, gamma 0.99, lambda 0.95, clip 0.1 (value loss clipped
too), entropy 0.01, vf 0.5, grad norm 0.5, NatureCNN shared by both heads, `--threads` torch
threads each (default 1; 2 is what each tool takes on this 2-core machine when left alone).
trustrl runs `--preset cleanrl` (trustrl/settings/presets/cleanrl.py) on ALE/Breakout-v5 with its
Atari preprocessing (frameskip=1, repeat_action_probability=0 on the v5 id); CleanRL runs
BreakoutNoFrameskip-v4, the same emulator settings, behind its wrappers (the same chain).
--steps counts agent steps summed over envs, as both tools do (4 frames each: 500,000 steps
are 2M frames), rounded down to whole iterations of 1,024.

Default mode (SPS): the tools alternate (CleanRL, trustrl, CleanRL, ...), repetition r with
seed r for both; train SPS as benchmarks/peers_cpu.py measures it (CleanRL: its last `SPS:`
print; trustrl: from its loop's start to its last checkpoint, one 100-step greedy episode at the
end included: eval_episodes 1, eval_max_steps 100, no evaluation before or during training).
The ratio is trustrl's median train SPS over CleanRL's. With --floor it then times, in its
own process, the work any PPO at this setting must do (the NatureCNN's 16 minibatch passes
forward and backward, the rollout's 128 forward passes on 8 frames, the emulator's 1,024
steps of 4 frames) with trustrl's fastest kernels and no other work, and prints the SPS
that work alone allows: the ceiling of any tool's ratio over CleanRL on this machine.

--learn: each seed 1..N with each tool at the budget (hours: trustrl trained at about 130
SPS on this 2-core machine in a 2,048-step smoke run, so 500,000 steps take it about an
hour). Final returns, raw game scores for both: CleanRL, the mean of its last 20 finished
training games (sampled actions; its RecordEpisodeStatistics sits under EpisodicLife, so an
episode is a whole game); trustrl, its final greedy evaluation (10 whole games, eval.json) and
`trustrl eval --stochastic` over 20 games (sampled actions, as CleanRL's). Not run by the
test suite.

CleanRL's Atari venv and folder: `python benchmarks/setup_peers.py --dest $PEERS
--cleanrl-git CLONE --only cleanrl-atari` (benchmarks/PEERS_SETUP.md, "CleanRL's
ppo_atari.py"); this script puts the folder on PYTHONPATH for cleanrl_utils.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers_cpu import REPO, Result, launch, parse_cleanrl, parse_trustrl_run  # noqa: E402

BATCH = 8 * 128
TRUSTRL_ENV = "ALE/Breakout-v5"
CLEANRL_ENV = "BreakoutNoFrameskip-v4"
LAST_GAMES = 20


def budget(steps: int) -> int:
    return max(BATCH, steps // BATCH * BATCH)


# --- CleanRL -------------------------------------------------------------------------------
def cleanrl_command(seed: int, steps: int, cleanrl: Path, python: str) -> list[str]:
    """ppo_atari.py with its defaults written out (so a changed default cannot slip in)."""
    return [python, str(cleanrl / "ppo_atari.py"), "--seed", str(seed), "--env-id", CLEANRL_ENV,
            "--total-timesteps", str(steps), "--num-envs", "8", "--num-steps", "128",
            "--update-epochs", "4", "--num-minibatches", "4", "--learning-rate", "2.5e-4",
            "--anneal-lr", "--gamma", "0.99", "--gae-lambda", "0.95", "--clip-coef", "0.1",
            "--clip-vloss", "--ent-coef", "0.01", "--vf-coef", "0.5", "--max-grad-norm", "0.5",
            "--norm-adv", "--no-cuda"]


def run_cleanrl(seed: int, steps: int, a: argparse.Namespace) -> Result:
    cleanrl = Path(a.cleanrl).resolve()
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(cleanrl) + (os.pathsep + old if old else "")
    try:  # cleanrl_utils (its Atari wrappers) sits beside ppo_atari.py
        with tempfile.TemporaryDirectory(prefix="bench-cleanrl-atari-") as tmp:
            out, _, wall, rss = launch(cleanrl_command(seed, steps, cleanrl, a.cleanrl_python),
                                       Path(tmp), a.threads)
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
    per_step, _, curve = parse_cleanrl(out)
    games = [r for _, r in curve]
    last = statistics.mean(games[-LAST_GAMES:]) if games else None
    return Result("cleanrl", steps, steps * per_step, wall, rss, last,
                  {"curve": curve, "games": len(games)})


# --- trustrl -------------------------------------------------------------------------------
def trustrl_command(seed: int, steps: int, runs: Path, learn: bool,
                    extra: list[str], threads: int = 1) -> list[str]:
    sets = {"torch_threads": threads, "device": "cpu", "eval_every": 0}
    if not learn:  # the final greedy evaluation kept short: the loop is what is timed
        sets.update(eval_episodes=1, eval_max_steps=100)
    cmd = [sys.executable, "-m", "trustrl", "train", "ppo", "--env", TRUSTRL_ENV,
           "--preset", "cleanrl", "--seed", str(seed), "--total-steps", str(steps),
           "--runs-dir", str(runs), "--quiet"]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    return cmd + extra


def stochastic_eval(run: Path, episodes: int) -> float | None:
    """`trustrl eval RUN --stochastic`: the final policy's sampled actions over whole games."""
    out = subprocess.run([sys.executable, "-m", "trustrl", "eval", str(run), "--episodes",
                          str(episodes), "--stochastic"], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout
    m = re.search(r"over \d+ episodes: ([-\d.]+)", out)
    return float(m.group(1)) if m else None


def run_trustrl(seed: int, steps: int, a: argparse.Namespace, learn: bool = False) -> Result:
    with tempfile.TemporaryDirectory(prefix="bench-trustrl-atari-") as tmp:
        out, _, wall, rss = launch(
            trustrl_command(seed, steps, Path(tmp) / "runs", learn, shlex.split(a.trustrl_args),
                            a.threads), REPO, a.threads)
        run = Path(next(x for x in out.splitlines() if x.startswith("run: "))[5:])
        n, seconds, _, extras = parse_trustrl_run(run)
        if learn:
            extras["stochastic_return"] = stochastic_eval(run, LAST_GAMES)
    extras.pop("curve")  # lives with clipped rewards, not game scores
    return Result("trustrl", n, seconds, wall, rss, None, extras)


# --- the floor: the work any PPO at this setting does, timed with trustrl's kernels ------------
def floor_seconds(repeats: int = 3, threads: int = 1) -> dict[str, float]:
    """Seconds per iteration (8 envs x 128 steps) of the work every PPO at ppo_atari.py's
    setting does, whatever its overheads: 16 forward and backward passes of the loss through
    the NatureCNN actor-critic on 256 frames (4 epochs x 4 minibatches), 128 forward passes
    on 8 frames (the rollout), the emulator's 1,024 steps of 4 frames (ALE/Breakout-v5 with
    frameskip 4, no wrappers) and the same steps with the standard preprocessing (the
    emulator behind trustrl's Gymnasium chain, trustrl.envs.atari: max of two frames, 84x84
    grey, frame stack, episodic life; ale-py's C++ AtariVectorEnv on one thread took about as
    long, 0.79 against 0.74 s here). The floor counts the preprocessed steps. Timed in this
    process with `threads` torch threads, trustrl's network in its fastest layout
    (channels-last for the minibatches); medians of `repeats`."""
    import gymnasium as gym
    import numpy as np
    import torch

    from trustrl.envs.atari import atari_env
    from trustrl.envs.factory import env_factory
    from trustrl.envs.make import check_env
    from trustrl.records.agent import make_policy
    from trustrl.settings.config import make_config

    torch.set_num_threads(threads)
    cfg = make_config("ppo", TRUSTRL_ENV, sets={"preset": "cleanrl"})
    spec = check_env(env_factory(cfg))  # behind the Atari preprocessing: (4, 84, 84)
    torch.manual_seed(0)
    policy = make_policy(spec, cfg)
    g = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 256, (cfg.minibatch_size, spec.obs_dim), dtype=torch.uint8,
                           generator=g)
    acts = torch.randint(0, spec.action.n, (cfg.minibatch_size,), generator=g)
    adv = torch.randn(cfg.minibatch_size, generator=g)
    n_mb = cfg.update_epochs * (cfg.num_envs * cfg.num_steps // cfg.minibatch_size)

    def update() -> None:
        for _ in range(n_mb):
            policy.zero_grad(set_to_none=True)
            logp, ent, v = policy.evaluate_actions(frames, acts)
            (-(logp.exp() * adv).mean() + 0.5 * (v ** 2).mean() - 0.01 * ent.mean()).backward()

    few = frames[:cfg.num_envs]

    def rollout() -> None:
        for _ in range(cfg.num_steps):
            policy.sample_step(few)

    envs = [gym.make("ALE/Breakout-v5", frameskip=4, repeat_action_probability=0.0,
                     obs_type="grayscale") for _ in range(cfg.num_envs)]
    for i, e in enumerate(envs):
        e.reset(seed=i)
    chains = [atari_env(TRUSTRL_ENV) for _ in range(cfg.num_envs)]
    for i, e in enumerate(chains):
        e.reset(seed=i)
    rng = np.random.default_rng(0)

    def steps(which: list[Any]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(cfg.num_steps):
                for e in which:
                    _, _, term, trunc, _ = e.step(int(rng.integers(spec.action.n)))
                    if term or trunc:
                        e.reset()
        return run

    out = {}
    for name, fn in (("update", update), ("rollout_forward", rollout),
                     ("emulator", steps(envs)), ("preprocessed", steps(chains))):
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        out[name] = statistics.median(times)
    for e in envs + chains:
        e.close()
    out["total"] = out["update"] + out["rollout_forward"] + out["preprocessed"]
    return out


# --- the two modes ---------------------------------------------------------------------------
def sps_mode(a: argparse.Namespace, steps: int) -> dict[str, list[Result]]:
    results: dict[str, list[Result]] = {t: [] for t in a.tools}
    for rep in range(a.repeats):
        for tool in a.tools:
            r = (run_cleanrl(rep + 1, steps, a) if tool == "cleanrl"
                 else run_trustrl(rep + 1, steps, a))
            results[tool].append(r)
            print(f"  rep {rep + 1} {tool}: {r.sps:,.0f} SPS ({r.train_seconds:.1f} s train, "
                  f"{r.process_seconds:.1f} s process)", file=sys.stderr, flush=True)
    med = {t: statistics.median(r.sps for r in rs) for t, rs in results.items()}
    print(f"### Breakout, {steps:,} steps ({4 * steps:,} frames), medians of {a.repeats}\n")
    print("| tool | train SPS (median) | per repeat | process s | peak RSS MiB |")
    print("|---|---:|---|---:|---:|")
    for tool, rs in results.items():
        print(f"| {tool} | {med[tool]:,.0f} | {', '.join(f'{r.sps:,.0f}' for r in rs)} "
              f"| {statistics.median(r.process_seconds for r in rs):.1f} "
              f"| {statistics.median(r.peak_rss_mib for r in rs):.0f} |")
    if "cleanrl" in med and "trustrl" in med:
        print(f"\ntrustrl / CleanRL train SPS: {med['trustrl'] / med['cleanrl']:.2f}x")
    if a.floor:
        f = floor_seconds(threads=a.threads)
        ceiling = BATCH / f["total"]
        print(f"\nThe floor per iteration of {BATCH:,} steps (timed after the runs, "
              f"{a.threads} torch thread(s)): NatureCNN update {f['update']:.2f} s, rollout "
              f"forward passes {f['rollout_forward']:.2f} s, emulator {f['emulator']:.2f} s, "
              "with the "
              f"standard preprocessing {f['preprocessed']:.2f} s; "
              f"{f['total']:.2f} s in all: at most {ceiling:,.0f} SPS for any tool with these "
              "kernels and no other work"
              + (f", {ceiling / med['cleanrl']:.2f}x CleanRL's median" if "cleanrl" in med
                 else "") + ".")
        results["floor"] = [Result("floor", BATCH, f["total"], f["total"], 0.0, None, f)]
    return results


def learn_mode(a: argparse.Namespace, steps: int) -> dict[str, list[Result]]:
    results: dict[str, list[Result]] = {t: [] for t in a.tools}
    for seed in range(1, a.seeds + 1):
        for tool in a.tools:
            r = (run_cleanrl(seed, steps, a) if tool == "cleanrl"
                 else run_trustrl(seed, steps, a, learn=True))
            results[tool].append(r)
            print(f"  seed {seed} {tool}: {r.train_seconds / 60:.1f} min train, final "
                  f"{json.dumps({k: v for k, v in r.extra.items() if k != 'curve'})} "
                  f"last-{LAST_GAMES} games {r.last10_return}", file=sys.stderr, flush=True)
    print(f"### Breakout, {steps:,} steps ({4 * steps:,} frames), {a.seeds} seeds: final "
          "returns (raw game scores)\n")
    print("| tool | measure | per seed | mean |")
    print("|---|---|---|---:|")

    def row(tool: str, what: str, vals: list[float | None]) -> None:
        ok = [v for v in vals if v is not None]
        mean = f"{statistics.mean(ok):.1f}" if ok else "-"
        print(f"| {tool} | {what} | "
              + ", ".join("-" if v is None else f"{v:.1f}" for v in vals) + f" | {mean} |")

    for tool, rs in results.items():
        if tool == "cleanrl":
            row(tool, f"last {LAST_GAMES} training games (sampled)",
                [r.last10_return for r in rs])
        else:
            row(tool, "final greedy evaluation, 10 games", [r.extra["greedy_return"] for r in rs])
            row(tool, f"final policy sampled, {LAST_GAMES} games",
                [r.extra["stochastic_return"] for r in rs])
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cleanrl", help="folder holding ppo_atari.py and cleanrl_utils/")
    p.add_argument("--cleanrl-python", help="python of a venv that runs ppo_atari.py")
    p.add_argument("--tools", nargs="+", choices=("cleanrl", "trustrl"),
                   default=["cleanrl", "trustrl"])
    p.add_argument("--steps", type=int, help="agent steps per run (x4 frames); default 20,480 "
                   "(SPS) or 500,000 = 2M frames (--learn)")
    p.add_argument("--repeats", type=int, default=3, help="SPS mode: alternating repetitions")
    p.add_argument("--learn", action="store_true", help="the learning comparison (hours)")
    p.add_argument("--seeds", type=int, default=3, help="--learn: seeds 1..N")
    p.add_argument("--trustrl-args", default="", help="extra options for `trustrl train`")
    p.add_argument("--json", help="also write every run's numbers to this JSON file")
    p.add_argument("--threads", type=int, default=1, help="torch / OpenMP threads for each "
                   "tool (OMP_NUM_THREADS, MKL_NUM_THREADS; trustrl's torch_threads); default 1; "
                   "this machine's cores: what each tool takes when left alone")
    p.add_argument("--floor", action="store_true", help="SPS mode: then time the work any PPO "
                   "at this setting does (CNN passes, emulator) and print the SPS ceiling")
    a = p.parse_args()
    if "cleanrl" in a.tools and not (a.cleanrl and a.cleanrl_python):
        p.error("cleanrl needs --cleanrl DIR and --cleanrl-python PATH (or --tools trustrl)")
    if a.cleanrl and not (Path(a.cleanrl) / "ppo_atari.py").is_file():
        p.error(f"--cleanrl {a.cleanrl}: no ppo_atari.py there")
    if a.repeats < 1 or a.seeds < 1 or a.threads < 1 or (a.steps is not None and a.steps < 1):
        p.error("--repeats, --seeds, --threads and --steps must be positive")
    steps = budget(a.steps or (500_000 if a.learn else 20_480))
    print(f"# atari_cpu: {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, "
          f"{a.threads} torch thread(s) per tool; {'learning' if a.learn else 'train SPS'}",
          flush=True)
    results = learn_mode(a, steps) if a.learn else sps_mode(a, steps)
    if a.json:
        Path(a.json).write_text(json.dumps(
            {t: [vars(r) for r in rs] for t, rs in results.items()}, indent=2) + "\n")


if __name__ == "__main__":
    main()
