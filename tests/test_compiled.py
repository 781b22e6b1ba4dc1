"""The compiled backend (trustrl.compute.compiled) against the eager closed form it compiles: the
same numbers to float rounding, member by member, and a member of a population exactly as alone."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from trustrl.algos.common import fit_critic
from trustrl.compute import compiled
from trustrl.compute.backends import ClosedForm
from trustrl.maths import rng
from trustrl.maths.optim import PopAdam
from trustrl.nets.policies import ActionSpec, ActorCritic
from trustrl.nets.popnet import PopActorCritic

pytestmark = pytest.mark.skipif(not compiled.available(), reason="needs trustrl[compiled]")

DISCRETE = ActionSpec("discrete", n=2)


def test_tanh_approximation_is_within_a_few_ulp_of_numpy():
    from trustrl.compute.compiled.kernels import activate_

    x = np.concatenate([np.linspace(-12, 12, 200_001, dtype=np.float32),
                        np.array([0.0, -0.0, 1e-8, -1e-30, 7.9, 9.0], np.float32)])
    z = x.copy()
    activate_(z, False)
    ref = np.tanh(x.astype(np.float64))
    assert np.max(np.abs(z - ref)) < 4 * np.finfo(np.float32).eps
    assert np.all(np.abs(z) <= 1.0)
    r = x.copy()
    activate_(r, True)
    assert np.array_equal(r, np.maximum(x, 0.0))


def test_last_axis_argmax_and_sum_equal_numpys():
    """compiled.xp's argmax and sum over the last axis (row loops; Numba's with an axis run a
    generic loop) give NumPy's answer: ties to the first maximum, a NaN as the maximum (its
    first index), any leading shape, float32 sums in float32."""
    from trustrl.compute.compiled import xp

    g = np.random.default_rng(3)
    for shape in ((1, 4, 2), (3, 5, 7), (6, 1), (2, 3, 4, 3)):
        x = g.standard_normal(shape).astype(np.float32)
        x.reshape(-1, shape[-1])[::2, -1] = x.reshape(-1, shape[-1])[::2, 0]  # ties
        got = xp.argmax(x, -1)
        assert got.shape == shape[:-1] and np.array_equal(got, np.argmax(x, -1))
        s = xp.sum(x, -1)
        assert s.dtype == np.float32 and s.shape == shape[:-1]
        np.testing.assert_allclose(s, x.sum(-1), rtol=1e-6, atol=1e-6)
    x = np.array([[0.0, np.nan, 5.0, np.nan], [np.nan, 1.0, 2.0, 3.0], [1.0, 3.0, 3.0, 2.0]],
                 np.float32)
    assert np.array_equal(xp.argmax(x, -1), np.argmax(x, -1))


def test_stale_caches_are_dropped_under_numba_cache_dir(tmp_path, monkeypatch):
    """With NUMBA_CACHE_DIR set, Numba keeps the compiled functions of each source there (a
    folder per source folder); a change to any compiled source drops trustrl's cache files
    there too, and only those, so that no kernel keeps an older copy of a function inlined
    from another file."""
    from pathlib import Path

    from numba.core import caching, config

    monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path / "cache"))
    root = Path(compiled.__file__).resolve().parents[2]
    folders = set()
    for rel in compiled._SOURCES:
        source = root / rel
        folder = compiled._cache_folder(source)
        # Numba's own locator for a function of that file
        locator = caching.UserProvidedCacheLocator.from_function(_net, str(source))
        assert folder == Path(locator.get_cache_path())
        folders.add(folder)
    assert len(folders) == len({(root / rel).parent for rel in compiled._SOURCES})

    def fill() -> None:
        for folder in folders:
            folder.mkdir(parents=True, exist_ok=True)
            for name in ("k.f-1.py311.nbi", "k.f-1.py311.1.nbc", "other.txt"):
                (folder / name).write_text("x")

    fill()
    stamp = compiled._cache_folder(Path(compiled.__file__).resolve()) / "numba-sources.sha256"
    stamp.write_text("an older fingerprint")
    compiled._drop_stale_caches()
    for folder in folders:
        assert sorted(p.name for p in folder.iterdir() if p != stamp) == ["other.txt"]
    fingerprint = stamp.read_text()
    assert fingerprint != "an older fingerprint"
    fill()  # nothing changed since: kept
    compiled._drop_stale_caches()
    for folder in folders:
        assert len([p for p in folder.iterdir() if p != stamp]) == 3
    assert stamp.read_text() == fingerprint
    # a cache folder not made yet (a first run with NUMBA_CACHE_DIR): the fingerprint is
    # written, so the second run keeps what the first compiled
    monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path / "fresh" / "cache"))
    compiled._drop_stale_caches()
    fresh = compiled._cache_folder(Path(compiled.__file__).resolve()) / "numba-sources.sha256"
    assert fresh.read_text() == fingerprint
    # a Numba without that (private) naming: the folder beside the source, no error
    monkeypatch.delattr(caching, "_CacheLocator")
    source = root / compiled._SOURCES[0]
    assert compiled._cache_folder(source) == source.parent / "__pycache__"


def _net(P: int, activation: str, hidden=(64, 64), obs_dim=4, seed=0):
    torch.manual_seed(seed)
    pols = [ActorCritic(obs_dim, DISCRETE, hidden, activation) for _ in range(P)]
    return PopActorCritic.from_policies(pols, "cpu")


def _fit(backend, net, batch, seeds, counter, epochs, mb, steps_before=0):
    opt = PopAdam(net.flat.detach()[:, net.critic_slice], 1e-5)
    keys = rng.shuffle_keys(seeds, "cpu")
    for c in range(steps_before):  # an optimizer that has stepped already (bias correction)
        fit_critic(net, opt, ClosedForm(), batch, keys, c, 1, mb, 1e-3, {})
    loss = fit_critic(net, opt, backend, batch, keys, counter, epochs, mb, 1e-3, {})
    return loss, opt


@pytest.mark.parametrize("activation", ["tanh", "relu"])
@pytest.mark.parametrize("mb", [64, 50])  # 50: a last, shorter minibatch in each epoch
def test_compiled_critic_fit_equals_the_eager_one(activation, mb):
    """TRPO's critic regression (5 epochs of minibatches, Adam) compiled and eager: the same
    parameters, Adam moments and step counts, and last-epoch losses, for 3 members with their
    own shuffles, after an optimizer that had already stepped."""
    P, N = 3, 256
    torch.manual_seed(1)
    batch = {"obs": torch.randn(P, N, 4), "returns": 3.0 * torch.randn(P, N)}
    seeds = [3, 7, 11]
    nets = [_net(P, activation, seed=2) for _ in range(2)]
    (l_e, o_e), (l_c, o_c) = (
        _fit(b, n, batch, seeds, counter=4, epochs=5, mb=mb, steps_before=2)
        for b, n in ((ClosedForm(), nets[0]), (compiled.Compiled(), nets[1])))
    moved = (nets[0].flat - _net(P, activation, seed=2).flat).abs().max()
    assert moved > 1e-3  # the fit did something
    torch.testing.assert_close(nets[1].flat, nets[0].flat, rtol=1e-4, atol=2e-6)
    torch.testing.assert_close(o_c.m, o_e.m, rtol=1e-3, atol=1e-6)
    torch.testing.assert_close(o_c.v, o_e.v, rtol=1e-3, atol=1e-9)
    assert torch.equal(o_c.t, o_e.t)
    torch.testing.assert_close(l_c, l_e, rtol=1e-4, atol=1e-6)
    # the actor's columns are not touched
    a = ~torch.isin(torch.arange(nets[0].size), torch.arange(nets[0].size)[nets[0].critic_slice])
    assert torch.equal(nets[1].flat[:, a], _net(P, activation, seed=2).flat[:, a])


def test_compiled_critic_fit_member_equals_its_seed_alone():
    P, N = 3, 128
    torch.manual_seed(4)
    batch = {"obs": torch.randn(P, N, 4), "returns": torch.randn(P, N)}
    pop = _net(P, "tanh", seed=5)
    _fit(compiled.Compiled(), pop, batch, [1, 2, 3], counter=0, epochs=3, mb=32)
    for p, seed in enumerate([1, 2, 3]):
        one = _net(P, "tanh", seed=5)
        one.flat = one.flat[p:p + 1].detach().clone()
        _fit(compiled.Compiled(), one, {k: x[p:p + 1] for k, x in batch.items()}, [seed],
             counter=0, epochs=3, mb=32)
        assert torch.equal(one.flat[0], pop.flat[p])


@pytest.mark.parametrize("kind", ["discrete", "box"])
@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_compiled_fisher_product_equals_the_closed_form(kind, activation):
    """F v of the compiled kernel and of ClosedForm.fisher_product, for 2 members with their
    own parameters, on a direction with the critic's columns zero (as CG's are) and one
    without, with damping; and F is symmetric positive semi-definite on random pairs."""
    action = DISCRETE if kind == "discrete" else ActionSpec("box", dim=2, low=(-1.0, -1.0),
                                                             high=(1.0, 1.0))
    torch.manual_seed(6)
    pols = [ActorCritic(3, action, (16, 8), activation, log_std_init=-0.3 * i)
            for i in range(2)]
    net = PopActorCritic.from_policies(pols, "cpu")
    flat = net.flat.detach().clone()
    obs = torch.randn(2, 40, 3)
    old_out = net.actor(obs, flat)
    eager = ClosedForm().fisher_product(net, obs, old_out, flat, 0.1)
    comp = compiled.Compiled().fisher_product(net, obs, old_out, flat, 0.1)
    mask = net.actor_mask.float()
    for v in (torch.randn_like(flat) * mask, torch.randn_like(flat)):
        ref, got = eager(v), comp(v)
        assert ref.abs().max() > 1e-3
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-6)
    u, w = torch.randn_like(flat) * mask, torch.randn_like(flat) * mask
    torch.testing.assert_close((u * comp(w)).sum(1), (w * comp(u)).sum(1), rtol=1e-4,
                               atol=1e-6)
    assert bool(((u * comp(u)).sum(1) > 0).all())


def _compiled_products(kind, seed, P):  # type: ignore[no-untyped-def]
    """P members (16-8 tanh actors, Discrete or Box dim 2) seeded by `seed`, their parameters
    and the compiled backend's Fisher-vector products on 40 observations each."""
    action = DISCRETE if kind == "discrete" else ActionSpec("box", dim=2, low=(-1.0, -1.0),
                                                             high=(1.0, 1.0))
    torch.manual_seed(seed)
    net = PopActorCritic.from_policies([ActorCritic(3, action, (16, 8), "tanh")
                                        for _ in range(P)], "cpu")
    flat = net.flat.detach().clone()
    obs = torch.randn(P, 40, 3)
    return net, flat, compiled.Compiled().fisher_product(net, obs, net.actor(obs, flat), flat,
                                                         0.1)


@pytest.mark.parametrize("kind", ["discrete", "box"])
def test_compiled_conjugate_gradient_equals_the_eager_one(kind):
    """TRPO's CG through the compiled products' `solve` (trust.cg.cg_steps compiled, the whole
    loop in one call) gives the eager loop's solution, iterations and residual, per member of
    a population (one member converging earlier is frozen in both)."""
    from trustrl.maths.trust.cg import conjugate_gradient

    for seed in (0, 1, 2):
        net, flat, comp = _compiled_products(kind, seed, 2)
        assert hasattr(comp, "solve")
        b = torch.randn_like(flat) * net.actor_mask.float()
        b[1] *= 3e-2  # the second member meets the tolerance sooner
        # Both runs stop well above float32's floor: past about six products on this
        # ill-conditioned system the recursively updated residual is rounding (the two
        # evaluation orders then differ by 10-100%, whatever the product's bits), so the
        # stopping tolerance (||r|| < 0.1 against ||b|| ~ 14) ends them within 3-7 products.
        for iters, tol in ((5, 1e-10), (25, 1e-2)):
            got = conjugate_gradient(comp, b, iters, tol)
            ref = conjugate_gradient(lambda v, comp=comp: comp(v), b, iters, tol)  # eager loop
            assert got.iterations.tolist() == ref.iterations.tolist()
            # CG carries the products' float32 rounding through its iterations
            torch.testing.assert_close(got.x, ref.x, rtol=1e-3,
                                       atol=1e-4 * float(ref.x.abs().max()))
            torch.testing.assert_close(got.residual, ref.residual, rtol=1e-3,
                                       atol=1e-6 * float(b.norm()))
        assert ref.iterations[1] < ref.iterations[0]


def test_the_compiled_learner_stats_equal_the_torch_ones():
    """The batched learner's metrics on the compiled backend (Compiled.learner_stats:
    diagnostics.episode_stats and critic_stats compiled from their source) equal the torch
    call's: episodes, mean return and length, explained variance and fresh value loss per
    member, with a member whose episodes never ended (nan) and one with nothing to explain."""
    import math

    from trustrl.maths.diagnostics import critic_stats, episode_stats

    g = torch.Generator().manual_seed(3)
    for _ in range(3):
        done = torch.rand(16, 3, 4, generator=g) < 0.2
        done[:, 1] = False
        fin_ret = torch.randn(16, 3, 4, generator=g, dtype=torch.float64)
        fin_len = torch.randint(1, 500, (16, 3, 4), generator=g)
        values = torch.randn(3, 64, generator=g)
        returns = torch.randn(3, 64, generator=g)
        returns[2] = 0.25
        got = compiled.Compiled.learner_stats(done, fin_ret, fin_len, values, returns)
        want = (*episode_stats(done, fin_ret, fin_len.double(), math.nan),
                *critic_stats(values.double(), returns.double(), math.nan))
        assert got is not None and len(got) == len(want) == 5
        for a, b in zip(got, want, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape == (3,)
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12, equal_nan=True)
        assert math.isnan(float(got[1][1])) and math.isnan(float(got[3][2]))


@pytest.mark.parametrize("kind", ["discrete", "box"])
def test_compiled_natural_step_equals_the_eager_one(kind):
    """TRPO's steps 3-4 through the compiled products' `natural_step` (trust.cg.natural_step
    compiled: the CG, x^T F x and the step size in one call) give the eager source's results
    on the same products, per member; a member with no gradient takes no step in both."""
    from trustrl.maths.trust.cg import natural_step

    for seed in (0, 1, 2):
        net, flat, comp = _compiled_products(kind, seed, 3)
        g = torch.randn_like(flat) * net.actor_mask.float()
        g[2] = 0.0  # x = 0, x^T F x = 0: no step
        got = comp.natural_step(g, 4, 1e-10, False, 0.01)
        ref = natural_step(lambda v, comp=comp: comp(v), g, 4, 1e-10, False, 0.01)
        names = ("x", "iterations", "residual", "xFx", "step_size", "full_step",
                 "expected_improvement", "ok")
        assert got[-1].tolist() == ref[-1].tolist() == [True, True, False]
        for name, a, b in zip(names[:-1], got[:-1], ref[:-1], strict=True):
            assert a.dtype == b.dtype, name
            torch.testing.assert_close(a, b, rtol=2e-3, atol=1e-6 * float(b.abs().max()) + 1e-9,
                                       msg=name)
        assert float(got[5][2].abs().max()) == 0.0 and float(got[4][2]) == 0.0


def test_the_blas_numba_calls_runs_on_one_thread():
    """scipy's OpenBLAS (what Numba's np.dot calls) split over 2 threads rounded TRPO's Fisher
    products differently from 1 thread, so a run's numbers depended on the environment: the
    backend sets that library to one thread, whatever it was set to before."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        pytest.skip("the library is found through /proc/self/maps")
    compiled._one_blas_thread()
    with open("/proc/self/maps") as f:
        paths = {p for p in (line.split()[-1] for line in f)
                 if "openblas" in p.lower() and "scipy" in p.split("/")[-2]}
    libs = [ctypes.CDLL(p) for p in paths]
    libs = [lib for lib in libs if hasattr(lib, "scipy_openblas_get_num_threads")]
    if not libs:
        pytest.skip("no scipy-openblas here (another BLAS)")
    for lib in libs:
        lib.scipy_openblas_set_num_threads(ctypes.c_int(2))
    compiled._one_blas_thread()
    assert [lib.scipy_openblas_get_num_threads() for lib in libs] == [1] * len(libs)


# -- the compiled rollout: dynamics compiled from trustrl.envs.classic's source, and the collector

@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Acrobot-v1", "MountainCar-v0",
                                    "MountainCarContinuous-v0", "Pendulum-v1"])
def test_compiled_dynamics_equal_the_numpy_dynamics(env_id, dtype):
    """The classic dynamics compiled by Numba from the source NumPy runs (trustrl.envs.classic
    over trustrl.compute.compiled.xp): one transition of 2,000 random and edge states (terminations,
    time limits, clips, walls, angle wraps: test_numpy_envs' inputs) equals NumPy's, outputs of
    the same dtypes and shapes; float64 to 1e-12, float32 to 1e-5 relative (the libraries'
    sin and cos), booleans and counters exactly."""
    from test_numpy_envs import check_close, random_inputs

    from trustrl.envs.numpy_classic import make_numpy_dynamics
    from trustrl.envs.torch_classic import make_torch_env

    ref, dyn = make_numpy_dynamics(env_id, dtype), compiled.compiled_dynamics(env_id, dtype)
    env = make_torch_env(env_id, 2000, dtype=torch.float64 if dtype == np.float64
                         else torch.float32)
    inputs = random_inputs(env_id, ref, env, np.random.default_rng(3))
    want, got = ref.transition(*inputs), dyn.transition(*inputs)
    for name, g, w in zip(("next_state", "elapsed", "next_obs", "reward", "terminated",
                           "truncated", "final_obs"), got, want, strict=True):
        check_close(g, w, dtype, name)
    assert want[4].any() or env_id == "Pendulum-v1"
    assert want[5].any()


def _collector(env_id, seeds, compiled_rollout, **cfg_changes):
    from trustrl.collect.batched import BatchedCollector
    from trustrl.envs.make import check_env
    from trustrl.learn.learners import init_policies
    from trustrl.settings.config import make_config

    cfg = make_config("ppo", env_id=env_id, sets=cfg_changes)
    net = PopActorCritic.from_policies(init_policies(check_env(env_id), cfg, seeds), "cpu")
    return BatchedCollector(cfg, net, seeds, compiled_rollout=compiled_rollout)


ROLLOUT_CASES = {
    # env, settings: discrete and Box actions, with and without both normalisers, one env per
    # member (the normalisers' one-row batch) and more than 8 (NumPy's pairwise sums)
    "cartpole": ("CartPole-v1", dict(num_envs=4, num_steps=24)),
    "acrobot-norm-9": ("Acrobot-v1", dict(num_envs=9, num_steps=40, normalize_obs=True,
                                          normalize_reward=True)),
    "mcc-norm-1": ("MountainCarContinuous-v0", dict(num_envs=1, num_steps=24, minibatch_size=8,
                                                    normalize_obs=True, normalize_reward=True,
                                                    hidden_sizes=[16], activation="relu",
                                                    log_std_init=0.5)),  # actions clipped
    "pendulum-norm": ("Pendulum-v1", dict(num_envs=3, num_steps=30, normalize_obs=True,
                                          normalize_reward=True)),
}


@pytest.mark.parametrize("case", ROLLOUT_CASES)
def test_compiled_rollout_equals_the_numpy_rollout(case):
    """Two collections (the carried state crossing from one to the next, episodes ending in the
    second: time limits shortened) with the compiled and the NumPy rollout, 2 members: every
    record, the values and bootstrap values, and the carried state (envs, trackers,
    normalisers) equal to float rounding; actions of discrete envs, terminations, truncations
    and lengths exactly; the compiled rollout's actor outputs equal the actor's."""
    env_id, changes = ROLLOUT_CASES[case]
    a = _collector(env_id, [3, 8], False, **changes)
    b = _collector(env_id, [3, 8], True, **changes)
    assert (a.rollout_kind, b.rollout_kind) == ("numpy", "compiled")
    limit = 9  # episodes end by truncation within the rollouts (not only CartPole's falls)
    for c in (a, b):
        c.elapsed.fill_(c.env.max_episode_steps - limit)
    truncations = 0
    for _ in range(2):
        ra, rb = a.collect(), b.collect()
        truncations += int(ra["truncated"].sum())
        for key in ra:
            x, y = ra[key], rb[key]
            assert x.dtype == y.dtype and x.shape == y.shape, key
            if key in ("terminated", "truncated", "fin_len") or (key == "actions"
                                                                 and a.net.discrete):
                assert torch.equal(x, y), key
            else:
                torch.testing.assert_close(y, x, rtol=1e-5, atol=1e-5, msg=key)
        # pi_old's outputs, kept from the compiled rollout's forward passes: the actor's
        T, P, N, D = rb["obs"].shape
        with torch.no_grad():
            want = b.net.actor(rb["obs"].transpose(0, 1).reshape(P, T * N, D))
        torch.testing.assert_close(rb["old_out"], want.view(P, T, N, -1).transpose(0, 1),
                                   rtol=1e-5, atol=1e-5)
    assert truncations > 0
    for name in ("env_state", "elapsed", "ep_ret", "ep_len", "obs", "obs_mean", "obs_var",
                 "obs_count", "ret_mean", "ret_var", "ret_count", "disc_return"):
        x, y = getattr(a, name), getattr(b, name)
        if x.dtype in (torch.int64, torch.bool):
            assert torch.equal(x, y), name
        else:
            torch.testing.assert_close(y, x, rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_compiled_rollout_member_equals_its_seed_alone(env_id):
    """A member's records from the compiled rollout of a population are exactly those of its
    seed collected alone (normalisers on: their statistics are per member)."""
    pop = _collector(env_id, [4, 11], True, num_envs=2, num_steps=40, normalize_obs=True,
                     normalize_reward=True)
    alone = _collector(env_id, [11], True, num_envs=2, num_steps=40, normalize_obs=True,
                       normalize_reward=True)
    for _ in range(2):
        rp, ra = pop.collect(), alone.collect()
    for key in rp:
        assert torch.equal(rp[key][:, 1], ra[key][:, 0]), key


def test_the_compiled_backend_compiles_the_rollout_too():
    """grad_backend 'auto' (where Numba is installed) and 'compiled' collect with the compiled
    rollout on the batched CPU path; 'closed-form' with the NumPy rollout; an explicit
    numpy_rollout keeps the eager one."""
    from trustrl.learn.learners import BatchedLearner
    from trustrl.settings.config import make_config

    def kind(backend, **kw):
        cfg = make_config("trpo", env_id="CartPole-v1",
                          sets=dict(grad_backend=backend, num_envs=2, num_steps=32))
        return BatchedLearner(cfg, [0], **kw).collector.rollout_kind

    assert kind("auto") == kind("compiled") == "compiled"
    assert kind("closed-form") == "numpy"
    assert kind("compiled", numpy_rollout=True) == "numpy"
    assert kind("compiled", numpy_rollout=False) == "torch"


def test_compiled_gae_is_the_numpy_gae_bit_for_bit():
    """The compiled GAE (the learner's with the compiled rollout) equals advantages.gae_numpy
    exactly: float32 [T, P, N] with terminations, truncations and both at once."""
    from trustrl.maths.advantages import gae_numpy

    g = torch.Generator().manual_seed(5)
    T, P, N = 64, 3, 5
    r, v, nv = (torch.randn(T, P, N, generator=g) for _ in range(3))
    term = torch.rand(T, P, N, generator=g) < 0.1
    trunc = torch.rand(T, P, N, generator=g) < 0.1
    for gamma, lam in ((0.99, 0.95), (0.9, 1.0)):
        a, ret = compiled.gae(r, v, nv, term, trunc, gamma, lam)
        a0, ret0 = gae_numpy(r, v, nv, term, trunc, gamma, lam)
        assert torch.equal(a, a0) and torch.equal(ret, ret0)


@pytest.mark.parametrize("algo", ["ppo", "trpo"])
def test_a_whole_compiled_iteration_equals_the_eager_one(algo):
    """Three iterations of the batched learner (rollout, GAE, update, metrics) with the
    compiled backend (compiled rollout and GAE; TRPO's critic fit and Fisher products) and
    with the eager closed form (NumPy rollout), 2 members: every metric and the parameters
    agree to float rounding (the kernels' tanh and BLAS round differently in the last bits)."""
    from trustrl.learn.learners import BatchedLearner
    from trustrl.settings.config import make_config

    def run(backend):
        cfg = make_config(algo, env_id="CartPole-v1",
                          sets=dict(grad_backend=backend, num_envs=4, num_steps=32,
                                    eval_every=0))
        learner = BatchedLearner(cfg, [2, 9])
        rows = [learner.step()[0] for _ in range(3)]
        return learner, torch.stack(rows)

    (lc, mc), (le, me) = run("compiled"), run("closed-form")
    assert (lc.collector.rollout_kind, le.collector.rollout_kind) == ("compiled", "numpy")
    cols = list(lc.columns)
    if "cg_iters_run" in cols:
        # conjugate gradient stops where its residual falls under a tolerance: a residual at
        # the tolerance takes one iteration more on one side after rounding (seen: 6 against
        # 5), which moves the step by less than the tolerances below
        c = cols.index("cg_iters_run")
        assert float((mc[..., c] - me[..., c]).abs().max()) <= 1.0
        keep = [i for i in range(len(cols)) if i != c]
        mc, me = mc[..., keep], me[..., keep]
    torch.testing.assert_close(mc, me, rtol=1e-4, atol=1e-5, equal_nan=True)
    torch.testing.assert_close(lc.net.flat, le.net.flat, rtol=1e-4, atol=1e-5)


FUSED_CASES = [
    # algo, env, settings: Discrete and Box actions, both normalisers, a minibatch that does
    # not divide the batch, a KL target that stops members at different epochs (with the
    # clip range annealed over the 4 iterations), ppo-noclip
    ("ppo", "CartPole-v1", {}),
    ("ppo", "Pendulum-v1", {"normalize_obs": "true", "normalize_reward": "true",
                            "minibatch_size": "48", "clip_value_loss": "true"}),
    ("ppo", "Acrobot-v1", {"target_kl": "0.004", "lr": "0.003", "hidden_sizes": "16",
                           "activation": "relu", "update_epochs": "5",
                           "anneal_clip": "true", "total_steps": "384"}),  # clip 0.2 .. 0.05
    ("ppo-noclip", "MountainCarContinuous-v0", {"norm_adv": "false", "ent_coef": "0.0",
                                                "max_grad_norm": "0.0"}),
    ("spo", "Pendulum-v1", {"clip_eps": "0.3", "ent_coef": "0.01"}),  # a variant's objective
]


@pytest.mark.parametrize("case", range(len(FUSED_CASES)))
def test_the_fused_iteration_equals_the_unfused_one(case):
    """PPO's whole iteration as one compiled call (trustrl.compute.compiled.iteration) against the
    same iteration as separate calls (rollout, values, GAE, epochs, diagnostics, the metrics
    in torch), 3 members, 4 iterations: the same parameters, Adam state, episodes and
    carried env state bit for bit (the same compiled functions on the same numbers), every
    metric to float rounding (the float64 statistics sum in another order); and a
    checkpoint taken after 2 fused iterations resumes to the same numbers."""
    from trustrl.learn.learners import BatchedLearner
    from trustrl.settings.config import make_config

    algo, env, extra = FUSED_CASES[case]
    sets = {"num_envs": "4", "num_steps": "24", "update_epochs": "3", "minibatch_size": "32",
            "eval_every": "0", **extra}

    def learner(fused):
        cfg = make_config(algo, env_id=env, sets=sets)
        lr = BatchedLearner(cfg, [3, 1, 4])
        assert lr.fused  # the default where it applies
        lr.fused = fused
        return lr

    a, b = learner(True), learner(False)
    ms = []
    for i in range(4):
        if i == 2:  # a copy: the optimizer's state_dict holds its CPU tensors themselves
            ck = copy.deepcopy(a.state_dict())
        (ma, da, ra, la), (mb, db, rb, lb) = a.step(), b.step()
        ms.append(ma)
        torch.testing.assert_close(ma, mb, rtol=1e-9, atol=1e-12, equal_nan=True)
        assert torch.equal(da, db) and torch.equal(ra[da], rb[db]) and torch.equal(la[da], lb[db])
    assert torch.equal(a.net.flat, b.net.flat)
    for x, y in ((a.algo.opt.m, b.algo.opt.m), (a.algo.opt.v, b.algo.opt.v),
                 (a.algo.opt.t, b.algo.opt.t), (a.collector.env_state, b.collector.env_state),
                 (a.collector.obs_var, b.collector.obs_var),
                 (a.collector.ret_var, b.collector.ret_var)):
        assert torch.equal(x, y)
    c = learner(True)
    c.load_state_dict(ck)
    for i in (2, 3):
        torch.testing.assert_close(c.step()[0], ms[i], rtol=0, atol=0, equal_nan=True)
    if "target_kl" in extra:  # the case means something only if members stopped unevenly
        runs = torch.stack(ms)[:, :, a.columns.index("epochs_run")]
        assert len(set(runs.flatten().tolist())) > 1


def test_the_iteration_is_fused_for_every_objective_on_the_compiled_path():
    """PPO, ppo-noclip and the variants that change PPO's objective (ppo-dualclip, spo) on the
    compiled rollout and backend fuse; a loss of its own in torch (ppo-penalty), pg's own
    metrics (its update), TRPO, the NumPy rollout and the eager backends do not."""
    from trustrl.learn.learners import BatchedLearner
    from trustrl.settings.config import make_config

    def fused(algo, **sets):
        cfg = make_config(algo, env_id="CartPole-v1",
                          sets=dict(num_envs=2, num_steps=32, eval_every=0, **sets))
        return BatchedLearner(cfg, [0]).fused

    assert fused("ppo") and fused("ppo-noclip") and fused("ppo-dualclip") and fused("spo")
    assert not any((fused("ppo-penalty"), fused("pg"), fused("trpo"),
                    fused("ppo", grad_backend="closed-form"),
                    fused("ppo", grad_backend="autograd")))


PPO_CASES = [
    # action, hidden, activation, extra settings
    ("discrete", (16, 8), "tanh", {}),
    ("discrete", (), "relu", {"norm_adv": "false", "ent_coef": "0.0"}),
    ("box", (16,), "tanh", {"clip_value_loss": "true", "ent_coef": "0.01"}),
    ("box", (8, 8), "relu", {"max_grad_norm": "0.0", "minibatch_size": "24"}),
    ("discrete", (16,), "tanh", {"target_kl": "0.002", "clip_value_loss": "true",
                                 "ent_coef": "0.02"}),
]


@pytest.mark.parametrize("algo", ["ppo", "ppo-noclip", "spo"])
@pytest.mark.parametrize("case", range(len(PPO_CASES)))
def test_the_compiled_ppo_epoch_equals_the_eager_closed_form(algo, case):
    """PPO's update (K epochs of minibatch gradients, norm clip, Adam) through the compiled
    epoch kernel and through the eager closed form, 3 members from the same parameters and
    batch: parameters, Adam's moments and step counts, and every metric agree to float
    rounding; with target_kl, members stop at different epochs (their parameters frozen)."""
    from trustrl.algos import make_algorithm
    from trustrl.settings.config import make_config

    kind, hidden, act, extra = PPO_CASES[case]
    action = ActionSpec("discrete", n=3) if kind == "discrete" else ActionSpec(
        "box", dim=2, low=(-1.0, -1.0), high=(1.0, 1.0))
    torch.manual_seed(case)
    pols = [ActorCritic(4, action, hidden, act, log_std_init=-0.3 * i) for i in range(3)]
    P, N = 3, 72
    g = torch.Generator().manual_seed(case)
    obs = torch.randn(P, N, 4, generator=g)
    net0 = PopActorCritic.from_policies(pols, "cpu")
    with torch.no_grad():
        out = net0.actor(obs)
        if kind == "discrete":
            actions = torch.randint(0, 3, (P, N), generator=g)
        else:
            actions = out + torch.randn(P, N, 2, generator=g)
        batch = {"obs": obs, "actions": actions,
                 "logp_old": net0.log_prob(out, actions) + 0.05 * torch.randn(P, N, generator=g),
                 "values_old": net0.critic(obs), "advantages": torch.randn(P, N, generator=g),
                 "returns": torch.randn(P, N, generator=g)}
    sets = {"num_steps": str(N), "num_envs": "1", "minibatch_size": "32", "update_epochs": "4",
            **extra}
    results = []
    for backend in (compiled.Compiled(), ClosedForm()):
        net = PopActorCritic.from_policies(pols, "cpu")
        cfg = make_config(algo, "CartPole-v1", None, sets, {})
        alg = make_algorithm(cfg, net, backend, rng.shuffle_keys([0, 1, 2]))
        ms = [alg.update(batch, c, alg.learning_rate(0.1 * c)) for c in range(2)]
        results.append((net.flat.detach().clone(), alg.opt, ms))
    assert_same_updates(*results)
    (fc, oc, mc), (fe, oe, me) = results
    if "target_kl" in extra:  # the case means something only if members stopped unevenly
        assert len(set(mc[0]["epochs_run"].tolist() + mc[1]["epochs_run"].tolist())) > 1


def assert_same_updates(compiled_run, eager_run):  # type: ignore[no-untyped-def]
    """Two runs of PPO's update, each (parameters, optimiser, metrics of each update), agree to
    float rounding: parameters, Adam's moments and step counts, every metric."""
    (fc, oc, mc), (fe, oe, me) = compiled_run, eager_run
    torch.testing.assert_close(fc, fe, rtol=1e-4, atol=2e-5)
    torch.testing.assert_close(oc.m, oe.m, rtol=1e-3, atol=1e-6)
    torch.testing.assert_close(oc.v, oe.v, rtol=1e-3, atol=1e-9)
    assert torch.equal(oc.t, oe.t)
    for a, b in zip(mc, me, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5, msg=k)


def test_compiling_is_announced_and_loading_from_the_disk_cache_is_not(capsys, monkeypatch):
    """The first call of a kernel says on stderr that it compiles (and how long it took) only
    when the kernel has no code on disk; a load from the cache prints nothing, however slow
    (a loaded machine once took over a second to load and announced a compilation)."""
    on_disk = {"a": True, "b": False}
    monkeypatch.setattr(compiled, "_cached", lambda k: on_disk[k])
    with compiled._announce_compiling("compiling X", "a"):
        pass
    assert capsys.readouterr().err == ""
    with compiled._announce_compiling("compiling X", "a", "b"):
        pass
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "trustrl: compiling X" and err[1].startswith("trustrl: compiled in ")


@pytest.mark.parametrize("on_disk", [True, False])
def test_what_trustrl_compiles_llvm_optimises_at_its_level_and_a_users_level_stands(
        monkeypatch, on_disk):
    """Numba's pass builders read its optimisation level at each compile: inside
    `_announce_compiling` (every kernel's first call) they get compiled.OPT_LEVEL, with the
    announcement or without it; outside, and where the user set NUMBA_OPT, Numba's own
    level; the level is back after the block."""
    from numba import njit
    from numba.core import codegen, config

    seen: list[int] = []
    pass_builder = codegen.CPUCodegen._pass_builder

    def spy(self, **kw):  # type: ignore[no-untyped-def]
        if "opt" not in kw:  # the full passes (Numba's cheap pass asks for level 0 itself)
            seen.append(int(config.OPT))
        return pass_builder(self, **kw)

    monkeypatch.setattr(codegen.CPUCodegen, "_pass_builder", spy)
    monkeypatch.delenv("NUMBA_OPT", raising=False)
    config.reload_config()  # Numba re-reads its settings at a compile when NUMBA_* changed
    monkeypatch.setattr(config, "OPT", type(config.OPT)(3))
    monkeypatch.setattr(compiled, "_cached", lambda k: on_disk)

    @njit
    def inside(x):  # type: ignore[no-untyped-def]
        return x + 1

    with compiled._announce_compiling("compiling X", inside):
        inside(1)
    assert seen and set(seen) == {compiled.OPT_LEVEL} and compiled.OPT_LEVEL != 3
    assert int(config.OPT) == 3
    seen.clear()

    @njit
    def outside(x):  # type: ignore[no-untyped-def]
        return x + 2

    outside(1)
    assert seen and set(seen) == {3}
    seen.clear()
    monkeypatch.setenv("NUMBA_OPT", "3")
    config.reload_config()  # as at a process start with NUMBA_OPT set: no reload in the block

    @njit
    def users(x):  # type: ignore[no-untyped-def]
        return x + 3

    with compiled._announce_compiling("compiling X", users):
        users(1)
    assert seen and set(seen) == {3}


def test_a_kernel_with_code_on_disk_counts_as_cached():
    """_cached reads Numba's index file: a kernel called in this session (so compiled or
    loaded, and written to the cache) is cached; a new function never compiled is not."""
    from numba import njit

    kernels = compiled._kernels()
    f32 = np.float32
    kernels["gae"](*(np.zeros((1, 1), f32),) * 6, f32(0.99), f32(0.95))
    assert compiled._cached(kernels["gae"])

    @njit(cache=True)
    def never_called(x):  # pragma: no cover
        return x

    assert not compiled._cached(never_called)


@pytest.mark.parametrize("kind", ["box", "discrete"])
@pytest.mark.parametrize("hidden, activation, N", [((64, 64), "tanh", 1), ((256, 256), "relu", 3),
                                                   ((), "tanh", 2), ((16,), "relu", 5)])
def test_the_compiled_policy_step_equals_sample_step(kind, hidden, activation, N):
    """The Gymnasium collector's compiled step and ActorCritic.sample_step from the same torch
    random state: the same actions (Discrete: exactly), log-probs, values and actor outputs
    to float rounding, the inputs recorded as they are, and the same random numbers
    consumed."""
    torch.manual_seed(3)
    if kind == "box":
        action = ActionSpec("box", dim=3, low=(-1.0,) * 3, high=(1.0,) * 3)
    else:
        action = ActionSpec("discrete", n=3)
    pol = ActorCritic(7, action, hidden, activation, log_std_init=-0.3)
    with torch.no_grad():
        if kind == "box":  # a log-std that differs per dimension
            pol.log_std.add_(torch.tensor([0.0, 0.4, -0.8]))
        else:  # logits far enough from uniform that the three actions' chances differ
            pol.policy_head.weight.mul_(30.0)
    net = PopActorCritic.from_policies([pol], "cpu")
    acting = compiled.acting(net, compiled.Compiled())
    assert acting is not None
    T = 4 if kind == "box" else 40
    act_shape = (T, N, 3) if kind == "box" else (T, N)
    recs = [torch.full(s, float("nan")) for s in ((T, N, 7), act_shape, (T, N), (T, N),
                                                  (T, N, 3))]
    if kind == "discrete":
        recs[1] = torch.full(act_shape, -1, dtype=torch.long)
    acting.begin(*recs)
    for t in range(T):
        x = 2.0 * torch.randn(N, 7)
        torch.manual_seed(100 + t)
        a = acting.step(t, x)
        after = torch.rand(1)
        torch.manual_seed(100 + t)
        a0, logp0, v0, out0 = pol.sample_step(x, with_out=True)
        assert torch.equal(torch.rand(1), after)  # the same draws taken
        assert torch.equal(a, recs[1][t]) and torch.equal(recs[0][t], x)
        if kind == "discrete":
            assert torch.equal(a, a0)
        for got, want in zip((a, recs[2][t], recs[3][t], recs[4][t]), (a0, logp0, v0, out0),
                             strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    if kind == "discrete":  # every action drawn somewhere: the sampler is not stuck
        assert set(recs[1].flatten().tolist()) == {0, 1, 2}


def test_the_gymnasium_collector_acts_compiled_where_it_applies():
    """The compiled step is used by the Gymnasium collector with the compiled backend (Box
    and Discrete actions); the closed form or autograd keep the policy module."""
    from trustrl.learn.learners import GymLearner
    from trustrl.settings.config import make_config

    def acting(env_id, backend):
        cfg = make_config("ppo", env_id=env_id,
                          sets=dict(grad_backend=backend, num_envs=2, num_steps=32,
                                    vector="sync"))
        learner = GymLearner(cfg)
        try:
            return learner.collector.acting is not None
        finally:
            learner.close()

    assert acting("Pendulum-v1", "auto") and acting("Pendulum-v1", "compiled")
    assert not acting("Pendulum-v1", "closed-form") and not acting("Pendulum-v1", "autograd")
    assert acting("CartPole-v1", "compiled") and not acting("CartPole-v1", "closed-form")


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "Acrobot-v1"])
@pytest.mark.parametrize("algo", ["ppo", "trpo"])
def test_gymnasium_iterations_with_the_compiled_step_equal_the_eager_ones(algo, env_id):
    """Three iterations of the Gymnasium learner (normalised observations and rewards;
    Pendulum's episodes truncated inside the rollouts, Acrobot's Discrete actions) with the
    compiled backend (compiled policy step and update kernels) and with the eager closed
    form: every metric and the parameters agree to float rounding."""
    from trustrl.learn.learners import GymLearner
    from trustrl.settings.config import make_config

    def run(backend):
        cfg = make_config(algo, env_id=env_id,
                          sets=dict(grad_backend=backend, num_envs=2, num_steps=128,
                                    vector="sync", normalize_obs=True,
                                    normalize_reward=True, eval_every=0, seed=4))
        learner = GymLearner(cfg)
        rows = [learner.iterate()[0][0] for _ in range(3)]
        learner.close()
        return learner, rows

    (lc, rc), (le, re) = run("compiled"), run("closed-form")
    assert lc.collector.acting is not None and le.collector.acting is None
    for a, b in zip(rc, re, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            if a[k] is None or b[k] is None:  # metrics this setting does not have
                assert a[k] is b[k], k
            elif k == "cg_iters_run":  # its stop is a threshold on a rounded residual
                assert abs(a[k] - b[k]) <= 1, k
            elif k != "cg_residual":  # CG's leftover: of the order of the rounding itself
                # TRPO: the compiled Fisher products' forward pass (a few ulp off torch's
                # tanh) goes through CG and the line search into the next iterations' data
                assert a[k] == pytest.approx(b[k], rel=1e-3 if algo == "ppo" else 3e-3,
                                             abs=1e-5, nan_ok=True), k
    # rounding differences in the actions move the env too, and TRPO's line search and CG
    # amplify them: up to about 1e-4 after three iterations
    torch.testing.assert_close(lc.net.flat, le.net.flat, rtol=1e-3, atol=5e-4)


def _members_and_samples(kind, hidden, activation, B):  # type: ignore[no-untyped-def]
    """3 members (Discrete n=4 or Box dim 3, log-std -0.2 i), their observations [3, B, 5],
    the actor's outputs and actions drawn near them, with the generator for more draws."""
    action = ActionSpec("discrete", n=4) if kind == "discrete" else ActionSpec(
        "box", dim=3, low=(-1.0,) * 3, high=(1.0,) * 3)
    torch.manual_seed(B)
    net = PopActorCritic.from_policies(
        [ActorCritic(5, action, hidden, activation, log_std_init=-0.2 * i) for i in range(3)],
        "cpu")
    g = torch.Generator().manual_seed(B)
    obs = torch.randn(3, B, 5, generator=g)
    with torch.no_grad():
        out = net.actor(obs)
        actions = (torch.randint(0, 4, (3, B), generator=g) if kind == "discrete"
                   else out + torch.randn(3, B, 3, generator=g))
    return net, g, obs, out, actions


@pytest.mark.parametrize("kind, hidden, activation, B", [
    ("discrete", (16, 8), "tanh", 57), ("discrete", (), "relu", 2), ("box", (16,), "tanh", 40),
    ("box", (8, 8), "relu", 1)])
def test_the_compiled_diagnostics_equal_the_eager_ones(kind, hidden, activation, B):
    """algos.common.diagnostics through the compiled backend's kernel and with torch, 3
    members whose policies moved from pi_old (another network, another log-std): every
    column to float rounding (means accumulate in float64 there, float32 here)."""
    from trustrl.algos.common import diagnostics

    old, g, obs, old_out, actions = _members_and_samples(kind, hidden, activation, B)
    net = PopActorCritic.from_policies(
        [ActorCritic(5, old.action, hidden, activation, log_std_init=0.1 * i)
         for i in range(3)], "cpu")
    with torch.no_grad():
        net.flat.add_(0.5 * torch.randn(net.flat.shape, generator=g))  # far from pi_old
        batch = {"obs": obs, "actions": actions, "logp_old": old.log_prob(old_out, actions)}
    flat_old = old.flat.detach()
    fast = diagnostics(net, batch, old_out, flat_old, 0.2, compiled.Compiled())
    slow = diagnostics(net, batch, old_out, flat_old, 0.2)
    assert fast.keys() == slow.keys()
    for k in slow:
        assert fast[k].dtype == slow[k].dtype, k
        torch.testing.assert_close(fast[k], slow[k], rtol=2e-5, atol=2e-6, msg=k)
    assert float(slow["clip_fraction"].max()) > 0  # the ratios are far from 1: the band counts


@pytest.mark.parametrize("kind, hidden, activation, B", [
    ("discrete", (16, 8), "tanh", 57), ("box", (16,), "tanh", 40), ("box", (8, 8), "relu", 3)])
def test_trpos_compiled_line_search_evaluation_equals_the_eager_one(kind, hidden, activation,
                                                                    B):
    """TRPO's line-search evaluation (the surrogate mean(rho A) and the mean exact KL to
    pi_old, per member) at a candidate far from pi_old: the compiled backend's one call
    (kernels.surrogate_kl) and torch's (the closed-form backend) agree to float rounding, 3
    members, Discrete and Box."""
    from trustrl.algos.trpo import TRPO
    from trustrl.compute.backends import ClosedForm
    from trustrl.settings.config import make_config

    net, g, obs, old_out, actions = _members_and_samples(kind, hidden, activation, B)
    with torch.no_grad():
        batch = {"obs": obs, "actions": actions, "logp_old": net.log_prob(old_out, actions)}
    flat_old = net.flat.detach().clone()
    cand = flat_old + 0.3 * torch.randn(flat_old.shape, generator=g)
    adv = torch.randn(3, B, generator=g)
    cfg = make_config("trpo", env_id="CartPole-v1")
    got = {}
    for name, backend in (("compiled", compiled.Compiled()), ("torch", ClosedForm())):
        algo = TRPO(net, cfg, backend, torch.zeros(3, 2, dtype=torch.int64))
        got[name] = algo._surrogate_kl(batch, adv, old_out, flat_old, cand)
    for fast, slow in zip(got["compiled"], got["torch"], strict=True):
        assert fast.dtype == slow.dtype and fast.shape == (3,)
        torch.testing.assert_close(fast, slow, rtol=2e-5, atol=2e-6)
    assert float(got["torch"][1].min()) > 1e-3  # the candidate moved: the KL is not ~0


@pytest.mark.parametrize("kind, hidden, activation, B", [
    ("discrete", (16, 8), "tanh", 57), ("box", (16,), "tanh", 40), ("box", (8, 8), "relu", 3)])
def test_trpos_compiled_line_search_equals_the_eager_one(kind, hidden, activation, B):
    """TRPO's whole backtracking line search as one compiled call (the evaluation's `search`:
    trust.line_search.line_search_steps compiled with kernels.surrogate_kl_of) and the eager
    search over the same compiled evaluation, one call per candidate: the same accepted
    members, candidates tried and fractions, and the same parameters, KL and improvement to
    float rounding, for 3 members of which one takes the step whole, one backtracks and one
    is left out (searching False)."""
    from trustrl.algos.trpo import TRPO
    from trustrl.maths.trust.line_search import population_line_search
    from trustrl.settings.config import make_config

    net, g, obs, old_out, actions = _members_and_samples(kind, hidden, activation, B)
    with torch.no_grad():
        batch = {"obs": obs, "actions": actions, "logp_old": net.log_prob(old_out, actions)}
    flat_old = net.flat.detach().clone()
    adv = torch.randn(3, B, generator=g)
    algo = TRPO(net, make_config("trpo", env_id="CartPole-v1"), compiled.Compiled(),
                torch.zeros(3, 2, dtype=torch.int64))
    L_old = algo._surrogate_kl(batch, adv, old_out, flat_old, flat_old)[0]
    # steps along the surrogate's gradient, of three lengths: member 0 accepts at once,
    # member 1 backtracks (its full step breaks the KL budget)
    grad = algo.backend.policy_gradient(net, obs, actions, batch["logp_old"], adv, flat_old)[0]
    step = grad / grad.norm(dim=1, keepdim=True) * torch.tensor([[1e-3], [3.0], [1.0]])
    searching = torch.tensor([True, True, False])
    evaluate = algo.backend.line_search_evaluation(net, batch, adv, old_out, flat_old)
    assert hasattr(evaluate, "search")
    got = population_line_search(flat_old, step, evaluate, L_old, 0.01, 0.5, 10, searching)
    ref = population_line_search(flat_old, step, lambda c: evaluate(c), L_old, 0.01, 0.5, 10,
                                 searching)  # the eager loop, one evaluation per candidate
    assert got.accepted.tolist() == ref.accepted.tolist()
    assert ref.accepted[0] and not ref.accepted[2]
    assert got.steps_tried.tolist() == ref.steps_tried.tolist()
    assert ref.steps_tried[1] > 1 and ref.steps_tried[2] == 0
    assert got.step_fraction.tolist() == ref.step_fraction.tolist()
    for name in ("theta", "kl", "improvement"):
        a, b = getattr(got, name), getattr(ref, name)
        assert a.dtype == b.dtype, name
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7, equal_nan=True, msg=name)
    assert torch.equal(got.theta[2], flat_old[2])


@pytest.mark.parametrize("kind, hidden, activation, B", [
    ("discrete", (16, 8), "tanh", 57), ("box", (16,), "tanh", 40), ("box", (8, 8), "relu", 3)])
def test_trpos_compiled_policy_gradient_equals_the_closed_form(kind, hidden, activation, B):
    """The policy gradient of TRPO and NPG (dL/dtheta of L = mean(rho A), L, and the actor's
    output, at a theta_old whose rho differs from 1) through the compiled backend's one call
    (kernels.policy_gradient) and through the closed form in torch: equal to float rounding,
    3 members, Discrete and Box (the log-std's column included), zero in the critic's
    columns."""
    from trustrl.compute.backends import ClosedForm

    net, g, obs, out, actions = _members_and_samples(kind, hidden, activation, B)
    with torch.no_grad():
        logp_old = net.log_prob(out, actions) + 0.3 * torch.randn(3, B, generator=g)
    adv = torch.randn(3, B, generator=g)
    flat_old = net.flat.detach().clone()
    fast = compiled.Compiled().policy_gradient(net, obs, actions, logp_old, adv, flat_old)
    slow = ClosedForm().policy_gradient(net, obs, actions, logp_old, adv, flat_old)
    for a, b, name in zip(fast, slow, ("g", "L", "old_out"), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=name)
    assert float(fast[0][:, net.critic_slice].abs().max()) == 0.0
    assert float(slow[0].abs().max()) > 1e-3


def test_the_compiled_tensorboard_checksum_is_tensorboards(tmp_path):
    """tb_events.masked_crc32c (compiled) equals TensorBoard's own masked CRC-32C on records
    of several lengths; a run folder's event file (tb_events.EventWriter) is TensorBoard's
    format: every record's checksums are TensorBoard's, and its reader gives back each row's
    scalars at its step and, on a resume, the SessionLog START at the purge step."""
    import os
    import struct

    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_file_loader import (
        LegacyEventFileLoader as EventFileLoader,  # the events as written, not migrated
    )
    from tensorboard.compat.proto.event_pb2 import SessionLog
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    from trustrl.records import tb_events
    from trustrl.records.runs import RunDir

    assert tb_events.crc_function() is tb_events.masked_crc32c  # Numba is installed here
    for n in (0, 1, 8, 255, 827, 4099):
        data = os.urandom(n)
        assert tb_events.masked_crc32c(data) == masked_crc32c(data), n
    run = RunDir(tmp_path / "run")
    run.buffer_logs(3600.0)  # kept in memory until flush_logs
    assert run.open_tensorboard()
    for step in (1, 2, 3):
        run.log_metrics({"iteration": step, "global_step": 100 * step, "approx_kl": 0.01 * step,
                         "ep_return_mean": float("nan"), "episodes": step})
    (events,) = (tmp_path / "run" / "tb").iterdir()
    assert [e.step for e in EventFileLoader(str(events)).Load() if e.summary.value] == []
    run.flush_logs()
    first_writer = run._tb
    run.open_tensorboard(purge_step=200)  # a resume from the checkpoint at step 200
    assert first_writer._file is None  # closed
    run.log_metrics({"iteration": 2, "global_step": 200, "approx_kl": 0.5, "episodes": 9})
    run.close()
    files = sorted((tmp_path / "run" / "tb").iterdir())
    assert len(files) == 2
    for f in files:  # every record: length, its masked CRC, data, its masked CRC
        raw, at = f.read_bytes(), 0
        while at < len(raw):
            head = raw[at:at + 8]
            (n,) = struct.unpack("<Q", head)
            assert struct.unpack("<I", raw[at + 8:at + 12])[0] == masked_crc32c(head)
            data = raw[at + 12:at + 12 + n]
            assert struct.unpack("<I", raw[at + 12 + n:at + 16 + n])[0] == masked_crc32c(data)
            at += 16 + n
        assert at == len(raw)
    first = [e for e in EventFileLoader(str(files[0])).Load()]
    assert first[0].file_version == "brain.Event:2"
    rows = [(e.step, {v.tag: v.simple_value for v in e.summary.value})
            for e in first if e.summary.value]
    assert [s for s, _ in rows] == [100, 200, 300]
    for (_step, vals), i in zip(rows, (1, 2, 3), strict=True):
        assert vals == {"diagnostics/approx_kl": pytest.approx(0.01 * i),
                        "charts/episodes": float(i)}  # the NaN return is left out
    second = [e for e in EventFileLoader(str(files[1])).Load()]
    assert [(e.step, e.session_log.status) for e in second if e.HasField("session_log")] == [
        (200, SessionLog.START)]
    assert [(e.step, e.summary.value[0].simple_value) for e in second if e.summary.value] == [
        (200, pytest.approx(0.5))]


def test_the_env_constants_are_typed_once_by_identity(monkeypatch):
    """compiled._typed_once: a dispatcher types a registered env's constants from its table
    (Numba's own Python typeof is not called again for them), while another env's constants,
    or a changed copy of the same env's, are typed and computed with afresh."""
    import numba
    import numba.core.dispatcher as dispatcher

    cart = compiled.compiled_dynamics("CartPole-v1").k
    acro = compiled.compiled_dynamics("Acrobot-v1").k

    @numba.njit
    def first_constant(k, x):
        return k[1] + x[0]

    x = np.ones(1, np.float64)
    compiled._typed_once(first_constant, cart)
    assert first_constant(cart, x) == pytest.approx(1.0 + float(cart[1]))
    calls = []
    real = dispatcher.typeof
    monkeypatch.setattr(dispatcher, "typeof", lambda v, *a: (calls.append(v), real(v, *a))[1])
    for _ in range(3):
        first_constant(cart, x)
    assert calls == []  # from the table
    other = cart._replace(**{cart._fields[1]: np.float32(7.0)})
    assert first_constant(other, x) == pytest.approx(8.0)
    assert first_constant(acro, x) == pytest.approx(1.0 + float(acro[1]))
    typed = [v for v in calls if isinstance(v, tuple)]  # typed as before (a new signature
    assert {id(v) for v in typed} == {id(other), id(acro)}  # is typed again to compile)
    assert first_constant.typeof_pyval(acro) == real(acro, dispatcher.Purpose.argument)
