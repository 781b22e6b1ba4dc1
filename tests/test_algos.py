"""The algorithms on real batches: TRPO's constraint, PG = PPO(K=1), PPO-penalty's beta,
and every algorithm end to end with exact resume."""

from __future__ import annotations

import copy
import csv
import math
import warnings
from pathlib import Path

import pytest
import torch
from reference_algos import ppo_update
from torch.nn.utils import parameters_to_vector

import trustrl
from trustrl.algos import make_algorithm
from trustrl.collect.rollout import Collector
from trustrl.compute.backends import pick
from trustrl.envs.make import check_env, make_vec_env
from trustrl.maths import rng
from trustrl.maths.advantages import gae
from trustrl.maths.trust.fisher import detached
from trustrl.maths.trust.line_search import backtracking_line_search
from trustrl.nets.policies import ActorCritic
from trustrl.nets.popnet import PopActorCritic
from trustrl.records.agent import Agent
from trustrl.records.runs import TIMING_COLUMNS
from trustrl.settings.config import CONFIGS, make_config


def cartpole_batch(seed=0, steps=128, envs=4):
    torch.manual_seed(seed)
    spec = check_env("CartPole-v1")
    policy = ActorCritic(spec.obs_dim, spec.action)
    agent = Agent(policy, spec)
    venv = make_vec_env("CartPole-v1", envs)
    col = Collector(venv, agent, steps, None, Collector.start(venv, agent, seed))
    r, _ = col.collect()
    venv.close()
    adv, ret = gae(r.rewards, r.values, r.next_values, r.terminated, r.truncated, 0.99, 0.95)
    return policy, r.flatten(adv, ret)


def run_update(algo_name, cfg, policy, batch, backend="auto"):
    """One update of the population algorithm (P = 1) on a collected batch; the policy module
    is updated in place. Returns (metrics as floats, the algorithm)."""
    net = PopActorCritic.from_policies([policy], "cpu")
    algo = make_algorithm(cfg, net, pick(net, backend), rng.shuffle_keys([0]))
    b = {k: getattr(batch, k)[None] for k in ("obs", "actions", "logp_old", "values_old",
                                               "advantages", "returns")}
    m = algo.update(b, 0, algo.learning_rate(0.0))
    net.write_policy(0, policy)
    return {k: float(v[0]) for k, v in m.items()}, algo


@pytest.mark.parametrize("max_kl", [0.001, 0.01, 0.05])
def test_trpo_accepted_steps_respect_the_kl_budget(max_kl):
    policy, batch = cartpole_batch()
    cfg = make_config("trpo", "CartPole-v1", sets={"max_kl": max_kl})
    m, _ = run_update("trpo", cfg, policy, batch)
    assert m["ls_accepted"] == 1.0
    assert m["kl_exact"] <= max_kl and m["surrogate_improvement"] > 0
    assert m["xFx"] > 0 and m["cg_iters_run"] >= 1


def test_trpo_line_search_shrinks_a_forced_large_step_and_rejects_a_bad_one():
    policy, batch = cartpole_batch()
    cfg = make_config("trpo", "CartPole-v1")
    actor = list(policy.actor_parameters())
    with torch.no_grad():
        old = detached(policy.dist(batch.obs))
    adv = (batch.advantages - batch.advantages.mean()) / batch.advantages.std()

    @torch.no_grad()
    def evaluate():
        d = policy.dist(batch.obs)
        ratio = torch.exp(d.log_prob(batch.actions) - batch.logp_old)
        return float((ratio * adv).mean()), float(old.kl(d).mean())

    # the natural step from a real TRPO update, blown up 100 times
    probe = copy.deepcopy(policy)
    theta0 = parameters_to_vector(actor).detach().clone()
    run_update("trpo", cfg, probe, batch)
    step = parameters_to_vector(list(probe.actor_parameters())).detach() - theta0
    L_old = evaluate()[0]
    big = backtracking_line_search(actor, 100 * step, evaluate, L_old, cfg.max_kl)
    assert big.accepted and big.steps_tried > 1 and big.step_fraction < 1
    assert big.kl <= cfg.max_kl and big.improvement > 0
    # the opposite direction lowers the surrogate at every scale: rejected, parameters kept
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(theta0, actor)
    bad = backtracking_line_search(actor, -step, evaluate, L_old, cfg.max_kl)
    assert not bad.accepted and bad.step_fraction == 0.0
    assert torch.equal(parameters_to_vector(actor), theta0)


@pytest.mark.parametrize("backend", ["closed-form", "autograd"])
def test_trpo_fisher_subsample_changes_the_metric_alone(backend):
    """fisher_subsample k: F from every k-th sample; the gradient, the line search and the
    KL check from the whole batch. On a batch whose every k-th observation is a copy of the
    others (each state k times in a row, with different actions and advantages), F of the
    subsample is F of the whole batch, so the update must equal k = 1's; on an ordinary batch
    it must differ, and the accepted step still keeps the whole batch's KL within max_kl."""
    k = 4
    policy, batch = cartpole_batch()
    with torch.no_grad():
        obs = batch.obs[: len(batch.obs) // k].repeat_interleave(k, 0)
        logp = policy.dist(obs).log_prob(batch.actions)
    dup = copy.copy(batch)
    dup.obs, dup.logp_old = obs, logp
    runs = {}
    for name, b in (("dup", dup), ("plain", batch)):
        for kk in (1, k):
            p = copy.deepcopy(policy)
            cfg = make_config("trpo", "CartPole-v1", sets={"fisher_subsample": kk})
            m, _ = run_update("trpo", cfg, p, b, backend)
            runs[name, kk] = (m, parameters_to_vector(list(p.actor_parameters())).detach())
    (m1, a1), (mk, ak) = runs["dup", 1], runs["dup", k]
    assert torch.allclose(a1, ak, rtol=1e-4, atol=1e-6)
    for key in ("surrogate_improvement", "xFx", "grad_norm", "kl_exact"):
        assert mk[key] == pytest.approx(m1[key], rel=1e-3, abs=1e-9), key
    (m1, a1), (mk, ak) = runs["plain", 1], runs["plain", k]
    assert abs(mk["xFx"] - m1["xFx"]) > 1e-3 * abs(m1["xFx"]) and not torch.allclose(a1, ak)
    assert mk["grad_norm"] == m1["grad_norm"]  # the gradient: the whole batch
    assert mk["ls_accepted"] == 1.0 and mk["kl_exact"] <= 0.01 and mk["surrogate_improvement"] > 0


@pytest.mark.parametrize("backend", ["closed-form", "autograd"])
def test_trpo_leaves_critic_to_regression_and_actor_to_the_natural_step(backend):
    """The critic moves only by its regression (its Adam sees zero actor gradients, so the
    actor's Adam moments stay 0), the actor only by the natural step."""
    policy, batch = cartpole_batch()
    cfg = make_config("trpo", "CartPole-v1", sets={"max_kl": 1e-9})  # a step ~ 0
    critic0 = parameters_to_vector(list(policy.critic_parameters())).detach().clone()
    actor0 = parameters_to_vector(list(policy.actor_parameters())).detach().clone()
    m, algo = run_update("trpo", cfg, policy, batch, backend)
    critic1 = parameters_to_vector(list(policy.critic_parameters())).detach()
    actor1 = parameters_to_vector(list(policy.actor_parameters())).detach()
    assert not torch.equal(critic0, critic1) and m["value_loss"] > 0
    assert (actor1 - actor0).abs().max() < 1e-3
    mask = algo.net.actor_mask  # the critic's Adam holds the critic's columns alone
    assert algo.opt.m.shape[1] == int((~mask).sum()) and bool((algo.opt.m != 0).any())


def test_pg_equals_ppo_with_one_epoch_and_one_minibatch():
    """pg's update equals the reference PPO update with K = 1 and one minibatch (every ratio
    is 1 at theta_old, so the clip never acts)."""
    policy, batch = cartpole_batch()
    twin = copy.deepcopy(policy)
    pg_cfg = make_config("pg", "CartPole-v1")
    m, _ = run_update("pg", pg_cfg, policy, batch)
    opt = torch.optim.Adam(twin.parameters(), lr=pg_cfg.lr, eps=pg_cfg.adam_eps)
    ppo_update(twin, opt, batch, update_epochs=1, minibatch_size=len(batch), clip_eps=0.2,
               vf_coef=pg_cfg.vf_coef, ent_coef=pg_cfg.ent_coef,
               max_grad_norm=pg_cfg.max_grad_norm)
    for a, b in zip(policy.parameters(), twin.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=0)
    assert m["approx_kl"] > 0


def test_ppo_penalty_adapts_beta_from_the_measured_kl():
    policy, batch = cartpole_batch()
    cfg = make_config("ppo-penalty", "CartPole-v1", sets={"kl_target": 1e-6, "beta_init": 1.0})
    m, algo = run_update("ppo-penalty", cfg, copy.deepcopy(policy), batch)
    assert m["beta"] == 1.0 and m["kl_exact"] > 1.5e-6 and float(algo.beta[0]) == 2.0
    cfg = make_config("ppo-penalty", "CartPole-v1", sets={"kl_target": 10.0, "beta_init": 1.0})
    _, algo = run_update("ppo-penalty", cfg, copy.deepcopy(policy), batch)
    assert float(algo.beta[0]) == 0.5


@pytest.mark.parametrize("algo", ["ppo", "ppo-dualclip"])
@pytest.mark.parametrize("backend", ["closed-form", "autograd", "compiled"])
def test_annealed_clip_range_is_the_clip_of_the_update(algo, backend):
    """anneal_clip: at half of training, an update with clip_eps 0.3 is the update with a
    constant 0.15 (the same parameters and metrics), and not the one with 0.3."""
    from trustrl.compute import compiled

    if backend == "compiled" and not compiled.available():
        pytest.skip("Numba is not installed")
    policy, batch = cartpole_batch()
    got = {}
    for name, eps, anneal in (("annealed", 0.3, True), ("half", 0.15, False),
                              ("full", 0.3, False)):
        cfg = make_config(algo, "CartPole-v1", sets={
            "update_epochs": 8, "minibatch_size": 128, "lr": 3e-3, "target_kl": "none",
            "anneal_lr": False, "clip_eps": str(eps), "anneal_clip": str(anneal)})
        p = copy.deepcopy(policy)
        net = PopActorCritic.from_policies([p], "cpu")
        a = make_algorithm(cfg, net, compiled.pick(net, backend), rng.shuffle_keys([0]))
        assert a.backend.name == backend
        a.set_progress(0.5)
        b = {k: getattr(batch, k)[None] for k in ("obs", "actions", "logp_old", "values_old",
                                                   "advantages", "returns")}
        m = a.update(b, 0, a.learning_rate(0.5))
        got[name] = (parameters_to_vector(net.flat.detach()[0]), m)
    assert got["annealed"][1]["clip_eps"].item() == pytest.approx(0.15)
    torch.testing.assert_close(got["annealed"][0], got["half"][0])
    for k in ("policy_loss", "clip_fraction", "approx_kl"):
        torch.testing.assert_close(got["annealed"][1][k], got["half"][1][k])
    assert (got["annealed"][0] - got["full"][0]).abs().max() > 1e-4


def test_ppo_noclip_moves_further_than_ppo_on_the_same_batch():
    policy, batch = cartpole_batch()
    kls = {}
    for algo in ("ppo", "ppo-noclip"):
        cfg = make_config(algo, "CartPole-v1", sets={
            "update_epochs": 40, "minibatch_size": 64, "lr": 3e-3, "target_kl": "none",
            "anneal_lr": False})
        kls[algo] = run_update(algo, cfg, copy.deepcopy(policy), batch)[0]["approx_kl"]
    assert kls["ppo-noclip"] > 3 * kls["ppo"], kls


def rows(path: Path):
    with open(path, newline="") as f:
        return [{k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in csv.DictReader(f)]


class Stop(Exception):
    pass


@pytest.mark.parametrize("algo", sorted(CONFIGS))
def test_every_algorithm_trains_logs_and_resumes_exactly(tmp_path, algo):
    def cfg(sub, **kw):
        return make_config(algo, "Pendulum-v1" if algo in ("trpo", "ppo-penalty") else
                           "CartPole-v1", flags=dict(
            runs_dir=str(tmp_path / sub), total_steps=6 * 256, num_envs=2, num_steps=128,
            eval_every=3, eval_episodes=2, tensorboard=False, **kw))

    full = trustrl.train(cfg("full"))
    header = next(csv.reader(open(full.run_dir / "metrics.csv")))
    for col in ("approx_kl", "approx_kl_k1", "kl_exact", "clip_fraction", "clip_eps",
                "entropy", "explained_variance"):
        assert col in header
    extra = {"trpo": ["xFx", "cg_residual", "ls_steps", "ls_accepted", "surrogate_improvement"],
             "npg": ["xFx", "cg_residual", "surrogate_improvement"],
             "ppo-penalty": ["beta", "kl_penalty"], "ppo": ["epochs_run"]}.get(algo, [])
    assert set(extra) <= set(header)
    r0 = rows(full.run_dir / "metrics.csv")
    assert all(r[c] != "" for r in r0 for c in extra if c != "ls_steps")

    def stop(row):
        if row["iteration"] == 4:
            raise Stop

    with pytest.raises(Stop):
        trustrl.train(cfg("cut", checkpoint_every=3), callback=stop)
    (run,) = (tmp_path / "cut").iterdir()
    trustrl.resume(run)
    assert rows(run / "metrics.csv") == r0


def test_dual_clip_stops_the_pull_of_far_ratios_with_negative_advantages():
    """Every sample has A < 0 and a ratio of 5 (logp_old 5x below pi's): PPO-clip still pulls
    (L_clip = rho A there, slope A), dual-clip PPO with c = 3 does not move the actor at all;
    with c = 6 (above the ratios) it is PPO-clip again."""
    policy, batch = cartpole_batch()
    with torch.no_grad():
        batch.logp_old = policy.dist(batch.obs).log_prob(batch.actions) - math.log(5.0)
    batch.advantages = -torch.rand(len(batch)) - 0.5
    moved = {}
    for algo, c in (("ppo", None), ("ppo-dualclip", 3.0), ("ppo-dualclip", 6.0)):
        sets = {"update_epochs": 1, "minibatch_size": len(batch), "norm_adv": False}
        if c is not None:
            sets["dual_clip"] = c
        cfg = make_config(algo, "CartPole-v1", sets=sets)
        pol = copy.deepcopy(policy)
        before = parameters_to_vector(list(pol.actor_parameters())).detach().clone()
        run_update(algo, cfg, pol, batch)
        after = parameters_to_vector(list(pol.actor_parameters())).detach()
        moved[(algo, c)] = float((after - before).abs().max())
    assert moved[("ppo-dualclip", 3.0)] == 0.0
    assert moved[("ppo", None)] > 1e-4 and moved[("ppo-dualclip", 6.0)] == moved[("ppo", None)]


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_gymnasium_rollout_keeps_pi_old_outputs_and_ppo_uses_them(env_id):
    """The Gymnasium collector keeps the actor's output of every step (logits or Gaussian
    means) as pi_old's; it equals the actor run over the whole batch afterwards (to float
    rounding), and PPO's update gives the same numbers from it as from its own pass."""
    from trustrl.maths.normalize import ObsNormalizer
    from trustrl.records.agent import make_policy

    cfg = make_config("ppo", env_id, flags=dict(num_envs=2, num_steps=64, update_epochs=2,
                                                minibatch_size=32, normalize_obs=True))
    spec = check_env(env_id)
    torch.manual_seed(0)
    policy = make_policy(spec, cfg)
    envs = make_vec_env(env_id, 2)
    agent = Agent(policy, spec, ObsNormalizer((spec.obs_dim,)), "cpu")
    col = Collector(envs, agent, 64, None, Collector.start(envs, agent, 0))
    r, _ = col.collect()
    envs.close()
    assert r.actor_out is not None and r.actor_out.shape[:2] == (64, 2)
    with torch.no_grad():
        again = policy(r.obs.reshape(128, -1), "actor").reshape(r.actor_out.shape)
    torch.testing.assert_close(r.actor_out, again, rtol=1e-5, atol=1e-6)

    adv, ret = gae(r.rewards, r.values, r.next_values, r.terminated, r.truncated, 0.99, 0.95)
    b = r.flatten(adv, ret)
    batch = {k: getattr(b, k)[None] for k in ("obs", "actions", "logp_old", "values_old",
                                               "advantages", "returns")}
    metrics = []
    for given in (None, b.old_out, 2.0 * b.old_out):  # the last: not pi_old's outputs
        net = PopActorCritic.from_policies([policy], "cpu")
        algo = make_algorithm(cfg, net, pick(net), rng.shuffle_keys([0]))
        mb = batch if given is None else dict(batch, old_out=given[None])
        metrics.append((algo.update(mb, 0, 1e-3), net.flat.clone()))
    (m0, f0), (m1, f1), (m2, _) = metrics
    torch.testing.assert_close(f0, f1, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(m0["kl_exact"], m1["kl_exact"], rtol=1e-3, atol=1e-7)
    assert not torch.allclose(m2["kl_exact"], m0["kl_exact"], rtol=1e-2)  # it reads them


@pytest.mark.parametrize("P", [1, 3])
def test_epoch_copies_into_kept_buffers_equal_fresh_ones(P):
    """shuffled_epoch with kept buffers (one member: whole rows by index_select; several:
    gather) yields exactly the minibatches of fresh arrays, epoch after epoch (each copy
    overwrites the last) and when a batch of another size comes."""
    from trustrl.algos.common import shuffled_epoch

    keys = rng.shuffle_keys(list(range(P)))
    buffers: dict[str, torch.Tensor] = {}
    g = torch.Generator().manual_seed(P)
    for n in (48, 48, 32):
        batch = {"obs": torch.randn(P, n, 3, 2, generator=g),
                 "actions": torch.randint(0, 5, (P, n), generator=g),
                 "returns": torch.randn(P, n, generator=g), "flat_old": torch.randn(P, 7)}
        for counter in range(3):
            fresh = list(shuffled_epoch(batch, keys, counter, 16))
            with warnings.catch_warnings():  # torch warns when it must resize an out=
                warnings.simplefilter("error")
                kept = [{k: x.clone() for k, x in mb.items()}
                        for mb in shuffled_epoch(batch, keys, counter, 16, buffers)]
            assert len(fresh) == len(kept) == n // 16
            for a, b in zip(fresh, kept, strict=True):
                assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
        assert buffers["obs"].shape == (P, n, 3, 2)
