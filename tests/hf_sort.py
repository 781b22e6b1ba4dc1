"""The sort task as a Hugging Face model folder: a GPT-2-architecture causal LM and a
PreTrainedTokenizerFast over a 13-word vocabulary (digits, '>' the separator, '$' the EOS,
'<pad>'), SFT'd from scratch on the study's sloppy teacher, saved with save_pretrained; prompts
as JSONL; the gold score as a TRL-style reward function (`hf_sort:gold_reward`). Built offline
from a config: nothing comes from a hub.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from trustrl.rlhf.task import EOS, SEP, SortTask, gold_scores

PAD = 12
WORDS = [str(d) for d in range(10)] + [">", "$", "<pad>"]


def make_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="$", pad_token="<pad>",
                                   padding_side="left")


def make_model(seed: int, vocab: int = len(WORDS), n_embd: int = 48, n_layer: int = 2):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=vocab, n_positions=16, n_embd=n_embd, n_layer=n_layer,
                     n_head=4, bos_token_id=EOS, eos_token_id=EOS, pad_token_id=PAD)
    return GPT2LMHeadModel(cfg)


def sft_sort_model(folder: Path, seed: int = 0, steps: int = 400, batch: int = 128) -> Path:
    """SFT a fresh GPT-2 on the sloppy teacher (right half the time) and save model+tokenizer."""
    task = SortTask()
    model = make_model(seed)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        prompts = task.sample_prompts(batch, gen)
        answers = task.teacher_answers(prompts, gen)
        seq = torch.cat([prompts, answers], dim=1)
        logits = model(input_ids=seq).logits[:, task.prompt_len - 1:-1]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 answers.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.save_pretrained(folder)
    make_tokenizer().save_pretrained(folder)
    return folder


def write_prompts(path: Path, n: int, seed: int) -> Path:
    gen = torch.Generator().manual_seed(seed)
    prompts = SortTask().sample_prompts(n, gen)
    lines = [json.dumps({"prompt": " ".join(WORDS[int(t)] for t in row)}) for row in prompts]
    path.write_text("\n".join(lines) + "\n")
    return path


def _tokens(text: str) -> list[int]:
    return [WORDS.index(w) for w in text.split() if w in WORDS]


def gold_reward(prompts: list[str], completions: list[str], **kwargs) -> list[float]:
    """The sort task's gold score (partial credit, 0 unless a permutation) of text answers."""
    task = SortTask()
    p = torch.tensor([_tokens(x) for x in prompts])
    rows = []
    for c in completions:
        ids = [t for t in _tokens(c) if t not in (EOS, PAD)][: task.max_new - 1] + [EOS]
        rows.append(ids + [PAD] * (task.max_new - len(ids)))
    scores = gold_scores(task, p, torch.tensor(rows))["score"]
    return scores.tolist()


def length_reward(prompts: list[str], completions: list[str], **kwargs) -> list[float]:
    """A second reward: minus the number of separators in the answer (for summing tests)."""
    return [-float(c.split().count(">")) for c in completions]


def small_digits_reward(prompts: list[str], completions: list[str], **kwargs) -> list[float]:
    """The fraction of an answer's words that are digits below 5: varied even for a random
    model (whose gold score is almost always 0), so that its advantages are not all 0."""
    return [sum(w.isdigit() and int(w) < 5 for w in c.split()) / max(len(c.split()), 1)
            for c in completions]


assert WORDS[SEP] == ">" and WORDS[EOS] == "$"
