"""`trustrl report DIR`: read a sweep folder, write REPORT.md and one PNG of curves per env
(with the data it is drawn from, curves_<env>.json, to redraw it without the runs).

Protocol (what the numbers are): every trial evaluates its greedy policy (argmax / Gaussian
mean; sampled actions where eval_deterministic is false; observation normaliser frozen) on
`eval_episodes` episodes from fixed seeds, every `eval_every` iterations, at step 0
(eval_initial.json) and after the last iteration. A trial's final return is that last
evaluation (eval.json). Curves put every seed on a common step grid, holding each seed's latest
evaluation at or before the step; the band is a 95% percentile bootstrap over seeds. Steps to
threshold come from the same evaluations.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trustrl.records.runs import read_csv
from trustrl.sweep import stats
from trustrl.sweep.folder import SweepFolder
from trustrl.sweep.spec import Trial
from trustrl.util.progress import mode_word

DIAGNOSTICS = (("approx_kl", "approx KL (k3)"), ("kl_exact", "exact KL"),
               ("clip_fraction", "clip fraction"), ("explained_variance", "explained var."),
               ("entropy", "entropy"))


@dataclass
class Curve:
    """One run's evaluations: what a curve figure is drawn from."""

    steps: np.ndarray
    returns: np.ndarray


@dataclass
class TrialData:
    trial: Trial
    steps: np.ndarray           # evaluated steps, increasing (0 = the untrained policy)
    returns: np.ndarray         # evaluation mean return at those steps
    final: float                # the final evaluation (eval.json)
    wall_s: float
    diagnostics: dict[str, float] = field(default_factory=dict)
    sps: float = math.nan


def _float(s: str | None) -> float:
    try:
        return float(s) if s not in (None, "") else math.nan
    except ValueError:
        return math.nan


class InvalidTrial(ValueError):
    """A trial recorded as finished whose files cannot be trusted; the report leaves it out."""


def check_metrics(rows: list[dict[str, str]]) -> None:
    """Raise InvalidTrial when metrics.csv repeats an iteration (two writers at once, before
    run folders were locked) or has a row without one."""
    seen: set[int] = set()
    dupes: list[int] = []
    for r in rows:
        try:
            it = int(float(r.get("iteration") or "x"))
        except ValueError:
            raise InvalidTrial("metrics.csv has a row without an iteration number") from None
        if it in seen:
            dupes.append(it)
        seen.add(it)
    if dupes:
        shown = ", ".join(map(str, sorted(set(dupes))[:5])) + (", ..." if len(set(dupes)) > 5
                                                               else "")
        raise InvalidTrial(f"metrics.csv repeats iterations {shown} (written twice)")


def load_trial(folder: SweepFolder, trial: Trial, result: dict[str, Any]) -> TrialData:
    """The evaluations and diagnostics of one finished trial, from its run folder; raises
    InvalidTrial (one line) when they are missing, unreadable or written twice."""
    try:
        return _load_trial(folder, trial, result)
    except InvalidTrial:
        raise
    except (OSError, ValueError, KeyError, TypeError) as e:
        msg = (str(e).splitlines() or [""])[0]
        raise InvalidTrial(f"cannot read its run folder: {type(e).__name__}: {msg}") from None


def eval_curve(run: Path, rows: list[dict[str, str]] | None = None
               ) -> tuple[list[int], list[float]]:
    """A run folder's evaluations (steps, mean returns): eval_initial.json at step 0
    where there is one, then each metrics.csv row's eval_return_mean (`rows`: its rows when
    already read)."""
    steps, rets = [], []
    init = run / "eval_initial.json"
    if init.is_file():
        steps.append(0)
        rets.append(float(json.loads(init.read_text())["mean"]))
    for r in read_csv(run / "metrics.csv") if rows is None else rows:
        v = _float(r.get("eval_return_mean"))
        if not math.isnan(v):
            steps.append(int(float(r["global_step"])))
            rets.append(v)
    return steps, rets


def _load_trial(folder: SweepFolder, trial: Trial, result: dict[str, Any]) -> TrialData:
    run = folder.trial_dir(trial) / str(result["run"])
    if not (run / "metrics.csv").is_file():
        raise InvalidTrial(f"its run folder has no metrics.csv ({run})")
    rows = read_csv(run / "metrics.csv")
    check_metrics(rows)
    steps, rets = eval_curve(run, rows)
    final = float(json.loads((run / "eval.json").read_text())["mean"])
    diag = {}
    for key, _ in DIAGNOSTICS:
        vals = np.array([_float(r.get(key)) for r in rows])
        vals = vals[np.isfinite(vals)]
        diag[key] = float(np.median(vals)) if len(vals) else math.nan
    sps = np.array([_float(r.get("sps")) for r in rows])
    sps = sps[np.isfinite(sps)]
    return TrialData(trial, np.array(steps), np.array(rets, dtype=float), final,
                     float(result.get("wall_s", math.nan)), diag,
                     float(np.median(sps)) if len(sps) else math.nan)


@dataclass
class VariantSummary:
    env_id: str
    variant: str
    seeds: list[int]
    finals: np.ndarray
    mean: float
    std: float
    median: float
    iqm: float
    mean_ci: tuple[float, float]
    iqm_ci: tuple[float, float]
    first_hit: list[int | None]
    stay_hit: list[int | None]
    diagnostics: dict[str, float]
    wall_s: float
    sps: float


def summarise(env_id: str, variant: str, data: list[TrialData], threshold: float | None,
              n_boot: int) -> VariantSummary:
    finals = np.array([d.final for d in data])
    n = len(finals)
    lo, hi = stats.bootstrap_ci(finals, stats.mean, n_boot)
    ilo, ihi = stats.bootstrap_ci(finals, stats.iqm, n_boot)
    first = [stats.steps_to_threshold(d.steps, d.returns, threshold) if threshold is not None
             else None for d in data]
    stay = [stats.steps_to_stay(d.steps, d.returns, threshold) if threshold is not None
            else None for d in data]
    diag = {k: float(np.nanmean([d.diagnostics.get(k, math.nan) for d in data]))
            if any(np.isfinite(d.diagnostics.get(k, math.nan)) for d in data) else math.nan
            for k, _ in DIAGNOSTICS}
    return VariantSummary(
        env_id, variant, [d.trial.seed for d in data], finals, float(finals.mean()),
        float(finals.std(ddof=1)) if n > 1 else math.nan, float(np.median(finals)),
        float(stats.iqm(finals)), (float(lo), float(hi)), (float(ilo), float(ihi)), first, stay,
        diag, float(np.mean([d.wall_s for d in data])),
        _nanmedian([d.sps for d in data]))


def _nanmedian(xs: list[float]) -> float:
    v = np.array(xs, dtype=float)
    v = v[np.isfinite(v)]
    return float(np.median(v)) if len(v) else math.nan


def env_grid(data: Sequence[Curve | TrialData], max_points: int = 400) -> np.ndarray:
    """The union of the evaluated steps, or an even grid when that union is too fine."""
    union = np.unique(np.concatenate([d.steps for d in data]))
    if len(union) <= max_points:
        return union
    return np.linspace(0, union.max(), 200)


def curve_band(data: Sequence[Curve | TrialData], grid: np.ndarray, stat: str, n_boot: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The stat over seeds at each grid step and its 95% bootstrap band ([points] each)."""
    ys = np.stack([stats.curve_on_grid(d.steps, d.returns, grid) for d in data])
    f = stats.STATS[stat]
    centre = f(ys, 0)
    lo, hi = stats.bootstrap_ci(ys, f, n_boot)
    return centre, lo, hi


# ----- formatting -----------------------------------------------------------------------------
def _f(x: float, digits: int = 1) -> str:
    return "–" if x is None or not np.isfinite(x) else f"{x:,.{digits}f}"


def _g(x: float) -> str:
    return "–" if not np.isfinite(x) else f"{x:.3g}"


def _steps(x: float | int | None) -> str:
    return "not reached" if x is None else f"{int(round(x)):,}"


def _hits(values: list[int | None]) -> str:
    got = [v for v in values if v is not None]
    rng = f" (range {min(got):,}–{max(got):,})" if got else ""
    return f"{len(got)}/{len(values)}{rng}"


def eval_word(trials: list[Trial]) -> str:
    """How the trials evaluate: 'greedy', 'sampled' (eval_deterministic false) or both."""
    words = sorted({mode_word(t.config.get("eval_deterministic")) for t in trials})
    return " or ".join(words)


def _plot_env(env_id: str, curves: dict[str, tuple[np.ndarray, ...]], stat: str,
              threshold: float | None, n_seeds: dict[str, int], out: Path,
              word: str = "greedy") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for variant, (grid, centre, lo, hi) in curves.items():
        # steps: each value holds until the next evaluation (what curve_on_grid computes)
        line, = ax.plot(grid, centre, lw=1.8, drawstyle="steps-post",
                        label=f"{variant} (n={n_seeds[variant]})")
        ax.fill_between(grid, lo, hi, color=line.get_color(), alpha=0.2, lw=0, step="post")
    if threshold is not None:
        ax.axhline(threshold, color="grey", ls=":", lw=1, label=f"threshold {threshold:g}")
    ax.set_xlabel("environment steps")
    ax.set_ylabel(f"{word} return")
    centre = "mean" if stat == "mean" else "IQM"
    ax.set_title(f"{env_id}: {centre} over seeds, 95% bootstrap band")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


CURVES_FORMAT = "trustrl-curves/1"
"""The format tag of a curves_<env>.json: the data a report's figure is drawn from."""


def write_curves(path: Path, env_id: str, variants: dict[str, list[TrialData]], stat: str,
                 threshold: float | None, word: str, n_boot: int) -> None:
    """Write the data of an env's curve figure: every trial's evaluations (step, mean return)
    and how the figure reads them, so that `draw_curves` redraws it from this file alone
    (benchmarks/make_pages.py redraws the committed ones)."""
    path.write_text(json.dumps({
        "format": CURVES_FORMAT, "env_id": env_id, "stat": stat, "threshold": threshold,
        "word": word, "n_boot": n_boot,
        "variants": {v: [{"seed": d.trial.seed, "steps": [int(x) for x in d.steps],
                          "returns": [float(x) for x in d.returns]} for d in data]
                     for v, data in variants.items()}}, indent=1) + "\n")


def draw_curves(data: Path, png: Path) -> None:
    """Draw a report's curve figure from its curves_<env>.json (write_curves): the stat over
    seeds on the union of evaluated steps with its 95% bootstrap band, per variant.

    Args:
        data: the curves_<env>.json; read as data (JSON), never executed.
        png: the figure to write.
    """
    d = json.loads(data.read_text())
    if not isinstance(d, dict) or d.get("format") != CURVES_FORMAT:
        raise ValueError(f"{data}: not a {CURVES_FORMAT} file")
    curves: dict[str, tuple[np.ndarray, ...]] = {}
    for variant, trials in d["variants"].items():
        runs = [Curve(np.asarray(t["steps"], dtype=float), np.asarray(t["returns"], dtype=float))
                for t in trials]
        grid = env_grid(runs)
        curves[variant] = (grid, *curve_band(runs, grid, d["stat"], int(d["n_boot"])))
    _plot_env(d["env_id"], curves, d["stat"], d["threshold"],
              {v: len(t) for v, t in d["variants"].items()}, png, d["word"])


def _safe(s: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in s)


def _protocol(trials: list[Trial]) -> list[str]:
    lines = []
    by_env: dict[str, set[str]] = {}
    for t in trials:
        c = t.config
        batch = int(c["num_envs"]) * int(c["num_steps"])
        budget = (int(c["total_steps"]) // batch) * batch
        every = f"every {int(c['eval_every']) * batch:,} steps" if c["eval_every"] else \
            "only at the end"
        by_env.setdefault(t.env_id, set()).add(
            f"{t.variant}: budget {budget:,} steps ({c['total_steps']:,} asked, whole "
            f"batches of {batch:,}), "
            f"{'greedy' if c.get('eval_deterministic', True) else 'sampled-action'} "
            f"evaluation {every} and at the end, "
            f"{c['eval_episodes']} episodes"
            + (", observation normaliser frozen" if c.get("normalize_obs") else ""))
    for env, items in by_env.items():
        lines.append(f"- {env}: " + "; ".join(sorted(items)))
    return lines


def write_report(sweep_dir: Path, out: Path, stat: str = "mean",
                 thresholds: dict[str, float] | None = None, n_boot: int = 5000) -> Path:
    """Write out/REPORT.md, out/curves_<env>.png and the figure's data out/curves_<env>.json;
    returns the REPORT.md path."""
    folder = SweepFolder.open(sweep_dir)
    thr = dict(folder.thresholds)
    thr.update(thresholds or {})
    out.mkdir(parents=True, exist_ok=True)
    by_env: dict[str, dict[str, list[TrialData]]] = {}
    failed: list[tuple[Trial, str]] = []
    invalid: list[tuple[Trial, str]] = []
    pending: list[Trial] = []
    stopped: list[Trial] = []  # ended by a callback (a trial `trustrl tune` pruned)
    for t in folder.trials:
        res = folder.result(t)
        if res is None:
            pending.append(t)
        elif res.get("status") == "stopped":
            stopped.append(t)
        elif res.get("status") != "finished":
            failed.append((t, str(res.get("error", "?"))))
        else:
            try:
                data = load_trial(folder, t, res)
            except InvalidTrial as e:
                invalid.append((t, str(e)))
                continue
            by_env.setdefault(t.env_id, {}).setdefault(t.variant, []).append(data)
    n_done = sum(len(v) for e in by_env.values() for v in e.values())
    lines = [f"# Sweep report: {folder.name}", "",
             f"Sweep folder `{folder.path.name}`: {len(folder.trials)} trials, {n_done} finished, "
             f"{len(failed)} failed, "
             + (f"{len(stopped)} stopped early (pruned), " if stopped else "")
             + (f"{len(invalid)} invalid (left out, see below), " if invalid else "")
             + f"{len(pending)} not run yet.", "",
             "## Protocol", "",
             "Greedy evaluation (argmax for discrete actions, the Gaussian mean for continuous "
             "ones; a trial with eval_deterministic false samples its actions instead, from a "
             "generator seeded like its episodes, as each env's line below says) on fixed "
             "episode seeds (seed + 10000 + i), with the observation "
             "normaliser frozen; the untrained policy is evaluated at step 0. A trial's final "
             "return is the evaluation after its last iteration. Across seeds: mean ± sample "
             "std (n - 1), median, IQM (mean of the middle 50%, floor(n/4) cut at each end); "
             f"95% CIs by percentile bootstrap over seeds ({n_boot} resamples, fixed RNG). "
             f"Curves: the {'mean' if stat == 'mean' else 'IQM'} over seeds of each seed's "
             "latest evaluation at or before each step, with a 95% bootstrap band. Steps to "
             "threshold: the first evaluated step with a return >= threshold ('first'), "
             "and the step from which every later evaluation stays >= threshold ('stays'); "
             "medians count seeds that never get there as infinitely late.", "",
             *_protocol(folder.trials), ""]
    per_trial: list[str] = []
    word = eval_word(folder.trials)
    for env_id, variants in by_env.items():
        env_word = eval_word([d.trial for v in variants.values() for d in v])
        threshold = thr.get(env_id)
        summaries = []
        for variant, data in variants.items():
            data.sort(key=lambda d: d.trial.seed)
            summaries.append(summarise(env_id, variant, data, threshold, n_boot))
        png = out / f"curves_{_safe(env_id)}.png"
        write_curves(png.with_suffix(".json"), env_id, variants, stat, threshold, env_word,
                     min(n_boot, 2000))
        draw_curves(png.with_suffix(".json"), png)
        lines += [f"## {env_id}", "", f"![{env_id}]({png.name})", "",
                  f"| variant | seeds | final {env_word} return, mean ± std | 95% CI (mean) "
                  "| median "
                  "| IQM [95% CI] |", "|---|---|---|---|---|---|"]
        for s in summaries:
            lines.append(
                f"| {s.variant} | {len(s.seeds)} | {_f(s.mean)} ± {_f(s.std)} "
                f"| [{_f(s.mean_ci[0])}, {_f(s.mean_ci[1])}] | {_f(s.median)} "
                f"| {_f(s.iqm)} [{_f(s.iqm_ci[0])}, {_f(s.iqm_ci[1])}] |")
        if threshold is not None:
            lines += ["", f"Steps to a {env_word} return >= {threshold:g}:", "",
                      "| variant | first: median | first: reached (range) | stays: median "
                      "| stays: reached (range) |", "|---|---|---|---|---|"]
            for s in summaries:
                lines.append(
                    f"| {s.variant} | {_steps(stats.median_steps(s.first_hit))} "
                    f"| {_hits(s.first_hit)} | {_steps(stats.median_steps(s.stay_hit))} "
                    f"| {_hits(s.stay_hit)} |")
        lines += ["", "Diagnostics (each trial's median over its iterations, robust to the few "
                  "iterations where returns barely vary and explained variance dives; then the "
                  "mean over seeds), wall time per trial and median iteration SPS (both depend "
                  "on the machine's load):", "",
                  "| variant | " + " | ".join(name for _, name in DIAGNOSTICS)
                  + " | wall s/trial | SPS |", "|---|" + "---|" * (len(DIAGNOSTICS) + 2)]
        for s in summaries:
            lines.append(f"| {s.variant} | "
                         + " | ".join(_g(s.diagnostics[k]) for k, _ in DIAGNOSTICS)
                         + f" | {_f(s.wall_s, 0)} | {_f(s.sps, 0)} |")
        lines.append("")
        for variant, data in variants.items():
            for d in data:
                first = stats.steps_to_threshold(d.steps, d.returns, threshold) \
                    if threshold is not None else None
                per_trial.append(f"| {env_id} | {variant} | {d.trial.seed} | {_f(d.final)} "
                                 f"| {_steps(first) if threshold is not None else '–'} "
                                 f"| {_f(d.wall_s, 0)} |")
    if failed:
        lines += ["## Failed trials", "", "| trial | error |", "|---|---|"]
        lines += [f"| {t.id} | {err.replace('|', '/')} |" for t, err in failed]
        lines.append("")
    if invalid:
        lines += ["## Invalid trials (left out of every number above)", "",
                  "Recorded as finished, but their files cannot be trusted; to rerun one, delete "
                  "its folder trials/<id>/ and `trustrl sweep --resume` the sweep.", "",
                  "| trial | reason |", "|---|---|"]
        lines += [f"| {t.id} | {why.replace('|', '/')} |" for t, why in invalid]
        lines.append("")
    if pending:
        lines += ["## Not run yet", "", ", ".join(t.id for t in pending), ""]
    if per_trial:
        lines += ["## Every trial", "", f"| env | variant | seed | final {word} return "
                  "| first step >= threshold | wall s |", "|---|---|---|---|---|---|",
                  *per_trial, ""]
    path = out / "REPORT.md"
    path.write_text("\n".join(lines))
    return path
