"""Deterministic claims: the sigmoid policy, the natural gradient, the clip cases, the KL
estimators, and the blog's worked printouts. Tolerances: the text's printed precision."""

from __future__ import annotations

import math

import numpy as np
import torch

from trustrl.experiments.registry import Context, Result, claim
from trustrl.maths import diagnostics as diag
from trustrl.maths.distributions import Categorical
from trustrl.maths.losses import clipped_surrogate_objective, surrogate_objective
from trustrl.maths.trust import conjugate_gradient, fisher_vector_product, mean_kl
from trustrl.maths.trust.fisher import detached

F64 = torch.float64


def sigmoid_dist(theta: float | torch.Tensor) -> Categorical:
    """pi(right) = sigmoid(theta), as the softmax of the logits (0, theta)."""
    t = torch.as_tensor(theta, dtype=F64).reshape(1)
    return Categorical(torch.cat([torch.zeros(1, dtype=F64), t])[None])


def sigmoid_kl(a: float, b: float) -> float:
    return float(sigmoid_dist(a).kl(sigmoid_dist(b)))


def sigmoid_fisher(theta: float) -> float:
    """F(theta) by trustrl's Fisher-vector product (double backprop of the mean KL)."""
    p = torch.tensor([theta], dtype=F64, requires_grad=True)
    old = detached(sigmoid_dist(p))
    fvp = fisher_vector_product(mean_kl(old, sigmoid_dist(p)), [p])
    return float(fvp(torch.ones(1, dtype=F64)))


def natural_step(theta: float, delta: float = 0.01) -> float:
    """sqrt(2 delta / x^T F x) * x with x = F^-1 g by conjugate gradient; g = sigma(1-sigma).

    Stable for large |theta|: g is computed as e^-|theta| / (1 + e^-|theta|)^2 (no 1 - sigma
    cancellation) and scaled to unit length before the solve. The step does not change when g
    is scaled (x scales with it and the square root undoes it), but conjugate_gradient stops at
    x = 0 when ||g||^2 is below its tolerance (1e-10), which a raw g < 1e-5 (|theta| > 11.5)
    would hit. ValueError where trustrl's F (autograd through log-softmax) rounds to 0 or the
    step overflows: theta above about 34, or below about -709."""
    F = sigmoid_fisher(theta)
    e = math.exp(-abs(theta))
    g = torch.tensor([e / (1 + e) ** 2], dtype=F64)
    x = conjugate_gradient(lambda v: F * v, g / torch.linalg.vector_norm(g), iters=1).x
    step = float(math.sqrt(2 * delta / float(x * (F * x))) * x) if F > 0 else math.nan
    if not math.isfinite(step):
        raise ValueError(f"no finite natural step at theta={theta}: the Fisher information "
                         f"there is {F:.3g}")
    return step


@claim("000.opening-table", "000 · A step in theta is not a step in behaviour",
       "The same parameter step, two different changes in behaviour")
def opening_table(ctx: Context) -> Result:
    r = Result()
    for a, b, p0, p1, kl, d in ((0, 1, 0.500, 0.731, 0.120, 3), (4, 5, 0.982, 0.993, 0.0066, 4)):
        r.exact(f"pi(right) at theta={a}", p0, float(sigmoid_dist(a).probs[0, 1]), 3)
        r.exact(f"pi(right) at theta={b}", p1, float(sigmoid_dist(b).probs[0, 1]), 3)
        r.exact(f"KL theta {a}->{b}", kl, sigmoid_kl(a, b), d)
    ratio = sigmoid_kl(0, 1) / sigmoid_kl(4, 5)
    r.approx("KL ratio ('18 times')", 18, ratio, 17.5, 18.5, "the text rounds to a whole number",
             fmt=".2f")
    r.notes = ("Exact KL between the Bernoulli policies sigma(theta) computed with trustrl's "
               "Categorical.kl on the logits (0, theta).")
    return r


@claim("000.fisher-quadratic", "000 · The Fisher metric (one-parameter example)",
       "F = sigma(1 - sigma) and the quadratic KL estimates")
def fisher_quadratic(ctx: Context) -> Result:
    r = Result()
    r.exact("F at theta=0", 0.25, sigmoid_fisher(0.0), 2)
    r.exact("F at theta=4", 0.0177, sigmoid_fisher(4.0), 4)
    r.exact("1/2 F (dtheta=1) at theta=0", 0.125, 0.5 * sigmoid_fisher(0.0), 3)
    r.exact("1/2 F (dtheta=1) at theta=4", 0.0088, 0.5 * sigmoid_fisher(4.0), 4)
    r.notes = ("F from trustrl.maths.trust.fisher_vector_product: the Hessian of the mean KL by "
               "double backprop, applied to v = 1. The quadratic model overestimates the exact "
               "KL of the unit step (0.125 vs 0.120, 0.0088 vs 0.0066): third-order terms.")
    return r


@claim("000.natural-gradient-table", "000 · The natural gradient (worked example)",
       "Plain gradient vs natural step at delta = 0.01")
def natural_table(ctx: Context) -> Result:
    r = Result()
    rows = ((0, 0.500, 0.250, 0.283, 0.0100), (2, 0.881, 0.105, 0.436, 0.0090),
            (4, 0.982, 0.018, 1.064, 0.0073))
    for theta, p, g, step, kl in rows:
        s = 1 / (1 + math.exp(-theta))
        d = natural_step(theta)
        r.exact(f"theta={theta}: pi(right)", p, s, 3)
        r.exact(f"theta={theta}: plain gradient g", g, s * (1 - s), 3)
        r.exact(f"theta={theta}: natural step", step, d, 3)
        r.exact(f"theta={theta}: KL of that step", kl, sigmoid_kl(theta, theta + d), 4)
    shrink = 0.25 / (1 / (1 + math.exp(-4)) * (1 - 1 / (1 + math.exp(-4))))
    r.approx("plain gradient shrinks '14-fold' (theta 0 -> 4)", 14, shrink, 13.5, 14.5,
             "whole-number rounding", fmt=".2f")
    r.notes = ("The natural step is trustrl's: x = F^-1 g by conjugate_gradient on the Fisher-"
               "vector product, scaled by sqrt(2 delta / x^T F x); the KL column is the exact "
               "KL of the step.")
    return r


def _steps_to_099(natural: bool) -> tuple[int, list[float]]:
    theta, path = 0.0, [0.0]
    while 1 / (1 + math.exp(-theta)) < 0.99:
        s = 1 / (1 + math.exp(-theta))
        theta += natural_step(theta) if natural else 1.0 * s * (1 - s)
        path.append(theta)
    return len(path) - 1, path


@claim("000.ex9.5", "000 · Exercise 9.5", "Natural vs plain gradient steps to pi(right) >= 0.99")
def ex95(ctx: Context) -> Result:
    r = Result()
    r.exact("(b) step at theta=0", 0.283, natural_step(0.0), 3)
    r.exact("(b) step at theta=4", 1.064, natural_step(4.0), 3)
    n_nat, p_nat = _steps_to_099(True)
    n_plain, p_plain = _steps_to_099(False)
    r.approx("(c) natural steps (delta 0.01)", 11, n_nat, 11, 11, "an exact count", fmt="d")
    r.approx("(c) plain steps (lr 1): 'about 100 (a quick loop gives 107)'", 107, n_plain,
             107, 107, "the text's own loop count", fmt="d")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sig = lambda x: 1 / (1 + np.exp(-np.asarray(x)))  # noqa: E731
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
    ax[0].plot(sig(p_nat), "o-", ms=3, label=f"natural, delta 0.01 ({n_nat} steps)")
    ax[0].plot(sig(p_plain), "-", label=f"plain, lr 1 ({n_plain} steps)")
    ax[0].axhline(0.99, color="k", ls=":", lw=1)
    ax[0].set(xlabel="step", ylabel="pi(right)", title="Reaching pi(right) >= 0.99")
    ax[0].legend(fontsize=8)
    kls_nat = [sigmoid_kl(a, b) for a, b in zip(p_nat, p_nat[1:], strict=False)]
    kls_plain = [sigmoid_kl(a, b) for a, b in zip(p_plain, p_plain[1:], strict=False)]
    ax[1].semilogy(kls_nat, "o-", ms=3, label="natural")
    ax[1].semilogy(kls_plain, "-", label="plain")
    ax[1].set(xlabel="step", ylabel="KL of the step", title="Behaviour change per step")
    ax[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(ctx.figure("natural_vs_plain.png"), dpi=110)
    plt.close(fig)
    r.figures.append("natural_vs_plain.png")
    r.notes = ("The natural gradient moves at a nearly constant KL per step while the plain "
               "gradient's steps vanish as the policy saturates.")
    return r


SIX_CASES = ((+2, 1.1, 2.2, 2.2, 2.2, 2, 1), (+2, 1.5, 3.0, 2.4, 2.4, 0, 2),
             (+2, 0.5, 1.0, 1.6, 1.0, 2, 1), (-1, 0.9, -0.9, -0.9, -0.9, -1, 3),
             (-1, 0.6, -0.6, -0.8, -0.8, 0, 4), (-1, 1.4, -1.4, -1.2, -1.4, -1, 3))


def clip_value_and_slope(adv: float, rho: float, eps: float) -> tuple[float, float, float, float]:
    """(rho*A, clip(rho)*A, min, d/d rho of the min) with trustrl's loss and autograd."""
    ratio = torch.tensor([rho], dtype=F64, requires_grad=True)
    a = torch.tensor([adv], dtype=F64)
    obj = clipped_surrogate_objective(ratio, a, eps)
    (slope,) = torch.autograd.grad(obj.sum(), ratio)
    clipped = float(torch.clamp(ratio, 1 - eps, 1 + eps).detach() * a)
    return float(surrogate_objective(ratio.detach(), a)), clipped, float(obj.detach()), float(slope)


def _case(adv: float, rho: float, eps: float) -> int:
    if adv > 0:
        return 2 if rho > 1 + eps else 1
    return 4 if rho < 1 - eps else 3


@claim("000.clip-cases", "000 · PPO-clip: the four cases (worked numbers)",
       "The six worked clip cases at eps = 0.2")
def clip_cases(ctx: Context) -> Result:
    r = Result()
    for adv, rho, ua, ca, mn, slope, case in SIX_CASES:
        u, c, m, s = clip_value_and_slope(adv, rho, 0.2)
        tag = f"A={adv:+d}, rho={rho}"
        r.exact(f"{tag}: rho*A", ua, u, 1)
        r.exact(f"{tag}: clip(rho)*A", ca, c, 1)
        r.exact(f"{tag}: min", mn, m, 1)
        r.exact(f"{tag}: slope d/d rho (autograd)", slope, s, 0)
        r.approx(f"{tag}: case", case, _case(adv, rho, 0.2), case, case, "case number",
                 fmt="d")
    _clip_figure(ctx)
    r.figures.append("clip_objective.png")
    r.notes = ("Values and slopes from trustrl.maths.losses.clipped_surrogate_objective with "
               "autograd; the figure draws both panels with the zero-gradient zones shaded.")
    return r


def _clip_figure(ctx: Context, eps: float = 0.2) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rho = torch.linspace(0.0, 2.0, 801, dtype=F64)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, adv in zip(axes, (1.0, -1.0), strict=True):
        a = torch.full_like(rho, adv)
        ax.plot(rho, surrogate_objective(rho, a), "--", color="gray", label="unclipped rho*A")
        ax.plot(rho, torch.clamp(rho, 1 - eps, 1 + eps) * a, ":", color="C0",
                label="clipped clip(rho)*A")
        ax.plot(rho, clipped_surrogate_objective(rho, a, eps), color="C1", lw=2.2,
                label="PPO objective (min)")
        ax.axvspan(1 - eps, 1 + eps, color="C2", alpha=0.12, label="band [1-eps, 1+eps]")
        zone = (1 + eps, 2.0) if adv > 0 else (0.0, 1 - eps)
        ax.axvspan(*zone, color="red", alpha=0.08, hatch="//", label="zero gradient")
        ax.set(xlabel="ratio rho", title=f"A {'> 0' if adv > 0 else '< 0'} (A = {adv:+g})")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("objective")
    axes[1].legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(ctx.figure("clip_objective.png"), dpi=110)
    plt.close(fig)


@claim("000.ex9.3", "000 · Exercise 9.3", "The four clip cases at eps = 0.1")
def ex93(ctx: Context) -> Result:
    r = Result()
    rows = (("a", +1, 1.05, 1.05, 1.05, 1.05, 1, 1), ("b", +1, 1.25, 1.25, 1.10, 1.10, 0, 2),
            ("c", +1, 0.7, 0.70, 0.90, 0.70, 1, 1), ("d", -2, 1.3, -2.60, -2.20, -2.60, -2, 3),
            ("e", -2, 0.85, -1.70, -1.80, -1.80, 0, 4), ("f", -2, 0.95, -1.90, -1.90, -1.90, -2, 3))
    for label, adv, rho, ua, ca, mn, slope, case in rows:
        u, c, m, s = clip_value_and_slope(adv, rho, 0.1)
        r.exact(f"({label}) rho*A", ua, u, 2)
        r.exact(f"({label}) clip(rho)*A", ca, c, 2)
        r.exact(f"({label}) min", mn, m, 2)
        r.exact(f"({label}) slope", slope, s, 0)
        r.approx(f"({label}) case", case, _case(adv, rho, 0.1), case, case, "case number",
                 fmt="d")
    g = torch.Generator().manual_seed(0)
    rho = torch.exp(torch.randn(100_000, generator=g, dtype=F64))
    adv = torch.randn(100_000, generator=g, dtype=F64)
    ok = bool((clipped_surrogate_objective(rho, adv, 0.1) <= surrogate_objective(rho, adv)).all())
    r.boolean("(g) L_clip <= rho*A sample by sample", "always", ok,
              "true on 100,000 random samples" if ok else "violated", "min(x, y) <= x")
    return r


@claim("000.ex9.4", "000 · Exercise 9.4", "KL between two categorical policies, by hand")
def ex94(ctx: Context) -> Result:
    r = Result()
    old = Categorical(torch.tensor([[0.5, 0.3, 0.2]], dtype=F64).log())
    new = Categorical(torch.tensor([[0.4, 0.4, 0.2]], dtype=F64).log())
    r.exact("(a) KL(old||new)", 0.02527, float(old.kl(new)), 5)
    r.exact("(a) KL(new||old)", 0.02582, float(new.kl(old)), 5)
    dp = new.probs - old.probs
    r.exact("(b) 1/2 sum dpi^2 / pi_old", 0.02667, float(0.5 * (dp**2 / old.probs).sum()), 5)
    log_ratio = (new.logits - old.logits)[0]
    k1, k3 = diag.kl_k1(log_ratio), diag.kl_k3(log_ratio)
    for i, (s1, s3) in enumerate(((0.2231, 0.0231), (-0.2877, 0.0457), (0.0, 0.0))):
        r.exact(f"(c) k1 action {i + 1}", s1, float(k1[i]), 4)
        r.exact(f"(c) k3 action {i + 1}", s3, float(k3[i]), 4)
    w = old.probs[0]
    r.exact("(c) pi_old-average of k1", 0.0253, float((w * k1).sum()), 4)
    r.exact("(c) pi_old-average of k3", 0.0253, float((w * k3).sum()), 4)
    r.boolean("(c) k1 negative for action 2, k3 never", "k1 < 0 for action 2",
              bool(k1[1] < 0 and (k3 >= 0).all()), f"k1[2] = {float(k1[1]):.4f}", "sign")
    return r


# ----- the blog (002) -------------------------------------------------------------------------
@claim("002.standardized-advantages", "002 · 2.3 The surrogate objective",
       "Standardising the advantages of five steps")
def blog_standardized(ctx: Context) -> Result:
    r = Result()
    returns = torch.tensor([5.0, 3.0, 8.0, 1.0, 6.0])
    values = torch.tensor([4.5, 4.0, 5.5, 3.0, 5.0])
    from trustrl.algos.common import normalize_advantages

    adv = normalize_advantages(returns - values)
    for i, stated in enumerate((0.171, -0.684, 1.312, -1.255, 0.456)):
        r.exact(f"standardised A[{i}]", stated, float(adv[i]), 3)
    r.notes = ("trustrl's normalize_advantages uses torch's unbiased std, as the blog does; "
               "a population std would give 0.191, -0.765, ... and not match.")
    return r


@claim("002.importance-sampling", "002 · 2.2 Importance sampling (worked example)",
       "Scoring a new policy from old data")
def blog_is(ctx: Context) -> Result:
    r = Result()
    p_old, p_new, adv = np.array([0.5, 0.5]), np.array([0.8, 0.2]), np.array([2.0, -1.0])
    r.exact("old policy's score E_old[A]", 0.5, float(p_old @ adv), 1)
    r.exact("reweighted E_old[r A]", 1.4, float(p_old @ (p_new / p_old * adv)), 1)
    r.exact("direct E_new[A]", 1.4, float(p_new @ adv), 1)
    r.notes = ("pi_old = (0.5, 0.5), pi_new = (0.8, 0.2), A = (+2, -1), as the blog's sums "
               "0.5(3.2) + 0.5(-0.4) and 0.8(+2) + 0.2(-1) imply.")
    return r


@claim("002.rare-action", "002 · 2.2 Importance sampling (the failure mode)",
       "One weight-30 sample carries about 60% of a 50-sample estimate")
def blog_rare(ctx: Context) -> Result:
    r = Result()
    p_old_rare, p_new_rare = 0.02, 0.6
    w_rare = p_new_rare / p_old_rare
    w_common = (1 - p_new_rare) / (1 - p_old_rare)
    share = w_rare / (w_rare + 49 * w_common)
    r.exact("weight of the rare sample", 30, w_rare, 0)
    r.approx("share of the estimate from that one sample", "about 60%", 100 * share, 55, 65,
             "'about'", fmt=".1f")
    r.notes = ("The blog's table did not survive in the text we have; its figures fit "
               "pi_old(rare) = 0.02 (one expected instance in 50 samples), pi_new(rare) = 0.6 "
               "(weight 30), the other 49 samples at weight 0.4/0.98 and equal values of f: "
               "30 / (30 + 49 * 0.408) = 0.600. This reconstruction is ours.")
    return r


@claim("002.clip-printout", "002 · 2.5 PPO: the clip (code printout)",
       "The four-row clip printout")
def blog_clip(ctx: Context) -> Result:
    r = Result()
    ratio = torch.tensor([0.95, 1.10, 1.50, 0.60])
    adv = torch.tensor([2.0, 2.0, -2.0, -2.0])
    obj = clipped_surrogate_objective(ratio, adv, 0.2)
    un = surrogate_objective(ratio, adv)
    cl = torch.clamp(ratio, 0.8, 1.2) * adv
    stated = ((1.90, 1.90, 1.90), (2.20, 2.20, 2.20), (-3.00, -2.40, -3.00),
              (-1.20, -1.60, -1.60))
    for i, (su, sc, so) in enumerate(stated):
        tag = f"r={float(ratio[i]):.2f} A={float(adv[i]):+.1f}"
        r.exact(f"{tag} uncl", su, float(un[i]), 2)
        r.exact(f"{tag} clip", sc, float(cl[i]), 2)
        r.exact(f"{tag} obj", so, float(obj[i]), 2)
    return r


@claim("002.gaussian-printout", "002 · 2.6 The Gaussian policy (code printout)",
       "mu, sigma, a sampled action and its log-prob under torch.manual_seed(0)")
def blog_gaussian(ctx: Context) -> Result:
    r = Result()
    from torch import nn

    torch.manual_seed(0)
    # the blog's layer creation order decides which random numbers each layer gets
    body = nn.Sequential(nn.Linear(3, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh())
    mean_layer = nn.Linear(64, 1)
    log_std = torch.zeros(1) - 0.5
    obs = torch.randn(1, 3)
    with torch.no_grad():
        mu = mean_layer(body(obs))
        d = torch.distributions.Normal(mu, log_std.exp())
        a = d.sample()
        lp = d.log_prob(a).sum()
    r.exact("mu", -0.060, float(mu), 3)
    r.exact("sigma", 0.607, float(log_std.exp()), 3)
    r.exact("sampled a", -0.231, float(a), 3)
    r.exact("log_prob", -0.459, float(lp), 3)
    r.notes = (f"torch {torch.__version__} on CPU. Same layer shapes and creation order as the "
               "blog's snippet; PyTorch's default Linear initialisation and its CPU generator "
               "decide the numbers. If a row differs, the likely cause is a different PyTorch "
               "version or device: the seed fixes the stream, not the initialisation scheme.")
    return r
