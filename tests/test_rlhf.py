"""trustrl.rlhf: the maths against closed forms and brute force, the task's gold score, the
model's alignment of positions, and bad input."""

from __future__ import annotations

import math

import pytest
import torch

from trustrl.cli import main
from trustrl.maths.losses import clipped_surrogate_objective
from trustrl.rlhf.grpo import GRPOConfig, aggregate, clipped_objective, group_advantages
from trustrl.rlhf.kl import AdaptiveKLController, exact_kl, kl_to_ref
from trustrl.rlhf.model import (
    ModelConfig,
    TinyLM,
    answer_logits,
    answer_values,
    sample,
    sequence_scores,
    token_logprobs,
)
from trustrl.rlhf.ppo import PPOConfig, token_gae, token_rewards, whiten
from trustrl.rlhf.task import EOS, SEP, SortTask, gold_scores, last_index, response_mask
from trustrl.util.errors import ConfigError


# --- KL estimators ------------------------------------------------------------------------------
@pytest.mark.parametrize("shift", [0.3, 1.0])
def test_kl_estimators_match_exact_kl_on_categoricals(shift):
    torch.manual_seed(0)
    logits_p = torch.randn(6, dtype=torch.float64)
    logits_q = logits_p + shift * torch.randn(6, dtype=torch.float64)
    exact = float(exact_kl(logits_p, logits_q))
    lp, lq = torch.log_softmax(logits_p, -1), torch.log_softmax(logits_q, -1)
    n = 400_000
    a = torch.multinomial(lp.exp(), n, replacement=True, generator=torch.Generator().manual_seed(1))
    per = {k: kl_to_ref(lp[a], lq[a], k) for k in ("k1", "k2", "k3")}
    for k in ("k1", "k3"):  # unbiased: within 5 standard errors
        se = float(per[k].std()) / math.sqrt(n)
        assert abs(float(per[k].mean()) - exact) < 5 * se, (k, float(per[k].mean()), exact)
    # k2 is biased; E[k2] is computable exactly, and is close to KL when p ~ q
    e_k2 = float((lp.exp() * 0.5 * (lq - lp) ** 2).sum())
    assert abs(float(per["k2"].mean()) - e_k2) < 5 * float(per["k2"].std()) / math.sqrt(n)
    if shift < 0.5:
        assert abs(e_k2 - exact) < 0.1 * exact
    assert bool((per["k3"] >= 0).all()) and bool((per["k2"] >= 0).all())
    assert bool((per["k1"] < 0).any())  # k1 is negative on some samples


def test_unknown_kl_estimator_is_a_clear_error():
    with pytest.raises(ConfigError, match="unknown KL estimator 'k4'"):
        kl_to_ref(torch.zeros(3), torch.zeros(3), "k4")
    with pytest.raises(ConfigError, match="unknown KL estimator"):
        PPOConfig(kl_estimator="k5").validate()


def test_adaptive_controller_closed_form():
    c = AdaptiveKLController(beta=0.1, target=1.0, horizon=1000)
    assert c.update(5.0, 100) == pytest.approx(0.1 * (1 + 0.2 * 0.1))   # error clipped to 0.2
    b = c.beta
    assert c.update(0.9, 100) == pytest.approx(b * (1 - 0.1 * 0.1))     # error -0.1
    assert c.update(1.0, 100) == pytest.approx(b * (1 - 0.1 * 0.1))     # on target: unchanged


# --- GRPO pieces ------------------------------------------------------------------------------
def test_group_advantages_by_hand():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.5, 0.5, 0.5, 0.5], [3.0, 1.0, 2.0, 2.0]])
    adv = group_advantages(r, scale=True, eps=1e-4)
    s1 = math.sqrt(4 * 0.25 / 3)            # sample std of (1, 0, 0, 1)
    s3 = math.sqrt((1 + 1 + 0 + 0) / 3)     # sample std of (3, 1, 2, 2)
    expect = torch.tensor([[0.5, -0.5, -0.5, 0.5], [0.0] * 4, [1.0, -1.0, 0.0, 0.0]])
    expect[0] /= s1 + 1e-4
    expect[2] /= s3 + 1e-4
    torch.testing.assert_close(adv, expect)
    torch.testing.assert_close(group_advantages(r, scale=False),
                               torch.tensor([[0.5, -0.5, -0.5, 0.5], [0.0] * 4,
                                             [1.0, -1.0, 0.0, 0.0]]))


def test_loss_aggregation_modes_by_hand():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    m = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    assert float(aggregate(x, m, "seq-mean", 3)) == pytest.approx((1.5 + 5.0) / 2)
    assert float(aggregate(x, m, "token-mean", 3)) == pytest.approx(18 / 5)
    assert float(aggregate(x, m, "dr-grpo", 3)) == pytest.approx(18 / 6)
    assert float(aggregate(x, m, "dr-grpo", 4)) == pytest.approx(18 / 8)  # a constant, not |o|
    with pytest.raises(ConfigError, match="unknown loss_type"):
        aggregate(x, m, "sum", 3)


def test_clip_higher_by_hand_and_symmetric_equals_core():
    ratio = torch.tensor([1.25, 1.25, 0.7, 0.7, 1.0])
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0, 2.0])
    torch.testing.assert_close(clipped_objective(ratio, adv, 0.2, 0.2),
                               clipped_surrogate_objective(ratio, adv, 0.2))
    # eps_high = 0.28: a good token may rise to 1.28 before the clip acts
    torch.testing.assert_close(clipped_objective(ratio, adv, 0.2, 0.28),
                               torch.tensor([1.25, -1.25, 0.7, -0.8, 2.0]))


def test_group_size_and_beta_errors():
    with pytest.raises(ConfigError, match="group_size must be at least 2"):
        GRPOConfig(group_size=1).validate()
    with pytest.raises(ConfigError, match="beta must be a finite number >= 0"):
        GRPOConfig(beta=-0.1).validate()
    with pytest.raises(ConfigError, match="beta must be a finite number >= 0"):
        PPOConfig(beta=-1.0).validate()
    with pytest.raises(ConfigError, match="beta must be"):
        AdaptiveKLController(-1.0, 1.0, 100)


# --- per-token rewards and GAE over tokens ----------------------------------------------------
def _brute_gae(r, v, length, gamma, lam):
    """A_t = sum_l (gamma lam)^l delta_{t+l} inside one answer, V after the last token = 0."""
    out = []
    for t in range(length):
        a = 0.0
        for k in range(t, length):
            v_next = v[k + 1] if k + 1 < length else 0.0
            delta = r[k] + gamma * v_next - v[k]
            a += (gamma * lam) ** (k - t) * delta
        out.append(a)
    return out


@pytest.mark.parametrize("gamma,lam", [(1.0, 0.95), (0.9, 0.5), (1.0, 1.0)])
def test_token_gae_against_brute_force(gamma, lam):
    g = torch.Generator().manual_seed(3)
    b, t = 7, 6
    rewards = torch.randn(b, t, generator=g, dtype=torch.float64)
    values = torch.randn(b, t, generator=g, dtype=torch.float64)
    lengths = [6, 1, 3, 6, 2, 5, 4]
    mask = torch.tensor([[1.0] * n + [0.0] * (t - n) for n in lengths], dtype=torch.float64)
    adv, ret = token_gae(rewards, values, mask, gamma, lam)
    for i, n in enumerate(lengths):
        want = _brute_gae(rewards[i].tolist(), values[i].tolist(), n, gamma, lam)
        torch.testing.assert_close(adv[i, :n], torch.tensor(want, dtype=torch.float64))
        torch.testing.assert_close(ret[i, :n], adv[i, :n] + values[i, :n])
        assert bool((adv[i, n:] == 0).all())


def test_token_rewards_and_whiten():
    kl = torch.tensor([[0.1, 0.2, 0.3], [0.5, -0.5, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    r = token_rewards(torch.tensor([2.0, -1.0]), kl, mask, beta=0.5)
    torch.testing.assert_close(r, torch.tensor([[-0.05, -0.1, -0.15 + 2.0],
                                                [-0.25, 0.25 - 1.0, 0.0]]))
    w = whiten(torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 100.0]]), mask)
    valid = w[mask.bool()]
    assert abs(float(valid.mean())) < 1e-6
    assert float(valid.var(unbiased=False)) == pytest.approx(1.0, abs=1e-5)
    assert float(w[1, 2]) == 0.0


# --- task and model ---------------------------------------------------------------------------
def test_gold_score_cases():
    task = SortTask(5)
    prompts = torch.tensor([[3, 1, 4, 1, 5, SEP]] * 6)
    responses = torch.tensor([
        [1, 1, 3, 4, 5, EOS],   # exactly sorted
        [1, 3, 1, 4, 5, EOS],   # permutation, 3 of 5 positions right
        [1, 1, 3, 4, 6, EOS],   # sorted but not a permutation (6 for 5)
        [1, 1, 3, 4, EOS, 5],   # too short
        [1, 1, 3, 4, 5, 5],     # no EOS: 6 tokens
        [0, 0, 0, 0, 0, EOS],   # sorted, not a permutation
    ])
    g = gold_scores(task, prompts, responses)
    assert g["score"].tolist() == pytest.approx([1.0, 0.6, 0.0, 0.0, 0.0, 0.0])
    assert g["exact"].tolist() == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert g["perm"].tolist() == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    assert g["sorted"].tolist() == [1.0, 0.0, 1.0, 0.0, 0.0, 1.0]
    mask = response_mask(responses)
    assert last_index(mask).tolist() == [5, 5, 5, 4, 5, 5]


def test_teacher_is_right_about_half_the_time_and_always_a_permutation():
    task = SortTask(5)
    g = torch.Generator().manual_seed(0)
    prompts = task.sample_prompts(4000, g)
    answers = task.teacher_answers(prompts, g, 0.5)
    gold = gold_scores(task, prompts, answers)
    assert bool((gold["perm"] == 1).all())
    # right when asked to be, plus wrong-branch prompts whose digits are all equal
    assert 0.48 < float(gold["exact"].mean()) < 0.53


@torch.no_grad()
def test_model_positions_line_up_with_sampling():
    torch.manual_seed(0)
    task = SortTask(5)
    lm = TinyLM(ModelConfig(max_len=task.seq_len))
    g = torch.Generator().manual_seed(0)
    prompts = task.sample_prompts(8, g)
    responses = sample(lm, prompts, task.max_new, 1.0, g)
    logits = answer_logits(lm, prompts, responses)
    # answer token t's logits are the model's last-position logits on prompt + a_<t
    for t in range(task.max_new):
        prefix = torch.cat([prompts, responses[:, :t]], dim=1)
        torch.testing.assert_close(logits[:, t], lm(prefix)[:, -1], atol=1e-5, rtol=1e-5)
    logp, ent = token_logprobs(logits, responses)
    assert logp.shape == ent.shape == (8, task.max_new) and bool((logp <= 0).all())
    critic = lm.with_head(1)
    v = answer_values(critic, prompts, responses)
    torch.testing.assert_close(v[:, 2], critic(torch.cat([prompts, responses[:, :2]], 1))[:, -1, 0])
    last = last_index(response_mask(responses))
    s = sequence_scores(critic, prompts, responses, last)
    for i in range(8):
        full = critic(torch.cat([prompts[i:i + 1], responses[i:i + 1, :int(last[i]) + 1]], 1))
        assert float(s[i]) == pytest.approx(float(full[0, -1, 0]), abs=1e-5)


def test_model_size_is_in_the_issue_range():
    n = sum(p.numel() for p in TinyLM(ModelConfig()).parameters())
    assert 100_000 <= n <= 1_000_000


# (the bandit fixed points of every KL option are in tests/test_rlhf_kl.py)


# --- bad input at the CLI ---------------------------------------------------------------------
@pytest.mark.parametrize("argv,message", [
    (["ppo", "--sft", "x", "--reward-model", "y", "--beta", "-1"], "beta must be"),
    (["ppo", "--sft", "x", "--reward-model", "y", "--kl-estimator", "k9"],
     "unknown KL estimator"),
    (["grpo", "--sft", "x", "--group-size", "1"], "group_size must be at least 2"),
    (["grpo", "--sft", "x", "--loss-type", "sum"], "unknown loss_type"),
    (["ppo", "--sft", "x", "--reward-model", "y", "--set", "nope=1"], "unknown key 'nope'"),
    (["sft", "--set", "lr=abc"], "--set lr=abc: expected float"),
    (["grpo", "--sft", "/nonexistent"], "no model file"),
])
def test_cli_bad_input_is_one_line_exit_2(argv, message, capsys, tmp_path):
    assert main(["rlhf", *argv, "--runs-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("trustrl: error: ")
    assert err.strip().count("\n") == 0
    assert not list(tmp_path.iterdir())  # no run folder was created


def test_rlhf_cli_module_imports_only_the_standard_library_at_top_level():
    """The parser is built on every `trustrl` call: torch etc. load inside the handlers."""
    import ast
    import inspect

    import trustrl.rlhf.cli as mod

    top = [n for n in ast.parse(inspect.getsource(mod)).body
           if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = {a.name for n in top if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in top if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= {"__future__", "argparse", "dataclasses", "math", "typing",
                     "trustrl.util.errors"}, names


def test_reward_model_with_no_usable_pairs_is_one_line_exit_2(capsys, tmp_path):
    """An SFT model that always answers with the end token at once: every answer has gold score
    0, every pair is a tie and is dropped, so no pair is left to train on."""
    from trustrl.rlhf.model import save_model

    torch.manual_seed(0)
    lm = TinyLM(ModelConfig(max_len=SortTask(5).seq_len))
    with torch.no_grad():
        lm.head.bias[EOS] = 50.0
    sft = tmp_path / "sft"
    sft.mkdir()
    save_model(lm, str(sft / "model.pt"), {"task_n": 5})
    runs = tmp_path / "runs"
    assert main(["rlhf", "reward-model", "--sft", str(sft), "--pairs", "50",
                 "--runs-dir", str(runs), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trustrl: error: no usable training preference pairs")
    assert err.strip().count("\n") == 0
    assert not runs.exists() or not list(runs.iterdir())


def test_an_rlhf_run_that_fails_is_one_line_and_marked_failed(tmp_path, monkeypatch, capsys):
    """An error inside an RLHF run: one line naming the folder (no traceback), status.json
    "failed" with the error's first line."""
    import json

    from trustrl.rlhf import sft

    def broken(*args, **kwargs):
        raise RuntimeError("the evaluation broke\nsecond line")

    monkeypatch.setattr(sft, "evaluate_gold", broken)
    code = main(["rlhf", "sft", "--steps", "2", "--set", "eval_every=1", "--quiet",
                 "--runs-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    (run,) = tmp_path.iterdir()
    assert code == 2 and len(err) == 1, err
    assert "the evaluation broke" in err[0] and f"{run} is kept with status 'failed'" in err[0]
    st = json.loads((run / "status.json").read_text())
    assert st["status"] == "failed" and st["message"] == "the evaluation broke", st


# --- the trainers' optimiser ---------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_trainer_adam_is_fused_on_cpu_and_steps_as_torch_adam(seed):
    """trustrl.rlhf.steps.adam: torch's fused kernel on CPU, the default Adam's steps."""
    from trustrl.rlhf.steps import adam

    torch.manual_seed(seed)
    shapes = [(13, 8), (8,), (8, 24)]
    start = [torch.randn(s) for s in shapes]
    grads = [[torch.randn(s) * 10.0 ** -k for s in shapes] for k in range(4)]
    finals = []
    for make in (lambda ps: adam(ps, 1e-2), lambda ps: torch.optim.Adam(ps, lr=1e-2)):
        params = [torch.nn.Parameter(x.clone()) for x in start]
        opt = make(params)
        for step in grads:
            for p, g in zip(params, step, strict=True):
                p.grad = g.clone()
            opt.step()
        finals.append(torch.cat([p.detach().flatten() for p in params]))
    assert adam([torch.nn.Parameter(torch.zeros(2))], 1e-2).defaults["fused"] is True
    assert torch.allclose(finals[0], finals[1], atol=1e-6)
    assert not torch.allclose(finals[0], torch.cat([x.flatten() for x in start]), atol=1e-3)
