"""A GRPO / RLOO / PPO run on a Hugging Face causal LM: build, train, checkpoint, resume.

    runs/<model>__<algo>__<seed>__<time>/
        config.json        {"algo", "config" (the algorithm's), "hf" (model, data, rewards...)}
        metrics.csv        one row per iteration (TRL's names where TRL has one)
        checkpoints/latest.pt   trainable weights, Adam, the generator: resume = never stopped
        model/             the trained policy (save_pretrained; LoRA: the adapter) + tokenizer
        eval.json          reward and KL to pi_ref on held-out prompts, before and after
        best/              with eval_every: the policy of the best mean eval reward so far
                           (as model/) and its evaluation in best/eval.json
        completions.csv    per iteration, the first log_completions answers: prompt,
                           completion, rewards, advantage (TRL's completions table)
        learning_curve.png reward (and its group spread) and the exact KL to pi_ref against
                           completions seen and iterations (the core's plot_runs)
        tb/                TensorBoard events of every row, where tensorboard is installed
        status.json

A run folder is data: resuming reads its config and weights, never code. A run that used reward
functions is resumed only with the same `--reward module:function` given again on the command
line.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from trustrl.records.plotting import plot_runs
from trustrl.records.runs import RunDir, atomic_write_text
from trustrl.rlhf.common import seed_everything
from trustrl.rlhf.curves import lm_curve
from trustrl.rlhf.grpo import GRPO_COLUMNS, GRPOConfig, GRPOTrainer
from trustrl.rlhf.hf import (
    EVAL_SEED,
    HFIO,
    GenerateSampler,
    HFConfig,
    PromptSource,
    ReferenceView,
    TextReward,
    ValueHead,
    add_lora,
    hidden_size,
    load_causal_lm,
    load_rows,
    load_tokenizer,
    pick_device,
    resolve_rewards,
)
from trustrl.rlhf.kl import exact_kl
from trustrl.rlhf.ppo import PPO_COLUMNS, PPOConfig, PPOTrainer, run_rl_loop, write_eval
from trustrl.rlhf.steps import OPT_COLUMNS, SAMPLER_COLUMNS
from trustrl.util.errors import ConfigError, RunError

GOLD_FREE = ("gold/",)
EVAL_COLUMNS = ["eval/reward", "eval/kl_ref_seq_exact"]
COMPLETIONS = "completions.csv"


def algo_config(algo: str) -> GRPOConfig | PPOConfig:
    """The algorithm's config with the defaults of a language-model run: RLOO is GRPO's trainer
    with the leave-one-out baseline, no std scaling and k1 in the reward (TRL's RLOO)."""
    if algo == "ppo":
        return PPOConfig(iterations=100, batch_size=64, minibatch_size=16, eval_prompts=1)
    cfg = GRPOConfig(iterations=100, prompts_per_iter=8, minibatch_size=16, eval_prompts=1)
    if algo == "rloo":
        cfg.advantage, cfg.scale_rewards = "rloo", False
        cfg.beta, cfg.kl_placement, cfg.kl_estimator = 0.05, "reward", "k1"
    return cfg


@dataclass
class Parts:
    trainer: GRPOTrainer | PPOTrainer
    policy: nn.Module
    ref: nn.Module
    critic: nn.Module | None
    tokenizer: Any
    io: HFIO
    reward: TextReward


def build(algo: str, cfg: GRPOConfig | PPOConfig, hcfg: HFConfig,
          funcs: list[tuple[str, Callable]]) -> Parts:
    """Load the model (and LoRA, the reference, the value head), the prompts and the reward;
    the trainer of `algo` over them."""
    device = pick_device(hcfg.device, hcfg.bf16)
    torch.manual_seed(cfg.seed)
    tokenizer = load_tokenizer(hcfg.model)
    policy = load_causal_lm(hcfg.model, device)
    if hcfg.lora_r > 0:
        policy = add_lora(policy, hcfg)
        ref: nn.Module = ReferenceView(policy)
    else:
        ref = load_causal_lm(hcfg.model, device)
    ref.eval()
    eos = tokenizer.eos_token_id
    gen_eos = getattr(getattr(policy, "generation_config", None), "eos_token_id", None)
    eos_ids = [e for e in ([eos] + (gen_eos if isinstance(gen_eos, list) else [gen_eos]))
               if isinstance(e, int)]
    if not eos_ids:
        raise ConfigError(f"the tokenizer of {hcfg.model} has no EOS token")
    io = HFIO(eos_ids, tokenizer.pad_token_id, device, hcfg.bf16)
    rows = load_rows(hcfg.data, hcfg.prompt_column)
    source = PromptSource(rows, tokenizer, hcfg.prompt_column, hcfg.max_prompt_length,
                          tokenizer.pad_token_id, device)
    reward = TextReward(tokenizer, io, funcs, hcfg.reward_model, hcfg.reward_weights,
                        hcfg.prompt_column)
    gen = seed_everything(cfg.seed)
    sampler = (GenerateSampler(io, hcfg.generate_dtype == "bf16")
               if hcfg.generate_dtype else None)
    critic = None
    if algo == "ppo":
        assert isinstance(cfg, PPOConfig)
        trunk = policy
        if hcfg.value_model:
            trunk = load_causal_lm(hcfg.value_model, device)
            if hcfg.lora_r > 0:
                trunk = add_lora(trunk, hcfg)
        critic = ValueHead(trunk, hidden_size(trunk)).to(device)
        trainer: GRPOTrainer | PPOTrainer = PPOTrainer(
            cfg, policy, ref, critic, reward, source, hcfg.max_new_tokens, None, gen, lm=io,
            score_chunk=hcfg.score_chunk, sampler=sampler)
    else:
        assert isinstance(cfg, GRPOConfig)
        trainer = GRPOTrainer(cfg, policy, ref, reward, source, hcfg.max_new_tokens, None, gen,
                              lm=io, score_chunk=hcfg.score_chunk, sampler=sampler)
    return Parts(trainer, policy, ref, critic, tokenizer, io, reward)


# --- checkpoints -------------------------------------------------------------------------------
def _trainable_state(module: nn.Module, skip: set[int]) -> dict[str, Tensor]:
    return {n: p.detach().cpu().clone() for n, p in module.named_parameters()
            if p.requires_grad and id(p) not in skip}


def checkpoint_state(parts: Parts, iteration: int) -> dict[str, Any]:
    t = parts.trainer
    policy_ids = {id(p) for p in parts.policy.parameters()}
    state: dict[str, Any] = {
        "iteration": iteration, "policy": _trainable_state(parts.policy, set()),
        "optimizer": t.opt.state_dict(), "generator": t.gen.get_state()}
    if parts.critic is not None:
        state["critic"] = _trainable_state(parts.critic, policy_ids)
    if isinstance(t, PPOTrainer):
        state["beta"] = t.beta
        state["kl_ctl_beta"] = t.kl_ctl.beta if t.kl_ctl is not None else None
    return state


def _load_trainable(module: nn.Module, saved: dict[str, Tensor], what: str) -> None:
    params = dict(module.named_parameters())
    missing = [n for n in saved if n not in params]
    if missing:
        raise RunError(f"the checkpoint's {what} has weights this model lacks ({missing[0]})")
    with torch.no_grad():
        for n, v in saved.items():
            if params[n].shape != v.shape:
                raise RunError(f"the checkpoint's {what} weight {n} has shape "
                               f"{tuple(v.shape)}, the model {tuple(params[n].shape)}")
            params[n].copy_(v)


def restore(parts: Parts, state: dict[str, Any]) -> int:
    t = parts.trainer
    try:
        _load_trainable(parts.policy, state["policy"], "policy")
        if parts.critic is not None:
            _load_trainable(parts.critic, state["critic"], "value model")
        t.opt.load_state_dict(state["optimizer"])
        t.gen.set_state(state["generator"])
        if isinstance(t, PPOTrainer):
            t.beta = float(state["beta"])
            if t.kl_ctl is not None:
                t.kl_ctl.beta = float(state["kl_ctl_beta"])
        t.iteration = int(state["iteration"])
    except (KeyError, TypeError, ValueError) as e:
        raise RunError(f"the checkpoint does not fit this run: {type(e).__name__}: {e}"
                       ) from None
    return t.iteration


# --- evaluation ------------------------------------------------------------------------------
@torch.no_grad()
def evaluate(parts: Parts, source: PromptSource, n: int, seed: int, temperature: float,
             max_new: int, chunk: int = 64) -> dict[str, float]:
    """Mean reward (and each source's) and exact sequence KL to pi_ref of one answer per
    prompt for the first n prompts of `source`, sampled at the training temperature."""
    gen = torch.Generator().manual_seed(seed)
    picks = list(range(min(n, len(source.rows))))
    rewards, kls, stats = [], [], []
    for i in range(0, len(picks), chunk):
        prompts = source.batch(picks[i: i + chunk])
        responses = parts.io.sample(parts.policy, prompts, max_new, temperature, gen)
        mask = parts.io.response_mask(responses).float()
        rewards.append(parts.reward(prompts, responses))
        stats.append((len(responses), dict(parts.reward.last_stats)))
        kl = exact_kl(parts.io.answer_logits(parts.policy, prompts, responses, temperature),
                      parts.io.answer_logits(parts.ref, prompts, responses, temperature))
        kls.append((kl * mask).sum(1).cpu())
    out = {"prompts": float(len(picks)), "reward": float(torch.cat(rewards).mean()),
           "kl_ref_seq_exact": float(torch.cat(kls).mean())}
    for key in stats[0][1]:
        if key.endswith("/mean"):
            out[key] = sum(b * s[key] for b, s in stats) / len(picks)
    return out


# --- the run -----------------------------------------------------------------------------------
def _reward_names(funcs: list[tuple[str, Callable]], reward_model: str) -> list[str]:
    return [p.rsplit(":", 1)[-1] for p, _ in funcs] + (["reward_model"] if reward_model else [])


def columns(algo: str, funcs: list[tuple[str, Callable]], reward_model: str,
            recorded: bool = False, evals: bool = False) -> list[str]:
    """metrics.csv's columns (recorded: the sampler records its log-probs; evals: evaluated
    every eval_every iterations)."""
    base = PPO_COLUMNS if algo == "ppo" else GRPO_COLUMNS
    extra = [f"rewards/{n}/{s}" for n in _reward_names(funcs, reward_model)
             for s in ("mean", "std")]
    return ([c for c in base if not c.startswith(GOLD_FREE)] + extra + OPT_COLUMNS
            + (SAMPLER_COLUMNS if recorded else []) + (EVAL_COLUMNS if evals else []))


def completion_columns(funcs: list[tuple[str, Callable]], reward_model: str) -> list[str]:
    """completions.csv's columns: TRL's completions table (step, prompt, completion, each
    reward, advantage) with the iteration and the weighted total reward."""
    return ["iteration", "step", "prompt", "completion", "reward",
            *[f"rewards/{n}" for n in _reward_names(funcs, reward_model)], "advantage"]


def completion_rows(parts: Parts, n: int, iteration: int, step: int) -> list[dict[str, Any]]:
    """The first n answers of the last training batch (the reward's last call), each with its
    prompt text, completion text, rewards and advantage (GRPO / RLOO; empty for PPO, whose
    advantages are per token)."""
    last = parts.reward.last
    batch = getattr(parts.trainer, "last_batch", None)
    adv = (batch.advantages.detach().cpu() if batch is not None
           and batch.advantages.dim() == 1 else None)
    k = min(n, len(last.get("completion", [])))
    return [{"iteration": iteration, "step": step, **{key: v[i] for key, v in last.items()},
             "advantage": None if adv is None else float(adv[i])} for i in range(k)]


class Iteration:
    """run_rl_loop's trainer for a Hugging Face run: the trainer's step, then what the run
    folder adds to it: the completions log and, every eval_every iterations, the held-out
    evaluation (eval/ columns of the row) and best/."""

    def __init__(self, parts: Parts, run: RunDir, cfg: GRPOConfig | PPOConfig, hcfg: HFConfig,
                 eval_source: PromptSource | None, completions: list[str], start: int):
        self.parts, self.run, self.cfg, self.hcfg = parts, run, cfg, hcfg
        self.eval_source, self.completions = eval_source, completions
        self.best = _saved_best(run.path, start)

    def step(self) -> dict[str, Any]:
        row = self.parts.trainer.step()
        it, hcfg = int(row["iteration"]), self.hcfg
        if hcfg.log_completions:
            self.run.log_table(COMPLETIONS, self.completions, completion_rows(
                self.parts, hcfg.log_completions, it, int(row["global_step"])))
        if self.eval_source is not None and hcfg.eval_every and it % hcfg.eval_every == 0:
            ev = evaluate(self.parts, self.eval_source, hcfg.eval_prompts,
                          self.cfg.seed + EVAL_SEED, self.cfg.temperature,
                          hcfg.max_new_tokens, hcfg.score_chunk)
            row["eval/reward"], row["eval/kl_ref_seq_exact"] = (ev["reward"],
                                                                 ev["kl_ref_seq_exact"])
            if ev["reward"] > self.best:
                self.best = ev["reward"]
                save_best(self.parts, self.run.path, {
                    "iteration": it, "global_step": int(row["global_step"]), **ev})
        return row


def save_best(parts: Parts, path: Path, record: dict[str, Any]) -> None:
    """best/: the policy (save_pretrained; LoRA: the adapter) and tokenizer, with its
    evaluation in best/eval.json; written beside and then moved in place."""
    tmp, best = path / ".best.tmp", path / "best"
    shutil.rmtree(tmp, ignore_errors=True)
    parts.policy.save_pretrained(tmp)
    parts.tokenizer.save_pretrained(tmp)
    atomic_write_text(tmp / "eval.json", json.dumps(record, indent=2) + "\n")
    shutil.rmtree(best, ignore_errors=True)
    os.replace(tmp, best)


def _saved_best(path: Path, before: int) -> float:
    """The mean eval reward of best/eval.json (-inf: none, or one written after iteration
    `before`, which a resume from that checkpoint trains again), as the core's."""
    try:
        d = json.loads((path / "best" / "eval.json").read_text())
        if int(d["iteration"]) > before:
            return -math.inf
        v = float(d["reward"])
        return v if math.isfinite(v) else -math.inf
    except (OSError, ValueError, KeyError, TypeError):
        return -math.inf


def _header(path: Path) -> list[str] | None:
    """The columns of an existing CSV (None when it has none): a resumed run goes on writing
    the columns it started with (a run from before a column was added keeps its rows)."""
    try:
        with open(path, newline="") as f:
            line = f.readline()
    except OSError:
        return None
    cols = next(iter(csv.reader([line])), []) if line.strip() else []
    return cols or None


def train_hf(algo: str, cfg: GRPOConfig | PPOConfig, hcfg: HFConfig,
             echo: Callable[[str], None] = print, log_every: int = 10,
             resume: str | None = None) -> Path:
    """Train (or resume) a run; returns its folder."""
    if algo not in ("grpo", "rloo", "ppo"):
        raise ConfigError(f"unknown algorithm {algo!r}")
    cfg.validate()
    hcfg.validate(algo)
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise ConfigError("--model needs transformers: pip install 'trustrl[hf]'") from None
    funcs = resolve_rewards(hcfg.reward)
    run, state = (None, None) if not resume else _open_for_resume(resume, cfg.iterations)
    try:
        parts = build(algo, cfg, hcfg, funcs)
    except BaseException:
        if run is not None:
            run.release()
        raise
    eval_source = None
    if hcfg.eval_prompts > 0:
        rows = load_rows(hcfg.eval_data or hcfg.data, hcfg.prompt_column)
        eval_source = PromptSource(rows, parts.tokenizer, hcfg.prompt_column,
                                   hcfg.max_prompt_length, parts.tokenizer.pad_token_id,
                                   parts.io.device)
    start, elapsed = 0, 0.0
    metric_columns = columns(algo, funcs, hcfg.reward_model, bool(hcfg.generate_dtype),
                             bool(hcfg.eval_every))
    completions = completion_columns(funcs, hcfg.reward_model)
    if run is not None and state is not None:
        run.metric_columns = _header(run.path / "metrics.csv") or metric_columns
        run.tables[COMPLETIONS] = completions  # cut with metrics.csv
        start = restore(parts, state)
        run.truncate_logs(start)
        elapsed = _wall_time_at(run, start)
        saved = run.read_config()
        if saved["config"].get("iterations") != cfg.iterations:  # extended, as the core's
            saved["config"]["iterations"] = cfg.iterations
            atomic_write_text(run.path / "config.json", json.dumps(saved, indent=2) + "\n")
        run.set_status("running", start)
    else:
        config = {"algo": algo, "config": asdict(cfg), "hf": asdict(hcfg)}
        run = RunDir.create(cfg.runs_dir, Path(hcfg.model).name or "model", algo, cfg.seed,
                            config)
        run.metric_columns = metric_columns
    if hcfg.tensorboard:  # a resumed run drops the events the stopped one wrote after its
        run.open_tensorboard(purge_step=_step_after(run, start))  # checkpoint
    run_eval: dict[str, Any] = {}
    if eval_source is not None and start == 0:
        run_eval["start"] = evaluate(parts, eval_source, hcfg.eval_prompts,
                                     cfg.seed + EVAL_SEED, cfg.temperature,
                                     hcfg.max_new_tokens, hcfg.score_chunk)
        write_eval(run.path, run_eval)

    def checkpoint(it: int) -> None:
        if it % hcfg.save_every == 0 or it == cfg.iterations:
            run.flush_logs()
            run.save_checkpoint(checkpoint_state(parts, it))
            run.set_status("running", it)  # as the core's: the dashboard's iteration

    def finish() -> None:
        folder = run.path / "model"
        parts.policy.save_pretrained(folder)
        parts.tokenizer.save_pretrained(folder)
        if eval_source is not None:
            if (run.path / "eval.json").is_file():
                run_eval.update(json.loads((run.path / "eval.json").read_text()))
            run_eval["final"] = evaluate(parts, eval_source, hcfg.eval_prompts,
                                         cfg.seed + EVAL_SEED, cfg.temperature,
                                         hcfg.max_new_tokens, hcfg.score_chunk)
            write_eval(run.path, run_eval)
        run.flush_logs()
        plot_runs([run.path], run.path / "learning_curve.png",
                  curve=lm_curve(algo, "eval/reward" in run.metric_columns))

    key = "objective/scores" if algo == "ppo" else "reward"
    kl = "objective/kl" if algo == "ppo" else "kl"
    try:
        iteration = Iteration(parts, run, cfg, hcfg, eval_source, completions, start)
        return run_rl_loop(algo, iteration, run, cfg.iterations, echo, log_every, finish,
                           lambda r: f"reward {r[key]:+.3f} {kl} {r[kl]:.3f} "
                           f"kl_ref/exact {r['kl_ref/exact']:.4f} "
                           f"kl_old/k3 {r['kl_old/k3']:.4f} "
                           f"length {r['completions/mean_length']:.1f}",
                           start=start, checkpoint=checkpoint, elapsed=elapsed,
                           again=f"continue with `trustrl rlhf {algo} --resume {run.path}` "
                           "(its --reward functions given again)")
    finally:
        run.close()  # the TensorBoard file


def _open_for_resume(path: str, iterations: int) -> tuple[RunDir, dict[str, Any]]:
    """The run folder (locked) and its checkpoint; a one-line ConfigError, before any model is
    loaded, when the checkpoint has already trained more than `iterations`."""
    run = RunDir.open(path)
    try:
        state = run.load_checkpoint()
        done = state.get("iteration")
        if isinstance(done, int) and iterations < done:
            raise ConfigError(f"--iterations {iterations}: {path} has already trained {done} "
                              "iterations; give more to train it further")
    except BaseException:
        run.release()
        raise
    return run, state


def _logged_at(run: RunDir, iteration: int, key: str) -> float:
    """The number metrics.csv logged under `key` at `iteration` (0 when absent or not a
    finite number >= 0)."""
    for row in reversed(run.read_metrics()):
        if row.get("iteration") == str(iteration):
            try:
                t = float(row.get(key) or 0.0)
            except ValueError:
                return 0.0
            return t if math.isfinite(t) and t >= 0 else 0.0
    return 0.0


def _wall_time_at(run: RunDir, iteration: int) -> float:
    """The wall_time logged at `iteration`: a resumed run's clock goes on from there, as the
    core's."""
    return _logged_at(run, iteration, "wall_time")


def _step_after(run: RunDir, iteration: int) -> int | None:
    """The first TensorBoard step after `iteration`'s (None for a new run): events at it and
    after are dropped, as the core's resume drops those of the stopped process."""
    return int(_logged_at(run, iteration, "global_step")) + 1 if iteration > 0 else None


def read_run(path: str) -> tuple[str, GRPOConfig | PPOConfig, HFConfig]:
    """(algo, config, hf config) of a run folder, as data (nothing is imported)."""
    p = Path(path)
    try:
        blob = json.loads((p / "config.json").read_text())
        algo = blob["algo"]
        cfg = algo_config(algo)
        _fill(cfg, blob["config"])
        hcfg = HFConfig()
        _fill(hcfg, blob["hf"])
    except FileNotFoundError:
        raise RunError(f"{path} is not a run folder (no config.json)") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise RunError(f"{path} is not a Hugging Face RLHF run ({type(e).__name__}: {e})"
                       ) from None
    return algo, cfg, hcfg


def _fill(obj: Any, values: dict[str, Any]) -> None:
    names = {f.name for f in fields(obj)}
    for k, v in values.items():
        if k in names:
            setattr(obj, k, v)


