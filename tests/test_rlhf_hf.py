"""GRPO, RLOO and PPO on a Hugging Face causal LM (`trustrl rlhf ... --model PATH`).

The model is a GPT-2-architecture transformer built from a config in the test set-up and saved
with save_pretrained (nothing from a hub): random for the mechanics, SFT'd on the sort task
(tests/hf_sort.py) for the learning tests, so these run the code path of a real checkpoint.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("peft")

import hf_sort  # noqa: E402

from trustrl.rlhf.grpo import GRPOConfig, group_advantages  # noqa: E402
from trustrl.rlhf.hf import (  # noqa: E402
    HFIO,
    HFConfig,
    PromptSource,
    TextReward,
    disable_dropout,
    load_rows,
)
from trustrl.rlhf.hf_run import algo_config, build, resolve_rewards, train_hf  # noqa: E402
from trustrl.rlhf.kl import exact_kl  # noqa: E402
from trustrl.rlhf.klcheck import _grad_of_option  # noqa: E402
from trustrl.rlhf.model import token_logprobs  # noqa: E402
from trustrl.util.errors import ConfigError, RunError  # noqa: E402

D = torch.float64


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    """A random (not trained) GPT-2 sort model folder, prompts and held-out prompts."""
    root = tmp_path_factory.mktemp("hf")
    model = hf_sort.make_model(0, n_embd=32)
    model.save_pretrained(root / "model")
    hf_sort.make_tokenizer().save_pretrained(root / "model")
    return {"model": root / "model", "data": hf_sort.write_prompts(root / "p.jsonl", 64, 1),
            "eval": hf_sort.write_prompts(root / "e.jsonl", 32, 2), "root": root}


def hf_cfg(tiny, **kw) -> HFConfig:
    kw.setdefault("reward", ["hf_sort:small_digits_reward"])
    return HFConfig(model=str(tiny["model"]), data=str(tiny["data"]), max_new_tokens=6, **kw)


def small(algo: str, runs_dir: Path, **kw):
    cfg = algo_config(algo)
    cfg.iterations, cfg.runs_dir = 2, str(runs_dir)
    if algo == "ppo":
        cfg.batch_size, cfg.minibatch_size, cfg.epochs = 8, 4, 2
    else:
        cfg.prompts_per_iter, cfg.group_size, cfg.minibatch_size = 2, 4, 4
    for k, v in kw.items():
        setattr(cfg, k, v)
    return cfg


def rows(run: Path) -> list[dict[str, str]]:
    with open(run / "metrics.csv") as f:
        return list(csv.DictReader(f))


# --- running the model ---------------------------------------------------------------------------
def _io_and_model(tiny):
    from transformers import AutoModelForCausalLM

    tok = hf_sort.make_tokenizer()
    model = AutoModelForCausalLM.from_pretrained(tiny["model"]).eval()
    io = HFIO([tok.eos_token_id], tok.pad_token_id, torch.device("cpu"))
    return tok, model, io


def test_left_padded_prompts_give_the_logits_of_the_unpadded_prompt(tiny):
    tok, model, io = _io_and_model(tiny)
    source = PromptSource([{"prompt": "3 1 >"}, {"prompt": "9 8 7 6 5 >"}], tok, "prompt", 64,
                          tok.pad_token_id, torch.device("cpu"))
    both = source.batch([0, 1])
    assert both.ids[0, 0] == tok.pad_token_id  # left-padded
    responses = torch.tensor([[1, 3, 11, 12], [5, 6, 7, 8]])
    with torch.no_grad():
        together = io.answer_logits(model, both, responses)
        for i in range(2):
            alone = io.answer_logits(model, source.batch([i]), responses[i:i + 1])
            assert torch.allclose(together[i], alone[0], atol=1e-5)


def test_generate_samples_the_distribution_the_loss_uses(tiny):
    """Pure temperature sampling, whatever the model's own generation defaults (top_k 2 set on
    purpose): first-token frequencies of 3000 draws match softmax(logits / T)."""
    tok, model, io = _io_and_model(tiny)
    model.generation_config.top_k = 2
    source = PromptSource([{"prompt": "3 1 4 1 5 >"}], tok, "prompt", 64, tok.pad_token_id,
                          torch.device("cpu"))
    prompts = source.batch([0] * 3000)
    gen = torch.Generator().manual_seed(0)
    responses = io.sample(model, prompts, 1, 0.7, gen)
    with torch.no_grad():
        p = torch.softmax(io.answer_logits(model, source.batch([0]), responses[:1], 0.7)[0, 0],
                          -1)
    freq = torch.bincount(responses[:, 0], minlength=p.numel()).double() / 3000
    se = (p.double() * (1 - p.double()) / 3000).sqrt()
    assert ((freq - p).abs() <= 5 * se + 1e-3).all(), (freq, p)
    assert (freq > 0).sum() > 2  # top_k 2 was not applied


def test_response_mask_ends_at_the_first_eos_and_answers_are_padded(tiny):
    _, model, io = _io_and_model(tiny)
    r = torch.tensor([[1, 11, 12, 12], [2, 3, 4, 5], [11, 3, 11, 2]])
    assert io.response_mask(r).tolist() == [[True, True, False, False], [True] * 4,
                                            [True, False, False, False]]


def test_prompts_from_jsonl_parquet_and_a_datasets_folder(tmp_path):
    data = [{"prompt": "1 2 >", "answer": "1 2"}, {"prompt": "3 >", "answer": "3"}]
    (tmp_path / "p.jsonl").write_text("\n".join(json.dumps(r) for r in data))
    assert load_rows(str(tmp_path / "p.jsonl")) == data
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(data), tmp_path / "p.parquet")
    assert load_rows(str(tmp_path / "p.parquet")) == data
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list(data).save_to_disk(str(tmp_path / "ds"))
    assert load_rows(str(tmp_path / "ds")) == data
    with pytest.raises(ConfigError, match="no 'question' column"):
        load_rows(str(tmp_path / "p.jsonl"), "question")


def test_chat_prompts_go_through_the_chat_template_and_completions_are_messages(tiny):
    tok = hf_sort.make_tokenizer()
    tok.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}>"
    seen = {}

    def reward(prompts, completions, completion_ids, **columns):
        seen.update(prompts=prompts, completions=completions, columns=columns)
        return [1.0] * len(completions)

    rows_ = [{"prompt": [{"role": "user", "content": "3 1"}], "level": 7}]
    source = PromptSource(rows_, tok, "prompt", 64, tok.pad_token_id, torch.device("cpu"))
    assert source.texts == ["3 1 >"]
    io = HFIO([tok.eos_token_id], tok.pad_token_id, torch.device("cpu"))
    out = TextReward(tok, io, [("m:reward", reward)])(source.batch([0]),
                                                      torch.tensor([[1, 3, 11, 12]]))
    assert out.tolist() == [1.0]
    assert seen["completions"] == [[{"role": "assistant", "content": "1 3"}]]
    assert seen["prompts"] == [rows_[0]["prompt"]] and seen["columns"] == {"level": [7]}


def test_reward_functions_are_weighted_and_summed_and_checked(tiny):
    tok = hf_sort.make_tokenizer()
    io = HFIO([tok.eos_token_id], tok.pad_token_id, torch.device("cpu"))
    source = PromptSource([{"prompt": "3 1 4 1 5 >"}], tok, "prompt", 64, tok.pad_token_id,
                          torch.device("cpu"))
    funcs = resolve_rewards(["hf_sort:gold_reward", "hf_sort:length_reward"])
    reward = TextReward(tok, io, funcs, weights=[2.0, 0.5])
    r = reward(source.batch([0, 0]), torch.tensor([[1, 1, 3, 4, 5, 11], [1, 10, 10, 11, 12, 12]]))
    assert r.tolist() == [2.0 * 1.0, 0.5 * -2.0]
    assert reward.last_stats["rewards/gold_reward/mean"] == 0.5
    bad = TextReward(tok, io, [("m:f", lambda **k: [1.0])])
    with pytest.raises(RunError, match="returned 1 rewards for 2"):
        bad(source.batch([0, 0]), torch.tensor([[1, 11], [1, 11]]))


def test_a_sequence_classification_reward_model_scores_prompt_and_completion(tiny, tmp_path):
    from transformers import GPT2Config, GPT2ForSequenceClassification

    torch.manual_seed(0)
    rm = GPT2ForSequenceClassification(GPT2Config(vocab_size=13, n_positions=16, n_embd=16,
                                                  n_layer=1, n_head=2, num_labels=1,
                                                  pad_token_id=12)).eval()
    rm.save_pretrained(tmp_path / "rm")
    hf_sort.make_tokenizer().save_pretrained(tmp_path / "rm")
    tok = hf_sort.make_tokenizer()
    io = HFIO([tok.eos_token_id], tok.pad_token_id, torch.device("cpu"))
    source = PromptSource([{"prompt": "3 1 > "}, {"prompt": "2 > "}], tok, "prompt", 64,
                          tok.pad_token_id, torch.device("cpu"))
    reward = TextReward(tok, io, [], reward_model=str(tmp_path / "rm"))
    r = reward(source.batch([0, 1]), torch.tensor([[1, 3, 11], [2, 11, 12]]))
    with torch.no_grad():
        direct = [float(rm(input_ids=torch.tensor([ids])).logits[0, 0])
                  for ids in ([3, 1, 10, 1, 3], [2, 10, 2])]
    assert r.tolist() == pytest.approx(direct, abs=1e-5)


# --- the KL options through the Hugging Face path ------------------------------------------------
def test_each_offered_kl_option_has_the_gradient_of_its_kl_through_a_gpt2(tmp_path):
    """Exact expectation over every 2-token answer (vocabulary 3) of the gradient each offered
    option's loss produces on a GPT-2 (float64), run by HFIO: k1 in the reward = the full
    gradient of the sequence KL(pi || pi_ref); k2 in the loss = the per-token (partial) gradient
    of KL(pi || pi_ref); k3 in the loss = that of KL(pi_ref || pi). The refused ones refuse."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=3, n_positions=8, n_embd=8, n_layer=1, n_head=2,
                        pad_token_id=2, eos_token_id=2, initializer_range=0.5)
    policy, ref = GPT2LMHeadModel(config).double(), GPT2LMHeadModel(config).double()
    disable_dropout(policy)
    disable_dropout(ref)
    io = HFIO([99], 2, torch.device("cpu"))  # no EOS in this vocabulary: answers are 2 tokens
    from trustrl.rlhf.hf import PromptBatch

    seqs = torch.tensor(list(itertools.product(range(3), repeat=2)))
    n = len(seqs)
    prompts = PromptBatch(torch.zeros(n, 1, dtype=torch.long), torch.ones(n, 1,
                                                                          dtype=torch.long),
                          [{}] * n, [""] * n)
    theta = policy.transformer.wte.weight
    logits = io.answer_logits(policy, prompts, seqs)
    with torch.no_grad():
        ref_logits = io.answer_logits(ref, prompts, seqs)
    lp, _ = token_logprobs(logits, seqs)
    lr, _ = token_logprobs(ref_logits, seqs)
    w = lp.sum(1).exp().detach()
    full = torch.autograd.grad((lp.sum(1).exp() * (lp - lr).sum(1)).sum(), theta,
                               retain_graph=True)[0]
    fwd = torch.autograd.grad((w[:, None] * exact_kl(logits, ref_logits)).sum(), theta,
                              retain_graph=True)[0]
    rev = torch.autograd.grad((w[:, None] * exact_kl(ref_logits, logits)).sum(), theta,
                              retain_graph=True)[0]
    targets = {("reward", "k1"): full, ("loss", "k2"): fwd, ("loss", "k3"): rev}
    for (placement, est), target in targets.items():
        GRPOConfig(beta=0.1, kl_placement=placement, kl_estimator=est).validate()
        e = sum(w[i] * _grad_of_option(placement, est, lp[i:i + 1], lr[i:i + 1], theta)
                for i in range(n))
        assert float((e - target).norm() / target.norm()) < 1e-8, (placement, est)
        others = [t for k, t in targets.items() if k != (placement, est)]
        assert all(float((e - t).norm() / t.norm()) > 0.05 for t in others)
    for placement, est in (("loss", "k1"), ("reward", "k2"), ("reward", "k3")):
        with pytest.raises(ConfigError):
            GRPOConfig(beta=0.1, kl_placement=placement, kl_estimator=est).validate()


# --- the trainers on a Hugging Face model --------------------------------------------------------
def test_rloo_advantage_is_the_leave_one_out_baseline():
    r = torch.tensor([[1.0, 0.0, 0.5, 2.0]])
    loo = torch.stack([r[0, i] - torch.cat([r[0, :i], r[0, i + 1:]]).mean() for i in range(4)])
    assert torch.allclose(group_advantages(r, scale=False, leave_one_out=True)[0], loo)


@pytest.mark.parametrize("algo,loss_type", [("grpo", "token-mean"), ("grpo", "seq-mean"),
                                            ("grpo", "dr-grpo"), ("ppo", None)])
def test_gradient_accumulation_gives_the_minibatch_step(tiny, tmp_path, algo, loss_type):
    """One iteration with 3 micro-batches per minibatch moves the weights as 1 does (answers
    of several lengths: a random model; so the per-token weights matter)."""
    finals = []
    for accum in (1, 3):
        kw = {"grad_accum": accum, "epochs": 1, "iterations": 1}
        if algo == "ppo":
            kw.update(batch_size=12, minibatch_size=12)
        else:
            kw.update(loss_type=loss_type, prompts_per_iter=3, minibatch_size=12)
        cfg = small(algo, tmp_path, **kw)
        parts = build(algo, cfg, hf_cfg(tiny),
                      resolve_rewards(["hf_sort:small_digits_reward"]))
        batch, _ = parts.trainer.collect()
        assert len(set(batch.mask.sum(1).tolist())) > 1
        parts.trainer.update(batch)
        finals.append(torch.cat([p.detach().flatten() for p in parts.trainer.params]))
    assert torch.allclose(finals[0], finals[1], atol=1e-6, rtol=1e-4)
    init = build(algo, small(algo, tmp_path), hf_cfg(tiny), [])
    before = torch.cat([p.detach().flatten() for p in init.trainer.params])
    assert not torch.allclose(before, finals[0][: before.numel()])


@pytest.mark.parametrize("algo,kw", [
    ("grpo", {"beta": 0.1, "kl_estimator": "k3", "loss_type": "seq-mean"}),
    ("grpo", {"beta": 0.1, "kl_estimator": "k2", "loss_type": "token-mean"}),
    ("rloo", {"loss_type": "dr-grpo"}),  # k1 in the reward: advantages need pi_old's log-probs
])
def test_one_pass_step_equals_collect_then_update(tiny, tmp_path, algo, kw):
    """One optimiser step per batch: the policy runs once (its logits score the answers as
    pi_old and give the loss), with the metrics and the gradient of scoring and updating apart
    (several seeds; answers of several lengths: a random model)."""
    for seed in (1, 2, 3):
        outs = []
        for one_pass in (True, False):
            cfg = small(algo, tmp_path, seed=seed, epochs=1, minibatch_size=8, lr=1e-2, **kw)
            parts = build(algo, cfg, hf_cfg(tiny),
                          resolve_rewards(["hf_sort:small_digits_reward"]))
            trainer = parts.trainer
            assert trainer.one_pass()
            if not one_pass:
                trainer.one_pass = lambda: False
            calls = []
            forward = parts.io.answer_logits

            def counted(model, *args, _forward=forward, _calls=calls, _policy=parts.policy,
                        **kwargs):
                _calls.append(model is _policy)
                return _forward(model, *args, **kwargs)

            parts.io.answer_logits = counted
            row = trainer.step()
            assert sum(calls) == (1 if one_pass else 2)
            outs.append((row, torch.cat([p.grad.flatten() for p in trainer.params])))
        (row1, g1), (row2, g2) = outs  # the gradient of the step (Adam's first step is a sign)
        assert row1["completions/min_length"] < row1["completions/max_length"]
        assert (g1 - g2).norm() < 1e-4 * g2.norm()
        for key, value in row2.items():
            assert math.isclose(row1[key], value, rel_tol=1e-4, abs_tol=1e-6) or (
                math.isnan(value) and math.isnan(row1[key])), key
    assert row1["ratio_min"] == row1["ratio_max"] == 1.0  # logp_old is logp, detached


def test_dropout_keeps_the_scoring_pass(tiny, tmp_path):
    """With dropout on (LoRA's), pi_old is scored without it in a pass of its own."""
    cfg = small("grpo", tmp_path, epochs=1, minibatch_size=8)
    parts = build("grpo", cfg, hf_cfg(tiny, lora_r=4, lora_dropout=0.1),
                  resolve_rewards(["hf_sort:small_digits_reward"]))
    assert not parts.trainer.one_pass()
    cfg = small("grpo", tmp_path, epochs=1, minibatch_size=8)
    parts = build("grpo", cfg, hf_cfg(tiny, lora_r=4),
                  resolve_rewards(["hf_sort:small_digits_reward"]))
    assert parts.trainer.one_pass()
    for change in ({"epochs": 2}, {"minibatch_size": 4}, {"grad_accum": 2}):
        parts.trainer.cfg = small("grpo", tmp_path, **{"epochs": 1, "minibatch_size": 8,
                                                       **change})
        assert not parts.trainer.one_pass(), change


def test_lora_reference_is_the_base_model_with_adapters_off(tiny, tmp_path):
    cfg = small("grpo", tmp_path, lr=3e-2)
    parts = build("grpo", cfg, hf_cfg(tiny, lora_r=4, lora_target="c_attn"),
                  resolve_rewards(["hf_sort:small_digits_reward"]))
    base = {n: p.detach().clone() for n, p in parts.policy.named_parameters()
            if not p.requires_grad}
    lora = {n: p.detach().clone() for n, p in parts.policy.named_parameters() if p.requires_grad}
    assert lora and all("lora" in n for n in lora)
    assert list(parts.ref.parameters()) == []  # no second copy
    batch, _ = parts.trainer.collect()
    for _ in range(3):
        parts.trainer.update(batch)
    now = dict(parts.policy.named_parameters())
    assert all(torch.equal(now[n], v) for n, v in base.items())
    assert any(not torch.equal(now[n], v) for n, v in lora.items())
    from transformers import AutoModelForCausalLM

    original = AutoModelForCausalLM.from_pretrained(tiny["model"]).eval()
    with torch.no_grad():
        ref = parts.io.answer_logits(parts.ref, batch.prompts, batch.responses)
        pol = parts.io.answer_logits(parts.policy, batch.prompts, batch.responses)
        orig = parts.io.answer_logits(original, batch.prompts, batch.responses)
    assert torch.allclose(ref, orig, atol=1e-5)
    assert not torch.allclose(pol, orig, atol=1e-3)


def test_scoring_in_chunks_equals_scoring_the_whole_batch(tiny, tmp_path):
    """score_chunk bounds the logits held at once; every quantity is that of one pass."""
    from trustrl.rlhf.steps import score_answers

    parts = build("grpo", small("grpo", tmp_path, prompts_per_iter=3),
                  hf_cfg(tiny, score_chunk=5), resolve_rewards(["hf_sort:small_digits_reward"]))
    batch, _ = parts.trainer.collect()
    args = (parts.io, parts.policy, parts.ref, batch.prompts, batch.responses, 1.0)
    whole, chunked = score_answers(*args, None), score_answers(*args, 5)
    for name in ("logp", "entropy", "logp_ref", "kl_exact", "old_all"):
        assert torch.allclose(getattr(whole, name), getattr(chunked, name), atol=1e-5), name
    assert torch.allclose(batch.logp_old, whole.logp, atol=1e-5)


def test_bf16_autocast_trains_with_float32_logprobs(tiny, tmp_path):
    parts = build("grpo", small("grpo", tmp_path), hf_cfg(tiny, bf16=True),
                  resolve_rewards(["hf_sort:small_digits_reward"]))
    batch, _ = parts.trainer.collect()
    with torch.no_grad():
        logits = parts.io.answer_logits(parts.policy, batch.prompts, batch.responses)
        with parts.io.autocast():
            raw = parts.policy(input_ids=batch.prompts.ids).logits
    assert raw.dtype == torch.bfloat16 and logits.dtype == torch.float32
    assert batch.logp_old.dtype == torch.float32
    row = parts.trainer.update(batch)
    assert math.isfinite(row["loss"]) and math.isfinite(row["kl_old/k3"])


@pytest.mark.parametrize("algo,extra", [
    ("grpo", {}), ("rloo", {"lora_r": 4}), ("ppo", {}), ("ppo", {"value_model": "SELF"})])
def test_each_algorithm_logs_the_trust_region_every_step(tiny, tmp_path, algo, extra):
    if extra.get("value_model") == "SELF":
        extra = {"value_model": str(tiny["model"])}
    run = train_hf(algo, small(algo, tmp_path), hf_cfg(tiny, eval_prompts=8,
                                                       eval_data=str(tiny["eval"]), **extra),
                   echo=lambda s: None)
    got = rows(run)
    assert [r["iteration"] for r in got] == ["1", "2"]
    for key in ("kl_ref/k1", "kl_ref/k3", "kl_ref/exact", "kl_old/k1", "kl_old/k3",
                "kl_old/exact", "ratio_q05", "ratio_q95", "completions/mean_length",
                "rewards/small_digits_reward/mean",
                "entropy" if algo != "ppo" else "objective/entropy",
                "clip_ratio/region_mean" if algo != "ppo" else "policy/clipfrac_avg"):
        assert all(math.isfinite(float(r[key])) for r in got), key
    assert float(got[0]["kl_ref/exact"]) == pytest.approx(0.0, abs=1e-6)  # pi = pi_ref at first
    ev = json.loads((run / "eval.json").read_text())
    assert set(ev) == {"start", "final"} and ev["start"]["kl_ref_seq_exact"] < 1e-6
    assert (run / "model" / "config.json").is_file() or (run / "model" /
                                                          "adapter_config.json").is_file()
    assert json.loads((run / "status.json").read_text())["status"] == "finished"


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_resume_equals_never_stopped(tiny, tmp_path, algo, capsys):
    from trustrl.cli import main

    def cli(*extra):
        base = ["rlhf", algo, "--quiet", "--runs-dir", str(tmp_path / "runs")]
        return main(base + list(extra))

    common = ["--model", str(tiny["model"]), "--data", str(tiny["data"]), "--reward",
              "hf_sort:gold_reward", "--max-new-tokens", "6", "--set", "save_every=2"]
    sizes = (["--set", "batch_size=8", "--set", "minibatch_size=4"] if algo == "ppo" else
             ["--set", "prompts_per_iter=2", "--set", "group_size=4", "--set",
              "minibatch_size=4"])
    assert cli(*common, *sizes, "--iterations", "4", "--seed", "3") == 0
    whole = capsys.readouterr().out.split("run: ")[-1].strip()
    assert cli(*common, *sizes, "--iterations", "2", "--seed", "3") == 0
    half = capsys.readouterr().out.split("run: ")[-1].strip()
    assert cli("--resume", half, "--iterations", "4") == 2  # without its reward: refused
    assert "--reward hf_sort:gold_reward" in capsys.readouterr().err
    assert cli("--resume", half, "--iterations", "4", "--reward", "hf_sort:gold_reward") == 0
    a, b = rows(Path(whole)), rows(Path(half))
    assert len(a) == len(b) == 4
    for ra, rb in zip(a, b, strict=True):
        assert {k: v for k, v in ra.items() if k != "wall_time"} == \
            {k: v for k, v in rb.items() if k != "wall_time"}
    # as the core's: config.json has the new total, the clock goes on, fewer is refused
    assert json.loads((Path(half) / "config.json").read_text())["config"]["iterations"] == 4
    times = [float(r["wall_time"]) for r in b]
    assert times == sorted(times) and times[2] > times[1], times
    capsys.readouterr()
    assert cli("--resume", half, "--iterations", "3", "--reward", "hf_sort:gold_reward") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "already trained 4 iterations" in err, err
    assert len(rows(Path(half))) == 4
    assert json.loads((Path(half) / "status.json").read_text())["status"] == "finished"
    try:  # TensorBoard events of every row, once each, across the two processes
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        pass
    else:
        ea = EventAccumulator(str(Path(half) / "tb"))
        ea.Reload()
        assert [e.step for e in ea.Scalars("diagnostics/kl_ref/exact")] == \
            [int(r["global_step"]) for r in b]
        assert [e.value for e in ea.Scalars("diagnostics/kl_ref/exact")] == \
            pytest.approx([float(r["kl_ref/exact"]) for r in b], rel=1e-6)
    # the live dashboard's run list (the core's code) reads the run's seed, plan and model
    from trustrl.demo.runfiles import list_runs

    listed = {r["name"]: r for r in list_runs(tmp_path / "runs")}[Path(half).name]
    assert (listed["algo"], listed["seed"], listed["iteration"], listed["iterations"],
            listed["model"], listed["status"]) == (algo, 3, 4, 4, "model", "finished")


def test_status_json_follows_the_checkpoints_while_a_run_trains(tiny, tmp_path):
    """As the core's: status.json says "running" with the iteration of the last checkpoint (what
    the dashboard's run list shows), read here at each iteration's progress line."""
    seen = []

    def echo(line: str) -> None:
        if line.startswith("grpo ") and line[5].isdigit():
            run = next((tmp_path / "runs").iterdir())
            status = json.loads((run / "status.json").read_text())
            seen.append((status["status"], status["iteration"]))

    cfg = small("grpo", tmp_path / "runs", iterations=5)
    run = train_hf("grpo", cfg, hf_cfg(tiny, save_every=2), echo=echo, log_every=1)
    assert seen == [("running", 0), ("running", 0), ("running", 2), ("running", 2),
                    ("running", 4)]
    assert json.loads((run / "status.json").read_text())["iteration"] == 5


def test_bad_input_is_one_line_and_makes_no_run_folder(tiny, tmp_path, capsys):
    from trustrl.cli import main

    runs = tmp_path / "runs"
    base = ["rlhf", "grpo", "--runs-dir", str(runs), "--data", str(tiny["data"])]
    cases = [
        (["--model", str(tmp_path / "nope"), "--reward", "hf_sort:gold_reward"],
         "cannot load"),
        (["--model", str(tiny["model"])], "give a reward"),
        (["--model", str(tiny["model"]), "--reward", "hf_sort:nothing"], "no attribute"),
        (["--model", str(tiny["model"]), "--reward", "os:system"], "standard library"),
        (["--model", str(tiny["model"]), "--reward", "hf_sort:gold_reward", "--set",
          "bogus=1"], "unknown key"),
        (["--model", str(tiny["model"]), "--reward", "hf_sort:gold_reward", "--beta", "0.1",
          "--kl-placement", "reward", "--kl-estimator", "k3"], "optimises no KL"),
        (["--model", str(tiny["model"]), "--reward", "hf_sort:gold_reward", "--sft", "x"],
         "not both"),
    ]
    for extra, msg in cases:
        assert main(base + extra) == 2, extra
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and msg in err, (extra, err)
    assert not runs.exists() or not any(runs.iterdir())
    assert main(["rlhf", "grpo", "--data", "x.jsonl", "--reward", "gold"]) == 2
    assert "--sft" in capsys.readouterr().err


# --- learning, on the SFT'd sort model (slow) ----------------------------------------------------
@pytest.fixture(scope="module")
def sorter(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sorter")
    torch.set_num_threads(1)
    hf_sort.sft_sort_model(root / "model", seed=0, steps=300, batch=64)
    return {"model": root / "model", "data": hf_sort.write_prompts(root / "p.jsonl", 512, 1),
            "eval": hf_sort.write_prompts(root / "e.jsonl", 256, 2), "root": root}


@pytest.mark.slow
@pytest.mark.parametrize("algo,extra,min_gain", [
    ("grpo", {}, 0.1), ("grpo", {"lora_r": 8}, 0.1), ("ppo", {}, 0.1)])
def test_rl_lifts_the_gold_score_of_the_sft_model(sorter, tmp_path, algo, extra, min_gain):
    gains = []
    for seed in (1, 2, 3):
        cfg = algo_config(algo)
        cfg.seed, cfg.runs_dir, cfg.iterations = seed, str(tmp_path), 15
        if algo == "ppo":
            cfg.batch_size, cfg.minibatch_size, cfg.lr, cfg.beta = 64, 16, 1e-3, 0.05
        else:
            cfg.prompts_per_iter, cfg.minibatch_size, cfg.lr = 8, 32, 1e-3
        if extra.get("lora_r"):
            cfg.lr = 3e-3
        h = HFConfig(model=str(sorter["model"]), data=str(sorter["data"]),
                     reward=["hf_sort:gold_reward"], max_new_tokens=6, eval_prompts=256,
                     eval_data=str(sorter["eval"]), **extra)
        run = train_hf(algo, cfg, h, echo=lambda s: None)
        ev = json.loads((run / "eval.json").read_text())
        gains.append(ev["final"]["reward"] - ev["start"]["reward"])
    assert min(gains) >= min_gain, gains


# --- the sampler correction (a sampler mu that is not pi_old's exact forward) --------------------
def _tis(tiny, tmp_path, cap: float = 3.0, dtype: str = "bf16", seed: int = 1):
    cfg = small("grpo", tmp_path, sampler_correction="tis", sampler_cap=cap, seed=seed)
    return build("grpo", cfg, hf_cfg(tiny, generate_dtype=dtype),
                 resolve_rewards(["hf_sort:small_digits_reward"]))


def test_sampler_weight_is_the_truncated_ratio_of_each_token(tiny, tmp_path):
    """Brute force, token by token: pi_old(t) from a float32 forward of the unpadded prompt and
    the answer's prefix, mu(t) as the bf16 sampler recorded it; the weight is
    min(pi_old(t) / mu(t), C) and the recorded mu is the bf16 model's."""
    cap = 1.01
    parts = _tis(tiny, tmp_path, cap=cap)
    batch, _ = parts.trainer.collect()
    assert batch.weight is not None and batch.logp_mu is not None
    checked = 0
    with torch.no_grad():
        for i in range(len(batch.prompts)):
            prompt = batch.prompts.ids[i][batch.prompts.attention[i].bool()]
            answer = batch.responses[i][batch.mask[i].bool()]
            seq = torch.cat([prompt, answer])[None]
            lp32 = torch.log_softmax(parts.policy(input_ids=seq).logits[0].float(), -1)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                lp16 = torch.log_softmax(parts.policy(input_ids=seq).logits[0].float(), -1)
            for t, tok in enumerate(answer.tolist()):
                pos = len(prompt) + t - 1
                old, mu = float(lp32[pos, tok]), float(batch.logp_mu[i, t])
                assert abs(mu - float(lp16[pos, tok])) < 0.05
                want = min(math.exp(old - mu), cap)
                assert abs(float(batch.weight[i, t]) - want) < 1e-4 * want
                checked += 1
    assert checked > 0


def test_with_mu_equal_to_pi_old_the_correction_changes_nothing(tiny, tmp_path):
    """Weights from mu = pi_old are exactly 1: the corrected loss and gradient are the
    uncorrected ones, bit for bit; and a float32 sampler records pi_old's log-probs (to float
    rounding of the cached generation), so its weights are 1 to 1e-4."""
    from trustrl.rlhf.grpo import grpo_loss
    from trustrl.rlhf.steps import sampler_weights

    parts = build("grpo", small("grpo", tmp_path, epochs=2), hf_cfg(tiny),
                  resolve_rewards(["hf_sort:small_digits_reward"]))
    t = parts.trainer
    batch, _ = t.collect()
    with torch.no_grad():  # move pi away from pi_old so that the ratio and the clip act
        for p in parts.policy.parameters():
            p.add_(0.05 * torch.randn_like(p))
    grads = []
    for weight in (None, sampler_weights(batch.logp_old, batch.logp_old, t.cfg.sampler_cap)):
        t.opt.zero_grad(set_to_none=True)
        lp, _ = token_logprobs(parts.io.answer_logits(parts.policy, batch.prompts,
                                                      batch.responses), batch.responses)
        loss, _ = grpo_loss(lp, batch.logp_old, batch.logp_ref, batch.advantages, batch.mask,
                            t.cfg, t.max_new, weight)
        loss.backward()
        grads.append((float(loss.detach()), [p.grad.clone() for p in t.params]))
    assert grads[0][0] == grads[1][0] and grads[0][0] != 0
    assert all(torch.equal(a, b) for a, b in zip(grads[0][1], grads[1][1], strict=True))
    parts = _tis(tiny, tmp_path, dtype="float32")
    batch, row = parts.trainer.collect()
    assert row["sampling/sampling_logp_difference/max"] < 1e-4
    assert float((batch.weight - 1).abs().max()) < 1e-4


@pytest.mark.parametrize("seed,one_pass", [(1, False), (2, False), (3, True)])
def test_a_bf16_sampler_shows_the_mismatch_and_weights_the_tokens(tiny, tmp_path, seed,
                                                                   one_pass):
    parts = _tis(tiny, tmp_path, seed=seed)
    if one_pass:  # collection and update in one pass of the policy
        parts.trainer.cfg.epochs, parts.trainer.cfg.minibatch_size = 1, 8
    assert parts.trainer.one_pass() == one_pass
    row = parts.trainer.step()
    assert row["sampling/kl_mu_old/k3"] > 0
    assert row["sampling/sampling_logp_difference/mean"] > 1e-4
    assert row["sampling/importance_sampling_ratio/min"] < 1 - 1e-4
    assert row["sampling/importance_sampling_ratio/max"] > 1 + 1e-4
    assert math.isfinite(row["loss"])


def test_the_cap_clips_the_weights(tiny, tmp_path):
    from trustrl.rlhf.steps import sampler_stats, sampler_weights

    old = torch.log(torch.tensor([[5.0, 0.5, 1.0, 7.0]]))
    mu = torch.zeros(1, 4)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    assert torch.allclose(sampler_weights(old, mu, 2.0), torch.tensor([[2.0, 0.5, 1.0, 2.0]]))
    stats = sampler_stats(old, mu, mask, 2.0)
    assert stats["sampling/importance_sampling_ratio/max"] == pytest.approx(2.0)
    assert stats["sampling/importance_sampling_ratio/clipped_frac"] == pytest.approx(1 / 3)
    assert stats["sampling/sampling_logp_difference/max"] == pytest.approx(math.log(5))
    for seed in (1, 2):
        batch, row = _tis(tiny, tmp_path, cap=1.0, seed=seed).trainer.collect()
        assert float(batch.weight.max()) <= 1.0
        assert row["sampling/importance_sampling_ratio/max"] <= 1.0
        assert row["sampling/importance_sampling_ratio/clipped_frac"] > 0


def test_the_sampler_options_are_checked_and_logged(tiny, tmp_path, capsys):
    from trustrl.rlhf.steps import SAMPLER_COLUMNS

    with pytest.raises(ConfigError, match="records its log-probs"):
        build("grpo", small("grpo", tmp_path, sampler_correction="tis"), hf_cfg(tiny),
              resolve_rewards(["hf_sort:small_digits_reward"]))
    with pytest.raises(ConfigError, match="generate_dtype"):
        hf_cfg(tiny, generate_dtype="fp8").validate("grpo")
    with pytest.raises(ConfigError, match="sampler_correction"):
        GRPOConfig(sampler_correction="is").validate()
    with pytest.raises(ConfigError, match="sampler_cap"):
        algo_config("ppo").__class__(sampler_cap=0.0).validate()
    from trustrl.cli import main

    capsys.readouterr()
    assert main(["rlhf", "grpo", "--sft", str(tmp_path), "--runs-dir", str(tmp_path / "r"),
                 "--sampler-correction", "tis"]) != 0
    assert not (tmp_path / "r").exists()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "are for --model runs" in err, err
    run = train_hf("rloo", small("rloo", tmp_path, sampler_correction="tis"),
                   hf_cfg(tiny, generate_dtype="bf16"), echo=lambda s: None)
    logged = rows(run)
    assert len(logged) == 2
    assert all(float(r[c]) == float(r[c]) for r in logged for c in SAMPLER_COLUMNS)


def test_the_update_applies_the_weights(tiny, tmp_path):
    """The same batch, starting point and minibatch order, with and without the weights (cap 1:
    every weight <= 1, some < 1): the update's loss differs."""
    parts = _tis(tiny, tmp_path, cap=1.0)
    batch, _ = parts.trainer.collect()
    losses = _update_with_and_without_weights(parts, batch, "loss")
    assert abs(losses[0] - losses[1]) > 1e-6


def _update_with_and_without_weights(parts, batch, key: str) -> list[float]:
    """The update's `key` from the same start (weights, Adam, minibatch order), with the
    batch's correction weights and without them."""
    from trustrl.rlhf.steps import adam

    t = parts.trainer
    modules = [parts.policy] + ([parts.critic] if parts.critic is not None else [])
    start = [{k: v.clone() for k, v in m.state_dict().items()} for m in modules]
    gen = t.gen.get_state()
    out = []
    for weight in (batch.weight, None):
        for m, state in zip(modules, start, strict=True):
            m.load_state_dict(state)
        t.gen.set_state(gen)
        t.opt = adam(t.params, t.cfg.lr)
        batch.weight = weight
        out.append(t.update(batch)[key])
    return out


def test_ppo_takes_the_sampler_correction(tiny, tmp_path):
    """PPO: the bf16 sampler's mismatch logged, the weights min(pi_old / mu, C) on the valid
    tokens, and the update's policy loss changed by them (same batch, start and order)."""
    cfg = small("ppo", tmp_path, sampler_correction="tis", sampler_cap=1.0)
    parts = build("ppo", cfg, hf_cfg(tiny, generate_dtype="bf16"),
                  resolve_rewards(["hf_sort:small_digits_reward"]))
    batch, row = parts.trainer.collect()
    assert row["sampling/kl_mu_old/k3"] > 0
    assert row["sampling/importance_sampling_ratio/clipped_frac"] > 0
    assert float(batch.weight.max()) <= 1.0 and float(batch.weight.min()) < 1.0
    losses = _update_with_and_without_weights(parts, batch, "loss/policy_avg")
    assert abs(losses[0] - losses[1]) > 1e-6


# --- TRL's four modes of the correction, by brute force on small tensors -------------------------
MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


def _by_definition(old, mu, mask, mode: str, cap: float, cap_min: float):
    """Each answer's list of (raw ratio, weight) per valid token, by TRL's definitions, one
    number at a time: the ratio pi_old / mu of a token (NaN mu: 1), or of the answer (the
    product over its valid tokens, given to each of them); truncate clamps it to [C_min, C_max],
    mask keeps it inside and gives 0 outside."""
    out = []
    for i in range(old.shape[0]):
        valid = [t for t in range(old.shape[1]) if mask[i, t] > 0]
        token = [1.0 if math.isnan(float(mu[i, t])) else math.exp(float(old[i, t] - mu[i, t]))
                 for t in valid]
        raws = token if mode.startswith("token") else [math.prod(token)] * len(valid)
        if mode.endswith("truncate"):
            out.append([(r, min(max(r, cap_min), cap)) for r in raws])
        else:
            out.append([(r, r if cap_min <= r <= cap else 0.0) for r in raws])
    return out


def _random_case(seed: int):
    g = torch.Generator().manual_seed(seed)
    b, t = 6, 5
    old = torch.log(torch.rand(b, t, generator=g) * 0.9 + 0.05)
    mu = old + 0.6 * torch.randn(b, t, generator=g)  # ratios from about 0.2 to 5
    mu[0, 1] = float("nan")  # a token the sampler could not score
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None] < lengths[:, None]).float()
    mask[1] = 1.0
    return old, mu, mask


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_each_mode_weight_is_its_definition(mode, seed):
    """sampler_correction's [B, T] weights and its logged ratios equal TRL's definitions, number
    by number (1 after an answer's end); the same for the correction named tis and
    token_truncate."""
    from trustrl.rlhf.steps import sampler_correction

    old, mu, mask = _random_case(seed)
    for cap, cap_min in ((3.0, 0.0), (1.5, 0.5), (1.1, 0.9)):
        weight, stats = sampler_correction(old, mu, mask, mode, cap, cap_min)
        want = _by_definition(old, mu, mask, mode, cap, cap_min)
        for i, pairs in enumerate(want):
            valid = mask[i].bool()
            got = weight[i][valid].tolist()
            assert got == pytest.approx([w for _, w in pairs], rel=1e-5, abs=1e-7), (i, cap)
            assert torch.equal(weight[i][~valid], torch.ones(int((~valid).sum())))
        per = ([p for pairs in want for p in pairs] if mode.startswith("token")
               else [pairs[0] for pairs in want])  # TRL: over tokens, or over answers
        ws = [w for _, w in per]
        assert stats["sampling/importance_sampling_ratio/min"] == pytest.approx(min(ws), 1e-5)
        assert stats["sampling/importance_sampling_ratio/max"] == pytest.approx(max(ws), 1e-5)
        assert stats["sampling/importance_sampling_ratio/mean"] == pytest.approx(
            sum(ws) / len(ws), 1e-5)
        outside = sum(not cap_min <= r <= cap for r, _ in per) / len(per)
        assert stats["sampling/importance_sampling_ratio/clipped_frac"] == pytest.approx(outside)
        if mode == "token_truncate":
            assert torch.equal(weight, sampler_correction(old, mu, mask, "tis", cap, cap_min)[0])


@pytest.mark.parametrize("mode", MODES)
def test_each_mode_is_the_identity_when_mu_is_pi_old(mode):
    from trustrl.rlhf.steps import sampler_correction

    for seed in (1, 2):
        old, _, mask = _random_case(seed)
        weight, stats = sampler_correction(old, old.clone(), mask, mode, 3.0, 0.5)
        assert torch.equal(weight, torch.ones_like(old))
        assert stats["sampling/importance_sampling_ratio/clipped_frac"] == 0
        assert stats["sampling/importance_sampling_ratio/min"] == 1.0
        assert stats["sampling/importance_sampling_ratio/max"] == 1.0


def test_the_masks_and_caps_do_what_they_say():
    """Chosen numbers: token ratios [[4, 0.5, 1], [1.2, 1.5, 2 (after the end)]], so the
    answers' ratios are 2 and 1.8; C_max 2.1, C_min 0.6, then each bound moved past an answer's
    ratio."""
    from trustrl.rlhf.steps import sampler_weights

    old = torch.log(torch.tensor([[4.0, 0.5, 1.0], [1.2, 1.5, 2.0]]))
    mu = torch.zeros(2, 3)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])

    def w(mode, cap=2.1, cap_min=0.6):
        return sampler_weights(old, mu, cap, mode, mask, cap_min)

    def same(x, want):
        return torch.allclose(x, torch.tensor(want), rtol=1e-6)

    assert same(w("token_truncate"), [[2.1, 0.6, 1.0], [1.2, 1.5, 1.0]])
    assert same(w("token_mask"), [[0.0, 0.0, 1.0], [1.2, 1.5, 1.0]])
    assert same(w("sequence_truncate"), [[2.0] * 3, [1.8] * 3])
    assert same(w("sequence_mask"), [[2.0] * 3, [1.8] * 3])
    assert same(w("sequence_truncate", cap=1.9), [[1.9] * 3, [1.8] * 3])
    assert same(w("sequence_mask", cap=1.9), [[0.0] * 3, [1.8] * 3])  # the whole answer
    assert same(w("sequence_truncate", 3.0, 1.9), [[2.0] * 3, [1.9] * 3])
    assert same(w("sequence_mask", 3.0, 1.9), [[2.0] * 3, [0.0] * 3])


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_each_mode_weights_a_bf16_samplers_answers_through_a_gpt2(tiny, tmp_path, algo):
    """Through the model: every mode's weights, from the batch's recorded pi_old and mu, are
    its definition; narrow bounds (C 1 +- 5e-4) truncate or mask some tokens (answers), the
    sequence modes give one weight per answer; and the update runs with them."""
    for mode in MODES:
        cfg = small(algo, tmp_path, sampler_correction=mode, sampler_cap=1.0005,
                    sampler_cap_min=0.9995)
        parts = build(algo, cfg, hf_cfg(tiny, generate_dtype="bf16"),
                      resolve_rewards(["hf_sort:small_digits_reward"]))
        batch, row = parts.trainer.collect()
        logp_mu = batch.logp_mu if algo == "grpo" else None
        if logp_mu is None:  # PPO's batch keeps the weights only: check them against TIS
            assert row["sampling/importance_sampling_ratio/clipped_frac"] > 0, mode
        else:
            want = _by_definition(batch.logp_old, logp_mu, batch.mask, mode, 1.0005, 0.9995)
            for i, pairs in enumerate(want):
                got = batch.weight[i][batch.mask[i].bool()].tolist()
                assert got == pytest.approx([w for _, w in pairs], rel=1e-5), (mode, i)
        w = batch.weight[batch.mask.bool()]
        inside = (w >= 0.9995 - 1e-6) & (w <= 1.0005 + 1e-6)
        if mode.endswith("mask"):
            assert bool(((w == 0) | inside).all()) and bool((w == 0).any()), mode
        else:
            assert bool(inside.all()), mode
        if mode.startswith("sequence"):
            for i in range(batch.weight.shape[0]):
                assert batch.weight[i][batch.mask[i].bool()].unique().numel() == 1
        assert row["sampling/importance_sampling_ratio/clipped_frac"] > 0, mode
        out = parts.trainer.update(batch)
        assert math.isfinite(out["loss" if algo == "grpo" else "loss/policy_avg"])


def test_the_modes_from_the_command_line_and_their_bounds_checked(tiny, tmp_path, capsys):
    from trustrl.cli import main

    base = ["rlhf", "grpo", "--quiet", "--runs-dir", str(tmp_path / "runs"), "--model",
            str(tiny["model"]), "--data", str(tiny["data"]), "--reward",
            "hf_sort:small_digits_reward", "--max-new-tokens", "4", "--iterations", "1",
            "--set", "prompts_per_iter=2", "--set", "group_size=2", "--set", "minibatch_size=4",
            "--generate-dtype", "bf16"]
    for bad, msg in ((["--sampler-correction", "sequence_clip"], "unknown sampler_correction"),
                     (["--sampler-correction", "token_mask", "--sampler-cap", "2",
                       "--sampler-cap-min", "2"], "sampler_cap_min"),
                     (["--sampler-correction", "token_mask", "--sampler-cap-min", "-1"],
                      "sampler_cap_min")):
        assert main(base + bad) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and msg in err, err
    assert not (tmp_path / "runs").exists()
    assert main(base + ["--sampler-correction", "sequence_mask", "--sampler-cap", "2.5",
                        "--sampler-cap-min", "0.25"]) == 0
    (run,) = (tmp_path / "runs").iterdir()
    saved = json.loads((run / "config.json").read_text())["config"]
    assert (saved["sampler_correction"], saved["sampler_cap"], saved["sampler_cap_min"]) == \
        ("sequence_mask", 2.5, 0.25)
    assert math.isfinite(float(rows(run)[0]["sampling/importance_sampling_ratio/mean"]))


# --- the run folder as the core's: learning curve, completions log, best/, lr and epochs --------
def test_a_run_folder_has_the_cores_files(tiny, tmp_path):
    """GRPO evaluated every iteration: learning_curve.png; completions.csv with 3 answers per
    iteration whose logged reward is the reward function's on the logged completion text and
    whose advantage is the batch's; lr, epochs_run and optimizer_steps in metrics.csv; best/
    holds the policy of the highest eval/reward, and evaluating that folder gives its score."""
    import dataclasses

    from trustrl.rlhf.hf import EVAL_SEED
    from trustrl.rlhf.hf_run import evaluate

    cfg = small("grpo", tmp_path, iterations=3)
    hcfg = hf_cfg(tiny, eval_prompts=8, eval_data=str(tiny["eval"]), eval_every=1,
                  log_completions=3)
    run = train_hf("grpo", cfg, hcfg, echo=lambda s: None)
    got = rows(run)
    steps = cfg.epochs * math.ceil(cfg.prompts_per_iter * cfg.group_size / cfg.minibatch_size)
    assert [(float(r["lr"]), int(r["epochs_run"]), int(r["optimizer_steps"])) for r in got] \
        == [(cfg.lr, cfg.epochs, steps)] * 3
    png = (run / "learning_curve.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    with open(run / "completions.csv", newline="") as f:
        logged = list(csv.DictReader(f))
    assert [r["iteration"] for r in logged] == ["1"] * 3 + ["2"] * 3 + ["3"] * 3
    assert list(logged[0]) == ["iteration", "step", "prompt", "completion", "reward",
                               "rewards/small_digits_reward", "advantage"]
    want = hf_sort.small_digits_reward([r["prompt"] for r in logged],
                                       [r["completion"] for r in logged])
    assert [float(r["reward"]) for r in logged] == pytest.approx(want, abs=1e-6)
    assert [float(r["rewards/small_digits_reward"]) for r in logged] == pytest.approx(want)
    assert all(math.isfinite(float(r["advantage"])) for r in logged)
    for it in range(3):  # one group of 4 answers, 3 logged: its advantages have the group's sign
        group = [float(r["reward"]) for r in logged[3 * it: 3 * it + 3]]
        adv = [float(r["advantage"]) for r in logged[3 * it: 3 * it + 3]]
        if max(group) > min(group):
            assert adv[group.index(max(group))] > adv[group.index(min(group))]
    evals = [float(r["eval/reward"]) for r in got]
    best = json.loads((run / "best" / "eval.json").read_text())
    assert best["reward"] == max(evals) and best["iteration"] == evals.index(max(evals)) + 1
    assert (run / "best" / "config.json").is_file() and (run / "best" /
                                                        "tokenizer_config.json").is_file()
    parts = build("grpo", cfg, dataclasses.replace(hcfg, model=str(run / "best")),
                  resolve_rewards(hcfg.reward))
    source = PromptSource(load_rows(str(tiny["eval"])), parts.tokenizer, "prompt", 512,
                          parts.tokenizer.pad_token_id, parts.io.device)
    again = evaluate(parts, source, 8, cfg.seed + EVAL_SEED, cfg.temperature, 6)
    assert again["reward"] == pytest.approx(best["reward"], abs=1e-6)


def test_best_keeps_the_policy_of_the_highest_eval_reward(tiny, tmp_path, monkeypatch):
    """With evaluations scripted to peak at iteration 2 of 3 (start, 1, 2, 3, final: 0.1, 0.3,
    0.7, 0.5, 0.5), best/ holds iteration 2's policy (not the final one in model/) and its
    record; a reward that does not beat the best keeps best/ as it is."""
    from safetensors.torch import load_file

    from trustrl.rlhf import hf_run

    script = iter([0.1, 0.3, 0.7, 0.5, 0.5])
    monkeypatch.setattr(hf_run, "evaluate", lambda *a, **k: {
        "prompts": 4.0, "reward": next(script), "kl_ref_seq_exact": 0.0})
    cfg = small("grpo", tmp_path, iterations=3, lr=1e-2)
    run = train_hf("grpo", cfg, hf_cfg(tiny, eval_prompts=4, eval_every=1), echo=lambda s: None)
    assert [float(r["eval/reward"]) for r in rows(run)] == [0.3, 0.7, 0.5]
    record = json.loads((run / "best" / "eval.json").read_text())
    assert (record["iteration"], record["reward"]) == (2, 0.7)
    best, final = (load_file(run / d / "model.safetensors") for d in ("best", "model"))
    assert best.keys() == final.keys()
    assert any(not torch.equal(best[k], final[k]) for k in best)


def test_the_completions_log_survives_a_resume(tiny, tmp_path, capsys):
    """Rows a stopped process wrote after its checkpoint (and a half-written line) are dropped
    on resume, none are lost or doubled: the resumed log is the uninterrupted run's."""
    from trustrl.cli import main

    base = ["rlhf", "grpo", "--quiet", "--runs-dir", str(tmp_path / "runs"), "--model",
            str(tiny["model"]), "--data", str(tiny["data"]), "--reward",
            "hf_sort:small_digits_reward", "--max-new-tokens", "5", "--set",
            "prompts_per_iter=2", "--set", "group_size=2", "--set", "minibatch_size=4",
            "--set", "log_completions=2", "--seed", "4"]
    assert main(base + ["--iterations", "3"]) == 0
    whole = Path(capsys.readouterr().out.split("run: ")[-1].strip())
    assert main(base + ["--iterations", "2"]) == 0
    half = Path(capsys.readouterr().out.split("run: ")[-1].strip())
    log = half / "completions.csv"
    with open(log, newline="") as f:
        stale = list(csv.DictReader(f))[-2:]
    with open(log, "a", newline="") as f:  # as if a process had logged iteration 3, then died
        w = csv.DictWriter(f, fieldnames=list(stale[0]))
        w.writerows([{**r, "iteration": "3"} for r in stale])
        f.write('3,12,"half a li')
    assert main(["rlhf", "grpo", "--quiet", "--resume", str(half), "--iterations", "3",
                 "--reward", "hf_sort:small_digits_reward"]) == 0
    assert log.read_text() == (whole / "completions.csv").read_text()
    with open(log, newline="") as f:
        assert [r["iteration"] for r in csv.DictReader(f)] == ["1", "1", "2", "2", "3", "3"]
    assert (half / "learning_curve.png").is_file()


def test_a_run_from_before_the_new_columns_resumes_with_its_rows(tiny, tmp_path):
    """A run folder whose metrics.csv lacks lr / epochs_run / optimizer_steps (written before
    they were logged) resumes with its rows kept, under its own header."""
    run = train_hf("grpo", small("grpo", tmp_path, iterations=1), hf_cfg(tiny),
                   echo=lambda s: None)
    with open(run / "metrics.csv", newline="") as f:
        old = list(csv.DictReader(f))
    cols = [c for c in old[0] if c not in ("lr", "epochs_run", "optimizer_steps")]
    with open(run / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(old)
    train_hf("grpo", small("grpo", tmp_path, iterations=2), hf_cfg(tiny), echo=lambda s: None,
             resume=str(run))
    got = rows(run)
    assert [r["iteration"] for r in got] == ["1", "2"] and list(got[0]) == cols
    assert got[0] == {k: old[0][k] for k in cols}


def test_log_completions_zero_writes_none(tiny, tmp_path):
    run = train_hf("ppo", small("ppo", tmp_path, iterations=1), hf_cfg(tiny, log_completions=0),
                   echo=lambda s: None)
    assert not (run / "completions.csv").exists() and (run / "learning_curve.png").is_file()
    assert not (run / "best").exists()


def test_eval_every_needs_eval_prompts(tiny, tmp_path):
    with pytest.raises(ConfigError, match="eval_every needs"):
        train_hf("grpo", small("grpo", tmp_path), hf_cfg(tiny, eval_every=1))
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_no_upper_cap_is_trls_clip_max_none(mode, seed):
    """sampler_cap None (TRL's clip_max None): the weights are the definition with C_max =
    infinity, so ratios above 3 pass unchanged (token modes: some do on these draws), where the
    default cap of 3 would cut them."""
    from trustrl.rlhf.steps import sampler_correction

    old, mu, mask = _random_case(seed)
    mu[2, 0] = old[2, 0] - 2.0  # a first token (always valid) with pi_old / mu = e^2 > 3
    for cap_min in (0.5, 0.9) if mode.endswith("truncate") else (0.0, 0.5):
        weight, stats = sampler_correction(old, mu, mask, mode, None, cap_min)
        want = _by_definition(old, mu, mask, mode, math.inf, cap_min)
        ws = []
        for i, pairs in enumerate(want):
            got = weight[i][mask[i].bool()].tolist()
            assert got == pytest.approx([w for _, w in pairs], rel=1e-5, abs=1e-7), i
            ws += [w for _, w in pairs]
        outside = [r for pairs in want for r, _ in pairs]
        if mode.startswith("token"):
            assert max(ws) > 3.0
            assert stats["sampling/importance_sampling_ratio/clipped_frac"] == pytest.approx(
                sum(r < cap_min for r in outside) / len(outside))


def test_no_upper_cap_is_refused_where_trl_refuses_it(tiny, tmp_path, capsys):
    """A truncate mode with neither bound is refused in one line (TRL's GRPOConfig refuses it);
    a mask mode takes `--sampler-cap none`, stored as null in config.json."""
    from trustrl.cli import main
    from trustrl.rlhf.steps import check_sampler_option

    for mode in ("token_truncate", "tis", "sequence_truncate"):
        with pytest.raises(ConfigError, match="needs sampler_cap_min > 0"):
            check_sampler_option(mode, None, cap_min=0.0)
        check_sampler_option(mode, None, cap_min=0.5)
    for mode in ("none", "token_mask", "sequence_mask"):
        check_sampler_option(mode, None, cap_min=0.0)
    base = ["rlhf", "grpo", "--quiet", "--runs-dir", str(tmp_path / "runs"), "--model",
            str(tiny["model"]), "--data", str(tiny["data"]), "--reward",
            "hf_sort:small_digits_reward", "--max-new-tokens", "4", "--iterations", "1",
            "--set", "prompts_per_iter=2", "--set", "group_size=2", "--set", "minibatch_size=4",
            "--generate-dtype", "bf16", "--sampler-cap", "none"]
    assert main(base + ["--sampler-correction", "token_truncate"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "sampler_cap_min > 0" in err, err
    assert not (tmp_path / "runs").exists()
    assert main(base + ["--sampler-correction", "token_mask"]) == 0
    (run,) = (tmp_path / "runs").iterdir()
    assert json.loads((run / "config.json").read_text())["config"]["sampler_cap"] is None
