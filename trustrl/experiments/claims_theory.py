"""The chapter's theory, checked exactly on random small tabular MDPs by dynamic programming.

Source 000, "The surrogate objective" (the performance difference lemma and why L matches J to
first order, Exercise 9.2), "Trust regions and TRPO" (the lower bound with
C = 4 gamma max|A| / (1 - gamma)^2) and "The Fisher metric" (KL ~ 1/2 dtheta^T F dtheta).

Every quantity is an exact expectation computed by linear solves in float64 (tabular.py), so the
identities are checked to round-off and the asymptotic statements by their order in the step
size. The MDPs: S in 3..6 states, A in 2..4 actions, Dirichlet(0.5) transitions, N(0, 1)
rewards, gamma cycling through 0.5, 0.9 and 0.99.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from trustrl.experiments.registry import Context, Result, claim
from trustrl.experiments.tabular import (
    DTYPE,
    TabularMDP,
    advantages,
    discounted_visitation,
    fisher,
    kl_per_state,
    mean_kl,
    objective,
    old_policy_terms,
    policy,
    random_logits,
    random_mdp,
    state_distributions,
    state_values,
    surrogate,
    truncation_horizon,
)
from trustrl.maths.trust.fisher import fisher_vector_product

GAMMAS = (0.5, 0.9, 0.99)
FULL_MDPS, QUICK_MDPS = 30, 6
ROUND_OFF = 1e-9  # relative to the problem's scale: float64 eps 2e-16 times a condition number
#                   of at most 1 / (1 - gamma) = 100 and a few hundred operations, with margin.


def _one_thread(fn: Callable[[Context], Result]) -> Callable[[Context], Result]:
    """Run a claim with one intra-op torch thread, restoring the setting after. The tensors are
    a few dozen numbers: a second thread buys nothing, and on a busy machine its start-up makes
    a 6 x 4 softmax take milliseconds instead of microseconds."""
    @functools.wraps(fn)
    def run(ctx: Context) -> Result:
        n = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return fn(ctx)
        finally:
            torch.set_num_threads(n)

    return run


def _mdps(ctx: Context, tag: int) -> list[tuple[TabularMDP, np.random.Generator]]:
    """The random MDPs of one claim, each with its own generator for that claim's policies."""
    cases = []
    for seed in ctx.seeds(FULL_MDPS, QUICK_MDPS):
        rng = np.random.default_rng([tag, seed])
        n_states, n_actions = int(rng.integers(3, 7)), int(rng.integers(2, 5))
        cases.append((random_mdp(n_states, n_actions, GAMMAS[seed % 3], rng), rng))
    return cases


def _direction(mdp: TabularMDP, rng: np.random.Generator) -> Tensor:
    """A random logit direction v [S, A] scaled to max |v| = 1 (so t is the largest logit move)."""
    v = random_logits(mdp.n_states, mdp.n_actions, rng)
    return v / v.abs().max()


def _flat_hessian(fn: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    """The Hessian of a scalar function of x [S, A], over the flattened x."""
    n = x.numel()
    return torch.autograd.functional.hessian(fn, x).reshape(n, n)


def _mdp_summary(cases: list[tuple[TabularMDP, np.random.Generator]]) -> str:
    sizes = sorted({(m.n_states, m.n_actions) for m, _ in cases})
    return (f"{len(cases)} random MDPs (S x A from {sizes[0][0]}x{sizes[0][1]} to "
            f"{sizes[-1][0]}x{sizes[-1][1]}; gamma in {{0.5, 0.9, 0.99}})")


# --- 1. the performance difference lemma ---------------------------------------------------------

@claim("000.theory.pdl", "000 · The performance difference lemma",
       "J(pi') - J(pi) = E_{tau~pi'}[sum_t gamma^t A^pi(s_t, a_t)], exactly, on random MDPs")
@_one_thread
def performance_difference(ctx: Context) -> Result:
    res = Result()
    cases = _mdps(ctx, tag=1)
    pairs = 5
    err_visit = err_traj = 0.0
    rel_size = []
    for mdp, rng in cases:
        horizon = truncation_horizon(mdp.gamma)
        discounts = mdp.gamma ** torch.arange(horizon, dtype=DTYPE)
        for _ in range(pairs):
            pi = policy(random_logits(mdp.n_states, mdp.n_actions, rng, scale=2.0))
            pi_new = policy(random_logits(mdp.n_states, mdp.n_actions, rng, scale=2.0))
            lhs = float(mdp.mu @ (state_values(mdp, pi_new) - state_values(mdp, pi)))
            f = (pi_new * advantages(mdp, pi)).sum(-1)  # E_{a ~ pi'}[A^pi(s, a)]
            rhs_visit = float(discounted_visitation(mdp, pi_new) @ f)
            rhs_traj = float(discounts @ (state_distributions(mdp, pi_new, horizon) @ f))
            err_visit = max(err_visit, abs(lhs - rhs_visit) / mdp.value_scale)
            err_traj = max(err_traj, abs(lhs - rhs_traj) / mdp.value_scale)
            rel_size.append(abs(lhs) / mdp.value_scale)
    n = len(cases) * pairs
    why = (f"float64 round-off: {ROUND_OFF:g} x max|R|/(1-gamma); an identity, so anything "
           "larger is a mistake")
    res.approx("trajectory form: max |ΔJ - Σ_t γ^t E_{p_t^π'}[E_{π'} A^π]| / scale",
               "0 (identity)", err_traj, 0.0, ROUND_OFF, why, fmt=".1e")
    res.approx("visitation form: max |ΔJ - Σ_s d^π'(s) Σ_a π'(a|s) A^π(s,a)| / scale",
               "0 (identity)", err_visit, 0.0, ROUND_OFF, why, fmt=".1e")
    res.notes = (
        f"Over {_mdp_summary(cases)} and {pairs} pairs of random softmax policies each ({n} "
        "pairs, logits N(0, 2²)), the left side J(π') − J(π) = μ·(V^π' − V^π) comes from two "
        "policy evaluations V = (I − γP_π)⁻¹ r_π. The right side is computed twice, "
        "independently of it: as the trajectory expectation, propagating the state distribution "
        "p_{t+1} = p_t P_π' forward and summing γ^t p_t·f for t < T with the tail γ^T/(1−γ) "
        "below 1e-13 of the scale, where f(s) = Σ_a π'(a|s) A^π(s,a); and in closed form with "
        "the unnormalised discounted visitation d^π' = μᵀ(I − γP_π')⁻¹. Errors are divided by "
        "max|R|/(1−γ), the bound on |V|. The differences are not small in the first place: "
        f"median |J(π') − J(π)| is {np.median(rel_size):.2f} of that scale."
    )
    return res


# --- 2. L matches J to first order, not to second ------------------------------------------------

T_CHECK = (1e-2, 1e-3)
Curve = tuple[float, int, int, np.ndarray, list[float], float]  # gamma, S, A, t, |gap|, c2
T_REPORT = (1e-1, 1e-2, 1e-3)
K_ORDER = 100.0  # the O(t) constant allowed in gap / (c2 t^2) - 1: the ratio of the third to
#                 the second Taylor coefficient grows with the effective horizon 1/(1-gamma) <= 100


def _gap(mdp: TabularMDP, theta_old: Tensor, theta: Tensor, j_old: float) -> float:
    """J(theta) - J(theta_old) - L(theta), directly from its definition."""
    return float(objective(mdp, theta)) - j_old - float(surrogate(mdp, theta, theta_old))


@claim("000.theory.first-order",
       "000 · The performance difference lemma (Step 4), Exercise 9.2",
       "L and J agree in value and gradient at theta_old and differ at second order")
@_one_thread
def first_order(ctx: Context) -> Result:
    res = Result()
    cases = _mdps(ctx, tag=2)
    per_mdp = 3
    err_value = err_grad = 0.0
    min_c2 = math.inf
    ratios: dict[float, list[float]] = {t: [] for t in T_REPORT}
    curves: list[Curve] = []  # for the figure: the first case of each gamma
    t_plot = np.logspace(-3.5, 0.0, 29)
    for mdp, rng in cases:
        for k in range(per_mdp):
            theta_old = random_logits(mdp.n_states, mdp.n_actions, rng)
            v = _direction(mdp, rng)
            theta = theta_old.clone().requires_grad_(True)
            J, L = objective(mdp, theta), surrogate(mdp, theta, theta_old)
            (grad_J,) = torch.autograd.grad(J, theta)
            (grad_L,) = torch.autograd.grad(L, theta)
            err_value = max(err_value, abs(L.item()) / mdp.value_scale)
            err_grad = max(err_grad, float((grad_L - grad_J).abs().max() / grad_J.abs().max()))
            H = (_flat_hessian(functools.partial(objective, mdp), theta_old)
                 - _flat_hessian(functools.partial(surrogate, mdp, theta_old=theta_old),
                                 theta_old))
            c2 = 0.5 * float(v.reshape(-1) @ H @ v.reshape(-1))  # gap = c2 t^2 + O(t^3)
            min_c2 = min(min_c2, abs(c2) / mdp.value_scale)
            j_old = J.item()
            for t in T_REPORT:
                ratios[t].append(_gap(mdp, theta_old, theta_old + t * v, j_old) / (c2 * t * t))
            if k == 0 and mdp.gamma not in [c[0] for c in curves]:
                gaps = [abs(_gap(mdp, theta_old, theta_old + t * v, j_old)) for t in t_plot]
                curves.append((mdp.gamma, mdp.n_states, mdp.n_actions, t_plot, gaps, c2))

    why = f"float64 round-off ({ROUND_OFF:g} relative)"
    res.approx("L(θ_old) = J(θ_old) − J(θ_old) = 0: max |L(θ_old)| / scale", "0", err_value,
               0.0, ROUND_OFF, why + "; scale max|R|/(1−γ)", fmt=".1e")
    res.approx("∇L(θ_old) = ∇J(θ_old): max |∇L − ∇J| / max |∇J| (autograd)", "equal", err_grad,
               0.0, ROUND_OFF, why, fmt=".1e")
    res.boolean("they differ at second order: c2 = ½ vᵀ(∇²J − ∇²L)v ≠ 0",
                "apart at second order", min_c2 > ROUND_OFF,
                f"min |c2| / scale = {min_c2:.2g}",
                f"nonzero: above round-off ({ROUND_OFF:g} × scale) in every case; exact "
                "Hessians by autograd")
    for t in T_CHECK:
        worst = max(ratios[t], key=lambda r: abs(r - 1.0))
        res.approx(f"(J − J_old − L) / (c2 t²) at t = {t:g}, worst case", "→ 1 as t → 0",
                   worst, 1.0 - K_ORDER * t, 1.0 + K_ORDER * t,
                   f"O(t): ±{K_ORDER:g} t, the third/second Taylor coefficient ratio allowed up "
                   "to the effective horizon 1/(1−γ) ≤ 100", fmt=".4f")

    name = "theory_first_order.png"
    _plot_gap(curves, ctx.figure(name))
    res.figures.append(name)
    n = len(cases) * per_mdp
    spread = "; ".join(
        f"t = {t:g}: {np.min(ratios[t]):.4f} to {np.max(ratios[t]):.4f}" for t in T_REPORT)
    res.notes = (
        f"Over {_mdp_summary(cases)} with {per_mdp} random (θ_old, v) each ({n} cases; θ_old ~ "
        "N(0, 1), direction v scaled to max|v| = 1), J is the exact policy value and L the exact "
        "surrogate Σ_s d^old(s) Σ_a π_θ(a|s) A^old(s,a) with the unnormalised discounted "
        "visitation of the old policy. Value and gradient agree at θ_old to round-off (gradients "
        "by autograd through the linear solves). The second-order coefficient c2 = "
        "½ vᵀ(∇²J − ∇²L)v comes from exact autograd Hessians, and the gap J(θ) − J(θ_old) − L(θ) "
        "along θ = θ_old + t v, computed directly from its definition, divided by c2 t² "
        f"ranges over the cases: {spread}. The deviation from 1 shrinks tenfold per decade of "
        "t, i.e. linearly (t = 0.1 is not yet a small step: the higher-order terms still show), "
        "so the gap is c2 t² + O(t³) with c2 ≠ 0: the surrogate is exact to first order and only "
        "there. The figure shows |gap| for one MDP per γ against the slope-2 guide (dashed: "
        "c2 t²; a dip is where the gap changes sign at a large step)."
    )
    return res


def _plot_gap(curves: list[Curve], path: Path) -> None:
    """|J - J_old - L| against t on log-log axes, one line per gamma, slope-2 guide."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.8))
    colors = ["tab:blue", "tab:orange", "tab:green"]
    for (gamma, S, A, ts, gaps, c2), color in zip(curves, colors, strict=False):
        ax.loglog(ts, gaps, "o-", ms=3.5, color=color,
                  label=f"γ = {gamma:g} (S = {S}, A = {A})")
        ax.loglog(ts, abs(c2) * ts ** 2, "--", lw=1, color=color, alpha=0.7)
    ts = curves[0][3]
    anchor = min(min(g) for *_, g, _ in curves) / ts[0] ** 2 / 10
    ax.loglog(ts, anchor * ts ** 2, ":", color="gray", lw=2, label="slope 2 guide (∝ t²)")
    ax.set_xlabel("step t  (θ = θ_old + t v, max|v| = 1)")
    ax.set_ylabel("|J(θ) − J(θ_old) − L(θ)|")
    ax.set_title("The surrogate matches J to first order: the gap grows as t²\n"
                 "(dashed: exact second-order term c2 t² from autograd Hessians)", fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --- 3. TRPO's lower bound -----------------------------------------------------------------------

DELTA = 0.01  # the chapter's typical KL constraint


@claim("000.theory.trpo-bound", "000 · Trust regions and TRPO",
       "J(theta) >= J(theta_old) + L(theta) - C max_s KL, C = 4 gamma max|A| / (1 - gamma)^2")
@_one_thread
def trpo_bound(ctx: Context) -> Result:
    res = Result()
    cases = _mdps(ctx, tag=3)
    olds_per_mdp, n_dirs, n_far = 2, 10, 10
    scales = np.logspace(-3, 1, 9)
    t_line = np.logspace(-6, 1, 71)
    n_eval = violations = 0
    max_q = -math.inf  # (J_old + L - J) / (C max KL): the bound holds iff q <= 1
    looseness = []  # C max KL / |J - J_old - L|
    kl_at_opt: dict[float, list[float]] = {g: [] for g in GAMMAS}
    gain_ratio: dict[float, list[float]] = {g: [] for g in GAMMAS}
    for mdp, rng in cases:
        for _ in range(olds_per_mdp):
            theta_old = random_logits(mdp.n_states, mdp.n_actions, rng)
            old = old_policy_terms(mdp, theta_old)
            C = 4 * mdp.gamma * float(old[1].abs().max()) / (1 - mdp.gamma) ** 2
            j_old = float(objective(mdp, theta_old))
            w_old = old[0] / old[0].sum()  # normalised visitation, for the mean KL

            def terms(theta: Tensor, m: TabularMDP = mdp, o: Tensor = theta_old, c: float = C,
                      j0: float = j_old, od: tuple[Tensor, Tensor] = old
                      ) -> tuple[float, float, float]:
                """(J - J_old, L, C max_s KL) at theta."""
                return (float(objective(m, theta)) - j0, float(surrogate(m, theta, o, od)),
                        c * float(kl_per_state(o, theta).max()))

            thetas = [theta_old + s * _direction(mdp, rng) for _ in range(n_dirs) for s in scales]
            thetas += [random_logits(mdp.n_states, mdp.n_actions, rng, scale=2.0)
                       for _ in range(n_far)]
            for theta in thetas:
                dJ, L, pen = terms(theta)
                n_eval += 1
                if dJ - (L - pen) < -ROUND_OFF * mdp.value_scale:
                    violations += 1
                max_q = max(max_q, (L - dJ) / pen)
                looseness.append(pen / abs(dJ - L))

            # the penalised step along the policy gradient vs TRPO's KL-constrained step
            theta = theta_old.clone().requires_grad_(True)
            (g,) = torch.autograd.grad(surrogate(mdp, theta, theta_old, old), theta)
            u = g / g.abs().max()
            rows = [terms(theta_old + t * u) for t in t_line]
            best = int(np.argmax([L - pen for _, L, pen in rows]))
            kl_at_opt[mdp.gamma].append(rows[best][2] / C)
            mkl = np.array([float(w_old @ kl_per_state(theta_old, theta_old + t * u))
                            for t in t_line])
            k_delta = int(np.nonzero(mkl <= DELTA)[0].max())
            gain_ratio[mdp.gamma].append(rows[k_delta][0] / rows[best][0])

    res.boolean("the bound holds for every θ tried", "J(θ) ≥ J(θ_old) + L(θ) − C max_s KL",
                violations == 0,
                f"{violations} violations in {n_eval}; max (J_old + L − J)/(C max KL) = "
                f"{max_q:.3g}; median penalty / |J − J_old − L| = {np.median(looseness):.3g}",
                f"a violation is a slack below −{ROUND_OFF:g} × max|R|/(1−γ) (round-off)")
    med = float(np.median(kl_at_opt[0.99]))
    res.boolean("C is so large the steps it allows are tiny (γ = 0.99)",
                "steps allowed by the penalty are tiny; TRPO uses KL ≤ δ (δ = 0.01) instead",
                med < DELTA,
                f"median max_s KL at the penalised optimum along the policy gradient: {med:.2g}",
                f"tiny: below the δ = {DELTA:g} the chapter gives as a typical constraint")
    per_gamma = "; ".join(
        f"γ = {g:g}: {np.median(kl_at_opt[g]):.2g} (J improves {np.median(gain_ratio[g]):.3g}× "
        "more at the δ step)" for g in GAMMAS)
    res.notes = (
        f"Over {_mdp_summary(cases)}, {olds_per_mdp} random θ_old each, the bound is evaluated "
        f"exactly at {n_eval} policies θ: θ_old + s v for {n_dirs} random directions (max|v| = 1) "
        f"and s from 1e-3 to 10 (near and far), plus {n_far} unrelated random policies per "
        "θ_old. J is the exact value, L the exact surrogate (true advantage, unnormalised "
        "discounted visitation of π_old), KL the exact per-state KL, C = 4γ max|A^old| / (1−γ)². "
        f"No θ violates the bound. It is far from tight: the surrogate's error J_old + L − J "
        f"reaches at most {max_q:.2g} of the penalty, and the median penalty is "
        f"{np.median(looseness):.3g} times the actual gap |J − J_old − L|. Maximising the lower "
        "bound along the policy gradient (71 log-spaced steps) stops at a median max-KL of "
        f"{per_gamma}: the penalised step is smaller than TRPO's δ = 0.01 step by orders of "
        "magnitude once γ is large, and forgoes most of the improvement that the KL-constrained "
        "step actually gets. This is the chapter's reason for replacing the penalty by the "
        "constraint mean KL ≤ δ."
    )
    return res


# --- 4. KL is quadratic with the Fisher matrix -------------------------------------------------

@claim("000.theory.kl-quadratic", "000 · The Fisher metric",
       "KL(pi_old || pi_{old + t v}) ~ 1/2 t^2 v^T F v, F the Fisher under the old visitation")
@_one_thread
def kl_quadratic(ctx: Context) -> Result:
    res = Result()
    cases = _mdps(ctx, tag=4)
    per_mdp = 3
    ts = (1e-1, 1e-2, 1e-3)
    ratios: dict[float, list[float]] = {t: [] for t in ts}
    err_hess = err_fvp = 0.0
    for mdp, rng in cases:
        for _ in range(per_mdp):
            theta_old = random_logits(mdp.n_states, mdp.n_actions, rng)
            v = _direction(mdp, rng)
            F = fisher(mdp, theta_old)
            vf = v.reshape(-1)
            H = _flat_hessian(functools.partial(mean_kl, mdp, theta_old), theta_old)
            err_hess = max(err_hess, float((H - F).abs().max()))
            theta = theta_old.clone().requires_grad_(True)
            fvp = fisher_vector_product(mean_kl(mdp, theta_old, theta), [theta])
            err_fvp = max(err_fvp, float((fvp(vf) - F @ vf).abs().max()))
            quad = 0.5 * float(vf @ F @ vf)
            for t in ts:
                kl = float(mean_kl(mdp, theta_old, theta_old + t * v))
                ratios[t].append(kl / (t * t * quad))

    res.approx("information identity: max |∇²_θ mean KL − E[∇log π ∇log πᵀ]| at θ_old",
               "F = −E[∇²ℓ] = E[∇ℓ∇ℓᵀ]", err_hess, 0.0, ROUND_OFF,
               "float64 round-off (entries of F are at most 1/4)", fmt=".1e")
    res.approx("trustrl.maths.trust.fisher_vector_product(KL) v = F v: max abs error",
               "F v by double backprop of the KL", err_fvp, 0.0, ROUND_OFF,
               "float64 round-off", fmt=".1e")
    for t in ts:
        worst = max(ratios[t], key=lambda r: abs(r - 1.0))
        res.approx(f"mean KL / (½ t² vᵀFv) at t = {t:g}, worst case", "→ 1 (KL ≈ ½ΔθᵀFΔθ)",
                   worst, 1.0 - t, 1.0 + t,
                   "±t: per state the ratio is 1 + κ3 t/(3κ2) + κ4 t²/(12κ2) + …, with "
                   "|κ3| ≤ 2κ2 and |κ4| ≤ 4κ2 for max|v| = 1", fmt=".5f")
    n = len(cases) * per_mdp
    res.notes = (
        f"Over {_mdp_summary(cases)} with {per_mdp} random (θ_old, v) each ({n} cases), F is the "
        "Fisher matrix of the tabular softmax policy under the old policy's normalised "
        "discounted visitation w = (1−γ)d^old: block diagonal with blocks "
        "w(s)(diag π_s − π_s π_sᵀ). It equals the autograd Hessian of the visitation-weighted "
        "KL at θ_old (the boxed information identity), and trustrl's own Fisher-vector product "
        "(double backprop of that KL) reproduces F v. The KL along θ_old + t v is exact. Why the "
        "tolerance ±t is chosen that way: per state, KL(π_θ ‖ π_{θ+tv}) = K(t) − tκ1 with K the "
        "cumulant generating function of X = v_a, a ~ π_old, so the ratio to ½t²κ2 is "
        "1 + κ3 t/(3κ2) + κ4 t²/(12κ2) + …; with max|v| = 1 the range of X is at most 2, hence "
        "|κ3| ≤ 2κ2, |κ4| ≤ 4κ2, and |ratio − 1| ≤ 2t/3 + t²/3 + … < t for t ≤ 0.1; a "
        "visitation-weighted average of such per-state ratios obeys the same bound. Observed "
        "ranges: " + "; ".join(
            f"t = {t:g}: {np.min(ratios[t]):.5f} to {np.max(ratios[t]):.5f}" for t in ts) + "."
    )
    return res
