"""RunningMeanStd, ObsNormalizer and RewardScaler against NumPy on the whole stream."""

from __future__ import annotations

import numpy as np
import pytest

from trustrl.maths.normalize import ObsNormalizer, RewardScaler, RunningMeanStd


def _with_prior(x: np.ndarray, prior_count: float):
    """Exact mean/var of the data pooled with the prior (mean 0, var 1, weight prior_count)."""
    n = x.shape[0]
    total = n + prior_count
    mean = x.sum(axis=0) / total
    second = (prior_count * 1.0 + (x**2).sum(axis=0)) / total  # E[x^2], prior has E = 0 + 1
    return mean, second - mean**2


def _batches(seed: int, shape=(3,)):
    rng = np.random.default_rng(seed)
    sizes = [1, 7, 50, 3, 200, 2]
    scale = np.array([1.0, 10.0, 0.01])[: shape[0]] if shape else 1.0
    loc = np.array([5.0, -3.0, 100.0])[: shape[0]] if shape else 2.0
    return [loc + scale * rng.standard_normal((s, *shape)) for s in sizes]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_running_mean_std_equals_numpy_on_concatenation_with_tiny_prior(seed):
    rms = RunningMeanStd((3,), epsilon=1e-300)
    batches = _batches(seed)
    for b in batches:
        rms.update(b)
    x = np.concatenate(batches)
    np.testing.assert_allclose(rms.mean, x.mean(axis=0), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(rms.var, x.var(axis=0), rtol=1e-8, atol=1e-12)
    assert rms.count == pytest.approx(x.shape[0])
    assert rms.mean.dtype == rms.var.dtype == np.float64


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_running_mean_std_default_prior_is_a_pseudo_batch(seed):
    """With the default epsilon = 1e-4 the result is the exact pooled mean/var of the data
    and a prior batch (mean 0, var 1) of weight 1e-4.  Against plain NumPy the prior moves the
    mean by a relative 1e-4 / n and the variance by about 1e-4 / n * (1 + mean^2) absolute,
    which is large relative to a feature whose mean dwarfs its spread (the third column)."""
    rms = RunningMeanStd((3,))
    assert rms.count == pytest.approx(1e-4)
    batches = _batches(seed)
    for b in batches:
        rms.update(b)
    x = np.concatenate(batches)
    mean, var = _with_prior(x, 1e-4)
    np.testing.assert_allclose(rms.mean, mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(rms.var, var, rtol=1e-8, atol=1e-12)
    assert rms.count == pytest.approx(x.shape[0] + 1e-4)
    # against plain NumPy, n = 263
    np.testing.assert_allclose(rms.mean, x.mean(axis=0), rtol=1e-6, atol=0)
    var_tol = 1e-4 / x.shape[0] * (1.0 + (x.mean(axis=0) ** 2 + 1.0) / x.var(axis=0))
    assert np.all(np.abs(rms.var - x.var(axis=0)) <= 2 * var_tol * x.var(axis=0))


def test_running_mean_std_scalar_shape_and_single_rows():
    rms = RunningMeanStd((), epsilon=1e-300)
    data = np.array([1.0, 2.0, 4.0, 8.0])
    for v in data:
        rms.update(np.array([v]))
    assert rms.mean.shape == ()
    assert float(rms.mean) == pytest.approx(data.mean(), rel=1e-12)
    assert float(rms.var) == pytest.approx(data.var(), rel=1e-12)


def test_running_mean_std_batch_order_does_not_matter():
    batches = _batches(5)
    a, b = RunningMeanStd((3,)), RunningMeanStd((3,))
    for x in batches:
        a.update(x)
    for x in reversed(batches):
        b.update(x)
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-12)
    np.testing.assert_allclose(a.var, b.var, rtol=1e-10)


def test_running_mean_std_state_dict_round_trip():
    rms = RunningMeanStd((3,))
    for b in _batches(3):
        rms.update(b)
    state = rms.state_dict()
    other = RunningMeanStd((3,))
    other.load_state_dict(state)
    np.testing.assert_array_equal(other.mean, rms.mean)
    np.testing.assert_array_equal(other.var, rms.var)
    assert other.count == rms.count
    # the state is a copy: later updates do not leak into it
    saved_mean = state["mean"].copy()
    rms.update(np.full((4, 3), 1e3))
    np.testing.assert_array_equal(state["mean"], saved_mean)
    # loading from plain lists works too (e.g. after JSON)
    third = RunningMeanStd((3,))
    third.load_state_dict({"mean": other.mean.tolist(), "var": other.var.tolist(),
                           "count": other.count})
    np.testing.assert_array_equal(third.mean, other.mean)
    assert third.mean.dtype == np.float64
    # and both continue identically
    x = np.ones((5, 3))
    other.update(x)
    third.update(x)
    np.testing.assert_array_equal(third.mean, other.mean)
    np.testing.assert_array_equal(third.var, other.var)


# --- ObsNormalizer -----------------------------------------------------------------------


def test_obs_normalizer_normalises_and_clips():
    norm = ObsNormalizer((3,), clip=5.0)
    rng = np.random.default_rng(0)
    # (a feature with |mean| >> std would keep a visible share of the 1e-4 prior's variance)
    batches = [np.array([5.0, -3.0, 1.0]) + np.array([1.0, 10.0, 0.5]) * rng.standard_normal(
        (s, 3)) for s in (1, 7, 50, 3, 200, 2)]
    for b in batches:
        norm.update(b)
    x = np.concatenate(batches)
    out = norm(x)
    assert out.dtype == np.float32 and out.shape == x.shape
    expected = np.clip((x - norm.rms.mean) / np.sqrt(norm.rms.var + 1e-8), -5.0, 5.0)
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out.mean(axis=0), 0.0, atol=1e-3)
    np.testing.assert_allclose(out.std(axis=0), 1.0, atol=1e-3)
    far = norm(norm.rms.mean + 1e6)
    np.testing.assert_array_equal(far, np.full(3, 5.0, np.float32))


def test_obs_normalizer_frozen_does_not_update():
    norm = ObsNormalizer((3,))
    norm.update(_batches(1)[4])
    before = norm.rms.state_dict()
    x = np.array([[1.0, 2.0, 3.0]])
    out_before = norm(x)
    norm.frozen = True
    for b in _batches(2):
        norm.update(100.0 + b)
    after = norm.rms.state_dict()
    np.testing.assert_array_equal(after["mean"], before["mean"])
    np.testing.assert_array_equal(after["var"], before["var"])
    assert after["count"] == before["count"]
    np.testing.assert_array_equal(norm(x), out_before)
    # unfrozen again, it updates
    norm.frozen = False
    norm.update(np.full((10, 3), 50.0))
    assert norm.rms.count == before["count"] + 10


def test_obs_normalizer_state_dict_round_trip():
    norm = ObsNormalizer((3,), clip=3.0, epsilon=1e-6)
    for b in _batches(4):
        norm.update(b)
    other = ObsNormalizer((3,))
    other.load_state_dict(norm.state_dict())
    assert (other.clip, other.epsilon) == (3.0, 1e-6)
    x = np.concatenate(_batches(6))
    np.testing.assert_array_equal(other(x), norm(x))


# --- RewardScaler ------------------------------------------------------------------------


def _reference_reward_scaling(rewards: np.ndarray, dones: np.ndarray, gamma: float,
                              clip: float = 10.0, eps: float = 1e-8):
    """Straight from the definition: discounted return per env (reset after done), the
    variance of every return seen so far pooled with the 1e-4 prior, reward / std."""
    T, N = rewards.shape
    ret = np.zeros(N)
    seen: list[np.ndarray] = []
    out = np.zeros_like(rewards)
    for t in range(T):
        ret = gamma * ret + rewards[t]
        seen.append(ret.copy())
        _, var = _with_prior(np.concatenate(seen), 1e-4)
        out[t] = np.clip(rewards[t] / np.sqrt(var + eps), -clip, clip)
        ret = np.where(dones[t], 0.0, ret)
    return out


def test_reward_scaler_divides_by_std_of_discounted_returns():
    rng = np.random.default_rng(0)
    T, N, gamma = 60, 3, 0.9
    rewards = 1.0 + 2.0 * rng.standard_normal((T, N))
    dones = rng.random((T, N)) < 0.1
    scaler = RewardScaler(N, gamma)
    got = np.stack([scaler(rewards[t], dones[t]) for t in range(T)])
    assert got.dtype == np.float32
    expected = _reference_reward_scaling(rewards, dones, gamma)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    # no mean subtraction: the sign of every reward is kept
    assert np.all(np.sign(got) == np.sign(rewards))


def test_reward_scaler_hand_case_and_reset_on_done():
    scaler = RewardScaler(2, gamma=0.5)
    # step 1: returns = (1, 2)
    scaler(np.array([1.0, 2.0]), np.array([False, True]))
    np.testing.assert_allclose(scaler.returns, [1.0, 0.0])  # env 1 reset
    # step 2: returns = (0.5 * 1 + 1, 0 + 3) = (1.5, 3)
    out = scaler(np.array([1.0, 3.0]), np.array([False, False]))
    np.testing.assert_allclose(scaler.returns, [1.5, 3.0])
    _, var = _with_prior(np.array([1.0, 2.0, 1.5, 3.0]), 1e-4)
    np.testing.assert_allclose(out, np.array([1.0, 3.0]) / np.sqrt(var + 1e-8), rtol=1e-6)


def test_reward_scaler_reset_matters():
    """Without the reset on done, the return of a finished episode would carry over."""
    rewards = np.ones((20, 1))
    a = RewardScaler(1, gamma=0.99)
    b = RewardScaler(1, gamma=0.99)
    for t in range(20):
        a(rewards[t], np.array([t % 2 == 1]))
        b(rewards[t], np.array([False]))
    assert a.returns[0] == 0.0
    assert b.returns[0] == pytest.approx(sum(0.99**k for k in range(20)))
    assert a.rms.mean < b.rms.mean


def test_reward_scaler_clips_and_state_round_trip():
    scaler = RewardScaler(1, gamma=0.99, clip=2.0)
    for _ in range(30):
        scaler(np.array([0.01]), np.array([False]))
    out = scaler(np.array([1e6]), np.array([False]))
    np.testing.assert_array_equal(out, np.array([2.0], np.float32))
    other = RewardScaler(1, gamma=0.99, clip=2.0)
    other.load_state_dict(scaler.state_dict())
    np.testing.assert_array_equal(other.returns, scaler.returns)
    r, d = np.array([0.3]), np.array([False])
    np.testing.assert_array_equal(other(r, d), scaler(r, d))


@pytest.mark.parametrize("n", [1, 2, 3, 64])
def test_running_mean_std_update_is_chan_over_numpy_mean_and_var_bit_for_bit(n):
    """update() writes np.mean and np.var out (it runs once or twice per env step): the same
    bits as Chan's update over batch.mean(0) and batch.var(0), for one row and for many."""
    rng = np.random.default_rng(n)
    for shape in ((), (5,), (3, 4)):
        ours, ref = RunningMeanStd(shape), RunningMeanStd(shape)
        for _ in range(30):
            x = rng.normal(size=(n, *shape)) * rng.uniform(0.1, 100.0) + rng.normal()
            ours.update(x)
            d, total = x.mean(0) - ref.mean, ref.count + n
            m2 = ref.var * ref.count + x.var(0) * n + d**2 * ref.count * n / total
            ref.mean, ref.var, ref.count = ref.mean + d * n / total, m2 / total, total
        assert np.array_equal(ours.mean, ref.mean) and np.array_equal(ours.var, ref.var)
        assert ours.count == ref.count
