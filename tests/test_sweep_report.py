"""Sweep statistics against closed forms and exhaustive enumeration, and `trustrl report` on a
synthetic sweep folder whose means, bands and thresholds are known by hand."""

from __future__ import annotations

import csv
import itertools
import json

import numpy as np
import pytest

from trustrl.cli import main
from trustrl.records.runs import METRIC_COLUMNS
from trustrl.sweep import stats
from trustrl.sweep.folder import SweepFolder
from trustrl.sweep.report import curve_band, load_trial
from trustrl.sweep.spec import parse_spec


# ----- statistics ----------------------------------------------------------------------------
@pytest.mark.parametrize("n", range(1, 13))
def test_iqm_is_the_mean_after_cutting_a_quarter_at_each_end(n):
    x = np.random.default_rng(n).normal(size=n) * 10
    k = n // 4
    assert stats.iqm(x) == pytest.approx(np.sort(x)[k:n - k].mean(), abs=1e-12)
    assert stats.iqm(np.arange(1.0, 9.0)) == 4.5  # 1..8: mean of 3, 4, 5, 6


def test_iqm_along_an_axis():
    x = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [100.0, 40.0]])
    np.testing.assert_allclose(stats.iqm(x, 0), [2.5, 25.0])


@pytest.mark.parametrize("stat", ["mean", "iqm"])
def test_bootstrap_interval_matches_exhaustive_enumeration(stat):
    """n = 4 seeds: all 4^4 = 256 resamples are equally likely; the bootstrap's percentile
    interval must match the enumerated distribution's to within one step between its values."""
    x = np.array([0.0, 1.0, 3.0, 7.0])
    f = stats.STATS[stat]
    exact = np.array([f(np.array(c), 0) for c in itertools.product(x, repeat=4)])
    lo, hi = stats.bootstrap_ci(x, f, n_boot=100_000)
    support = np.unique(exact)
    step = np.diff(support).max()
    assert abs(lo - np.quantile(exact, 0.025)) <= step
    assert abs(hi - np.quantile(exact, 0.975)) <= step
    # the interval's coverage of the exact distribution is close to 95%
    inside = np.mean((exact >= lo) & (exact <= hi))
    assert 0.93 <= inside <= 1.0


def test_bootstrap_bands_of_identical_seeds_or_one_seed_have_zero_width():
    curve = np.array([[1.0, 2.0, 3.0]] * 5)
    lo, hi = stats.bootstrap_ci(curve, stats.mean, 500)
    np.testing.assert_array_equal(lo, curve[0])
    np.testing.assert_array_equal(hi, curve[0])
    lo1, hi1 = stats.bootstrap_ci(np.array([4.0]), stats.iqm, 500)
    assert lo1 == hi1 == 4.0


def test_stratified_bootstrap_keeps_each_env_size():
    a, b = np.array([0.0, 0.0]), np.array([1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    lo, hi = stats.stratified_bootstrap_ci([a, b], stats.mean, 1000)
    assert lo == hi == pytest.approx(0.75)  # 6 of 8 ones in every resample


def test_curve_on_grid_holds_the_latest_evaluation_and_never_looks_ahead():
    y = stats.curve_on_grid(np.array([100, 300]), np.array([1.0, 5.0]),
                            np.array([0, 100, 200, 300, 400]))
    np.testing.assert_array_equal(y, [np.nan, 1.0, 1.0, 5.0, 5.0])


def test_steps_to_threshold_first_and_stay():
    steps = np.array([0, 10, 20, 30, 40])
    v = np.array([0.0, 5.0, 2.0, 5.0, 6.0])
    assert stats.steps_to_threshold(steps, v, 5) == 10
    assert stats.steps_to_stay(steps, v, 5) == 30
    assert stats.steps_to_threshold(steps, v, 7) is None
    assert stats.steps_to_stay(steps, np.array([5.0, 5, 5, 5, 4]), 5) is None
    assert stats.steps_to_stay(steps, np.full(5, 9.0), 5) == 0
    assert stats.median_steps([10, 30, None]) == 30
    assert stats.median_steps([10, None, None]) is None
    assert stats.median_steps([10, None]) is None  # half never got there
    assert stats.median_steps([10, 20, 30, None]) == 25


# ----- report on a synthetic sweep -----------------------------------------------------------
STEPS = [0, 512, 1024, 1536]
CURVES = {  # variant -> seed -> greedy return at STEPS (the last one is the final evaluation)
    "ppo": {1: [10.0, 100.0, 300.0, 100.0], 2: [20.0, 200.0, 500.0, 200.0],
            3: [30.0, 300.0, 500.0, 300.0]},
    "trpo": {1: [50.0, 400.0, 400.0, 400.0], 2: [50.0, 400.0, 400.0, 400.0],
             3: [50.0, 400.0, 400.0, 400.0]},
}


def _synthetic_sweep(path):
    spec = parse_spec({"name": "synthetic", "seeds": [1, 2, 3], "total_steps": 1536,
                       "algos": ["ppo", "trpo"],
                       "envs": {"CartPole-v1": {"threshold": 400}},
                       "common": {"num_envs": 2, "num_steps": 256, "eval_every": 1}},
                      check_envs=False)
    folder = SweepFolder.create(path, spec, "synthetic\n")
    for t in folder.trials:
        ys = CURVES[t.variant][t.seed]
        run = folder.trial_dir(t) / f"CartPole-v1__{t.algo}__{t.seed}__x"
        run.mkdir(parents=True)
        with open(run / "metrics.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=METRIC_COLUMNS)
            w.writeheader()
            for i, (s, y) in enumerate(zip(STEPS[1:], ys[1:], strict=True)):
                w.writerow({"iteration": i + 1, "global_step": s, "eval_return_mean": y,
                            "approx_kl": 0.01 * t.seed if i < 2 else 1.0,  # one outlier
                            "clip_fraction": 0.1, "sps": 1000,
                            "entropy": 0.5, "kl_exact": 0.02, "explained_variance": 0.9})
        (run / "eval_initial.json").write_text(json.dumps({"mean": ys[0]}))
        (run / "eval.json").write_text(json.dumps({"mean": ys[-1]}))
        (folder.trial_dir(t) / "result.json").write_text(json.dumps(
            {"status": "finished", "run": run.name, "wall_s": 2.0}))
    return folder


def test_report_means_bands_and_thresholds_on_a_synthetic_sweep(tmp_path):
    folder = _synthetic_sweep(tmp_path / "sw")
    ppo = [load_trial(folder, t, folder.result(t)) for t in folder.trials if t.algo == "ppo"]
    np.testing.assert_array_equal(ppo[0].steps, STEPS)
    grid = np.array(STEPS)
    centre, lo, hi = curve_band(ppo, grid, "mean", 5000)
    np.testing.assert_allclose(centre, np.mean([CURVES["ppo"][s] for s in (1, 2, 3)], axis=0))
    # 3 seeds: the lowest resample mean (all the worst seed) has probability 1/27 > 2.5%, so
    # the 95% band runs exactly from the worst seed's value to the best seed's
    np.testing.assert_allclose(lo, np.min([CURVES["ppo"][s] for s in (1, 2, 3)], axis=0))
    np.testing.assert_allclose(hi, np.max([CURVES["ppo"][s] for s in (1, 2, 3)], axis=0))
    trpo = [load_trial(folder, t, folder.result(t)) for t in folder.trials if t.algo == "trpo"]
    c2, lo2, hi2 = curve_band(trpo, grid, "iqm", 500)
    np.testing.assert_array_equal(lo2, c2)
    np.testing.assert_array_equal(hi2, c2)

    assert main(["report", str(folder.path), "--boot", "2000"]) == 0
    text = (folder.path / "report" / "REPORT.md").read_text()
    # finals 100, 200, 300: mean 200, sample std 100, CI from worst to best seed
    assert "| ppo | 3 | 200.0 ± 100.0 | [100.0, 300.0] | 200.0 | 200.0 [100.0, 300.0] |" in text
    assert "| trpo | 3 | 400.0 ± 0.0 | [400.0, 400.0] | 400.0 | 400.0 [400.0, 400.0] |" in text
    # threshold 400: ppo seeds 2 and 3 first reach it at 1024, seed 1 never; none stays
    assert "| ppo | 1,024 | 2/3 (range 1,024–1,024) | not reached | 0/3 |" in text
    assert "| trpo | 512 | 3/3 (range 512–512) | 512 | 3/3 (range 512–512) |" in text
    # diagnostics: each trial's median over iterations (the outlier 1.0 ignored) is
    # 0.01 * seed, and their mean over seeds 1, 2, 3 is 0.02
    assert "| ppo | 0.02 | 0.02 | 0.1 | 0.9 | 0.5 | 2 | 1,000 |" in text
    assert (folder.path / "report" / "curves_CartPole-v1.png").stat().st_size > 10_000


def test_a_reports_figure_is_redrawn_from_its_data_file_alone(tmp_path):
    """curves_<env>.json holds every trial's evaluations: with the runs gone, draw_curves
    gives the report's figure byte for byte, and the file's curves are the trials'."""
    import shutil

    from trustrl.sweep.report import draw_curves

    folder = _synthetic_sweep(tmp_path / "sw")
    assert main(["report", str(folder.path), "--out", str(tmp_path / "rep")]) == 0
    data = tmp_path / "rep" / "curves_CartPole-v1.json"
    d = json.loads(data.read_text())
    assert {v: [t["seed"] for t in ts] for v, ts in d["variants"].items()} == {
        "ppo": [1, 2, 3], "trpo": [1, 2, 3]}
    assert [t["returns"] for t in d["variants"]["ppo"]] == [
        [float(x) for x in CURVES["ppo"][s]] for s in (1, 2, 3)]
    assert [t["steps"] for t in d["variants"]["ppo"]] == [list(STEPS)] * 3
    shutil.copy(data, tmp_path / "alone.json")
    shutil.rmtree(folder.path)
    draw_curves(tmp_path / "alone.json", tmp_path / "again.png")
    assert (tmp_path / "again.png").read_bytes() == (
        tmp_path / "rep" / "curves_CartPole-v1.png").read_bytes()


def test_report_lists_failed_and_pending_trials(tmp_path):
    folder = _synthetic_sweep(tmp_path / "sw")
    a, b = folder.trials[0], folder.trials[1]
    folder.record_failure(a, "NonFiniteError: non-finite observation")
    (folder.trial_dir(b) / "result.json").unlink()
    assert main(["report", str(folder.path), "--out", str(tmp_path / "rep"), "--stat", "iqm",
                 "--threshold", "CartPole-v1=300"]) == 0
    text = (tmp_path / "rep" / "REPORT.md").read_text()
    assert "4 finished, 1 failed, 1 not run yet" in text
    assert f"| {a.id} | NonFiniteError: non-finite observation |" in text
    assert b.id in text.split("## Not run yet")[1]
    assert "greedy return >= 300" in text
    assert "Curves: the IQM over seeds" in text
