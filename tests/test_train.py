"""End-to-end behaviour of the training loop: determinism, resume, run folder, API."""

from __future__ import annotations

import csv
import importlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import trustrl
from trustrl.maths.advantages import gae
from trustrl.records.runs import TIMING_COLUMNS
from trustrl.settings.config import make_config
from trustrl.util.safeio import load_safe

# where the Gymnasium learner calls gae
learners_mod = importlib.import_module("trustrl.learn.learners")


def rows(path: Path, drop=TIMING_COLUMNS) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return [{k: v for k, v in r.items() if k not in drop} for r in csv.DictReader(f)]


def small(tmp_path: Path, env: str = "CartPole-v1", **sets):
    base = dict(total_steps=8 * 256, num_envs=2, num_steps=128, minibatch_size=64,
                update_epochs=4, eval_every=2, eval_episodes=3, tensorboard=False,
                vector="sync")  # the Gymnasium collector unless a test says otherwise
    # the chapter's lab settings where it has them (auto takes the defaults below 30% of
    # CartPole's budget: docs/presets.md)
    chapter = {"preset": "chapter"} if env in ("CartPole-v1", "Pendulum-v1") else {}
    base.update(chapter | sets)
    return make_config("ppo", env, flags={"runs_dir": str(tmp_path), **base})


@pytest.mark.parametrize("vector", ["sync", "torch"])
def test_same_seed_twice_gives_identical_metrics(tmp_path, vector):
    a = trustrl.train(small(tmp_path / "a", vector=vector))
    b = trustrl.train(small(tmp_path / "b", vector=vector))
    ra, rb = rows(a.run_dir / "metrics.csv"), rows(b.run_dir / "metrics.csv")
    assert len(ra) == 8 and ra == rb
    assert rows(a.run_dir / "episodes.csv") == rows(b.run_dir / "episodes.csv")
    c = trustrl.train(small(tmp_path / "c", seed=2, vector=vector))
    assert rows(c.run_dir / "metrics.csv") != ra


class Stop(Exception):
    pass


@pytest.mark.parametrize("vector", ["sync", "torch"])
@pytest.mark.parametrize("env,extra", [
    ("CartPole-v1", {}),
    ("Pendulum-v1", {"normalize_obs": True, "normalize_reward": True}),
])
def test_interrupted_and_resumed_equals_uninterrupted(tmp_path, env, extra, vector):
    """One trainer for both collectors: a run that failed mid-way resumes from its checkpoint
    and writes the rows of a run that never stopped."""
    extra = {**extra, "vector": vector}
    full = trustrl.train(small(tmp_path / "full", env, **extra))

    def stop_at_5(row):
        if row["iteration"] == 5:
            raise Stop

    cfg = small(tmp_path / "cut", env, checkpoint_every=3, **extra)
    with pytest.raises(Stop):
        trustrl.train(cfg, callback=stop_at_5)
    (run,) = (tmp_path / "cut").iterdir()
    assert len(rows(run / "metrics.csv")) == 5  # two rows past the checkpoint at iteration 3
    assert json.loads((run / "status.json").read_text())["status"] == "failed"
    resumed = trustrl.resume(run)
    assert resumed.run_dir == run
    assert rows(run / "metrics.csv") == rows(full.run_dir / "metrics.csv")
    assert rows(run / "episodes.csv") == rows(full.run_dir / "episodes.csv")
    assert resumed.final_eval["returns"] == full.final_eval["returns"]


def test_run_folder_contents(tmp_path):
    res = trustrl.train(small(tmp_path))
    names = {p.name for p in res.run_dir.iterdir()}
    assert {"config.json", "metrics.csv", "episodes.csv", "checkpoints", "agent.pt", "eval.json",
            "eval_initial.json", "learning_curve.png", "status.json"} <= names
    assert res.run_dir.name.startswith("CartPole-v1__ppo__1__")
    cfg = json.loads((res.run_dir / "config.json").read_text())
    assert cfg["algo"] == "ppo" and cfg["num_envs"] == 2
    m = rows(res.run_dir / "metrics.csv", drop=())
    for key in ("approx_kl", "approx_kl_k1", "clip_fraction", "entropy", "explained_variance",
                "lr", "epochs_run", "sps", "wall_time", "ratio_max", "ratio_q50"):
        assert m[0][key] != "", key
    assert float(m[0]["lr"]) > float(m[-1]["lr"]) > 0  # linear annealing
    assert m[1]["eval_return_mean"] != "" and m[0]["eval_return_mean"] == ""
    ev = json.loads((res.run_dir / "eval.json").read_text())
    assert ev["episodes"] == 3 and ev["greedy"] is True
    assert not list((res.run_dir / "checkpoints").glob("*.tmp"))
    assert json.loads((res.run_dir / "status.json").read_text())["status"] == "finished"


def test_agent_load_and_act(tmp_path):
    res = trustrl.train(small(tmp_path, "Pendulum-v1", normalize_obs=True))
    agent = trustrl.Agent.load(res.run_dir)
    assert agent.obs_normalizer is not None and agent.obs_normalizer.frozen
    before = agent.obs_normalizer.rms.mean.copy()
    obs = np.array([1.0, 0.0, 0.3], np.float32)
    a = agent.act(obs)
    assert a.shape == (1,) and -2.0 <= a[0] <= 2.0
    batch = agent.act(np.stack([obs, obs]))
    assert batch.shape == (2, 1) and np.allclose(batch[0], a)
    assert np.array_equal(agent.obs_normalizer.rms.mean, before)  # frozen at evaluation
    # the saved normaliser is the one training ended with
    ck = load_safe(res.run_dir / "checkpoints" / "latest.pt")
    assert np.array_equal(ck["agent"]["obs_normalizer"]["rms"]["mean"], before)
    big = agent.act(np.array([1.0, 0.0, 1e6], np.float32), deterministic=False)
    assert -2.0 <= big[0] <= 2.0  # clipped to the bounds only when sent to the env


def test_early_stopping_runs_fewer_epochs(tmp_path):
    res = trustrl.train(small(tmp_path, update_epochs=40, lr=3e-3, target_kl=0.01,
                              anneal_lr=False))
    epochs = [r["epochs_run"] for r in res.metrics]
    assert min(epochs) < 40 and all(1 <= e <= 40 for e in epochs)
    for r in res.metrics:
        if r["early_stopped"]:
            assert r["approx_kl"] > 0.01  # stopped after the epoch that crossed the target
        else:
            assert r["epochs_run"] == 40


def test_truncation_bootstrap_learns_infinite_horizon_value(tmp_path, monkeypatch):
    """Reward 1 forever under a 50-step time limit, gamma 0.9: V(s0) -> 1/(1-gamma) = 10 only
    when truncation bootstraps V(final obs); treating the time limit as termination biases V
    down to the average truncated return (about 8.2)."""

    def value_after_training(sub):
        cfg = make_config("ppo", "helper_envs:ConstantReward-v0", flags=dict(
            runs_dir=str(tmp_path / sub), total_steps=24 * 256, num_envs=2, num_steps=128,
            gamma=0.9, lr=3e-3, anneal_lr=False, eval_every=0, eval_episodes=1,
            normalize_obs=False, normalize_reward=False, tensorboard=False))
        agent = trustrl.train(cfg).agent
        with torch.no_grad():
            return float(agent.policy.value(torch.zeros(1, 1)))

    v = value_after_training("bootstrap")
    print("V with bootstrap", v)
    assert abs(v - 10.0) < 0.5, v

    def gae_without_bootstrap(r, v_, nv, term, trunc, g, lam):
        return gae(r, v_, nv, term | trunc, torch.zeros_like(trunc), g, lam)

    monkeypatch.setattr(learners_mod, "gae", gae_without_bootstrap)
    v_wrong = value_after_training("no_bootstrap")
    print("V without bootstrap", v_wrong)
    assert v_wrong < 9.0, v_wrong


def test_async_vector_env_trains(tmp_path):
    res = trustrl.train(small(tmp_path, total_steps=512, vector="async", eval_every=0,
                              eval_episodes=2))
    assert len(res.metrics) == 2 and res.metrics[-1]["episodes"] > 0


def test_tensorboard_events_written(tmp_path):
    pytest.importorskip("tensorboard", reason="the optional tensorboard extra is not installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    res = trustrl.train(small(tmp_path, total_steps=512, tensorboard=True))
    ea = EventAccumulator(str(res.run_dir / "tb"))
    ea.Reload()
    tags = set(ea.Tags()["scalars"])
    assert {"diagnostics/approx_kl", "diagnostics/clip_fraction", "losses/policy_loss",
            "charts/ep_return_mean", "charts/sps"} <= tags
    assert [e.step for e in ea.Scalars("diagnostics/approx_kl")] == [256, 512]


def test_run_folder_claim_survives_a_lost_race(tmp_path, monkeypatch):
    """Runs with the same env, algo and seed started in the same second by other processes (a
    sweep over other settings) must each get their own folder. Simulate the race: the folder
    appears between any existence check and the mkdir."""
    from trustrl.records import runs

    monkeypatch.setattr(runs.time, "strftime", lambda fmt: "20260101-000000")
    first = runs.RunDir.create(tmp_path, "X-v0", "ppo", 1, {})
    monkeypatch.setattr(Path, "exists", lambda self: False)  # every check loses the race
    second = runs.RunDir.create(tmp_path, "X-v0", "ppo", 1, {})
    third = runs.RunDir.create(tmp_path, "X-v0", "ppo", 1, {})
    assert first.path.name == "X-v0__ppo__1__20260101-000000"
    assert second.path.name.endswith("-2") and third.path.name.endswith("-3")


@pytest.mark.parametrize("vector", ["sync", "torch"])
def test_final_evaluation_is_the_last_iterations_not_a_second_one(tmp_path, vector, monkeypatch):
    """Greedy evaluation is deterministic, so the one the last iteration makes is the
    finished run's eval.json: evaluated once at the start, every eval_every iterations and at
    the end, never twice for the same policy."""
    calls = []
    for cls in (learners_mod.GymLearner, learners_mod.BatchedLearner):
        orig = cls.evaluate

        def counted(self, episodes, _orig=orig):
            calls.append(self.iteration)
            return _orig(self, episodes)

        monkeypatch.setattr(cls, "evaluate", counted)
    res = trustrl.train(small(tmp_path, vector=vector, total_steps=3 * 256, eval_every=2))
    assert calls == [0, 2, 3]  # the initial evaluation, iteration 2, the last iteration
    final = json.loads((res.run_dir / "eval.json").read_text())
    assert final["mean"] == pytest.approx(float(rows(res.run_dir / "metrics.csv")[-1]
                                                ["eval_return_mean"]))
