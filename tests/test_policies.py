"""ActorCritic: parameter groups, gradient isolation, orthogonal init, initial policy."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from trustrl.maths.distributions import Categorical, DiagGaussian
from trustrl.maths.losses import clipped_surrogate_loss, value_loss
from trustrl.nets.policies import ActionSpec, ActorCritic

OBS_DIM = 4
DISCRETE = ActionSpec("discrete", n=2)
BOX = ActionSpec("box", dim=2, low=(-1.0, -1.0), high=(1.0, 1.0))
SPECS = [pytest.param(DISCRETE, id="discrete"), pytest.param(BOX, id="box")]


def _make(spec: ActionSpec, seed: int = 0, **kw) -> ActorCritic:
    torch.manual_seed(seed)
    return ActorCritic(OBS_DIM, spec, **kw)


def _batch(policy: ActorCritic, seed: int = 1, B: int = 32):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(B, OBS_DIM, generator=g)
    with torch.no_grad():
        d = policy.dist(obs)
        torch.manual_seed(seed)
        actions = d.sample()
    return obs, actions


def _ids(params) -> set[int]:
    return {id(p) for p in params}


def _grads(loss: torch.Tensor, policy: ActorCritic) -> dict[int, torch.Tensor | None]:
    params = list(policy.parameters())
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return {id(p): g for p, g in zip(params, grads, strict=True)}


def _nonzero(g: torch.Tensor | None) -> bool:
    return g is not None and bool(g.abs().sum() > 0)


def _zero_or_none(g: torch.Tensor | None) -> bool:
    return g is None or bool(torch.all(g == 0))


def _actor_losses(policy: ActorCritic, obs, actions):
    yield "neg_logp", -policy.dist(obs).log_prob(actions).mean()
    # clipped surrogate with a pi_old a little away from the current policy (fresh graph)
    logp = policy.dist(obs).log_prob(actions)
    g = torch.Generator().manual_seed(3)
    logp_old = logp.detach() + 0.3 * torch.randn(logp.shape, generator=g)
    adv = torch.randn(logp.shape, generator=g)
    ratio = torch.exp(logp - logp_old)
    yield "clipped_surrogate", clipped_surrogate_loss(ratio, adv, 0.2)


# --- parameter groups --------------------------------------------------------------------


@pytest.mark.parametrize("spec", SPECS)
def test_separate_groups_are_disjoint_and_cover_everything(spec):
    policy = _make(spec)
    actor, critic = list(policy.actor_parameters()), list(policy.critic_parameters())
    assert len(actor) == len(_ids(actor)) and len(critic) == len(_ids(critic))
    assert _ids(actor).isdisjoint(_ids(critic))
    assert _ids(actor) | _ids(critic) == _ids(policy.parameters())
    # log_std belongs to the actor (box only)
    if spec.kind == "box":
        assert id(policy.log_std) in _ids(actor)
    else:
        assert policy.log_std is None


@pytest.mark.parametrize("spec", SPECS)
def test_actor_loss_reaches_only_actor_parameters(spec):
    policy = _make(spec)
    obs, actions = _batch(policy)
    actor, critic = list(policy.actor_parameters()), list(policy.critic_parameters())
    for name, loss in _actor_losses(policy, obs, actions):
        grads = _grads(loss, policy)
        for p in actor:
            assert _nonzero(grads[id(p)]), (name, p.shape)
        for p in critic:
            assert grads[id(p)] is None, (name, p.shape)


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("clipped", [False, True], ids=["plain", "clipped"])
def test_value_loss_reaches_only_critic_parameters(spec, clipped):
    policy = _make(spec)
    obs, _ = _batch(policy)
    g = torch.Generator().manual_seed(4)
    returns = torch.randn(obs.shape[0], generator=g)
    values = policy.value(obs)
    assert values.shape == (obs.shape[0],)
    if clipped:
        loss = value_loss(values, returns, values.detach() + 0.1, 0.2)
    else:
        loss = value_loss(values, returns)
    grads = _grads(loss, policy)
    for p in policy.critic_parameters():
        assert _nonzero(grads[id(p)]), p.shape
    for p in policy.actor_parameters():
        assert grads[id(p)] is None, p.shape


@pytest.mark.parametrize("spec", SPECS)
def test_evaluate_actions_combined_loss_backward_isolation(spec):
    """Via .backward() and .grad as the optimizer sees them."""
    policy = _make(spec)
    obs, actions = _batch(policy)
    logp, ent, values = policy.evaluate_actions(obs, actions)
    assert logp.shape == ent.shape == values.shape == (obs.shape[0],)
    (-logp.mean()).backward()
    assert all(_zero_or_none(p.grad) for p in policy.critic_parameters())
    assert all(_nonzero(p.grad) for p in policy.actor_parameters())
    policy.zero_grad(set_to_none=True)
    value_loss(values, torch.zeros_like(values) + 1.0).backward()
    assert all(_zero_or_none(p.grad) for p in policy.actor_parameters())
    assert all(_nonzero(p.grad) for p in policy.critic_parameters())


@pytest.mark.parametrize("spec", SPECS)
def test_shared_trunk_in_both_groups_heads_exclusive(spec):
    policy = _make(spec, shared_trunk=True)
    assert policy.actor_trunk is policy.critic_trunk
    trunk = _ids(policy.actor_trunk.parameters())
    actor, critic = _ids(policy.actor_parameters()), _ids(policy.critic_parameters())
    assert trunk <= actor and trunk <= critic
    assert actor & critic == trunk
    policy_head = _ids(policy.policy_head.parameters())
    value_head = _ids(policy.value_head.parameters())
    assert policy_head <= actor and policy_head.isdisjoint(critic)
    assert value_head <= critic and value_head.isdisjoint(actor)
    if spec.kind == "box":
        assert id(policy.log_std) in actor and id(policy.log_std) not in critic
    assert actor | critic == _ids(policy.parameters())

    # gradients: the heads stay exclusive, the trunk hears from both losses
    obs, actions = _batch(policy)
    g_actor = _grads(-policy.dist(obs).log_prob(actions).mean(), policy)
    g_critic = _grads(value_loss(policy.value(obs), torch.ones(obs.shape[0])), policy)
    for pid in value_head:
        assert g_actor[pid] is None
    for pid in actor - trunk:
        assert g_critic[pid] is None
    for pid in trunk:
        assert _nonzero(g_actor[pid]) and _nonzero(g_critic[pid])


# --- orthogonal init ---------------------------------------------------------------------


def _assert_orthogonal(w: torch.Tensor, gain: float, atol: float = 1e-5):
    """W W^T = gain^2 I if rows <= cols, else W^T W = gain^2 I."""
    w = w.detach().double()
    m = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
    torch.testing.assert_close(m, gain**2 * torch.eye(m.shape[0], dtype=torch.float64),
                               rtol=0, atol=atol * max(gain**2, 1e-4) * 10)


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("seed", [0, 1])
def test_orthogonal_init_gains_and_zero_biases(spec, seed):
    policy = _make(spec, seed=seed)
    for trunk in (policy.actor_trunk, policy.critic_trunk):
        linears = [m for m in trunk if isinstance(m, nn.Linear)]
        assert [tuple(m.weight.shape) for m in linears] == [(64, OBS_DIM), (64, 64)]
        # square hidden layer: W W^T = 2 I
        w = linears[1].weight.detach().double()
        torch.testing.assert_close(w @ w.T, 2.0 * torch.eye(64, dtype=torch.float64),
                                   rtol=0, atol=1e-5)
        # first layer (64 x 4): orthogonal columns with gain sqrt 2
        _assert_orthogonal(linears[0].weight, math.sqrt(2.0))
        for m in linears:
            assert torch.count_nonzero(m.bias) == 0
    # policy head: rows of norm 0.01 and mutually orthogonal
    n_out = spec.n if spec.kind == "discrete" else spec.dim
    wp = policy.policy_head.weight
    assert tuple(wp.shape) == (n_out, 64)
    torch.testing.assert_close(wp.detach().double().norm(dim=1),
                               torch.full((n_out,), 0.01, dtype=torch.float64),
                               rtol=1e-4, atol=0)
    _assert_orthogonal(wp, 0.01)
    # value head: a single row of norm 1
    wv = policy.value_head.weight
    assert tuple(wv.shape) == (1, 64)
    assert float(wv.detach().double().norm()) == pytest.approx(1.0, rel=1e-5)
    _assert_orthogonal(wv, 1.0)
    assert torch.count_nonzero(policy.policy_head.bias) == 0
    assert torch.count_nonzero(policy.value_head.bias) == 0


@pytest.mark.parametrize("log_std_init", [0.0, -0.5, 0.7])
def test_log_std_initialised_and_state_independent(log_std_init):
    policy = _make(BOX, log_std_init=log_std_init)
    assert isinstance(policy.log_std, nn.Parameter)
    torch.testing.assert_close(policy.log_std.detach(), torch.full((2,), log_std_init))
    obs = 10.0 * torch.randn(50, OBS_DIM)
    d = policy.dist(obs)
    assert isinstance(d, DiagGaussian)
    assert d.mean.shape == (50, 2)
    torch.testing.assert_close(d.log_std, torch.full((50, 2), log_std_init))
    torch.testing.assert_close(d.std, torch.full((50, 2), math.exp(log_std_init)))
    # the mean does depend on the state
    assert float(d.mean.detach().std(0).min()) > 0


@pytest.mark.parametrize("n", [2, 3, 6])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_initial_categorical_policy_near_uniform(n, seed):
    policy = _make(ActionSpec("discrete", n=n), seed=seed)
    g = torch.Generator().manual_seed(100 + seed)
    obs = 3.0 * torch.randn(500, OBS_DIM, generator=g)
    with torch.no_grad():
        d = policy.dist(obs)
    assert isinstance(d, Categorical)
    assert d.probs.shape == (500, n)
    assert float((d.probs - 1.0 / n).abs().max()) < 0.02


def test_kwargs_round_trip_rebuilds_same_network():
    for spec in (DISCRETE, BOX):
        for shared in (False, True):
            policy = _make(spec, shared_trunk=shared, hidden_sizes=(32, 16), activation="relu")
            clone = ActorCritic.from_kwargs(policy.kwargs())
            clone.load_state_dict(policy.state_dict())
            assert clone.action == policy.action and clone.shared_trunk == shared
            obs = torch.randn(8, OBS_DIM)
            with torch.no_grad():
                torch.testing.assert_close(clone.value(obs), policy.value(obs))
                a, b = clone.dist(obs), policy.dist(obs)
                torch.testing.assert_close(a.mode().double(), b.mode().double())


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_sample_step_equals_dist_sample_log_prob_value(spec, activation):
    """The rollout's fused forward draws the same action from the same random state and gives
    the same log-prob and value as dist(obs).sample(), .log_prob(), value(obs), bit for bit."""
    torch.manual_seed(0)
    pol = ActorCritic(3, spec, (16, 8), activation)
    obs = torch.randn(7, 3)
    torch.manual_seed(1)
    a1, lp1, v1 = pol.sample_step(obs)
    torch.manual_seed(1)
    with torch.no_grad():
        d = pol.dist(obs)
        a2 = d.sample()
        lp2, v2 = d.log_prob(a2), pol.value(obs)
    assert torch.equal(a1, a2) and torch.equal(lp1, lp2) and torch.equal(v1, v2)
