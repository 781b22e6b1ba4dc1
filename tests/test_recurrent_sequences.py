"""Recurrent minibatches of shorter sequences than the segments (`sequence_length`): each
segment cut into sequences of L steps, each starting from the state pi_old reached there
(`algos.common.cut_sequences`), as sb3-contrib's RecurrentPPO and RLlib's max_seq_len train."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from trustrl.algos.common import cut_sequences, shuffled_epoch
from trustrl.learn.learners import BatchedLearner, GymLearner
from trustrl.settings.config import CONFIGS
from trustrl.util.errors import ConfigError

KINDS = ("lstm", "gru")


def small(**kw):
    kw = {"env_id": "CartPoleNoVel-v1", "recurrent": "lstm", "recurrent_hidden": 16,
          "hidden_sizes": (16,), "num_envs": 4, "num_steps": 40, "minibatch_size": 40,
          "update_epochs": 2, "vector": "sync", "total_steps": 4000, "sequence_length": 10,
          **kw}
    return CONFIGS[kw.pop("algo", "ppo")](**kw)


def rollout_batch(lr: GymLearner):
    """A rollout of the learner's collector as the update's recurrent batch (rows t N + e)."""
    ro, _ = lr.collector.collect()
    T, N = ro.starts.shape
    batch = {"obs": ro.obs.reshape(1, T * N, -1), "starts": ro.starts.reshape(1, T * N),
             "state0": ro.state0[None], "returns": torch.arange(T * N).float()[None]}
    return ro, batch


@pytest.mark.parametrize("kind", KINDS)
def test_cut_sequences_start_from_the_rollouts_states(kind):
    """The cut batch's sequence c N + e is steps [c L, (c + 1) L) of env e, time-major, and
    starts from the state the collector's policy had at step c L (stepped one step at a time
    over the segment, through its episode ends); unrolled from those states, the network at
    pi_old's parameters gives the rollout's stored outputs at every row (so every ratio
    starts at 1), across episode ends and from one rollout to the next."""
    L = 10
    for seed in (0, 1, 2):
        lr = GymLearner(small(seed=seed, recurrent=kind))
        for _ in range(2):  # the second rollout starts from a carried, non-zero state
            ro, batch = rollout_batch(lr)
            T, N = ro.starts.shape
            C = T // L
            assert ro.starts[1:].any()  # episodes end inside the segment
            cut = cut_sequences(lr.net, batch, L)
            assert cut["obs"].shape == batch["obs"].shape
            assert cut["state0"].shape == (1, C * N, ro.state0.shape[-1])
            # the rows: new row t (C N) + c N + e holds old row (c L + t) N + e
            got = cut["returns"][0].long().reshape(L, C, N)
            t, c, e = torch.meshgrid(torch.arange(L), torch.arange(C), torch.arange(N),
                                     indexing="ij")
            assert torch.equal(got, (c * L + t) * N + e)
            # the start states: one step at a time from the segment's start state
            state = ro.state0[None]
            with torch.no_grad():
                for step in range(T):
                    if step % L == 0:
                        torch.testing.assert_close(
                            cut["state0"][0, (step // L) * N:(step // L + 1) * N], state[0],
                            rtol=1e-5, atol=1e-6)
                    rows = slice(step * N, (step + 1) * N)
                    state = lr.net.step(batch["obs"][:, rows], None,
                                        batch["starts"][:, rows], state)[2]
                out = lr.net.actor(cut["obs"], starts=cut["starts"], state0=cut["state0"])
            stored = ro.actor_out.reshape(T * N, -1)[cut["returns"][0].long()]
            torch.testing.assert_close(out[0], stored, rtol=1e-5, atol=1e-5)


def test_a_segment_no_longer_than_the_sequence_is_left_whole():
    lr = GymLearner(small(seed=0))
    _, batch = rollout_batch(lr)
    for L in (40, 80):
        assert cut_sequences(lr.net, batch, L) is batch


def test_minibatches_are_sequences_of_the_cut_length():
    """Each minibatch of the cut batch is minibatch_size / L whole sequences of L steps, and
    an epoch covers every (env, chunk) once."""
    lr = GymLearner(small(seed=0))
    _, batch = rollout_batch(lr)
    cut = cut_sequences(lr.net, batch, 10)
    seen = []
    for mb in shuffled_epoch(cut, torch.tensor([3]), 0, 20):
        assert mb["state0"].shape[1] == 2 and mb["obs"].shape[1] == 20
        rows = mb["returns"][0].long().reshape(10, 2)  # [t, sequence]: old rows (c L + t) N + e
        assert torch.equal(rows - rows[:1], 4 * torch.arange(10)[:, None].expand(10, 2))
        seen += rows[0].tolist()
    assert sorted(seen) == sorted((c * 10 * 4 + e) for c in range(4) for e in range(4))


@pytest.mark.parametrize("kind", KINDS)
def test_the_update_unrolls_from_pi_olds_states(kind, monkeypatch):
    """A PPO update on sequences of 10 steps (segments of 40) with a learning rate too small
    to move the parameters: its minibatches are 4 sequences of 10 steps (minibatch_size 40),
    and the diagnostics after it find every ratio 1 and no KL, which holds only if each
    sequence was unrolled from the state the rollout had there (from zero states the ratios
    spread). Then real updates train: finite metrics, parameters moved."""
    from trustrl.algos import ppo

    shapes = []

    def spy(batch, idx, buffers=None):
        mb = minibatch(batch, idx, buffers)
        shapes.append((mb["state0"].shape[1], mb["obs"].shape[1]))
        return mb

    minibatch = ppo.minibatch
    monkeypatch.setattr(ppo, "minibatch", spy)
    for seed in (0, 1):
        lr = GymLearner(small(seed=seed, recurrent=kind, lr=1e-12, anneal_lr=False,
                              update_epochs=1))
        (row,), _ = lr.iterate()
        assert abs(row["ratio_max"] - 1) < 1e-4 and abs(row["ratio_min"] - 1) < 1e-4, row
        assert abs(row["kl_exact"]) < 1e-6
    assert shapes and set(shapes) == {(4, 40)}
    lr = GymLearner(small(seed=0, recurrent=kind))
    before = lr.net.flat.detach().clone()
    for _ in range(2):
        (row,), _ = lr.iterate()
        assert np.isfinite(row["value_loss"]) and np.isfinite(row["kl_exact"])
    assert not torch.equal(before, lr.net.flat)


def test_a_population_member_equals_its_seed_alone():
    """On the batched collector, with sequences of 8 steps: member 1 of a population of seeds
    (1, 2) trains as seed 2 alone (metrics and parameters)."""
    kw = dict(vector="torch", num_steps=32, minibatch_size=64, sequence_length=8,
              total_steps=10**6, eval_every=0)
    pop = BatchedLearner(small(**kw), [1, 2])
    one = BatchedLearner(small(**kw), [2])
    for _ in range(2):
        rows_pop, _ = pop.iterate()
        rows_one, _ = one.iterate()
        for k in ("value_loss", "kl_exact", "ratio_max", "policy_loss"):
            assert rows_pop[1][k] == pytest.approx(rows_one[0][k], rel=1e-4, abs=1e-6), k
    torch.testing.assert_close(pop.net.flat[1], one.net.flat[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("sets,match", [
    ({"sequence_length": 7}, "must divide num_steps 40"),
    ({"sequence_length": 10, "minibatch_size": 25}, "multiple of 10"),
    ({"sequence_length": 10, "recurrent": "none"}, "for recurrent policies"),
])
def test_bad_sequence_lengths_are_one_line_errors(sets, match):
    cfg = small()
    for k, v in sets.items():
        setattr(cfg, k, v)
    with pytest.raises(ConfigError, match=match) as e:
        cfg.validate()
    assert "\n" not in str(e.value)


def test_cli_trains_on_cut_sequences(tmp_path, cli_env):
    """trustrl train with sequence_length on CartPoleNoVel-v1 records it in config.json; a
    length that does not divide num_steps is one line, exit status 2."""
    common = [sys.executable, "-m", "trustrl", "train", "--env", "CartPoleNoVel-v1",
              "--runs-dir", "runs", "--set", "recurrent=lstm", "--set", "recurrent_hidden=16",
              "--set", "num_envs=4", "--set", "num_steps=32", "--set", "update_epochs=2",
              "--set", "eval_episodes=2", "--set", "tensorboard=false"]
    p = subprocess.run(common + ["--total-steps", "256", "--set", "sequence_length=8",
                                 "--set", "minibatch_size=32"],
                       env=cli_env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    (run,) = list((tmp_path / "runs").iterdir())
    assert '"sequence_length": 8' in (run / "config.json").read_text()
    p = subprocess.run(common + ["--set", "sequence_length=5"], env=cli_env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "must divide num_steps" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
