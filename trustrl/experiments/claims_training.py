"""Claims that need training runs: the CartPole lab (Exercise 9.10) and its diagnostics, the
K sweep (Exercise 9.8), and the blog's Pendulum graphs. Runs go two at a time (2 cores).

Every figure here comes from training runs, and a run is one trajectory: another seed, or
another machine's floating-point kernels, gives another. So each check is made over several
seeds (three at quick scale, five in full) with Result.over_seeds: the median over the seeds
against the stated range widened by twice the seeds' sd, the text's figure being one run's.
Direction statements ("rises with K", "full PPO ends highest") are checked the same way on the
per-seed paired difference, whose sign is the statement. The CartPole runs pin the Gymnasium
path (vector "sync"): the lab's figures are those of `trustrl train` on Gymnasium's CartPole.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trustrl.experiments.registry import Context, Result, claim
from trustrl.records.plotting import moving_average
from trustrl.util.children import child_pool

LAB_STEPS = 40_960  # "40k steps": 80 iterations of 512
LAB_SEEDS = dict(full=5, quick=3)  # seeds 1..n (shifted by the context's seed offset)

NOCLIP_NEAR_DETERMINISTIC = (
    "After its first update the unclipped policy is nearly deterministic (entropy about 0.02): "
    "most sampled actions have probability close to 1 under both the old and the new policy, "
    "so their ratios stay near 1 while the KL per update, carried by the rare other actions, "
    "is large (median 1-10 here). A clip fraction below 0.3 next to a KL of 1-10 is what a "
    "collapsed policy looks like; on a seed where the policy becomes exactly deterministic "
    "both numbers drop to 0. The rule of thumb assumes a policy that still explores.")

NOCLIP_COLLAPSE = (
    "While the unclipped policy still moves (its first dozen or so updates) its KL per update "
    "is in the text's range or above (2 to 24 on seed 1); then it becomes exactly "
    "deterministic in float32 (entropy 0), every ratio is 1 and every later update has KL 0 "
    "and clip fraction 0, so the median over the whole run is 0 on such a seed. The text's "
    "figures describe the moving phase; the collapse itself is the chapter's point.")

TK_UNCLIPPED_LATE_DIPS = (
    "'Reaches about 400 by 40k' is judged on the best 5-iteration average up to 40k steps: "
    "the unclipped learner with target_kl 0.01 gets to 448-500 on every one of seeds 1-16, "
    "but it can still dip late, so its last 5 batches are bimodal over those seeds (155-228 "
    "on 5 of them, 411-500 on the rest) and the median of three seeds' endings flips with "
    "the trajectories of another machine.")


def _train_rows(job: dict[str, Any]) -> list[dict[str, Any]]:
    """Worker: one trustrl.train run, its metrics rows."""
    import torch

    import trustrl
    from trustrl.settings.config import make_config

    torch.set_num_threads(1)
    cfg = make_config(job["algo"], "CartPole-v1", flags=job["flags"])
    return trustrl.train(cfg).metrics


def _blog_run(job: dict[str, Any]) -> dict[str, Any]:
    from trustrl.experiments.blog_pendulum import BlogSettings, run

    return run(job["seed"], BlogSettings(**job["settings"]))


def _pool_map(fn: Any, jobs: list[dict[str, Any]], cost: Any = None) -> list[Any]:
    """fn over jobs on 2 processes; the costliest jobs (by cost(job)) start first so that the
    two processes finish together. Results come back in the order of jobs."""
    order = sorted(range(len(jobs)), key=lambda i: -cost(jobs[i])) if cost else \
        list(range(len(jobs)))
    with child_pool(2) as pool:  # workers die with this process
        done = list(pool.map(fn, [jobs[i] for i in order]))
    out: list[Any] = [None] * len(jobs)
    for i, res in zip(order, done, strict=True):
        out[i] = res
    return out


def _cartpole_job(ctx: Context, algo: str, seed: int, **over: Any) -> dict[str, Any]:
    """One CartPole run at the lab settings. vector "sync": the Gymnasium path, pinned."""
    flags = dict(over, seed=seed, total_steps=LAB_STEPS, eval_every=0, eval_episodes=1,
                 tensorboard=False, vector="sync",
                 runs_dir=str(ctx.out.parent / "runs" / "cartpole"))
    return {"algo": algo, "flags": flags}


def _job_cost(job: dict[str, Any]) -> float:
    f = job["flags"]
    epochs = f.get("update_epochs", 10)
    if f.get("target_kl"):
        epochs = 5  # stops after a few epochs
    return f["total_steps"] * (1 + epochs / 4)


def _train_many(ctx: Context, jobs: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Metrics rows of each CartPole job; a job already run in this context (the lab's K = 1 and
    K = 10 runs are also the K sweep's) is not run again."""
    cache: dict[tuple, list[dict[str, Any]]] = ctx.__dict__.setdefault("_cartpole_runs", {})
    key = lambda j: (j["algo"], tuple(sorted(j["flags"].items())))  # noqa: E731
    todo = [j for j in jobs if key(j) not in cache]
    for j, rows in zip(todo, _pool_map(_train_rows, todo, _job_cost), strict=True):
        cache[key(j)] = rows
    return [cache[key(j)] for j in jobs]


LAB_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "PPO (K=10)": ("ppo", {"update_epochs": 10}),
    "PPO, aggressive (K=40, lr 3e-3)": ("ppo", {"update_epochs": 40, "lr": 3e-3}),
    "no clip, aggressive": ("ppo-noclip", {"update_epochs": 40, "lr": 3e-3}),
    "one epoch": ("ppo", {"update_epochs": 1}),
    "aggressive + target_kl 0.01": ("ppo", {"update_epochs": 40, "lr": 3e-3,
                                            "target_kl": 0.01}),
    "no clip, aggressive + target_kl 0.01": ("ppo-noclip", {"update_epochs": 40, "lr": 3e-3,
                                                            "target_kl": 0.01}),
}


def _lab_seeds(ctx: Context) -> list[int]:
    return [s + 1 for s in ctx.seeds(**LAB_SEEDS)]


def _lab_runs(ctx: Context) -> dict[str, list[list[dict[str, Any]]]]:
    """Every lab variant for each seed (in the order of _lab_seeds)."""
    seeds = _lab_seeds(ctx)
    jobs = [_cartpole_job(ctx, algo, seed, **over)
            for algo, over in LAB_VARIANTS.values() for seed in seeds]
    rows = iter(_train_many(ctx, jobs))
    return {name: [next(rows) for _ in seeds] for name in LAB_VARIANTS}


def _col(rows: list[dict[str, Any]], key: str) -> np.ndarray:
    return np.array([np.nan if r.get(key) is None else float(r[key]) for r in rows])


def _each(runs: list[list[dict[str, Any]]], stat) -> list[float]:
    """stat of each seed's run."""
    return [float(stat(r)) for r in runs]


def _seeds_text(runs: list[list[dict[str, Any]]], stat, fmt: str = ".3g") -> str:
    return ", ".join(format(stat(r), fmt) for r in runs)


def _first_reach(rows: list[dict[str, Any]], level: float = 475.0) -> float:
    ma = moving_average(_col(rows, "ep_return_mean"))
    hit = np.flatnonzero(ma >= level)
    return float(_col(rows, "global_step")[hit[0]]) if len(hit) else float("inf")


def _kl(rows: list[dict[str, Any]]) -> float:
    return float(np.median(_col(rows, "approx_kl")))


def _cf(rows: list[dict[str, Any]]) -> float:
    return float(np.median(_col(rows, "clip_fraction")))


def _last5(rows: list[dict[str, Any]]) -> float:
    return float(np.nanmean(_col(rows, "ep_return_mean")[-5:]))


def _peak(rows: list[dict[str, Any]]) -> float:
    """The best 5-iteration average return of the run."""
    return float(np.nanmax(moving_average(_col(rows, "ep_return_mean"))))


def _epochs(rows: list[dict[str, Any]]) -> float:
    return float(np.median(_col(rows, "epochs_run")))


def _trough(rows: list[dict[str, Any]]) -> float:
    """Lowest batch return after the peak, as a fraction of the peak."""
    ret = _col(rows, "ep_return_mean")
    peak = int(np.nanargmax(ret))
    return float(np.nanmin(ret[peak:]) / ret[peak])


def _blog_many(ctx: Context, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The blog runs of jobs, each run once per context (as _train_many)."""
    cache: dict[tuple, dict[str, Any]] = ctx.__dict__.setdefault("_blog_runs", {})
    key = lambda j: (j["seed"], tuple(sorted(j["settings"].items())))  # noqa: E731
    todo = [j for j in jobs if key(j) not in cache]
    cost = lambda j: j["settings"]["iterations"] * (1 + j["settings"]["epochs"])  # noqa: E731
    for j, res in zip(todo, _pool_map(_blog_run, todo, cost), strict=True):
        cache[key(j)] = res
    return [cache[key(j)] for j in jobs]


@claim("000.lab", "000 · Exercise 9.10 (the CartPole lab)",
       "Four PPO variants on CartPole over 40k steps, then target_kl = 0.01", cost="train")
def lab(ctx: Context) -> Result:
    runs = _lab_runs(ctx)
    seeds = _lab_seeds(ctx)
    r = Result()
    ppo, agg, noclip = runs["PPO (K=10)"], runs["PPO, aggressive (K=40, lr 3e-3)"], \
        runs["no clip, aggressive"]

    def check(name: str, stated: str, values: list[float], lo: float, hi: float, why: str,
              fmt: str = ".3g") -> bool:
        return r.over_seeds(name, stated, values, seeds, lo, hi, why, fmt=fmt)

    check("PPO: steps until the 5-iteration average return reaches 475", "roughly 20-30k",
          _each(ppo, _first_reach), 15_000, 35_000, "'roughly': ±5k around the range",
          fmt=",.0f")
    r.explain("trustrl's PPO gets there sooner than the text's reference run. The text does "
              "not give its lab's run.py (number of envs, annealing); our preset spreads the "
              "512 steps over 4 envs and anneals the learning rate. Faster, not slower.")
    check("PPO: median approx KL per update", "0.001-0.01", _each(ppo, _kl), 0.001, 0.01,
          "the stated range", fmt=".4f")
    check("aggressive: median clip fraction", "often 0.1-0.3", _each(agg, _cf), 0.1, 0.3,
          "the stated range")
    ratios = [_kl(a) / _kl(p) for a, p in zip(agg, ppo, strict=True)]
    check("aggressive: KL a few times PPO's (per seed)", "a few times larger", ratios, 2, 10,
          "'a few': 2 to 10 times", fmt=".2f")
    check("aggressive: median KL still around 0.01", "around 0.01", _each(agg, _kl), 0.003,
          0.03, "'around': within a factor of 3")
    check("no clip: median approx KL per update", "1-10", _each(noclip, _kl), 1, 10,
          "the stated range")
    r.explain(NOCLIP_COLLAPSE)
    check("no clip: entropy after the first update", "almost 0",
          _each(noclip, lambda rows: rows[0]["entropy"]), 0, 0.1,
          "'almost 0': below 0.1 (from ln 2 = 0.69)")
    check("no clip: lowest return after the peak, as a fraction of the peak", "erratic, crashes",
          _each(noclip, _trough), 0, 0.5, "a crash: a later batch below half the peak",
          fmt=".2f")
    check("one epoch: return at 40k steps", "about 300", _each(runs["one epoch"], _last5),
          200, 400, "'about': ±100; mean of the last 5 batches", fmt=".0f")
    r.explain("One step per batch is the slowest and most seed-sensitive variant: with the "
              "learning rate annealed to 0 over 40k steps our single-epoch runs end lower than "
              "the text's one run. The direction holds: stable, and far slower than PPO.")
    tk, tk_nc = runs["aggressive + target_kl 0.01"], runs["no clip, aggressive + target_kl 0.01"]
    check("target_kl 0.01, clipped: median epochs run of 40", "about 12", _each(tk, _epochs),
          8, 16, "'about': ±4", fmt=".1f")
    r.explain("Over seeds 1-8 our runs stop after 3.5 to 12.5 epochs (the run's median; 7 "
              "over the seeds): at lr 3e-3 trustrl's full-batch k3 KL crosses 0.01 within a "
              "few epochs on most seeds. The text's ~12, from its one run, sits at the upper "
              "edge of that spread, so on some sets of three seeds this check is within "
              "spread and on others not. We keep the text's rule (full batch, after each "
              "epoch).")
    check("target_kl 0.01, unclipped: median epochs run of 40", "about 2",
          _each(tk_nc, _epochs), 1, 3, "'about': ±1", fmt=".1f")
    check("target_kl 0.01, unclipped: lowest entropy", "stays above 0.3",
          _each(tk_nc, lambda rows: np.nanmin(_col(rows, "entropy"))), 0.3, 1.0,
          "the stated bound")
    r.explain("At the text's bound: early stopping keeps the unclipped learner from "
              "collapsing (its lowest entropy is 0.17-0.32 over seeds 1-8 instead of 0, and "
              "it reaches a return of 430-500), which is the point of the claim; the bound "
              "itself is that run's, not a law, and sits inside our spread on some sets of "
              "seeds and just outside on others.")
    check("target_kl 0.01, unclipped: return reached by 40k", "about 400", _each(tk_nc, _peak),
          300, float("inf"), "'reaches about 400 by 40k': the best 5-iteration average up to "
          "40k steps; 'about': ±100, and 500 is CartPole's ceiling, so at least 300", fmt=".0f")
    _lab_figure(ctx, runs)
    r.figures.append("lab_cartpole.png")
    r.notes = (
        f"trustrl's own PPO (`trustrl train ppo` / `ppo-noclip` on the Gymnasium path, "
        f"vector sync) at the lab settings (4 envs x 128 steps, minibatch 64, lr annealed), "
        f"{LAB_STEPS:,} steps, seeds {seeds} (the text used one seed); each check is judged on "
        "the median over the seeds, its tolerance widened by the seeds' spread (see 'How "
        "robust the training verdicts are'). Approx KL and clip fraction are measured on the "
        "full batch after each update; per run the median over its updates. "
        + TK_UNCLIPPED_LATE_DIPS)
    return r


def _lab_figure(ctx: Context, runs: dict[str, list[list[dict[str, Any]]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    panels = (("ep_return_mean", "return (5-iteration average)", False),
              ("approx_kl", "approx KL per update (k3)", True),
              ("clip_fraction", "clip fraction", False), ("entropy", "entropy", False))
    for ax, (key, title, log) in zip(axes.flat, panels, strict=True):
        for k, (name, seeds) in enumerate(runs.items()):
            for j, rows in enumerate(seeds):
                y = _col(rows, key)
                y = moving_average(y) if key == "ep_return_mean" else y
                ax.plot(_col(rows, "global_step"), y, color=f"C{k}", lw=1.3, alpha=0.8,
                        ls="--" if "target_kl" in name else "-",
                        label=name if j == 0 else None)
        ax.set_title(title)
        ax.set_xlabel("environment steps")
        if log:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(ctx.figure("lab_cartpole.png"), dpi=100)
    plt.close(fig)


@claim("000.diagnostics-table", "000 · The two numbers to watch; 003 · clip-fraction bands",
       "The diagnostics' rules of thumb, checked on the lab runs", cost="train")
def diagnostics_table(ctx: Context) -> Result:
    runs = _lab_runs(ctx)
    seeds = _lab_seeds(ctx)
    r = Result()
    ppo, noclip = runs["PPO (K=10)"], runs["no clip, aggressive"]

    def check(name: str, stated: str, values: list[float], lo: float, hi: float, why: str,
              fmt: str = ".3g") -> bool:
        return r.over_seeds(name, stated, values, seeds, lo, hi, why, fmt=fmt)

    check("healthy run (PPO): clip fraction", "around 0.05-0.2", _each(ppo, _cf), 0.05, 0.2,
          "000's healthy band")
    check("healthy run (PPO): approx KL", "0.001-0.01 on the CartPole lab", _each(ppo, _kl),
          0.001, 0.01, "000's healthy band", fmt=".4f")
    check("too aggressive (no clip): approx KL", ">= 0.1", _each(noclip, _kl), 0.1,
          float("inf"), "000: 'KL jumps to 0.1 or more'")
    r.explain(NOCLIP_COLLAPSE)
    check("too aggressive (no clip): clip fraction", "> 0.3", _each(noclip, _cf), 0.3, 1.0,
          "000: 'clip fraction above 0.3'")
    r.explain(NOCLIP_NEAR_DETERMINISTIC)
    check("003: stable training clips 10-30% of samples (PPO run)", "0.1-0.3", _each(ppo, _cf),
          0.1, 0.3, "003's band")
    r.explain("The two seed texts disagree: the lab's healthy PPO run sits in 000's typical "
              "band (0.05-0.2) and below 003's 10-30%. 003's rule ('below 1%: the clip never "
              "acts') still holds: the clip does act, on about 5% of samples.")
    r.notes = (
        "The same runs as 000.lab. 003's band (10-30% clipped during stable training; below "
        "1% the clip never acts) is a different rule of thumb from 000's (0.05-0.2 typical): "
        "this claim reports how the lab's healthy PPO run sits against both. Clip fractions "
        "are measured on the full batch after the update.")
    return r


@claim("000.ex9.8", "000 · Exercise 9.8", "What goes wrong with too many epochs: a sweep of K",
       cost="train")
def ex98(ctx: Context) -> Result:
    ks = [1, 10, 40] if ctx.quick else [1, 3, 10, 20, 40]
    seeds = _lab_seeds(ctx)  # K = 1 and K = 10 are the lab's "one epoch" and "PPO" runs
    jobs = [_cartpole_job(ctx, "ppo", s, update_epochs=k) for k in ks for s in seeds]
    rows = iter(_train_many(ctx, jobs))
    keys = ("clip_fraction", "approx_kl", "value_loss_fresh", "entropy")
    per: dict[int, dict[str, list[float]]] = {}  # K -> key -> per-seed mean over updates
    for k in ks:
        mine = [next(rows) for _ in seeds]
        per[k] = {key: [float(np.nanmean(_col(x, key))) for x in mine] for key in keys}
    r = Result()
    lo, hi = ks[0], ks[-1]
    for key, text, sign in (("clip_fraction", "clip fraction rises", 1),
                            ("approx_kl", "approx KL grows", 1),
                            ("value_loss_fresh", "value loss on fresh data goes up", 1),
                            ("entropy", "entropy drops faster", -1)):
        diff = [sign * (b - a) for a, b in zip(per[lo][key], per[hi][key], strict=True)]
        stated = "lower entropy with more K" if sign < 0 else "increases with K"
        pair = f"K={lo} minus K={hi}" if sign < 0 else f"K={hi} minus K={lo}"
        r.over_seeds(f"K={lo} -> K={hi}: {text} ({pair}, per seed)", stated, diff, seeds, 0,
                     float("inf"), "the sign of the effect", fmt=".3g")
        if key == "value_loss_fresh":
            r.explain("On CartPole at the lab settings more epochs fit the critic better, also "
                      "on the next batch: at K = 1 the critic underfits, and up to K = 40 we see "
                      "no overfitting of the kind the exercise describes. The other effects it "
                      "lists (clip fraction, approx KL, entropy) do show.")
    table = ["| K | clip fraction | approx KL | value loss on fresh data | mean entropy |",
             "|---|---|---|---|---|"]
    for k in ks:
        m = {key: float(np.median(per[k][key])) for key in keys}
        table.append(f"| {k} | {m['clip_fraction']:.3f} | {m['approx_kl']:.4f} | "
                     f"{m['value_loss_fresh']:.2f} | {m['entropy']:.3f} |")
    r.notes = (f"trustrl PPO (Gymnasium path) at the lab settings with K in {ks}, "
               f"{LAB_STEPS:,} steps, seeds {seeds} (K = 1 and K = 10 are 000.lab's runs); "
               "each cell is the median over seeds of the run's mean over updates; each check "
               "is on the per-seed difference between K = 40 and K = 1. 'Value loss on fresh "
               "data' is 0.5 mean((V_old - R)^2) on each new batch before the critic trains "
               "on it.\n\n" + "\n".join(table))
    return r


@claim("002.pendulum", "002 · 2.7 Does it work? (graphs 1 and 2)",
       "The blog's Pendulum run in its exact setting, over several seeds", cost="train")
def blog_pendulum(ctx: Context) -> Result:
    from trustrl.experiments.blog_pendulum import BlogSettings

    seeds = ctx.seeds(full=5, quick=3)
    base = BlogSettings().__dict__
    jobs = [{"seed": s, "settings": base} for s in seeds]
    jobs += [{"seed": s, "settings": dict(base, iterations=40, clip=False)} for s in seeds]
    jobs += [{"seed": s, "settings": dict(base, iterations=40, epochs=1)} for s in seeds]
    res = _blog_many(ctx, jobs)
    full = [x for x in res if x["settings"]["clip"] and x["settings"]["epochs"] == 10]
    noclip = [x for x in res if not x["settings"]["clip"]]
    k1 = [x for x in res if x["settings"]["epochs"] == 1]
    start = [float(np.mean(x["curve"][:3])) for x in full]
    end = [float(np.mean(x["curve"][-3:])) for x in full]
    greedy = [float(x["greedy"]) for x in full]
    r = Result()
    one_run = "the blog's one run"
    r.over_seeds("graph 1: start (mean of first 3 iterations)", -1137, start, seeds, -1137,
                 -1137, one_run, fmt=".0f")
    r.explain("Our runs start lower than the blog's one run (median about -1250 over seeds): "
              "the first three batches are those of the initial policy, so they depend on its "
              "random initialisation and on the start angles drawn; the blog's -1137 is one "
              "such draw, at the edge of our run-to-run spread.")
    lower = ("Over seeds 0-7 our runs end between -1100 and -707 (greedy -1066 to -646): "
             "the blog's one run (-704, greedy -619) is as good as our best seed and 200-300 "
             "above our median, at or beyond the edge of our run-to-run spread for most sets "
             "of three seeds (within it on some). We follow every setting the post states; it "
             "does not state its seed, and its run looks like a good draw. The shape of graph "
             "1 holds: a rise of 190-450 on every seed, greedy above the stochastic return "
             "on six of eight.")
    r.over_seeds("graph 1: end (mean of last 3 iterations)", -704, end, seeds, -704, -704,
                 one_run, fmt=".0f")
    r.explain(lower)
    r.over_seeds("graph 1: greedy evaluation", -619, greedy, seeds, -619, -619, one_run,
                 fmt=".0f")
    r.explain(lower)
    r.over_seeds("graph 1: greedy above the training return (greedy minus end, per seed)",
                 "greedy > end", [g - e for g, e in zip(greedy, end, strict=True)], seeds, 0,
                 float("inf"), "the sign of the gap", fmt=".0f")
    last = lambda xs: [float(np.mean(x["curve"][35:40])) for x in xs]  # noqa: E731
    f40, nc40, k140 = last(full), last(noclip), last(k1)
    r.over_seeds("graph 2: full PPO ends highest (iterations 36-40; full minus the better "
                 "of the other two, per seed)", "full > no clip, K=1",
                 [f - max(a, b) for f, a, b in zip(f40, k140, nc40, strict=True)], seeds, 0,
                 float("inf"), "the sign of the gap", fmt=".0f")
    jag = lambda x: float(np.mean(np.abs(np.diff(x["curve"][:40]))))  # noqa: E731
    r.over_seeds("graph 2: no clip is the most jagged (mean |change| per iteration, no clip "
                 "minus the larger of the other two, per seed)", "no clip most jagged",
                 [jag(n) - max(jag(f), jag(k)) for n, f, k in zip(noclip, full, k1, strict=True)],
                 seeds, 0, float("inf"), "the sign of the gap", fmt=".0f")
    r.explain("Iteration-to-iteration changes are dominated by batch sampling noise (each "
              "batch is about ten fresh episodes from random start angles), which all three "
              "variants share; over several seeds the unclipped curve is lower and dips, but "
              "it is not measurably more jagged than the K = 1 curve. The blog read one seed.")
    r.over_seeds("graph 2: no clip ends lowest ('hurt the most'; K=1 minus no clip, per seed)",
                 "no clip lowest", [k - n for k, n in zip(k140, nc40, strict=True)], seeds, 0,
                 float("inf"), "the sign of the gap", fmt=".0f")
    _pendulum_figures(ctx, full, noclip, k1)
    r.figures += ["blog_pendulum_graph1.png", "blog_pendulum_graph2.png"]
    fmt = lambda xs: ", ".join(f"{x:.0f}" for x in xs)  # noqa: E731
    r.notes = (f"The blog's algorithm re-implemented in trustrl/experiments/blog_pendulum.py, "
               f"seeds {seeds}; each check is judged on the median over the seeds, its "
               f"tolerance widened by the seeds' spread. Per seed, end: {fmt(end)}; greedy: "
               f"{fmt(greedy)}. Graph 2 at iterations 36-40: full {fmt(f40)}; K=1 {fmt(k140)};"
               f" no clip {fmt(nc40)}.")
    return r


def _pendulum_figures(ctx: Context, full: list, noclip: list, k1: list) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def stats(xs: list, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        c = np.array([x["curve"][:n] for x in xs])
        m = np.array([moving_average(row) for row in c])
        return c.mean(0), m.mean(0), m.std(0)

    raw, ma, sd = stats(full, 60)
    it = np.arange(1, 61)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(it, raw, color="C1", alpha=0.35, lw=1, label="raw per-batch return (mean over seeds)")
    ax.plot(it, ma, color="C1", lw=2.2, label="5-iteration moving average")
    ax.fill_between(it, ma - sd, ma + sd, color="C1", alpha=0.15, label="± 1 sd over seeds")
    ax.axhline(np.mean([x["greedy"] for x in full]), color="k", ls="--",
               label="greedy evaluation (mean over seeds)")
    ax.axhline(-619, color="gray", ls=":", label="the blog's greedy (-619)")
    ax.set(xlabel="PPO iteration", ylabel="mean episode return",
           title=f"Pendulum-v1, the blog's setting, {len(full)} seed(s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(ctx.figure("blog_pendulum_graph1.png"), dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4.5))
    it = np.arange(1, 41)
    for xs, name, color in ((full, "full PPO", "C1"), (noclip, "no clip", "C3"),
                            (k1, "no reuse (K=1)", "C0")):
        _, ma, sd = stats(xs, 40)
        ax.plot(it, ma, color=color, lw=2, label=name)
        ax.fill_between(it, ma - sd, ma + sd, color=color, alpha=0.15)
    ax.set(xlabel="PPO iteration", ylabel="mean episode return (5-iteration average)",
           title=f"Ablation over {len(full)} seed(s) (band: ± 1 sd)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(ctx.figure("blog_pendulum_graph2.png"), dpi=110)
    plt.close(fig)


