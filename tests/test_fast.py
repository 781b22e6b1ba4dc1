"""The batched path: counter-based RNG, population networks and Adam, the population
algorithms against independent single-run references (tests/reference_algos.py), population =
separate runs, NumPy = torch rollouts, run folders, resume, CLI."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from batched_shim import Pop, with_algo
from reference_algos import TRPO as RefTRPO
from reference_algos import old_distribution, ppo_update

from trustrl.collect.rollout import Batch
from trustrl.envs.torch_classic import SUPPORTED, ResetSampler
from trustrl.learn.learners import init_policies
from trustrl.maths import rng
from trustrl.maths.distributions import Categorical, DiagGaussian
from trustrl.maths.optim import PopAdam
from trustrl.nets.policies import ActionSpec, ActorCritic
from trustrl.nets.popnet import PopActorCritic
from trustrl.settings.config import make_config
from trustrl.training.train import Trainer, parse_seeds, resume, train
from trustrl.util.errors import ConfigError

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def small_cfg(env: str = "CartPole-v1", **sets: object):
    base = {"num_envs": 4, "num_steps": 32, "update_epochs": 2, "minibatch_size": 32,
            "total_steps": 4096, "eval_every": 2, "eval_episodes": 3, "vector": "torch",
            "preset": "chapter" if env in ("CartPole-v1", "Pendulum-v1") else "none"}
    base.update(sets)
    return make_config("ppo", env, None, {k: str(v) for k, v in base.items()}, {})


# --- counter-based random numbers --------------------------------------------------------------
def test_rng_is_a_pure_function_of_key_counter_index():
    keys = rng.derive(torch.arange(5), 7)
    a = rng.uniform(keys, 3, 10)
    assert torch.equal(a, rng.uniform(keys, 3, 10))
    assert torch.equal(a[2], rng.uniform(keys[2:3], 3, 10)[0])  # independent of the others
    assert torch.equal(rng.uniform(keys, 3, 4), a[:, :4])  # a prefix of a longer draw
    assert not torch.equal(a, rng.uniform(keys, 4, 10))  # the counter matters
    assert len(set(a.flatten().tolist())) == a.numel()


def test_rng_numpy_hash_equals_the_int64_torch_hash():
    """On a CPU `bits` hashes in NumPy's uint32; CUDA and torch.compile use the int64 torch
    emulation. Both give the same numbers (and these pinned ones: the lowbias32 stream that
    every population test and checkpoint relies on)."""
    g = torch.Generator().manual_seed(0)
    for shape in [(), (1,), (5,), (3, 4)]:
        key = torch.randint(0, 2**32, shape, dtype=torch.int64, generator=g)
        for counter in [0, 7, 2**40 + 3, torch.randint(0, 2**40, shape, generator=g),
                        torch.tensor(5)]:
            for n in [1, 17, 512]:
                a, b = rng._bits_np(key, counter, n), rng._bits_torch(key, counter, n)
                assert a.dtype == b.dtype == torch.int64 and torch.equal(a, b)
    keys = torch.tensor([0, 1, 2**32 - 1])
    pinned = [[3560825422, 1290447554, 1830843545], [888815938, 3333698697, 1057163543],
              [3937318091, 3832351215, 1339043729]]
    assert rng.bits(keys, 5, 3).tolist() == pinned == rng._bits_torch(keys, 5, 3).tolist()


def test_rng_distributions():
    keys = rng.derive(torch.arange(64), 1)
    u = rng.uniform(keys, torch.arange(100)[:, None], 64).flatten()  # 409,600 draws
    assert 0.0 <= float(u.min()) and float(u.max()) < 1.0
    assert abs(float(u.mean()) - 0.5) < 0.002 and abs(float(u.var()) - 1 / 12) < 0.001
    # uniform histogram: chi-square over 20 bins well within its 99.9% quantile (43.8)
    counts = torch.histc(u, 20, 0.0, 1.0)
    expected = u.numel() / 20
    assert float(((counts - expected) ** 2 / expected).sum()) < 43.8
    z = rng.normal(keys, torch.arange(100)[:, None], 64).flatten()
    assert abs(float(z.mean())) < 0.01 and abs(float(z.std()) - 1.0) < 0.01
    g = rng.gumbel(keys, torch.arange(100)[:, None], 64).flatten()
    assert abs(float(g.mean()) - 0.5772) < 0.01  # Euler-Mascheroni
    # Gumbel-max samples the softmax
    logits = torch.tensor([0.0, 1.0, -1.0])
    n = rng.gumbel(rng.derive(torch.arange(20000), 3), 0, 3)
    freq = torch.bincount((logits + n).argmax(-1), minlength=3).float() / 20000
    assert torch.allclose(freq, torch.softmax(logits, 0), atol=0.01)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_reset_states_drawn_ahead_are_the_ones_drawn_call_by_call(env_id):
    """ResetSampler.sample_ahead(T, A) hands out exactly sample(T)'s states, call after call
    (A calls from one draw, then a fresh draw), with the counter where sample leaves it; a
    counter moved from outside (a loaded checkpoint), on or off a call's boundary, draws
    afresh from there."""
    keys = rng.derive(torch.arange(3), 2)
    plain, ahead = ResetSampler(env_id, keys), ResetSampler(env_id, keys)
    for _ in range(7):
        assert torch.equal(ahead.sample_ahead(5, 3), plain.sample(5))
        assert int(ahead.counter) == int(plain.counter)
    for moved in (2 * 5 * plain.calls, 1):  # back two calls; then off any boundary
        plain.counter -= moved
        ahead.counter -= moved
        for _ in range(4):
            assert torch.equal(ahead.sample_ahead(5, 3), plain.sample(5))
    assert torch.equal(ahead.sample_ahead(2, 3), plain.sample(2))  # another length


def test_the_collector_drawing_ahead_changes_no_number(monkeypatch):
    """The batched collector's noise and reset states drawn for 4 rollouts at once (a CPU
    collector draws ahead) or rollout by rollout: the same iterations bit for bit, across a
    fresh draw, and a learner restored from a checkpoint taken in the middle of a draw goes
    on exactly as the uninterrupted one."""
    import trustrl.collect.batched as batched
    from trustrl.learn.learners import BatchedLearner

    cfg = make_config("ppo", "CartPole-v1", sets=dict(
        grad_backend="closed-form", num_envs=3, num_steps=8, eval_every=0,
        minibatch_size=12, update_epochs=2))

    def run(ahead, iterations, start=None):
        monkeypatch.setattr(batched, "DRAWS_AHEAD", ahead)
        learner = BatchedLearner(cfg, [4, 11])
        if start is not None:
            learner.load_state_dict(start)
        rows = [learner.step()[0] for _ in range(iterations)]
        return learner, torch.stack(rows)

    one, m_one = run(1, 6)
    many, m_many = run(4, 6)
    assert many.collector._noise_ahead is not None  # it did draw ahead
    assert float(m_many[:, :, many.columns.index("episodes")].sum()) > 0  # resets were drawn
    same = dict(rtol=0, atol=0, equal_nan=True)  # NaN: no episode ended yet
    torch.testing.assert_close(m_one, m_many, **same)
    assert torch.equal(one.net.flat, many.net.flat)
    first, _ = run(4, 3)
    resumed, m_rest = run(4, 3, start=first.state_dict())
    torch.testing.assert_close(m_rest, m_many[3:], **same)
    assert torch.equal(resumed.net.flat, many.net.flat)


@pytest.mark.parametrize("env_id", SUPPORTED)
def test_reset_sampler_batches_equal_steps_and_stay_in_bounds(env_id):
    keys = rng.derive(torch.arange(6), 2)
    batched = ResetSampler(env_id, keys).sample(5)
    one = ResetSampler(env_id, keys)
    stepwise = torch.stack([one.sample(1)[0] for _ in range(5)])
    assert torch.equal(batched, stepwise)
    from test_torch_envs import RESET_RANGES

    for j, rg in enumerate(RESET_RANGES[env_id]):
        col = batched[..., j]
        if rg is None:
            assert torch.all(col == 0)
        else:
            assert float(col.min()) >= rg[0] and float(col.max()) <= rg[1]


# --- population networks and Adam --------------------------------------------------------------
@pytest.mark.parametrize("action", [ActionSpec("discrete", n=3),
                                    ActionSpec("box", dim=2, low=(-1, -1), high=(1, 1))])
def test_population_network_equals_actor_critic(action):
    torch.manual_seed(0)
    pols = [ActorCritic(5, action, (16, 8), "tanh", log_std_init=-0.3 * i) for i in range(3)]
    net = PopActorCritic.from_policies(pols, "cpu")
    obs = torch.randn(3, 7, 5)
    out, v = net.actor(obs), net.critic(obs)
    acts = torch.randint(0, 3, (3, 7)) if action.kind == "discrete" else torch.randn(3, 7, 2)
    logp, ent = net.log_prob_entropy(out, acts)
    for i, p in enumerate(pols):
        d = p.dist(obs[i])
        assert torch.allclose(v[i], p.value(obs[i]), atol=1e-6)
        assert torch.allclose(logp[i], d.log_prob(acts[i]), atol=1e-5)
        assert torch.allclose(net.log_prob(out, acts)[i], d.log_prob(acts[i]), atol=1e-5)
        assert torch.allclose(ent[i], d.entropy(), atol=1e-5)
        back = net.to_policy(i)
        for a, b in zip(back.parameters(), p.parameters(), strict=True):
            assert torch.equal(a, b)
    # exact KL between two populations' policies
    other = PopActorCritic.from_policies(
        [ActorCritic(5, action, (16, 8), "tanh", log_std_init=0.2) for _ in range(3)], "cpu")
    kl = other.kl_from(net.actor(obs), other.actor(obs), net.flat.detach())
    for i, p in enumerate(pols):
        q = other.to_policy(i)
        d_old, d_new = p.dist(obs[i]), q.dist(obs[i])
        assert isinstance(d_old, Categorical | DiagGaussian)
        assert torch.allclose(kl[i], d_old.kl(d_new), atol=1e-5)  # type: ignore[arg-type]


def test_pop_adam_equals_torch_adam_and_masks_members():
    torch.manual_seed(1)
    w0 = torch.randn(3, 6)
    ref = [torch.nn.Parameter(w0[i].clone()) for i in range(3)]
    opts = [torch.optim.Adam([r], lr=0.01, eps=1e-5) for r in ref]
    flat = w0.clone()
    pop = PopAdam(flat, eps=1e-5)
    active = torch.tensor([True, False, True])
    for step in range(5):
        g = torch.randn(3, 6)
        mask = active if step >= 2 else None  # member 1 stops after two steps
        pop.step(g, torch.tensor(0.01), mask)
        for i in range(3):
            if mask is None or bool(mask[i]):
                ref[i].grad = g[i].clone()
                opts[i].step()
    for i in range(3):
        assert torch.allclose(flat[i], ref[i].detach(), atol=1e-6)
    assert pop.t.tolist() == [5.0, 2.0, 5.0]


# --- the engine ----------------------------------------------------------------------------------
@pytest.mark.parametrize("discrete", [True, False])
def test_engine_update_equals_core_ppo_update(discrete):
    """With one minibatch per epoch (no shuffling effect), the engine's update and the core's
    ppo_update give the same parameters: same loss, clip, grad clip and Adam."""
    env = "CartPole-v1" if discrete else "Pendulum-v1"
    cfg = small_cfg(env, minibatch_size=128, update_epochs=3, ent_coef=0.01,
                    clip_value_loss=True, lr=3e-3)
    eng = Pop(cfg, [5])
    core = init_policies(eng.spec, cfg, [5])[0]
    torch.manual_seed(0)
    B = 128
    obs = torch.randn(1, B, eng.D)
    acts = torch.randint(0, 2, (1, B)) if discrete else torch.randn(1, B, 1)
    with torch.no_grad():
        out = eng.net.actor(obs)
        logp = eng.net.log_prob(out, acts) + 0.05 * torch.randn(1, B)  # pi_old != pi
        values = eng.net.critic(obs)
    adv, ret = torch.randn(1, B), torch.randn(1, B) * 3
    b = {"obs": obs, "actions": acts, "logp_old": logp, "values_old": values,
         "advantages": adv, "returns": ret}
    m = eng.algo.update(b, 0, cfg.lr)
    opt = torch.optim.Adam(core.parameters(), lr=cfg.lr, eps=cfg.adam_eps)
    mc = ppo_update(core, opt, Batch(obs[0], acts[0], logp[0], values[0], adv[0], ret[0]),
                    update_epochs=3, minibatch_size=B, clip_eps=0.2, vf_coef=0.5,
                    ent_coef=0.01, max_grad_norm=0.5, clip_value_loss=True)
    for a, c in zip(eng.policy(0).parameters(), core.parameters(), strict=True):
        assert torch.allclose(a, c, atol=2e-5), (a - c).abs().max()
    for k in ("approx_kl", "kl_exact", "clip_fraction", "entropy", "ratio_q50"):
        assert math.isclose(float(m[k][0]), mc[k], rel_tol=1e-3, abs_tol=1e-5), k


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
@pytest.mark.parametrize("algo", ["ppo", "ppo-noclip", "ppo-penalty", "pg", "ppo-dualclip"])
@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_closed_form_gradient_equals_autograd(env_id, algo, activation):
    """The closed-form backend (each loss term's derivative in the heads, pushed through the
    MLPs by hand) equals autograd's gradient of the same loss function, for every algorithm
    of the K-epoch loop, with every loss term on: clipped or plain surrogate, KL penalty,
    value clipping, entropy bonus, advantage normalisation; ratios spread on both sides of the
    clip band so every branch of min/max/clamp is taken. A value clip changes only PPO."""
    from trustrl.algos import make_algorithm
    from trustrl.algos.common import take
    from trustrl.compute.backends import Autograd, ClosedForm

    for vclip in (True, False):
        cfg = small_cfg(env_id, clip_value_loss=vclip, activation=activation, ent_coef=0.01,
                        hidden_sizes="16,8", log_std_init=-0.3)
        if algo == "ppo-dualclip":  # a floor low enough that some ratios reach it
            cfg = dataclasses.replace(with_algo(cfg, algo), dual_clip=1.25)
        eng = Pop(cfg, [1, 2, 3], algo=algo)
        net, P, M = eng.net, 3, 48
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            net.flat.add_(0.3 * torch.randn(net.flat.shape, generator=g))
        obs = torch.randn(P, M, eng.D, generator=g)
        acts = (torch.randint(0, net.n_out, (P, M), generator=g) if net.discrete
                else torch.randn(P, M, net.n_out, generator=g))
        with torch.no_grad():
            old_out = net.actor(obs) + 0.2 * torch.randn(P, M, net.n_out, generator=g)
            lpo = net.log_prob(net.actor(obs), acts) + 0.3 * torch.randn(P, M, generator=g)
            v_old = net.critic(obs) + 0.3 * torch.randn(P, M, generator=g)
        flat_old = net.flat.detach() + 0.1 * torch.randn(net.flat.shape, generator=g)
        mb = {"obs": obs, "actions": acts, "logp_old": lpo, "values_old": v_old,
              "advantages": torch.randn(P, M, generator=g),
              "returns": torch.randn(P, M, generator=g), "old_out": old_out,
              "flat_old": flat_old}
        ratio = torch.exp(net.log_prob(net.actor(obs), acts) - lpo)
        assert ((ratio > 1.2).any() and (ratio < 0.8).any()
                and ((ratio - 1).abs() < 0.2).any())  # all three regions
        if algo == "ppo-dualclip":  # the floor is taken somewhere, for A < 0
            assert bool(((ratio > 1.25) & (mb["advantages"] < 0)).any())
        alg = make_algorithm(eng.cfg, net, Autograd(), rng.shuffle_keys([1, 2, 3]))
        if algo == "ppo-penalty":  # members with different betas
            alg.beta.copy_(torch.tensor([0.5, 1.0, 3.0], dtype=torch.float64))
        params = net.views(net.flat.detach())
        ref, t_ref = Autograd().value_and_grad(net, params, take(mb, torch.arange(M)[None]
                                                                 .expand(P, -1)), alg.loss)
        got, t_got = ClosedForm().value_and_grad(net, params, mb, alg.loss)
        assert (got - ref).abs().max() <= 1e-5 * ref.abs().max(), (got - ref).abs().max()
        assert torch.allclose(t_ref.loss, t_got.loss, rtol=1e-5, atol=1e-6)
        for k, v in t_ref.stats.items():
            assert torch.allclose(v, t_got.stats[k], rtol=1e-5, atol=1.5 / M), k


def test_engine_autograd_and_closed_form_updates_agree():
    """A whole iteration with autograd's gradients and one with the closed form agree."""
    cfg = small_cfg("Pendulum-v1", ent_coef=0.01, clip_value_loss=True, normalize_obs=True)
    a = Pop(cfg, [1, 2], autograd=True)
    b = Pop(cfg, [1, 2])
    for _ in range(2):
        ma, mb = a.iterate()[0], b.iterate()[0]
        assert torch.allclose(torch.nan_to_num(ma), torch.nan_to_num(mb), rtol=1e-4, atol=1e-5)
    assert torch.allclose(a.net.flat, b.net.flat, atol=1e-5)


def test_gae_numpy_equals_core_gae_bit_for_bit():
    from trustrl.maths.advantages import gae, gae_numpy

    g = torch.Generator().manual_seed(3)
    T, P, N = 50, 3, 4
    r, v, nv = (torch.randn(T, P, N, generator=g) for _ in range(3))
    term = torch.rand(T, P, N, generator=g) < 0.1
    trunc = torch.rand(T, P, N, generator=g) < 0.1
    a1, r1 = gae(r, v, nv, term, trunc, 0.99, 0.95)
    a2, r2 = gae_numpy(r, v, nv, term, trunc, 0.99, 0.95)
    assert torch.equal(a1, a2) and torch.equal(r1, r2)


@pytest.mark.parametrize("env_id,sets", [
    ("CartPole-v1", {}), ("Acrobot-v1", {"normalize_obs": True}), ("MountainCar-v0", {}),
    ("Pendulum-v1", {"normalize_obs": True, "normalize_reward": True}),
    ("MountainCarContinuous-v0", {"normalize_reward": True})])
def test_numpy_rollout_matches_torch_rollout(env_id, sets):
    """The CPU rollout in NumPy (the default on a CPU) and the torch rollout give the same
    iterations: the same episode ends, metrics equal to float rounding over three iterations
    (the two use different matmul kernels, so the last bits differ)."""
    cfg = small_cfg(env_id, num_envs=3, num_steps=64, minibatch_size=64, **sets)
    ref = Pop(cfg, [1, 2], numpy_rollout=False)
    fast = Pop(cfg, [1, 2])
    assert fast._np_env is not None and ref._np_env is None
    for it in range(3):
        (ma, da, ra, _), (mb, db, rb, _) = ref.iterate(), fast.iterate()
        assert torch.equal(da, db)
        assert torch.allclose(ra[da], rb[db], rtol=1e-5)
        assert torch.allclose(torch.nan_to_num(ma), torch.nan_to_num(mb), rtol=1e-4, atol=1e-5)
        if it == 0:  # later, Pendulum's unstable upright amplifies the last-bit differences
            for k in ("env_state", "obs", "ep_ret", "obs_mean", "obs_var", "ret_var", "elapsed"):
                x, y = getattr(ref, k).double(), getattr(fast, k).double()
                assert torch.allclose(x, y, rtol=1e-5, atol=1e-5), k


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "MountainCarContinuous-v0"])
def test_numpy_evaluation_matches_torch(env_id):
    """Greedy evaluation in NumPy equals the torch evaluator on the same parameters; for the
    discrete env a logit tie within float rounding can flip one greedy action and so change an
    episode, which is allowed for at most 2 of 20 episodes."""
    cfg = small_cfg(env_id, normalize_obs=env_id != "CartPole-v1")
    fast = Pop(cfg, [1, 2])
    for _ in range(2):
        fast.iterate()
    ref = Pop(cfg, [1, 2], numpy_rollout=False)
    ref.load_state_dict(fast.state_dict())
    a, b = ref.evaluate(10), fast.evaluate(10)
    if env_id == "CartPole-v1":
        assert (a != b).sum() <= 2, (a, b)
    else:
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-3), (a - b).abs().max()


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_population_equals_separate_runs(env_id):
    """Each member of a population is the run of its seed alone, to float rounding."""
    sets = {"normalize_obs": True} if env_id == "CartPole-v1" else {"normalize_reward": True}
    cfg = small_cfg(env_id, target_kl=0.02, **sets)
    pop = Pop(cfg, [3, 4, 5])
    alone = [Pop(cfg, [s]) for s in (3, 4, 5)]
    for _ in range(3):
        m = pop.iterate()[0]
        for i, e in enumerate(alone):
            mi = e.iterate()[0]
            assert torch.allclose(torch.nan_to_num(m[i]), torch.nan_to_num(mi[0]),
                                  rtol=1e-4, atol=1e-6)
    for i, e in enumerate(alone):
        assert torch.allclose(pop.net.flat[i], e.net.flat[0], atol=1e-6)
    ev = pop.evaluate(3)
    assert torch.allclose(ev[1], alone[1].evaluate(3)[0])


@pytest.mark.parametrize("algo", ["trpo", "npg"])
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_trpo_engine_update_equals_core_trpo(algo, env_id):
    """The population TRPO / NPG update (closed-form gradient and Fisher-vector products,
    lockstep CG, per-member line search) equals trustrl.algos.trpo's on the same batch: the
    same CG iterations, xFx, step, line-search outcome and parameters (the critic fitted on
    one minibatch per epoch, so that the shuffling order cannot matter)."""

    cfg = make_config(algo, env_id, None, {"vector": "torch", "num_envs": "4",
                                           "num_steps": "32", "vf_minibatch_size": "128",
                                           "vf_epochs": "3", "total_steps": "4096"}, {})
    eng = Pop(cfg, [5])
    core = init_policies(eng.spec, cfg, [5])[0]
    g = torch.Generator().manual_seed(0)
    B = 128
    obs = torch.randn(1, B, eng.D, generator=g)
    acts = (torch.randint(0, 2, (1, B), generator=g) if eng.net.discrete
            else torch.randn(1, B, 1, generator=g))
    with torch.no_grad():
        logp = eng.net.log_prob(eng.net.actor(obs), acts)
        values = eng.net.critic(obs)
    adv, ret = torch.randn(1, B, generator=g), 3 * torch.randn(1, B, generator=g)
    m = eng.algo.update({"obs": obs, "actions": acts, "logp_old": logp, "values_old": values,
                     "advantages": adv, "returns": ret}, 0, cfg.vf_lr)
    mc = RefTRPO(core, cfg, line_search=algo == "trpo").update(
        Batch(obs[0], acts[0], logp[0], values[0], adv[0], ret[0]), 0.0)
    assert int(m["cg_iters_run"][0]) == mc["cg_iters_run"] > 1
    for k in ("xFx", "step_size", "expected_improvement", "step_fraction",
              "surrogate_improvement", "grad_norm", "kl_exact", "value_loss"):
        assert math.isclose(float(m[k][0]), mc[k], rel_tol=1e-4, abs_tol=1e-7), k
    if algo == "trpo":
        assert int(m["ls_steps"][0]) == mc["ls_steps"] and bool(m["ls_accepted"][0])
    for a, c in zip(eng.policy(0).parameters(), core.parameters(), strict=True):
        assert torch.allclose(a, c, atol=1e-6), (a - c).abs().max()


def test_trpo_population_equals_separate_runs():
    """A TRPO member of a population is the run of its seed alone (CG and line search are
    per member: a member that converges or backtracks does not hold back the others)."""

    cfg = make_config("trpo", "Pendulum-v1", None, {
        "vector": "torch", "num_envs": "4", "num_steps": "32", "total_steps": "4096",
        "normalize_obs": "true"}, {})
    pop = Pop(cfg, [3, 4, 5])
    alone = [Pop(cfg, [s]) for s in (3, 4, 5)]
    steps, cg = set(), set()
    for _ in range(3):
        m = pop.iterate()[0]
        steps.update(m[:, pop.columns.index("ls_steps")].tolist())
        cg.add(tuple(m[:, pop.columns.index("cg_iters_run")].tolist()))
        for i, e in enumerate(alone):
            assert torch.allclose(torch.nan_to_num(m[i]), torch.nan_to_num(e.iterate()[0][0]),
                                  rtol=1e-4, atol=1e-6)
    for i, e in enumerate(alone):
        assert torch.allclose(pop.net.flat[i], e.net.flat[0], atol=1e-6)
    # what the test is about: some member backtracked, and the members' CG ran different
    # numbers of iterations, while the others were not held back
    assert max(steps) > 1 and any(len(set(c)) > 1 for c in cg), (steps, cg)


@pytest.mark.parametrize("env_id", ["Acrobot-v1", "Pendulum-v1"])
@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_fisher_vector_products_equal_double_backprop(env_id, activation):
    """The closed-form F v (J^T M J v through the actor) equals the core's double backprop of
    the mean KL, member by member, with zeros in the critic's columns."""
    from trustrl.maths.trust.fisher import fisher_vector_product, mean_kl

    cfg = make_config("trpo", env_id, None, {
        "vector": "torch", "num_envs": "4", "num_steps": "32", "activation": activation,
        "preset": "chapter" if env_id == "Pendulum-v1" else "none",
        "hidden_sizes": "16,8", "total_steps": "4096"}, {})
    eng = Pop(cfg, [1, 2, 3])
    net = eng.net
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        net.flat.add_(0.3 * torch.randn(net.flat.shape, generator=g))
    P, B = 3, 64
    obs = torch.randn(P, B, eng.D, generator=g)
    params = net.views(net.flat.detach())
    old_out, acts = net.mlp_forward("actor", obs, params)
    v = torch.randn(P, net.size, generator=g)
    actor_segs = [s for s in net.segments if not s.name.startswith("critic.")]
    critic_segs = [s for s in net.segments if s.name.startswith("critic.")]
    for s in critic_segs:
        v[:, s.offset:s.offset + s.size] = 0.0
    from trustrl.compute.backends import ClosedForm

    got = ClosedForm().fisher_product(net, obs, old_out, net.flat.detach(), cfg.damping)(v)

    def core_order(row: torch.Tensor) -> torch.Tensor:  # our [in, out] weights -> [out, in]
        parts = []
        for s in actor_segs:
            x = row[s.offset:s.offset + s.size]
            parts.append(x.view(s.shape).t().reshape(-1) if len(s.shape) == 2 else x)
        return torch.cat(parts)

    for p in range(P):
        pol = net.to_policy(p)
        batch = Batch(obs[p], torch.zeros(B), torch.zeros(B), torch.zeros(B), torch.zeros(B),
                      torch.zeros(B))
        old = old_distribution(pol, batch)
        fvp = fisher_vector_product(mean_kl(old, pol.dist(obs[p])),
                                    list(pol.actor_parameters()), cfg.damping)
        ref = fvp(core_order(v[p]))
        mine = core_order(got[p])
        assert (mine - ref).abs().max() <= 1e-5 * ref.abs().max(), (mine - ref).abs().max()
    for s in critic_segs:
        assert torch.equal(got[:, s.offset:s.offset + s.size],
                           torch.zeros_like(got[:, s.offset:s.offset + s.size]))


def test_npg_without_a_step_writes_zeros_like_the_core():
    """A member with nothing to do (all advantages equal: zero gradient) takes no step, and its
    line-search columns read 0 as algos.trpo writes them, for TRPO and NPG alike."""

    for algo in ("trpo", "npg"):
        cfg = make_config(algo, "CartPole-v1", None, {"vector": "torch", "num_envs": "4",
                                                      "num_steps": "32"}, {})
        eng = Pop(cfg, [5])
        core = init_policies(eng.spec, cfg, [5])[0]
        obs = torch.randn(1, 128, eng.D, generator=torch.Generator().manual_seed(0))
        acts = torch.zeros(1, 128, dtype=torch.int64)
        with torch.no_grad():
            logp = eng.net.log_prob(eng.net.actor(obs), acts)
        adv = torch.full((1, 128), 0.5)
        before = eng.net.flat.detach().clone()
        m = eng.algo.update({"obs": obs, "actions": acts, "logp_old": logp,
                         "values_old": torch.zeros(1, 128), "advantages": adv,
                         "returns": torch.zeros(1, 128)}, 0, cfg.vf_lr)
        mc = RefTRPO(core, cfg, line_search=algo == "trpo").update(
            Batch(obs[0], acts[0], logp[0], torch.zeros(128), adv[0], torch.zeros(128)), 0.0)
        for k in ("ls_steps", "ls_accepted", "step_fraction", "step_size"):
            assert float(m[k][0]) == mc[k] == 0, (algo, k)
        actor = [s for s in eng.net.segments if not s.name.startswith("critic.")]
        for s in actor:  # the policy did not move
            assert torch.equal(eng.net.flat[:, s.offset:s.offset + s.size],
                               before[:, s.offset:s.offset + s.size])


def test_engine_metrics_are_sane():
    eng = Pop(small_cfg(update_epochs=4, minibatch_size=32), [0, 1])
    m = eng.iterate()[0]
    row = dict(zip(eng.columns, m[0].tolist(), strict=True))
    assert row["epochs_run"] == 4 and row["early_stopped"] == 0
    assert 0 <= row["clip_fraction"] <= 1 and row["approx_kl"] >= 0
    assert row["ratio_min"] <= row["ratio_q05"] <= row["ratio_q50"] <= row["ratio_q95"]
    assert row["ratio_q95"] <= row["ratio_max"]
    assert 0 < row["entropy"] <= math.log(2) + 1e-6
    assert eng.global_step == 128


def test_kl_early_stopping_is_per_member():
    cfg = small_cfg(update_epochs=10, minibatch_size=16, lr=0.01, target_kl=0.002)
    eng = Pop(cfg, [0, 1, 2, 3])
    m = eng.iterate()[0]
    epochs = m[:, eng.columns.index("epochs_run")]
    assert float(epochs.max()) < 10 and float(epochs.min()) >= 1
    stopped = m[:, eng.columns.index("early_stopped")]
    assert torch.equal(stopped, (epochs < 10).double())


# --- run folders, resume, CLI ---------------------------------------------------------------------
def _rows(path: Path) -> list[dict[str, str]]:
    with open(path) as f:
        return [{k: v for k, v in r.items() if k not in ("wall_time", "sps")}
                for r in csv.DictReader(f)]


def test_single_run_folder_and_agent(tmp_path):
    cfg = small_cfg(runs_dir=str(tmp_path), total_steps=512)
    res = train(cfg)
    run = res.run_dir
    for name in ("config.json", "metrics.csv", "episodes.csv", "agent.pt", "eval.json",
                 "eval_initial.json", "status.json", "learning_curve.png"):
        assert (run / name).is_file(), name
    assert json.loads((run / "config.json").read_text())["vector"] == "torch"
    assert json.loads((run / "status.json").read_text())["status"] == "finished"
    rows = _rows(run / "metrics.csv")
    assert len(rows) == 4 and rows[-1]["eval_return_mean"] != ""
    from trustrl.collect.evaluate import evaluate
    from trustrl.records.agent import Agent

    agent = Agent.load(run / "agent.pt")
    assert evaluate(agent, "CartPole-v1", 2).shape == (2,)


@pytest.mark.parametrize("algo", ["ppo", "trpo"])
def test_population_resume_is_exact(tmp_path, monkeypatch, algo):
    def small(**sets: object):
        if algo == "ppo":
            return small_cfg(**sets)
        base = {"num_envs": 4, "num_steps": 32, "eval_every": 2, "eval_episodes": 3,
                "vector": "torch", "vf_minibatch_size": 32, **sets}
        return make_config("trpo", "CartPole-v1", None, {k: str(v) for k, v in base.items()},
                           {})

    cfg = small(runs_dir=str(tmp_path / "a"), total_steps=768, normalize_obs=True)
    full = train(cfg, seeds=[1, 2])
    if algo == "trpo":  # the run folder has TRPO's own columns
        header = (full.member_dirs[0] / "metrics.csv").read_text().splitlines()[0]
        assert "ls_accepted" in header and "cg_iters_run" in header
    calls = {"n": 0}
    orig = Trainer.iterate

    def stop_after_three(self, *a, **k):
        out = orig(self, *a, **k)
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(Trainer, "iterate", stop_after_three)
    cfg_b = small(runs_dir=str(tmp_path / "b"), total_steps=768, normalize_obs=True,
                  checkpoint_every=2)
    with pytest.raises(KeyboardInterrupt):
        train(cfg_b, seeds=[1, 2])
    monkeypatch.setattr(Trainer, "iterate", orig)
    root_b = next((tmp_path / "b").iterdir())
    assert json.loads((root_b / "status.json").read_text())["status"] == "stopped"
    resumed = resume(root_b)
    for ma, mb in zip(full.member_dirs, resumed.member_dirs, strict=True):
        assert _rows(ma / "metrics.csv") == _rows(mb / "metrics.csv")
        assert _rows(ma / "episodes.csv") == _rows(mb / "episodes.csv")
    assert json.loads((root_b / "summary.json").read_text())["per_seed"] == \
        json.loads((full.run_dir / "summary.json").read_text())["per_seed"]


def test_parse_seeds():
    assert parse_seeds("0-3") == [0, 1, 2, 3]
    assert parse_seeds("1,2,5") == [1, 2, 5]
    assert parse_seeds("0-2,10") == [0, 1, 2, 10]
    for bad in ("5-1", "a", "1,1", "", "1-"):
        with pytest.raises(ConfigError):
            parse_seeds(bad)


@pytest.mark.parametrize("sets,msg", [
    ({"vector": "torch", "env_id": "LunarLander-v3"}, "no version of"),
    ({"vector": "torch", "shared_trunk": "true"}, "separate actor and critic"),
    ({"jit": "cuda-graph", "vector": "torch"}, "needs device 'cuda'"),
    ({"jit": "compile", "vector": "sync"}, "vector 'torch' only"),
    ({"jit": "compile", "env_id": "LunarLander-v3"}, "vector 'torch' only"),
    ({"jit": "fast"}, "jit must be"),
])
def test_bad_fast_configs(sets, msg):
    with pytest.raises(ConfigError, match=msg):
        make_config("ppo", None, None, sets, {})


def test_every_algorithm_has_a_batched_path():
    for algo in ("ppo", "ppo-noclip", "ppo-penalty", "trpo", "npg", "pg"):
        cfg = make_config(algo, None, None, {}, {})
        cfg.resolve_vector()
        assert cfg.vector == "torch", algo
        cfg = make_config(algo, "helper_envs:ConstantReward-v0", None, {}, {})
        cfg.resolve_vector()
        assert cfg.vector == "sync", algo


def test_cli_seeds_population_and_errors(tmp_path, cli_env):
    def trustrl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "trustrl", *args], env=cli_env,
                              capture_output=True, text=True, timeout=300)

    r = trustrl("train", "--seeds", "0-1", "--total-steps", "1024", "--runs-dir",
                str(tmp_path), "--set", "num_steps=64", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "2 seeds, greedy evaluation" in r.stdout
    root = next(tmp_path.iterdir())
    assert sorted(json.loads((root / "population.json").read_text())["seeds"]) == [0, 1]
    assert len([p for p in root.iterdir() if p.is_dir() and "__ppo__" in p.name]) == 2
    r = trustrl("eval", str(root))  # the population folder is not an agent: say which is
    assert r.returncode == 2 and "holds a population of seeds" in r.stderr, r.stderr
    member = next(p for p in root.iterdir() if p.is_dir() and "__ppo__" in p.name)
    r = trustrl("eval", str(member), "--episodes", "2")
    assert r.returncode == 0 and "greedy over 2 episodes" in r.stdout, r.stderr
    (member / "agent.pt").unlink()  # as while running: only the fast path's checkpoint
    r = trustrl("eval", str(root / "checkpoints" / "latest.pt"))
    assert r.returncode == 2 and "checkpoint of the batched collector" in r.stderr, r.stderr
    for args, msg in [(("--seeds", "3-1"), "--seeds takes"),
                      (("--seeds", "0-1", "--seed", "3"), "not both"),
                      (("--seeds", "0-1", "--vector", "sync"), "batched collector"),
                      (("--vector", "torch", "--env", "Foo-v9"), "error")]:
        r = trustrl("train", *args, "--runs-dir", str(tmp_path / "bad"), "--quiet")
        assert r.returncode == 2 and msg in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "bad").exists()


# --- compiled and CUDA paths ---------------------------------------------------------------------
@pytest.mark.slow
def test_compiled_path_matches_eager_on_cpu():
    cfg = small_cfg(num_steps=16, minibatch_size=32)
    eager = Pop(cfg, [0, 1])
    comp = Pop(cfg, [0, 1], compile=True)
    for _ in range(2):
        a, b = eager.iterate()[0], comp.iterate()[0]
        assert torch.allclose(torch.nan_to_num(a), torch.nan_to_num(b), rtol=1e-5, atol=1e-5)


@CUDA
def test_cuda_graph_matches_eager_on_gpu():
    cfg = small_cfg(device="cuda")
    eager = Pop(cfg, [0, 1, 2])
    graph = Pop(cfg, [0, 1, 2], graph=True)
    for _ in range(5):  # two warm-ups, the capture, then replays
        a, b = eager.iterate()[0], graph.iterate()[0]
        assert torch.allclose(torch.nan_to_num(a), torch.nan_to_num(b), rtol=1e-5, atol=1e-5)


@CUDA
def test_trpo_cuda_graph_matches_eager_on_gpu():
    """TRPO's lockstep CG and line search run all their iterations under a graph (no early
    exit on the host) and give the eager numbers."""

    cfg = make_config("trpo", "CartPole-v1", None, {
        "vector": "torch", "device": "cuda", "num_envs": "4", "num_steps": "32",
        "total_steps": "4096", "vf_minibatch_size": "32"}, {})
    eager = Pop(cfg, [0, 1, 2])
    graph = Pop(cfg, [0, 1, 2], graph=True)
    for _ in range(5):
        a, b = eager.iterate()[0], graph.iterate()[0]
        assert torch.allclose(torch.nan_to_num(a), torch.nan_to_num(b), rtol=1e-4, atol=1e-5)


@CUDA
def test_population_equals_separate_runs_on_gpu():
    cfg = small_cfg(device="cuda")
    pop = Pop(cfg, [3, 4])
    alone = Pop(cfg, [4])
    for _ in range(3):
        m, mi = pop.iterate()[0], alone.iterate()[0]
        assert torch.allclose(torch.nan_to_num(m[1]), torch.nan_to_num(mi[0]), rtol=1e-4,
                              atol=1e-6)


@CUDA
def test_cpu_and_gpu_runs_agree_at_first():
    # the same backend on both (auto is Numba's on a CPU that has it: another summation order,
    # and a minute of compiling on a machine without its cache)
    a = Pop(small_cfg(grad_backend="closed-form"), [7]).iterate()[0]
    b = Pop(small_cfg(device="cuda", grad_backend="closed-form"), [7]).iterate()[0].cpu()
    assert torch.allclose(torch.nan_to_num(a), torch.nan_to_num(b), rtol=1e-3, atol=1e-4)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the message on a machine without CUDA")
def test_cuda_device_without_cuda_is_a_config_error():
    with pytest.raises(ConfigError, match="sees no CUDA device"):
        make_config("ppo", None, None, {"device": "cuda"}, {})


def test_python_api_and_sweeps_reach_the_fast_path(tmp_path):
    """trustrl.train / trustrl.resume (what sweeps call) dispatch vector 'torch' runs."""
    from trustrl.training.train import resume, train

    res = train(small_cfg(runs_dir=str(tmp_path), total_steps=512))
    assert (res.run_dir / "agent.pt").is_file() and res.final_eval["evaluator"]
    assert res.agent.act(torch.zeros(1, 4).numpy()).shape == (1,)
    again = resume(res.run_dir)  # finished: evaluates and returns
    assert again.run_dir == res.run_dir


def test_epoch_order_is_torch_stable_argsort_of_the_hash_ties_included(monkeypatch):
    """algos.common.epoch_order on a CPU sorts with NumPy: the order is torch's stable argsort
    of the same hash, for E epochs at once; with keys that tie (a hash squeezed into 3
    values), ties keep the index order, as torch's stable sort does."""
    from trustrl.algos import common

    keys = rng.shuffle_keys([1, 5, 9])
    c = torch.arange(4)[:, None]
    order = common.epoch_order(keys, c, 300)
    assert order.shape == (4, 3, 300) and order.dtype == torch.int64
    assert torch.equal(order, torch.argsort(rng.bits(keys, c, 300), dim=-1, stable=True))
    squeezed = rng.bits(keys, c, 300) % 3
    monkeypatch.setattr(common.rng, "bits", lambda *a: squeezed)
    assert torch.equal(common.epoch_order(keys, c, 300),
                       torch.argsort(squeezed, dim=-1, stable=True))


def test_ppo_epoch_orders_drawn_ahead_are_the_ones_drawn_per_iteration(monkeypatch):
    """Algorithm.epoch_orders hands out the shuffles of up to ORDERS_AHEAD iterations drawn at once:
    each iteration's K orders are epoch_order at counters counter * K + e, inside a draw,
    across a fresh draw, after a jump back (a loaded checkpoint) and with a new batch size."""
    from trustrl.algos import common
    from trustrl.learn.learners import BatchedLearner
    from trustrl.settings.config import make_config

    monkeypatch.setattr(common, "ORDERS_AHEAD", 3)
    cfg = make_config("ppo", env_id="CartPole-v1",
                      sets=dict(num_envs=2, num_steps=16, minibatch_size=8, update_epochs=2,
                                eval_every=0))
    algo = BatchedLearner(cfg, [4, 7]).algo
    K = algo.epochs
    for counter, n in ((0, 32), (1, 32), (2, 32), (3, 32), (7, 32), (1, 32), (2, 20), (2, 32)):
        want = common.epoch_order(algo.keys, (counter * K + torch.arange(K))[:, None], n)
        assert torch.equal(algo.epoch_orders(counter, n, K), want), (counter, n)
