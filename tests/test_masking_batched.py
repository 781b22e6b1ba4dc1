"""Action masks on the batched collector (docs/masking.md): MaskedPick-v0's dynamics and masks,
written once (trustrl.envs.classic), run by the torch, NumPy and compiled rollouts; actions are
drawn under each state's mask and never invalid, sampled or greedy; the three rollouts give
the same records; a population member is its seed alone; the stored masks reach the update;
a short masked run learns; action_mask 'on' on an env without masks is a one-line error."""

from __future__ import annotations

import csv
import subprocess
import sys

import numpy as np
import pytest
import torch

from trustrl.collect.batched import BatchedCollector
from trustrl.envs.make import check_env
from trustrl.learn.learners import BatchedLearner, init_policies
from trustrl.nets.popnet import PopActorCritic
from trustrl.settings.config import CONFIGS, make_config

ENV = "MaskedPick-v0"
N_ITEMS = 8
KINDS = ("torch", "numpy", "compiled")
SEEDS = (0, 1, 2)


def cfg_of(algo="ppo", **sets):
    sets = {"num_envs": 4, "num_steps": 32, "normalize_obs": False,
            **({} if algo in ("trpo", "npg") else {"minibatch_size": 64}), **sets}
    return make_config(algo, env_id=ENV, sets=sets)


def collector(kind, seeds, **sets):
    """A batched collector on MaskedPick-v0 whose rollout is `kind`'s."""
    if kind == "compiled":
        pytest.importorskip("numba")
    cfg = cfg_of(**sets)
    net = PopActorCritic.from_policies(init_policies(check_env(ENV), cfg, list(seeds)), "cpu")
    c = BatchedCollector(cfg, net, list(seeds), numpy_rollout=kind != "torch",
                         compiled_rollout=kind == "compiled")
    assert c.rollout_kind == kind
    return c


def learner(kind, seeds, algo="ppo", **sets):
    """A batched learner whose rollout is `kind`'s (compiled: the compiled backend)."""
    if kind == "compiled":
        pytest.importorskip("numba")
    backend = "compiled" if kind == "compiled" else "closed-form"
    cfg = cfg_of(algo, grad_backend=backend, **sets)
    lr = BatchedLearner(cfg, list(seeds), numpy_rollout={"torch": False, "numpy": True}.get(kind))
    assert lr.collector.rollout_kind == kind
    return lr


def taken(obs):
    """The picked flags of MaskedPick's observations [..., 2 n] (unnormalised)."""
    return obs[..., N_ITEMS:] > 0.5


# --- (a) no invalid action, sampled or greedy ---------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_sampled_actions_are_valid_under_the_stored_mask_of_each_state(kind):
    """Three rollouts of two members: the stored mask of each step is that of its observation
    (the items not picked yet), every action is valid under it, and so no step pays the
    penalty; action_mask 'off' on the same seeds draws invalid actions (the check can
    fail)."""
    for seeds in ((0, 5), (3, 9)):
        c = collector(kind, seeds)
        assert c.masked
        for _ in range(3):
            r = c.collect()
            m = r["action_mask"]
            assert m.shape == (32, 2, 4, N_ITEMS) and m.dtype == torch.bool
            assert torch.equal(m, ~taken(r["obs"]))
            assert bool(m.gather(-1, r["actions"][..., None]).all())
            assert bool((r["rewards"] >= 0).all())
        off = collector(kind, seeds, action_mask="off")
        assert not off.masked
        r = off.collect()
        assert "action_mask" not in r
        assert bool((r["rewards"] < 0).any())  # invalid picks, penalised


@pytest.mark.parametrize("kind", KINDS)
def test_greedy_evaluation_takes_only_valid_actions(kind):
    """A policy whose logit of item 0 is far above the others: unmasked, its greedy play
    picks item 0 twice (return value - 1 < 0); masked, it takes the best valid item each step,
    every episode's return is a sum of four values (>= 0). The evaluation follows the run's
    action_mask."""
    for seeds in ((0, 1), (2, 3)):
        for mode in ("auto", "off"):
            lr = learner(kind, seeds, action_mask=mode)
            with torch.no_grad():
                lr.net.views(lr.net.flat)["actor.b_out"][..., 0] += 100.0
            returns = torch.as_tensor(lr.evaluate(6))
            if mode == "auto":
                assert bool((returns >= 0).all()), returns
            else:
                assert bool((returns < 0).all()), returns


# --- (b) the three rollouts agree ------------------------------------------------------------

def test_torch_numpy_and_compiled_rollouts_give_the_same_records():
    """The same seeds through the torch, NumPy and compiled rollouts, two collections each
    (episodes ending and reset inside both): actions, masks, terminations and lengths equal
    exactly, the other records to float rounding (the libraries' matmul and log-softmax); the
    compiled rollout's pi_old outputs are the actor's logits masked."""
    seeds = (4, 7)
    cs = {k: collector(k, seeds) for k in KINDS}
    for _ in range(2):
        rs = {k: c.collect() for k, c in cs.items()}
        ref = rs["numpy"]
        for k in ("torch", "compiled"):
            for key, x in ref.items():
                y = rs[k][key]
                assert x.dtype == y.dtype and x.shape == y.shape, (k, key)
                if x.dtype in (torch.bool, torch.int64):
                    assert torch.equal(x, y), (k, key)
                else:
                    torch.testing.assert_close(y, x, rtol=1e-5, atol=1e-5, msg=(k, key))
        assert bool(ref["terminated"].any())
        r, net = rs["compiled"], cs["compiled"].net
        T, P, N, D = r["obs"].shape
        with torch.no_grad():
            out = net.actor(r["obs"].transpose(0, 1).reshape(P, T * N, D))
        want = torch.where(r["action_mask"], out.view(P, T, N, -1).transpose(0, 1),
                           torch.tensor(-1e8))
        torch.testing.assert_close(r["old_out"], want, rtol=1e-5, atol=1e-5)
    for name in ("env_state", "elapsed", "ep_ret", "ep_len", "obs"):
        for k in ("torch", "compiled"):
            torch.testing.assert_close(getattr(cs[k], name), getattr(cs["numpy"], name),
                                       rtol=1e-5, atol=1e-5, msg=(k, name))


# --- (c) a population member is its seed alone -------------------------------------------------

@pytest.mark.parametrize("kind", ("numpy", "compiled"))
def test_population_member_equals_its_seed_alone(kind):
    """Members 1 of the populations (3, 8) and (5, 8) and seed 8 alone: the same three
    masked iterations (metrics and parameters to float rounding) and evaluations."""
    alone = learner(kind, [8])
    pops = [learner(kind, [s, 8]) for s in (3, 5)]
    for _ in range(3):
        (row,), _ = alone.iterate()
        for pop in pops:
            rows, _ = pop.iterate()
            for key, v in row.items():
                w = rows[1][key]
                assert (v is None and w is None) or w == pytest.approx(v, rel=1e-4, abs=1e-5), \
                    (key, v, w)
    for pop in pops:
        torch.testing.assert_close(pop.net.flat[1], alone.net.flat[0], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(pop.evaluate(4)[1], alone.evaluate(4)[0], rtol=1e-5)


# --- (e) the stored masks reach the update ----------------------------------------------------

@pytest.mark.parametrize("kind,algo", [("torch", "ppo"), ("numpy", "ppo"), ("compiled", "ppo"),
                                       ("compiled", "trpo"), ("numpy", "ppo-penalty")])
def test_the_update_reads_the_masks_the_actions_were_drawn_under(kind, algo):
    """A whole iteration with a vanishing step: the policy does not move, so the ratio stays
    1 and every KL diagnostic 0, which holds only if the update's log-probs are the masked
    ones the rollout stored (unmasked, the ratio would be far from 1: checked on the
    rollout's own records). The compiled learner runs its fused iteration (PPO) or the
    compiled kernels (TRPO)."""
    small = {"lr": 1e-12} if algo != "trpo" else {"max_kl": 1e-14}
    for seeds in ((0, 6), (1, 2)):
        lr = learner(kind, seeds, algo, **small)
        if kind == "compiled" and algo == "ppo":
            assert lr.fused
        rows, _ = lr.iterate()
        for row in rows:
            for k in ("approx_kl", "approx_kl_k1", "kl_exact", "clip_fraction"):
                assert abs(row[k]) < 1e-6, (k, row[k])
            assert row["ratio_min"] == pytest.approx(1.0, abs=1e-5)
            assert row["ratio_max"] == pytest.approx(1.0, abs=1e-5)
    r = lr.collector.collect()
    net = lr.net
    T, P, N, D = r["obs"].shape
    with torch.no_grad():
        out = net.actor(r["obs"].transpose(0, 1).reshape(P, T * N, D))
    unmasked = torch.log_softmax(out, -1).gather(
        -1, r["actions"].transpose(0, 1).reshape(P, T * N, 1))[..., 0]
    assert (unmasked - r["logp"].transpose(0, 1).reshape(P, T * N)).abs().max() > 1e-2


def test_recurrent_policy_draws_and_updates_under_the_masks():
    """A recurrent policy (GRU) on the batched collector's torch rollout: its actions are
    valid under the stored masks, and its update reads them (ratio 1 at a vanishing step)."""
    for seed in SEEDS[:2]:
        cfg = CONFIGS["ppo"](env_id=ENV, vector="torch", recurrent="gru", recurrent_hidden=16,
                             hidden_sizes=(16,), num_envs=4, num_steps=16, minibatch_size=32,
                             normalize_obs=False, lr=1e-12)
        cfg.validate()
        lr = BatchedLearner(cfg, [seed, seed + 10])
        r = lr.collector.collect()
        assert torch.equal(r["action_mask"], ~taken(r["obs"]))
        assert bool(r["action_mask"].gather(-1, r["actions"][..., None]).all())
        assert bool((r["rewards"] >= 0).all())
        rows, _ = lr.iterate()
        for row in rows:
            assert abs(row["kl_exact"]) < 1e-6 and abs(row["approx_kl"]) < 1e-6
            assert row["ratio_max"] == pytest.approx(1.0, abs=1e-5)


# --- (d) a short masked run learns ------------------------------------------------------------

def test_masked_batched_ppo_learns_masked_pick():
    """Three seeds, one population on the batched collector (compiled where Numba is), 24,576
    steps each: every seed's greedy evaluation beats random valid play (2.0 expected) by a
    margin, above 2.4 (best play 2.89 expected), and no training episode ended on an invalid
    move."""
    cfg = cfg_of(num_envs=8, num_steps=64, minibatch_size=128, total_steps=24576)
    lr = BatchedLearner(cfg, list(SEEDS))
    assert lr.collector.masked
    worst = 0.0
    for _ in range(24576 // (8 * 64)):
        _, episodes = lr.iterate()
        worst = min([worst] + [e["return"] for eps in episodes for e in eps])
    assert worst >= 0.0
    final = lr.evaluate(100).mean(1)
    assert (final > 2.4).all(), final


# --- (f) one-line errors, end to end through the CLI ------------------------------------------

@pytest.mark.parametrize("flags", [["--vector", "torch"], ["--seeds", "0-3"]])
def test_cli_action_mask_on_without_masks_is_one_line(tmp_path, cli_env, flags):
    """CartPole-v1 on the batched collector (vector torch; a population of seeds) gives no
    masks: action_mask 'on' is refused in one line, before any run."""
    p = subprocess.run([sys.executable, "-m", "trustrl", "train", "--env", "CartPole-v1",
                        "--set", "action_mask=on", "--runs-dir", "runs", *flags],
                       env=cli_env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        "trustrl: error: action_mask 'on': the batched collector's CartPole-v1 gives no masks "
        "(of its envs, MaskedPick-v0 does); use vector 'sync' or 'async' for an env of your "
        "own"]
    assert not (tmp_path / "runs").exists()


def test_cli_masked_pick_population_on_the_batched_collector(tmp_path, cli_env):
    """`trustrl train --env MaskedPick-v0 --seeds 0-1 --set action_mask=on`: a population on
    the batched collector, masked: no episode of either member ends on an invalid move."""
    p = subprocess.run([sys.executable, "-m", "trustrl", "train", "--env", ENV,
                        "--seeds", "0-1", "--total-steps", "2048", "--runs-dir", "runs",
                        "--set", "action_mask=on", "--set", "num_envs=4",
                        "--set", "num_steps=64", "--set", "eval_episodes=4",
                        "--set", "tensorboard=false"],
                       env=cli_env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    runs = sorted(p for p in (tmp_path / "runs").rglob("episodes.csv"))
    assert len(runs) == 2
    for path in runs:
        with open(path, newline="") as f:
            returns = [float(r["return"]) for r in csv.DictReader(f)]
        assert len(returns) > 100 and min(returns) >= 0.0
