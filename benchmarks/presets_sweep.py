"""Check trustrl's rl-baselines3-zoo presets against the zoo's published scores (issue 19,
point 3): one `trustrl sweep` per algorithm over every preset env that runs here, then a
table of our final evaluation returns beside the zoo's.

    python benchmarks/presets_sweep.py --out $SWEEPS/presets                  # zoo budgets
    python benchmarks/presets_sweep.py --out $SWEEPS/presets --max-steps 1000000 --workers 2
    python benchmarks/presets_sweep.py --out $SWEEPS/presets --table          # table only
    python benchmarks/presets_sweep.py --out "$(mktemp -d)" --algo ppo --env CartPole-v1 \
        --max-steps 2048 --seeds 1                                            # a smoke run

Each algorithm's SPEC is written to OUT/<algo>.yaml and run into OUT/<algo>/ (an existing
sweep folder is resumed: finished trials are kept). Every trial is `trustrl train --env ENV
--preset zoo --seed S`, with total_steps capped at --max-steps (a capped trial keeps the
zoo's schedules: anneal_steps is the zoo's budget, so at every step its learning rate and clip
range are the zoo's run's; --anneal-over-cap anneals over the cap instead). Envs whose extra is not
installed (Box2D, MuJoCo, Atari's ale-py) are listed as skipped. `trustrl report OUT/<algo>`
then draws the curves and steps-to-threshold (the threshold: the zoo's mean minus its std).

The zoo's numbers: benchmark.md of DLR-RM/rl-baselines3-zoo (last changed in commit
61a0d1349fa9, 2023-04-11; unchanged at 22e3ff2450fd, the commit the presets come from):
`python -m rl_zoo3.benchmark`, one trained agent per env, its deterministic policy run for
about 150k steps; mean and std over those episodes (not over seeds), with the env id and
budget it was trained on (older ids: LunarLander-v2, MuJoCo v3). Our column: the final
evaluation (10 episodes; greedy, sampled for the Atari games as the zoo's) of each seed, their
median and the seeds' values. Verdict: 'yes' when our median reaches the zoo's mean minus its
std, else 'no'; a row with a preset the zoo did not benchmark says so.
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
from pathlib import Path

ZOO_BENCHMARK = "DLR-RM/rl-baselines3-zoo benchmark.md @ 61a0d1349fa9"

ZOO_SCORES: dict[tuple[str, str], tuple[str, float, float, str]] = {
    # (algo, the zoo's env family): (zoo env id, mean_reward, std_reward, n_timesteps)
    ("ppo", "Acrobot"): ("Acrobot-v1", -73.506, 18.201, "1M"),
    ("ppo", "Ant"): ("Ant-v3", 1327.158, 451.577, "1M"),
    ("ppo", "BipedalWalker"): ("BipedalWalker-v3", 287.939, 2.448, "5M"),
    ("ppo", "BipedalWalkerHardcore"): ("BipedalWalkerHardcore-v3", 122.374, 117.605, "100M"),
    ("ppo", "CartPole"): ("CartPole-v1", 500.000, 0.000, "100k"),
    ("ppo", "HalfCheetah"): ("HalfCheetah-v3", 5819.099, 663.530, "1M"),
    ("ppo", "Hopper"): ("Hopper-v3", 2410.435, 10.026, "1M"),
    ("ppo", "LunarLander"): ("LunarLander-v2", 242.119, 31.823, "1M"),
    ("ppo", "LunarLanderContinuous"): ("LunarLanderContinuous-v2", 270.863, 32.072, "1M"),
    ("ppo", "MountainCar"): ("MountainCar-v0", -110.423, 19.473, "1M"),
    ("ppo", "MountainCarContinuous"): ("MountainCarContinuous-v0", 88.343, 2.572, "20k"),
    # the Atari games: the zoo evaluates these with its stochastic policy (deterministic
    # elsewhere), whole games, raw scores; so do ours (the presets' eval_deterministic false)
    ("ppo", "AsteroidsNoFrameskip"): ("AsteroidsNoFrameskip-v4", 2156.174, 744.640, "10M"),
    ("ppo", "BeamRiderNoFrameskip"): ("BeamRiderNoFrameskip-v4", 3397.000, 1662.368, "10M"),
    ("ppo", "BreakoutNoFrameskip"): ("BreakoutNoFrameskip-v4", 398.033, 33.328, "10M"),
    ("ppo", "EnduroNoFrameskip"): ("EnduroNoFrameskip-v4", 996.364, 176.090, "10M"),
    ("ppo", "MsPacmanNoFrameskip"): ("MsPacmanNoFrameskip-v4", 1754.356, 172.783, "10M"),
    ("ppo", "PongNoFrameskip"): ("PongNoFrameskip-v4", 20.989, 0.105, "10M"),
    ("ppo", "QbertNoFrameskip"): ("QbertNoFrameskip-v4", 15627.108, 3313.538, "10M"),
    ("ppo", "RoadRunnerNoFrameskip"): ("RoadRunnerNoFrameskip-v4", 40680.645, 6675.058, "10M"),
    ("ppo", "SeaquestNoFrameskip"): ("SeaquestNoFrameskip-v4", 1783.636, 34.096, "10M"),
    ("ppo", "SpaceInvadersNoFrameskip"): ("SpaceInvadersNoFrameskip-v4", 960.331, 425.355,
                                          "10M"),
    ("ppo", "Pendulum"): ("Pendulum-v1", -172.225, 104.159, "100k"),
    ("ppo", "Swimmer"): ("Swimmer-v3", 281.561, 9.671, "1M"),
    ("ppo", "Walker2d"): ("Walker2d-v3", 3478.798, 821.708, "1M"),
    ("trpo", "Acrobot"): ("Acrobot-v1", -83.114, 18.648, "100k"),
    ("trpo", "Ant"): ("Ant-v3", 4982.301, 663.761, "1M"),
    ("trpo", "BipedalWalker"): ("BipedalWalker-v3", 182.339, 145.570, "1M"),
    ("trpo", "CartPole"): ("CartPole-v1", 500.000, 0.000, "100k"),
    ("trpo", "HalfCheetah"): ("HalfCheetah-v3", 1785.476, 68.672, "1M"),
    ("trpo", "Hopper"): ("Hopper-v3", 3618.386, 356.768, "1M"),
    ("trpo", "LunarLander"): ("LunarLander-v2", 133.166, 112.173, "200k"),
    ("trpo", "LunarLanderContinuous"): ("LunarLanderContinuous-v2", 262.387, 21.428, "200k"),
    ("trpo", "MountainCar"): ("MountainCar-v0", -107.278, 13.231, "100k"),
    ("trpo", "MountainCarContinuous"): ("MountainCarContinuous-v0", 92.489, 0.355, "50k"),
    ("trpo", "Pendulum"): ("Pendulum-v1", -174.631, 127.577, "100k"),
    ("trpo", "Swimmer"): ("Swimmer-v3", 365.663, 2.087, "1M"),
    ("trpo", "Walker2d"): ("Walker2d-v3", 4933.148, 1452.538, "1M"),
}
"""The zoo's published PPO and TRPO rows (ZOO_BENCHMARK); no row for PPO on Humanoid,
HumanoidStandup, InvertedDoublePendulum, InvertedPendulum and Reacher, nor for TRPO on
Humanoid and BipedalWalkerHardcore."""


def zoo_score(algo: str, env_id: str) -> tuple[str, float, float, str] | None:
    return ZOO_SCORES.get((algo, env_id.rpartition("-")[0]))


def preset_envs(algo: str) -> list[str]:
    from trustrl.settings.presets import ZOO_PRESETS, unusable

    return [e for (a, e) in ZOO_PRESETS if a == algo and not unusable("zoo", a, e)]


def runnable(env_id: str) -> str | None:
    """None if the env can be made here, else why not (one line)."""
    from trustrl.envs.make import check_env
    from trustrl.util.errors import TrustrlError

    try:
        check_env(env_id)
    except TrustrlError as e:
        return str(e).splitlines()[0]
    return None


def write_spec(path: Path, algo: str, envs: list[str], seeds: str, max_steps: int | None,
               anneal_over_cap: bool = False, eval_every: int | None = None) -> None:
    """A capped trial keeps its preset's schedules, learning rate and clip range (anneal_steps
    = the zoo's budget), unless anneal_over_cap, which anneals them to 0 over the cap."""
    import yaml

    from trustrl.settings.presets import ZOO_PRESETS

    env_block = {}
    for env in envs:
        settings: dict[str, object] = {}
        preset = ZOO_PRESETS[(algo, env)]
        budget = preset["total_steps"]
        overrides: dict[str, object] = {}
        if max_steps is not None and budget > max_steps:
            settings["total_steps"] = max_steps
            if (preset.get("anneal_lr") or preset.get("anneal_clip")) and not anneal_over_cap:
                overrides["anneal_steps"] = budget
        if eval_every is not None:
            overrides["eval_every"] = eval_every
        if overrides:
            settings["overrides"] = overrides
        score = zoo_score(algo, env)
        if score is not None:
            settings["threshold"] = round(score[1] - score[2], 3)
        env_block[env] = settings
    seed_list: object = seeds if ".." in seeds else [int(x) for x in seeds.split(",")]
    spec = {"name": f"presets_{algo}", "seeds": seed_list, "algos": [algo],
            "common": {"preset": "zoo", "eval_episodes": 10, "tensorboard": False},
            "envs": env_block}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# written by benchmarks/presets_sweep.py: {algo} on its zoo presets\n"
                    + yaml.safe_dump(spec, sort_keys=False))


def run_sweep(spec: Path, out: Path, workers: int | None) -> int:
    cmd = [sys.executable, "-m", "trustrl", "sweep"]
    cmd += ["--resume", str(out)] if (out / "sweep.json").is_file() else [str(spec), "--out",
                                                                          str(out)]
    if workers:
        cmd += ["--workers", str(workers)]
    print("$", " ".join(cmd[1:]), flush=True)
    return subprocess.call(cmd)


def table(out: Path, algo: str) -> list[str]:
    from trustrl.sweep.folder import SweepFolder
    from trustrl.sweep.report import InvalidTrial, load_trial

    folder = SweepFolder.open(out)
    finals: dict[str, dict[int, float]] = {}
    budgets: dict[str, int] = {}
    for trial in folder.trials:
        budgets[trial.env_id] = int(trial.config["total_steps"])
        result = folder.result(trial)
        if not result or result.get("status") != "finished":
            continue
        try:
            finals.setdefault(trial.env_id, {})[trial.seed] = load_trial(folder, trial,
                                                                         result).final
        except InvalidTrial:
            continue
    rows = [f"| {algo} env | steps | ours: median (per seed) | zoo ({ZOO_BENCHMARK}) | reached |",
            "|---|---|---|---|---|"]
    for env, budget in budgets.items():
        got = finals.get(env, {})
        med = statistics.median(got.values()) if got else math.nan
        ours = (f"{med:.1f} ({', '.join(f'{got[s]:.1f}' for s in sorted(got))})" if got
                else "not finished")
        score = zoo_score(algo, env)
        if score is None:
            zoo, verdict = "no published score", "-"
        else:
            zid, mean, std, steps = score
            zoo = f"{mean:.1f} ± {std:.1f} ({zid}, {steps})"
            verdict = "-" if not got else ("yes" if med >= mean - std else "no")
        rows.append(f"| {env} | {budget:,} | {ours} | {zoo} | {verdict} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder of the sweeps (one per algorithm)")
    p.add_argument("--algo", nargs="+", default=["ppo", "trpo"], choices=("ppo", "trpo"))
    p.add_argument("--env", nargs="+", help="only these envs (default: every preset env)")
    p.add_argument("--seeds", default="1..3",
                   help="seeds of every env: A..B or a list 1,2,5 (default 1..3)")
    p.add_argument("--max-steps", type=int, help="cap each trial's budget (default: the "
                   "zoo's n_timesteps)")
    p.add_argument("--anneal-over-cap", action="store_true", help="a capped trial anneals "
                   "its learning rate and clip range to 0 over the cap (default: over the "
                   "zoo's budget, as the zoo's run at that step)")
    p.add_argument("--eval-every", type=int, help="evaluate every N iterations (default: "
                   "the preset's)")
    p.add_argument("--workers", type=int, help="trials at once (default: the cores)")
    p.add_argument("--table", action="store_true", help="print the table of OUT; run nothing")
    p.add_argument("--spec-only", action="store_true", help="write the SPECs; run nothing")
    args = p.parse_args(argv)
    out = Path(args.out)
    tables = []
    for algo in args.algo:
        folder = out / algo
        if not args.table:
            envs = [e for e in preset_envs(algo) if args.env is None or e in args.env]
            ok = []
            for env in envs:
                why = runnable(env)
                if why:
                    print(f"skipped {algo} on {env}: {why}")
                else:
                    ok.append(env)
            if not ok:
                print(f"no {algo} preset env runs here")
                continue
            spec = out / f"{algo}.yaml"
            write_spec(spec, algo, ok, args.seeds, args.max_steps, args.anneal_over_cap,
                       args.eval_every)
            print(f"wrote {spec} ({len(ok)} envs)")
            if args.spec_only:
                continue
            rc = run_sweep(spec, folder, args.workers)
            if rc != 0:
                print(f"the {algo} sweep exited with {rc}; the table shows what finished")
        if (folder / "sweep.json").is_file():
            tables.append("\n".join(table(folder, algo)))
    if tables:
        print("\n\n".join(tables))
    return 0


if __name__ == "__main__":
    sys.exit(main())
