"""GRPO, RLOO and PPO on any Hugging Face causal LM: the same trainers as the sort study.

`trustrl rlhf grpo|rloo|ppo --model PATH` loads a `transformers` causal LM and its tokenizer
with `from_pretrained` (never with trust_remote_code), prompts from a JSONL / Parquet file or a
`datasets` folder, and rewards from the user's functions (`--reward module:function`, called as
TRL calls its reward functions) or a sequence-classification reward model folder. What runs the
model is `HFIO`, the trainers' `LMAdapter`; the algorithms, their losses, KL options, optimiser
step and diagnostics are `trustrl.rlhf.grpo` / `ppo` / `steps`, shared with the sort study.

- LoRA (`lora_r > 0`, peft): pi_ref is the same model with its adapters disabled (no second copy
  in memory); full fine-tuning keeps a frozen copy as pi_ref.
- Generation with `generate` at pure temperature (top_k 0, top_p 1, no repetition penalty): the
  tokens are drawn from the distribution whose log-probs enter the ratio and the KL. The model's
  own generation defaults are not used. Dropout is switched off (as TRL does), so the ratio is 1
  on the first pass over a batch.
- Left-padded prompts; every forward pass gets position ids from the attention mask, as
  `generate` does (without them a left-padded prompt's logits differ from those it sampled).
- bf16 autocast where the device supports it (`--bf16`); log-probs and KLs in float32.
- `generate_dtype` (bf16 or float32): generation in that precision, whatever the training's,
  with the log-probs it sampled with recorded (`GenerateSampler`): a sampler mu that differs
  from pi_old, as an inference engine's does; the trainers log the mismatch and, with a
  sampler_correction (TRL's four modes), correct it. A vLLM sampler would supply the same
  pair (tokens, sampling log-probs); it is not built.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from trustrl.rlhf.common import check_positive
from trustrl.util.errors import ConfigError, RunError

ALGOS = ("grpo", "rloo", "ppo")
GENERATE_DTYPES = ("", "bf16", "float32")
EVAL_SEED = 10_000


@dataclass
class HFConfig:
    model: str = ""
    """Folder of a transformers causal LM and its tokenizer (a hub id where the network allows)."""
    data: str = ""
    """Prompts: a .jsonl / .json / .parquet file or a `datasets` folder (save_to_disk), with a
    prompt column (text, or a list of chat messages for the chat template)."""
    prompt_column: str = "prompt"
    """Column holding the prompt; the other columns reach the reward functions by name."""
    reward: list[str] = field(default_factory=list)
    """Reward functions 'module:function', summed with reward_weights (TRL's signature:
    f(prompts, completions, completion_ids, **columns) -> list of floats)."""
    reward_weights: list[float] | None = None
    """One weight per reward function and reward model (None = all 1)."""
    reward_model: str = ""
    """Folder of a sequence-classification reward model (one label), scored on the text."""
    value_model: str = ""
    """PPO: folder of a causal LM whose trunk (with a new scalar head) is a separate value
    model; empty = a value head on the policy's trunk."""
    max_new_tokens: int = 64
    """Answer tokens sampled at most."""
    max_prompt_length: int = 512
    """Prompts longer than this keep their last tokens."""
    lora_r: int = 0
    """LoRA rank (peft); 0 = full fine-tuning with a frozen copy as pi_ref."""
    lora_alpha: float = 16.0
    """LoRA scale numerator (the update is scaled by lora_alpha / lora_r)."""
    lora_dropout: float = 0.0
    """Dropout on the LoRA branch (0 keeps the ratio exactly 1 on the first pass)."""
    lora_target: str = "all-linear"
    """Modules that get adapters: 'all-linear' or comma-separated module names."""
    bf16: bool = False
    """bf16 autocast for forward passes and generation (CUDA with bf16 support, or CPU)."""
    generate_dtype: str = ""
    """bf16 or float32: generate in this precision (autocast) and record the log-probs sampled
    with (their mismatch with pi_old is logged, and corrected with a sampler_correction);
    empty = generate as the training runs, nothing recorded."""
    device: str = "cpu"
    """cpu, cuda, cuda:N or auto (cuda when available)."""
    score_chunk: int = 16
    """Answers per forward pass when a sampled batch is scored (log-probs, exact KLs) and
    evaluated: at most this many answers' logits (answers x tokens x vocabulary) at a time.
    With one optimiser step per batch (GRPO / RLOO: epochs 1, one minibatch, grad_accum 1)
    the policy is not scored apart (the update's forward scores the batch as pi_old) and pi_ref
    runs once on the whole batch (the logits the update holds anyway)."""
    save_every: int = 10
    """Checkpoint every this many iterations (and at the end); resume reads the latest."""
    tensorboard: bool = True
    """TensorBoard events of every metrics row under tb/ where tensorboard is installed (the
    core's RunDir.open_tensorboard)."""
    eval_data: str = ""
    """Held-out prompts for eval.json (default: the training prompts)."""
    eval_prompts: int = 0
    """Prompts evaluated (one answer each) before and after training; 0 = no evaluation."""
    eval_every: int = 0
    """Also evaluate every this many iterations (logged as eval/ columns) and keep the best
    policy by mean eval reward in best/; 0 = before and after training only."""
    log_completions: int = 8
    """Answers written to completions.csv per iteration (the batch's first: GRPO's first
    groups) with their prompt, rewards and advantage; 0 = none."""

    def validate(self, algo: str) -> None:
        if not self.model:
            raise ConfigError("--model PATH is required")
        if not self.data:
            raise ConfigError("--data FILE (prompts) is required with --model")
        if not self.reward and not self.reward_model:
            raise ConfigError("give a reward: --reward module:function and/or --reward-model "
                              "FOLDER")
        n_rewards = len(self.reward) + bool(self.reward_model)
        if self.reward_weights is not None and len(self.reward_weights) != n_rewards:
            raise ConfigError(f"{len(self.reward_weights)} reward weights for {n_rewards} "
                              "rewards")
        if self.value_model and algo != "ppo":
            raise ConfigError("--value-model is for ppo only")
        if self.generate_dtype not in GENERATE_DTYPES:
            raise ConfigError(f"unknown generate_dtype {self.generate_dtype!r}; use bf16 or "
                              "float32")
        for name in ("max_new_tokens", "max_prompt_length", "save_every", "score_chunk"):
            check_positive(name, getattr(self, name))
        check_positive("lora_r", self.lora_r, allow_zero=True)
        check_positive("eval_prompts", self.eval_prompts, allow_zero=True)
        check_positive("eval_every", self.eval_every, allow_zero=True)
        check_positive("log_completions", self.log_completions, allow_zero=True)
        if self.eval_every and not self.eval_prompts:
            raise ConfigError("eval_every needs --eval-prompts N (the prompts evaluated)")
        if not 0 <= self.lora_dropout < 1:
            raise ConfigError(f"lora_dropout must be in [0, 1), got {self.lora_dropout}")


# --- prompts ---------------------------------------------------------------------------------
def load_rows(path: str, column: str = "prompt") -> list[dict[str, Any]]:
    """The rows of a JSONL / JSON / Parquet file or a `datasets` folder; each must have
    `column`. ConfigError in one line for anything else."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"no prompt data at {path}")
    try:
        if p.is_dir():
            try:
                import datasets
            except ImportError:
                raise ConfigError(f"{path} is a folder: reading a saved `datasets` data set "
                                  "needs `pip install datasets`") from None
            ds = datasets.load_from_disk(str(p))
            if isinstance(ds, datasets.DatasetDict):
                if "train" not in ds:
                    raise ConfigError(f"{path} holds splits {list(ds)}, none named 'train'")
                ds = ds["train"]
            rows = ds.to_list()
        elif p.suffix == ".parquet":
            try:
                import pyarrow.parquet as pq
            except ImportError:
                raise ConfigError("reading Parquet needs pyarrow (`pip install pyarrow`)"
                                  ) from None
            rows = pq.read_table(p).to_pylist()
        elif p.suffix in (".jsonl", ".json"):
            text = p.read_text()
            if p.suffix == ".json" and text.lstrip().startswith("["):
                rows = json.loads(text)
            else:
                rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            raise ConfigError(f"prompt data {path}: expected .jsonl, .json, .parquet or a "
                              "`datasets` folder")
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - a malformed file, as one line
        msg = (str(e).splitlines() or [""])[0][:160]
        raise ConfigError(f"cannot read prompt data {path}: {type(e).__name__}: {msg}"
                          ) from None
    if not rows:
        raise ConfigError(f"prompt data {path} has no rows")
    bad = next((i for i, r in enumerate(rows) if not isinstance(r, dict) or column not in r),
               None)
    if bad is not None:
        raise ConfigError(f"prompt data {path}: row {bad} has no {column!r} column")
    return rows


def is_conversation(prompt: Any) -> bool:
    return isinstance(prompt, list) and all(isinstance(m, dict) and "content" in m
                                            for m in prompt)


def prompt_text(tokenizer: Any, prompt: Any) -> str:
    """The text the model is prompted with: a chat's messages through the tokenizer's chat
    template (with the generation prompt), a string as it is."""
    if is_conversation(prompt):
        if not getattr(tokenizer, "chat_template", None):
            raise ConfigError("the prompts are chat messages but the tokenizer has no chat "
                              "template")
        return tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    if not isinstance(prompt, str):
        raise ConfigError(f"a prompt must be text or a list of chat messages, got "
                          f"{type(prompt).__name__}")
    return prompt


@dataclass
class PromptBatch:
    """Left-padded prompt ids [B, P] with their attention mask, and the data rows."""

    ids: Tensor
    attention: Tensor
    rows: list[dict[str, Any]]
    texts: list[str]

    def __len__(self) -> int:
        return self.ids.shape[0]

    def __getitem__(self, idx: Tensor) -> PromptBatch:
        ids, att = self.ids[idx], self.attention[idx]
        first = int(att.any(0).long().argmax()) if att.numel() else 0  # drop all-pad columns
        pick = idx.tolist()
        return PromptBatch(ids[:, first:], att[:, first:], [self.rows[i] for i in pick],
                           [self.texts[i] for i in pick])


class PromptSource:
    """Draws prompt batches (uniformly, with replacement, from the trainer's generator), the
    prompts tokenised once. (batch, generator) -> PromptBatch, as the trainers call it."""

    def __init__(self, rows: list[dict[str, Any]], tokenizer: Any, column: str,
                 max_len: int, pad_id: int, device: torch.device):
        self.rows, self.pad_id, self.device = rows, pad_id, device
        self.texts = [prompt_text(tokenizer, r[column]) for r in rows]
        enc = tokenizer(self.texts, add_special_tokens=False)["input_ids"]
        self.ids = [list(x)[-max_len:] for x in enc]
        if not all(self.ids):
            raise ConfigError("a prompt tokenises to no tokens")

    def batch(self, picks: list[int]) -> PromptBatch:
        width = max(len(self.ids[i]) for i in picks)
        ids = torch.full((len(picks), width), self.pad_id, dtype=torch.long)
        att = torch.zeros(len(picks), width, dtype=torch.long)
        for row, i in enumerate(picks):
            n = len(self.ids[i])
            ids[row, width - n:] = torch.tensor(self.ids[i])
            att[row, width - n:] = 1
        return PromptBatch(ids.to(self.device), att.to(self.device),
                           [self.rows[i] for i in picks], [self.texts[i] for i in picks])

    def __call__(self, n: int, generator: torch.Generator) -> PromptBatch:
        return self.batch(torch.randint(len(self.rows), (n,), generator=generator).tolist())


# --- running the model -----------------------------------------------------------------------
class HFIO:
    """The trainers' `LMAdapter` for a transformers causal LM (or a peft model of one)."""

    def __init__(self, eos_ids: list[int], pad_id: int, device: torch.device,
                 bf16: bool = False):
        self.eos = torch.tensor(sorted(set(eos_ids)), dtype=torch.long)
        self.pad_id, self.device, self.bf16 = pad_id, device, bf16

    def autocast(self, bf16: bool | None = None) -> contextlib.AbstractContextManager:
        """bf16 autocast when bf16 (None: the training's setting), else nothing."""
        if not (self.bf16 if bf16 is None else bf16):
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    def _inputs(self, prompts: PromptBatch, responses: Tensor) -> dict[str, Tensor]:
        seq = torch.cat([prompts.ids, responses], dim=1)
        att = torch.cat([prompts.attention, torch.ones_like(responses)], dim=1)
        return {"input_ids": seq, "attention_mask": att,
                "position_ids": (att.cumsum(-1) - 1).clamp(min=0)}

    @torch.no_grad()
    def sample(self, policy: nn.Module, prompts: PromptBatch, max_new: int,
               temperature: float, generator: torch.Generator) -> Tensor:
        """[B, max_new] answer tokens, pad after the EOS. generate draws from torch's global
        generator: it is seeded from `generator` inside a fork, so runs and resumes repeat."""
        return self.generate(policy, prompts, max_new, temperature, generator)[0]

    @torch.no_grad()
    def generate(self, policy: nn.Module, prompts: PromptBatch, max_new: int,
                 temperature: float, generator: torch.Generator, bf16: bool | None = None,
                 logprobs: bool = False) -> tuple[Tensor, Tensor | None]:
        """`sample`'s answers, generated with bf16 autocast or not (None: the training's
        setting), and with logprobs the [B, max_new] float32 log-probs the tokens were drawn
        with (from generate's own logits over the temperature; 0 after an answer's end)."""
        from transformers import GenerationConfig

        config = GenerationConfig(
            do_sample=True, temperature=temperature, top_k=0, top_p=1.0, min_p=None,
            typical_p=1.0, repetition_penalty=1.0, max_new_tokens=max_new, min_new_tokens=0,
            pad_token_id=self.pad_id, eos_token_id=self.eos.tolist(), use_cache=True,
            return_dict_in_generate=logprobs, output_logits=logprobs)
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), self.autocast(bf16):
            torch.manual_seed(seed)
            out = policy.generate(input_ids=prompts.ids, attention_mask=prompts.attention,
                                  generation_config=config)
        seq = out.sequences if logprobs else out
        responses = seq[:, prompts.ids.shape[1]:]
        logp = None
        if logprobs:
            logits = torch.stack(out.logits, dim=1).float() / temperature
            logp = torch.log_softmax(logits, dim=-1).gather(-1, responses[..., None])[..., 0]
            logp = logp.masked_fill(~self.response_mask(responses), 0.0)
        if responses.shape[1] < max_new:  # every answer ended early
            pad = responses.new_full((responses.shape[0], max_new - responses.shape[1]),
                                     self.pad_id)
            responses = torch.cat([responses, pad], dim=1)
            if logp is not None:
                logp = torch.cat([logp, logp.new_zeros(pad.shape)], dim=1)
        return responses, logp

    def answer_logits(self, model: nn.Module, prompts: PromptBatch, responses: Tensor,
                      temperature: float = 1.0) -> Tensor:
        """[B, T, V] float32 logits (over the temperature) that produced each answer token."""
        t = responses.shape[1]
        with self.autocast():
            out = model(**self._inputs(prompts, responses), logits_to_keep=t + 1)
        return _at_least_float32(out.logits[:, -(t + 1):-1]) / temperature

    def answer_values(self, critic: nn.Module, prompts: PromptBatch,
                      responses: Tensor) -> Tensor:
        """[B, T] V(s_t) from the value head at the position before each answer token."""
        t = responses.shape[1]
        with self.autocast():
            values = critic(**self._inputs(prompts, responses))
        return _at_least_float32(values[:, -(t + 1):-1, 0])

    def is_eos(self, responses: Tensor) -> Tensor:
        return torch.isin(responses, self.eos.to(responses.device))

    def response_mask(self, responses: Tensor) -> Tensor:
        """[B, T] bool: the answer up to and including its first EOS (all of it without)."""
        eos = self.is_eos(responses).long()
        return (torch.cumsum(eos, dim=1) - eos) == 0


class GenerateSampler:
    """The trainers' `Sampler` from `generate` in a given precision: the answers and the
    log-probs they were drawn with (bf16 while the training runs in float32: a sampler mu that
    differs from pi_old, as an inference engine's does)."""

    def __init__(self, io: HFIO, bf16: bool):
        self.io, self.bf16 = io, bf16

    def __call__(self, policy: nn.Module, prompts: PromptBatch, max_new: int,
                 temperature: float, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        responses, logp = self.io.generate(policy, prompts, max_new, temperature, generator,
                                           bf16=self.bf16, logprobs=True)
        assert logp is not None
        return responses, logp


def _at_least_float32(x: Tensor) -> Tensor:
    """bf16 / fp16 outputs in float32 (log-probs, KLs and ratios need it); float64 kept."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


class ReferenceView(nn.Module):
    """pi_ref of a LoRA policy: the same peft model with its adapters disabled (no copy). It
    holds the policy outside nn.Module's registry, so it has no parameters of its own and
    freezing pi_ref does not freeze the policy."""

    def __init__(self, policy: nn.Module):
        super().__init__()
        self.__dict__["policy"] = policy

    def forward(self, **inputs: Any) -> Any:
        with self.policy.disable_adapter():
            return self.policy(**inputs)


class ValueHead(nn.Module):
    """V(s) for every position: a scalar head (zero-initialised: V = 0 at the start) on the last
    hidden state of a causal LM: the policy itself (shared trunk) or a separate model."""

    def __init__(self, lm: nn.Module, hidden_size: int):
        super().__init__()
        self.lm = lm
        self.head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, **inputs: Any) -> Tensor:
        out = self.lm(**inputs, output_hidden_states=True, logits_to_keep=1)
        hidden = out.hidden_states[-1]
        return self.head(hidden.to(self.head.weight.dtype))


# --- loading ---------------------------------------------------------------------------------
def pick_device(name: str, bf16: bool) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"unknown device {name!r}") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device {name!r}: CUDA is not available")
        if bf16 and not torch.cuda.is_bf16_supported():
            raise ConfigError(f"device {name!r} does not support bf16")
    elif device.type != "cpu":
        raise ConfigError(f"device {name!r}: use cpu, cuda, cuda:N or auto")
    return device


def _hf_error(what: str, path: str, e: Exception) -> ConfigError:
    msg = (str(e).splitlines() or [""])[0][:200]
    return ConfigError(f"cannot load {what} from {path}: {type(e).__name__}: {msg}")


def load_tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    except Exception as e:  # noqa: BLE001
        raise _hf_error("a tokenizer", path, e) from None
    if tok.pad_token_id is None:
        if tok.eos_token_id is None:
            raise ConfigError(f"the tokenizer of {path} has neither a pad nor an EOS token")
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def disable_dropout(model: nn.Module) -> None:
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0


def load_causal_lm(path: str, device: torch.device) -> nn.Module:
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=False)
    except Exception as e:  # noqa: BLE001
        raise _hf_error("a causal LM", path, e) from None
    disable_dropout(model)
    return model.to(device)


def add_lora(model: nn.Module, cfg: HFConfig) -> nn.Module:
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise ConfigError("LoRA needs peft: pip install 'trustrl[hf]'") from None
    target: Any = cfg.lora_target
    if target != "all-linear":
        target = [t.strip() for t in target.split(",") if t.strip()]
    try:
        return get_peft_model(model, LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha,
                                                lora_dropout=cfg.lora_dropout,
                                                target_modules=target, task_type="CAUSAL_LM"))
    except Exception as e:  # noqa: BLE001
        raise _hf_error("LoRA adapters", cfg.model, e) from None


def hidden_size(model: nn.Module) -> int:
    config = model.config
    size = getattr(config, "hidden_size", None) or getattr(config, "n_embd", None)
    if not isinstance(size, int):
        raise ConfigError("cannot tell the model's hidden size for the value head")
    return size


# --- rewards ---------------------------------------------------------------------------------
class TextReward:
    """(PromptBatch, responses) -> [B] rewards from the decoded completions: the user's reward
    functions (TRL's signature) and a reward model, weighted and summed (NaN = "not
    applicable", skipped as TRL does). Per-source means and stds are left in `last_stats`."""

    def __init__(self, tokenizer: Any, io: HFIO, funcs: list[tuple[str, Callable]],
                 reward_model: str = "", weights: list[float] | None = None,
                 column: str = "prompt"):
        self.tokenizer, self.io, self.funcs, self.column = tokenizer, io, funcs, column
        self.rm = load_reward_model(reward_model, io.device) if reward_model else None
        n = len(funcs) + (self.rm is not None)
        self.weights = list(weights) if weights is not None else [1.0] * n
        self.last_stats: dict[str, float] = {}
        self.last: dict[str, list[Any]] = {}
        """The last call's per-answer values: prompt and completion texts, the total reward
        and each source's ('rewards/<name>')."""

    def completions(self, responses: Tensor) -> tuple[list[list[int]], list[str]]:
        mask = self.io.response_mask(responses).cpu()
        ids = [r[m].tolist() for r, m in zip(responses.cpu(), mask, strict=True)]
        return ids, self.tokenizer.batch_decode(ids, skip_special_tokens=True)

    def __call__(self, prompts: PromptBatch, responses: Tensor) -> Tensor:
        ids, texts = self.completions(responses)
        raw = [r[self.column] for r in prompts.rows]
        conv = bool(raw) and is_conversation(raw[0])
        completions: list[Any] = ([[{"role": "assistant", "content": t}] for t in texts]
                                  if conv else texts)
        columns = {k: [r.get(k) for r in prompts.rows] for k in prompts.rows[0]
                   if k != self.column}
        parts: list[tuple[str, Tensor]] = []
        for name, fn in self.funcs:
            try:
                out = fn(prompts=raw, completions=completions, completion_ids=ids, **columns)
            except Exception as e:  # noqa: BLE001 - the user's code, as one line
                msg = (str(e).splitlines() or [""])[0][:160]
                raise RunError(f"reward function {name} raised {type(e).__name__}: {msg}"
                               ) from None
            parts.append((name, _as_rewards(out, len(ids), name)))
        if self.rm is not None:
            parts.append(("reward_model", self.rm.score(
                [p + t for p, t in zip(prompts.texts, texts, strict=True)])))
        total = torch.zeros(len(ids), dtype=torch.float64)
        stats = {}
        for (name, r), w in zip(parts, self.weights, strict=True):
            total += w * torch.nan_to_num(r, nan=0.0)
            short = name.rsplit(":", 1)[-1]
            stats[f"rewards/{short}/mean"] = float(r.nanmean())
            stats[f"rewards/{short}/std"] = float(r[~r.isnan()].std()) if len(r) > 1 else 0.0
        self.last_stats = stats
        self.last = {"prompt": list(prompts.texts), "completion": texts,
                     "reward": total.tolist(),
                     **{f"rewards/{n.rsplit(':', 1)[-1]}": r.tolist() for n, r in parts}}
        return total.float()


def _as_rewards(out: Any, n: int, name: str) -> Tensor:
    try:
        values = [math.nan if v is None else float(v) for v in list(out)]
    except (TypeError, ValueError):
        raise RunError(f"reward function {name} must return a list of {n} numbers, got "
                       f"{type(out).__name__}") from None
    if len(values) != n:
        raise RunError(f"reward function {name} returned {len(values)} rewards for {n} "
                       "completions")
    if any(math.isinf(v) for v in values):
        raise RunError(f"reward function {name} returned an infinite reward")
    return torch.tensor(values, dtype=torch.float64)


class RewardModel:
    """A sequence-classification model with one label, scoring prompt + completion text."""

    def __init__(self, model: nn.Module, tokenizer: Any, device: torch.device):
        self.model, self.tokenizer, self.device = model, tokenizer, device

    @torch.no_grad()
    def score(self, texts: list[str]) -> Tensor:
        enc = self.tokenizer(texts, padding=True, return_tensors="pt", add_special_tokens=False)
        enc = {k: v.to(self.device) for k, v in enc.items()}
        return self.model(**enc).logits[:, 0].double().cpu()


def load_reward_model(path: str, device: torch.device) -> RewardModel:
    from transformers import AutoModelForSequenceClassification

    tok = load_tokenizer(path)
    tok.padding_side = "right"
    try:
        model = AutoModelForSequenceClassification.from_pretrained(path,
                                                                   trust_remote_code=False)
    except Exception as e:  # noqa: BLE001
        raise _hf_error("a sequence-classification reward model", path, e) from None
    if model.config.num_labels != 1:
        raise ConfigError(f"the reward model {path} has {model.config.num_labels} labels; "
                          "a reward model has one")
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tok.pad_token_id
    model.eval().requires_grad_(False)
    return RewardModel(model.to(device), tok, device)


def resolve_rewards(paths: list[str]) -> list[tuple[str, Callable]]:
    """The user's reward functions, each imported by the project's one resolver (a path named
    on the command line; never one read back from a run folder)."""
    from trustrl.util.importing import resolve

    return [(p, resolve(p, "reward function", ConfigError)) for p in paths]
