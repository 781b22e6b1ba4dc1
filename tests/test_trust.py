"""TRPO's second-order pieces against explicit matrices and the chapter's numbers."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.func import functional_call
from torch.nn.utils import parameters_to_vector

from trustrl.maths.distributions import Categorical
from trustrl.maths.trust import (
    AdaptiveKL,
    backtracking_line_search,
    conjugate_gradient,
    fisher_vector_product,
    mean_kl,
)
from trustrl.maths.trust.fisher import detached
from trustrl.nets.policies import ActionSpec, ActorCritic

F64 = torch.float64


# --- conjugate gradient -------------------------------------------------------------------
def random_spd(n: int, cond: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    Q = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=F64))[0]
    A = Q @ torch.diag(torch.logspace(0, math.log10(cond), n, dtype=F64)) @ Q.T
    return (A + A.T) / 2, torch.randn(n, generator=g, dtype=F64)


@pytest.mark.parametrize("n", [2, 3, 5, 10, 20, 50])
@pytest.mark.parametrize("seed", [0, 1])
def test_cg_solves_random_spd_systems_within_n_iterations(n, seed):
    A, b = random_spd(n, cond=10.0, seed=100 * n + seed)
    calls = []

    def Avp(v):
        calls.append(1)
        return A @ v

    res = conjugate_gradient(Avp, b, iters=n, residual_tol=1e-30)
    x_true = torch.linalg.solve(A, b)
    assert torch.linalg.norm(res.x - x_true) / torch.linalg.norm(x_true) < 1e-6
    assert res.iterations <= n and len(calls) == res.iterations


def test_cg_ill_conditioned_needs_more_than_n_in_floating_point():
    """Exact arithmetic finishes in n steps; in float64 the search directions lose conjugacy
    on a condition number of 100, and CG needs a few more iterations (still converges)."""
    A, b = random_spd(20, cond=100.0, seed=20)
    x_true = torch.linalg.solve(A, b)
    err = lambda k: float(  # noqa: E731
        (conjugate_gradient(lambda v: A @ v, b, k, 1e-30).x - x_true).norm() / x_true.norm())
    assert err(40) < 1e-12 < err(20)


def test_cg_zero_rhs_returns_zero_without_products():
    res = conjugate_gradient(lambda v: pytest.fail("no product needed"), torch.zeros(4), 10)
    assert torch.equal(res.x, torch.zeros(4)) and res.iterations == 0 and res.residual == 0.0


def test_cg_first_iterate_is_along_b():
    A = torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=F64)
    b = torch.tensor([1.0, 2.0], dtype=F64)
    x1 = conjugate_gradient(lambda v: A @ v, b, iters=1).x
    assert abs(torch.dot(x1, b) / (x1.norm() * b.norm()) - 1) < 1e-12


# --- Fisher-vector products ---------------------------------------------------------------
def small_policy(kind: str) -> ActorCritic:
    torch.manual_seed(0)
    action = (ActionSpec("discrete", n=3) if kind == "discrete"
              else ActionSpec("box", dim=2, low=(-1, -1), high=(1, 1)))
    pol = ActorCritic(3, action, hidden_sizes=(4,), log_std_init=-0.3).double()
    with torch.no_grad():  # move away from the tiny-head init so F is not near zero
        pol.policy_head.weight.normal_(0, 0.7, generator=torch.Generator().manual_seed(1))
    return pol


class _DistOf(nn.Module):
    """Wraps a policy so that torch.func.functional_call can swap its parameters."""

    def __init__(self, pol: ActorCritic):
        super().__init__()
        self.pol = pol

    def forward(self, obs):
        return self.pol.dist(obs)


def actor_functions(pol: ActorCritic, obs: torch.Tensor):
    """theta (flat actor parameters, in actor_parameters() order) -> the policy's dist."""
    actor = list(pol.actor_parameters())
    names = [next(n for n, q in pol.named_parameters() if q is p) for p in actor]
    wrapper = _DistOf(pol)

    def dist(flat):
        params, i = {}, 0
        for n, p in zip(names, actor, strict=True):
            params[f"pol.{n}"] = flat[i:i + p.numel()].reshape(p.shape)
            i += p.numel()
        return functional_call(wrapper, params, (obs,), strict=False)

    return dist


def explicit_fisher(pol: ActorCritic, obs: torch.Tensor, kind: str) -> torch.Tensor:
    """E_s E_{a~pi}[grad log pi grad log pi^T] over the actor's flat parameters."""
    theta = parameters_to_vector(list(pol.actor_parameters())).detach()
    dist = actor_functions(pol, obs)
    n_states = obs.shape[0]
    if kind == "discrete":
        logits = lambda th: dist(th).logits  # noqa: E731  [S, A], normalised log-probs
        J = torch.autograd.functional.jacobian(logits, theta)  # [S, A, P]
        probs = dist(theta).probs.detach()
        F = torch.einsum("sa,sap,saq->pq", probs, J, J)
        return F / n_states
    mean = lambda th: dist(th).mean  # noqa: E731
    log_std = lambda th: dist(th).log_std  # noqa: E731
    Jm = torch.autograd.functional.jacobian(mean, theta)  # [S, D, P]
    Js = torch.autograd.functional.jacobian(log_std, theta)
    inv_var = torch.exp(-2 * dist(theta).log_std.detach())  # [S, D]
    F = torch.einsum("sd,sdp,sdq->pq", inv_var, Jm, Jm) + 2 * torch.einsum("sdp,sdq->pq", Js, Js)
    return F / n_states


def kl_hessian(pol: ActorCritic, obs: torch.Tensor) -> torch.Tensor:
    theta = parameters_to_vector(list(pol.actor_parameters())).detach()
    dist = actor_functions(pol, obs)
    old = detached(dist(theta))
    return torch.autograd.functional.hessian(lambda th: mean_kl(old, dist(th)), theta)


@pytest.mark.parametrize("kind", ["discrete", "box"])
def test_fvp_equals_explicit_fisher_and_kl_hessian(kind):
    pol = small_policy(kind)
    obs = torch.randn(7, 3, dtype=F64, generator=torch.Generator().manual_seed(2))
    actor = list(pol.actor_parameters())
    old = detached(pol.dist(obs))
    fvp = fisher_vector_product(mean_kl(old, pol.dist(obs)), actor, damping=0.0)
    F = explicit_fisher(pol, obs, kind)
    H = kl_hessian(pol, obs)
    assert torch.allclose(F, H, atol=1e-10)  # the information identity
    g = torch.Generator().manual_seed(3)
    for _ in range(3):
        v = torch.randn(F.shape[0], dtype=F64, generator=g)
        assert torch.allclose(fvp(v), F @ v, atol=1e-5, rtol=0)
    damped = fisher_vector_product(mean_kl(old, pol.dist(obs)), actor, damping=0.1)
    assert torch.allclose(damped(v), F @ v + 0.1 * v, atol=1e-5, rtol=0)


def test_fvp_reaches_actor_parameters_only():
    pol = small_policy("box")
    obs = torch.randn(5, 3, dtype=F64)
    actor = list(pol.actor_parameters())
    n_actor = sum(p.numel() for p in actor)
    fvp = fisher_vector_product(mean_kl(detached(pol.dist(obs)), pol.dist(obs)), actor)
    assert fvp(torch.ones(n_actor, dtype=F64)).shape == (n_actor,)
    for p in pol.critic_parameters():
        assert p.grad is None


@pytest.mark.parametrize("kind", ["discrete", "box"])
def test_kl_over_quadratic_form_tends_to_one(kind):
    pol = small_policy(kind)
    obs = torch.randn(6, 3, dtype=F64, generator=torch.Generator().manual_seed(4))
    actor = list(pol.actor_parameters())
    theta = parameters_to_vector(actor).detach()
    old = detached(pol.dist(obs))
    F = explicit_fisher(pol, obs, kind)
    v = torch.randn(theta.shape[0], dtype=F64, generator=torch.Generator().manual_seed(5))
    dist = actor_functions(pol, obs)
    errors = []
    for t in (1e-1, 1e-2, 1e-3):
        kl = float(mean_kl(old, dist(theta + t * v)))
        errors.append(abs(kl / (0.5 * t * t * float(v @ F @ v)) - 1))
    assert errors[0] > errors[1] > errors[2] and errors[2] < 1e-2, errors


# --- the chapter's one-parameter policy -----------------------------------------------------
class Sigmoid(nn.Module):
    """pi(right) = sigmoid(theta) as a two-logit softmax (0, theta)."""

    def __init__(self, theta: float):
        super().__init__()
        self.theta = nn.Parameter(torch.tensor([theta], dtype=F64))

    def dist(self) -> Categorical:
        return Categorical(torch.cat([torch.zeros(1, dtype=F64), self.theta])[None])


@pytest.mark.parametrize("theta,step,kl", [(0, 0.283, 0.0100), (2, 0.436, 0.0090),
                                            (4, 1.064, 0.0073)])
def test_natural_step_table_at_delta_0_01(theta, step, kl):
    pol = Sigmoid(theta)
    old = detached(pol.dist())
    fvp = fisher_vector_product(mean_kl(old, pol.dist()), [pol.theta])
    F = float(fvp(torch.ones(1, dtype=F64)))
    s = 1 / (1 + math.exp(-theta))
    assert F == pytest.approx(s * (1 - s), rel=1e-12)
    g = s * (1 - s)  # J = sigma(theta): right pays 1, left 0
    x = conjugate_gradient(fvp, torch.tensor([g], dtype=F64), iters=1).x  # F^-1 g = 1
    assert float(x) == pytest.approx(1.0, rel=1e-12)
    delta_theta = math.sqrt(2 * 0.01 / float(x * fvp(x)))  # sqrt(2 delta / x^T F x) * x
    assert round(delta_theta, 3) == step
    with torch.no_grad():
        pol.theta += delta_theta
    with torch.no_grad():
        assert round(float(old.kl(pol.dist())), 4) == kl


def test_exercise_9_5c_natural_vs_plain_steps_to_0_99():
    def natural_steps():
        theta, n = 0.0, 0
        while 1 / (1 + math.exp(-theta)) < 0.99:
            pol = Sigmoid(theta)
            fvp = fisher_vector_product(mean_kl(detached(pol.dist()), pol.dist()), [pol.theta])
            theta += math.sqrt(2 * 0.01 / float(fvp(torch.ones(1, dtype=F64))))
            n += 1
        return n

    def plain_steps():
        theta, n = 0.0, 0
        while (s := 1 / (1 + math.exp(-theta))) < 0.99:
            theta += 1.0 * s * (1 - s)
            n += 1
        return n

    assert (natural_steps(), plain_steps()) == (11, 107)


# --- adaptive KL ----------------------------------------------------------------------------
def test_adaptive_kl_halves_doubles_and_holds():
    c = AdaptiveKL(beta=1.0, target=0.01)
    assert c.update(0.01 / 1.5 - 1e-9) == 0.5  # below d_targ / 1.5: halve
    assert c.update(0.01 / 1.5) == 0.5  # on the threshold: hold
    assert c.update(0.01) == 0.5
    assert c.update(0.015) == 0.5  # on 1.5 d_targ: hold
    assert c.update(0.015 + 1e-9) == 1.0  # above: double
    assert c.update(1.0) == 2.0
    assert c.update(0.0) == 1.0
    with pytest.raises(ValueError):
        AdaptiveKL(1.0, 0.0)


# --- line search ----------------------------------------------------------------------------
def test_line_search_accepts_shrinks_and_rejects():
    pol = Sigmoid(0.0)
    old = detached(pol.dist())
    params = [pol.theta]

    def evaluate():  # surrogate of "right pays 1": rho(right) * A with A = 1 for right
        with torch.no_grad():
            return float(pol.dist().probs[0, 1] / old.probs[0, 1] * 0.5), \
                float(old.kl(pol.dist()))

    L_old = evaluate()[0]
    ok = backtracking_line_search(params, torch.tensor([0.2], dtype=F64), evaluate, L_old, 0.01)
    assert ok.accepted and ok.steps_tried == 1 and ok.step_fraction == 1.0 and ok.kl <= 0.01
    pol.theta.data.zero_()
    big = backtracking_line_search(params, torch.tensor([5.0], dtype=F64), evaluate, L_old, 0.01)
    assert big.accepted and big.steps_tried > 1 and big.kl <= 0.01
    assert float(pol.theta.detach()) == pytest.approx(5.0 * 0.5 ** (big.steps_tried - 1))
    pol.theta.data.zero_()
    bad = backtracking_line_search(params, torch.tensor([-0.2], dtype=F64), evaluate, L_old,
                                   0.01, max_backtracks=8)
    assert not bad.accepted and bad.steps_tried == 8 and float(pol.theta.detach()) == 0.0


def test_pi_old_does_not_move_when_the_parameters_change_in_place():
    """Regression: pi_old's log-std was a detached *view* of the parameter, so an in-place
    optimizer step moved it too and KL(pi_old || pi) missed the change of the std."""
    from trustrl.maths.trust.fisher import detached
    from trustrl.nets.policies import ActionSpec, ActorCritic

    torch.manual_seed(0)
    pol = ActorCritic(3, ActionSpec("box", dim=2, low=(-1, -1), high=(1, 1)))
    obs = torch.randn(5, 3)
    old = detached(pol.dist(obs))
    before = old.log_std.clone()  # type: ignore[union-attr]
    with torch.no_grad():
        pol.log_std.add_(0.5)  # type: ignore[union-attr]
    assert torch.equal(old.log_std, before)  # type: ignore[union-attr]
    # the KL now sees the std change: 2 dims * 0.5 * (e^-1 - 1 + 1) = e^-1 (no mean change)
    with torch.no_grad():
        kl = old.kl(pol.dist(obs)).mean()  # type: ignore[arg-type]
    assert abs(float(kl) - math.exp(-1.0)) < 1e-6
