"""Runners on a local Ray cluster (trustrl/learn/runners.py, issue 55): the same numbers as the
inline runners, a resume on Ray, and a runner killed with SIGKILL restarted with its segment
redone; the same for recurrent policies. Two CPUs only: Ray is heavy on a small machine."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch
from test_runners import NOT_COMPARED, masked, recurrent, same_parameters, small
from test_train import Stop, rows

import trustrl
from trustrl.learn import runners as runners_mod

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def ray_equals_inline_across_resume(tmp_path, make, stop_at):
    """Two Ray actors (stopped after iteration `stop_at`, checkpoint at 3, resumed with fresh
    actors) against two inline runners: the same metrics, episodes and final evaluation.
    make(folder, **sets) -> the run's config. Returns the Ray run's folder, the resumed run's
    result and the inline run's."""
    inline = trustrl.train(make(tmp_path / "inline", runners=2, ray_address="inline"))

    def stop(row):
        if row["iteration"] == stop_at:
            raise Stop

    with pytest.raises(Stop):
        trustrl.train(make(tmp_path / "ray", runners=2, checkpoint_every=3), callback=stop)
    (run,) = (tmp_path / "ray").iterdir()
    resumed = trustrl.resume(run)
    assert rows(run / "metrics.csv", drop=NOT_COMPARED) == rows(
        inline.run_dir / "metrics.csv", drop=NOT_COMPARED)
    assert rows(run / "episodes.csv") == rows(inline.run_dir / "episodes.csv")
    assert resumed.final_eval["returns"] == inline.final_eval["returns"]
    return run, resumed, inline


def test_ray_runners_equal_inline_and_resume(tmp_path, local_ray):
    """(seed, N) decides the run: two Ray actors give the inline runners' metrics and
    episodes, also across a lost learner."""
    ray_equals_inline_across_resume(tmp_path, small, 4)


def test_masked_ray_runners_equal_inline_and_resume(tmp_path, local_ray, monkeypatch):
    """Action masks through Ray (from info: the next observation's mask crosses in each
    runner's state), also across a lost learner (the checkpoint mid-episode); never an
    invalid move."""
    monkeypatch.chdir(Path(__file__).parent)  # the runners import masking_envs from here
    run, _, _ = ray_equals_inline_across_resume(
        tmp_path, lambda folder, **sets: masked(folder, "masking_envs:InfoOnlyPick", **sets), 5)
    assert min(float(e["return"]) for e in rows(run / "episodes.csv")) >= 0.0


def test_killed_runner_is_restarted_and_its_segment_redone(tmp_path, local_ray, monkeypatch):
    pools = []
    make = runners_mod.RunnerLearner._make_collector

    def keep(self):
        pools.append(make(self))
        return pools[-1]

    monkeypatch.setattr(runners_mod.RunnerLearner, "_make_collector", keep)
    pids = {}

    def kill_runner_1(row):
        pids[row["iteration"]] = pools[0].pids()
        if row["iteration"] == 2:
            os.kill(pids[2][1], signal.SIGKILL)

    cfg = small(tmp_path / "ray", runners=2, num_envs=4, num_steps=64, checkpoint_every=2)
    res = trustrl.train(cfg, callback=kill_runner_1)
    assert pids[3][0] == pids[2][0] and pids[3][1] != pids[2][1]  # a new runner 1
    assert json.loads((res.run_dir / "status.json").read_text())["status"] == "finished"
    m = rows(res.run_dir / "metrics.csv")
    assert [int(r["runner_restarts"]) for r in m] == [0, 0, 1, 0, 0, 0]
    # every iteration took one batch: the dead runner's partial segment is not counted
    assert [int(r["global_step"]) for r in m] == [256 * i for i in range(1, 7)]
    eps = rows(res.run_dir / "episodes.csv")
    assert sum(int(r["episodes"]) for r in m) == len(eps)
    assert all(int(e["length"]) == 200 for e in eps)  # Pendulum: whole episodes, none cut
    # iterations 1 and 2 are the run without the kill
    ref = trustrl.train(small(tmp_path / "ref", runners=2, num_envs=4, num_steps=64,
                              ray_address="inline"))
    assert m[:2] == rows(ref.run_dir / "metrics.csv")[:2]


def test_users_env_by_import_path_on_ray(tmp_path, local_ray, monkeypatch):
    """A user's env module in the learner's working folder is found by the runners (they work
    in the same folder), as the learner finds it."""
    (tmp_path / "user_env_i55.py").write_text(
        "import gymnasium as gym\n"
        "from gymnasium.envs.classic_control import CartPoleEnv\n\n\n"
        "class UserCartPole(CartPoleEnv):\n    pass\n\n\n"
        "gym.register('UserCartPoleI55-v0', entry_point=UserCartPole, max_episode_steps=50)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # the learner's (pytest puts no '' there)
    cfg = small(tmp_path / "runs", "user_env_i55:UserCartPoleI55-v0", runners=2, num_steps=32,
                total_steps=128, minibatch_size=32, normalize_obs=False,
                normalize_reward=False, eval_every=0)
    res = trustrl.train(cfg)
    assert [int(r["global_step"]) for r in rows(res.run_dir / "metrics.csv")] == [64, 128]


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_recurrent_ray_runners_equal_inline_and_resume(tmp_path, local_ray, kind):
    """A recurrent policy's state and episode starts cross Ray in the segments (and in each
    runner's checkpointed state): two Ray actors give the inline runners' numbers, also across
    a lost learner (the checkpoint mid-episode)."""
    _, resumed, inline = ray_equals_inline_across_resume(
        tmp_path, lambda folder, **sets: recurrent(folder, kind, **sets), 5)
    assert same_parameters(resumed, inline)


def test_killed_recurrent_runner_restarts_from_fresh_episodes(tmp_path, local_ray,
                                                              monkeypatch):
    """A recurrent runner killed between iterations 2 and 3: its envs restart their
    episodes, so its redone segment starts from the state at that segment's start, the
    initial state with every env at an episode start (nothing of the dead runner's carried
    state); the other runner's segment is the uninterrupted run's; every segment's actor
    outputs are the training path's unroll from the shipped start states; one batch per
    iteration, the restarted runner's episodes counted from its fresh reset."""
    pools, merged = [], []
    make, merge = runners_mod.RunnerLearner._make_collector, runners_mod.RunnerPool._merge

    def keep(self):
        pools.append(make(self))
        return pools[-1]

    def record(self, segments):
        ro, eps = merge(self, segments)
        with torch.no_grad():
            out, _, _ = self.agent.policy.unroll(ro.obs, ro.starts, ro.state0)
        merged.append((ro, out))
        return ro, eps

    monkeypatch.setattr(runners_mod.RunnerLearner, "_make_collector", keep)
    monkeypatch.setattr(runners_mod.RunnerPool, "_merge", record)

    def kill_runner_1(row):
        if row["iteration"] == 2:
            os.kill(pools[0].pids()[1], signal.SIGKILL)

    res = trustrl.train(recurrent(tmp_path / "ray", "lstm", runners=2, checkpoint_every=2),
                        callback=kill_runner_1)
    ref = trustrl.train(recurrent(tmp_path / "ref", "lstm", runners=2, ray_address="inline"))
    killed, uninterrupted = merged[:6], merged[6:]
    m = rows(res.run_dir / "metrics.csv")
    assert json.loads((res.run_dir / "status.json").read_text())["status"] == "finished"
    assert [int(r["runner_restarts"]) for r in m] == [0, 0, 1, 0, 0, 0]
    assert [int(r["global_step"]) for r in m] == [160 * i for i in range(1, 7)]
    assert m[:2] == rows(ref.run_dir / "metrics.csv")[:2]
    for ro, out in killed:
        torch.testing.assert_close(out, ro.actor_out, rtol=1e-5, atol=1e-6)
    ro, ro_ref = killed[2][0], uninterrupted[2][0]
    assert not ro.state0[2:].any() and ro.starts[0, 2:].all()  # runner 1: fresh episodes
    assert ro_ref.state0[2:].any()  # uninterrupted, runner 1 carries its state
    for name in ("state0", "obs", "actions", "starts"):  # runner 0: as if nothing happened
        x, y = getattr(ro, name), getattr(ro_ref, name)
        assert torch.equal(x[:2], y[:2]) if name == "state0" else torch.equal(x[:, :2], y[:, :2])
    eps = rows(res.run_dir / "episodes.csv")
    assert sum(int(r["episodes"]) for r in m) == len(eps)
    # the restarted envs' episodes that end in iteration 3 began at the restart or later
    restarted = [e for e in eps if int(e["env_index"]) >= 2 and int(e["iteration"]) == 3]
    assert restarted
    for e in restarted:
        assert int(e["length"]) <= (int(e["global_step"]) - 320) // 4
