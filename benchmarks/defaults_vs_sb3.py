"""trustrl's generic defaults (no preset) against SB3's default PPO on standard envs (issue 19.2).

    python benchmarks/defaults_vs_sb3.py --out OUT --sb3-python SB3_PYTHON \\
        [--envs CartPole-v1,Pendulum-v1,...] [--seeds 3] [--total-steps 200000] [--jobs 2]
    python benchmarks/defaults_vs_sb3.py --out OUT --tools trustrl --tag norm \\
        --set normalize_obs=true --set normalize_reward=true      # a variant of the defaults
    python benchmarks/defaults_vs_sb3.py --out OUT --report-only  # tables and plots again

Each run is what a user without a preset gets:
- trustrl: `trustrl train --env ENV --preset none --seed S --total-steps B --runs-dir
  OUT/trustrl/ENV` (plus `--set KEY=VALUE` of a variant, whose runs go to OUT/trustrl-TAG/);
- SB3: `PPO("MlpPolicy", ENV, seed=S).learn(B)` in the SB3 venv (`benchmarks/peer_sb3.py
  default`), then 10 greedy episodes reset with seeds S + 10000 + i, trustrl's evaluation
  protocol (its eval.json after the last iteration).

Each finished run leaves OUT/TOOL/ENV/seedS.json (final greedy returns, the curve of training
episode returns, versions, seconds); a run whose file exists is not run again (resumable). The
report (`OUT/report.md` and one `OUT/curves_ENV.png` per env) gives per env and per tool the
median final greedy return over seeds, its min and max, each seed's value, and the verdict
"trustrl median >= SB3 median". Runs go `--jobs` at a time (default 2), each under
`nice -n --nice` (default 19). Standard library plus matplotlib (for the plots) only.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

CLASSIC = ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0",
           "Pendulum-v1"]
BOX2D = ["LunarLander-v3", "LunarLanderContinuous-v3", "BipedalWalker-v3"]
MUJOCO = ["InvertedPendulum-v5", "InvertedDoublePendulum-v5", "Reacher-v5", "Swimmer-v5",
          "Hopper-v5", "HalfCheetah-v5"]
DEFAULT_ENVS = CLASSIC + BOX2D + MUJOCO
"""The default set; envs whose packages are missing (Box2D, MuJoCo) are left out with a note."""


class UsageError(Exception):
    """Bad input: one line on stderr, exit status 2."""


def available(env_id: str) -> str | None:
    """None if gym.make(env_id) works in this Python, else the reason in a few words."""
    import gymnasium as gym

    try:
        gym.make(env_id).close()
    except Exception as exc:  # noqa: BLE001 - any failure means: not runnable here
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
    return None


def parse_seeds(text: str) -> list[int]:
    """'3' -> [1, 2, 3]; '1,5,9' -> those; 'A-B' -> A..B."""
    try:
        if "," in text:
            seeds = [int(s) for s in text.split(",") if s.strip()]
        elif "-" in text.strip()[1:]:
            a, b = text.split("-", 1)
            seeds = list(range(int(a), int(b) + 1))
        else:
            seeds = list(range(1, int(text) + 1))
    except ValueError:
        raise UsageError(f"--seeds {text!r}: a count (3), a list (1,2,3) or a range (1-3)") from None
    if not seeds or min(seeds) < 0:
        raise UsageError(f"--seeds {text!r}: at least one seed, none negative")
    return seeds


def tool_dir(tag: str | None) -> str:
    return "trustrl" if not tag else f"trustrl-{tag}"


# ----- one run ---------------------------------------------------------------------------------
def run_trustrl(env_id: str, seed: int, steps: int, out: Path, tag: str | None,
                sets: list[str], nice: int, trustrl_cmd: list[str]) -> dict[str, Any]:
    runs_dir = out / tool_dir(tag) / env_id / f"seed{seed}-runs"
    shutil.rmtree(runs_dir, ignore_errors=True)  # a run cut short starts again
    cmd = trustrl_cmd + ["train", "--env", env_id, "--preset", "none", "--seed", str(seed),
                         "--total-steps", str(steps), "--runs-dir", str(runs_dir), "--quiet"]
    for kv in sets:
        cmd += ["--set", kv]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=_niceness(nice))
    if proc.returncode != 0:
        raise RuntimeError(f"trustrl exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    (run,) = [d for d in runs_dir.iterdir() if d.is_dir()]
    final = json.loads((run / "eval.json").read_text())
    with open(run / "episodes.csv") as f:
        curve = [(int(r["global_step"]), float(r["return"])) for r in csv.DictReader(f)]
    with open(run / "metrics.csv") as f:
        greedy = [(int(r["global_step"]), float(r["eval_return_mean"]))
                  for r in csv.DictReader(f) if r.get("eval_return_mean")]
    config = json.loads((run / "config.json").read_text())
    import gymnasium
    import torch

    import trustrl
    return {"tool": tool_dir(tag), "env_id": env_id, "seed": seed, "total_steps": steps,
            "steps": int(final["global_step"]), "final_returns": final["returns"],
            "final_mean": final["mean"], "wall_seconds": time.time() - t0, "command": cmd[len(trustrl_cmd):],
            "config": {k: config.get(k) for k in
                       ("preset", "num_envs", "num_steps", "vector", "lr", "anneal_lr",
                        "update_epochs", "minibatch_size", "normalize_obs",
                        "normalize_reward", "gamma", "gae_lambda", "ent_coef")},
            "versions": {"trustrl": getattr(trustrl, "__version__", "?"),
                         "gymnasium": gymnasium.__version__, "torch": torch.__version__},
            "curve": sorted(curve), "greedy_curve": greedy}


def run_sb3(env_id: str, seed: int, steps: int, sb3_python: str, nice: int) -> dict[str, Any]:
    cmd = [sb3_python, str(HERE / "peer_sb3.py"), "default", "--env", env_id, "--seed",
           str(seed), "--total-steps", str(steps)]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=_niceness(nice))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"SB3 exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    result = json.loads(lines[-1][len("RESULT "):])
    result.update({"tool": "sb3", "total_steps": steps, "wall_seconds": time.time() - t0,
                   "command": ["peer_sb3.py"] + cmd[2:]})
    return result


def _niceness(n: int) -> Callable[[], None] | None:
    return (lambda: os.nice(n)) if n > 0 and hasattr(os, "nice") else None


# ----- the report ------------------------------------------------------------------------------
def load(out: Path) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """{tool: {env: [run, ...] by seed}} of every finished run under OUT."""
    found: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for f in sorted(out.glob("*/*/seed*.json")):
        try:
            r = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        found.setdefault(f.parent.parent.name, {}).setdefault(f.parent.name, []).append(r)
    for envs in found.values():
        for runs in envs.values():
            runs.sort(key=lambda r: r["seed"])
    return found


def _fmt(v: float) -> str:
    return f"{v:.1f}"


def report(out: Path, envs: list[str] | None = None, plot_tools: list[str] | None = None) -> str:
    data = load(out)
    tools = sorted(data, key=lambda t: (t != "sb3", t != "trustrl", t))
    env_order = envs or sorted({e for t in data.values() for e in t})
    lines = ["| env | tool | seeds | median | min | max | per seed (greedy, 10 episodes) "
             "| median >= SB3's |", "|---|---|---|---|---|---|---|---|"]
    wins: dict[str, list[int]] = {}
    for env in env_order:
        sb3 = data.get("sb3", {}).get(env, [])
        sb3_med = statistics.median([r["final_mean"] for r in sb3]) if sb3 else None
        for tool in tools:
            runs = data[tool].get(env, [])
            if not runs:
                continue
            finals = [r["final_mean"] for r in runs]
            med = statistics.median(finals)
            verdict = ""
            if tool != "sb3" and sb3_med is not None:
                ok = med >= sb3_med
                verdict = "yes" if ok else "**no**"
                w = wins.setdefault(tool, [0, 0])
                w[0] += int(ok)
                w[1] += 1
            per_seed = ", ".join(f"{r['seed']}: {_fmt(r['final_mean'])}" for r in runs)
            lines.append(f"| {env} | {tool} | {len(runs)} | {_fmt(med)} | {_fmt(min(finals))} "
                         f"| {_fmt(max(finals))} | {per_seed} | {verdict} |")
    lines.append("")
    for tool, (won, n) in sorted(wins.items()):
        lines.append(f"- {tool}: median >= SB3's median on {won} of {n} envs")
    # The same medians side by side: one row per env, one column per tool ('<' marks a median
    # below SB3's).
    lines += ["", "| env | " + " | ".join(tools) + " |", "|---" * (len(tools) + 1) + "|"]
    for env in env_order:
        sb3 = data.get("sb3", {}).get(env, [])
        sb3_med = statistics.median([r["final_mean"] for r in sb3]) if sb3 else None
        cells = []
        for tool in tools:
            runs = data[tool].get(env, [])
            if not runs:
                cells.append("")
                continue
            med = statistics.median([r["final_mean"] for r in runs])
            below = tool != "sb3" and sb3_med is not None and med < sb3_med
            cells.append(f"{_fmt(med)}{' <' if below else ''}")
        lines.append(f"| {env} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    (out / "report.md").write_text(text)
    for env in env_order:
        plot(out, env, {t: data[t].get(env, []) for t in (plot_tools or tools)
                        if data.get(t, {}).get(env)})
    return text


def binned(curve: list[list[float]], steps: int, bins: int = 50) -> list[float | None]:
    """Mean training-episode return of the last 10 episodes finished by each bin's end."""
    out: list[float | None] = []
    i, recent = 0, []
    for b in range(1, bins + 1):
        edge = steps * b / bins
        while i < len(curve) and curve[i][0] <= edge:
            recent = (recent + [curve[i][1]])[-10:]
            i += 1
        out.append(sum(recent) / len(recent) if recent else None)
    return out


def plot(out: Path, env: str, runs_by_tool: dict[str, list[dict[str, Any]]]) -> None:
    if not runs_by_tool:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for tool, runs in runs_by_tool.items():
        steps = max(r["total_steps"] for r in runs)
        xs = [steps * (b + 1) / 50 for b in range(50)]
        per_seed = [binned(r["curve"], steps) for r in runs]
        med, lo, hi, xk = [], [], [], []
        for k, x in enumerate(xs):
            vals = [c[k] for c in per_seed if c[k] is not None]
            if vals:
                xk.append(x)
                med.append(statistics.median(vals))
                lo.append(min(vals))
                hi.append(max(vals))
        (line,) = ax.plot(xk, med, label=f"{tool} (median of {len(runs)} seeds)")
        ax.fill_between(xk, lo, hi, alpha=0.2, color=line.get_color())
    ax.set_title(f"{env}: training-episode return (mean of the last 10), min-max band")
    ax.title.set_fontsize(9)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("return")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / f"curves_{env}.png", dpi=90)
    plt.close(fig)


# ----- main ------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder of the runs and the report")
    p.add_argument("--sb3-python", help="the SB3 venv's python (benchmarks/setup_peers.py)")
    p.add_argument("--envs", help="comma-separated env ids (default: " + ",".join(DEFAULT_ENVS)
                   + ", those that install here)")
    p.add_argument("--seeds", default="3", help="a count (3: seeds 1-3), a list or a range")
    p.add_argument("--total-steps", type=int, default=200_000)
    p.add_argument("--tools", default="trustrl,sb3", help="trustrl, sb3 or both")
    p.add_argument("--tag", help="name of a trustrl variant: its runs go to OUT/trustrl-TAG")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="a trustrl config key of the variant (repeatable; needs --tag)")
    p.add_argument("--jobs", type=int, default=2, help="runs at a time (default 2)")
    p.add_argument("--nice", type=int, default=19, help="niceness of each run (default 19)")
    p.add_argument("--trustrl", default=f"{sys.executable} -m trustrl",
                   help="the command that runs trustrl's CLI (default: this python -m trustrl)")
    p.add_argument("--plot-tools", help="comma-separated tools in the plots (default: all)")
    p.add_argument("--report-only", action="store_true", help="only the tables and plots")
    a = p.parse_args(argv)
    try:
        out = Path(a.out)
        if a.report_only:
            if not out.is_dir():
                raise UsageError(f"--out {a.out}: no such folder")
            envs = a.envs.split(",") if a.envs else None
            print(report(out, envs, a.plot_tools.split(",") if a.plot_tools else None))
            return 0
        tools = [t for t in a.tools.split(",") if t]
        if not tools or set(tools) - {"trustrl", "sb3"}:
            raise UsageError(f"--tools {a.tools!r}: trustrl, sb3 or trustrl,sb3")
        if a.sets and not a.tag:
            raise UsageError("--set makes a variant of the defaults: name it with --tag")
        if a.tag and not a.tag.replace("_", "").replace("-", "").replace(".", "").isalnum():
            raise UsageError(f"--tag {a.tag!r}: letters, digits, '-', '_' and '.' only")
        if any("=" not in kv for kv in a.sets):
            raise UsageError("--set takes KEY=VALUE")
        if "sb3" in tools:
            if not a.sb3_python:
                raise UsageError("--sb3-python is needed to run SB3 (or --tools trustrl)")
            if not Path(a.sb3_python).is_file():
                raise UsageError(f"--sb3-python {a.sb3_python}: no such file")
        if a.total_steps < 1 or a.jobs < 1:
            raise UsageError("--total-steps and --jobs must be positive")
        seeds = parse_seeds(a.seeds)
        envs = a.envs.split(",") if a.envs else DEFAULT_ENVS
        runnable = []
        for env in envs:
            why = available(env)
            if why:
                print(f"skipped {env}: {why}", file=sys.stderr)
            else:
                runnable.append(env)
        if not runnable:
            raise UsageError("no env of --envs runs here")
    except UsageError as exc:
        print(f"defaults_vs_sb3: {exc}", file=sys.stderr)
        return 2

    out.mkdir(parents=True, exist_ok=True)
    trustrl_cmd = a.trustrl.split()
    jobs = []
    for env in runnable:
        for seed in seeds:
            for tool in tools:
                name = tool_dir(a.tag) if tool == "trustrl" else "sb3"
                target = out / name / env / f"seed{seed}.json"
                if not target.exists():
                    jobs.append((tool, env, seed, target))
    print(f"{len(jobs)} runs to do ({a.jobs} at a time), the others are done", flush=True)

    def do(job: tuple[str, str, int, Path]) -> None:
        tool, env, seed, target = job
        try:
            if tool == "trustrl":
                r = run_trustrl(env, seed, a.total_steps, out, a.tag, a.sets, a.nice, trustrl_cmd)
            else:
                r = run_sb3(env, seed, a.total_steps, a.sb3_python, a.nice)
        except Exception as exc:  # noqa: BLE001 - one failed run is reported, the rest go on
            print(f"FAILED {tool_dir(a.tag) if tool == 'trustrl' else tool} {env} seed {seed}: "
                  f"{exc}", flush=True)
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps(r))
        tmp.replace(target)
        print(f"{r['tool']:>16} {env:<26} seed {seed}: {r['final_mean']:9.1f} "
              f"({r['wall_seconds']:.0f} s)", flush=True)

    with ThreadPoolExecutor(max_workers=a.jobs) as pool:
        list(pool.map(do, jobs))
    print(report(out, runnable, a.plot_tools.split(",") if a.plot_tools else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
