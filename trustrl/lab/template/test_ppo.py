"""Graded tests of the PPO lab: run `trustrl lab check`, or pytest directly:

    python -m pytest -q -m task1          # one task
    python -m pytest -q -m "not train"    # everything but the short CartPole run

Every failure message starts with the case it checks and says what was expected, what your
code gave and, where it can tell, which idea is broken. You should not need to edit this file.
"""

from __future__ import annotations

import importlib
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # your ppo.py, next to this file

EPS = 0.2  # the clip range of the worked cases
torch.set_num_threads(1)  # tiny networks: extra threads only add overhead


# --- helpers --------------------------------------------------------------------------------
def lab() -> Any:
    """Your ppo.py, imported fresh for this test run."""
    try:
        return importlib.import_module("ppo")
    except Exception as e:  # a syntax error, a bad import, ...
        pytest.fail(f"cannot import ppo.py: {type(e).__name__}: {e}")


def call(case: str, name: str, *args: Any, **kwargs: Any) -> Any:
    """Call ppo.<name>; a stub or a crash fails the test with the case's name in front."""
    fn = getattr(lab(), name, None)
    if fn is None:
        pytest.fail(f"{case}: ppo.py has no function {name}")
    try:
        return fn(*args, **kwargs)
    except NotImplementedError as e:
        pytest.fail(f"{case}: {name} is not implemented yet ({e})", pytrace=False)
    except Exception as e:
        pytest.fail(f"{case}: {name} raised {type(e).__name__}: {e}")


def num(x: float) -> str:
    """2 -> '2.0', 0.0253 -> '0.0253', -1.4 -> '-1.4' (for messages)."""
    if math.isnan(x) or math.isinf(x):
        return str(x)
    x = 0.0 if abs(x) < 5e-7 else x  # no "-0.0"
    return f"{x:.1f}" if abs(x - round(x, 1)) < 1e-6 else f"{x:.4g}"


def scalar(case: str, x: Any) -> float:
    """A returned loss as a float (it should be a 0-dim tensor)."""
    if isinstance(x, torch.Tensor) and x.numel() == 1:
        return float(x.detach())
    pytest.fail(f"{case}: expected a 0-dim tensor, got {type(x).__name__} "
                f"{tuple(getattr(x, 'shape', ()))}")


def as_float(case: str, name: str, x: Any) -> float:
    """A Python float, or fail saying what came back instead."""
    if not isinstance(x, float):
        kind = type(x).__name__
        hint = " (call .item() on a 0-dim tensor)" if isinstance(x, torch.Tensor) else ""
        pytest.fail(f"{case}: {name} should return a Python float, got {kind}{hint}")
    return x


def diagnose(got: float, candidates: dict[str, float], tol: float = 1e-4) -> str:
    """' This is what <mistake> gives.' naming every known mistake that `got` matches."""
    hits = [m for m, value in candidates.items() if abs(got - value) <= tol * max(1.0, abs(value))]
    return f" This is what {' or '.join(hits)} gives." if hits else ""


# --- Task 1: the clipped surrogate loss -----------------------------------------------------
# The six worked cases at eps = 0.2 (band [0.8, 1.2]): advantage A, ratio rho, the PPO-clip
# objective min(rho*A, clip(rho)*A) and its slope d/d rho, with why.
CASES = [
    (1, +2.0, 1.1, 2.2, 2.0, "inside the band the min keeps rho*A, so the slope is A"),
    (2, +2.0, 1.5, 2.4, 0.0, "a good action already above 1+eps: the min picks the flat "
                             "clipped term (1+eps)*A, so pushing further earns nothing"),
    (3, +2.0, 0.5, 1.0, 2.0, "a good action that became LESS likely: the min keeps rho*A, "
                             "so the gradient pulls it back up"),
    (4, -1.0, 0.9, -0.9, -1.0, "inside the band the min keeps rho*A, so the slope is A"),
    (5, -1.0, 0.6, -0.8, 0.0, "a bad action already below 1-eps: the min picks the flat "
                              "clipped term (1-eps)*A"),
    (6, -1.0, 1.4, -1.4, -1.0, "a bad action that became MORE likely: the min keeps rho*A, "
                               "so the gradient pushes it back down"),
]


def _clamp(x: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    return torch.clamp(x, lo, hi)


# Known mistakes, each as the loss it would produce from (logp_new, logp_old, A, eps).
Loss = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor]
MISTAKES: dict[str, Loss] = {
    "max instead of min (the min is what makes the objective pessimistic)":
        lambda n, o, a, e: -torch.max((n - o).exp() * a, _clamp((n - o).exp(), 1 - e, 1 + e) * a
                                      ).mean(),
    "clipping the advantage instead of the ratio":
        lambda n, o, a, e: -torch.min((n - o).exp() * a, (n - o).exp() * _clamp(a, 1 - e, 1 + e)
                                      ).mean(),
    "returning the objective instead of the loss (the minus sign is missing)":
        lambda n, o, a, e: torch.min((n - o).exp() * a, _clamp((n - o).exp(), 1 - e, 1 + e) * a
                                     ).mean(),
    "no clipping at all (plain -rho*A)":
        lambda n, o, a, e: -((n - o).exp() * a).mean(),
    "the clipped term alone, without the min":
        lambda n, o, a, e: -(_clamp((n - o).exp(), 1 - e, 1 + e) * a).mean(),
    "the ratio upside down, exp(logp_old - logp_new)":
        lambda n, o, a, e: -torch.min((o - n).exp() * a, _clamp((o - n).exp(), 1 - e, 1 + e) * a
                                      ).mean(),
    "clipping only the upper edge 1+eps":
        lambda n, o, a, e: -torch.min((n - o).exp() * a, (n - o).exp().clamp(max=1 + e) * a
                                      ).mean(),
    "clipping only the lower edge 1-eps":
        lambda n, o, a, e: -torch.min((n - o).exp() * a, (n - o).exp().clamp(min=1 - e) * a
                                      ).mean(),
    "using logp_new - logp_old as the ratio (the exp is missing)":
        lambda n, o, a, e: -torch.min((n - o) * a, _clamp(n - o, 1 - e, 1 + e) * a).mean(),
}


def _value_and_slope(fn: Loss, adv: float, rho: float, case: str) -> tuple[float, float | None]:
    """Loss value and the objective's slope d/d rho (= -d loss / d logp_new / rho)."""
    logp_new = torch.tensor([math.log(rho)], requires_grad=True)
    logp_old = torch.zeros(1)
    loss = fn(logp_new, logp_old, torch.tensor([adv]), EPS)
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        pytest.fail(f"{case}: clipped_surrogate_loss should return a 0-dim tensor, got "
                    f"{type(loss).__name__} {tuple(getattr(loss, 'shape', ()))}")
    if not loss.requires_grad:
        return float(loss.detach()), None
    (grad,) = torch.autograd.grad(loss.sum(), logp_new, allow_unused=True)
    return float(loss.detach()), None if grad is None else -float(grad[0]) / rho


def _learner_loss(case: str) -> Loss:
    return lambda n, o, a, e: call(case, "clipped_surrogate_loss", n, o, a, e)


def _label(i: int, adv: float, rho: float) -> str:
    return f"case {i} (A={adv:+g}, rho={rho:g})"


@pytest.mark.task1
@pytest.mark.parametrize("i,adv,rho,objective,slope,why", CASES, ids=[f"case{c[0]}" for c in CASES])
def test_task1_value(i: int, adv: float, rho: float, objective: float, slope: float, why: str):
    case = _label(i, adv, rho)
    got, _ = _value_and_slope(_learner_loss(case), adv, rho, case)
    if abs(got - (-objective)) > 1e-4:
        wrong = {m: _value_and_slope(f, adv, rho, case)[0] for m, f in MISTAKES.items()}
        pytest.fail(f"{case}: expected loss {num(-objective)} (minus the objective "
                    f"min(rho*A, clip(rho)*A) = {num(objective)}), got {num(got)}; {why}."
                    + diagnose(got, wrong))


@pytest.mark.task1
@pytest.mark.parametrize("i,adv,rho,objective,slope,why", CASES, ids=[f"case{c[0]}" for c in CASES])
def test_task1_slope(i: int, adv: float, rho: float, objective: float, slope: float, why: str):
    case = _label(i, adv, rho)
    _, got = _value_and_slope(_learner_loss(case), adv, rho, case)
    if got is None:
        pytest.fail(f"{case}: no gradient reached logp_new; keep the loss a differentiable "
                    "tensor expression of logp_new (no .item(), .detach() or Python floats)")
    if abs(got - slope) > 1e-4:
        wrong = {}
        for m, f in MISTAKES.items():
            s = _value_and_slope(f, adv, rho, case)[1]
            if s is not None:
                wrong[m] = s
        pytest.fail(f"{case}: expected slope {slope:g}, got {num(got)} (the slope is "
                    f"d/d rho of the objective min(rho*A, clip(rho)*A)); {why}."
                    + diagnose(got, wrong))


@pytest.mark.task1
def test_task1_batch_mean():
    case = "all six cases in one batch"
    logp_new = torch.tensor([math.log(c[2]) for c in CASES], requires_grad=True)
    adv = torch.tensor([c[1] for c in CASES])
    loss = call(case, "clipped_surrogate_loss", logp_new, torch.zeros(6), adv, EPS)
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
        pytest.fail(f"{case}: expected a 0-dim tensor (the mean over the batch), got "
                    f"{type(loss).__name__} of shape {tuple(getattr(loss, 'shape', ()))}")
    expected = -sum(c[3] for c in CASES) / 6
    got = float(loss.detach())
    if abs(got - expected) > 1e-4:
        sums = {"summing over the batch instead of averaging": 6 * expected}
        pytest.fail(f"{case}: expected loss {num(expected)} (minus the MEAN of the six "
                    f"objectives), got {num(got)}." + diagnose(got, sums))


# --- Task 2: approx KL and clip fraction ----------------------------------------------------
def _logps(ratios: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """(logp_new, logp_old) whose ratios are `ratios` (logp_old = 0)."""
    return torch.tensor([math.log(r) for r in ratios]), torch.zeros(len(ratios))


def _k1(ratios: list[float]) -> float:
    return sum(-math.log(r) for r in ratios) / len(ratios)


def _k3(ratios: list[float]) -> float:
    return sum(r - 1 - math.log(r) for r in ratios) / len(ratios)


# Exercise 9.4: pi_old = (0.5, 0.3, 0.2), pi_new = (0.4, 0.4, 0.2); ratios 0.8, 4/3 and 1
# drawn in proportion to pi_old (5, 3 and 2 of ten samples). Both k1 and k3 average to the
# true KL here; single samples tell them apart.
EX94 = [0.8] * 5 + [4 / 3] * 3 + [1.0] * 2


@pytest.mark.task2
def test_task2_approx_kl_exercise_9_4():
    case = "approx_kl on Exercise 9.4's batch (rho = 0.8 x5, 4/3 x3, 1 x2)"
    logp_new, logp_old = _logps(EX94)
    got = as_float(case, "approx_kl", call(case, "approx_kl", logp_new, logp_old))
    expected = _k3(EX94)  # 0.02528 = KL(pi_old || pi_new)
    if abs(got - expected) > 1e-4:
        wrong = {"the log-ratio the wrong way round (logp_old - logp_new)":
                 _k3([1 / r for r in EX94]), "the sum instead of the mean": 10 * expected}
        pytest.fail(f"{case}: expected {expected:.5f} (mean of (rho - 1) - log rho, which is "
                    f"KL(pi_old || pi_new) = 0.0253 here), got {num(got)}."
                    + diagnose(got, wrong))


@pytest.mark.task2
@pytest.mark.parametrize("rho", [0.8, 4 / 3], ids=["rho=0.8", "rho=4/3"])
def test_task2_approx_kl_is_k3(rho: float):
    case = f"approx_kl of one sample with rho={rho:.4g}"
    logp_new, logp_old = _logps([rho])
    got = as_float(case, "approx_kl", call(case, "approx_kl", logp_new, logp_old))
    expected = _k3([rho])
    if abs(got - expected) > 1e-5:
        wrong = {"k1 = -log rho (unbiased, but a single sample can be negative; use k3)":
                 _k1([rho]),
                 "the log-ratio the wrong way round (logp_old - logp_new)": _k3([1 / rho])}
        pytest.fail(f"{case}: expected (rho - 1) - log rho = {expected:.5f}, got {num(got)}."
                    + diagnose(got, wrong, tol=1e-5))


RATIOS = [0.5, 0.79, 0.92, 1.0, 1.08, 1.19, 1.21, 3.0, 0.85, 1.05]


@pytest.mark.task2
@pytest.mark.parametrize("eps,expected", [(0.2, 0.4), (0.1, 0.6)], ids=["eps=0.2", "eps=0.1"])
def test_task2_clip_fraction(eps: float, expected: float):
    case = f"clip_fraction at eps={eps} of rho = {', '.join(f'{r:g}' for r in RATIOS)}"
    logp_new, logp_old = _logps(RATIOS)
    got = as_float(case, "clip_fraction", call(case, "clip_fraction", logp_new, logp_old, eps))
    if abs(got - expected) > 1e-6:
        n = len(RATIOS)
        upper = sum(r > 1 + eps for r in RATIOS) / n
        lower = sum(r < 1 - eps for r in RATIOS) / n
        wrong = {
            "a count instead of a fraction": expected * n,
            "the fraction INSIDE the band": 1 - expected,
            "comparing |log rho| with eps instead of |rho - 1|":
                sum(abs(math.log(r)) > eps for r in RATIOS) / n,
            "checking only the upper edge 1+eps": upper,
            "checking only the lower edge 1-eps": lower,
        }
        pytest.fail(f"{case}: expected {expected:g} ({round(expected * n)} of {n} ratios lie "
                    f"outside [{1 - eps:g}, {1 + eps:g}]), got {num(got)}."
                    + diagnose(got, wrong, tol=1e-6))


# --- Task 3: value loss ---------------------------------------------------------------------
def _t(*xs: float, grad: bool = False) -> torch.Tensor:
    return torch.tensor(xs, requires_grad=grad)


@pytest.mark.task3
def test_task3_value_loss_plain():
    case = "plain value loss, V = (1, 2, 3), R = (2, 2, 5)"
    values = _t(1.0, 2.0, 3.0, grad=True)
    loss = call(case, "value_loss", values, _t(2.0, 2.0, 5.0))
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
        pytest.fail(f"{case}: expected a 0-dim tensor, got {type(loss).__name__} "
                    f"{tuple(getattr(loss, 'shape', ()))}")
    got, expected = float(loss.detach()), 0.5 * (1 + 0 + 4) / 3
    if abs(got - expected) > 1e-5:
        wrong = {"leaving out the factor 0.5": 2 * expected,
                 "the sum instead of the mean": 3 * expected,
                 "the absolute error instead of the squared one": 0.5 * (1 + 0 + 2) / 3}
        pytest.fail(f"{case}: expected 0.5 * mean((V - R)^2) = {expected:.5f}, got "
                    f"{num(got)}." + diagnose(got, wrong))
    if not loss.requires_grad:
        pytest.fail(f"{case}: the loss does not depend on `values` through autograd; keep "
                    "it a tensor expression (no .item() or .detach())")


@pytest.mark.task3
@pytest.mark.parametrize("which", ["values_old only", "clip_eps only"])
def test_task3_value_loss_unclipped_without_both(which: str):
    case = f"value loss given {which}"
    kwargs = {"values_old": _t(0.0, 0.0, 0.0)} if which == "values_old only" else {
        "clip_eps": 0.2}
    got = scalar(case, call(case, "value_loss", _t(1.0, 2.0, 3.0), _t(2.0, 2.0, 5.0), **kwargs))
    expected = 0.5 * (1 + 0 + 4) / 3
    if abs(got - expected) > 1e-5:
        pytest.fail(f"{case}: clipping needs both values_old and clip_eps; with only one of "
                    f"them expected the plain loss {expected:.5f}, got {num(got)}")


# Three samples at eps = 0.2, worked by hand:
#   1: V_old=0,   V=1.0, R=2.0  V_clip=0.2  err 1.00, err_clip 3.24  -> max 3.24 (clipped)
#   2: V_old=0,   V=1.0, R=0.5  V_clip=0.2  err 0.25, err_clip 0.09  -> max 0.25 (unclipped)
#   3: V_old=1.0, V=1.1, R=3.0  V_clip=1.1  err 3.61, err_clip 3.61  -> 3.61 (inside)
# loss = 0.5 * (3.24 + 0.25 + 3.61) / 3 = 1.18333; dLoss/dV = (0, 0.5/3, -1.9/3)
V_OLD, V_NEW, R = (0.0, 0.0, 1.0), (1.0, 1.0, 1.1), (2.0, 0.5, 3.0)
CLIPPED_CASE = "clipped value loss (eps=0.2, V_old=(0, 0, 1), V=(1, 1, 1.1), R=(2, 0.5, 3))"


@pytest.mark.task3
def test_task3_value_loss_clipped():
    case = CLIPPED_CASE
    values = _t(*V_NEW, grad=True)
    got = scalar(case, call(case, "value_loss", values, _t(*R), _t(*V_OLD), 0.2))
    expected = 0.5 * (3.24 + 0.25 + 3.61) / 3
    if abs(got - expected) > 1e-4:
        wrong = {"min instead of max (the clipped loss must be the pessimistic, LARGER one)":
                 0.5 * (1.0 + 0.09 + 3.61) / 3,
                 "the clipped error alone, without the max": 0.5 * (3.24 + 0.09 + 3.61) / 3,
                 "ignoring values_old and clip_eps (no clipping)": 0.5 * (1.0 + 0.25 + 3.61) / 3}
        pytest.fail(f"{case}: expected 0.5 * mean(max((V - R)^2, (V_clip - R)^2)) = "
                    f"{expected:.5f} with V_clip = V_old + clip(V - V_old, -eps, eps), got "
                    f"{num(got)}." + diagnose(got, wrong))


@pytest.mark.task3
def test_task3_value_loss_clipped_gradient():
    case = CLIPPED_CASE
    values = _t(*V_NEW, grad=True)
    loss = call(case, "value_loss", values, _t(*R), _t(*V_OLD), 0.2)
    if not isinstance(loss, torch.Tensor) or not loss.requires_grad:
        pytest.fail(f"{case}: no gradient reaches `values`; keep the loss a tensor expression")
    (grad,) = torch.autograd.grad(loss, values)
    expected = (0.0, 0.5 / 3, -1.9 / 3)
    why = ("the clipped error is the larger one and V_clip is stuck at V_old + eps, so this "
           "sample must not pull V", "the unclipped error is the larger one: ordinary "
           "regression", "inside the band both errors agree: ordinary regression")
    for k in range(3):
        if abs(float(grad[k]) - expected[k]) > 1e-4:
            pytest.fail(f"{case}, sample {k + 1}: expected dLoss/dV = {num(expected[k])}, got "
                        f"{num(float(grad[k]))}; {why[k]}")


# --- Task 4: the PPO update -----------------------------------------------------------------
def _policy(obs_dim: int = 4, hidden: tuple[int, ...] = (16,)):
    from trustrl.nets.policies import ActionSpec, ActorCritic

    return ActorCritic(obs_dim, ActionSpec("discrete", n=2), hidden_sizes=hidden)


def _batch(policy: Any, obs: torch.Tensor, actions: torch.Tensor, advantages: torch.Tensor,
           returns: torch.Tensor, logp_shift: torch.Tensor | None = None) -> Any:
    """A Batch whose logp_old is the policy's current log-prob (minus logp_shift)."""
    from trustrl.collect.rollout import Batch

    with torch.no_grad():
        logp = policy.dist(obs).log_prob(actions)
        values = policy.value(obs)
    if logp_shift is not None:
        logp = logp - logp_shift
    return Batch(obs=obs, actions=actions, logp_old=logp, values_old=values,
                 advantages=advantages, returns=returns)


def _random_batch(policy: Any, n: int = 64, seed: int = 0, returns_scale: float = 1.0,
                  logp_shift: torch.Tensor | None = None) -> Any:
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, policy.obs_dim, generator=g)
    actions = torch.randint(0, 2, (n,), generator=g)
    adv = torch.randn(n, generator=g)
    returns = returns_scale * torch.randn(n, generator=g)
    return _batch(policy, obs, actions, adv, returns, logp_shift)


def _update(case: str, policy: Any, optimizer: Any, batch: Any, **kw: Any) -> dict:
    args = dict(epochs=3, minibatch_size=16, clip_eps=EPS, vf_coef=0.5, ent_coef=0.0,
                max_grad_norm=1e6, target_kl=None, clip=True)
    args.update(kw)
    out = call(case, "ppo_update", policy, optimizer, batch, **args)
    if not isinstance(out, dict):
        pytest.fail(f"{case}: ppo_update should return a dict of metrics, got "
                    f"{type(out).__name__}")
    missing = [k for k in ("epochs_run", "approx_kl", "clip_fraction") if k not in out]
    if missing:
        pytest.fail(f"{case}: the dict returned by ppo_update lacks {', '.join(missing)}")
    return out


def _actor_snapshot(policy: Any) -> list[torch.Tensor]:
    return [p.detach().clone() for p in policy.actor_parameters()]


def _moved(policy: Any, before: list[torch.Tensor]) -> float:
    return max(float((p.detach() - b).abs().max())
               for p, b in zip(policy.actor_parameters(), before, strict=True))


def _full_batch_k3(policy: Any, batch: Any) -> tuple[float, float]:
    with torch.no_grad():
        log_ratio = policy.dist(batch.obs).log_prob(batch.actions) - batch.logp_old
        ratio = log_ratio.exp()
        kl = float((ratio - 1 - log_ratio).mean())
        frac = float(((ratio > 1 + EPS) | (ratio < 1 - EPS)).float().mean())
    return kl, frac


class Spy:
    """Watches every optimizer.step(): the gradient norms it is about to apply, and the full
    batch approx KL (k3, against the stored logp_old) right after it."""

    def __init__(self, policy: Any, optimizer: torch.optim.Optimizer, batch: Any):
        self.policy, self.batch = policy, batch
        self.grad_norms: list[float] = []
        self.largest_param_grad: list[float] = []
        self.kl_after: list[float] = []
        optimizer.register_step_pre_hook(self._before)
        optimizer.register_step_post_hook(self._after)

    def _before(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        grads = [p.grad.detach() for g in opt.param_groups for p in g["params"]
                 if p.grad is not None]
        norms = torch.stack([g.norm() for g in grads]) if grads else torch.zeros(1)
        self.grad_norms.append(float(norms.norm()))
        self.largest_param_grad.append(float(norms.max()))

    def _after(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.kl_after.append(_full_batch_k3(self.policy, self.batch)[0])

    @property
    def steps(self) -> int:
        return len(self.grad_norms)


@pytest.mark.task4
def test_task4_k_epochs_of_minibatches():
    case = "3 epochs over a batch of 64 in minibatches of 16"
    torch.manual_seed(0)
    policy = _policy()
    batch = _random_batch(policy)
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    spy = Spy(policy, opt, batch)
    out = _update(case, policy, opt, batch)
    if spy.steps != 12:
        pytest.fail(f"{case}: expected 12 optimizer steps (3 epochs x 4 minibatches), got "
                    f"{spy.steps}; each epoch walks through torch.randperm(B) in slices of "
                    "minibatch_size, one optimizer.step() per slice")
    if float(out["epochs_run"]) != 3:
        pytest.fail(f"{case}: returned epochs_run = {out['epochs_run']}, expected 3")
    kl, frac = _full_batch_k3(policy, batch)
    if abs(float(out["approx_kl"]) - kl) > 1e-5 + 1e-3 * kl:
        pytest.fail(f"{case}: returned approx_kl = {float(out['approx_kl']):.6g}, but the k3 "
                    f"estimate on the whole batch with the final policy is {kl:.6g}; measure it "
                    "after the last epoch, on all samples, against the stored batch.logp_old")
    if abs(float(out["clip_fraction"]) - frac) > 1e-6:
        pytest.fail(f"{case}: returned clip_fraction = {float(out['clip_fraction']):.4g}, but "
                    f"on the whole batch with the final policy it is {frac:.4g}")


def _flat_zone_batch(policy: Any) -> Any:
    """Every sample already outside the band in the direction its advantage wants: A = +1
    with rho = e (stored logp_old one below the current log-prob), A = -1 with rho = 1/e."""
    n = 64
    g = torch.Generator().manual_seed(1)
    obs = torch.randn(n, policy.obs_dim, generator=g)
    actions = torch.randint(0, 2, (n,), generator=g)
    adv = torch.tensor([1.0, -1.0]).repeat(n // 2)
    return _batch(policy, obs, actions, adv, torch.randn(n, generator=g), logp_shift=adv)


@pytest.mark.task4
def test_task4_uses_stored_logp_old():
    case = "stored logp_old"
    torch.manual_seed(0)
    policy = _policy()
    batch = _flat_zone_batch(policy)
    before = _actor_snapshot(policy)
    opt = torch.optim.SGD(policy.parameters(), lr=0.5)
    out = _update(case, policy, opt, batch)
    moved = _moved(policy, before)
    if moved > 1e-6:
        pytest.fail(f"{case}: in this batch the stored batch.logp_old puts every ratio outside "
                    "the band on the side its advantage wants (rho = e where A > 0, 1/e where "
                    "A < 0), so the clipped loss has zero gradient and the policy must not "
                    f"move; it moved (a weight changed by {moved:.3g}). Use batch.logp_old as "
                    "stored and never recompute logp_old from the current policy: it is the "
                    "centre of the trust region (if Task 1 fails, fix that first)")
    expected = _full_batch_k3(policy, batch)[0]  # (e - 2 + 1/e) / 2 = 0.5431
    if abs(float(out["approx_kl"]) - expected) > 1e-3:
        pytest.fail(f"{case}: returned approx_kl = {float(out['approx_kl']):.4g}, but measured "
                    f"against the stored batch.logp_old it is {expected:.4g}; compute the KL "
                    "from batch.logp_old, not from log-probs recomputed during the update")


@pytest.mark.task4
def test_task4_clip_false_uses_plain_surrogate():
    case = "clip=False"
    torch.manual_seed(0)
    policy = _policy()
    batch = _flat_zone_batch(policy)
    before = _actor_snapshot(policy)
    opt = torch.optim.SGD(policy.parameters(), lr=0.5)
    _update(case, policy, opt, batch, clip=False)
    if _moved(policy, before) < 1e-4:
        pytest.fail(f"{case}: the plain surrogate -mean(rho * A) has no flat zones, so on a "
                    "batch whose ratios are all outside the band the policy should still move; "
                    "it did not. With clip=False use -(ratio * adv).mean() as the policy loss")


@pytest.mark.task4
def test_task4_normalises_advantages_per_minibatch():
    case = "advantage normalisation per minibatch"
    torch.manual_seed(0)
    policy = _policy(obs_dim=1, hidden=())  # with obs = 0 the policy ignores the state
    n = 64
    g = torch.Generator().manual_seed(2)
    adv = 5.0 + 3.0 * torch.randn(n, generator=g)  # far from mean 0 and std 1
    batch = _batch(policy, torch.zeros(n, 1), torch.zeros(n, dtype=torch.long), adv,
                   torch.randn(n, generator=g))
    before = _actor_snapshot(policy)
    opt = torch.optim.SGD(policy.parameters(), lr=1.0)
    moves: list[float] = []  # after every step: minibatch moves can cancel over an epoch
    opt.register_step_post_hook(lambda *_: moves.append(_moved(policy, before)))
    _update(case, policy, opt, batch, epochs=4)
    moved = max(moves, default=0.0)
    if moved > 1e-4:
        pytest.fail(f"{case}: here every sample has the same state and the same action, so "
                    "once a minibatch's advantages are normalised with that minibatch's own mean "
                    "and std they sum to zero and its policy gradient vanishes: the policy must "
                    f"not move. It moved (a logit changed by {moved:.3g}). Normalise inside each "
                    "minibatch, (adv - adv.mean()) / (adv.std() + 1e-8) on batch.advantages[mb], "
                    "not once over the whole batch (and do not skip it)")


@pytest.mark.task4
def test_task4_early_stopping_at_target_kl():
    target, epochs = 0.008, 30
    case = f"early stopping (target_kl={target}, K={epochs}, 4 minibatches per epoch)"
    torch.manual_seed(0)
    policy = _policy()
    batch = _random_batch(policy, seed=3)
    opt = torch.optim.Adam(policy.parameters(), lr=0.01)
    spy = Spy(policy, opt, batch)
    out = _update(case, policy, opt, batch, epochs=epochs, target_kl=target)
    per_epoch = 4
    if spy.steps == 0 or spy.steps % per_epoch:
        pytest.fail(f"{case}: the update took {spy.steps} optimizer steps, not a whole number of "
                    "epochs; check the KL once after each full epoch, not after every minibatch")
    ran = spy.steps // per_epoch
    kls = [spy.kl_after[e * per_epoch - 1] for e in range(1, ran + 1)]
    crossed = next((e for e, kl in enumerate(kls, 1) if kl > target), None)
    trail = ", ".join(f"{e}: {kl:.4f}" for e, kl in enumerate(kls, 1))
    if crossed is not None and ran > crossed:
        pytest.fail(f"{case}: after epoch {crossed} the whole-batch approx KL was "
                    f"{kls[crossed - 1]:.4f} > target_kl, so the update should stop right "
                    f"there (epochs_run = {crossed}); it ran {ran} epochs. KL after each epoch: "
                    f"{trail}")
    if crossed is None and ran < epochs:
        pytest.fail(f"{case}: stopped after epoch {ran}, but the whole-batch approx KL (k3, "
                    f"against the stored logp_old) was still {kls[-1]:.4f} <= target_kl; stop "
                    f"only once it exceeds target_kl. KL after each epoch: {trail}")
    if float(out["epochs_run"]) != ran:
        pytest.fail(f"{case}: ran {ran} epochs but returned epochs_run = {out['epochs_run']}; "
                    "count the epoch that crossed target_kl too")


@pytest.mark.task4
def test_task4_clips_the_gradient_norm():
    max_norm = 0.5
    case = f"gradient clipping (max_grad_norm={max_norm}, returns of size 1000)"
    torch.manual_seed(0)
    policy = _policy()
    batch = _random_batch(policy, returns_scale=1000.0)  # huge value-loss gradients
    opt = torch.optim.SGD(policy.parameters(), lr=1e-4)
    spy = Spy(policy, opt, batch)
    _update(case, policy, opt, batch, epochs=1, max_grad_norm=max_norm)
    if spy.steps == 0:
        pytest.fail(f"{case}: ppo_update never called optimizer.step()")
    for k, (norm, largest) in enumerate(zip(spy.grad_norms, spy.largest_param_grad,
                                            strict=True), 1):
        if norm > max_norm * (1 + 1e-3):
            hint = (" Every parameter on its own is within the limit: clip the GLOBAL norm over "
                    "all parameters together, not each parameter separately."
                    if largest <= max_norm * (1 + 1e-3) else "")
            pytest.fail(f"{case}: at optimizer step {k} the global gradient norm was "
                        f"{norm:.4g} > {max_norm}. Call torch.nn.utils.clip_grad_norm_("
                        "agent.parameters(), max_grad_norm) after loss.backward() and before "
                        f"optimizer.step().{hint}")
        if norm < max_norm * 0.99:
            pytest.fail(f"{case}: at optimizer step {k} the gradient norm was {norm:.4g}; the "
                        f"raw gradient here is far larger than {max_norm}, so clipping should "
                        "rescale it to exactly max_grad_norm, not shrink it further")


@pytest.mark.task4
@pytest.mark.train
def test_task4_cartpole_improves():
    from trustrl.collect.rollout import Collector
    from trustrl.envs.make import check_env, make_vec_env
    from trustrl.maths.advantages import gae
    from trustrl.nets.policies import ActorCritic
    from trustrl.records.agent import Agent

    iterations = 16
    case = f"CartPole-v1, {iterations} iterations of 512 steps"
    torch.manual_seed(0)
    spec = check_env("CartPole-v1")
    envs = make_vec_env("CartPole-v1", 4)
    policy = ActorCritic(spec.obs_dim, spec.action)
    agent = Agent(policy, spec)
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3, eps=1e-5)
    collector = Collector(envs, agent, 128, None, Collector.start(envs, agent, 0))
    returns: list[list[float]] = []
    try:
        for _ in range(iterations):
            rollout, episodes = collector.collect()
            adv, ret = gae(rollout.rewards, rollout.values, rollout.next_values,
                           rollout.terminated, rollout.truncated, 0.99, 0.95)
            _update(case, policy, opt, rollout.flatten(adv, ret), epochs=10, minibatch_size=64,
                    max_grad_norm=0.5)
            returns.append([e.ret for e in episodes])
    finally:
        envs.close()
    first = [r for it in returns[:2] for r in it]
    last = [r for it in returns[-3:] for r in it]
    first_mean = sum(first) / max(1, len(first))
    last_mean = sum(last) / max(1, len(last)) if last else float("nan")
    if not last or last_mean < max(3 * first_mean, 100.0):
        pytest.fail(f"{case}: the mean episode return went from {first_mean:.1f} (first 2 "
                    f"iterations) to {last_mean:.1f} (last 3); a working PPO at least triples "
                    "it and passes 100. The tests above check the pieces; if they all pass, "
                    "look at the sign of each term in the loss")
