"""The zoo's learning curve beside trustrl's, for a preset run below the zoo's budget (issue 19,
point 3: "the largest budget this machine allows in a few hours, with the zoo's curve at that
budget beside it").

    python benchmarks/zoo_curves.py --agents $ZOO_AGENTS --algo ppo \\
        --env BipedalWalkerHardcore-v3 --runs $SWEEPS/bwh/ppo --out $OUT

$ZOO_AGENTS is a clone of github.com/DLR-RM/rl-trained-agents, the agents behind the zoo's
benchmark.md: each `<algo>/<env>_1/evaluations.npz` is the EvalCallback record of its training
run (`timesteps` [E], `results` [E, episodes]: the policy's returns at each evaluation; the
zoo samples the actions of its Atari agents there and takes the mode elsewhere). --runs takes
trustrl run folders, or folders searched for them (a sweep's `trials/*/<run>/`), whose config
env_id is --env; their evaluations (eval_return_mean of metrics.csv, eval_initial.json at step
0; greedy, or sampled where the run's eval_deterministic is false) are the trustrl curve.

Prints, at trustrl's budget (the smallest final step of the runs): the zoo's evaluation
nearest that step and the mean of its evaluations in the last tenth up to it, beside each
seed's last evaluation and their median; then the zoo's score at its own budget. With
--at STEP ..., a second table: at each of those steps (and the budget) each seed's last
evaluation up to it, their median, and the zoo's evaluation nearest it. Then each seed's
evaluations up to the budget against the zoo's running mean of 9 evaluations at the same steps:
how many lie above it, and the gap on average, at its lowest and at its highest.
With --out, writes curve_<env>.png (each seed, the zoo's run up to 1.5x trustrl's budget, and
a line at the zoo's published score unless it would stretch the axis past three times the
curves' span: then the legend names it) and the two files it is drawn from:
zoo_<algo>_<env>.csv (the zoo's evaluations up to that point: step, mean, std) and
trustrl_<algo>_<env>.csv (each seed's evaluations: seed, mode, step, return), so the figure is
redrawn from committed files alone (`draw`; benchmarks/make_pages.py does).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from presets_sweep import zoo_score  # noqa: E402


def zoo_curve(agents: Path, algo: str, zoo_id: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps [E], mean return [E], std [E]) of the zoo agent's evaluations."""
    path = agents / algo / f"{zoo_id}_1" / "evaluations.npz"
    if not path.is_file():
        raise SystemExit(f"no {path}: --agents must be a clone of DLR-RM/rl-trained-agents")
    with np.load(path, allow_pickle=False) as d:  # plain arrays: never unpickled
        steps, results = np.asarray(d["timesteps"]), np.asarray(d["results"], dtype=float)
    return steps, results.mean(axis=1), results.std(axis=1)


def run_folders(paths: list[Path], env_id: str) -> list[Path]:
    """Run folders (a metrics.csv beside a config.json) at or under `paths` training env_id."""
    found = []
    for p in paths:
        for cfg in ([p / "config.json"] if (p / "config.json").is_file()
                    else sorted(p.rglob("config.json"))):
            run = cfg.parent
            if not (run / "metrics.csv").is_file():
                continue
            try:
                if json.loads(cfg.read_text()).get("env_id") == env_id:
                    found.append(run)
            except (OSError, ValueError):
                continue
    return found


def trustrl_curve(run: Path) -> tuple[int, np.ndarray, np.ndarray, str]:
    """(seed, steps, mean returns, 'greedy' or 'sampled') of one run folder's evaluations
    (trustrl report's reading)."""
    from trustrl.sweep.report import eval_curve
    from trustrl.util.progress import mode_word

    config = json.loads((run / "config.json").read_text())
    steps, rets = eval_curve(run)
    return (int(config.get("seed", 0)), np.array(steps), np.array(rets),
            mode_word(config.get("eval_deterministic")))


def zoo_mode(zoo_id: str) -> str:
    """How the zoo evaluated during training: sampled actions for Atari (its exp_manager's
    deterministic_eval = not is_atari), the mode elsewhere."""
    return "sampled" if "NoFrameskip" in zoo_id else "deterministic"


def last_at(steps: np.ndarray, rets: np.ndarray, step: int) -> float | None:
    """The last evaluation at or before `step` (None when there is none)."""
    up_to = rets[steps <= step]
    return float(up_to[-1]) if len(up_to) else None


def print_checkpoints(curves: list, z_steps: np.ndarray, z_mean: np.ndarray,
                      at: list[int]) -> None:
    """Both curves at each step of `at`: the seeds' last evaluations up to it, their median,
    and the zoo's evaluation nearest it."""
    print("\n| step | trustrl: median (seeds " + ", ".join(str(c[0]) for c in curves)
          + ") | the zoo's evaluation nearest |")
    print("|---:|---|---:|")
    for step in at:
        vals = [last_at(c[1], c[2], step) for c in curves]
        got = [v for v in vals if v is not None]
        med = f"{statistics.median(got):.1f}" if got else "-"
        each = ", ".join("-" if v is None else f"{v:.1f}" for v in vals)
        k = int(np.argmin(np.abs(z_steps - step)))
        print(f"| {step:,} | {med} ({each}) | {z_mean[k]:.1f} (at {int(z_steps[k]):,}) |")


def running_mean_curve(z_steps: np.ndarray, z_mean: np.ndarray,
                       width: int = 9) -> tuple[np.ndarray, np.ndarray]:
    """(centres, values) of the zoo's running mean of `width` consecutive evaluations, centred:
    defined from its (width // 2 + 1)-th evaluation to its (width // 2 + 1)-th last."""
    half = width // 2
    return (z_steps[half:len(z_steps) - half],
            np.convolve(z_mean, np.ones(width) / width, mode="valid"))


def running_mean(z_steps: np.ndarray, z_mean: np.ndarray, steps: np.ndarray,
                 width: int = 9) -> np.ndarray:
    """running_mean_curve read at `steps` by linear interpolation between its centres, held at
    its first (last) value before (after) them."""
    return np.interp(steps, *running_mean_curve(z_steps, z_mean, width))


def print_running_mean(curves: list, z_steps: np.ndarray, z_mean: np.ndarray, budget: int,
                       width: int = 9) -> None:
    """Each seed's evaluations in (0, budget] against the zoo's running mean of `width`
    evaluations at the same steps (running_mean): how many lie above it, and the gap
    (trustrl minus the zoo) on average, at its lowest and at its highest."""
    if len(z_steps) < width:
        return
    first = running_mean_curve(z_steps, z_mean, width)[0][0]
    print(f"\nthe zoo's running mean of {width} evaluations: defined from "
          f"{int(first):,} (held at its first value before)\n")
    print(f"| seed | evaluations above the zoo's running mean of {width} | mean gap "
          "| lowest gap (at step) | highest gap (at step) |")
    print("|---:|---:|---:|---:|---:|")
    for seed, steps, rets, _ in curves:
        keep = (steps > 0) & (steps <= budget)
        s, r = steps[keep], rets[keep]
        if not len(s):
            continue
        gap = r - running_mean(z_steps, z_mean, s, width)
        lo, hi = int(np.argmin(gap)), int(np.argmax(gap))
        print(f"| {seed} | {int((gap > 0).sum())} of {len(s)} | {gap.mean():+.1f} "
              f"| {gap[lo]:+.1f} (at {int(s[lo]):,}) | {gap[hi]:+.1f} (at {int(s[hi]):,}) |")


def score_in_view(score: float, lo: float, hi: float, stretch: float = 3.0) -> bool:
    """Whether a line at `score` fits on the plot of curves spanning [lo, hi] without making the
    axis more than `stretch` times their span (a 10M score far above a capped run's curves would
    flatten them to the floor: then the legend names the score and no line is drawn)."""
    span = hi - lo
    return span <= 0 or max(hi, score) - min(lo, score) <= stretch * span


def read_curves(folder: Path, algo: str, env: str
                ) -> tuple[np.ndarray, np.ndarray, list[tuple[int, np.ndarray, np.ndarray, str]]]:
    """The figure's data, as the script wrote it into `folder`: the zoo's evaluations (steps,
    means; zoo_<algo>_<env>.csv) and trustrl's per seed (seed, steps, returns, mode;
    trustrl_<algo>_<env>.csv). Plain CSV, read as data."""
    safe = env.replace("/", "-")
    with open(folder / f"zoo_{algo}_{safe}.csv", newline="") as f:
        zoo = [(int(r["step"]), float(r["mean"])) for r in csv.DictReader(f)]
    per_seed: dict[int, tuple[str, list[int], list[float]]] = {}
    with open(folder / f"trustrl_{algo}_{safe}.csv", newline="") as f:
        for r in csv.DictReader(f):
            mode, steps, rets = per_seed.setdefault(int(r["seed"]), (r["mode"], [], []))
            steps.append(int(r["step"]))
            rets.append(float(r["return"]))
    curves = [(seed, np.array(st), np.array(rt), mode)
              for seed, (mode, st, rt) in sorted(per_seed.items())]
    return (np.array([z[0] for z in zoo]), np.array([z[1] for z in zoo], dtype=float), curves)


def draw(folder: Path, algo: str, env: str) -> str | None:
    """Draw curve_<env>.png in `folder` from the two CSVs this script wrote there (read_curves):
    each trustrl seed, the zoo's run, trustrl's budget, and the zoo's published score (a line,
    or named in the legend when it lies far outside the curves: then returns that note).
    benchmarks/make_pages.py redraws every committed pair with this."""
    row = zoo_score(algo, env)
    if row is None:
        raise SystemExit(f"--env {env}: the zoo published no {algo} score for it")
    zoo_id, zoo_mean, _, zoo_budget = row
    zs, zm, curves = read_curves(folder, algo, env)
    budget = int(min(c[1][-1] for c in curves))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    label = f"the zoo's agent (SB3, {zoo_id}): {zoo_mode(zoo_id)}, 10 episodes"
    if len(zm) > 40:  # many evaluations: each one faint, a running mean of 9 drawn over them
        ax.plot(zs, zm, color="0.75", lw=0.6)
        ax.plot(*running_mean_curve(zs, zm), color="0.3", lw=1.4,
                label=label + " (running mean of 9)")
    else:
        ax.plot(zs, zm, color="0.4", lw=1.2, label=label)
    for seed, s, r, mode in curves:
        ax.plot(s, r, lw=1.2, label=f"trustrl seed {seed}: {mode}, 10 episodes")
    ax.axvline(budget, color="k", lw=0.8, ls=":")
    drawn = np.concatenate([zm] + [r for _, _, r, _ in curves])
    lo, hi = float(drawn.min()), float(drawn.max())
    score_label = f"the zoo's score at {zoo_budget}: {zoo_mean:.1f}"
    note = None
    if score_in_view(zoo_mean, lo, hi):
        ax.axhline(zoo_mean, color="0.4", lw=0.8, ls="--", label=score_label)
    else:
        side = "above" if zoo_mean > hi else "below"
        ax.plot([], [], " ", label=score_label + f" (far {side}: not drawn)")
        note = (f"the zoo's score at {zoo_budget} ({zoo_mean:.1f}) lies far outside the "
                f"curves' range ({lo:.1f} to {hi:.1f}): named in the legend, not drawn")
    ax.set_xlabel("env steps")
    ax.set_ylabel("evaluation return")
    ax.set_title(f"{algo.upper()} on {env}, zoo preset: trustrl's budget {budget:,} steps")
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(folder / f"curve_{env.replace('/', '-')}.png", dpi=110)
    plt.close(fig)
    return note


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--agents", required=True, type=Path, help="clone of rl-trained-agents")
    p.add_argument("--algo", default="ppo", choices=("ppo", "trpo"))
    p.add_argument("--env", required=True, help="trustrl's env id (the preset table's)")
    p.add_argument("--runs", nargs="+", type=Path, required=True,
                   help="run folders, or folders holding them (a sweep folder)")
    p.add_argument("--out", type=Path, help="write the plot and the zoo's curve here")
    p.add_argument("--at", nargs="+", type=int, default=[], metavar="STEP",
                   help="also tabulate both curves at these steps (each below the budget)")
    a = p.parse_args()
    row = zoo_score(a.algo, a.env)  # (the zoo's env id: older versions, mean, std, budget)
    if row is None:
        raise SystemExit(f"--env {a.env}: the zoo published no {a.algo} score for it")
    zoo_id, zoo_mean, zoo_sd, zoo_budget = row
    z_steps, z_mean, z_std = zoo_curve(a.agents, a.algo, zoo_id)
    runs = run_folders(a.runs, a.env)
    curves = sorted((trustrl_curve(r) for r in runs), key=lambda c: c[0])
    curves = [c for c in curves if len(c[1])]
    if not curves:
        raise SystemExit(f"no run of {a.env} with evaluations under {a.runs}")
    budget = int(min(c[1][-1] for c in curves))
    bad = [s for s in a.at if not 0 < s < budget]
    if bad:
        raise SystemExit(f"--at {bad[0]:,}: not a step between 0 and trustrl's budget {budget:,}")
    at = int(np.argmin(np.abs(z_steps - budget)))
    window = (z_steps > 0.9 * budget) & (z_steps <= budget)
    finals = [float(c[2][c[1] <= budget][-1]) for c in curves]
    print(f"### {a.algo.upper()} on {a.env} at {budget:,} steps: trustrl beside the zoo's run\n")
    modes = sorted({c[3] for c in curves})
    print(f"| | return at the budget (trustrl: {' and '.join(modes)}; the zoo: "
          f"{zoo_mode(zoo_id)}) | note |")
    print("|---|---:|---|")
    print(f"| trustrl, median of seeds {', '.join(str(c[0]) for c in curves)} "
          f"| {statistics.median(finals):.1f} | per seed: "
          f"{', '.join(f'{v:.1f}' for v in finals)} |")
    print(f"| the zoo's agent ({zoo_id}), evaluation at {int(z_steps[at]):,} "
          f"| {z_mean[at]:.1f} | ± {z_std[at]:.1f} over its 10 episodes |")
    if window.any():
        print(f"| the zoo's agent, mean of its {int(window.sum())} evaluations in "
              f"({0.9 * budget:,.0f}, {budget:,}] | {z_mean[window].mean():.1f} | "
              f"range {z_mean[window].min():.1f} to {z_mean[window].max():.1f} |")
    print(f"| the zoo's published score at its budget ({zoo_budget}) | {zoo_mean:.1f} "
          f"| ± {zoo_sd:.1f} |")
    if a.at:
        print_checkpoints(curves, z_steps, z_mean, sorted(set(a.at)) + [budget])
    print_running_mean(curves, z_steps, z_mean, budget)
    if a.out is None:
        return
    a.out.mkdir(parents=True, exist_ok=True)
    shown = z_steps <= 1.5 * budget
    safe = a.env.replace("/", "-")
    with open(a.out / f"zoo_{a.algo}_{safe}.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "mean", "std"])
        for s, m, sd in zip(z_steps[shown], z_mean[shown], z_std[shown], strict=True):
            w.writerow([int(s), f"{m:.3f}", f"{sd:.3f}"])
    with open(a.out / f"trustrl_{a.algo}_{safe}.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["seed", "mode", "step", "return"])
        for seed, steps, rets, mode in curves:
            for s, r in zip(steps, rets, strict=True):
                w.writerow([seed, mode, int(s), repr(float(r))])
    note = draw(a.out, a.algo, a.env)
    if note:
        print(f"\n{note}")
    print(f"\nwrote {a.out / f'curve_{safe}.png'}, {a.out / f'zoo_{a.algo}_{safe}.csv'} and "
          f"{a.out / f'trustrl_{a.algo}_{safe}.csv'}")


if __name__ == "__main__":
    main()
