"""`trustrl plot` on language-model run folders (Hugging Face runs and the sort study's): the
reward curve, its spread and the KL to pi_ref (hf_run.lm_curve), the held-out evaluations led by
eval.json's start evaluation at 0. The folders are written here as data (no model trained)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trustrl.cli import main
from trustrl.rlhf.grpo import GRPO_COLUMNS
from trustrl.rlhf.hf_run import columns
from trustrl.rlhf.ppo import PPO_COLUMNS

REWARD = [("m:small_digits_reward", None)]


def lm_run(root: Path, name: str, header: list[str], n: int = 6, start: float | None = None,
           seed: int = 0) -> Path:
    """A run folder whose metrics.csv has `header` and n rows of random numbers (global_step =
    8 * iteration), eval.json with a start evaluation when given."""
    rng = np.random.default_rng(seed)
    run = root / name
    run.mkdir(parents=True)
    with open(run / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, header)
        w.writeheader()
        for it in range(1, n + 1):
            w.writerow({k: it if k == "iteration" else 8 * it if k == "global_step"
                        else float(rng.uniform(0.1, 1.0)) for k in header})
    if start is not None:
        (run / "eval.json").write_text(json.dumps({"start": {"reward": start},
                                                   "final": {"reward": 0.9}}))
    return run


def core_run(root: Path) -> Path:
    run = root / "core"
    run.mkdir()
    (run / "metrics.csv").write_text("iteration,global_step,ep_return_mean,eval_return_mean\n"
                                     "1,100,1.0,\n2,200,2.0,3.0\n")
    return run


class Drawn:
    """Every Axes.plot call of the figure: (ylabel set later, so the axes, x, y, kwargs)."""

    def __init__(self, monkeypatch):
        from matplotlib.axes import Axes

        self.calls: list[tuple[object, np.ndarray, np.ndarray, dict]] = []
        plot = Axes.plot

        def spy(ax, x, y, *a, **kw):
            self.calls.append((ax, np.asarray(x, float), np.asarray(y, float), kw))
            return plot(ax, x, y, *a, **kw)

        monkeypatch.setattr(Axes, "plot", spy)

    def evals(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(x, y) for _, x, y, kw in self.calls if kw.get("ls") == "--"]


def read(run: Path, key: str) -> np.ndarray:
    with open(run / "metrics.csv", newline="") as f:
        return np.array([float(r[key]) for r in csv.DictReader(f)])


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_plot_draws_a_hugging_face_runs_reward_kl_and_evaluations(tmp_path, monkeypatch,
                                                                   capsys, algo):
    """One run: its raw reward (objective/scores for PPO) and the KL to pi_ref in the panel
    below; the eval/reward points led by the start evaluation at x = 0."""
    run = lm_run(tmp_path, "run", columns(algo, REWARD, "", evals=True), start=0.123)
    drawn = Drawn(monkeypatch)
    assert main(["plot", str(run)]) == 0
    assert (run / "learning_curve.png").read_bytes().startswith(b"\x89PNG")
    reward = read(run, "objective/scores" if algo == "ppo" else "reward")
    ys = [y for _, _, y, _ in drawn.calls]
    assert any(np.array_equal(y, reward) for y in ys)
    assert any(np.array_equal(y, read(run, "kl_ref/exact")) for y in ys)
    ((x, y),) = drawn.evals()
    assert x.tolist() == [0, *read(run, "global_step")]
    assert y.tolist() == [0.123, *read(run, "eval/reward")]


def test_no_start_point_without_eval_points(tmp_path, monkeypatch):
    """A run not evaluated during training draws no evaluation line, eval.json or not."""
    run = lm_run(tmp_path, "run", columns("grpo", REWARD, ""), start=0.5)
    drawn = Drawn(monkeypatch)
    assert main(["plot", str(run)]) == 0
    assert drawn.evals() == []


def test_plot_overlays_several_language_model_runs(tmp_path, monkeypatch):
    """Two GRPO runs (one a sort-study run, one without evaluations): one figure with both
    runs' rewards, compare.png beside them; the evaluated run's points start at 0."""
    a = lm_run(tmp_path / "runs", "hf", columns("grpo", REWARD, "", evals=True), start=0.2,
               seed=1)
    b = lm_run(tmp_path / "runs", "sort", list(GRPO_COLUMNS), seed=2)
    drawn = Drawn(monkeypatch)
    assert main(["plot", str(a), str(b)]) == 0
    assert (tmp_path / "runs" / "compare.png").is_file()
    assert len(drawn.calls) >= 4  # each run's moving average and KL
    ((x, y),) = drawn.evals()
    assert x[0] == 0 and y[0] == 0.2 and y[1:].tolist() == read(a, "eval/reward").tolist()


def test_plot_refuses_a_mixture_in_one_line(tmp_path):
    """A trustrl train run with a language-model run, or PPO's with GRPO's: one line, exit 2,
    no figure."""
    grpo = lm_run(tmp_path, "grpo", list(GRPO_COLUMNS))
    ppo = lm_run(tmp_path, "ppo", list(PPO_COLUMNS))
    core = core_run(tmp_path)
    for pair in ((core, grpo), (grpo, core), (grpo, ppo)):
        p = subprocess.run([sys.executable, "-m", "trustrl", "plot", *map(str, pair)],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
        assert p.stderr.count("\n") == 1 and "plot them apart" in p.stderr
    assert not (tmp_path / "compare.png").exists()
    ok = subprocess.run([sys.executable, "-m", "trustrl", "plot", str(grpo)],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and (grpo / "learning_curve.png").is_file(), ok.stderr
