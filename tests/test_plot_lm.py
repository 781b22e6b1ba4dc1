"""`trustrl plot` on language-model run folders (Hugging Face runs and the sort study's): the
reward curve, its spread and the KL to pi_ref (curves.lm_curve), the held-out evaluations led by
eval.json's start evaluation at 0; the RL runs' folders are written here as data (no model
trained). The sort study's SFT and reward-model stages (curves.SFT_CURVE, RM_CURVE) are plotted
from tiny runs trained here through `trustrl rlhf`."""

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
    """Every Axes.plot call of the figure: (ylabel set later, so the axes, x, y, kwargs), and
    the figures saved (their Axes and Line2D objects, read after the figure is closed)."""

    def __init__(self, monkeypatch):
        from matplotlib.axes import Axes
        from matplotlib.figure import Figure

        self.calls: list[tuple[object, np.ndarray, np.ndarray, dict]] = []
        self.figures: list[Figure] = []
        plot, savefig = Axes.plot, Figure.savefig

        def spy(ax, x, y, *a, **kw):
            self.calls.append((ax, np.asarray(x, float), np.asarray(y, float), kw))
            return plot(ax, x, y, *a, **kw)

        def saved(fig, *a, **kw):
            self.figures.append(fig)
            return savefig(fig, *a, **kw)

        monkeypatch.setattr(Axes, "plot", spy)
        monkeypatch.setattr(Figure, "savefig", saved)

    def panels(self) -> list[list[tuple[np.ndarray, np.ndarray]]]:
        """The one saved figure's panels, top to bottom: each its lines' (x, y) data."""
        (fig,) = self.figures
        return [[(np.asarray(ln.get_xdata(), float), np.asarray(ln.get_ydata(), float))
                 for ln in ax.get_lines()] for ax in fig.axes]

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


# --- the sort study's SFT and reward-model stages, trained here ----------------------------------
def column(run: Path, key: str) -> tuple[np.ndarray, np.ndarray]:
    """(global_step, key) on the rows where `key` is logged (not empty)."""
    with open(run / "metrics.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r[key] != ""]
    return (np.array([float(r["global_step"]) for r in rows]),
            np.array([float(r[key]) for r in rows]))


def only_run(folder: Path, stage: str) -> Path:
    (run,) = folder.glob(f"sort__{stage}__*")
    return run


@pytest.fixture(scope="module")
def stages(tmp_path_factory) -> dict[str, Path]:
    """Tiny runs of `trustrl rlhf sft` (seed 1: 40 steps, so that its answers vary enough
    for preference pairs; seed 2: 8 steps) and `trustrl rlhf reward-model` on the first
    (seeds 1 and 2), each in its own runs folder."""
    root = tmp_path_factory.mktemp("stages")
    quiet = ["--quiet", "--set", "eval_prompts=32"]
    for seed, steps in ((1, 40), (2, 8)):
        assert main(["rlhf", "sft", "--seed", str(seed), "--steps", str(steps), "--set",
                     "eval_every=10", "--runs-dir", str(root / f"sft{seed}"), *quiet]) == 0
    sft = only_run(root / "sft1", "sft")
    for seed in (1, 2):
        assert main(["rlhf", "reward-model", "--sft", str(sft), "--seed", str(seed), "--pairs",
                     "800", "--set", "heldout_pairs=200", "--set", "epochs=2", "--set",
                     "batch_size=16", "--runs-dir", str(root / f"rm{seed}"), "--quiet"]) == 0
    return {"sft": sft, "sft2": only_run(root / "sft2", "sft"),
            "rm": only_run(root / "rm1", "reward-model"),
            "rm2": only_run(root / "rm2", "reward-model")}


def test_plot_draws_an_sft_runs_loss_every_step_and_its_gold_evaluations(stages, monkeypatch):
    """`trustrl plot SFT_RUN`: learning_curve.png with the loss of every one of the 40 steps
    (raw and its moving average) over teacher answers seen, and below it gold/exact at the
    evaluated steps (10, 20, 30, 40) as points: the logged values, nothing else drawn."""
    run = stages["sft"]
    drawn = Drawn(monkeypatch)
    assert main(["plot", str(run)]) == 0
    png = run / "learning_curve.png"
    assert png.read_bytes().startswith(b"\x89PNG") and png.stat().st_size > 10_000
    steps, loss = column(run, "loss")
    assert len(loss) == 40 and steps.tolist() == [128 * k for k in range(1, 41)]
    (raw, smooth), (gold,) = drawn.panels()
    assert raw[0].tolist() == steps.tolist() and raw[1].tolist() == loss.tolist()
    assert smooth[1][-1] == pytest.approx(loss[-5:].mean())
    ex, ey = column(run, "gold/exact")
    assert ex.tolist() == [128 * k for k in (10, 20, 30, 40)]
    assert gold[0].tolist() == ex.tolist() and gold[1].tolist() == ey.tolist()


def test_plot_draws_a_reward_models_loss_and_pair_accuracies(stages, monkeypatch):
    """`trustrl plot RM_RUN`: the Bradley-Terry loss of every Adam step over pairs seen, the
    training and held-out pair accuracies at each epoch's end in two panels below."""
    run = stages["rm"]
    drawn = Drawn(monkeypatch)
    assert main(["plot", str(run)]) == 0
    assert (run / "learning_curve.png").read_bytes().startswith(b"\x89PNG")
    steps, loss = column(run, "loss")
    assert len(loss) > 4 and np.all(np.diff(steps) > 0)  # a row per step, more than 2 epochs'
    (raw, _), (train,), (heldout,) = drawn.panels()
    assert raw[0].tolist() == steps.tolist() and raw[1].tolist() == loss.tolist()
    for (x, y), key in ((train, "train_accuracy"), (heldout, "heldout_accuracy")):
        ex, ey = column(run, key)
        assert len(ex) == 2 and ex[-1] == steps[-1]  # each epoch's last step
        assert x.tolist() == ex.tolist() and y.tolist() == ey.tolist()


@pytest.mark.parametrize("stage", ["sft", "rm"])
def test_plot_overlays_several_runs_of_one_stage(stages, monkeypatch, tmp_path, stage):
    """Two SFT runs (40 and 8 steps), or two reward models: one figure, each run's moving
    average of its loss in the first panel, its evaluations in each panel below."""
    a, b = stages[stage], stages[f"{stage}2"]
    out = tmp_path / "both.png"
    drawn = Drawn(monkeypatch)
    assert main(["plot", str(a), str(b), "--out", str(out)]) == 0
    assert out.read_bytes().startswith(b"\x89PNG")
    top, *below = drawn.panels()
    assert len(top) == 2 and [len(x) for x, _ in top] == [len(column(r, "loss")[0])
                                                          for r in (a, b)]
    keys = ["gold/exact"] if stage == "sft" else ["train_accuracy", "heldout_accuracy"]
    for lines, key in zip(below, keys, strict=True):
        assert [y.tolist() for _, y in lines] == [column(r, key)[1].tolist() for r in (a, b)]


def test_plot_refuses_a_mixture_of_stages_in_one_line_naming_them(stages, tmp_path, capsys):
    """SFT with a reward model, with a GRPO run or with a trustrl train run: exit 2, one line
    naming both kinds, no figure."""
    grpo = lm_run(tmp_path, "grpo", list(GRPO_COLUMNS))
    core = core_run(tmp_path)
    out = tmp_path / "mix.png"
    for pair, kinds in (((stages["sft"], stages["rm"]), "(SFT, reward model)"),
                        ((stages["sft"], grpo), "(SFT, GRPO / RLOO)"),
                        ((core, stages["sft"]), "(trustrl train, SFT)")):
        assert main(["plot", *map(str, pair), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("trustrl: error: ") and kinds in err, err
        assert not out.exists()


def test_plot_reads_a_stage_folder_from_others_as_data(tmp_path, monkeypatch, capsys):
    """A folder from someone else: SFT columns with odd ones beside them (code as names, a
    newline in a quoted name) and a config.json naming a module, importable from the current
    folder, that leaves a mark when imported. It is drawn from its columns (nothing imported);
    the same with text as a value, or with columns of no known kind, is one line, exit 2."""
    (tmp_path / "payload.py").write_text("open('IMPORTED', 'w').write('x')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    odd = ["__import__('payload')", 'a "quoted"\nname', "gold/exact", "loss", "step",
           "global_step", "iteration", "é"]
    rows = [[f"{i}.5", "x", "" if i % 2 else "0.25", f"{2.0 / i}", i, 16 * i, i, "?"]
            for i in range(1, 7)]

    def folder(name: str, header: list[str], rows: list[list]) -> Path:
        run = tmp_path / name
        run.mkdir()
        with open(run / "metrics.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(header)
            w.writerows(rows)
        (run / "config.json").write_text(json.dumps({"reward": "payload:reward",
                                                     "policy": "payload:Policy"}))
        return run

    good = folder("odd", odd, rows)
    text = folder("text", odd, [[*r[:3], "os.system('x')", *r[4:]] for r in rows])
    unknown = folder("unknown", ["payload", "exec('x')"], [["1", "2"]])
    drawn = Drawn(monkeypatch)
    assert main(["plot", str(good)]) == 0
    assert (good / "learning_curve.png").is_file()
    (raw, _), (gold,) = drawn.panels()
    assert raw[1].tolist() == [2.0 / i for i in range(1, 7)]
    assert gold[0].tolist() == [32, 64, 96] and gold[1].tolist() == [0.25] * 3
    capsys.readouterr()
    for run, says in ((text, "not a number"), (unknown, "has no column global_step")):
        assert main(["plot", str(run)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err, err
        assert not (run / "learning_curve.png").exists()
    assert "payload" not in sys.modules and not (tmp_path / "IMPORTED").exists(), \
        "plot imported a module the folder names"
