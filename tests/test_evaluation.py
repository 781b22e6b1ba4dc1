"""Evaluations with sampled actions (eval_deterministic false, `trustrl eval --stochastic`):
the same agent gets the same returns, the caller's random stream is left alone, and a
training run's numbers do not depend on how it evaluates."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch

from trustrl.collect.evaluate import evaluate
from trustrl.records.agent import Agent
from trustrl.settings.config import make_config
from trustrl.training.train import train
from trustrl.util.errors import ConfigError

EVAL_COLUMNS = {"eval_return_mean", "eval_return_std", "wall_time", "sps"}


def _untrained_agent() -> Agent:
    cfg = make_config("ppo", "CartPole-v1", sets=dict(
        total_steps=512, num_envs=2, num_steps=128, eval_every=0, tensorboard=False,
        vector="sync"))
    torch.manual_seed(0)
    from trustrl.learn.learners import make_learner

    return make_learner(cfg, [0]).agent(0)


def test_sampled_evaluation_repeats_and_leaves_the_global_stream_alone():
    agent = _untrained_agent()
    torch.manual_seed(123)
    expected_next = torch.rand(4)
    torch.manual_seed(123)
    a = evaluate(agent, "CartPole-v1", episodes=6, deterministic=False, seed=7)
    assert torch.equal(torch.rand(4), expected_next)  # the caller's stream did not move
    b = evaluate(agent, "CartPole-v1", episodes=6, deterministic=False, seed=7)
    greedy = evaluate(agent, "CartPole-v1", episodes=6, deterministic=True, seed=7)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, greedy)  # it did sample


def _metrics(run) -> list[dict[str, str]]:
    with open(run / "metrics.csv", newline="") as f:
        return [{k: v for k, v in r.items() if k not in EVAL_COLUMNS} for r in csv.DictReader(f)]


def test_a_run_evaluating_with_sampled_actions_trains_the_same(tmp_path):
    runs = {}
    for det in (True, False):
        cfg = make_config("ppo", "CartPole-v1", sets=dict(
            total_steps=2048, num_envs=2, num_steps=128, eval_every=2, eval_episodes=3,
            tensorboard=False, vector="sync", eval_deterministic=det,
            runs_dir=str(tmp_path / str(det))))
        runs[det] = train(cfg)
    greedy, sampled = runs[True], runs[False]
    assert _metrics(greedy.run_dir) == _metrics(sampled.run_dir)
    assert json.loads((greedy.run_dir / "eval.json").read_text())["greedy"] is True
    final = json.loads((sampled.run_dir / "eval.json").read_text())
    assert final["greedy"] is False
    again = evaluate(sampled.agent, "CartPole-v1", episodes=3, deterministic=False,
                     seed=cfg.seed + 10_000)
    assert final["mean"] == pytest.approx(float(again.mean()))


def test_sampled_evaluation_needs_the_gymnasium_evaluator():
    cfg = make_config("ppo", "CartPole-v1", sets=dict(eval_deterministic=False))
    cfg.resolve_vector()
    assert cfg.vector == "sync"  # auto: the batched collector only evaluates greedily
    with pytest.raises(ConfigError, match="eval_deterministic"):
        make_config("ppo", "CartPole-v1", sets=dict(eval_deterministic=False, vector="torch"))


def test_reports_name_how_trials_evaluated():
    from types import SimpleNamespace

    from trustrl.sweep.report import eval_word

    greedy, sampled = (SimpleNamespace(config={"eval_deterministic": d}) for d in (True, False))
    old = SimpleNamespace(config={})  # a sweep from before the key: greedy
    assert eval_word([greedy, old]) == "greedy"
    assert eval_word([sampled]) == "sampled"
    assert eval_word([greedy, sampled]) == "greedy or sampled"


def test_trustrl_eval_evaluates_as_the_run_did(tmp_path, cli_env):
    """`trustrl eval RUN` of a run with eval_deterministic false samples, as the run did, and
    gets the run's own final returns back; --greedy overrides it."""
    import subprocess
    import sys

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "trustrl", *args], env=cli_env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)

    p = cli("train", "--total-steps", "1024", "--runs-dir", "runs", "--quiet", "--set",
            "num_envs=2", "--set", "num_steps=128", "--set", "eval_episodes=4", "--set",
            "tensorboard=false", "--set", "eval_deterministic=false")
    assert p.returncode == 0, p.stderr
    assert "sampled evaluation over 4 episodes" in p.stdout
    (run,) = (tmp_path / "runs").iterdir()
    final = json.loads((run / "eval.json").read_text())
    e = cli("eval", str(run), "--episodes", "4")
    assert e.returncode == 0, e.stderr
    assert f"sampled over 4 episodes: {final['mean']:.2f} ± {final['std']:.2f}" in e.stdout
    g = cli("eval", str(run), "--episodes", "4", "--greedy")
    assert g.returncode == 0 and "greedy over 4 episodes" in g.stdout, g.stderr
