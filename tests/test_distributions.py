"""trustrl's Categorical and DiagGaussian against torch.distributions."""

from __future__ import annotations

import pytest
import torch
from torch import distributions as td

from trustrl.maths.distributions import Categorical, DiagGaussian

F64 = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --- Categorical -------------------------------------------------------------------------


def test_categorical_log_prob_entropy_probs_match_torch():
    g = _gen(0)
    logits = 2.0 * torch.randn(16, 5, generator=g, dtype=F64) + 3.0  # unnormalised
    actions = torch.randint(0, 5, (16,), generator=g)
    ours, ref = Categorical(logits), td.Categorical(logits=logits)
    torch.testing.assert_close(ours.log_prob(actions), ref.log_prob(actions))
    torch.testing.assert_close(ours.entropy(), ref.entropy())
    torch.testing.assert_close(ours.probs, ref.probs)
    torch.testing.assert_close(ours.probs.sum(-1), torch.ones(16, dtype=F64))
    assert ours.log_prob(actions).shape == (16,)
    assert ours.entropy().shape == (16,)


def test_categorical_log_prob_accepts_float_actions():
    logits = torch.tensor([[0.0, 1.0, 2.0]], dtype=F64)
    d = Categorical(logits)
    torch.testing.assert_close(d.log_prob(torch.tensor([2.0])), d.log_prob(torch.tensor([2])))


def test_categorical_kl_matches_torch_and_is_zero_with_itself():
    g = _gen(1)
    p_logits = torch.randn(32, 4, generator=g, dtype=F64)
    q_logits = torch.randn(32, 4, generator=g, dtype=F64)
    p, q = Categorical(p_logits), Categorical(q_logits)
    ref = td.kl_divergence(td.Categorical(logits=p_logits), td.Categorical(logits=q_logits))
    torch.testing.assert_close(p.kl(q), ref)
    assert torch.all(p.kl(q) >= 0)
    torch.testing.assert_close(p.kl(p), torch.zeros(32, dtype=F64), rtol=0, atol=1e-15)
    # shifting logits by a constant is the same distribution
    torch.testing.assert_close(p.kl(Categorical(p_logits + 7.0)), torch.zeros(32, dtype=F64),
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_log_softmax_source_is_torchs_fused_kernel_to_rounding(seed):
    """distributions.log_softmax (the source compiled code runs) computes what torch's fused
    log_softmax (the torch binding's kernel, `masked_log_softmax`) does, over torch and NumPy:
    large logits (no overflow: the shift), masked rows (MASKED_LOGIT stays finite), 2-d and
    3-d batches; and the entropy and KL of its rows are Categorical's."""
    import numpy as np

    from trustrl.maths import distributions as dist
    from trustrl.util.rebind import rebound

    g = _gen(seed)
    x = 30.0 * torch.randn(3, 7, 5, generator=g)  # exp(x) overflows float32 unshifted
    x[0, :, 0] = 200.0
    mask = torch.rand(3, 7, 5, generator=g) > 0.4
    mask[..., 1] = True  # a valid action in every row
    for logits in (x, dist.mask_logits(x, mask), x[1]):
        fused = dist.masked_log_softmax(logits)
        ours = dist.log_softmax(logits)
        assert torch.isfinite(ours).all()
        torch.testing.assert_close(ours, fused, rtol=0, atol=2e-6 * (1 + fused.abs().max()))
        np_ops = rebound(f"_test_distributions_numpy_{seed}", "test", vars(dist),
                         [dist.log_softmax], {"o": np})
        torch.testing.assert_close(torch.from_numpy(np_ops.log_softmax(logits.numpy())), fused,
                                   rtol=0, atol=2e-6 * (1 + fused.abs().max()))
    y = 3.0 * torch.randn(3, 7, 5, generator=g, dtype=F64)
    lo, ln = dist.log_softmax(y), dist.log_softmax(y.flip(-1))
    torch.testing.assert_close(dist.categorical_entropy(lo), td.Categorical(logits=y).entropy())
    torch.testing.assert_close(dist.categorical_kl(lo, ln), td.kl_divergence(
        td.Categorical(logits=y), td.Categorical(logits=y.flip(-1))))


def test_categorical_uniform_entropy_is_log_n():
    d = Categorical(torch.zeros(3, 6, dtype=F64))
    torch.testing.assert_close(d.entropy(), torch.full((3,), torch.log(torch.tensor(6.0)).item(),
                                                       dtype=F64))


def test_categorical_mode_and_sample_shapes():
    logits = torch.tensor([[0.0, 3.0, 1.0], [5.0, 0.0, -1.0]], dtype=F64)
    d = Categorical(logits)
    assert torch.equal(d.mode(), torch.tensor([1, 0]))
    torch.manual_seed(0)
    s = d.sample()
    assert s.shape == (2,) and s.dtype == torch.int64
    assert torch.all((s >= 0) & (s < 3))
    d3 = Categorical(torch.randn(4, 7, 3))
    assert d3.sample().shape == (4, 7)
    assert d3.mode().shape == (4, 7)
    assert d3.log_prob(d3.sample()).shape == (4, 7)


def test_categorical_sample_frequencies():
    torch.manual_seed(123)
    probs = torch.tensor([0.5, 0.3, 0.2], dtype=F64)
    n = 50_000
    d = Categorical(torch.log(probs).expand(n, 3))
    counts = torch.bincount(d.sample(), minlength=3).to(F64) / n
    # standard error <= sqrt(0.25 / n) ~ 0.0022; allow 5 of them
    torch.testing.assert_close(counts, probs, rtol=0, atol=0.011)


# --- DiagGaussian ------------------------------------------------------------------------


@pytest.mark.parametrize("per_state_std", [False, True], ids=["log_std[D]", "log_std[B,D]"])
def test_diag_gaussian_log_prob_entropy_match_torch_normal(per_state_std):
    g = _gen(2)
    B, D = 12, 3
    mean = torch.randn(B, D, generator=g, dtype=F64)
    shape = (B, D) if per_state_std else (D,)
    log_std = 0.5 * torch.randn(*shape, generator=g, dtype=F64)
    actions = torch.randn(B, D, generator=g, dtype=F64)
    ours = DiagGaussian(mean, log_std)
    ref = td.Normal(mean, log_std.exp().expand(B, D))
    torch.testing.assert_close(ours.log_prob(actions), ref.log_prob(actions).sum(-1))
    torch.testing.assert_close(ours.entropy(), ref.entropy().sum(-1))
    assert ours.log_prob(actions).shape == (B,)
    assert ours.entropy().shape == (B,)
    torch.testing.assert_close(ours.std, log_std.exp().expand(B, D))


def test_diag_gaussian_kl_matches_torch_and_is_zero_with_itself():
    g = _gen(3)
    B, D = 20, 4
    m1, m2 = torch.randn(B, D, generator=g, dtype=F64), torch.randn(B, D, generator=g, dtype=F64)
    s1 = 0.5 * torch.randn(D, generator=g, dtype=F64)
    s2 = 0.5 * torch.randn(B, D, generator=g, dtype=F64)
    p, q = DiagGaussian(m1, s1), DiagGaussian(m2, s2)
    ref = td.kl_divergence(td.Normal(m1, s1.exp().expand(B, D)), td.Normal(m2, s2.exp())).sum(-1)
    torch.testing.assert_close(p.kl(q), ref)
    torch.testing.assert_close(q.kl(p), td.kl_divergence(
        td.Normal(m2, s2.exp()), td.Normal(m1, s1.exp().expand(B, D))).sum(-1))
    assert torch.all(p.kl(q) >= 0)
    torch.testing.assert_close(p.kl(p), torch.zeros(B, dtype=F64), rtol=0, atol=1e-14)
    torch.testing.assert_close(q.kl(q), torch.zeros(B, dtype=F64), rtol=0, atol=1e-14)


def test_diag_gaussian_kl_hand_case():
    # KL(N(0,1) || N(1, 2^2)) = log 2 + (1 + 1) / 8 - 1/2, per dimension
    p = DiagGaussian(torch.zeros(1, 2, dtype=F64), torch.zeros(2, dtype=F64))
    q = DiagGaussian(torch.ones(1, 2, dtype=F64), torch.log(torch.full((2,), 2.0, dtype=F64)))
    per_dim = torch.log(torch.tensor(2.0, dtype=F64)) + 2.0 / 8.0 - 0.5
    torch.testing.assert_close(p.kl(q), (2 * per_dim).reshape(1))


def test_diag_gaussian_mode_and_sample():
    g = _gen(4)
    mean = torch.randn(6, 2, generator=g, dtype=F64)
    log_std = torch.tensor([-1.0, 0.5], dtype=F64)
    d = DiagGaussian(mean, log_std)
    assert torch.equal(d.mode(), mean)
    torch.manual_seed(0)
    assert d.sample().shape == (6, 2)
    # sample statistics
    n = 40_000
    big = DiagGaussian(torch.tensor([[1.0, -2.0]], dtype=F64).expand(n, 2), log_std)
    x = big.sample()
    torch.testing.assert_close(x.mean(0), torch.tensor([1.0, -2.0], dtype=F64), rtol=0, atol=0.03)
    torch.testing.assert_close(x.std(0), log_std.exp(), rtol=0.03, atol=0)


def test_log_prob_gradients_flow_to_mean_and_log_std():
    mean = torch.zeros(3, 2, dtype=F64, requires_grad=True)
    log_std = torch.zeros(2, dtype=F64, requires_grad=True)
    a = torch.tensor([[1.0, 0.0], [0.0, 2.0], [-1.0, 1.0]], dtype=F64)
    DiagGaussian(mean, log_std).log_prob(a).sum().backward()
    # d/dmu = (a - mu) / sigma^2 ; d/dlog_std = z^2 - 1 summed over the batch
    torch.testing.assert_close(mean.grad, a)
    torch.testing.assert_close(log_std.grad, (a**2 - 1.0).sum(0))
