"""The chapter's 3-armed bandit: the 4-pull surrogate, the clip's speed bump, the K-epoch demo
(simulated in kepoch.py) and Exercises 9.1 and 9.7.

Tolerances are fixed here, before any result is seen:

- deterministic arithmetic: the text's printed precision (Result.exact);
- averages over seeds: the text's own figure came from its own 300-seed simulation with a
  different random number generator, so ours and its are two independent estimates of the same
  expectation; the difference has standard deviation sd * sqrt(1/n + 1/300). We accept 3 such
  standard deviations plus half a unit of the text's last printed digit ("about");
- proportions: the same, with the binomial sd sqrt(p (1 - p)) at the stated p;
- medians: the bootstrap standard error of our median, scaled the same way;
- the iteration where PPO overtakes: our bootstrap 95% interval must meet the stated range.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from numpy.typing import NDArray

from trustrl.experiments.kepoch import (
    LEARNERS,
    MEANS,
    PLAIN,
    PPO,
    DemoConfig,
    DemoRun,
    kl_categorical,
    log_softmax,
    simulate,
    surrogate_grad,
)
from trustrl.experiments.registry import Context, Result, claim
from trustrl.maths.distributions import Categorical
from trustrl.maths.losses import clipped_surrogate_objective, surrogate_objective

F64 = torch.float64
ARMS = ("A", "B", "C")
# the chapter's 4-pull batch: arms A, B, B, C with advantages (reward minus batch mean 0)
BATCH_ARMS = torch.tensor([0, 1, 1, 2])
BATCH_ADV = torch.tensor([0.5, 1.5, 0.5, -2.5], dtype=F64)
PI_OLD = torch.full((3,), 1.0 / 3.0, dtype=F64)
EPS = 0.2
N_TEXT = 300  # the text's seed count for its simulated figures
BOOT = 1000  # bootstrap resamples (fixed bootstrap seed 0)


# ------------------------------------------------------------------------------------------------
# the 4-pull batch


def batch_surrogate(pi: torch.Tensor, clip: bool = False, eps: float = EPS) -> torch.Tensor:
    """Mean over the 4-pull batch of rho * A (or its PPO-clip version); pi: [..., 3] -> [...]."""
    ratio = pi[..., BATCH_ARMS] / PI_OLD[BATCH_ARMS]
    adv = BATCH_ADV.to(pi.dtype)
    per_sample = (clipped_surrogate_objective(ratio, adv, eps) if clip
                  else surrogate_objective(ratio, adv))
    return per_sample.mean(-1)


def kl_from_old(pi: torch.Tensor) -> float:
    """KL(pi_old || pi) with trustrl's Categorical (infinite when pi has a zero)."""
    old = Categorical(PI_OLD.log()[None])
    return float(old.kl(Categorical(pi.to(F64).log()[None]))[0])


def simplex_grid(step: float, centre: tuple[float, float] | None = None,
                 half_width: float = 0.0) -> torch.Tensor:
    """Points (a, b, 1-a-b) of the probability simplex on a grid of the given step, optionally
    restricted to a square around centre = (a, b). Returns [G, 3] in float64."""
    if centre is None:
        a = torch.arange(0, round(1 / step) + 1, dtype=F64) * step
        b = a
    else:
        k = round(half_width / step)
        a = centre[0] + torch.arange(-k, k + 1, dtype=F64) * step
        b = centre[1] + torch.arange(-k, k + 1, dtype=F64) * step
    A, B = torch.meshgrid(a, b, indexing="ij")
    pts = torch.stack([A.flatten(), B.flatten(), 1 - A.flatten() - B.flatten()], -1)
    return pts[(pts >= -1e-12).all(-1)].clamp_min(0.0)


def ascend(lr: float, clip: bool, dtype: torch.dtype = F64, max_steps: int = 100_000
           ) -> tuple[list[list[float]], int, bool]:
    """Plain gradient ascent on the 3 softmax logits from uniform (autograd through trustrl's
    objective) until a step changes nothing (z + lr * g == z exactly) or max_steps.

    Returns the path of policies, the number of steps taken and whether it stopped by itself.
    """
    z = torch.zeros(3, dtype=dtype)
    path = [torch.softmax(z, -1).tolist()]
    for step in range(max_steps):
        zz = z.clone().requires_grad_(True)
        obj = batch_surrogate(torch.softmax(zz, -1), clip=clip)
        (g,) = torch.autograd.grad(obj, zz)
        z_new = z + lr * g
        if torch.equal(z_new, z):
            return path, step, True
        z = z_new
        path.append(torch.softmax(z, -1).tolist())
    return path, max_steps, False


@claim("000.bandit-surrogate", "000 · Why you can't trust the surrogate far away",
       "The 4-pull batch: L is linear in pi and its maximiser is the corner B")
def bandit_surrogate(ctx: Context) -> Result:
    r = Result()
    eye = torch.eye(3, dtype=F64)
    coef = batch_surrogate(eye)  # L is linear in pi, so L(e_a) is the coefficient of pi(a)
    for a, stated, d in ((0, 0.375, 3), (1, 1.5, 1), (2, -1.875, 3)):
        r.exact(f"coefficient of pi({ARMS[a]}) in L", stated, float(coef[a]), d,
                "exact arithmetic")
    pts = torch.from_numpy(np.random.default_rng(0).dirichlet(np.ones(3), 1000))
    lin_err = float((batch_surrogate(pts) - pts @ coef).abs().max())
    r.boolean("L = c . pi on the simplex (1000 random policies)", "linear in pi",
              lin_err < 1e-12, f"max |L - c.pi| = {lin_err:.1e}", "floating-point round-off")
    grid = simplex_grid(0.005)
    vals = batch_surrogate(grid)
    best = grid[int(vals.argmax())]
    r.boolean("maximiser over the simplex (grid step 0.005)", "(0, 1, 0)",
              bool(torch.equal(best, torch.tensor([0.0, 1.0, 0.0], dtype=F64))),
              "(" + ", ".join(f"{x:.3f}" for x in best.tolist()) + ")",
              "a linear function peaks at a vertex; the grid contains the vertices")
    r.exact("L at the maximiser", 1.5, float(vals.max()), 1, "exact arithmetic")
    J = float(best @ torch.tensor(MEANS, dtype=F64))
    r.exact("true value J of the maximiser", 0.6, J, 1, "exact arithmetic")
    kl = kl_from_old(best)
    r.boolean("KL(pi_old || maximiser)", "∞", math.isinf(kl), f"{kl}", "pi(A) = pi(C) = 0")
    r.notes = ("L(pi) = mean_i surrogate_objective(rho_i, A_i) with rho_i = pi(a_i) / (1/3), "
               "evaluated with trustrl.maths.losses on the batch A +0.5, B +1.5, B +0.5, C -2.5. "
               "Its coefficients are L at the three vertices; linearity is checked at 1000 "
               "random "
               "policies. J = pi . (1.0, 0.6, 0.0); the KL is Categorical.kl of the uniform "
               "policy against the vertex, infinite.")
    return r


# ------------------------------------------------------------------------------------------------
# clipping is a speed bump


def _closest_on_ceiling(ceiling: float) -> tuple[torch.Tensor, float]:
    """argmin KL(pi_old || pi) over the policies where L_clip reaches its ceiling: a 0.002 grid,
    then a 1e-5 grid around the best point (so pi to 1e-5, KL to about 1e-5)."""
    coarse = simplex_grid(0.002)
    best = None
    for pts in (coarse, None):
        if pts is None:
            assert best is not None
            pts = simplex_grid(1e-5, (float(best[0]), float(best[1])), 0.004)
        on = pts[batch_surrogate(pts, clip=True) >= ceiling - 1e-9]
        kls = (PI_OLD * (PI_OLD.log() - on.clamp_min(1e-300).log())).sum(-1)
        best = on[int(kls.argmin())]
    assert best is not None
    return best, kl_from_old(best)


TABLE = ((0.05, (0.40, 0.40, 0.20), 0.051), (1.0, (0.41, 0.44, 0.16), 0.098),
         (3.0, (0.43, 0.55, 0.03), 0.576))


@claim("000.speed-bump", "000 · Clipping is a speed bump, not a wall",
       "The clip's ceiling 0.25, the closest policy on it, and the step-size table")
def speed_bump(ctx: Context) -> Result:
    r = Result()
    grid = simplex_grid(0.002)
    ceiling = float(batch_surrogate(grid, clip=True).max())
    r.exact("ceiling of L_clip (eps 0.2)", 0.25, ceiling, 2, "exact arithmetic (grid max)")
    edge = float(batch_surrogate(torch.tensor([0.4, 0.4, 0.2], dtype=F64), clip=True))
    r.exact("L_clip at rho_A = rho_B = 1.2, rho_C = 0.8", 0.25, edge, 2, "exact arithmetic")
    best, kl = _closest_on_ceiling(ceiling)
    for a in range(3):
        r.exact(f"closest policy on the ceiling: pi({ARMS[a]})", (0.4, 0.4, 0.2)[a],
                float(best[a]), 1, "printed precision; grid resolution 1e-5")
    r.exact("its KL(pi_old || pi)", 0.049, kl, 3, "printed precision; grid resolution 1e-5")

    why = ("printed precision; deterministic: the ascent stops by itself once all 4 samples "
           "are clipped (gradient exactly 0), so the stopping rule is not a free choice; "
           "float32 checked to agree")
    paths: dict[str, list[list[float]]] = {}
    lines, differ = [], []
    for lr, pi_text, kl_text in TABLE:
        path, steps, stopped = ascend(lr, clip=True)
        path32, steps32, _ = ascend(lr, clip=True, dtype=torch.float32)
        pi = torch.tensor(path[-1], dtype=F64)
        for a in range(3):
            if not r.exact(f"step {lr:g}: final pi({ARMS[a]})", pi_text[a], float(pi[a]), 2, why):
                twice = round(round(float(pi[a]), 3), 2)
                r.explain(
                    f"Step {lr:g}, pi({ARMS[a]}): ours is {float(pi[a]):.5f}, which rounds to "
                    f"{float(pi[a]):.2f}, not the text's {pi_text[a]:.2f}"
                    + (f"; rounding twice (to {float(pi[a]):.3f}, then to 2 decimals) gives "
                       f"{twice:.2f}, the text's figure, so we read it as a double-rounding "
                       "slip" if abs(twice - pi_text[a]) < 1e-9 else "")
                    + f". The same policy's KL ({kl_from_old(pi):.5f}) and the other two "
                    "probabilities agree with the text to every printed digit, and float32 "
                    "gives the same policy to 1e-7, so the procedure is the same; we do not "
                    "change it.")
        r.exact(f"step {lr:g}: KL(pi_old || pi)", kl_text, kl_from_old(pi), 3, why)
        diff32 = float((pi - torch.tensor(path32[-1], dtype=F64)).abs().max())
        lines.append(f"step {lr:g}: stopped by itself = {stopped} after {steps} steps "
                     f"(float32: {steps32} steps, max |pi64 - pi32| = {diff32:.1e})")
        paths[f"step {lr:g}"] = path

    # unclipped, any step size: the gradient never vanishes and the KL grows without bound
    lrs = np.array([0.05, 1.0, 3.0])
    z = np.zeros((3, 3))
    arms = np.broadcast_to(BATCH_ARMS.numpy(), (3, 4)).copy()
    adv = np.broadcast_to(BATCH_ADV.numpy(), (3, 4)).copy()
    logp_old = np.log(np.full((3, 3), 1 / 3))
    checkpoints = {10, 100, 1000, 10000}
    kls: dict[int, NDArray[np.float64]] = {}
    unclipped_path = []
    for step in range(1, 10001):
        z = z + lrs[:, None] * surrogate_grad(z, logp_old, arms, adv, np.inf)
        if step in checkpoints:
            kls[step] = kl_categorical(logp_old, log_softmax(z))
        if step <= 200:
            unclipped_path.append(np.exp(log_softmax(z[1])))
    pi_final = np.exp(log_softmax(z))
    for i, lr in enumerate(lrs):
        r.exact(f"unclipped, step {lr:g}: pi(B) after 10^4 steps", 1.0, float(pi_final[i, 1]), 2,
                "printed precision of the limit (0, 1, 0)")
    growing = all(np.all(kls[a] < kls[b]) for a, b in ((10, 100), (100, 1000), (1000, 10000)))
    r.boolean("unclipped: KL keeps growing (toward ∞)", "∞", growing,
              "KL after 10/100/1000/10000 steps, step 1: "
              + " / ".join(f"{kls[s][1]:.2f}" for s in sorted(kls)),
              "strictly increasing at every checkpoint for the three step sizes")
    r.notes = ("L_clip is the mean of trustrl's clipped_surrogate_objective over the 4-pull "
               "batch; ceiling and closest policy by grid search over the simplex (0.002, then "
               "1e-5 around the best point). The table's ascent runs autograd through that "
               "objective on the softmax logits from uniform, in float64, and stops when a step "
               "leaves the logits unchanged.\n\n" + "\n".join(f"- {s}" for s in lines)
               + "\n\nUnclipped: the same ascent on mean(rho A) for 10^4 steps; the gradient "
               "pi(B)(1.5 - L) on B's logit only vanishes in the limit, so there is no stopping "
               "point; KL after 10^4 steps = "
               + ", ".join(f"{kls[10000][i]:.1f} (step {lr:g})" for i, lr in enumerate(lrs))
               + ". Note the overshoot: even step 0.05 ends at KL 0.051, past the closest "
               "ceiling policy's 0.049." + ("\n\n**Differs:** " + " ".join(differ)
                                            if differ else ""))
    paths["unclipped, step 1"] = [[1 / 3] * 3] + [p.tolist() for p in unclipped_path]
    name = "speed_bump_paths.png"
    _plot_speed_bump(ctx.figure(name), paths, best.tolist())
    r.figures.append(name)
    return r


def _plot_speed_bump(path_png, paths: dict[str, list[list[float]]], best: list[float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = 401
    a = torch.linspace(0, 1, m, dtype=F64)
    A, B = torch.meshgrid(a, a, indexing="xy")  # rows: pi(B), columns: pi(A)
    pts = torch.stack([A, B, (1 - A - B).clamp_min(0.0)], -1)
    vals = batch_surrogate(pts, clip=True).numpy()
    vals = np.ma.masked_where((A + B).numpy() > 1 + 1e-12, vals)
    fig, ax = plt.subplots(figsize=(6.4, 5.6))
    im = ax.imshow(vals, origin="lower", extent=(0, 1, 0, 1), cmap="Blues", aspect="auto",
                   vmin=-0.75, vmax=0.25)
    fig.colorbar(im, ax=ax, label="clipped objective L_clip (ceiling 0.25; floor of scale -0.75)")
    ax.contour(a.numpy(), a.numpy(), vals, levels=[0.0, 0.1, 0.2], colors="k",
               linewidths=0.5, alpha=0.5)
    ax.fill([0.4, 0.6, 0.4], [0.4, 0.4, 0.6], facecolor="none", edgecolor="tab:green",
            hatch="//", lw=1.5, label="ceiling reached (rho_A, rho_B ≥ 1.2, rho_C ≤ 0.8)")
    colors = {"step 0.05": "tab:blue", "step 1": "tab:orange", "step 3": "tab:red",
              "unclipped, step 1": "tab:purple"}
    for label, path in paths.items():
        p = np.asarray(path)
        final = p[-1]
        ax.plot(p[:, 0], p[:, 1], "-o", ms=3, color=colors.get(label, "k"),
                label=f"{label}: ends ({final[0]:.2f}, {final[1]:.2f}, {final[2]:.2f})")
    ax.plot([1 / 3], [1 / 3], "ks", label="pi_old (uniform)")
    ax.plot([best[0]], [best[1]], "*", color="tab:green", ms=14,
            label="closest ceiling policy (0.4, 0.4, 0.2)")
    ax.plot([0, 1, 0, 0], [0, 0, 1, 0], "k-", lw=0.8)
    ax.set_xlabel("pi(A)")
    ax.set_ylabel("pi(B)")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("Ascent on the logits, 4-pull batch (contours L_clip = 0, 0.1, 0.2)",
                 fontsize=10)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path_png, dpi=120)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------
# the K-epoch demo


def _tol_mean(x: NDArray[np.float64], half_unit: float) -> float:
    """3 sd of (our mean - text's 300-seed mean) plus the text's rounding."""
    return 3 * float(np.std(x, ddof=1)) * math.sqrt(1 / len(x) + 1 / N_TEXT) + half_unit


def _tol_prop(p_stated: float, n: int, half_unit: float) -> float:
    return 3 * math.sqrt(p_stated * (1 - p_stated) * (1 / n + 1 / N_TEXT)) + half_unit


def _boot(x: NDArray, stat: Callable[[NDArray], float], b: int = BOOT) -> NDArray[np.float64]:
    """Bootstrap replicates of stat over the last axis (the seeds); fixed bootstrap seed 0."""
    rng = np.random.default_rng(0)
    n = x.shape[-1]
    return np.array([stat(x[..., rng.integers(0, n, n)]) for _ in range(b)])


def _tol_median(x: NDArray[np.float64], half_unit: float) -> float:
    se = float(np.std(_boot(x, lambda s: float(np.median(s))), ddof=1))
    return 3 * se * math.sqrt(1 + len(x) / N_TEXT) + half_unit


def _first_overtake(J: NDArray[np.float64]) -> int:
    """First iteration t >= 1 where PPO's mean J exceeds the unclipped one's (T+1 if never).
    J: [T+1, 2, S]."""
    m = J.mean(-1)
    ahead = m[1:, PPO] > m[1:, PLAIN]
    return int(np.argmax(ahead)) + 1 if ahead.any() else J.shape[0]


def wrong_arm(run: DemoRun, t: int, learner: int) -> NDArray[np.bool_]:
    """Per seed: the policy after t iterations favours an arm other than A (argmax != A)."""
    return run.argmax[t, learner] != 0


def stuck(run: DemoRun, t: int, learner: int = PLAIN, level: float = 0.99
          ) -> NDArray[np.bool_]:
    """Per seed: after t iterations the policy puts more than `level` on an arm other than A."""
    return np.any(run.policies[t, learner, :, 1:] > level, axis=-1)


@claim("000.kepoch-demo", "000 · Squeezing one batch: the demo",
       "K epochs on one batch, with and without the clip (K=40, N=12, lr 1, eps 0.2)", "sim")
def kepoch_demo(ctx: Context) -> Result:
    r = Result()
    seeds = ctx.seeds(300, 100)
    n = len(seeds)
    run = simulate(DemoConfig(iterations=30), seeds)
    J = run.J
    r.exact("expected reward at the start", 0.53, float(J[0, PLAIN].mean()), 2,
            "exact: the mean of the arm means")
    r.exact("entropy at the start", 1.10, float(run.entropy[0, PLAIN].mean()), 2,
            "exact: ln 3")
    for learner, stated in ((PLAIN, 0.83), (PPO, 0.60)):
        x = J[1, learner]
        tol = _tol_mean(x, 0.005)
        r.spread(f"mean J after one iteration, {LEARNERS[learner]}", f"about {stated:.2f}",
                 float(x.mean()), stated - tol, stated + tol,
                 f"3 sd of the difference of two {n}- and 300-seed means, + 0.005 rounding")
    s20 = stuck(run, 20)
    frac = float(s20.mean())
    tol = _tol_prop(1 / 3, n, 0.05)
    r.spread("unclipped runs stuck on a wrong arm (pi > 0.99 on B or C after 20 iterations)",
             "about a third", frac, 1 / 3 - tol, 1 / 3 + tol,
             "3 binomial sd at p = 1/3 for two independent estimates, + 0.05 for 'about'")
    cross = _first_overtake(J)
    boot = _boot(J, _first_overtake)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    r.spread("iteration where PPO's mean J first exceeds the unclipped one", "6 or 7",
             cross, 6 - (cross - lo), 7 + (hi - cross),
             f"stated range widened by our bootstrap 95% interval [{lo:g}, {hi:g}]", fmt="d")

    run1 = simulate(DemoConfig(K=1, iterations=30), seeds)
    same = bool(np.array_equal(run1.policies[:, PLAIN], run1.policies[:, PPO])
                and np.array_equal(run1.arms[:, PLAIN], run1.arms[:, PPO]))
    r.boolean("K = 1: the two learners are identical", "identical curves", same,
              f"policies and batches bit-identical over {n} seeds x 30 iterations: {same}",
              "exact equality")

    med = np.median(run.kl_epochs[0], axis=-1)  # [K, 2]
    inc = bool(np.all(np.diff(med[:, PLAIN]) > 0))
    r.boolean("unclipped median KL climbs with every epoch (iteration 1)", "climbs steadily",
              inc, f"{med[0, PLAIN]:.3f} -> {med[19, PLAIN]:.2f} -> {med[-1, PLAIN]:.2f} "
              "(epochs 1, 20, 40)", "strictly increasing over the 40 epochs", stochastic=True)
    first, second = med[19, PPO] - med[0, PPO], med[-1, PPO] - med[19, PPO]
    r.boolean("PPO median KL rises a little and flattens", "flattens", bool(second < first / 4),
              f"{med[0, PPO]:.4f} -> {med[19, PPO]:.4f} -> {med[-1, PPO]:.4f} (epochs 1, 20, 40)",
              "rise over epochs 21-40 below a quarter of the rise over epochs 1-20",
              stochastic=True)

    kl1 = run.kl_iteration[0]
    H1 = run.entropy[1]
    r.notes = (
        f"{n} seeds (seed = mulberry32 state, see trustrl/experiments/kepoch.py for the exact "
        "random-number layout; both learners consume the same uniforms and normals). J = "
        "pi . (1.0, 0.6, 0.0) of the policy itself (expected reward), averaged over seeds. "
        "'Stuck': after 20 iterations the unclipped policy puts more than 0.99 on B or C; "
        f"after 30 iterations {float(stuck(run, 30).mean()):.1%} are ({int(s20.sum())} runs "
        f"stuck at 20, {int((s20 & stuck(run, 30)).sum())} of them still at 30: a policy at "
        "0.99 still pulls A now and then, only a fully collapsed one never does). "
        f"Mean J after 30 iterations: unclipped {J[30, PLAIN].mean():.3f}, "
        f"PPO {J[30, PPO].mean():.3f}.\n\n"
        "The text's seed-1 walkthrough (unclipped KL ≈ 1.7, entropy 0.17; PPO KL ≈ 0.04) "
        "depends on the browser demo's own random numbers and is not checked; over our seeds "
        f"the first-iteration KL has median {np.median(kl1[PLAIN]):.2f} (quartiles "
        f"{np.percentile(kl1[PLAIN], 25):.2f}-{np.percentile(kl1[PLAIN], 75):.2f}) unclipped "
        f"and {np.median(kl1[PPO]):.3f} ({np.percentile(kl1[PPO], 25):.3f}-"
        f"{np.percentile(kl1[PPO], 75):.3f}) for PPO; the unclipped entropy after one "
        f"iteration has median {np.median(H1[PLAIN]):.2f}.")
    r.figures += _plot_demo(ctx, run)
    return r


def _plot_demo(ctx: Context, run: DemoRun) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = ("tab:red", "tab:blue")
    n = run.seeds.shape[0]
    K = run.config.K
    kl = run.kl_epochs[0]  # [K, 2, S]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ep = np.arange(1, K + 1)
    for learner in (PLAIN, PPO):
        q1, med, q3 = np.percentile(kl[:, learner], [25, 50, 75], axis=-1)
        ax.plot(ep, med, color=colors[learner], label=f"{LEARNERS[learner]}: median")
        ax.fill_between(ep, q1, q3, color=colors[learner], alpha=0.2,
                        label=f"{LEARNERS[learner]}: quartiles")
    ax.set_yscale("log")
    ax.set_xlabel("epoch on the first batch")
    ax.set_ylabel("KL(pi_old || pi)")
    ax.set_title(f"KL across the K = {K} epochs of the first iteration ({n} seeds, N = "
                 f"{run.config.N})")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    kl_name = "kepoch_kl_per_epoch.png"
    fig.savefig(ctx.figure(kl_name), dpi=120)
    plt.close(fig)

    J = run.J  # [T+1, 2, S]
    T = J.shape[0] - 1
    it = np.arange(T + 1)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for learner in (PLAIN, PPO):
        m = J[:, learner].mean(-1)
        se = J[:, learner].std(-1, ddof=1) / math.sqrt(n)
        ax.plot(it, m, "-o", ms=3, color=colors[learner], label=LEARNERS[learner])
        ax.fill_between(it, m - 1.96 * se, m + 1.96 * se, color=colors[learner], alpha=0.2)
    ax.axhline(1.0, color="k", ls=":", lw=1)
    ax.text(0.3, 0.99, "J of arm A (best)", ha="left", va="top", fontsize=8)
    ax.axhline(0.6, color="gray", ls=":", lw=1)
    ax.text(T * 0.6, 0.59, "J of arm B", ha="left", va="top", fontsize=8)
    ax.set_xlabel("iteration")
    ax.set_ylabel("expected reward J = pi . means")
    ax.set_title(f"Mean J over {n} seeds (band: 95% CI of the mean), K = {run.config.K}, "
                 f"N = {run.config.N}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    j_name = "kepoch_reward_per_iteration.png"
    fig.savefig(ctx.figure(j_name), dpi=120)
    plt.close(fig)
    return [kl_name, j_name]


@claim("000.ex9.7", "000 · Exercise 9.7 (K-epoch demo experiments)",
       "K = 1, a collapsed learner's zero gradient, N = 64, and eps 0.05 / 0.2 / 0.5", "sim")
def ex97(ctx: Context) -> Result:
    r = Result()
    seeds = ctx.seeds(300, 100)
    n = len(seeds)
    # (a) K = 1: every ratio is 1 in the single step, nothing is clipped
    run1 = simulate(DemoConfig(K=1, iterations=10), seeds)
    same = bool(np.array_equal(run1.policies[:, PLAIN], run1.policies[:, PPO]))
    r.boolean("(a) K = 1: identical learners", "identical", same,
              f"bit-identical over {n} seeds x 10 iterations: {same}", "exact equality")
    # (b) a batch of N pulls of B with batch-mean advantages: zero gradient for both learners
    rng = np.random.default_rng(0)
    rewards = 0.6 + rng.standard_normal(12)
    adv = rewards - rewards.mean()
    z = np.array([-20.0, 20.0, -20.0])
    logp = z - np.log(np.exp(z).sum())
    g = surrogate_grad(z[None].repeat(2, 0), logp[None].repeat(2, 0),
                       np.ones((2, 12), dtype=np.int64), adv[None].repeat(2, 0),
                       np.array([[np.inf], [EPS]]))
    gmax = float(np.abs(g).max())
    r.boolean("(b) all-B batch: logit gradient", "zero", gmax < 1e-12, f"max |g| = {gmax:.1e}",
              "advantages sum to zero; round-off only")

    # (c) N = 64
    run = simulate(DemoConfig(N=64, iterations=3), seeds)
    w = float(wrong_arm(run, 3, PLAIN).mean())
    tol = _tol_prop(0.08, n, 0.005)
    r.spread("(c) N=64: unclipped on a wrong arm after 3 iterations (argmax != A)", "about 8%",
             w, max(0.0, 0.08 - tol), 0.08 + tol,
             "3 binomial sd at p = 0.08 (two estimates), + 0.005", fmt=".3f")
    kl1 = run.kl_iteration[0, PLAIN]
    tol = _tol_median(kl1, 0.05)
    r.spread("(c) N=64: unclipped first-iteration KL, median", "about 1.6",
             float(np.median(kl1)), 1.6 - tol, 1.6 + tol,
             "3 bootstrap se of the median (two estimates), + 0.05 rounding")
    above = float((kl1 > 0.9).mean())
    tol = _tol_prop(0.9, n, 0.05)
    r.spread("(c) N=64: fraction of runs with first-iteration KL > 0.9", "9 in 10", above,
             0.9 - tol, min(1.0, 0.9 + tol), "3 binomial sd at p = 0.9 (two estimates), + 0.05",
             fmt=".3f")
    H2 = run.entropy[2, PLAIN]
    tol = _tol_median(H2, 0.05)
    r.spread("(c) N=64: unclipped entropy after 2 iterations, median", "about 0.1",
             float(np.median(H2)), 0.1 - tol, 0.1 + tol,
             "3 bootstrap se of the median (two estimates), + 0.05 rounding")

    # (d) N = 12, K = 100, eps 0.05 / 0.2 / 0.5
    runs = {e: simulate(DemoConfig(K=100, eps=e, iterations=10), seeds) for e in (0.05, 0.2, 0.5)}
    for e, lo, hi, half in ((0.05, 0.01, 0.01, 0.005), (0.5, 0.2, 0.3, 0.05)):
        x = runs[e].kl_iteration[0, PPO]
        tol = _tol_median(x, half)
        stated = "about 0.01" if e == 0.05 else "0.2-0.3"
        r.spread(f"(d) K=100: PPO first-iteration KL, eps {e:g}, median", stated,
                 float(np.median(x)), lo - tol, hi + tol,
                 "3 bootstrap se of the median (two estimates), + half a unit of the text",
                 fmt=".3f")
    for e, p in ((0.2, 0.06), (0.5, 0.10)):
        w = float(wrong_arm(runs[e], 10, PPO).mean())
        tol = _tol_prop(p, n, 0.005)
        r.spread(f"(d) K=100: PPO on a wrong arm after 10 iterations, eps {e:g}",
                 f"about {p:.0%}", w, max(0.0, p - tol), p + tol,
                 f"3 binomial sd at p = {p:g} (two estimates), + 0.005", fmt=".3f")
    J5, J2 = runs[0.5].J[10, PPO], runs[0.2].J[10, PPO]
    d = J5 - J2
    se = float(d.std(ddof=1)) / math.sqrt(n)
    r.spread("(d) eps 0.5 has the higher mean J after 10 iterations (mean paired difference "
             "eps 0.5 minus eps 0.2)", "higher for 0.5", float(d.mean()), -2 * se, float("inf"),
             f"its sign, less 2 se ({se:.3f}) of the paired difference over {n} seeds: differs "
             "only if our seeds show the opposite", fmt=".3f")

    # context: the same rates at the default K = 40
    k40 = {e: simulate(DemoConfig(K=40, eps=e, iterations=10), seeds) for e in (0.2, 0.5)}
    r.notes = (
        f"{n} seeds per setting; 'wrong arm' = the policy's most likely arm is B or C. (b) is "
        "checked on a 12-pull all-B batch with rewards 0.6 + N(0, 1), at logits (-20, 20, -20), "
        "for both learners. (c) runs K = 40, eps 0.2; (d) runs K = 100 as the exercise says. "
        "For comparison at K = 40: wrong arm after 10 iterations "
        f"{wrong_arm(k40[0.2], 10, PPO).mean():.1%} (eps 0.2) vs "
        f"{wrong_arm(k40[0.5], 10, PPO).mean():.1%} (eps 0.5). At K = 100 the quartiles of "
        "PPO's first-iteration KL are "
        + "; ".join(f"eps {e:g}: {np.percentile(runs[e].kl_iteration[0, PPO], 25):.3f}-"
                    f"{np.percentile(runs[e].kl_iteration[0, PPO], 75):.3f}"
                    for e in (0.05, 0.2, 0.5))
        + "; means " + ", ".join(f"eps {e:g}: {runs[e].kl_iteration[0, PPO].mean():.3f}"
                                 for e in (0.05, 0.2, 0.5))
        + f". Mean J after 10 iterations (K = 100): eps 0.05 {runs[0.05].J[10, PPO].mean():.3f}, "
        f"0.2 {J2.mean():.3f}, 0.5 {J5.mean():.3f}, unclipped "
        f"{runs[0.2].J[10, PLAIN].mean():.3f}.")
    r.figures.append(_plot_eps(ctx, runs))
    return r


def _plot_eps(ctx: Context, runs: dict[float, DemoRun]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    any_run = runs[0.2]
    n = any_run.seeds.shape[0]
    it = np.arange(any_run.J.shape[0])
    series = [(f"PPO eps {e:g}", runs[e].J[:, PPO]) for e in sorted(runs)]
    series.append(("no clip", any_run.J[:, PLAIN]))
    for (label, J), c in zip(series, ("tab:green", "tab:blue", "tab:purple", "tab:red"),
                             strict=True):
        m, se = J.mean(-1), J.std(-1, ddof=1) / math.sqrt(n)
        ax.plot(it, m, "-o", ms=3, color=c, label=label)
        ax.fill_between(it, m - 1.96 * se, m + 1.96 * se, color=c, alpha=0.2)
    ax.set_xlabel("iteration")
    ax.set_ylabel("mean expected reward J")
    ax.set_title(f"Exercise 9.7 (d): K = 100, N = 12, {n} seeds (band: 95% CI of the mean)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    name = "ex97_eps.png"
    fig.savefig(ctx.figure(name), dpi=120)
    plt.close(fig)
    return name


# ------------------------------------------------------------------------------------------------
# Exercise 9.1


def loglik_grad(z: torch.Tensor) -> torch.Tensor:
    """Autograd gradient on the logits of mean_i log pi(a_i) A_i over the 4-pull batch."""
    zz = z.clone().to(F64).requires_grad_(True)
    obj = (Categorical(zz[None].expand(4, 3)).log_prob(BATCH_ARMS) * BATCH_ADV).mean()
    (g,) = torch.autograd.grad(obj, zz)
    return g


@claim("000.ex9.1", "000 · Exercise 9.1 (reusing a batch with the log-likelihood loss)",
       "With batch-mean advantages the log-likelihood gradient is a constant vector")
def ex91(ctx: Context) -> Result:
    r = Result()
    const = torch.zeros(3, dtype=F64).index_add_(0, BATCH_ARMS, BATCH_ADV) / 4
    r.exact("sum of the batch's advantages", 0.0, float(BATCH_ADV.sum()), 1, "exact")
    gen = torch.Generator().manual_seed(0)
    points = [torch.zeros(3, dtype=F64), torch.tensor([-5.0, 9.0, 2.0], dtype=F64)]
    points += [torch.randn(3, generator=gen, dtype=F64) * 3 for _ in range(5)]
    err = max(float((loglik_grad(p) - const).abs().max()) for p in points)
    r.boolean("autograd gradient = sum_i A_i e_{a_i} / N at 7 points", "constant vector",
              err < 1e-12, "(" + ", ".join(f"{x:g}" for x in const.tolist())
              + f") everywhere, max error {err:.1e}", "round-off only")
    z = torch.zeros(3, dtype=F64)
    for _ in range(100):
        z = z + 1.0 * loglik_grad(z)
    lin = float((z - 100 * const).abs().max())
    pi = torch.softmax(z, -1)
    r.boolean("logits after 100 epochs = 100 x that vector (it never shrinks)", "never shrinks",
              lin < 1e-9, f"max |z_100 - 100 g| = {lin:.1e}", "round-off only")
    r.boolean("100 epochs (gradient ascent, lr 1): pi(B) > 0.99", "deterministic policy",
              float(pi[1]) > 0.99, f"pi = ({', '.join(f'{x:.3g}' for x in pi.tolist())})",
              "B has the largest summed advantage (+2.0)")
    r.notes = ("Objective mean_i log pi(a_i) A_i over the 4-pull batch (A +0.5, B +1.5, B +0.5, "
               "C -2.5; sum 0) with trustrl's Categorical.log_prob, differentiated by autograd "
               "at the uniform policy, at logits (-5, 9, 2) and at 5 random points. Ascent with "
               "learning rate 1 on the logits, as in the K-epoch demo.")
    return r
