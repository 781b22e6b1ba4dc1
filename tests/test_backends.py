"""The gradient backends and what the closed form is built from: each loss term's derivative
beside its formula (trustrl.maths.losses), the entropy's and the exact KL's derivatives in the
output space (trustrl.nets.popnet), TRPO's policy gradient and Fisher products, and the module
network (any actor-critic through torch.func) against the MLP population network."""

from __future__ import annotations

import copy

import pytest
import torch

from trustrl.algos import make_algorithm
from trustrl.compute.backends import Autograd, ClosedForm, LossTerms, pick
from trustrl.maths import rng
from trustrl.maths.losses import (
    clipped_surrogate_objective,
    clipped_surrogate_objective_grad,
    surrogate_objective,
    surrogate_objective_grad,
    value_error,
    value_error_grad,
)
from trustrl.nets import policies
from trustrl.nets.policies import ActionSpec, ActorCritic
from trustrl.nets.popnet import ModuleNet, PopActorCritic
from trustrl.settings.config import make_config

EPS = 0.2
DISCRETE = ActionSpec("discrete", n=3)
BOX = ActionSpec("box", dim=2, low=(-1.0, -1.0), high=(1.0, 1.0))


def _autograd(f, x):
    x = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(f(x).sum(), x)
    return g


def test_surrogate_derivatives_equal_autograd_at_every_kink():
    """d L_clip / d rho on a grid that puts ratios exactly on the band's edges, at 1, inside,
    outside on both sides, with A > 0, A < 0 and A = 0 (ties of min included)."""
    r = torch.tensor([0.5, 1 - EPS, 0.9, 1.0, 1.1, 1 + EPS, 1.5], dtype=torch.float64)
    for a in (1.0, -1.0, 0.0, 2.5):
        adv = torch.full_like(r, a)
        got = clipped_surrogate_objective_grad(r, adv, EPS)
        ref = _autograd(lambda x, adv=adv: clipped_surrogate_objective(x, adv, EPS), r)
        assert torch.equal(got, ref), (a, got, ref)
        assert torch.equal(surrogate_objective_grad(r, adv),
                           _autograd(lambda x, adv=adv: surrogate_objective(x, adv), r))


def test_value_error_derivatives_equal_autograd_at_every_kink():
    """Plain and clipped value errors: V - V_old exactly at +-eps, inside, outside, and the
    tie (V - R)^2 = (V_clip - R)^2 where max splits the gradient."""
    v_old = torch.zeros(8, dtype=torch.float64)
    v = torch.tensor([-0.5, -EPS, -0.1, 0.0, 0.1, EPS, 0.5, 0.3], dtype=torch.float64)
    ret = torch.tensor([1.0, -1.0, 0.3, 0.0, -0.2, 0.4, 0.1, 0.25], dtype=torch.float64)
    # the last sample is a tie: V = 0.3, V_clip = 0.2, R = 0.25 -> both squared errors 0.0025
    for vo, eps in ((None, None), (v_old, EPS)):
        got = value_error_grad(v, ret, vo, eps)
        ref = _autograd(lambda x, vo=vo, eps=eps: value_error(x, ret, vo, eps), v)
        assert torch.allclose(got, ref, atol=1e-15), (vo is None, got, ref)


@pytest.mark.parametrize("action", [DISCRETE, BOX], ids=["discrete", "box"])
def test_entropy_and_kl_derivatives_equal_autograd(action):
    """PopNet.entropy_backward and kl_backward (the derivatives in the actor's output and the
    log-std) against autograd through log_prob_entropy and kl_from."""
    torch.manual_seed(0)
    pols = [ActorCritic(4, action, (8,), "tanh", log_std_init=-0.2 * i) for i in range(2)]
    net = PopActorCritic.from_policies(pols, "cpu")
    flat = net.flat.detach().clone().requires_grad_(True)
    flat_old = flat.detach() + 0.1 * torch.randn_like(flat)
    obs = torch.randn(2, 5, 4)
    acts = torch.randint(0, 3, (2, 5)) if action.kind == "discrete" else torch.randn(2, 5, 2)
    g_ent, g_kl = torch.randn(2, 5), torch.randn(2, 5)
    params = net.views(flat)
    out = net.actor(obs, params)
    old_out = net.actor(obs, flat_old)
    _, ent = net.log_prob_entropy(out, acts, params)
    kl = net.kl_from(old_out, out, flat_old, params)
    (ref_out, ref_flat) = torch.autograd.grad((g_ent * ent + g_kl * kl).sum(), (out, flat))
    parts = net.log_prob_parts(out.detach(), acts, net.views(flat.detach()))
    e_out, e_ls = net.entropy_backward(parts, g_ent)
    k_out, k_ls = net.kl_backward(old_out, out.detach(), flat_old,
                                  net.views(flat.detach()), g_kl)
    got_out = k_out if e_out is None else k_out + e_out
    assert torch.allclose(got_out, ref_out, atol=1e-6), (got_out - ref_out).abs().max()
    if action.kind == "box":  # log-std's own gradient, summed over the batch
        ref_ls = ref_flat[:, -2:]
        assert torch.allclose(e_ls + k_ls, ref_ls, atol=1e-5), (e_ls + k_ls - ref_ls)


@pytest.mark.parametrize("action", [DISCRETE, BOX], ids=["discrete", "box"])
def test_trpo_policy_gradient_and_fisher_products_agree_across_backends(action):
    torch.manual_seed(1)
    net = PopActorCritic.from_policies(
        [ActorCritic(4, action, (16, 8), "tanh", log_std_init=-0.3) for _ in range(3)], "cpu")
    with torch.no_grad():
        net.flat.add_(0.3 * torch.randn_like(net.flat))
    obs = torch.randn(3, 32, 4)
    acts = torch.randint(0, 3, (3, 32)) if action.kind == "discrete" else torch.randn(3, 32, 2)
    flat_old = net.flat.detach().clone()
    with torch.no_grad():
        lpo = net.log_prob(net.actor(obs), acts) + 0.2 * torch.randn(3, 32)
    adv = torch.randn(3, 32)
    ga, La, oa = Autograd().policy_gradient(net, obs, acts, lpo, adv, flat_old)
    gc, Lc, oc = ClosedForm().policy_gradient(net, obs, acts, lpo, adv, flat_old)
    assert torch.allclose(La, Lc, atol=1e-6) and torch.allclose(oa, oc, atol=1e-6)
    assert (ga - gc).abs().max() <= 1e-5 * gc.abs().max()
    v = torch.randn_like(flat_old) * net.actor_mask
    fa = Autograd().fisher_product(net, obs, oc, flat_old, 0.1)(v)
    fc = ClosedForm().fisher_product(net, obs, oc, flat_old, 0.1)(v)
    assert (fa - fc).abs().max() <= 1e-5 * fc.abs().max(), (fa - fc).abs().max()
    assert torch.equal(fa[:, ~net.actor_mask], torch.zeros_like(fa[:, ~net.actor_mask]))


def _batch(policy: ActorCritic, n: int = 64, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, policy.obs_dim, generator=g)
    with torch.no_grad():
        d = policy.dist(obs)
        a = d.sample()
        return {"obs": obs[None], "actions": a[None], "logp_old": d.log_prob(a)[None],
                "values_old": policy.value(obs)[None],
                "advantages": torch.randn(1, n, generator=g),
                "returns": torch.randn(1, n, generator=g)}


@pytest.mark.parametrize("algo", ["ppo", "ppo-penalty", "trpo"])
@pytest.mark.parametrize("action", [DISCRETE, BOX], ids=["discrete", "box"])
def test_module_network_update_equals_the_mlp_population_network(algo, action):
    """The same update through ModuleNet (torch.func over the ActorCritic module, autograd)
    and through PopActorCritic (closed form) gives the same policy."""
    torch.manual_seed(2)
    policy = ActorCritic(4, action, (16,), "tanh", log_std_init=-0.5)
    batch = _batch(policy)
    cfg = make_config(algo, "CartPole-v1", None, {"num_steps": "64", "num_envs": "1",
                                                  "total_steps": "640"}, {})
    outs = []
    for kind in ("module", "mlp"):
        pol = copy.deepcopy(policy)
        net = (ModuleNet.from_policies([pol], action, "cpu") if kind == "module"
               else PopActorCritic.from_policies([pol], "cpu"))
        alg = make_algorithm(cfg, net, pick(net), rng.shuffle_keys([0]))
        assert alg.backend.name == ("autograd" if kind == "module" else "closed-form")
        m = alg.update(batch, 0, alg.learning_rate(0.0))
        net.write_policy(0, pol)
        outs.append((pol, m))
    (a, ma), (b, mb) = outs
    for x, y in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.allclose(x, y, atol=2e-5), (x - y).abs().max()
    for k in ("approx_kl", "kl_exact", "entropy", "value_loss"):
        assert torch.allclose(ma[k], mb[k], rtol=1e-3, atol=1e-6), k


def test_module_network_with_a_shared_trunk_matches_the_module():
    """A shared trunk (no closed form) through ModuleNet: outputs equal the module's, and the
    gradient of a loss equals autograd on the module's own parameters."""
    torch.manual_seed(3)
    pol = ActorCritic(4, BOX, (16, 16), "relu", shared_trunk=True, log_std_init=-0.3)
    net = ModuleNet.from_policies([pol], BOX, "cpu")
    assert pick(net).name == "autograd" and not net.closed_form
    with pytest.raises(ValueError, match="closed-form"):
        pick(net, "closed-form")
    obs = torch.randn(1, 10, 4)
    out, v = net.actor(obs), net.critic(obs)
    d = pol.dist(obs[0])
    assert torch.allclose(out[0], d.mean, atol=1e-6)
    assert torch.allclose(v[0], pol.value(obs[0]), atol=1e-6)
    loss = (out ** 2).sum() + (v ** 3).sum() + net.log_std(None).sum()
    (g,) = torch.autograd.grad(loss, net.flat)
    ref_loss = (d.mean ** 2).sum() + (pol.value(obs[0]) ** 3).sum() + pol.log_std.sum()
    ref = torch.cat([x.reshape(-1) for x in torch.autograd.grad(ref_loss,
                                                                list(pol.parameters()))])
    assert torch.allclose(g[0], ref, atol=1e-5)
    # the trunk is in the actor's mask (pi depends on it), the value head is not
    n_trunk = sum(p.numel() for p in pol.actor_trunk.parameters())
    assert bool(net.actor_mask[:n_trunk].all())
    assert int((~net.actor_mask).sum()) == sum(p.numel() for p in pol.value_head.parameters())


@pytest.mark.parametrize("shared", [True, False])
def test_module_network_runs_a_shared_trunk_once_per_minibatch_gradient(shared, monkeypatch):
    """The autograd backend asks a module network for actor and critic in one call: a shared
    trunk (the CNN of an image policy, an MLP trunk) runs once per minibatch gradient, not once
    for pi and once for V; separate trunks run once each. The pair equals the two calls."""
    torch.manual_seed(4)
    pol = ActorCritic(4, BOX, (16,), "tanh", shared_trunk=shared)
    net = ModuleNet.from_policies([pol], BOX, "cpu")
    calls = []
    plain = policies._plain_forward

    def counting(trunk, x):
        calls.append(trunk)
        return plain(trunk, x)

    monkeypatch.setattr(policies, "_plain_forward", counting)
    obs = torch.randn(1, 8, 4)
    out, v = net.actor_critic(obs)
    assert torch.equal(out, net.actor(obs)) and torch.equal(v, net.critic(obs))
    mb = {"obs": obs, "actions": torch.randn(1, 8, 1), "logp_old": torch.zeros(1, 8),
          "advantages": torch.randn(1, 8), "returns": torch.randn(1, 8)}

    def loss(h, mb, want):
        return LossTerms(-(h.logp * mb["advantages"]).mean(1)
                         + ((h.value - mb["returns"]) ** 2).mean(1))

    calls.clear()
    Autograd().value_and_grad(net, net.views(), mb, loss)
    assert len(calls) == 2 - shared
