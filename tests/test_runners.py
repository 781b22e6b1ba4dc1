"""Runners (trustrl/learn/runners.py, issue 55) without Ray: `ray_address inline` steps the same
Runner objects in the learner's process, one after the other. The Ray transport is in
test_runners_ray.py."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from test_train import Stop, rows

import trustrl
from trustrl.learn.runners import Runner, RunnerLearner, TrackedStats, merge_reports, torch_state
from trustrl.maths.normalize import RunningMeanStd
from trustrl.records.runs import TIMING_COLUMNS
from trustrl.settings.config import make_config
from trustrl.util.errors import ConfigError, NonFiniteError

NOT_COMPARED = TIMING_COLUMNS + ("runner_restarts",)


def small(tmp_path, env="Pendulum-v1", **sets):
    base = dict(total_steps=6 * 256, num_envs=2, num_steps=128, minibatch_size=64,
                update_epochs=2, eval_every=3, eval_episodes=2, tensorboard=False,
                vector="sync", grad_backend="closed-form", normalize_obs=True,
                normalize_reward=True)
    base.update(sets)
    return make_config("ppo", env, flags={"runs_dir": str(tmp_path), **base})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_merged_statistics_are_those_of_all_rows(seed):
    """Three runners' statistics, each fed its own batches (one a restarted runner's unreported
    first reset), merged: the mean and variance of every row, counted once."""
    g = np.random.default_rng(seed)
    learner = RunningMeanStd((3,))
    learner.update(g.normal(2.0, 3.0, (5, 3)))
    runners = [TrackedStats((3,)) for _ in range(3)]
    fed = []
    pending = g.normal(-1.0, 0.5, (4, 3))  # runner 2's first reset, not yet reported
    runners[2].update(pending)
    fed.append(pending)
    for r in runners:
        r.begin(learner.state_dict())
        for _ in range(3):
            batch = g.normal(g.uniform(-5, 5), g.uniform(0.1, 4), (int(g.integers(1, 6)), 3))
            r.update(batch)
            fed.append(batch)
    merged = RunningMeanStd((3,))
    merged.load_state_dict(merge_reports([r.report() for r in runners]))
    every = RunningMeanStd((3,))
    every.load_state_dict(learner.state_dict())
    rows_fed = np.concatenate(fed)
    every.merge(rows_fed.mean(0), rows_fed.var(0), len(rows_fed))
    assert merged.count == pytest.approx(every.count, abs=1e-9)
    np.testing.assert_allclose(merged.mean, every.mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(merged.var, every.var, rtol=1e-12, atol=1e-12)
    assert all(r.delta.count == 0 for r in runners)  # reported: not merged a second time


def one_runner_equals_single_process(tmp_path, make):
    """make(folder, **sets) -> a config: the run on one inline runner and the run in one
    process give the same metrics, episodes and final evaluation. Returns both results."""
    single = trustrl.train(make(tmp_path / "single"))
    one = trustrl.train(make(tmp_path / "one", runners=1, ray_address="inline"))
    assert rows(single.run_dir / "metrics.csv") == rows(one.run_dir / "metrics.csv",
                                                        drop=NOT_COMPARED)
    assert rows(single.run_dir / "episodes.csv") == rows(one.run_dir / "episodes.csv")
    assert single.final_eval["returns"] == one.final_eval["returns"]
    return single, one


def resume_equals_uninterrupted(tmp_path, make):
    """make(folder, **sets) -> a config: two inline runners stopped after iteration 5 and
    resumed from the checkpoint at 3 continue as the uninterrupted two (metrics, episodes,
    final evaluation). Returns the uninterrupted run's result and the resumed run's."""
    full = trustrl.train(make(tmp_path / "full", runners=2, ray_address="inline"))

    def stop_at_5(row):
        if row["iteration"] == 5:
            raise Stop

    with pytest.raises(Stop):
        trustrl.train(make(tmp_path / "cut", runners=2, ray_address="inline",
                           checkpoint_every=3), callback=stop_at_5)
    (run,) = (tmp_path / "cut").iterdir()
    resumed = trustrl.resume(run)
    assert rows(run / "metrics.csv") == rows(full.run_dir / "metrics.csv")
    assert rows(run / "episodes.csv") == rows(full.run_dir / "episodes.csv")
    assert resumed.final_eval["returns"] == full.final_eval["returns"]
    return full, resumed


def test_one_runner_is_the_single_process_run(tmp_path):
    """runners=1: the same envs, seeds, torch stream and statistics as the collector in the
    learner's process, so the same metrics and episodes, bit for bit (normalised observations
    and rewards: the statistics' merge is exercised)."""
    a, b = one_runner_equals_single_process(tmp_path, small)
    assert len(rows(a.run_dir / "metrics.csv")) == 6
    assert {r["runner_restarts"] for r in rows(b.run_dir / "metrics.csv")} == {"0"}


def test_two_runners_resume_equals_uninterrupted(tmp_path):
    """Losing the learner is the ordinary resume: every runner's envs, trackers, reward
    returns, pending statistics and torch stream come back from the checkpoint."""
    full, _ = resume_equals_uninterrupted(tmp_path, small)
    # and two runners are not one: each has its own normaliser during its segment and its
    # own torch stream
    one = trustrl.train(small(tmp_path / "one"))
    assert rows(one.run_dir / "metrics.csv") != rows(full.run_dir / "metrics.csv",
                                                     drop=NOT_COMPARED)


@pytest.mark.parametrize("env,sets,dtype", [
    # a user's env by import path, MuJoCo, Atari (its pixels travel as uint8)
    ("helper_envs:MultiDiscreteToy-v0", {"grad_backend": "autograd"}, torch.float32),
    ("InvertedPendulum-v5", {}, torch.float32),
    ("ALE/Pong-v5", {"normalize_obs": False, "grad_backend": "autograd"}, torch.uint8),
])
def test_any_env_on_runners(tmp_path, env, sets, dtype):
    pytest.importorskip("ale_py" if env.startswith("ALE") else
                        "mujoco" if "Pendulum" in env else "gymnasium")
    cfg = small(tmp_path, env, runners=2, ray_address="inline", num_envs=2, num_steps=8,
                total_steps=16, minibatch_size=8, normalize_reward=False,
                **sets)
    cfg.validate()
    learner = RunnerLearner(cfg)
    try:
        rollout, _ = learner.collector.collect()
        assert rollout.obs.dtype == dtype and rollout.obs.shape[:2] == (8, 2)
        assert learner.global_step == 16
        if dtype != torch.uint8:  # the update is GymLearner's (a CNN's costs seconds here)
            rows_, _ = learner.iterate()
            assert rows_[0]["runner_restarts"] == 0 and learner.global_step == 32
    finally:
        learner.close()


def test_runner_names_the_runs_env_index_on_nan(tmp_path):
    cfg = small(tmp_path, "helper_envs:NaNCartPole-v0", num_envs=4, runners=2,
                env_kwargs={"nan_at": 3}, normalize_obs=False, normalize_reward=False)
    cfg.validate()
    runner = Runner(cfg, 1, 2, 10, torch_state(0), 1)
    weights = {k: v.clone() for k, v in runner.agent.policy.state_dict().items()}
    with pytest.raises(NonFiniteError, match="from env 2 at"):
        runner.collect((weights, None, None))


@pytest.mark.parametrize("sets,message", [
    ({"runners": 3, "num_envs": 4}, "not a multiple of runners"),
    ({"runners": 2, "vector": "torch"}, "vector 'sync' or 'async'"),
])
def test_bad_runner_settings(sets, message):
    with pytest.raises(ConfigError, match=message):
        make_config("ppo", "CartPole-v1", flags=sets).validate()


def test_cli_runners_error_is_one_line(tmp_path, cli_env):
    p = subprocess.run([sys.executable, "-m", "trustrl", "train", "--env", "CartPole-v1",
                        "--set", "runners=3", "--set", "num_envs=4", "--runs-dir", str(tmp_path)],
                       capture_output=True, text=True, env=cli_env, timeout=120)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().count("\n") == 0 and "runners" in p.stderr
    assert not list(tmp_path.iterdir())  # no run folder for a bad config


def masked(tmp_path, env, **sets):
    """A masked PPO run on a MaskedPick env: rollouts of 66 steps, so checkpoints fall
    mid-episode (episodes of 4 valid picks)."""
    base = dict(total_steps=6 * 132, num_steps=66, minibatch_size=66, eval_episodes=4,
                normalize_reward=False)
    base.update(sets)
    return small(tmp_path, env, **base)


@pytest.mark.parametrize("env", ["MaskedPick-v0", "masking_envs:InfoOnlyPick"])
def test_masks_travel_with_the_runners_segments(tmp_path, env):
    """Action masks (from action_masks(), or from info: the next observation's mask is then
    in each runner's state): runners=1 is the single-process masked run bit for bit; two
    runners stopped after iteration 5 and resumed from the checkpoint at 3 (mid-episode)
    continue as the uninterrupted two; no episode ever ends on an invalid move (-1)."""
    def make(folder, **sets):
        return masked(folder, env, **sets)

    single, one = one_runner_equals_single_process(tmp_path, make)
    full, _ = resume_equals_uninterrupted(tmp_path, make)
    for r in (single, one, full):
        returns = [float(e["return"]) for e in rows(r.run_dir / "episodes.csv")]
        assert len(returns) > 100 and min(returns) >= 0.0


def recurrent(tmp_path, kind, **sets):
    """A recurrent PPO run on CartPoleNoVel-v1: rollouts of 40 steps on 4 envs, so segments
    and checkpoints fall mid-episode and episodes end inside segments."""
    base = dict(recurrent=kind, recurrent_hidden=16, hidden_sizes=(16,), grad_backend="autograd",
                num_envs=4, num_steps=40, minibatch_size=80, total_steps=6 * 160,
                eval_episodes=2)
    base.update(sets)
    return small(tmp_path, "CartPoleNoVel-v1", **base)


def same_parameters(a, b) -> bool:
    sa, sb = a.agent.policy.state_dict(), b.agent.policy.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_recurrent_one_runner_is_the_single_process_run(tmp_path, kind):
    """A recurrent policy on one runner: the hidden state carried in the runner across
    iterations, the segment's start state and episode starts shipped with it, so the same
    metrics, episodes, final evaluation and parameters as in one process, bit for bit."""
    a, b = one_runner_equals_single_process(
        tmp_path, lambda folder, **sets: recurrent(folder, kind, **sets))
    assert same_parameters(a, b)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_recurrent_runner_segments_are_what_the_update_unrolls(tmp_path, kind):
    """Two runners: the merged rollout's start states and episode starts are each runner's,
    in env order, so the training path's unroll of the merged segment (what the sequence
    minibatches see) gives the actor outputs the runners acted with; the state is carried
    inside each runner from one iteration to the next (zero only at the run's start)."""
    cfg = recurrent(tmp_path, kind, runners=2, ray_address="inline")
    cfg.validate()
    learner = RunnerLearner(cfg)
    try:
        for it in range(3):
            ro, _ = learner.collector.collect()
            T, N = ro.starts.shape
            assert N == 4 and ro.state0.shape[0] == 4
            assert bool(ro.starts[0].all()) == (it == 0)
            assert bool((ro.state0.abs().sum(1) > 0).all()) == (it > 0)
            assert ro.starts[1:].any()  # episodes end inside the segment
            out = learner.net.actor(ro.obs.reshape(1, T * N, -1),
                                    starts=ro.starts.reshape(1, -1), state0=ro.state0[None])
            torch.testing.assert_close(out[0], ro.actor_out.reshape(T * N, -1),
                                       rtol=1e-5, atol=1e-6)
    finally:
        learner.close()


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_recurrent_two_runners_resume_equals_uninterrupted(tmp_path, kind):
    """Each runner's hidden state and episode-start flags are in the checkpoint (mid-episode):
    stopped after iteration 5 and resumed from the checkpoint at 3, two recurrent runners
    continue as the uninterrupted two (metrics, episodes, evaluation, parameters)."""
    full, resumed = resume_equals_uninterrupted(
        tmp_path, lambda folder, **sets: recurrent(folder, kind, **sets))
    assert same_parameters(resumed, full)
