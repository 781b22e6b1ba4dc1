"""Pure statistics for sweep reports: IQM, percentile bootstrap CIs, curves, thresholds.

Seeds are the unit of replication: a confidence interval resamples whole seeds (with their
whole curves), never episodes. With one env this is rliable's stratified bootstrap with a
single stratum; `stratified_bootstrap_ci` resamples seeds within each env independently for
an aggregate over several envs (Agarwal et al., 2021, "Deep RL at the edge of the statistical
precipice").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

Stat = Callable[[np.ndarray, int], np.ndarray]


def mean(x: np.ndarray, axis: int = 0) -> np.ndarray:
    return np.mean(x, axis=axis)


def iqm(x: np.ndarray, axis: int = 0) -> np.ndarray:
    """Interquartile mean: the mean after cutting floor(n/4) values at each end (as
    scipy.stats.trim_mean(x, 0.25), which rliable uses). n = 1..3 cuts nothing."""
    x = np.sort(np.asarray(x, dtype=float), axis=axis)
    n = x.shape[axis]
    k = int(math.floor(0.25 * n))
    return np.mean(np.take(x, np.arange(k, n - k), axis=axis), axis=axis)


STATS: dict[str, Stat] = {"mean": mean, "iqm": iqm}


def bootstrap_ci(x: np.ndarray, stat: Stat = mean, n_boot: int = 5000, level: float = 0.95,
                 seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap CI of stat over axis 0 (the seeds): x is [n] or [n, points].

    Resamples n seeds with replacement n_boot times (a fixed RNG seed: the same report twice
    gives the same bands). One seed gives a zero-width band: there is no spread to show.
    """
    x = np.asarray(x, dtype=float)
    n = x.shape[0]
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n))
    samples = stat(x[idx], 1)  # [n_boot, ...]
    a = (1.0 - level) / 2.0
    lo, hi = np.quantile(samples, [a, 1.0 - a], axis=0)
    return lo, hi


def stratified_bootstrap_ci(groups: Sequence[np.ndarray], stat: Stat = iqm, n_boot: int = 5000,
                            level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """CI of stat over the pooled scores of several envs (already on a common scale, e.g.
    normalised), resampling seeds within each env so every env keeps its number of seeds."""
    rng = np.random.default_rng(seed)
    arrays = [np.asarray(g, dtype=float) for g in groups]
    pooled = np.concatenate(
        [g[rng.integers(0, len(g), size=(n_boot, len(g)))] for g in arrays], axis=1)
    samples = stat(pooled, 1)
    a = (1.0 - level) / 2.0
    lo, hi = np.quantile(samples, [a, 1.0 - a])
    return float(lo), float(hi)


def curve_on_grid(steps: np.ndarray, values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """The latest evaluation at or before each grid step (NaN before the first): a curve read
    as "what the user had at that point", never looking ahead. steps must be increasing."""
    steps, values = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    pos = np.searchsorted(steps, np.asarray(grid, dtype=float), side="right") - 1
    out = np.full(len(grid), np.nan)
    ok = pos >= 0
    out[ok] = values[pos[ok]]
    return out


def steps_to_threshold(steps: np.ndarray, values: np.ndarray, threshold: float) -> int | None:
    """The first evaluated step whose greedy return is >= threshold, or None."""
    hit = np.nonzero(np.asarray(values, dtype=float) >= threshold)[0]
    return int(steps[hit[0]]) if len(hit) else None


def steps_to_stay(steps: np.ndarray, values: np.ndarray, threshold: float) -> int | None:
    """The first evaluated step from which every later evaluation is >= threshold, or None
    (a lucky single evaluation does not count; the last one must be above)."""
    ok = np.asarray(values, dtype=float) >= threshold
    if not len(ok) or not ok[-1]:
        return None
    below = np.nonzero(~ok)[0]
    first = below[-1] + 1 if len(below) else 0
    return int(steps[first])


def median_steps(values: Sequence[int | None]) -> float | None:
    """Median with 'never reached' counted as +inf: None when half or more never reached."""
    x = np.array([math.inf if v is None else float(v) for v in values])
    if not len(x):
        return None
    m = float(np.median(x))
    return None if math.isinf(m) or math.isnan(m) else m
