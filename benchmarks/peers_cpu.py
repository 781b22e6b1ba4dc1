"""trustrl against CleanRL and Stable-Baselines3 on CPU: same PPO setting, back to back.

    python benchmarks/peers_cpu.py --cleanrl $PEERS/cleanrl \\
        --cleanrl-python $PEERS/cleanrl-venv/bin/python \\
        --sb3-python $PEERS/sb3-venv/bin/python [--repeats 3] [--settings cartpole pendulum]
        [--trustrl-args "--set vector=sync"] [--json out.json] [--curves curves.png]

Settings (CleanRL's own defaults, the step budget rounded down to whole iterations for all):
- cartpole: CartPole-v1 with cleanrl/ppo.py's defaults: 4 envs x 128 steps, 4 epochs x 4
  minibatches, 64x64 tanh, lr 2.5e-4 annealed, gamma 0.99, lambda 0.95, clip 0.2 (value loss
  clipped too), entropy 0.01, grad norm 0.5; 100k steps.
- pendulum: Pendulum-v1 with cleanrl/ppo_continuous_action.py's defaults: 1 env x 2048 steps,
  10 epochs x 32 minibatches, lr 3e-4 annealed, entropy 0, observation and reward
  normalisation (clipped at 10); 100k steps.

Each tool runs as its own process with OMP_NUM_THREADS=1, MKL_NUM_THREADS=1 and its own thread
setting at 1 (CleanRL has none; SB3's driver and trustrl call torch.set_num_threads(1)). The
repetitions alternate the tools (CleanRL, SB3, trustrl, CleanRL, ...), repetition r uses seed
r + 1 for every tool, and the table shows medians over repetitions.

Timing. "train SPS" = env steps / seconds of the tool's training part, as each tool bounds it:
CleanRL from its start_time (after env and network creation) to its last `SPS:` print (steps /
that SPS); SB3 the wall time of model.learn(); trustrl from the start of its loop (the creation
of the run folder's tb/ by the TensorBoard writer, else of config.json) to the last checkpoint
write, by file mtimes: every iteration with its logging and checkpoint, and the greedy
evaluation trustrl runs in the last iteration. With tb/ present none of the three counts env
and network creation. "process s" is the whole process from launch to exit (imports, trustrl's
final evaluation and plot included), the same measure for every tool. The ratio is trustrl's
train SPS over the peer's.

Learning outcome: mean undiscounted return of the last 10 finished training episodes (raw
rewards for all three), per repetition; trustrl also reports its final greedy evaluation.
Learning curves: every finished training episode (global step, return) of every run, from
CleanRL's prints, SB3's Monitor files and trustrl's episodes.csv; the table gives, per tool,
mean ± std over seeds of the mean training return over the whole run and over its last 20% of
steps, and `--curves PATH.png` plots the binned curves (mean over seeds, min-max band).
Figures move with machine load: run on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

# Tool-neutral settings; names follow CleanRL's Args.
_COMMON: dict[str, Any] = {
    "anneal_lr": True, "gamma": 0.99, "gae_lambda": 0.95, "clip_coef": 0.2, "clip_vloss": True,
    "vf_coef": 0.5, "max_grad_norm": 0.5,
}
SETTINGS: dict[str, dict[str, Any]] = {
    "cartpole": dict(_COMMON, env_id="CartPole-v1", script="ppo.py", num_envs=4, num_steps=128,
                     update_epochs=4, num_minibatches=4, lr=2.5e-4, ent_coef=0.01,
                     norm_obs=False, norm_reward=False),
    "pendulum": dict(_COMMON, env_id="Pendulum-v1", script="ppo_continuous_action.py",
                     num_envs=1, num_steps=2048, update_epochs=10, num_minibatches=32, lr=3e-4,
                     ent_coef=0.0, norm_obs=True, norm_reward=True),
}
TOOLS = ("cleanrl", "sb3", "trustrl")


@dataclass
class Result:
    """One run of one tool."""

    tool: str
    steps: int
    train_seconds: float
    process_seconds: float
    peak_rss_mib: float
    last10_return: float | None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def sps(self) -> float:
        return self.steps / self.train_seconds


def budget(setting: dict[str, Any], steps: int) -> int:
    """Steps rounded down to whole iterations, as CleanRL and trustrl do (SB3 would round up)."""
    batch = setting["num_envs"] * setting["num_steps"]
    return steps // batch * batch


def thread_env(threads: int = 1) -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return env


def launch(cmd: list[str], cwd: Path, threads: int = 1) -> tuple[str, float, float, float]:
    """Run cmd to completion with `threads` OpenMP / MKL threads; returns (stdout, launch
    epoch, wall seconds, peak RSS MiB). Fails loudly with the tool's stderr tail: a crashed
    peer must not become a number."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t_launch = time.time()
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=thread_env(threads), stdout=out, stderr=err,
                                text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, errors = out.read(), err.read()
    if proc.returncode != 0:
        tail = "\n".join(errors.strip().splitlines()[-15:])
        raise SystemExit(f"failed ({proc.returncode}): {shlex.join(cmd)}\n{tail}")
    return text, t_launch, wall, usage.ru_maxrss / 1024  # ru_maxrss: KiB on Linux


# --- CleanRL -------------------------------------------------------------------------------
def cleanrl_command(s: dict[str, Any], seed: int, steps: int, cleanrl: Path,
                    python: str) -> list[str]:
    def flag(name: str, on: bool) -> str:
        return f"--{name}" if on else f"--no-{name}"

    if s["norm_obs"] != (s["script"] == "ppo_continuous_action.py"):
        raise SystemExit("CleanRL's normalisation is fixed by its script; setting disagrees")
    return [python, str(cleanrl / s["script"]), "--seed", str(seed), "--env-id", s["env_id"],
            "--total-timesteps", str(steps), "--num-envs", str(s["num_envs"]),
            "--num-steps", str(s["num_steps"]), "--update-epochs", str(s["update_epochs"]),
            "--num-minibatches", str(s["num_minibatches"]), "--learning-rate", str(s["lr"]),
            flag("anneal-lr", s["anneal_lr"]), "--gamma", str(s["gamma"]),
            "--gae-lambda", str(s["gae_lambda"]), "--clip-coef", str(s["clip_coef"]),
            flag("clip-vloss", s["clip_vloss"]), "--ent-coef", str(s["ent_coef"]),
            "--vf-coef", str(s["vf_coef"]), "--max-grad-norm", str(s["max_grad_norm"]),
            "--norm-adv", "--no-cuda"]


def parse_cleanrl(out: str) -> tuple[float, float | None, list[tuple[int, float]]]:
    """(seconds per env step, last-10 return, learning curve) from CleanRL's prints: `SPS: n`
    after each iteration is int(global_step / (time - start_time)), so the last one gives the
    training time (to 1 part in n); each finished episode prints its global step and return."""
    sps = [int(m) for m in re.findall(r"^SPS: (\d+)", out, re.M)]
    curve = [(int(g), float(r)) for g, r in re.findall(
        r"global_step=(\d+), episodic_return=\[?([-+\d.eE]+)", out)]
    rets = [r for _, r in curve]
    if not sps:
        raise SystemExit("CleanRL printed no SPS line")
    return 1.0 / sps[-1], (statistics.mean(rets[-10:]) if rets else None), curve


def run_cleanrl(s: dict[str, Any], seed: int, steps: int, a: argparse.Namespace) -> Result:
    with tempfile.TemporaryDirectory(prefix="bench-cleanrl-") as tmp:
        out, _, wall, rss = launch(
            cleanrl_command(s, seed, steps, Path(a.cleanrl), a.cleanrl_python), Path(tmp))
    per_step, last10, curve = parse_cleanrl(out)
    return Result("cleanrl", steps, steps * per_step, wall, rss, last10, {"curve": curve})


# --- SB3 -----------------------------------------------------------------------------------
def run_sb3(s: dict[str, Any], seed: int, steps: int, a: argparse.Namespace) -> Result:
    params = dict(s, total_steps=steps)
    cmd = [a.sb3_python, str(REPO / "benchmarks" / "peer_sb3.py"), "train",
           "--params", json.dumps(params), "--seed", str(seed)]
    with tempfile.TemporaryDirectory(prefix="bench-sb3-") as tmp:
        out, _, wall, rss = launch(cmd, Path(tmp))
    r = json.loads(next(x for x in out.splitlines() if x.startswith("RESULT "))[7:])
    return Result("sb3", r["steps"], r["train_seconds"], wall, rss, r["last10_return"],
                  {"curve": [tuple(x) for x in r.get("curve", [])]})


# --- trustrl -------------------------------------------------------------------------------
def trustrl_command(s: dict[str, Any], seed: int, steps: int, runs: Path,
                    extra: list[str]) -> list[str]:
    """The trustrl side: `trustrl train` with the same setting (edit here, or append options
    with --trustrl-args, e.g. "--set vector=sync" for the Gymnasium collector; the default
    picks the batched one on classic control)."""
    sets = {
        "num_envs": s["num_envs"], "num_steps": s["num_steps"],
        "update_epochs": s["update_epochs"],
        "minibatch_size": s["num_envs"] * s["num_steps"] // s["num_minibatches"],
        "lr": s["lr"], "anneal_lr": s["anneal_lr"], "adam_eps": 1e-5, "gamma": s["gamma"],
        "gae_lambda": s["gae_lambda"], "clip_eps": s["clip_coef"],
        "clip_value_loss": s["clip_vloss"], "ent_coef": s["ent_coef"], "vf_coef": s["vf_coef"],
        "max_grad_norm": s["max_grad_norm"], "norm_adv": True, "target_kl": "None",
        "normalize_obs": s["norm_obs"], "normalize_reward": s["norm_reward"], "obs_clip": 10.0,
        "reward_clip": 10.0, "hidden_sizes": "64,64", "activation": "tanh", "log_std_init": 0.0,
        "eval_every": 0, "torch_threads": 1, "device": "cpu",
    }
    cmd = [sys.executable, "-m", "trustrl", "train", "ppo", "--env", s["env_id"],
           "--seed", str(seed), "--total-steps", str(steps), "--runs-dir", str(runs), "--quiet"]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={str(v).lower() if isinstance(v, bool) else v}"]
    return cmd + extra


def parse_trustrl_run(run: Path) -> tuple[int, float, float | None, dict[str, Any]]:
    """(steps, training seconds, last-10 return, extras) from a trustrl run folder. Without a
    checkpoint the training seconds fall back to the loop time of metrics.csv (`wall_time`)."""
    import csv

    with open(run / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    loop = float(rows[-1]["wall_time"])
    ckpt = run / "checkpoints" / "latest.pt"
    # The loop starts right after the TensorBoard writer creates tb/ (as CleanRL's start_time
    # follows its SummaryWriter and env creation); without tb/, from config.json's creation.
    start = run / "tb" if (run / "tb").is_dir() else run / "config.json"
    seconds = ckpt.stat().st_mtime - start.stat().st_mtime if ckpt.is_file() else loop
    curve: list[tuple[int, float]] = []
    if (run / "episodes.csv").is_file():
        with open(run / "episodes.csv") as f:
            curve = [(int(r["global_step"]), float(r["return"])) for r in csv.DictReader(f)]
    rets = [r for _, r in curve]
    greedy = (json.loads((run / "eval.json").read_text())["mean"]
              if (run / "eval.json").is_file() else None)
    extras = {"loop_seconds": loop, "greedy_return": greedy, "curve": curve}
    return int(rows[-1]["global_step"]), seconds, (
        statistics.mean(rets[-10:]) if rets else None), extras


def run_trustrl(s: dict[str, Any], seed: int, steps: int, a: argparse.Namespace) -> Result:
    with tempfile.TemporaryDirectory(prefix="bench-trustrl-") as tmp:
        out, _, wall, rss = launch(
            trustrl_command(s, seed, steps, Path(tmp) / "runs", shlex.split(a.trustrl_args)),
            REPO)
        run = Path(next(x for x in out.splitlines() if x.startswith("run: "))[5:])
        n, seconds, last10, extras = parse_trustrl_run(run)
    return Result("trustrl", n, seconds, wall, rss, last10, extras)


RUNNERS: dict[str, Callable[[dict[str, Any], int, int, argparse.Namespace], Result]] = {
    "cleanrl": run_cleanrl, "sb3": run_sb3, "trustrl": run_trustrl,
}


# --- table ---------------------------------------------------------------------------------
def fmt_ret(xs: list[float | None]) -> str:
    vals = [x for x in xs if x is not None]
    if not vals:
        return "-"
    return f"{statistics.median(vals):.1f} [" + ", ".join(f"{x:.0f}" for x in vals) + "]"


def table(name: str, results: dict[str, list[Result]]) -> str:
    """Markdown table of one setting: medians over repetitions, ratios against trustrl."""
    med = {t: statistics.median(r.sps for r in rs) for t, rs in results.items()}
    lines = [f"### {name}", "",
             "| tool | steps | train s | train SPS | process s | process SPS | peak RSS MiB "
             "| trustrl / tool (train SPS) | last-10 return median [per repeat] |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for tool, rs in results.items():
        ratio = (f"{med['trustrl'] / med[tool]:.2f}x" if "trustrl" in med and tool != "trustrl"
                 else "")
        lines.append(
            f"| {tool} | {rs[0].steps} | {statistics.median(r.train_seconds for r in rs):.2f} "
            f"| {med[tool]:,.0f} | {statistics.median(r.process_seconds for r in rs):.2f} "
            f"| {statistics.median(r.steps / r.process_seconds for r in rs):,.0f} "
            f"| {statistics.median(r.peak_rss_mib for r in rs):.0f} | {ratio} "
            f"| {fmt_ret([r.last10_return for r in rs])} |")
    tr = results.get("trustrl")
    if tr:
        lines.append("")
        lines.append("trustrl final greedy return (10 episodes) per repeat: "
                     + ", ".join("-" if r.extra["greedy_return"] is None
                                 else f"{r.extra['greedy_return']:.1f}" for r in tr))
        lines.append("trustrl loop seconds per repeat (metrics.csv wall_time: iterations "
                     "without checkpoint and log writes): "
                     + ", ".join(f"{r.extra['loop_seconds']:.2f}" for r in tr))
    return "\n".join(lines)


# --- learning curves -------------------------------------------------------------------------
def curve_stats(curve: list[tuple[int, float]], steps: int) -> tuple[float, float]:
    """(mean return of all training episodes, mean return of those that ended in the last
    20% of the steps): the area under the curve and its end, per run."""
    if not curve:
        return math.nan, math.nan
    late = [r for g, r in curve if g > 0.8 * steps] or [curve[-1][1]]
    return statistics.mean(r for _, r in curve), statistics.mean(late)


def learning_table(results: dict[str, list[Result]]) -> str:
    """Mean ± std over repetitions (seeds) of each tool's curve statistics: "the same learning
    curve within seed noise" is read off these two columns and the plot."""
    lines = ["", "", "| tool | mean training return, whole run (mean ± std over seeds) "
             "| mean training return, last 20% of steps | seeds |", "|---|---|---|---:|"]
    for tool, rs in results.items():
        st = [curve_stats(r.extra.get("curve", []), r.steps) for r in rs]
        cols = []
        for i in (0, 1):
            v = [x[i] for x in st if x[i] == x[i]]
            sd = statistics.stdev(v) if len(v) > 1 else 0.0
            cols.append(f"{statistics.mean(v):.1f} ± {sd:.1f}" if v else "-")
        lines.append(f"| {tool} | {cols[0]} | {cols[1]} | {len(rs)} |")
    return "\n".join(lines)


def plot_curves(name: str, results: dict[str, list[Result]], path: str, bins: int = 20) -> None:
    """Per tool: the training return averaged in step bins, mean over seeds with the min-max
    band of the seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 4))
    for tool, rs in results.items():
        steps = rs[0].steps
        edges = np.linspace(0, steps, bins + 1)
        per_seed = []
        for r in rs:
            c = np.array(r.extra.get("curve", []), dtype=float).reshape(-1, 2)
            idx = np.digitize(c[:, 0], edges[1:-1])
            per_seed.append([c[idx == b, 1].mean() if (idx == b).any() else np.nan
                             for b in range(bins)])
        y = np.array(per_seed)
        mid = (edges[:-1] + edges[1:]) / 2
        line, = ax.plot(mid, np.nanmean(y, 0), label=f"{tool} ({len(rs)} seeds)")
        ax.fill_between(mid, np.nanmin(y, 0), np.nanmax(y, 0), alpha=0.15,
                        color=line.get_color())
    ax.set_xlabel("environment steps")
    ax.set_ylabel("training episode return (binned)")
    ax.set_title(name)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cleanrl", help="folder holding CleanRL's ppo.py and "
                   "ppo_continuous_action.py")
    p.add_argument("--cleanrl-python", help="python of the CleanRL venv")
    p.add_argument("--sb3-python", help="python of the Stable-Baselines3 venv")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=100_000, help="budget per run (default 100k)")
    p.add_argument("--settings", nargs="+", choices=sorted(SETTINGS),
                   default=["cartpole", "pendulum"])
    p.add_argument("--tools", nargs="+", choices=TOOLS, default=list(TOOLS))
    p.add_argument("--trustrl-args", default="", help="extra options for `trustrl train`")
    p.add_argument("--json", help="also write every run's numbers to this JSON file")
    p.add_argument("--curves", help="also plot the learning curves: PATH.png becomes "
                   "PATH_<setting>.png")
    a = p.parse_args()
    if "cleanrl" in a.tools and not (a.cleanrl and a.cleanrl_python):
        p.error("cleanrl needs --cleanrl DIR and --cleanrl-python PATH (or leave it out of "
                "--tools)")
    if "sb3" in a.tools and not a.sb3_python:
        p.error("sb3 needs --sb3-python PATH (or leave it out of --tools)")
    if a.repeats < 1 or a.steps < 1:
        p.error("--repeats and --steps must be positive")

    raw: dict[str, list[dict[str, Any]]] = {}
    print(f"# peers_cpu: {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, "
          f"one torch thread per tool; medians of {a.repeats}", flush=True)
    for name in a.settings:
        s = SETTINGS[name]
        steps = budget(s, a.steps)
        results: dict[str, list[Result]] = {t: [] for t in a.tools}
        for rep in range(a.repeats):
            for tool in a.tools:
                r = RUNNERS[tool](s, rep + 1, steps, a)
                results[tool].append(r)
                print(f"  {name} rep {rep + 1} {tool}: {r.sps:,.0f} SPS "
                      f"({r.train_seconds:.2f} s train, {r.process_seconds:.2f} s process), "
                      f"last-10 return {r.last10_return}", file=sys.stderr, flush=True)
        print(table(f"{name}: {s['env_id']}, {steps} steps", results)
              + learning_table(results) + "\n", flush=True)
        if a.curves:
            plot_curves(f"{s['env_id']}: the same PPO setting, {steps} steps", results,
                        a.curves.replace(".png", f"_{name}.png"))
        raw[name] = [vars(r) for rs in results.values() for r in rs]
    if a.json:
        Path(a.json).write_text(json.dumps(raw, indent=2) + "\n")


if __name__ == "__main__":
    main()
