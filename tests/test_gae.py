"""GAE against the lambda-return written out from its definition."""

from __future__ import annotations

import pytest
import torch

from trustrl.maths.advantages import gae

F64 = torch.float64


def _random_rollout(seed: int, T: int = 14, N: int = 5, p_term: float = 0.15,
                    p_trunc: float = 0.15):
    """A [T, N] rollout whose next_values are consistent with values inside an episode.

    next_values[t] = values[t + 1] when step t did not end its episode and is not the last
    row; on done steps and on the last row it is V(final observation), drawn independently
    (on terminated steps it must be ignored).
    """
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(T, N, generator=g, dtype=F64)
    values = torch.randn(T, N, generator=g, dtype=F64)
    terminated = torch.rand(T, N, generator=g) < p_term
    truncated = torch.rand(T, N, generator=g) < p_trunc
    final_values = 5.0 * torch.randn(T, N, generator=g, dtype=F64)
    done = terminated | truncated
    next_values = final_values.clone()
    next_values[:-1] = torch.where(done[:-1], final_values[:-1], values[1:])
    # make sure both kinds of boundary occur
    assert terminated.any() and truncated.any()
    return rewards, values, next_values, terminated, truncated


def _segment_end(done: torch.Tensor, t: int, n: int) -> int:
    T = done.shape[0]
    e = t
    while e < T - 1 and not bool(done[e, n]):
        e += 1
    return e


def _brute_force_lambda_advantages(rewards, values, next_values, terminated, truncated,
                                   gamma, lam):
    """A_t = G_t^lambda - V(s_t), G_t^lambda = (1-lam) sum_n lam^(n-1) G_t^(n).

    G_t^(n) = sum_{k<n} gamma^k r_{t+k} + gamma^n V(s_{t+n}).  The episode segment that t
    belongs to ends at e (a terminated or truncated step, or the last row of the rollout);
    every n-step return that would cross e is the full return to e, bootstrapped with
    next_values[e] unless step e terminated.  With H = e - t + 1 this leaves
    G^lambda = (1-lam) sum_{n=1}^{H-1} lam^(n-1) G^(n) + lam^(H-1) G^(H).
    """
    T, N = rewards.shape
    done = terminated.bool() | truncated.bool()
    adv = torch.zeros(T, N, dtype=F64)
    for n in range(N):
        for t in range(T):
            e = _segment_end(done, t, n)
            H = e - t + 1

            def n_step(m: int, t: int = t, n: int = n, e: int = e) -> float:
                g = sum(gamma**k * float(rewards[t + k, n]) for k in range(m))
                j = t + m - 1  # last step included
                if j < e:
                    boot = float(values[j + 1, n])
                else:
                    boot = 0.0 if bool(terminated[e, n]) else float(next_values[e, n])
                return g + gamma**m * boot

            g_lam = sum((1.0 - lam) * lam ** (m - 1) * n_step(m) for m in range(1, H))
            g_lam += lam ** (H - 1) * n_step(H)
            adv[t, n] = g_lam - float(values[t, n])
    return adv


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("lam", [0.0, 0.5, 0.95, 1.0])
def test_gae_matches_brute_force_lambda_return(seed, lam):
    gamma = 0.97
    r, v, nv, term, trunc = _random_rollout(seed)
    adv, ret = gae(r, v, nv, term, trunc, gamma, lam)
    expected = _brute_force_lambda_advantages(r, v, nv, term, trunc, gamma, lam)
    assert adv.shape == ret.shape == r.shape
    assert adv.dtype == F64
    torch.testing.assert_close(adv, expected, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(ret, adv + v, rtol=0, atol=0)


def test_gae_flags_may_be_float_or_bool():
    r, v, nv, term, trunc = _random_rollout(10)
    a_bool, _ = gae(r, v, nv, term, trunc, 0.99, 0.9)
    a_float, _ = gae(r, v, nv, term.to(F64), trunc.to(F64), 0.99, 0.9)
    torch.testing.assert_close(a_bool, a_float, rtol=0, atol=0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lambda_zero_gives_one_step_td_errors(seed):
    gamma = 0.9
    r, v, nv, term, trunc = _random_rollout(seed)
    adv, _ = gae(r, v, nv, term, trunc, gamma, 0.0)
    delta = r + gamma * (1.0 - term.to(F64)) * nv - v
    torch.testing.assert_close(adv, delta, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lambda_one_gives_discounted_returns_minus_values(seed):
    gamma = 0.95
    r, v, nv, term, trunc = _random_rollout(seed)
    T, N = r.shape
    adv, ret = gae(r, v, nv, term, trunc, gamma, 1.0)
    done = term | trunc
    expected = torch.zeros(T, N, dtype=F64)
    for n in range(N):
        for t in range(T):
            e = _segment_end(done, t, n)
            g = sum(gamma ** (k - t) * float(r[k, n]) for k in range(t, e + 1))
            if not bool(term[e, n]):
                g += gamma ** (e - t + 1) * float(nv[e, n])
            expected[t, n] = g
    torch.testing.assert_close(ret, expected, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(adv, expected - v, rtol=1e-10, atol=1e-10)


def test_gae_hand_case_one_env():
    """T = 3, one env: step 0 continues, step 1 is truncated (bootstrap 4.0), step 2 is the
    last row and terminates (no bootstrap)."""
    gamma, lam = 0.5, 0.5
    r = torch.tensor([[1.0], [2.0], [3.0]], dtype=F64)
    v = torch.tensor([[0.5], [1.0], [2.0]], dtype=F64)
    nv = torch.tensor([[1.0], [4.0], [100.0]], dtype=F64)
    term = torch.tensor([[False], [False], [True]])
    trunc = torch.tensor([[False], [True], [False]])
    adv, ret = gae(r, v, nv, term, trunc, gamma, lam)
    d2 = 3.0 - 2.0  # terminated: next value ignored
    d1 = 2.0 + 0.5 * 4.0 - 1.0  # truncated: bootstrap with V(final obs)
    d0 = 1.0 + 0.5 * 1.0 - 0.5
    a2, a1 = d2, d1  # trace cut at step 1
    a0 = d0 + gamma * lam * a1
    torch.testing.assert_close(adv, torch.tensor([[a0], [a1], [a2]], dtype=F64))
    torch.testing.assert_close(ret, adv + v)


def test_gae_truncation_differs_from_termination_only_in_bootstrap():
    gamma, lam = 0.99, 0.95
    r, v, nv, term, trunc = _random_rollout(4)
    # the same step marked truncated vs terminated: the advantage there differs by exactly
    # gamma * next_value (the bootstrap), later rows not at all (the trace is cut either way)
    t0 = 5
    term = term.clone()
    trunc = trunc.clone()
    term[t0] = False
    trunc[t0] = True
    a_trunc, _ = gae(r, v, nv, term, trunc, gamma, lam)
    term2, trunc2 = term.clone(), trunc.clone()
    term2[t0] = True
    trunc2[t0] = False
    a_term, _ = gae(r, v, nv, term2, trunc2, gamma, lam)
    torch.testing.assert_close(a_trunc[t0] - a_term[t0], gamma * nv[t0])
    torch.testing.assert_close(a_trunc[t0 + 1:], a_term[t0 + 1:], rtol=0, atol=0)


def test_returns_equal_advantages_plus_values():
    r, v, nv, term, trunc = _random_rollout(7, T=32, N=8)
    adv, ret = gae(r, v, nv, term, trunc, 0.99, 0.95)
    torch.testing.assert_close(ret, adv + v, rtol=0, atol=0)
    # the inputs are left untouched
    r2, v2, nv2, term2, trunc2 = _random_rollout(7, T=32, N=8)
    assert torch.equal(r, r2) and torch.equal(v, v2) and torch.equal(nv, nv2)
    assert torch.equal(term, term2) and torch.equal(trunc, trunc2)
