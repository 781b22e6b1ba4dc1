"""`trustrl rlhf study`: SFT -> reward model -> PPO (several betas, clip / leash ablations) and
GRPO (gold vs sortedness-only reward, several betas), for several seeds; tables and plots.

Every run is an ordinary run folder under OUT/runs/; the report (OUT/REPORT.md, OUT/*.png) is
computed from their metrics.csv and eval.json files only, so it can be rebuilt with --report-only.
Runs go through a process pool (`workers`, default 2), one torch thread each.
"""

from __future__ import annotations

import csv
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trustrl.util.children import child_pool, run_stoppable
from trustrl.util.errors import ConfigError

# name -> (algorithm, options): the study's comparison, in report order
PPO_VARIANTS: dict[str, dict[str, Any]] = {
    "ppo-beta0": {"beta": 0.0},
    "ppo-beta0.05": {"beta": 0.05},
    "ppo-beta0.2": {"beta": 0.2},
    "ppo-beta0.5": {"beta": 0.5},
    "ppo-adaptive": {"beta": 0.1, "target_kl": 1.0, "horizon": 1000.0},
    "ppo-leash-noclip": {"beta": 0.2, "clip_eps": None},
    "ppo-noclip-noleash": {"beta": 0.0, "clip_eps": None},
}
GRPO_VARIANTS: dict[str, dict[str, Any]] = {
    "grpo-gold": {"reward": "gold"},
    "grpo-sorted-beta0": {"reward": "sorted", "beta": 0.0},
    "grpo-sorted-beta0.02": {"reward": "sorted", "beta": 0.02},
    "grpo-sorted-beta0.1": {"reward": "sorted", "beta": 0.1},
}
# "which KL estimator where" (docs/rlhf.md): the beta = 0.2 leash with each KL option offered,
# GRPO on the sortedness-only reward (PPO offers only k1 in the reward: ppo-beta0.2). Not in the
# default set; run them with --only.
KL_VARIANTS: dict[str, dict[str, Any]] = {
    "grpo-sorted-beta0.2-k3-loss": {"reward": "sorted", "beta": 0.2},
    "grpo-sorted-beta0.2-k2-loss": {"reward": "sorted", "beta": 0.2, "kl_estimator": "k2"},
    "grpo-sorted-beta0.2-k1-reward": {"reward": "sorted", "beta": 0.2, "kl_estimator": "k1",
                                      "kl_placement": "reward"},
}


@dataclass
class StudyConfig:
    out: str = "rlhf-study"
    """Output folder: runs/, REPORT.md, figures."""
    seeds: list[int] = field(default_factory=lambda: [1, 2, 3])
    """Seeds; each gets its own SFT model, reward model and RL runs."""
    workers: int = 2
    """Processes running at once (one torch thread each)."""
    sft_steps: int = 1500
    """SFT Adam steps."""
    rm_pairs: int = 4000
    """Prompts sampled for reward-model pairs."""
    ppo_iterations: int = 80
    """PPO iterations per run (128 answers each)."""
    grpo_iterations: int = 80
    """GRPO iterations per run (16 prompts x 8 answers each)."""
    variants: list[str] | None = None
    """Variant names to run (None = the default comparison; KL_VARIANTS only when named)."""

    def validate(self) -> None:
        if not self.seeds:
            raise ConfigError("the study needs at least one seed")
        if self.workers < 1:
            raise ConfigError(f"workers must be >= 1, got {self.workers}")
        for name in ("sft_steps", "rm_pairs", "ppo_iterations", "grpo_iterations"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        known = {**PPO_VARIANTS, **GRPO_VARIANTS, **KL_VARIANTS}
        for v in self.variants or []:
            if v not in known:
                raise ConfigError(f"unknown study variant {v!r}; known: {', '.join(known)}")


# --- jobs (run in worker processes) --------------------------------------------------------------
def _quiet(_: str) -> None:
    pass


def job_sft(seed: int, steps: int, runs_dir: str) -> str:
    from trustrl.rlhf.sft import SFTConfig, train_sft

    return str(train_sft(SFTConfig(seed=seed, steps=steps, runs_dir=runs_dir), echo=_quiet))


def job_rm(seed: int, sft: str, pairs: int, runs_dir: str) -> str:
    from trustrl.rlhf.reward_model import RewardModelConfig, train_reward_model

    return str(train_reward_model(RewardModelConfig(seed=seed, sft=sft, pairs=pairs,
                                                    runs_dir=runs_dir), echo=_quiet))


def job_rl(name: str, seed: int, sft: str, rm: str, iterations: int, runs_dir: str) -> str:
    if name in PPO_VARIANTS:
        from trustrl.rlhf.ppo import PPOConfig, train_ppo

        cfg = PPOConfig(seed=seed, sft=sft, reward_model=rm, iterations=iterations,
                        runs_dir=runs_dir, **PPO_VARIANTS[name])
        return str(train_ppo(cfg, echo=_quiet))
    from trustrl.rlhf.grpo import GRPOConfig, train_grpo

    gcfg = GRPOConfig(seed=seed, sft=sft, iterations=iterations, runs_dir=runs_dir,
                      **{**GRPO_VARIANTS, **KL_VARIANTS}[name])
    return str(train_grpo(gcfg, echo=_quiet))


def job_sft_eval(sft: str, seed: int) -> dict[str, float]:
    import torch

    from trustrl.rlhf.model import load_model
    from trustrl.rlhf.ppo import evaluate_policy, sort_task_of
    from trustrl.rlhf.sft import EVAL_SEED

    torch.set_num_threads(1)
    model, _ = load_model(str(Path(sft) / "model.pt"))
    return evaluate_policy(model, sort_task_of(sft), 1024, seed + EVAL_SEED)


def run_study(cfg: StudyConfig, echo: Callable[[str], None] = print) -> Path:
    """Run every stage for every seed and write the report; returns the report path."""
    cfg.validate()
    out = Path(cfg.out)
    runs_dir = str(out / "runs")
    names = ([n for n in (*PPO_VARIANTS, *GRPO_VARIANTS, *KL_VARIANTS) if n in cfg.variants]
             if cfg.variants else [*PPO_VARIANTS, *GRPO_VARIANTS])
    index: dict[str, Any] = {"seeds": {}, "config": cfg.__dict__}
    t0 = time.perf_counter()
    try:
        _run_jobs(cfg, names, runs_dir, index, echo, t0)
    except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM: the CLI's one line says what is left
        e.left = (f"the study's runs so far are under {runs_dir} (those cut short: status "  # type: ignore[attr-defined]
                  "'stopped'); a study does not resume: start it again")
        raise
    index["wall_time_s"] = time.perf_counter() - t0
    out.mkdir(parents=True, exist_ok=True)
    (out / "index.json").write_text(json.dumps(index, indent=2) + "\n")
    return write_report(out)


def _run_jobs(cfg: StudyConfig, names: list[str], runs_dir: str, index: dict[str, Any],
              echo: Callable[[str], None], t0: float) -> None:
    """Every stage for every seed in a pool of cfg.workers processes; index filled."""
    with child_pool(cfg.workers) as pool:  # workers die with this process
        sfts = {s: pool.submit(run_stoppable, job_sft, s, cfg.sft_steps, runs_dir)
                for s in cfg.seeds}
        sft_paths = {s: f.result() for s, f in sfts.items()}
        echo(f"study: SFT done for seeds {cfg.seeds} ({time.perf_counter() - t0:.0f} s)")
        rms = {s: pool.submit(run_stoppable, job_rm, s, sft_paths[s], cfg.rm_pairs, runs_dir)
               for s in cfg.seeds}
        evals = {s: pool.submit(run_stoppable, job_sft_eval, sft_paths[s], s)
                 for s in cfg.seeds}
        rm_paths = {s: f.result() for s, f in rms.items()}
        echo(f"study: reward models done ({time.perf_counter() - t0:.0f} s)")
        jobs = {}
        for s in cfg.seeds:
            for n in names:
                iters = cfg.ppo_iterations if n in PPO_VARIANTS else cfg.grpo_iterations
                jobs[(n, s)] = pool.submit(run_stoppable, job_rl, n, s, sft_paths[s],
                                           rm_paths[s], iters, runs_dir)
        for s in cfg.seeds:
            index["seeds"][str(s)] = {"sft": sft_paths[s], "reward_model": rm_paths[s],
                                      "sft_eval": evals[s].result(), "runs": {}}
        for (n, s), f in jobs.items():
            index["seeds"][str(s)]["runs"][n] = f.result()
            echo(f"study: {n} seed {s} done ({time.perf_counter() - t0:.0f} s)")


# --- report --------------------------------------------------------------------------------------
def _read_metrics(run: str) -> dict[str, list[float]]:
    with open(Path(run) / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    cols: dict[str, list[float]] = {}
    for r in rows:
        for k, v in r.items():
            cols.setdefault(k, []).append(float(v) if v not in ("", None) else math.nan)
    return cols


def _stats(values: list[float]) -> str:
    """'mean (min-max)' over seeds."""
    v = [x for x in values if x == x]
    if not v:
        return "n/a"
    mean = sum(v) / len(v)
    return f"{mean:.3f} ({min(v):.3f}-{max(v):.3f})" if len(v) > 1 else f"{mean:.3f}"


def _smooth(x: list[float], k: int = 5) -> list[float]:
    out = []
    for i in range(len(x)):
        w = x[max(0, i - k + 1): i + 1]
        out.append(sum(w) / len(w))
    return out


def summary_rows(index: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per variant: final held-out eval and batch peaks, each a list over seeds."""
    seeds = index["seeds"]
    names = list(next(iter(seeds.values()))["runs"])
    rows = [{"variant": "SFT (reference)",
             **{k: [seeds[s]["sft_eval"][f"gold/{k}"] for s in seeds]
                for k in ("exact", "perm", "sorted", "score")},
             "kl": [0.0 for _ in seeds], "proxy": [math.nan for _ in seeds],
             "peak": [math.nan for _ in seeds], "peak_it": [math.nan for _ in seeds]}]
    for n in names:
        row: dict[str, Any] = {"variant": n, "exact": [], "perm": [], "sorted": [], "score": [],
                               "kl": [], "proxy": [], "peak": [], "peak_it": []}
        for s in seeds:
            run = seeds[s]["runs"][n]
            ev = json.loads((Path(run) / "eval.json").read_text())
            m = _read_metrics(run)
            for k in ("exact", "perm", "sorted", "score"):
                row[k].append(ev[f"gold/{k}"])
            row["kl"].append(ev["kl_exact"])
            proxy = m["objective/scores"] if "objective/scores" in m else m["reward"]
            row["proxy"].append(sum(proxy[-5:]) / len(proxy[-5:]))
            sm = _smooth(m["gold/exact"])
            best = max(range(len(sm)), key=lambda i: sm[i])
            row["peak"].append(sm[best])
            row["peak_it"].append(float(best + 1))
        rows.append(row)
    return rows


def write_report(out: Path) -> Path:
    """REPORT.md and figures from OUT/index.json and the run folders it names."""
    index = json.loads((out / "index.json").read_text())
    rows = summary_rows(index)
    figs = make_figures(index, out)
    seeds = list(index["seeds"])
    rm_acc = []
    for s in seeds:
        m = _read_metrics(index["seeds"][s]["reward_model"])
        rm_acc.append(m["heldout_accuracy"][-1])
    lines = [
        "# trustrl rlhf study",
        "",
        f"Seeds {', '.join(seeds)}; wall time {index.get('wall_time_s', math.nan):.0f} s. "
        "Cells: mean over seeds (min-max). Final numbers are a held-out evaluation: 1024 "
        "prompts, one answer each sampled at temperature 1 (exact = pass@1). KL is the exact "
        "sequence KL(pi || pi_ref) on those answers, in nats. proxy = mean training reward of "
        "the last 5 iterations (PPO: reward-model score in SFT-std units; GRPO: its own "
        "reward). peak = best 5-iteration moving average of the batch gold exact rate, at "
        "iteration peak_it.",
        "",
        f"Reward-model held-out pair accuracy: {_stats(rm_acc)}.",
        "",
        "| variant | gold exact | permutation | sorted (any digits) | gold score | KL to ref | "
        "proxy | peak exact | peak_it |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['variant']} | {_stats(r['exact'])} | {_stats(r['perm'])} | "
                     f"{_stats(r['sorted'])} | {_stats(r['score'])} | {_stats(r['kl'])} | "
                     f"{_stats(r['proxy'])} | {_stats(r['peak'])} | {_stats(r['peak_it'])} |")
    lines += ["", "Per seed (gold exact / permutation / KL):", ""]
    lines.append("| variant | " + " | ".join(f"seed {s}" for s in seeds) + " |")
    lines.append("|---|" + "---|" * len(seeds))
    for r in rows:
        cells = [f"{e:.3f} / {p:.3f} / {k:.2f}" for e, p, k in zip(r["exact"], r["perm"],
                                                                    r["kl"], strict=True)]
        lines.append(f"| {r['variant']} | " + " | ".join(cells) + " |")
    lines += ["", "Figures:", ""] + [f"![{f.stem}]({f.name})" for f in figs]
    report = out / "REPORT.md"
    report.write_text("\n".join(lines) + "\n")
    (out / "summary.json").write_text(json.dumps(rows, indent=2) + "\n")
    return report


def make_figures(index: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seeds = index["seeds"]
    names = list(next(iter(seeds.values()))["runs"])

    def runs_of(n: str) -> list[dict[str, list[float]]]:
        return [_read_metrics(seeds[s]["runs"][n]) for s in seeds]

    figs: list[Path] = []
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    sft_exact = [seeds[s]["sft_eval"]["gold/exact"] for s in seeds]

    # 1. gold and proxy against sqrt(KL), per beta
    betas = [n for n in ("ppo-beta0", "ppo-beta0.05", "ppo-beta0.2", "ppo-beta0.5",
                         "ppo-adaptive") if n in names]
    if betas:
        fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
        for c, n in zip(colors, betas, strict=False):
            for j, m in enumerate(runs_of(n)):
                x = [math.sqrt(max(k, 0.0)) for k in _smooth(m["objective/kl_exact"])]
                ax[0].plot(x, _smooth(m["objective/scores"]), color=c, alpha=0.8, lw=1,
                           label=n if j == 0 else None)
                ax[1].plot(x, _smooth(m["gold/exact"]), color=c, alpha=0.8, lw=1,
                           label=n if j == 0 else None)
        ax[0].set(xlabel="sqrt(KL(pi || pi_ref)) [sqrt nats]", ylabel="reward-model score",
                  title="proxy (reward model) vs distance from SFT")
        ax[1].set(xlabel="sqrt(KL(pi || pi_ref)) [sqrt nats]", ylabel="gold exact-sorted rate",
                  title="gold vs distance from SFT")
        ax[1].axhline(sum(sft_exact) / len(sft_exact), color="gray", ls=":", label="SFT")
        for a in ax:
            a.legend(fontsize=8)
            a.grid(alpha=0.3)
        figs.append(_save(fig, out / "ppo_gold_proxy_vs_sqrt_kl.png"))

    # 2. reward hacking with beta = 0 (vs beta = 0.2), over iterations
    pair = [n for n in ("ppo-beta0", "ppo-beta0.2") if n in names]
    if pair:
        keys = [("objective/scores", "reward-model score"), ("gold/exact", "gold exact rate"),
                ("gold/perm", "permutation rate"), ("objective/kl_exact", "KL to ref [nats]"),
                ("objective/entropy", "entropy per answer [nats]")]
        fig, ax = _panels(plt, keys, pair, colors, runs_of, 18)
        ax[0].legend(fontsize=8)
        figs.append(_save(fig, out / "ppo_reward_hacking.png"))

    # 3. GRPO: gold vs sortedness-only reward, and beta
    grpo = [n for n in GRPO_VARIANTS if n in names]
    if grpo:
        keys = [("reward", "training reward"), ("gold/exact", "gold exact rate"),
                ("gold/perm", "permutation rate"), ("kl_seq_exact", "KL to ref [nats]")]
        fig, ax = _panels(plt, keys, grpo, colors, runs_of, 16)
        ax[1].legend(fontsize=8)
        figs.append(_save(fig, out / "grpo_gold_vs_sorted_reward.png"))

    # 4. clip vs leash
    abl = [n for n in ("ppo-beta0.2", "ppo-beta0", "ppo-leash-noclip", "ppo-noclip-noleash")
           if n in names]
    if abl:
        keys = [("objective/kl_exact", "KL to pi_ref per answer [nats]"),
                ("policy/approxkl_avg", "per-update KL to pi_old (k3, per token)"),
                ("policy/clipfrac_avg", "fraction of tokens outside [0.8, 1.2]"),
                ("gold/exact", "gold exact rate")]
        fig, ax = _panels(plt, keys, abl, colors, runs_of, 16)
        ax[0].set_yscale("symlog", linthresh=1.0)
        ax[1].set_yscale("log")
        ax[3].legend(fontsize=8)
        figs.append(_save(fig, out / "ppo_clip_vs_leash.png"))

    # 5. which KL where: GRPO's leash options at the same beta
    klv = [n for n in KL_VARIANTS if n in names]
    if klv:
        keys = [("reward", "training reward (sortedness)"), ("gold/exact", "gold exact rate"),
                ("gold/perm", "permutation rate"), ("kl_seq_exact", "KL(pi || pi_ref) [nats]")]
        fig, ax = _panels(plt, keys, klv, colors, runs_of, 16)
        ax[1].legend(fontsize=8)
        figs.append(_save(fig, out / "grpo_kl_options.png"))
    return figs


def _panels(plt: Any, keys: list[tuple[str, str]], names: list[str], colors: Any,
            runs_of: Any, width: float) -> tuple[Any, Any]:
    """One panel per (metric, title) in keys; in each, every run of every variant in names
    against the iteration (smoothed), one color per variant, labelled once."""
    fig, ax = plt.subplots(1, len(keys), figsize=(width, 3.6))
    for c, n in zip(colors, names, strict=False):
        for j, m in enumerate(runs_of(n)):
            for a, (k, lab) in zip(ax, keys, strict=True):
                a.plot(m["iteration"], _smooth(m[k]), color=c, lw=1,
                       label=n if j == 0 else None)
                a.set(title=lab, xlabel="iteration")
    for a in ax:
        a.grid(alpha=0.3)
    return fig, ax


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path
