"""`python -m trustrl.rlhf.klcheck`: the measured table of docs/rlhf.md, "which KL estimator where".

For every (algorithm, placement, estimator), offered or refused, three measurements:

1. one token, a 5-arm softmax: the exact expectation (all arms enumerated) of the gradient the
   option's code path produces, against grad KL(pi || pi_ref) and grad KL(pi_ref || pi);
2. three tokens (vocabulary 3, every sequence enumerated): the same against the full gradient of
   the sequence KL(pi || pi_ref) and the partial (per-token, states held fixed) gradients;
3. a 4-armed bandit trained with the real PPOTrainer / GRPOTrainer (3 generator seeds): the
   distance of the final policy to the optimum of E[r] - beta KL(pi || pi_ref) and to the fixed
   point derived for the option.

Refused options are run here by skipping the config check, only to show why they are refused.
"""

from __future__ import annotations

import itertools
from unittest import mock

import torch
from torch import Tensor, nn

from trustrl.maths.losses import surrogate_objective
from trustrl.rlhf.grpo import GRPOConfig, GRPOTrainer, grpo_loss
from trustrl.rlhf.kl import exact_kl, kl_to_ref
from trustrl.rlhf.ppo import PPOConfig, PPOTrainer, token_gae, token_rewards

D = torch.float64
# (algorithm, placement, estimator, offered)
OPTIONS = [("ppo", "reward", "k1", True), ("ppo", "reward", "k2", False),
           ("ppo", "reward", "k3", False), ("grpo", "reward", "k1", True),
           ("grpo", "loss", "k2", True), ("grpo", "loss", "k3", True),
           ("grpo", "loss", "k1", False)]
REF = torch.tensor([0.0, 1.0, -0.5, 0.5])
R = torch.tensor([1.0, 0.0, 0.8, -1.0])
BETA, G = 0.5, 4


def tilted_optimum(ref_logits: Tensor, r: Tensor, beta: float) -> Tensor:
    """log of argmax_pi E[r] - beta KL(pi || ref) = ref exp(r / beta) / Z."""
    return torch.log_softmax(torch.log_softmax(ref_logits, -1) + r / beta, -1)


def reverse_optimum(ref_logits: Tensor, r: Tensor, beta: float) -> Tensor:
    """log of argmax_pi E[r] - beta KL(ref || pi): pi_i = beta ref_i / (lam - r_i), lam > max r
    by bisection on sum pi = 1."""
    ref, rr = torch.softmax(ref_logits.to(D), -1), r.to(D)
    lo, hi = float(rr.max()), float(rr.max()) + beta + 1.0
    for _ in range(200):
        lam = 0.5 * (lo + hi)
        lo, hi = (lam, hi) if float((beta * ref / (lam - rr)).sum()) > 1.0 else (lo, lam)
    pi = beta * ref / (0.5 * (lo + hi) - rr)
    return torch.log(pi / pi.sum()).to(ref_logits.dtype)


def _grad_of_option(placement: str, estimator: str, logp: Tensor, logp_ref: Tensor,
                    theta: Tensor) -> Tensor:
    """Gradient (w.r.t. theta) of one sampled answer's KL part of the loss, [1, T] log-probs."""
    t = logp.shape[1]
    mask = torch.ones(1, t, dtype=D)
    if placement == "loss":
        cfg = GRPOConfig(beta=1.0, loss_type="dr-grpo")
        cfg.kl_estimator = estimator
        loss, _ = grpo_loss(logp, logp.detach(), logp_ref, torch.zeros(1, dtype=D), mask, cfg, t)
        loss = loss * t
    else:  # PPO's path: reward -k, returns over the answer, loss -sum_t rho_t A_t
        k = kl_to_ref(logp.detach(), logp_ref, estimator)
        adv, _ = token_gae(token_rewards(torch.zeros(1, dtype=D), k, mask, 1.0),
                           torch.zeros(1, t, dtype=D), mask, 1.0, 1.0)
        loss = -surrogate_objective((logp - logp.detach()).exp()[0], adv[0]).sum()
    return torch.autograd.grad(loss, theta, retain_graph=True)[0]


def _rel(a: Tensor, b: Tensor) -> float:
    return float((a - b).norm() / b.norm())


def softmax_check(placement: str, estimator: str) -> tuple[float, float]:
    """Relative error of the exact expected gradient vs grad KL(pi||ref), grad KL(ref||pi)."""
    g = torch.Generator().manual_seed(7)
    theta = torch.randn(5, generator=g, dtype=D).requires_grad_(True)
    ref = torch.randn(5, generator=g, dtype=D)
    (fwd,) = torch.autograd.grad(exact_kl(theta, ref), theta)
    (rev,) = torch.autograd.grad(exact_kl(ref, theta), theta)
    lp, lr = torch.log_softmax(theta, -1), torch.log_softmax(ref, -1)
    e = sum(lp[a].exp().detach() * _grad_of_option(placement, estimator, lp[a].view(1, 1),
                                                   lr[a].view(1, 1), theta) for a in range(5))
    return _rel(e, fwd), _rel(e, rev)


def sequence_check(placement: str, estimator: str, t: int = 3,
                   v: int = 3) -> tuple[float, float, float]:
    """Relative error vs the full sequence gradient of KL(pi||ref), and vs the partial
    (per-token) gradients of KL(pi||ref) and of KL(ref||pi)."""
    g = torch.Generator().manual_seed(0)
    theta = torch.randn(v + 1, v, generator=g, dtype=D).requires_grad_(True)
    ref = torch.randn(v + 1, v, generator=g, dtype=D)
    seqs = list(itertools.product(range(v), repeat=t))
    states = [[v, *q[:-1]] for q in seqs]

    def logp(logits: Tensor) -> Tensor:
        ls = torch.log_softmax(logits, -1)
        return torch.stack([torch.stack([ls[s, a] for s, a in zip(st, q, strict=True)])
                            for st, q in zip(states, seqs, strict=True)])

    lp, lr = logp(theta), logp(ref)
    w = lp.sum(1).exp().detach()
    kl_seq = (lp.sum(1).exp() * (lp - lr).sum(1)).sum()
    full = torch.autograd.grad(kl_seq, theta, retain_graph=True)[0]
    part = {}
    for name, (a, b) in {"fwd": (theta, ref), "rev": (ref, theta)}.items():
        tot = sum(w[i] * exact_kl(a[s], b[s]) for i, st in enumerate(states) for s in st)
        part[name] = torch.autograd.grad(tot, theta, retain_graph=True)[0]
    e = sum(w[i] * _grad_of_option(placement, estimator, lp[i:i + 1], lr[i:i + 1], theta)
            for i in range(len(seqs)))
    return _rel(e, full), _rel(e, part["fwd"]), _rel(e, part["rev"])


class _Table(nn.Module):
    def __init__(self, logits: Tensor):
        super().__init__()
        self.logits = nn.Parameter(logits.clone())

    def forward(self, tokens: Tensor) -> Tensor:
        return self.logits.expand(tokens.shape[0], tokens.shape[1], -1)


def bandit(algo: str, placement: str, estimator: str, seed: int,
           iterations: int = 150) -> Tensor:
    """Final logits of the bandit trained by the real trainer (config check skipped)."""
    torch.manual_seed(seed)
    policy, ref = _Table(REF), _Table(REF)
    gen = torch.Generator().manual_seed(seed)
    zeros = lambda b, g: torch.zeros(b, 1, dtype=torch.long)  # noqa: E731
    score = lambda p, a: R[a[:, 0]]  # noqa: E731
    with mock.patch("trustrl.rlhf.ppo.check_kl_option", lambda *a: ""), \
            mock.patch("trustrl.rlhf.grpo.check_kl_option", lambda *a: ""):
        if algo == "ppo":
            cfg = PPOConfig(beta=BETA, kl_estimator=estimator, batch_size=512,
                            minibatch_size=512, epochs=2, lr=0.05, max_grad_norm=10.0)
            trainer: PPOTrainer | GRPOTrainer = PPOTrainer(
                cfg, policy, ref, _Table(torch.zeros(1)), score, zeros, 1, generator=gen)
        else:
            gcfg = GRPOConfig(beta=BETA, kl_estimator=estimator, kl_placement=placement,
                              prompts_per_iter=128, group_size=G, minibatch_size=512, epochs=1,
                              lr=0.05, scale_rewards=False, max_grad_norm=10.0)
            trainer = GRPOTrainer(gcfg, policy, ref, score, zeros, 1, generator=gen)
        for it in range(iterations):
            if it == iterations // 2:
                for group in trainer.opt.param_groups:
                    group["lr"] = 0.01
            trainer.step()
    return policy.logits.detach()


def own_fixed_point(algo: str, placement: str, estimator: str) -> Tensor | None:
    """The optimum the option is derived to reach (None for the refused ones)."""
    if (placement, estimator) == ("reward", "k1"):
        return tilted_optimum(REF, R, BETA)  # GRPO's baseline scales reward and KL alike
    b_g = BETA * G / (G - 1)  # GRPO: the task gradient is scaled by 1 - 1/G, the loss KL is not
    if (placement, estimator) == ("loss", "k2"):
        return tilted_optimum(REF, R, b_g)
    if (placement, estimator) == ("loss", "k3"):
        return reverse_optimum(REF, R, b_g)
    return None


def main() -> None:
    torch.set_num_threads(1)
    print("| algorithm | KL option | offered | 1 token: vs grad KL(pi\\|\\|ref) | vs grad "
          "KL(ref\\|\\|pi) | 3 tokens: vs full grad seq KL(pi\\|\\|ref) | vs partial fwd | vs "
          "partial rev | bandit: KL(pi*\\|\\|pi) | KL(own fixed point\\|\\|pi) | final pi |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    star = tilted_optimum(REF, R, BETA)
    for algo, placement, est, offered in OPTIONS:
        f1, r1 = softmax_check(placement, est)
        full, pf, pr = sequence_check(placement, est)
        finals = [bandit(algo, placement, est, s) for s in range(3)]
        d_star = [float(exact_kl(star, f)) for f in finals]
        own = own_fixed_point(algo, placement, est)
        d_own = [float(exact_kl(own, f)) for f in finals] if own is not None else None
        pi = torch.softmax(finals[0], -1)
        cell = (lambda x: f"{min(x):.4f}-{max(x):.4f}")  # noqa: E731
        print(f"| {algo} | {est} in the {placement} | {'yes' if offered else 'refused'} | "
              f"{f1:.2g} | {r1:.2g} | {full:.2g} | {pf:.2g} | {pr:.2g} | {cell(d_star)} | "
              f"{cell(d_own) if d_own else 'n/a'} | "
              f"[{', '.join(f'{p:.3f}' for p in pi.tolist())}] |", flush=True)
    print(f"\npi* (tilted, beta {BETA}) = [{', '.join(f'{p:.3f}' for p in star.exp().tolist())}]"
          f"; bandit r = {[round(x, 3) for x in R.tolist()]}, pi_ref = softmax({REF.tolist()}), "
          f"GRPO G = {G}, "
          "scale_rewards false; relative errors are ||E[g] - g*|| / ||g*||.")


if __name__ == "__main__":
    main()
