"""benchmarks/zoo_curves.py (issue 19.3): the zoo's evaluation curve at trustrl's budget, read from
an rl-trained-agents layout without unpickling, beside each run's last greedy evaluation."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "zoo_curves.py"
ENV = "BipedalWalkerHardcore-v3"


def _zoo_curves(*args: str) -> subprocess.CompletedProcess:
    """benchmarks/zoo_curves.py with these arguments, in a fresh interpreter."""
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=120)


def _agents(tmp: Path, per_step: float = 1 / 10_000) -> Path:
    d = tmp / "agents" / "ppo" / f"{ENV}_1"
    d.mkdir(parents=True)
    steps = np.arange(1, 41) * 50_000  # 50k .. 2M
    results = np.stack([np.full(10, s * per_step) + np.linspace(-1, 1, 10) for s in steps])
    np.savez(d / "evaluations.npz", timesteps=steps, results=results,
             ep_lengths=np.ones_like(results))
    return tmp / "agents"


def _run(folder: Path, seed: int, evals: list[tuple[int, float]], env: str = ENV,
         **config: object) -> None:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"env_id": env, "seed": seed, **config}))
    lines = ["iteration,global_step,eval_return_mean"]
    lines += [f"{i},{s},{v}" for i, (s, v) in enumerate(evals, 1)]
    lines.append(f"{len(evals) + 1},{evals[-1][0] + 10},")  # a row without an evaluation
    (folder / "metrics.csv").write_text("\n".join(lines) + "\n")


def test_table_and_files_at_the_smallest_budget(tmp_path: Path) -> None:
    agents = _agents(tmp_path)
    sweep = tmp_path / "sweep" / "trials"
    _run(sweep / "t1" / "run", 1, [(500_000, 10.0), (1_000_000, 30.0)])
    _run(sweep / "t2" / "run", 2, [(500_000, 5.0), (1_000_000, 50.0), (1_500_000, 99.0)])
    _run(sweep / "t3" / "run", 3, [(400_000, -7.0), (1_000_000, 20.0)],
         eval_deterministic=False)
    _run(sweep / "t4" / "run", 4, [(1_000_000, 1e6)], env="Other-v0")  # another env: ignored
    out = tmp_path / "out"
    proc = _zoo_curves("--agents", str(agents), "--env", ENV, "--runs", str(tmp_path / "sweep"),
                       "--out", str(out), "--at", "450000", "500000")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "at 1,000,000 steps" in text
    # how each side evaluated: seed 3 sampled its actions; the zoo's non-Atari agent did not
    assert "(trustrl: greedy and sampled; the zoo: deterministic)" in text
    # seeds' last evaluations up to 1M: 30, 50 (not its 99 at 1.5M), 20 -> median 30
    assert "| trustrl, median of seeds 1, 2, 3 | 30.0 | per seed: 30.0, 50.0, 20.0 |" in text
    # the zoo's evaluation at 1M: mean 100 (its episodes' offsets cancel), std over 10 episodes
    assert "evaluation at 1,000,000 | 100.0 |" in text
    # its evaluations in (900k, 1M]: 950k and 1M -> 97.5
    assert "mean of its 2 evaluations in (900,000, 1,000,000] | 97.5 |" in text
    assert "| the zoo's published score at its budget (100M) | 122.4 |" in text
    # --at: each seed's last evaluation up to the step (seed 3 has one at 400k, the others none
    # before 500k), the zoo's evaluation nearest; the budget closes the table
    assert "| 450,000 | -7.0 (-, -, -7.0) | 45.0 (at 450,000) |" in text
    assert "| 500,000 | 5.0 (10.0, 5.0, -7.0) | 50.0 (at 500,000) |" in text
    assert "| 1,000,000 | 30.0 (30.0, 50.0, 20.0) | 100.0 (at 1,000,000) |" in text
    rows = (out / f"zoo_ppo_{ENV}.csv").read_text().splitlines()
    assert rows[0] == "step,mean,std" and rows[-1].startswith("1500000,150.000,")
    assert (out / f"curve_{ENV}.png").stat().st_size > 10_000
    assert "not drawn" not in text  # the zoo's 122.4 lies within the curves' -7 to 150


def test_the_figure_is_redrawn_from_its_two_csvs_alone(tmp_path: Path, monkeypatch) -> None:
    """trustrl_<algo>_<env>.csv keeps each seed's evaluations beside the zoo's CSV: with the
    runs and the zoo's agents gone, `draw` gives the script's figure byte for byte."""
    import shutil

    agents = _agents(tmp_path)
    _run(tmp_path / "runs" / "a", 1, [(500_000, 10.0), (1_000_000, 30.0)])
    _run(tmp_path / "runs" / "b", 2, [(400_000, -7.5), (1_000_000, 20.0)],
         eval_deterministic=False)
    out = tmp_path / "out"
    proc = _zoo_curves("--agents", str(agents), "--env", ENV, "--runs", str(tmp_path / "runs"),
                       "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert (out / f"trustrl_ppo_{ENV}.csv").read_text().splitlines() == [
        "seed,mode,step,return", "1,greedy,500000,10.0", "1,greedy,1000000,30.0",
        "2,sampled,400000,-7.5", "2,sampled,1000000,20.0"]
    alone = tmp_path / "alone"
    alone.mkdir()
    for name in (f"trustrl_ppo_{ENV}.csv", f"zoo_ppo_{ENV}.csv"):
        shutil.copy(out / name, alone / name)
    shutil.rmtree(tmp_path / "runs")
    shutil.rmtree(agents)
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # sys.path restored after the test
    from zoo_curves import draw

    assert draw(alone, "ppo", ENV) is None
    assert (alone / f"curve_{ENV}.png").read_bytes() == (out / f"curve_{ENV}.png").read_bytes()


def test_a_score_far_above_the_curves_is_named_not_drawn(tmp_path: Path) -> None:
    # the zoo's run at 1e-5 per step (0.5 to 15 up to 1.5M), trustrl's 2 to 9: the zoo's 100M
    # score 122.4 would stretch the axis to 8x the curves' span
    agents = _agents(tmp_path, per_step=1e-5)
    _run(tmp_path / "run", 1, [(500_000, 2.0), (1_000_000, 9.0)])
    out = tmp_path / "out"
    proc = _zoo_curves("--agents", str(agents), "--env", ENV, "--runs", str(tmp_path / "run"),
                       "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert ("the zoo's score at 100M (122.4) lies far outside the curves' range (0.5 to 15.0): "
            "named in the legend, not drawn") in proc.stdout
    assert (out / f"curve_{ENV}.png").stat().st_size > 10_000


def test_score_in_view_bounds_the_stretch(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # sys.path restored after the test
    from zoo_curves import score_in_view

    assert score_in_view(50.0, 0.0, 100.0) and score_in_view(300.0, 0.0, 100.0)
    assert not score_in_view(300.1, 0.0, 100.0) and not score_in_view(-200.1, 0.0, 100.0)
    assert score_in_view(1e6, 5.0, 5.0)  # flat curves: no span to keep


def test_an_env_the_zoo_did_not_score_is_one_line(tmp_path: Path) -> None:
    proc = _zoo_curves("--agents", str(tmp_path), "--env", "Humanoid-v5", "--runs", str(tmp_path))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "--env Humanoid-v5: the zoo published no ppo score for it"]


def test_a_step_past_the_budget_is_one_line(tmp_path: Path) -> None:
    agents = _agents(tmp_path)
    _run(tmp_path / "run", 1, [(500_000, 10.0), (1_000_000, 30.0)])
    proc = _zoo_curves("--agents", str(agents), "--env", ENV, "--runs", str(tmp_path / "run"),
                       "--at", "2000000")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "--at 2,000,000: not a step between 0 and trustrl's budget 1,000,000"]


def test_each_seed_against_the_zoos_running_mean(tmp_path: Path) -> None:
    # the zoo's mean is step / 10,000 (evaluations every 50k from 50k), so its running mean of 9
    # equals the curve itself at each centre, 250k (the 5th evaluation) onwards: 50.0 at 500k and
    # 100.0 at 1M; before 250k it is held at its first value, 25.0
    agents = _agents(tmp_path)
    _run(tmp_path / "sweep" / "a", 1, [(100_000, 30.0), (500_000, 45.0), (1_000_000, 110.0)])
    _run(tmp_path / "sweep" / "b", 2, [(500_000, 40.0), (1_000_000, 95.0), (1_500_000, 999.0)])
    (tmp_path / "sweep" / "a" / "eval_initial.json").write_text(json.dumps({"mean": 1e6}))
    proc = _zoo_curves("--agents", str(agents), "--env", ENV, "--runs", str(tmp_path / "sweep"))
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "running mean of 9 evaluations: defined from 250,000" in text
    # seed 1: +5 (100k, against the held 25), -5 (500k), +10 (1M); its step-0 evaluation is
    # not counted
    assert "| 1 | 2 of 3 | +3.3 | -5.0 (at 500,000) | +10.0 (at 1,000,000) |" in text
    # seed 2: -10 and -5 up to the budget (1M, the smaller final step); its 999 at 1.5M is past it
    assert "| 2 | 0 of 2 | -7.5 | -10.0 (at 500,000) | -5.0 (at 1,000,000) |" in text
