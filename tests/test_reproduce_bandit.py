"""The bandit claims of `trustrl reproduce` at quick scale, and the K-epoch demo's simulation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trustrl.experiments import claims_bandit as cb
from trustrl.experiments.kepoch import (
    PLAIN,
    PPO,
    DemoConfig,
    Mulberry32,
    log_softmax,
    simulate,
    surrogate_grad,
)
from trustrl.experiments.registry import DIFFERS, REPRODUCED, Context, load_all
from trustrl.maths.losses import clipped_surrogate_objective, surrogate_objective

# ------------------------------------------------------------------------------------------------
# the random number generator


def _mulberry32_scalar(seed: int, n: int) -> list[int]:
    """Plain-Python mulberry32 with explicit 32-bit masking, as an independent reference."""
    a, out = seed & 0xFFFFFFFF, []
    for _ in range(n):
        a = (a + 0x6D2B79F5) & 0xFFFFFFFF
        t = ((a ^ (a >> 15)) * (a | 1)) & 0xFFFFFFFF
        t = ((t + (((t ^ (t >> 7)) * (t | 61)) & 0xFFFFFFFF)) & 0xFFFFFFFF) ^ t
        out.append(t ^ (t >> 14))
    return out


def test_rng_reference_values():
    # Regression pin: values printed once from our implementation; they were also checked
    # against the JavaScript original (Math.imul, >>> 0) under node, bit for bit.
    g = Mulberry32([0, 1, 12345])
    draws = np.stack([g.next_uint32() for _ in range(3)], axis=1)
    assert draws.tolist() == [[1144304738, 1416247, 958946056],
                              [2693262067, 11749833, 2265367787],
                              [4207900869, 1317490944, 2079646450]]
    g = Mulberry32([1])
    assert g.uniform(3)[0].tolist() == [0.6270739405881613, 0.002735721180215478,
                                        0.5274470399599522]
    assert g.normal(2)[0] == pytest.approx([2.760973377179358, -0.6166673668426074], abs=1e-14)


def test_rng_reproducible_and_matches_scalar_reference():
    seeds = [0, 5, 299, 2**31 - 1, 2**32 - 1]
    a, b = Mulberry32(seeds), Mulberry32(seeds)
    va = np.stack([a.next_uint32() for _ in range(200)], axis=1)
    vb = np.stack([b.next_uint32() for _ in range(200)], axis=1)
    assert np.array_equal(va, vb)
    for i, s in enumerate(seeds):
        assert va[i].tolist() == _mulberry32_scalar(s, 200)
    u = Mulberry32(seeds).uniform(1000)
    assert u.min() >= 0.0 and u.max() < 1.0
    with pytest.raises(ValueError):
        Mulberry32([-1])


def test_simulation_regression_pin():
    # Regression pin (printed once from this implementation): both learners' policies for
    # seed 1 after iteration 1 and for seed 7 after iteration 2.
    r = simulate(DemoConfig(iterations=2), [1, 7])
    np.testing.assert_allclose(
        r.policies[1, :, 0],
        [[0.9294261934702114, 0.046914039518874025, 0.023659767010914618],
         [0.4253177482770001, 0.3208764963193646, 0.25380575540363537]], rtol=0, atol=1e-12)
    np.testing.assert_allclose(
        r.policies[2, :, 1],
        [[0.9622970537523049, 0.02967294747944549, 0.008029998768249533],
         [0.45302063635763157, 0.40012402591946994, 0.14685533772289852]], rtol=0, atol=1e-12)
    # identical starting policies, shared uniforms: the first batches are identical
    assert np.array_equal(r.arms[0, PLAIN], r.arms[0, PPO])
    assert r.kl_epochs.shape == (2, 40, 2, 2) and r.J.shape == (3, 2, 2)


def test_k1_learners_identical():
    r = simulate(DemoConfig(K=1, iterations=8), range(50))
    assert np.array_equal(r.policies[:, PLAIN], r.policies[:, PPO])
    assert np.array_equal(r.advantages[:, PLAIN], r.advantages[:, PPO])


def test_simulation_is_deterministic_and_seedwise():
    a = simulate(DemoConfig(iterations=3), [3, 4, 5])
    b = simulate(DemoConfig(iterations=3), [5])  # vectorising over seeds changes nothing
    assert np.array_equal(a.policies[:, :, 2], b.policies[:, :, 0])


# ------------------------------------------------------------------------------------------------
# the analytic gradient


def _autograd(z: np.ndarray, logp_old: np.ndarray, arms: np.ndarray, adv: np.ndarray,
              eps: float | None) -> np.ndarray:
    zt = torch.tensor(z, requires_grad=True)
    logp = torch.log_softmax(zt, -1)
    a = torch.tensor(arms)
    ratio = torch.exp(logp[a] - torch.tensor(logp_old)[a])
    advt = torch.tensor(adv)
    obj = (surrogate_objective(ratio, advt) if eps is None
           else clipped_surrogate_objective(ratio, advt, eps)).mean()
    (g,) = torch.autograd.grad(obj, zt)
    return g.numpy()


@pytest.mark.parametrize("eps", [None, 0.2, 0.05])
def test_analytic_gradient_matches_autograd(eps):
    rng = np.random.default_rng(1)
    n_clipped = 0
    for _ in range(20):
        logp_old = log_softmax(rng.normal(size=3))
        z = rng.normal(size=3) * 0.5
        arms = rng.integers(0, 3, 12)
        adv = rng.normal(size=12)
        adv -= adv.mean()
        ours = surrogate_grad(z, logp_old, arms, adv, np.inf if eps is None else eps)
        assert ours == pytest.approx(_autograd(z, logp_old, arms, adv, eps), abs=1e-12)
        if eps is not None:
            rho = np.exp(log_softmax(z)[arms] - logp_old[arms])
            n_clipped += int((((adv > 0) & (rho > 1 + eps)) | ((adv < 0) & (rho < 1 - eps))).sum())
    if eps is not None:
        assert n_clipped > 0  # the comparison did exercise clipped samples


def test_clipped_samples_contribute_zero():
    logp_old = np.log(np.full(3, 1 / 3))
    z = np.log(np.array([0.5, 0.3, 0.2]))  # rho = 1.5, 0.9, 0.6
    arms = np.array([0, 2, 1])
    # case 2 (A > 0, rho > 1 + eps) and case 4 (A < 0, rho < 1 - eps): no gradient at all
    assert np.array_equal(surrogate_grad(z, logp_old, arms[:2], np.array([1.0, -1.0]), 0.2),
                          np.zeros(3))
    # adding them to a batch changes the gradient only by the 1/N normalisation
    full = surrogate_grad(z, logp_old, arms, np.array([1.0, -1.0, 0.7]), 0.2)
    alone = surrogate_grad(z, logp_old, arms[2:], np.array([0.7]), 0.2)
    assert full == pytest.approx(alone / 3, abs=1e-15)
    # the plain surrogate keeps them
    assert np.abs(surrogate_grad(z, logp_old, arms[:2], np.array([1.0, -1.0]), np.inf)).max() > 0


# ------------------------------------------------------------------------------------------------
# the claims at quick scale


def test_claims_registered():
    ids = set(load_all())
    assert {"000.bandit-surrogate", "000.speed-bump", "000.kepoch-demo", "000.ex9.7",
            "000.ex9.1"} <= ids


@pytest.mark.parametrize("fn", [cb.bandit_surrogate, cb.ex91])
def test_deterministic_claims_reproduced(fn, tmp_path):
    r = fn(Context(out=tmp_path, quick=True))
    assert r.checks and r.verdict == REPRODUCED, [c for c in r.checks if c.verdict != REPRODUCED]


def test_speed_bump(tmp_path):
    r = cb.speed_bump(Context(out=tmp_path, quick=True))
    differs = [c.name for c in r.checks if c.verdict == DIFFERS]
    # Known, explained discrepancy: step 3 ends at pi(B) = 0.54496, printed 0.55 in the text
    # (double rounding); everything else in the table, the ceiling and the closest policy match.
    assert differs == ["step 3: final pi(B)"]
    (explained,) = [c.explanation for c in r.checks if c.verdict == DIFFERS]
    assert "double-rounding" in explained and not r.unexplained
    assert all((tmp_path / f).is_file() for f in r.figures)


@pytest.mark.parametrize("fn", [cb.kepoch_demo, cb.ex97])
def test_simulated_claims_quick(fn, tmp_path):
    r = fn(Context(out=tmp_path, quick=True))
    # deterministic given the fixed seeds 0..99, so this is a regression check, not a flaky one
    assert r.checks and r.verdict != DIFFERS, [c for c in r.checks if c.verdict == DIFFERS]
    assert r.figures and all((tmp_path / f).is_file() for f in r.figures)
