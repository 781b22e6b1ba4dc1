"""PPO's loss terms against the chapter's worked numbers and their definitions."""

from __future__ import annotations

import pytest
import torch

from trustrl.maths.distributions import Categorical
from trustrl.maths.losses import (
    clipped_surrogate_loss,
    clipped_surrogate_objective,
    entropy_bonus,
    surrogate_loss,
    surrogate_objective,
    value_loss,
)

F64 = torch.float64


def _value_and_slope(adv: float, rho: float, eps: float) -> tuple[float, float]:
    """L_clip at one sample and its derivative d/d rho, by autograd."""
    ratio = torch.tensor([rho], dtype=F64, requires_grad=True)
    advantages = torch.tensor([adv], dtype=F64)
    out = clipped_surrogate_objective(ratio, advantages, eps)
    (slope,) = torch.autograd.grad(out.sum(), ratio)
    return float(out.detach()), float(slope)


# --- the chapter's six worked numbers (eps = 0.2, band [0.8, 1.2]) -------------------------

CHAPTER_CASES = [
    pytest.param(+2.0, 1.1, 2.2, 2.0, id="case1-A+2-rho1.1-inside-band"),
    pytest.param(+2.0, 1.5, 2.4, 0.0, id="case2-A+2-rho1.5-good-already-boosted"),
    pytest.param(+2.0, 0.5, 1.0, 2.0, id="case1-A+2-rho0.5-pulled-back-up"),
    pytest.param(-1.0, 0.9, -0.9, -1.0, id="case3-A-1-rho0.9-inside-band"),
    pytest.param(-1.0, 0.6, -0.8, 0.0, id="case4-A-1-rho0.6-bad-already-suppressed"),
    pytest.param(-1.0, 1.4, -1.4, -1.0, id="case3-A-1-rho1.4-pushed-back-down"),
]


@pytest.mark.parametrize(("adv", "rho", "value", "slope"), CHAPTER_CASES)
def test_chapter_six_worked_cases(adv, rho, value, slope):
    got_value, got_slope = _value_and_slope(adv, rho, 0.2)
    assert got_value == pytest.approx(value, abs=1e-12)
    assert got_slope == pytest.approx(slope, abs=1e-12)


# --- Exercise 9.3 (eps = 0.1, band [0.9, 1.1]) -------------------------------------------------

EXERCISE_9_3 = [
    pytest.param(+1.0, 1.05, 1.05, 1.0, id="a-case1-inside-band"),
    pytest.param(+1.0, 1.25, 1.10, 0.0, id="b-case2-good-already-boosted"),
    pytest.param(+1.0, 0.70, 0.70, 1.0, id="c-case1-pulled-back-up"),
    pytest.param(-2.0, 1.30, -2.60, -2.0, id="d-case3-pushed-back-down"),
    pytest.param(-2.0, 0.85, -1.80, 0.0, id="e-case4-bad-already-suppressed"),
    pytest.param(-2.0, 0.95, -1.90, -2.0, id="f-case3-inside-band"),
]


@pytest.mark.parametrize(("adv", "rho", "value", "slope"), EXERCISE_9_3)
def test_exercise_9_3_table(adv, rho, value, slope):
    got_value, got_slope = _value_and_slope(adv, rho, 0.1)
    assert got_value == pytest.approx(value, abs=1e-12)
    assert got_slope == pytest.approx(slope, abs=1e-12)


def test_batched_cases_match_single_cases():
    """The six chapter cases in one batch: same values, per-sample slopes independent."""
    adv = torch.tensor([2.0, 2.0, 2.0, -1.0, -1.0, -1.0], dtype=F64)
    ratio = torch.tensor([1.1, 1.5, 0.5, 0.9, 0.6, 1.4], dtype=F64, requires_grad=True)
    out = clipped_surrogate_objective(ratio, adv, 0.2)
    (slope,) = torch.autograd.grad(out.sum(), ratio)
    expected = torch.tensor([2.2, 2.4, 1.0, -0.9, -0.8, -1.4], dtype=F64)
    torch.testing.assert_close(out.detach(), expected)
    torch.testing.assert_close(slope, torch.tensor([2.0, 0.0, 2.0, -1.0, 0.0, -1.0], dtype=F64))


# --- lower bound: L_clip <= rho * A, equal inside the band -------------------------------------


@pytest.mark.parametrize("eps", [0.1, 0.2, 0.3])
def test_clip_is_a_pessimistic_lower_bound(eps):
    g = torch.Generator().manual_seed(1234)
    n = 20_000
    ratio = torch.exp(0.6 * torch.randn(n, generator=g, dtype=F64))
    adv = 3.0 * torch.randn(n, generator=g, dtype=F64)
    clipped = clipped_surrogate_objective(ratio, adv, eps)
    plain = surrogate_objective(ratio, adv)
    assert torch.all(clipped <= plain)
    inside = (ratio >= 1.0 - eps) & (ratio <= 1.0 + eps)
    assert inside.any() and (~inside).any()
    torch.testing.assert_close(clipped[inside], plain[inside], rtol=0, atol=0)
    # the bound is strict exactly in cases 2 and 4; a ratio past the edge the wrong way keeps rho*A
    case2 = (adv > 0) & (ratio > 1.0 + eps)
    case4 = (adv < 0) & (ratio < 1.0 - eps)
    strict = case2 | case4
    assert torch.all(clipped[strict] < plain[strict])
    torch.testing.assert_close(clipped[~strict], plain[~strict], rtol=0, atol=0)
    # and the clipped value in those cases is the edge of the band times A
    torch.testing.assert_close(clipped[case2], (1.0 + eps) * adv[case2])
    torch.testing.assert_close(clipped[case4], (1.0 - eps) * adv[case4])


# --- gradient through exp(logp - logp_old) w.r.t. the logits -----------------------------------

GRAD_CASES = [
    pytest.param(+2.0, 1.1, False, id="case1-inside"),
    pytest.param(+2.0, 1.5, True, id="case2-zero"),
    pytest.param(+2.0, 0.5, False, id="case1-pulled-back-up"),
    pytest.param(-1.0, 0.9, False, id="case3-inside"),
    pytest.param(-1.0, 0.6, True, id="case4-zero"),
    pytest.param(-1.0, 1.4, False, id="case3-pushed-back-down"),
]


@pytest.mark.parametrize(("adv", "rho_target", "zero"), GRAD_CASES)
def test_logit_gradient_is_zero_in_cases_2_and_4_else_importance_weighted_pg(
    adv, rho_target, zero
):
    g = torch.Generator().manual_seed(7)
    eps = 0.2
    logits = torch.randn(5, generator=g, dtype=F64).requires_grad_(True)
    action = torch.tensor([3])
    logp = Categorical(logits.unsqueeze(0)).log_prob(action)
    # choose logp_old so that the ratio equals rho_target exactly at these logits
    logp_old = logp.detach() - torch.log(torch.tensor(rho_target, dtype=F64))
    ratio = torch.exp(logp - logp_old)
    assert float(ratio.detach()) == pytest.approx(rho_target, rel=1e-12)

    obj = clipped_surrogate_objective(ratio, torch.tensor([adv], dtype=F64), eps)
    (grad_clip,) = torch.autograd.grad(obj.sum(), logits)

    if zero:
        assert torch.equal(grad_clip, torch.zeros_like(grad_clip))
        return
    (grad_logp,) = torch.autograd.grad(
        Categorical(logits.unsqueeze(0)).log_prob(action).sum(), logits
    )
    torch.testing.assert_close(grad_clip, rho_target * adv * grad_logp, rtol=1e-10, atol=1e-12)
    assert grad_clip.abs().max() > 0
    # brute force: central finite differences of the objective in the logits
    h = 1e-6
    fd = torch.zeros_like(grad_clip)
    with torch.no_grad():
        for i in range(logits.numel()):
            vals = []
            for s in (+h, -h):
                lg = logits.detach().clone()
                lg[i] += s
                lp = Categorical(lg.unsqueeze(0)).log_prob(action)
                r = torch.exp(lp - logp_old)
                adv_t = torch.tensor([adv], dtype=F64)
                vals.append(float(clipped_surrogate_objective(r, adv_t, eps)))
            fd[i] = (vals[0] - vals[1]) / (2 * h)
    torch.testing.assert_close(grad_clip, fd, rtol=1e-5, atol=1e-8)


# --- the scalar losses ----------------------------------------------------------------------


def test_clipped_surrogate_loss_is_minus_mean_objective():
    g = torch.Generator().manual_seed(3)
    ratio = torch.exp(0.5 * torch.randn(64, generator=g, dtype=F64))
    adv = torch.randn(64, generator=g, dtype=F64)
    loss = clipped_surrogate_loss(ratio, adv, 0.2)
    assert loss.dim() == 0
    torch.testing.assert_close(loss, -clipped_surrogate_objective(ratio, adv, 0.2).mean())
    # hand number: the chapter's six rows, mean of the min column
    ratio6 = torch.tensor([1.1, 1.5, 0.5, 0.9, 0.6, 1.4], dtype=F64)
    adv6 = torch.tensor([2.0, 2.0, 2.0, -1.0, -1.0, -1.0], dtype=F64)
    expected = -(2.2 + 2.4 + 1.0 - 0.9 - 0.8 - 1.4) / 6
    assert float(clipped_surrogate_loss(ratio6, adv6, 0.2)) == pytest.approx(expected, abs=1e-12)


def test_surrogate_loss_is_minus_mean_rho_times_a():
    ratio = torch.tensor([1.1, 1.5, 0.5, 0.9, 0.6, 1.4], dtype=F64)
    adv = torch.tensor([2.0, 2.0, 2.0, -1.0, -1.0, -1.0], dtype=F64)
    expected = -(2.2 + 3.0 + 1.0 - 0.9 - 0.6 - 1.4) / 6
    assert float(surrogate_loss(ratio, adv)) == pytest.approx(expected, abs=1e-12)
    torch.testing.assert_close(surrogate_objective(ratio, adv), ratio * adv)
    torch.testing.assert_close(surrogate_loss(ratio, adv), -(ratio * adv).mean())


def test_clip_loss_equals_surrogate_loss_when_all_ratios_inside_band():
    ratio = torch.tensor([0.85, 0.95, 1.0, 1.05, 1.15], dtype=F64)
    adv = torch.tensor([1.0, -2.0, 3.0, -0.5, 0.25], dtype=F64)
    torch.testing.assert_close(clipped_surrogate_loss(ratio, adv, 0.2), surrogate_loss(ratio, adv))


def test_value_loss_plain_hand_number():
    v = torch.tensor([1.0, 2.0, 3.0], dtype=F64)
    r = torch.tensor([0.0, 2.0, 5.0], dtype=F64)
    # errors^2 = 1, 0, 4 -> mean 5/3 -> half is 5/6
    assert float(value_loss(v, r)) == pytest.approx(5.0 / 6.0, abs=1e-12)
    # giving only one of values_old / clip_eps keeps the plain loss
    assert float(value_loss(v, r, values_old=v + 10.0)) == pytest.approx(5.0 / 6.0, abs=1e-12)
    assert float(value_loss(v, r, clip_eps=0.1)) == pytest.approx(5.0 / 6.0, abs=1e-12)


def test_value_loss_clipped_hand_number_with_clipping_active():
    v = torch.tensor([1.0, 2.0, 3.0], dtype=F64)
    r = torch.tensor([0.0, 2.0, 5.0], dtype=F64)
    v_old = torch.tensor([0.5, 2.5, 2.0], dtype=F64)
    # V - V_old = (0.5, -0.5, 1.0) -> clip to +-0.2 -> V_clip = (0.7, 2.3, 2.2)
    # (V_clip - R)^2 = (0.49, 0.09, 7.84); (V - R)^2 = (1, 0, 4); max = (1, 0.09, 7.84)
    expected = 0.5 * (1.0 + 0.09 + 7.84) / 3.0
    assert float(value_loss(v, r, v_old, 0.2)) == pytest.approx(expected, abs=1e-12)
    assert float(value_loss(v, r, v_old, 0.2)) > float(value_loss(v, r))


def test_value_loss_clipped_equals_plain_when_clipping_inactive():
    v = torch.tensor([1.0, 2.0, 3.0], dtype=F64)
    r = torch.tensor([0.0, 2.0, 5.0], dtype=F64)
    v_old = v + torch.tensor([0.1, -0.15, 0.05], dtype=F64)  # |V - V_old| < eps
    assert float(value_loss(v, r, v_old, 0.2)) == pytest.approx(5.0 / 6.0, abs=1e-12)


def test_value_loss_clipped_matches_definition_and_dominates_plain_samplewise():
    g = torch.Generator().manual_seed(11)
    n, eps = 5000, 0.2
    v = torch.randn(n, generator=g, dtype=F64)
    r = torch.randn(n, generator=g, dtype=F64)
    v_old = v + 0.4 * torch.randn(n, generator=g, dtype=F64)
    v_clip = v_old + torch.clamp(v - v_old, -eps, eps)
    per_plain = (v - r) ** 2
    per_clip = torch.max((v - r) ** 2, (v_clip - r) ** 2)
    assert torch.all(per_clip >= per_plain)
    torch.testing.assert_close(value_loss(v, r, v_old, eps), 0.5 * per_clip.mean())
    torch.testing.assert_close(value_loss(v, r), 0.5 * per_plain.mean())
    assert float(value_loss(v, r, v_old, eps)) >= float(value_loss(v, r))
    # one sample at a time as well
    for i in range(50):
        sl = slice(i, i + 1)
        assert float(value_loss(v[sl], r[sl], v_old[sl], eps)) >= float(value_loss(v[sl], r[sl]))


def test_value_loss_gradient_is_v_minus_r_over_batch():
    v = torch.tensor([1.0, 2.0, 3.0], dtype=F64, requires_grad=True)
    r = torch.tensor([0.0, 2.0, 5.0], dtype=F64)
    (grad,) = torch.autograd.grad(value_loss(v, r), v)
    torch.testing.assert_close(grad, (v.detach() - r) / 3.0)


def test_entropy_bonus_is_mean():
    h = torch.tensor([0.1, 0.5, 0.9, 1.3], dtype=F64)
    assert float(entropy_bonus(h)) == pytest.approx(0.7, abs=1e-12)
    assert entropy_bonus(h).dim() == 0
