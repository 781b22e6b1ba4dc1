"""Which KL each leash option optimises (issue 16): exact expectations by enumeration, the bandit
fixed point of every offered (algorithm, placement, estimator), and the GRPO / PPO options.

Notation: k1 = log pi - log pi_ref at a token sampled from pi. "Forward" is KL(pi || pi_ref),
"reverse" KL(pi_ref || pi). The gradient identities (Tang & Munos 2025):
  reward, k1: E[grad log pi * k1] = grad forward (full over a sequence, with returns)
  loss, k2:   E[grad k2]          = grad forward per token (partial over a sequence)
  loss, k3:   E[grad k3]          = grad reverse per token (partial over a sequence)
"""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

from trustrl.cli import main
from trustrl.maths.losses import surrogate_objective
from trustrl.rlhf.grpo import (
    GRPOConfig,
    GRPOTrainer,
    group_advantages,
    grpo_loss,
    sequence_rewards,
)
from trustrl.rlhf.kl import (
    KL_OPTIONS,
    AdaptiveKLController,
    check_kl_option,
    exact_kl,
    kl_to_ref,
)
from trustrl.rlhf.ppo import PPOConfig, PPOTrainer, token_gae, token_rewards
from trustrl.util.errors import ConfigError

D = torch.float64


# --- fixed points of the bandit max E[r] - beta * D(pi) ---------------------------------------
def tilted(ref_logits: torch.Tensor, r: torch.Tensor, beta: float) -> torch.Tensor:
    """argmax E[r] - beta KL(pi || ref): log pi* = log ref + r / beta - log Z."""
    return torch.log_softmax(torch.log_softmax(ref_logits, -1) + r / beta, -1)


def reverse_fixed_point(ref_logits: torch.Tensor, r: torch.Tensor, beta: float) -> torch.Tensor:
    """argmax E[r] - beta KL(ref || pi). Stationarity with a multiplier lam for sum pi = 1:
    r_i + beta ref_i / pi_i = lam, so pi_i = beta ref_i / (lam - r_i), lam > max r solved by
    bisection on sum_i pi_i = 1 (the sum falls from +inf to 0 as lam grows)."""
    ref, r = torch.softmax(ref_logits.to(D), -1), r.to(D)
    lo, hi = float(r.max()), float(r.max()) + beta + 1.0  # sum <= beta / (hi - max r) < 1
    for _ in range(200):
        lam = 0.5 * (lo + hi)
        if float((beta * ref / (lam - r)).sum()) > 1.0:
            lo = lam
        else:
            hi = lam
    pi = beta * ref / (0.5 * (lo + hi) - r)
    return torch.log(pi / pi.sum()).to(ref_logits.dtype)


def test_reverse_fixed_point_is_stationary():
    ref_logits, r, beta = torch.tensor([0.0, 1.0, -0.5, 0.5], dtype=D), \
        torch.tensor([2.0, 0.0, 1.0, -1.0], dtype=D), 0.7
    theta = reverse_fixed_point(ref_logits, r, beta).clone().requires_grad_(True)
    pi = torch.softmax(theta, -1)
    obj = (pi * r).sum() - beta * exact_kl(ref_logits, theta)
    (g,) = torch.autograd.grad(obj, theta)
    assert float(g.abs().max()) < 1e-9
    theta_f = tilted(ref_logits, r, beta).clone().requires_grad_(True)
    obj_f = (torch.softmax(theta_f, -1) * r).sum() - beta * exact_kl(theta_f, ref_logits)
    (g_f,) = torch.autograd.grad(obj_f, theta_f)
    assert float(g_f.abs().max()) < 1e-9


# --- the table of options ---------------------------------------------------------------------
def test_offered_options_and_refusals():
    assert set(KL_OPTIONS) == {("reward", "k1"), ("loss", "k2"), ("loss", "k3")}
    assert "KL(pi_ref || pi)" in check_kl_option("loss", "k3")
    assert "partial" in check_kl_option("loss", "k2")
    assert "full" in check_kl_option("reward", "k1")
    for placement, est, msg in [("reward", "k2", "optimises no KL"),
                                ("reward", "k3", "optimises no KL"),
                                ("loss", "k1", "mean 0")]:
        with pytest.raises(ConfigError, match=msg):
            check_kl_option(placement, est)
    with pytest.raises(ConfigError, match="unknown kl_placement"):
        check_kl_option("advantage", "k1")
    # PPO: the penalty is in the reward, so only k1
    for est in ("k2", "k3"):
        with pytest.raises(ConfigError, match=f"{est} in the reward optimises no KL"):
            PPOConfig(kl_estimator=est).validate()
    PPOConfig(kl_estimator="k1").validate()
    with pytest.raises(ConfigError, match="k1 in the loss is no leash"):
        GRPOConfig(kl_estimator="k1").validate()
    with pytest.raises(ConfigError, match="k3 in the reward optimises no KL"):
        GRPOConfig(kl_placement="reward").validate()
    for est, placement in (("k3", "loss"), ("k2", "loss"), ("k1", "reward")):
        GRPOConfig(kl_estimator=est, kl_placement=placement).validate()


# --- one token: exact expectations over a 5-arm softmax ---------------------------------------
def _softmax_case():
    g = torch.Generator().manual_seed(7)
    theta = torch.randn(5, generator=g, dtype=D).requires_grad_(True)
    ref_logits = torch.randn(5, generator=g, dtype=D)
    return theta, ref_logits


def _grads_of_kls(theta, ref_logits):
    (fwd,) = torch.autograd.grad(exact_kl(theta, ref_logits), theta)
    (rev,) = torch.autograd.grad(exact_kl(ref_logits, theta), theta)
    return fwd, rev


@pytest.mark.parametrize("estimator,want", [("k2", "forward"), ("k3", "reverse")])
@pytest.mark.parametrize("loss_type", ["seq-mean", "token-mean", "dr-grpo"])
def test_loss_placement_exact_gradient_on_a_softmax(estimator, want, loss_type):
    """sum_a pi(a) grad grpo_loss(a) with advantage 0: only the KL term, on-policy (rho = 1)."""
    theta, ref_logits = _softmax_case()
    fwd, rev = _grads_of_kls(theta, ref_logits)
    cfg = GRPOConfig(beta=1.0, kl_estimator=estimator, loss_type=loss_type)
    logp_all = torch.log_softmax(theta, -1)
    logp_ref_all = torch.log_softmax(ref_logits, -1)
    pi = logp_all.exp().detach()
    expected = torch.zeros_like(theta)
    for a in range(5):
        logp = logp_all[a].view(1, 1)
        loss, _ = grpo_loss(logp, logp.detach(), logp_ref_all[a].view(1, 1),
                            torch.zeros(1, dtype=D), torch.ones(1, 1, dtype=D), cfg, 1)
        (g,) = torch.autograd.grad(loss, theta, retain_graph=True)
        expected += pi[a] * g
    target, other = (fwd, rev) if want == "forward" else (rev, fwd)
    torch.testing.assert_close(expected, target, rtol=1e-10, atol=1e-12)
    assert float((expected - other).abs().max()) > 0.05  # the two directions differ here


def test_k1_in_the_loss_has_zero_expected_gradient():
    theta, ref_logits = _softmax_case()
    logp_all = torch.log_softmax(theta, -1)
    pi = logp_all.exp().detach()
    lref = torch.log_softmax(ref_logits, -1)
    expected = sum(pi[a] * torch.autograd.grad(kl_to_ref(logp_all[a], lref[a], "k1"), theta,
                                               retain_graph=True)[0] for a in range(5))
    assert float(expected.abs().max()) < 1e-12


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_reward_placement_exact_gradient_on_a_softmax(estimator):
    """PPO's path for one token: reward -beta k (a number), advantage = return (V = 0), loss
    -rho A. Its expected gradient is beta grad forward for k1, and no KL's gradient otherwise."""
    theta, ref_logits = _softmax_case()
    fwd, rev = _grads_of_kls(theta, ref_logits)
    beta = 0.7
    logp_all = torch.log_softmax(theta, -1)
    lref = torch.log_softmax(ref_logits, -1)
    pi = logp_all.exp().detach()
    expected = torch.zeros_like(theta)
    mask = torch.ones(1, 1, dtype=D)
    for a in range(5):
        k = kl_to_ref(logp_all[a].detach(), lref[a], estimator).view(1, 1)
        rew = token_rewards(torch.zeros(1, dtype=D), k, mask, beta)
        adv, _ = token_gae(rew, torch.zeros(1, 1, dtype=D), mask, 1.0, 1.0)
        ratio = (logp_all[a] - logp_all[a].detach()).exp().view(1)
        loss = -surrogate_objective(ratio, adv.view(1)).mean()
        expected += pi[a] * torch.autograd.grad(loss, theta, retain_graph=True)[0]
    if estimator == "k1":
        torch.testing.assert_close(expected, beta * fwd, rtol=1e-10, atol=1e-12)
    else:  # why PPO refuses k2 and k3 in the reward
        assert float((expected - beta * fwd).abs().max()) > 0.02
        assert float((expected - beta * rev).abs().max()) > 0.02


# --- two and three tokens: full vs partial gradient of the sequence KL ------------------------
V = 3


class SeqTable:
    """An autoregressive table policy over T tokens of a V-token vocabulary: the logits of
    token t depend on the previous token (token 0 on a start state)."""

    def __init__(self, seed: int, t: int = 2, scale: float = 1.0):
        g = torch.Generator().manual_seed(seed)
        self.t = t
        self.theta = (scale * torch.randn(V + 1, V, generator=g, dtype=D)).requires_grad_(True)
        self.ref = scale * torch.randn(V + 1, V, generator=g, dtype=D)

    def states(self, seq):
        return [V] + list(seq[:-1])  # row V is the start state

    def logp(self, seqs, logits):
        """[B, T] log-probs of each token of each sequence under `logits`."""
        lp = torch.log_softmax(logits, -1)
        return torch.stack([torch.stack([lp[s, a] for s, a in zip(self.states(q), q,
                                                                   strict=True)])
                            for q in seqs])

    def all_seqs(self):
        return list(itertools.product(range(V), repeat=self.t))

    def seq_kl(self, a_logits, b_logits):
        """Exact sequence KL(a || b) by enumeration (differentiable in both)."""
        seqs = self.all_seqs()
        la, lb = self.logp(seqs, a_logits).sum(1), self.logp(seqs, b_logits).sum(1)
        return (la.exp() * (la - lb)).sum()

    def partial_grad(self, direction: str):
        """sum_t E_{s_t ~ pi}[grad KL_t(s_t)] with the state distribution held fixed."""
        seqs = self.all_seqs()
        w = self.logp(seqs, self.theta).sum(1).exp().detach()
        total = 0.0
        for q, wq in zip(seqs, w, strict=True):
            # each token's state KL, weighted by the probability of the sequence (so of the
            # prefix), summed over positions: the per-token KL at the states reached
            for s in self.states(q):
                a_l, b_l = (self.theta[s], self.ref[s]) if direction == "forward" else \
                    (self.ref[s], self.theta[s])
                total = total + wq * exact_kl(a_l, b_l)
        return torch.autograd.grad(total, self.theta)[0]


@pytest.mark.parametrize("seed,t", [(0, 2), (1, 3)])
def test_sequence_kl_in_the_loss_is_partial_in_the_reward_full(seed, t):
    m = SeqTable(seed, t)
    seqs = m.all_seqs()
    (full_fwd,) = torch.autograd.grad(m.seq_kl(m.theta, m.ref), m.theta)
    part_fwd, part_rev = m.partial_grad("forward"), m.partial_grad("reverse")
    assert float((full_fwd - part_fwd).abs().max()) > 0.02  # the two really differ here
    logp = m.logp(seqs, m.theta)
    logp_ref = m.logp(seqs, m.ref)
    w = logp.sum(1).exp().detach()
    mask = torch.ones(1, t, dtype=D)

    # GRPO, KL in the loss (one answer per batch, advantage 0): per-token, partial
    for est, want in (("k2", part_fwd), ("k3", part_rev)):
        cfg = GRPOConfig(beta=1.0, kl_estimator=est, loss_type="dr-grpo")
        exp_g = torch.zeros_like(m.theta)
        for i in range(len(seqs)):
            lp = logp[i:i + 1]
            loss, _ = grpo_loss(lp, lp.detach(), logp_ref[i:i + 1], torch.zeros(1, dtype=D),
                                mask, cfg, t)
            exp_g += w[i] * torch.autograd.grad(loss, m.theta, retain_graph=True)[0]
        torch.testing.assert_close(exp_g * t, want, rtol=1e-9, atol=1e-12)  # dr-grpo: 1/t

    # PPO, k1 in the reward: returns over the answer give the full gradient
    exp_g = torch.zeros_like(m.theta)
    beta = 0.5
    for i in range(len(seqs)):
        k1 = kl_to_ref(logp[i:i + 1].detach(), logp_ref[i:i + 1], "k1")
        rew = token_rewards(torch.zeros(1, dtype=D), k1, mask, beta)
        adv, _ = token_gae(rew, torch.zeros(1, t, dtype=D), mask, 1.0, 1.0)
        ratio = (logp[i] - logp[i].detach()).exp()
        loss = -surrogate_objective(ratio, adv[0]).sum()
        exp_g += w[i] * torch.autograd.grad(loss, m.theta, retain_graph=True)[0]
    torch.testing.assert_close(exp_g, beta * full_fwd, rtol=1e-9, atol=1e-12)

    # GRPO, k1 in the reward: every group of G = 2 answers enumerated (for t = 2: 81 groups);
    # the group-mean baseline scales the gradient by (1 - 1/G), the aggregation by 1/t
    if t > 2:
        return
    cfg = GRPOConfig(beta=beta, kl_estimator="k1", kl_placement="reward", scale_rewards=False,
                     group_size=2, prompts_per_iter=1)
    for loss_type in ("seq-mean", "token-mean", "dr-grpo"):
        cfg.loss_type = loss_type
        exp_g = torch.zeros_like(m.theta)
        for i, j in itertools.product(range(len(seqs)), repeat=2):
            lp, lr_ = logp[[i, j]], logp_ref[[i, j]]
            r = sequence_rewards(torch.zeros(2, dtype=D), lp.detach(), lr_, mask.expand(2, t),
                                 cfg)
            adv = group_advantages(r.view(1, 2), scale=False).flatten()
            loss, _ = grpo_loss(lp, lp.detach(), lr_, adv, mask.expand(2, t), cfg, t)
            exp_g += w[i] * w[j] * torch.autograd.grad(loss, m.theta, retain_graph=True)[0]
        torch.testing.assert_close(exp_g * t, 0.5 * beta * full_fwd, rtol=1e-9, atol=1e-12)


# --- the bandit: every offered option converges to its own fixed point -------------------------
class TablePolicy(nn.Module):
    def __init__(self, logits: torch.Tensor):
        super().__init__()
        self.logits = nn.Parameter(logits.clone())

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.logits.expand(tokens.shape[0], tokens.shape[1], -1)


class TableValue(nn.Module):
    def __init__(self):
        super().__init__()
        self.v = nn.Parameter(torch.zeros(1))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.v.expand(tokens.shape[0], tokens.shape[1], 1)


REF = torch.tensor([0.0, 1.0, -0.5, 0.5])
R = torch.tensor([1.0, 0.0, 0.8, -1.0])
BETA, G = 0.5, 4


def _zeros_prompts(b, g):
    return torch.zeros(b, 1, dtype=torch.long)


def _bandit_trainer(algo, placement, estimator, seed):
    policy, ref = TablePolicy(REF), TablePolicy(REF)
    gen = torch.Generator().manual_seed(seed)
    if algo == "ppo":
        cfg = PPOConfig(beta=BETA, kl_estimator=estimator, batch_size=512, minibatch_size=512,
                        epochs=2, lr=0.05, max_grad_norm=10.0)
        return policy, PPOTrainer(cfg, policy, ref, TableValue(), lambda p, a: R[a[:, 0]],
                                  _zeros_prompts, 1, generator=gen)
    cfg = GRPOConfig(beta=BETA, kl_estimator=estimator, kl_placement=placement,
                     prompts_per_iter=128, group_size=G, minibatch_size=512, epochs=1,
                     lr=0.05, scale_rewards=False, max_grad_norm=10.0)
    return policy, GRPOTrainer(cfg, policy, ref, lambda p, a: R[a[:, 0]], _zeros_prompts, 1,
                               generator=gen)


def _fixed_points():
    """The three candidates: the tilted pi* at beta, and, as GRPO's loss-placed KL sees beta
    against a task gradient scaled by (1 - 1/G), the tilted and reverse optima at
    beta G / (G - 1)."""
    b_g = BETA * G / (G - 1)
    return {"tilted": tilted(REF, R, BETA), "tilted-G": tilted(REF, R, b_g),
            "reverse-G": reverse_fixed_point(REF, R, b_g)}


# (algorithm, placement, estimator) -> the fixed point it must reach (measured, generator seeds
# 0-2: PPO 0.0000 from pi*; GRPO k1 in the reward 0.0011-0.0013, k2 and k3 in the loss 0.0000;
# the nearest other candidate 0.025 or more away). PPO and GRPO with k1 in
# the reward optimise E[r] - beta KL(pi || ref) (GRPO's group baseline scales the whole
# reward, KL included, by 1 - 1/G); GRPO's loss-placed KL is not scaled.
OFFERED = [("ppo", "reward", "k1", "tilted"), ("grpo", "reward", "k1", "tilted"),
           ("grpo", "loss", "k2", "tilted-G"), ("grpo", "loss", "k3", "reverse-G")]


@pytest.mark.parametrize("algo,placement,estimator,want", OFFERED)
def test_bandit_converges_to_the_fixed_point_of_its_kl(algo, placement, estimator, want):
    torch.manual_seed(0)
    points = _fixed_points()
    policy, trainer = _bandit_trainer(algo, placement, estimator, seed=0)
    assert float(exact_kl(points[want], REF)) > 0.3  # the reference is far from the optimum
    iterations = 80 if algo == "ppo" else 150  # PPO's critic converges faster (measured)
    for it in range(iterations):
        if it == iterations // 2:
            for group in trainer.opt.param_groups:
                group["lr"] = 0.01
        trainer.step()
    theta = policy.logits.detach()
    dist = {k: float(exact_kl(v, theta)) for k, v in points.items()}
    assert dist[want] < 0.005, dist
    for k, d in dist.items():  # and the others are measurably further away
        if k != want:
            assert d > 0.015, dist


# --- GRPO's logged KL, options, and the loss aggregations with beta > 0 ------------------------
def _tiny_lm_trainer(cfg, seed=0):
    from trustrl.rlhf.model import ModelConfig, TinyLM
    from trustrl.rlhf.task import SortTask

    torch.manual_seed(seed)
    task = SortTask(5)
    ref = TinyLM(ModelConfig(max_len=task.seq_len))
    policy = TinyLM(ModelConfig(max_len=task.seq_len))
    with torch.no_grad():  # a policy away from the reference: the KL is not 0
        policy.head.weight.mul_(60.0)
    return GRPOTrainer(cfg, policy, ref, lambda p, a: (a[:, 0] % 3).float(),
                       task.sample_prompts, task.max_new,
                       generator=torch.Generator().manual_seed(seed))


def test_grpo_logs_the_token_weighted_kl_of_the_whole_batch():
    cfg = GRPOConfig(prompts_per_iter=8, group_size=4, minibatch_size=8, epochs=2, beta=0.1)
    trainer = _tiny_lm_trainer(cfg)
    seen = {}
    collect = trainer.collect

    def spy():
        batch, stats = collect()
        seen["batch"] = batch
        return batch, stats

    trainer.collect = spy
    row = trainer.step()
    b = seen["batch"]
    k3 = kl_to_ref(b.logp_old, b.logp_ref, "k3") * b.mask
    want = float(k3.sum() / b.mask.sum())
    assert row["kl"] == pytest.approx(want, rel=1e-6)
    lengths = b.mask.sum(1)
    assert float(lengths.min()) < float(lengths.max())  # answers of several lengths, so ...
    per_answer = float((k3.sum(1) / lengths).mean())
    assert abs(per_answer - want) > 1e-3 * want  # ... the per-answer mean would differ
    first_mb = float(k3[:8].sum() / b.mask[:8].sum())
    assert abs(first_mb - want) > 1e-3 * want  # and so would one minibatch


def test_grpo_scale_rewards_false_is_the_mean_only_baseline():
    for scale in (True, False):
        cfg = GRPOConfig(prompts_per_iter=4, group_size=4, scale_rewards=scale)
        trainer = _tiny_lm_trainer(cfg)
        batch, _ = trainer.collect()
        r = (batch.responses[:, 0] % 3).float().view(4, 4)
        centred = r - r.mean(1, keepdim=True)
        want = centred / (r.std(1, keepdim=True) + cfg.std_eps) if scale else centred
        torch.testing.assert_close(batch.advantages, want.flatten())


def test_grpo_kl_in_the_reward_enters_the_group_advantages():
    cfg = GRPOConfig(prompts_per_iter=4, group_size=4, scale_rewards=False, beta=0.3,
                     kl_estimator="k1", kl_placement="reward")
    trainer = _tiny_lm_trainer(cfg)
    batch, stats = trainer.collect()
    r = (batch.responses[:, 0] % 3).float()
    kl_seq = ((batch.logp_old - batch.logp_ref) * batch.mask).sum(1)
    total = (r - 0.3 * kl_seq).view(4, 4)
    torch.testing.assert_close(batch.advantages, (total - total.mean(1, keepdim=True)).flatten())
    assert stats["reward"] == pytest.approx(float(r.mean()))  # the task reward is logged


def _bandit_update_batch(policy, ratio, adv):
    """A GroupBatch of 2 one-token answers whose ratio to pi_old is `ratio`."""
    from trustrl.rlhf.grpo import GroupBatch

    responses = torch.tensor([[0], [1]])
    with torch.no_grad():
        logp = torch.log_softmax(policy.logits, -1)[responses[:, 0]].view(2, 1)
    return GroupBatch(torch.zeros(2, 1, dtype=torch.long), responses, torch.ones(2, 1),
                      logp - torch.log(torch.tensor(ratio)), logp.clone(), torch.tensor(adv))


@pytest.mark.parametrize("eps_high,moves", [(None, False), (0.28, True)])
def test_grpo_clip_eps_high_lets_good_tokens_rise_further(eps_high, moves):
    """Both answers at rho = 1.25 with A > 0: clip_eps 0.2 clips them (no gradient, Adam does
    not move); clip-higher 0.28 does not."""
    policy, ref = TablePolicy(REF), TablePolicy(REF)
    cfg = GRPOConfig(group_size=2, prompts_per_iter=1, minibatch_size=2, epochs=1,
                     clip_eps=0.2, clip_eps_high=eps_high)
    trainer = GRPOTrainer(cfg, policy, ref, lambda p, a: R[a[:, 0]], _zeros_prompts, 1)
    before = policy.logits.detach().clone()
    out = trainer.update(_bandit_update_batch(policy, 1.25, [1.0, 0.5]))
    changed = not torch.equal(before, policy.logits.detach())
    assert changed == moves
    assert out["clip_ratio/high_mean"] == (0.0 if moves else 1.0)


@pytest.mark.parametrize("loss_type", ["seq-mean", "token-mean", "dr-grpo"])
@pytest.mark.parametrize("estimator", ["k2", "k3"])
def test_grpo_loss_aggregations_with_beta_by_hand_and_in_the_trainer(loss_type, estimator):
    g = torch.Generator().manual_seed(0)
    logp = torch.log(torch.rand(3, 4, generator=g, dtype=D) * 0.9 + 0.05)
    logp_old = logp + 0.1 * torch.randn(3, 4, generator=g, dtype=D)
    logp_ref = torch.log(torch.rand(3, 4, generator=g, dtype=D) * 0.9 + 0.05)
    adv = torch.tensor([1.0, -0.5, 0.25], dtype=D)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=D)
    beta = 0.3
    cfg = GRPOConfig(beta=beta, kl_estimator=estimator, loss_type=loss_type, clip_eps=0.05)
    loss, _ = grpo_loss(logp, logp_old, logp_ref, adv, mask, cfg, max_len=5)
    ratio = (logp - logp_old).exp()
    lr_ = logp_ref - logp
    k = 0.5 * lr_**2 if estimator == "k2" else lr_.exp() - 1 - lr_
    pg = -torch.min(ratio * adv[:, None], ratio.clamp(0.95, 1.05) * adv[:, None])
    per = (pg + beta * k) * mask
    want = {"seq-mean": (per.sum(1) / mask.sum(1)).mean(),
            "token-mean": per.sum() / mask.sum(),
            "dr-grpo": per.sum() / (3 * 5)}[loss_type]
    assert float(loss) == pytest.approx(float(want), rel=1e-12)
    # beta = 0 drops the KL term
    cfg0 = GRPOConfig(beta=0.0, loss_type=loss_type, clip_eps=0.05)
    loss0, _ = grpo_loss(logp, logp_old, logp_ref, adv, mask, cfg0, max_len=5)
    assert abs(float(loss) - float(loss0)) > 1e-3

    # the trainer's update uses the same loss (1 epoch, one minibatch: its logged loss is the
    # loss before its single step)
    policy, ref = TablePolicy(REF), TablePolicy(torch.zeros(4))
    tcfg = GRPOConfig(beta=beta, kl_estimator=estimator, loss_type=loss_type, group_size=2,
                      prompts_per_iter=1, minibatch_size=2, epochs=1)
    trainer = GRPOTrainer(tcfg, policy, ref, lambda p, a: R[a[:, 0]], _zeros_prompts, 1)
    batch = _bandit_update_batch(policy, 1.1, [1.0, -1.0])
    batch.logp_ref = torch.log_softmax(torch.zeros(4), -1)[batch.responses[:, 0]].view(2, 1)
    with torch.no_grad():
        lp = torch.log_softmax(policy.logits, -1)[batch.responses[:, 0]].view(2, 1)
        want_t, _ = grpo_loss(lp, batch.logp_old, batch.logp_ref, batch.advantages,
                              batch.mask, tcfg, 1)
    out = trainer.update(batch)
    assert out["loss"] == pytest.approx(float(want_t), rel=1e-6)


# --- PPO's adaptive beta: wired into the rewards; beta = 0 refused -------------------------------
def test_ppo_target_kl_moves_beta_and_the_rewards_use_it():
    policy, ref = TablePolicy(REF), TablePolicy(torch.zeros(4))
    cfg = PPOConfig(beta=0.1, target_kl=0.01, horizon=1000.0, batch_size=256,
                    minibatch_size=256, epochs=1, lr=0.01)
    trainer = PPOTrainer(cfg, policy, ref, TableValue(), lambda p, a: R[a[:, 0]],
                         _zeros_prompts, 1, generator=torch.Generator().manual_seed(0))
    row = trainer.step()
    assert row["beta"] == 0.1
    err = min(max(row["objective/kl"] / 0.01 - 1, -0.2), 0.2)
    assert err == 0.2  # KL(pi || ref) here is far above 0.01
    assert trainer.beta == pytest.approx(0.1 * (1 + err * 256 / 1000))
    row2 = trainer.step()
    assert row2["beta"] == trainer.kl_ctl.beta / (1 + 0.2 * 256 / 1000)
    # the second batch's rewards were computed with the new beta
    assert row2["objective/rlhf_reward"] == pytest.approx(
        row2["objective/scores"] - row2["beta"] * row2["objective/kl"], rel=1e-5)
    # a fixed beta does not move
    cfg_fixed = PPOConfig(beta=0.1, batch_size=64, minibatch_size=64, epochs=1)
    t2 = PPOTrainer(cfg_fixed, TablePolicy(REF), TablePolicy(torch.zeros(4)), TableValue(),
                    lambda p, a: R[a[:, 0]], _zeros_prompts, 1)
    t2.step()
    assert t2.beta == 0.1


def test_adaptive_beta_from_zero_is_refused(capsys, tmp_path):
    with pytest.raises(ConfigError, match="can never move"):
        AdaptiveKLController(0.0, 1.0, 100)
    with pytest.raises(ConfigError, match="target_kl needs an initial beta > 0"):
        PPOConfig(beta=0.0, target_kl=1.0).validate()
    assert main(["rlhf", "ppo", "--sft", "x", "--reward-model", "y", "--target-kl", "1",
                 "--set", "beta=0", "--runs-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trustrl: error: ") and "can never move" in err
    assert err.strip().count("\n") == 0


@pytest.mark.parametrize("argv,message", [
    (["ppo", "--sft", "x", "--reward-model", "y", "--kl-estimator", "k3"],
     "k3 in the reward optimises no KL"),
    (["grpo", "--sft", "x", "--beta", "0.1", "--kl-estimator", "k1"], "k1 in the loss"),
    (["grpo", "--sft", "x", "--kl-placement", "reward"], "k3 in the reward optimises no KL"),
    (["grpo", "--sft", "x", "--kl-placement", "sideways"], "unknown kl_placement"),
])
def test_cli_refused_kl_options_are_one_line_exit_2(argv, message, capsys, tmp_path):
    assert main(["rlhf", *argv, "--runs-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trustrl: error: ") and message in err
    assert err.strip().count("\n") == 0
    assert not list(tmp_path.iterdir())
