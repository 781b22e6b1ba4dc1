"""Checkpoints and callbacks (issue 53, point 3): a kept checkpoint history, the best agent
by evaluation, callbacks that see the agent, the env and the metrics at rollout end and
iteration end, and the shipped ones (evaluation with the best model, stop on reward, stop on
no improvement, agent checkpoints)."""

from __future__ import annotations

import csv
import json

import gymnasium as gym
import numpy as np
import pytest
import torch

import trustrl
from trustrl.compute import compiled
from trustrl.settings.config import make_config
from trustrl.training.callbacks import (
    Callback,
    CheckpointCallback,
    EvalCallback,
    Info,
    StopOnNoImprovement,
    StopOnReward,
)
from trustrl.util.safeio import load_safe


def cfg(tmp_path, **sets):
    base = dict(total_steps=6 * 64, num_envs=2, num_steps=32, minibatch_size=32,
                update_epochs=1, eval_every=0, eval_episodes=2, tensorboard=False,
                vector="sync", runs_dir=str(tmp_path / "runs"))
    base.update(sets)
    return make_config("ppo", "CartPole-v1", flags=base)


def status(run) -> dict:
    return json.loads((run / "status.json").read_text())


class Recorder(Callback):
    def __init__(self, stop_at_rollout: int | None = None):
        self.events: list[tuple] = []
        self.stop_at_rollout = stop_at_rollout

    def on_training_start(self, info):
        self.events.append(("start", info.global_step))

    def on_rollout_end(self, info):
        assert isinstance(info.env, gym.vector.VectorEnv)
        assert all({"return", "length"} <= set(e) for e in info.episodes)
        self.events.append(("rollout", info.iteration, info.global_step))
        if self.stop_at_rollout == info.iteration + 1:
            return False
        return None

    def on_iteration_end(self, info):
        assert isinstance(info.agent, trustrl.Agent) and "approx_kl" in info.metrics
        assert info.metrics["iteration"] == info.iteration
        self.events.append(("iteration", info.iteration, info.evaluation is not None))

    def on_training_end(self, info):
        self.events.append(("end", info.global_step))


def test_a_callback_sees_rollouts_and_iterations_and_a_row_function_still_works(tmp_path):
    rec, rows = Recorder(), []
    res = trustrl.train(cfg(tmp_path, eval_every=3), callback=[rec, rows.append])
    assert rec.events[0] == ("start", 0) and rec.events[-1] == ("end", 6 * 64)
    rollouts = [e for e in rec.events if e[0] == "rollout"]
    iterations = [e for e in rec.events if e[0] == "iteration"]
    # the rollout of iteration i comes before its update: iteration i - 1 is the last done
    assert rollouts == [("rollout", i, (i + 1) * 64) for i in range(6)]
    assert iterations == [("iteration", i, i % 3 == 0) for i in range(1, 7)]
    assert len(rows) == 6 and status(res.run_dir)["status"] == "finished"


def test_a_rollout_callback_can_stop_the_run(tmp_path):
    res = trustrl.train(cfg(tmp_path), callback=Recorder(stop_at_rollout=2))
    assert status(res.run_dir)["status"] == "stopped" and status(res.run_dir)["iteration"] == 2


class RolloutCounter(Callback):
    """Counts rollout ends, with the iterations done and env steps seen at each, the episodes
    the rollout finished, and each iteration's row."""

    def __init__(self, stop_at: int | None = None):
        self.rollouts: list[tuple[int, int]] = []
        self.episodes: list[list[dict]] = []
        self.rows: list[dict] = []
        self.stop_at = stop_at

    def on_rollout_end(self, info):
        assert info.env is None and info.metrics == {} and info.evaluation is None
        assert isinstance(info.agent, trustrl.Agent)
        self.rollouts.append((info.iteration, info.global_step))
        self.episodes.append(list(info.episodes))
        return False if len(self.rollouts) == self.stop_at else None

    def on_iteration_end(self, info):
        self.rows.append(info.metrics)


def _batched(tmp_path, seed, grad_backend, **sets):
    return cfg(tmp_path, vector="torch", seed=seed, grad_backend=grad_backend, **sets)


def _check_rollouts(counter, fused: bool, per_rollout: int = 64) -> None:
    """One call per iteration, at the env steps of the rollout just collected; before the
    update (iterations done: the rollout's own not counted) or, fused, after it."""
    n = len(counter.rows)
    assert n == 6
    assert counter.rollouts == [(i + fused, (i + 1) * per_rollout) for i in range(n)]
    for i, (eps, row) in enumerate(zip(counter.episodes, counter.rows, strict=True)):
        assert len(eps) == row["episodes"]  # the rollout's own episodes, each once
        assert all(i * per_rollout < e["global_step"] <= (i + 1) * per_rollout for e in eps)
        if eps:
            assert row["ep_return_mean"] == pytest.approx(np.mean([e["return"] for e in eps]))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rollout_callbacks_run_on_the_batched_collector(tmp_path, seed):
    """The eager batched iteration: on_rollout_end between the rollout and the update."""
    counter = RolloutCounter()
    res = trustrl.train(_batched(tmp_path, seed, "closed-form"), callback=counter)
    assert status(res.run_dir)["status"] == "finished"
    _check_rollouts(counter, fused=False)


@pytest.mark.skipif(not compiled.available(), reason="needs trustrl[compiled]")
@pytest.mark.parametrize("seed", [0, 1])
def test_rollout_callbacks_run_after_the_fused_iteration(tmp_path, seed, monkeypatch):
    """The compiled fused iteration (rollout and update one call): on_rollout_end after it,
    once, with that rollout's episodes and env steps."""
    from trustrl.learn.learners import BatchedLearner

    made = []
    init = BatchedLearner.__init__
    monkeypatch.setattr(BatchedLearner, "__init__",
                        lambda self, *a, **k: (init(self, *a, **k), made.append(self))[0])
    counter = RolloutCounter()
    trustrl.train(_batched(tmp_path, seed, "compiled"), callback=counter)
    assert made and made[0].fused
    _check_rollouts(counter, fused=True)


@pytest.mark.parametrize("seed", [0, 1])
def test_rollout_callbacks_on_the_cuda_graph_route_run_after_the_replay(tmp_path, seed,
                                                                         monkeypatch):
    """The CUDA-graph route, its host side on a CPU: with `graph` set, the iteration body
    (what a replay runs) must not call the callback, which cannot run inside a captured graph,
    and `iterate` calls it once, after the update, with that rollout's episodes. The body
    stands in for the replay here; the capture itself is the CUDA test below."""
    from trustrl.learn.learners import BatchedLearner

    made = []
    init = BatchedLearner.__init__

    def as_graph(self, *a, **k):
        init(self, *a, **k)
        self.graph = True
        made.append(self)

    monkeypatch.setattr(BatchedLearner, "__init__", as_graph)
    monkeypatch.setattr(BatchedLearner, "_graph_iteration",
                        lambda self: BatchedLearner._iteration_body(self))
    counter = RolloutCounter()
    trustrl.train(_batched(tmp_path, seed, "closed-form"), callback=counter)
    assert made and made[0].graph
    _check_rollouts(counter, fused=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_rollout_callbacks_run_after_a_cuda_graph_replay(tmp_path):
    """The real route on a GPU (benchmarks/gpu_session.sh runs it): two eager warm-up
    iterations, then capture and replays; on_rollout_end after each, as fused."""
    counter = RolloutCounter()
    trustrl.train(_batched(tmp_path, 0, "closed-form", device="cuda", jit="cuda-graph"),
                  callback=counter)
    _check_rollouts(counter, fused=True)


def test_a_rollout_callback_stops_a_batched_population(tmp_path):
    counter = RolloutCounter(stop_at=2)
    res = trustrl.train(_batched(tmp_path, 0, "closed-form"), callback=counter, seeds=[0, 1])
    assert status(res.run_dir)["status"] == "stopped" and status(res.run_dir)["iteration"] == 2
    assert counter.rollouts == [(0, 64), (1, 128)]
    members = [r["members"] for r in counter.rows]
    for eps, rows in zip(counter.episodes, members, strict=True):
        assert [sum(e["member"] == m for e in eps) for m in (0, 1)] == [
            r["episodes"] for r in rows]


def test_the_best_agent_is_kept(tmp_path):
    res = trustrl.train(cfg(tmp_path, eval_every=1, total_steps=8 * 64))
    with open(res.run_dir / "metrics.csv", newline="") as f:
        evals = [float(r["eval_return_mean"]) for r in csv.DictReader(f)]
    best = json.loads((res.run_dir / "best" / "eval.json").read_text())
    assert best["mean"] == max(evals)
    assert best["iteration"] == 1 + evals.index(max(evals))  # the first to reach it
    agent = trustrl.Agent.load(res.run_dir / "best" / "agent.pt")
    assert agent.evaluate("CartPole-v1", episodes=2, seed=trustrl.PPOConfig().seed + 10_000
                          ).mean() == pytest.approx(best["mean"])
    off = trustrl.train(cfg(tmp_path / "off", eval_every=1, save_best=False))
    assert not (off.run_dir / "best").exists()


def test_a_best_written_after_the_checkpoint_is_not_kept_on_resume(tmp_path):
    res = trustrl.train(cfg(tmp_path, eval_every=1))
    path = res.run_dir / "best" / "eval.json"
    lost = json.loads(path.read_text())
    path.write_text(json.dumps({**lost, "mean": 1e9, "global_step": 10**9}))
    trustrl.resume(res.run_dir, total_steps=8 * 64)
    assert json.loads(path.read_text())["global_step"] <= 8 * 64


def test_checkpoint_history(tmp_path):
    res = trustrl.train(cfg(tmp_path, checkpoint_every=1, checkpoint_keep=2))
    folder = res.run_dir / "checkpoints"
    assert sorted(p.name for p in folder.glob("step_*.pt")) == ["step_320.pt", "step_384.pt"]
    for p in folder.glob("step_*.pt"):
        ck = load_safe(p, "checkpoint")
        assert ck["global_step"] == int(p.stem[5:])
    plain = trustrl.train(cfg(tmp_path / "plain", checkpoint_every=1))
    assert [p.name for p in (plain.run_dir / "checkpoints").iterdir()] == ["latest.pt"]


def test_eval_callback_keeps_the_best_and_stop_on_reward_reads_it(tmp_path):
    ev = EvalCallback(gym.make("CartPole-v1"), every_steps=128, episodes=2)
    res = trustrl.train(cfg(tmp_path), callback=[ev, StopOnReward(-1.0)])
    # the first evaluation (at 128 steps) reaches any reward: the run stops there
    assert [r[0] for r in ev.results] == [128]
    assert status(res.run_dir)["status"] == "stopped" and status(res.run_dir)["iteration"] == 2
    saved = json.loads((res.run_dir / "best_eval" / "eval.json").read_text())
    assert saved["mean"] == ev.results[0][1] == ev.best
    trustrl.Agent.load(res.run_dir / "best_eval" / "agent.pt")
    # StopOnReward on the run's own evaluations
    res = trustrl.train(cfg(tmp_path / "own", eval_every=2), callback=StopOnReward(-1.0))
    assert status(res.run_dir)["iteration"] == 2
    res = trustrl.train(cfg(tmp_path / "never", eval_every=2), callback=StopOnReward(1e9))
    assert status(res.run_dir)["status"] == "finished"


def test_stop_on_no_improvement():
    stop = StopOnNoImprovement(patience=2, min_delta=0.5)
    info = Info(trainer=None)
    seen = []
    for mean in (1.0, 2.0, 2.4, 2.2, 3.0, 3.1, 3.2):
        info.evaluation = np.full(3, mean)
        seen.append(stop.on_iteration_end(info))
    # 2.4 and 2.2 do not beat 2.0 by 0.5: stop at 2.2; after that, 3.1 and 3.2 vs 3.0 again
    assert seen == [None, None, None, False, None, None, False]
    info.evaluation = None
    assert stop.on_iteration_end(info) is None


def test_checkpoint_callback_keeps_the_last_agents(tmp_path):
    ck = CheckpointCallback(every_steps=128, keep=2)
    res = trustrl.train(cfg(tmp_path), callback=ck)
    folder = res.run_dir / "checkpoints" / "agents"
    assert sorted(p.name for p in folder.iterdir()) == ["agent_256.pt", "agent_384.pt"]
    trustrl.Agent.load(folder / "agent_384.pt")
    with pytest.raises(trustrl.ConfigError, match="every_steps"):
        CheckpointCallback(every_steps=0)
    with pytest.raises(trustrl.ConfigError, match="callback must be"):
        trustrl.train(cfg(tmp_path / "bad"), callback=[5])
