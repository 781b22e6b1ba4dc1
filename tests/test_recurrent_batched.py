"""Recurrent policies on the batched collector (vector 'torch', docs/recurrent.md): its rollout
steps the policy as the Gymnasium collector does (the one unroll, T = 1) and stores what the
update unrolls; episode starts cut the state; the segment's start state is the state the
rollout carried; resume is exact; a population member equals its seed alone."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from trustrl.learn.learners import BatchedLearner, GymLearner
from trustrl.settings.config import CONFIGS

KINDS = ("lstm", "gru")
TOL = {"rtol": 1e-5, "atol": 1e-6}


def small(**kw):
    kw = {"env_id": "CartPoleNoVel-v1", "recurrent": "lstm", "recurrent_hidden": 16,
          "hidden_sizes": (16,), "num_envs": 4, "num_steps": 40, "minibatch_size": 80,
          "update_epochs": 2, "vector": "torch", "total_steps": 4000, **kw}
    cfg = CONFIGS[kw.pop("algo", "ppo")](**kw)
    cfg.validate()
    return cfg


def rows(x: torch.Tensor) -> torch.Tensor:
    """[T, P, N, ...] -> [P, T*N, ...], time-major (the update's rows)."""
    return x.transpose(0, 1).reshape(x.shape[1], x.shape[0] * x.shape[2], *x.shape[3:])


@pytest.mark.parametrize("kind", KINDS)
def test_rollout_records_what_the_update_unrolls(kind):
    """Two rollouts of a population of two: the stored pi_old outputs and V_old (acting, one
    step at a time from the carried state) equal the training path's unroll of the stored
    segments (rows, episode starts, start state); the starts are the episode ends one step
    earlier (all True at the run's first step, the last rollout's ends at a later one's); a
    rollout's start state is the state the previous rollout's unroll ended with."""
    lr = BatchedLearner(small(recurrent=kind), [0, 4])
    net, col = lr.net, lr.collector
    prev = None
    for _ in range(2):
        r = col.collect()
        T, P, N = r["starts"].shape
        done = r["terminated"] | r["truncated"]
        assert done.any()  # CartPoleNoVel's random-policy episodes are short
        assert torch.equal(r["starts"][1:], done[:-1])
        if prev is None:
            assert bool(r["starts"][0].all()) and not r["state0"].any()
        else:
            assert torch.equal(r["starts"][0], prev["done"][-1])
            torch.testing.assert_close(r["state0"], prev["last"], **TOL)
        with torch.no_grad():
            out, v, last = net.step(rows(r["obs"]), None, rows(r["starts"]), r["state0"])
        torch.testing.assert_close(out, rows(r["old_out"]), **TOL)
        torch.testing.assert_close(v, rows(r["values"]), **TOL)
        torch.testing.assert_close(last, col.hidden, **TOL)
        assert torch.equal(col.next_start, done[-1])
        prev = {"done": done, "last": last}


@pytest.mark.parametrize("kind", KINDS)
def test_episode_start_cuts_the_state(kind):
    """Another start state changes the outputs of an env's rows before its first episode
    start in the segment, and not one bit from there on."""
    lr = BatchedLearner(small(recurrent=kind, seed=1), [1])
    r = lr.collector.collect()
    r = lr.collector.collect()  # a segment that starts mid-episode
    T, P, N = r["starts"].shape
    first = torch.where(r["starts"].any(0), r["starts"].float().argmax(0), T)  # [P, N]
    assert bool((first < T).any()) and bool((first > 0).any())
    other = r["state0"] + torch.randn_like(r["state0"])
    with torch.no_grad():
        a = lr.net.actor(rows(r["obs"]), None, rows(r["starts"]), r["state0"])
        b = lr.net.actor(rows(r["obs"]), None, rows(r["starts"]), other)
    t = torch.arange(T)[:, None, None].expand(T, P, N)
    after = rows(t >= first[None])  # [P, T*N]
    assert torch.equal(a[after], b[after])
    assert not torch.allclose(a[~after], b[~after])


def test_batched_step_is_the_gymnasium_collectors_step():
    """The member's agent (the network the Gymnasium collector, predict and evaluate run)
    stepped with the Gymnasium collector's call, policy.sample_step(obs, state, starts),
    through a batched rollout's inputs and starts from its start state gives the rollout's
    pi_old outputs and values."""
    lr = BatchedLearner(small(recurrent="gru", seed=2), [2, 3])
    lr.iterate()  # trained a little, so that both members differ from their init
    r = lr.collector.collect()
    for p in (0, 1):
        pol = lr.agent(p).policy
        state = r["state0"][p]
        for t in range(r["obs"].shape[0]):
            *_, v, out, state = pol.sample_step(r["obs"][t, p], True, None, state,
                                                r["starts"][t, p])
            torch.testing.assert_close(out, r["old_out"][t, p], **TOL)
            torch.testing.assert_close(v, r["values"][t, p], **TOL)
        torch.testing.assert_close(state, lr.collector.hidden[p], **TOL)


def test_resume_is_exact(tmp_path):
    """A batched learner restored from a checkpoint mid-episode (the recurrent state and
    episode starts in it, through the checkpoints' safe format) continues exactly as the one
    that never stopped."""
    from trustrl.records.runs import TIMING_COLUMNS
    from trustrl.util.safeio import load_safe, save_safe

    cfg = dict(recurrent="lstm", seed=3, num_steps=33, minibatch_size=66)
    a = BatchedLearner(small(**cfg), [3, 5])
    a.iterate()
    save_safe(a.state_dict(), tmp_path / "ck.pt")
    ck = load_safe(tmp_path / "ck.pt")
    assert ck["collector"]["hidden"].any() and not ck["collector"]["next_start"].all()
    rows_a, eps_a = a.iterate()
    b = BatchedLearner(small(**cfg), [3, 5])
    b.load_state_dict(ck)
    rows_b, eps_b = b.iterate()
    drop = set(TIMING_COLUMNS)
    assert [{k: v for k, v in r.items() if k not in drop} for r in rows_a] == \
        [{k: v for k, v in r.items() if k not in drop} for r in rows_b]
    assert eps_a == eps_b
    assert torch.equal(a.net.flat, b.net.flat)
    assert torch.equal(a.collector.hidden, b.collector.hidden)


@pytest.mark.parametrize("kind", KINDS)
def test_population_member_equals_its_seed_alone(kind):
    """Members 0 and 2 of the population [7, 8, 9] train as seeds 7 and 9 alone: the same
    metrics, parameters, recurrent states and greedy returns (to float rounding)."""
    pop = BatchedLearner(small(recurrent=kind), [7, 8, 9])
    alone = {s: BatchedLearner(small(recurrent=kind, seed=s), [s]) for s in (7, 9)}
    for _ in range(2):
        pop_rows, _ = pop.iterate()
        for p, s in ((0, 7), (2, 9)):
            (row,), _ = alone[s].iterate()
            for k, v in row.items():
                if isinstance(v, float):
                    assert np.isclose(pop_rows[p][k], v, rtol=1e-4, atol=1e-6), k
                elif k not in ("seconds", "sps"):
                    assert pop_rows[p][k] == v, k
    for p, s in ((0, 7), (2, 9)):
        torch.testing.assert_close(pop.net.flat[p], alone[s].net.flat[0], **TOL)
        torch.testing.assert_close(pop.collector.hidden[p], alone[s].collector.hidden[0],
                                   **TOL)
        np.testing.assert_allclose(pop.evaluate(3)[p], alone[s].evaluate(3)[0])


def test_ppo_variants_and_box_actions_iterate():
    """ppo-penalty (pi_old's outputs in its KL) and PendulumNoVel-v1's Box actions train on
    the batched collector with a recurrent policy: finite metrics, parameters moved, the
    evaluation's returns per member."""
    for cfg in (small(algo="ppo-penalty"),
                small(env_id="PendulumNoVel-v1", recurrent="gru", num_steps=50,
                      minibatch_size=100)):
        lr = BatchedLearner(cfg, [0, 1])
        before = lr.net.flat.detach().clone()
        rows_, _ = lr.iterate()
        assert all(np.isfinite(r["value_loss"]) and np.isfinite(r["kl_exact"]) for r in rows_)
        assert not torch.equal(before, lr.net.flat)
        assert lr.evaluate(2).shape == (2, 2)


def test_the_first_networks_equal_the_gymnasium_collectors():
    """A seed's first network is the same on both collectors (make_policy after seeding)."""
    gym = GymLearner(small(seed=6, vector="sync"))
    batched = BatchedLearner(small(seed=6), [6])
    assert torch.equal(gym.net.flat, batched.net.flat)


def test_the_update_gets_whole_sequences():
    """The batch the batched learner hands its algorithm holds the episode starts and the
    segments' start states (so its minibatches are whole env sequences, algos.common), and
    the training path's unroll of it gives pi_old's stored outputs."""
    lr = BatchedLearner(small(recurrent="lstm"), [0, 1])
    lr.iterate()
    seen = {}
    update = lr.algo.update

    def spy(batch, counter, lr_):
        seen.update(batch)
        return update(batch, counter, lr_)

    lr.algo.update = spy
    before = lr.net.flat.detach().clone()
    lr.iterate()
    P, N, T = 2, 4, 40
    assert seen["starts"].shape == (P, T * N) and seen["state0"].shape[:2] == (P, N)
    assert seen["state0"].any()  # mid-episode states, carried from the first iteration
    with torch.no_grad():
        out = lr.net.actor(seen["obs"], before, seen["starts"], seen["state0"])
    torch.testing.assert_close(out, seen["old_out"], **TOL)


def test_truncated_steps_bootstrap_from_the_state_the_episode_reached():
    """PendulumNoVel-v1's episodes are truncated at 200 steps: there the bootstrap value is
    V(final obs) one step on from the state the episode reached (the Gymnasium collector's),
    elsewhere V of the next step's inputs, and after the segment one step from the carried
    state."""
    lr = BatchedLearner(small(env_id="PendulumNoVel-v1", recurrent="gru", num_steps=50,
                              minibatch_size=100), [0, 1])
    col = lr.collector
    for _ in range(4):
        r = col.collect()
    T = r["obs"].shape[0]
    assert r["truncated"][-1].all() and not r["truncated"][:-1].any()
    with torch.no_grad():
        _, v, last = lr.net.step(rows(r["obs"]), None, rows(r["starts"]), r["state0"])
        final_v = lr.net.step(r["final_x"][-1], None, torch.zeros_like(col.next_start),
                              last)[1]
    torch.testing.assert_close(r["next_values"][-1], final_v, **TOL)
    torch.testing.assert_close(rows(r["next_values"][:-1]), v[:, col.N:], **TOL)
    assert T == 50


def test_greedy_evaluation_carries_the_state():
    """The batched evaluator's greedy returns are those of each member's module stepped by
    its own `step` through the same start states, the state carried through the episode."""
    from trustrl.envs.torch_classic import ResetSampler, make_torch_env
    from trustrl.maths import rng

    lr = BatchedLearner(small(recurrent="lstm", seed=4), [4, 5])
    for _ in range(3):
        lr.iterate()
    col, E = lr.collector, 3
    got = lr.evaluate(E)
    keys = rng.derive(col.eval_base[:, None], torch.arange(E)[None, :])
    for p in (0, 1):
        pol = lr.policy(p)
        env = make_torch_env("CartPoleNoVel-v1", E)
        state = ResetSampler("CartPoleNoVel-v1", keys[p]).sample(1)[0]
        elapsed = torch.zeros(E, dtype=torch.int64)
        obs = env._observe(state)
        h, starts = pol.initial_state(E), torch.ones(E)
        total, running = np.zeros(E), np.ones(E, bool)
        with torch.no_grad():
            while running.any():
                x = col.normalize(obs[None], col.obs_mean[p:p + 1], col.obs_var[p:p + 1])[0]
                out, _, h = pol.step(x, h, starts)
                starts = torch.zeros(E)
                state, elapsed, st = env.transition(state, elapsed, out.argmax(-1), state)
                total += np.where(running, st.reward.double().numpy(), 0.0)
                running &= ~(st.terminated | st.truncated).numpy()
                obs = st.final_obs
        assert total.max() > 10  # not only the first steps
        np.testing.assert_allclose(got[p], total)


def test_cli_population_end_to_end(tmp_path, cli_env):
    """trustrl train --seeds 0,1 with recurrent=gru on CartPoleNoVel-v1 (the batched
    collector), then trustrl eval of a member's agent file: a recurrent agent that plays
    Gymnasium's env."""
    common = [sys.executable, "-m", "trustrl"]
    p = subprocess.run(common + [
        "train", "--env", "CartPoleNoVel-v1", "--seeds", "0,1", "--total-steps", "640",
        "--runs-dir", "runs", "--set", "recurrent=gru", "--set", "recurrent_hidden=16",
        "--set", "num_envs=4", "--set", "num_steps=40", "--set", "minibatch_size=80",
        "--set", "update_epochs=2", "--set", "eval_episodes=2", "--set", "tensorboard=false"],
        env=cli_env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    (run,) = list((tmp_path / "runs").iterdir())
    assert '"vector": "torch"' in (run / "config.json").read_text()
    agents = sorted(run.glob("*/agent.pt"))
    assert len(agents) == 2
    p = subprocess.run(common + ["eval", str(agents[1]), "--episodes", "2"], env=cli_env,
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "greedy over 2 episodes" in p.stdout
