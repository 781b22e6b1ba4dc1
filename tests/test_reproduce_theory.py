"""trustrl.experiments.tabular against brute force, and the theory claims at quick scale."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trustrl.experiments import claims_theory
from trustrl.experiments.registry import REGISTRY, REPRODUCED, Context
from trustrl.experiments.tabular import (
    DTYPE,
    TabularMDP,
    action_values,
    advantages,
    discounted_visitation,
    fisher,
    kl_per_state,
    mean_kl,
    normalised_visitation,
    objective,
    old_policy_terms,
    policy,
    random_logits,
    random_mdp,
    state_distributions,
    state_values,
    surrogate,
    transition_matrix,
    truncation_horizon,
)


@pytest.fixture(params=[0, 1, 2])
def case(request) -> tuple[TabularMDP, torch.Tensor, np.random.Generator]:
    """A random MDP (gamma 0.9) and random logits, three seeds."""
    rng = np.random.default_rng(100 + request.param)
    mdp = random_mdp(int(rng.integers(3, 7)), int(rng.integers(2, 5)), 0.9, rng)
    return mdp, random_logits(mdp.n_states, mdp.n_actions, rng), rng


def test_random_mdp_is_a_valid_mdp(case) -> None:
    mdp, theta, _ = case
    assert mdp.P.dtype == DTYPE
    torch.testing.assert_close(mdp.P.sum(-1), torch.ones(mdp.n_states, mdp.n_actions,
                                                          dtype=DTYPE))
    assert float(mdp.mu.sum()) == pytest.approx(1.0)
    torch.testing.assert_close(policy(theta).sum(-1), torch.ones(mdp.n_states, dtype=DTYPE))


def test_mdp_rejects_bad_shapes_and_gamma() -> None:
    P = torch.full((2, 2, 2), 0.5, dtype=DTYPE)
    with pytest.raises(ValueError, match="shapes"):
        TabularMDP(P, torch.zeros(2, 3, dtype=DTYPE), torch.ones(2, dtype=DTYPE) / 2, 0.9)
    with pytest.raises(ValueError, match="gamma"):
        TabularMDP(P, torch.zeros(2, 2, dtype=DTYPE), torch.ones(2, dtype=DTYPE) / 2, 1.0)


def test_state_values_match_iterated_bellman_equation(case) -> None:
    mdp, theta, _ = case
    pi = policy(theta)
    P_pi, r_pi = transition_matrix(mdp, pi), (pi * mdp.R).sum(-1)
    V = torch.zeros(mdp.n_states, dtype=DTYPE)
    for _ in range(500):  # contraction by 0.9 per sweep: 0.9^500 ~ 1e-23
        V = r_pi + mdp.gamma * P_pi @ V
    torch.testing.assert_close(state_values(mdp, pi), V, rtol=0, atol=1e-12)


def test_q_and_advantages_are_consistent(case) -> None:
    mdp, theta, _ = case
    pi = policy(theta)
    Q, V, A = action_values(mdp, pi), state_values(mdp, pi), advantages(mdp, pi)
    torch.testing.assert_close((pi * Q).sum(-1), V, rtol=0, atol=1e-12)  # V = E_pi[Q]
    torch.testing.assert_close(A, Q - V[:, None], rtol=0, atol=1e-12)
    torch.testing.assert_close((pi * A).sum(-1), torch.zeros(mdp.n_states, dtype=DTYPE),
                               rtol=0, atol=1e-12)


def test_visitation_matches_sum_of_matrix_powers(case) -> None:
    mdp, theta, _ = case
    pi = policy(theta)
    P_pi = transition_matrix(mdp, pi)
    d, p = torch.zeros(mdp.n_states, dtype=DTYPE), mdp.mu.clone()
    for t in range(600):  # tail 0.9^600 / 0.1 ~ 1e-26
        d += mdp.gamma ** t * p
        p = p @ P_pi
    torch.testing.assert_close(discounted_visitation(mdp, pi), d, rtol=0, atol=1e-12)
    assert float(d.sum()) == pytest.approx(1 / (1 - mdp.gamma), rel=1e-12)
    torch.testing.assert_close(normalised_visitation(mdp, pi), d * (1 - mdp.gamma),
                               rtol=0, atol=1e-12)
    # the forward propagation gives the same p_t
    horizon = truncation_horizon(mdp.gamma)
    discounts = mdp.gamma ** torch.arange(horizon, dtype=DTYPE)
    torch.testing.assert_close(discounts @ state_distributions(mdp, pi, horizon), d,
                               rtol=0, atol=1e-11)


def test_truncation_horizon_leaves_a_small_tail() -> None:
    for gamma in (0.5, 0.9, 0.99):
        T = truncation_horizon(gamma)
        assert gamma ** T / (1 - gamma) <= 1e-13 < gamma ** (T - 1) / (1 - gamma)
    assert truncation_horizon(0.0) == 1


def test_objective_is_mu_dot_v_and_its_gradient_matches_finite_differences(case) -> None:
    mdp, theta, _ = case
    assert float(objective(mdp, theta)) == pytest.approx(
        float(mdp.mu @ state_values(mdp, policy(theta))), abs=1e-12)
    x = theta.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(objective(mdp, x), x)
    h = 1e-5  # central differences: error O(h^2) ~ 1e-10 times the third derivative
    fd = torch.zeros_like(theta)
    for idx in np.ndindex(*theta.shape):
        e = torch.zeros_like(theta)
        e[idx] = h
        fd[idx] = (objective(mdp, theta + e) - objective(mdp, theta - e)) / (2 * h)
    torch.testing.assert_close(grad, fd, rtol=0, atol=1e-7)


def test_surrogate_is_the_old_trajectory_sum_of_ratio_times_advantage(case) -> None:
    mdp, theta_old, rng = case
    theta = theta_old + random_logits(mdp.n_states, mdp.n_actions, rng)
    pi_old, pi = policy(theta_old), policy(theta)
    A_old = advantages(mdp, pi_old)
    horizon = truncation_horizon(mdp.gamma)
    p = state_distributions(mdp, pi_old, horizon)  # E_{tau ~ pi_old}: p_t^old(s) pi_old(a|s)
    rho = pi / pi_old
    brute = sum(mdp.gamma ** t * float((p[t][:, None] * pi_old * rho * A_old).sum())
                for t in range(horizon))
    assert float(surrogate(mdp, theta, theta_old)) == pytest.approx(brute, abs=1e-11)
    old = old_policy_terms(mdp, theta_old)
    assert float(surrogate(mdp, theta, theta_old, old)) == pytest.approx(brute, abs=1e-11)
    assert abs(float(surrogate(mdp, theta_old, theta_old))) < 1e-12


def test_kl_per_state_and_mean_kl_match_the_formula(case) -> None:
    mdp, theta_old, rng = case
    theta = theta_old + random_logits(mdp.n_states, mdp.n_actions, rng)
    p, q = policy(theta_old), policy(theta)
    kl = (p * (p.log() - q.log())).sum(-1)
    torch.testing.assert_close(kl_per_state(theta_old, theta), kl, rtol=0, atol=1e-13)
    w = normalised_visitation(mdp, p)
    assert float(mean_kl(mdp, theta_old, theta)) == pytest.approx(float(w @ kl), abs=1e-13)


def test_fisher_matches_explicit_expected_score_outer_product(case) -> None:
    mdp, theta, _ = case
    S, A = theta.shape
    pi, w = policy(theta), normalised_visitation(mdp, policy(theta))
    F = torch.zeros(S * A, S * A, dtype=DTYPE)
    for s in range(S):
        for a in range(A):
            x = theta.clone().requires_grad_(True)
            (score,) = torch.autograd.grad(torch.log_softmax(x, -1)[s, a], x)
            F += w[s] * pi[s, a] * torch.outer(score.reshape(-1), score.reshape(-1))
    torch.testing.assert_close(fisher(mdp, theta), F, rtol=0, atol=1e-14)


def test_one_thread_restores_the_thread_count() -> None:
    before = torch.get_num_threads()
    seen = []
    claims_theory._one_thread(lambda ctx: seen.append(torch.get_num_threads()))(None)
    assert seen == [1] and torch.get_num_threads() == before


@pytest.mark.parametrize("claim_id", ["000.theory.pdl", "000.theory.first-order",
                                      "000.theory.trpo-bound", "000.theory.kl-quadratic"])
def test_theory_claim_reproduced_at_quick_scale(claim_id: str, tmp_path) -> None:
    c = REGISTRY[claim_id]
    assert c.cost == "cheap" and c.source.startswith("000 · ")
    result = c.fn(Context(out=tmp_path, quick=True))
    assert result.checks and result.notes
    assert result.verdict == REPRODUCED, [ch for ch in result.checks if ch.verdict != REPRODUCED]
    for name in result.figures:
        assert (tmp_path / name).stat().st_size > 10_000
    if claim_id == "000.theory.first-order":
        assert result.figures == ["theory_first_order.png"]
