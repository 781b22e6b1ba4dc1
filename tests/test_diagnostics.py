"""Approx KL, clip fraction, explained variance and ratio stats: Exercise 9.4 and definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from trustrl.maths.diagnostics import (
    RATIO_QUANTILES,
    approx_kl,
    clip_fraction,
    explained_variance,
    kl_k1,
    kl_k3,
    ratio_stats,
)
from trustrl.maths.distributions import Categorical

F64 = torch.float64
PI_OLD = (0.5, 0.3, 0.2)
PI_NEW = (0.4, 0.4, 0.2)


def _cat(p: tuple[float, ...]) -> Categorical:
    return Categorical(torch.log(torch.tensor([p], dtype=F64)))


# --- Exercise 9.4 ------------------------------------------------------------------------


def test_exercise_9_4_a_exact_kl_both_directions():
    old, new = _cat(PI_OLD), _cat(PI_NEW)
    by_hand_fwd = sum(p * math.log(p / q) for p, q in zip(PI_OLD, PI_NEW, strict=True))
    by_hand_rev = sum(q * math.log(q / p) for p, q in zip(PI_OLD, PI_NEW, strict=True))
    assert by_hand_fwd == pytest.approx(0.02527, abs=1e-5)
    assert by_hand_rev == pytest.approx(0.02582, abs=1e-5)
    kl_fwd = old.kl(new)
    kl_rev = new.kl(old)
    assert kl_fwd.shape == (1,)
    assert float(kl_fwd) == pytest.approx(by_hand_fwd, abs=1e-12)
    assert float(kl_rev) == pytest.approx(by_hand_rev, abs=1e-12)
    assert float(kl_fwd) == pytest.approx(0.02527, abs=1e-5)
    assert float(kl_rev) == pytest.approx(0.02582, abs=1e-5)
    # asymmetric, but close for a small change
    assert float(kl_fwd) != pytest.approx(float(kl_rev), abs=1e-4)
    assert abs(float(kl_fwd) / float(kl_rev) - 1.0) < 0.03


def test_exercise_9_4_b_second_order_fisher_approximation():
    dpi = [q - p for p, q in zip(PI_OLD, PI_NEW, strict=True)]
    fisher = 0.5 * sum(d * d / p for d, p in zip(dpi, PI_OLD, strict=True))
    assert fisher == pytest.approx(0.02667, abs=1e-5)
    exact = float(_cat(PI_OLD).kl(_cat(PI_NEW)))
    # about 5% above the exact value (third-order term)
    assert fisher > exact
    assert fisher / exact - 1.0 == pytest.approx(0.055, abs=0.01)


def _exercise_log_ratios() -> torch.Tensor:
    return torch.log(torch.tensor(PI_NEW, dtype=F64) / torch.tensor(PI_OLD, dtype=F64))


def test_exercise_9_4_c_per_action_estimators():
    log_ratio = _exercise_log_ratios()
    torch.testing.assert_close(torch.exp(log_ratio), torch.tensor([0.8, 4 / 3, 1.0], dtype=F64))
    k1 = kl_k1(log_ratio)
    k3 = kl_k3(log_ratio)
    table_k1 = torch.tensor([0.2231, -0.2877, 0.0], dtype=F64)
    table_k3 = torch.tensor([0.0231, 0.0457, 0.0], dtype=F64)
    torch.testing.assert_close(k1, table_k1, atol=1e-4, rtol=0)
    torch.testing.assert_close(k3, table_k3, atol=1e-4, rtol=0)
    # exact forms
    rho = torch.exp(log_ratio)
    torch.testing.assert_close(k1, -torch.log(rho))
    torch.testing.assert_close(k3, (rho - 1.0) - torch.log(rho))
    # k1 is negative for action 2; k3 never is
    assert float(k1[1]) < 0
    assert torch.all(k3 >= 0)


def test_exercise_9_4_c_weighted_averages_equal_exact_kl():
    log_ratio = _exercise_log_ratios()
    w = torch.tensor(PI_OLD, dtype=F64)
    exact = float(_cat(PI_OLD).kl(_cat(PI_NEW)))
    avg_k1 = float((w * kl_k1(log_ratio)).sum())
    avg_k3 = float((w * kl_k3(log_ratio)).sum())
    assert avg_k1 == pytest.approx(0.0253, abs=1e-4)
    assert avg_k3 == pytest.approx(0.0253, abs=1e-4)
    # both unbiased: the weighted averages are the KL exactly (E_old[rho] = 1)
    assert avg_k1 == pytest.approx(exact, abs=1e-12)
    assert avg_k3 == pytest.approx(exact, abs=1e-12)


def test_k3_nonnegative_on_random_log_ratios_and_k1_sometimes_negative():
    g = torch.Generator().manual_seed(0)
    log_ratio = 3.0 * torch.randn(100_000, generator=g, dtype=F64)
    log_ratio[:3] = torch.tensor([0.0, -1e-12, 1e-12], dtype=F64)
    assert torch.all(kl_k3(log_ratio) >= 0)
    assert torch.any(kl_k1(log_ratio) < 0)
    # float32 too
    assert torch.all(kl_k3(log_ratio.float()) >= 0)
    assert float(kl_k3(torch.zeros(1))) == 0.0


def test_approx_kl_monte_carlo_converges_to_exact_kl():
    """Actions drawn from pi_old: both estimators are sample means of the per-sample terms.

    n = 200k samples. Per-sample standard deviations are about 0.22 (k1) and 0.016 (k3), so the
    standard errors are about 5e-4 and 4e-5; we allow 5 standard errors, computed from the
    sample itself (a fixed seed makes the test deterministic).
    """
    n = 200_000
    g = torch.Generator().manual_seed(2024)
    old, new = _cat(PI_OLD), _cat(PI_NEW)
    actions = torch.multinomial(old.probs.expand(n, 3), 1, generator=g).squeeze(-1)
    log_ratio = new.logits[0, actions] - old.logits[0, actions]
    exact = float(old.kl(new))
    for est, fn in (("k1", kl_k1), ("k3", kl_k3)):
        per = fn(log_ratio)
        se = float(per.std()) / math.sqrt(n)
        got = approx_kl(log_ratio, est)
        assert isinstance(got, float)
        assert got == pytest.approx(float(per.mean()), abs=1e-12)
        assert abs(got - exact) < 5 * se, (est, got, exact, se)
    # the k3 standard error is much smaller than k1's
    assert float(kl_k3(log_ratio).std()) < 0.2 * float(kl_k1(log_ratio).std())


def test_approx_kl_default_is_k3_and_unknown_estimator_raises():
    log_ratio = _exercise_log_ratios()
    assert approx_kl(log_ratio) == pytest.approx(float(kl_k3(log_ratio).mean()), abs=1e-15)
    with pytest.raises(ValueError):
        approx_kl(log_ratio, "k2")


def test_approx_kl_needs_no_grad():
    log_ratio = torch.tensor([0.1, -0.2], dtype=F64, requires_grad=True)
    assert approx_kl(log_ratio, "k1") == pytest.approx(0.05, abs=1e-15)


# --- clip fraction -----------------------------------------------------------------------


def test_clip_fraction_known_ratios():
    ratio = torch.tensor([0.7, 0.85, 1.0, 1.19, 1.21, 1.5])
    assert clip_fraction(ratio, 0.2) == pytest.approx(3 / 6)
    assert clip_fraction(ratio.double(), 0.2) == pytest.approx(3 / 6)
    assert clip_fraction(ratio, 0.6) == 0.0
    assert clip_fraction(ratio, 0.01) == pytest.approx(5 / 6)
    assert isinstance(clip_fraction(ratio, 0.2), float)


def test_clip_fraction_boundary_not_clipped_float64_eps_0_2():
    ratio = torch.tensor([0.8, 1.2, 1.0], dtype=F64)
    assert clip_fraction(ratio, 0.2) == 0.0
    ratio = torch.tensor([0.8, 1.2, 0.79, 1.21], dtype=F64)
    assert clip_fraction(ratio, 0.2) == 0.5


def test_clip_fraction_band_edges_count_as_not_clipped_for_all_eps_and_dtypes():
    """A ratio equal to the clamp bound 1 +- eps (as the loss computes it) is inside the band:
    torch.clamp leaves it unchanged and passes its gradient.  clip_fraction should agree."""
    failures = []
    for eps in (0.1, 0.2, 0.3):
        for dtype in (torch.float32, torch.float64):
            ratio = torch.tensor([1.0 - eps, 1.0 + eps], dtype=dtype)
            # the loss's view: clamp does not move these values
            assert torch.equal(torch.clamp(ratio, 1.0 - eps, 1.0 + eps), ratio)
            got = clip_fraction(ratio, eps)
            if got != 0.0:
                failures.append((eps, str(dtype), got))
    assert failures == []


def test_clip_fraction_matches_clamp_on_random_ratios():
    """Away from the exact edges, clipped means 'clamp moved it'."""
    g = torch.Generator().manual_seed(5)
    ratio = torch.exp(0.3 * torch.randn(10_000, generator=g, dtype=F64))
    moved = (torch.clamp(ratio, 0.8, 1.2) != ratio).double().mean()
    assert clip_fraction(ratio, 0.2) == pytest.approx(float(moved), abs=1e-6)  # float32 mean


# --- explained variance ------------------------------------------------------------------


def test_explained_variance_perfect_constant_and_hand_case():
    y = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=F64)
    assert explained_variance(y.clone(), y) == pytest.approx(1.0, abs=1e-15)
    mean_pred = torch.full_like(y, float(y.mean()))
    assert explained_variance(mean_pred, y) == pytest.approx(0.0, abs=1e-15)
    # any constant prediction explains nothing
    assert explained_variance(torch.full_like(y, -7.0), y) == pytest.approx(0.0, abs=1e-12)
    # residual (0, 0, 0, 1): var 0.1875; var(y) = 1.25 -> 1 - 0.15 = 0.85
    pred = torch.tensor([1.0, 2.0, 3.0, 3.0], dtype=F64)
    assert explained_variance(pred, y) == pytest.approx(0.85, abs=1e-12)
    # worse than a constant -> negative
    assert explained_variance(-y, y) == pytest.approx(1.0 - 4.0, abs=1e-12)


def test_explained_variance_zero_variance_target_is_nan():
    y = torch.full((5,), 3.0)
    assert math.isnan(explained_variance(torch.randn(5), y))
    assert math.isnan(explained_variance(y, y))


def test_explained_variance_matches_numpy():
    g = torch.Generator().manual_seed(9)
    y = torch.randn(1000, generator=g, dtype=F64)
    p = y + 0.5 * torch.randn(1000, generator=g, dtype=F64)
    expected = 1.0 - np.var(y.numpy() - p.numpy()) / np.var(y.numpy())
    assert explained_variance(p, y) == pytest.approx(expected, abs=1e-12)


# --- ratio stats -------------------------------------------------------------------------


def test_ratio_stats_keys_and_values():
    ratio = torch.tensor([[1.3, 0.7, 1.0], [0.95, 1.05, 1.1], [0.6, 1.8, 0.99]])
    stats = ratio_stats(ratio)
    keys = ["ratio_min", "ratio_max", "ratio_q05", "ratio_q25", "ratio_q50", "ratio_q75",
            "ratio_q95"]
    assert sorted(stats) == sorted(keys)
    assert all(isinstance(v, float) for v in stats.values())
    r = ratio.double().flatten().numpy()
    assert stats["ratio_min"] == pytest.approx(float(r.min()), abs=1e-12)
    assert stats["ratio_max"] == pytest.approx(float(r.max()), abs=1e-12)
    for p in RATIO_QUANTILES:
        key = f"ratio_q{int(round(p * 100)):02d}"
        assert stats[key] == pytest.approx(float(np.quantile(r, p, method="linear")), abs=1e-12)
    # the median of nine numbers is the middle one
    assert stats["ratio_q50"] == pytest.approx(1.0, abs=1e-7)


def test_ratio_stats_hand_quantiles():
    # 0, 1, ..., 20: the linear quantile at p is 20 p
    stats = ratio_stats(torch.arange(21, dtype=F64))
    assert stats["ratio_q05"] == pytest.approx(1.0)
    assert stats["ratio_q25"] == pytest.approx(5.0)
    assert stats["ratio_q50"] == pytest.approx(10.0)
    assert stats["ratio_q75"] == pytest.approx(15.0)
    assert stats["ratio_q95"] == pytest.approx(19.0)
    assert (stats["ratio_min"], stats["ratio_max"]) == (0.0, 20.0)


def test_learner_stats_against_their_definitions():
    """critic_stats and episode_stats (the learners' metrics, written once) against the
    definitions written out member by member: explained variance with torch.var, the episode
    means over the steps where an episode ended; nan where nothing is explained or ended."""
    import math

    from trustrl.maths.diagnostics import critic_stats, episode_stats

    g = torch.Generator().manual_seed(7)
    for _ in range(5):
        values = torch.randn(3, 40, generator=g, dtype=torch.float64)
        returns = torch.randn(3, 40, generator=g, dtype=torch.float64)
        returns[2] = 0.5  # constant: nothing to explain
        ev, fresh = critic_stats(values, returns, math.nan)
        for p in range(2):
            want = 1 - torch.var(returns[p] - values[p], unbiased=False) / torch.var(
                returns[p], unbiased=False)
            assert abs(float(ev[p]) - float(want)) < 1e-12
        assert math.isnan(float(ev[2]))
        torch.testing.assert_close(fresh, 0.5 * ((values - returns) ** 2).mean(1))
        done = torch.rand(9, 3, 4, generator=g) < 0.3
        done[:, 1] = False
        fin_ret = torch.randn(9, 3, 4, generator=g, dtype=torch.float64)
        fin_len = torch.randint(1, 50, (9, 3, 4), generator=g).double()
        n, ret, length = episode_stats(done, fin_ret, fin_len, math.nan)
        for p in (0, 2):
            d = done[:, p]
            assert int(n[p]) == int(d.sum())
            assert abs(float(ret[p]) - float(fin_ret[:, p][d].mean())) < 1e-12
            assert abs(float(length[p]) - float(fin_len[:, p][d].mean())) < 1e-12
        assert int(n[1]) == 0 and math.isnan(float(ret[1])) and math.isnan(float(length[1]))
