"""`trustrl rlhf sft | reward-model | ppo | grpo | study`.

Only the standard library at module level (the parser is built for every `trustrl` call);
torch and the training code are imported inside the handlers.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from typing import Any

from trustrl.util.errors import ConfigError

STAGES = ("sft", "reward-model", "ppo", "grpo", "rloo", "study")


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {v}")
    return v


def _number(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return v


def _cap(text: str) -> float:
    """--sampler-cap: a finite number, or none (no upper bound; inf until the config is set)."""
    return math.inf if text.strip().lower() == "none" else _number(text)


def _convert(name: str, type_name: str, text: str) -> Any:
    """A --set value as the field's type ('none' for optional fields)."""
    t = type_name.replace(" ", "")
    if t.endswith("|None") and text.lower() == "none":
        return None
    base = t.removesuffix("|None")
    try:
        if base == "int":
            return int(text)
        if base == "float":
            v = float(text)
            if not math.isfinite(v):
                raise ValueError
            return v
        if base == "bool":
            if text.lower() in ("1", "true", "yes"):
                return True
            if text.lower() in ("0", "false", "no"):
                return False
            raise ValueError
    except ValueError:
        raise ConfigError(f"--set {name}={text}: expected {base}") from None
    if base == "str":
        return text
    raise ConfigError(f"--set cannot set {name} (type {type_name})")


def apply_sets(cfg: Any, sets: list[str]) -> Any:
    """Apply KEY=VALUE strings to a config dataclass (unknown keys: a one-line error)."""
    fields = {f.name: f for f in dataclasses.fields(cfg)}
    for item in sets:
        if "=" not in item:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        key, text = item.split("=", 1)
        key = key.strip().replace("-", "_")
        if key not in fields:
            raise ConfigError(f"unknown key {key!r}; known: {', '.join(sorted(fields))}")
        setattr(cfg, key, _convert(key, str(fields[key].type), text.strip()))
    return cfg


def apply_sets_to(cfgs: list[Any], sets: list[str]) -> None:
    """KEY=VALUE strings, each to the first of the config dataclasses that has the key."""
    for item in sets:
        key = item.split("=", 1)[0].strip().replace("-", "_")
        owner = next((c for c in cfgs if key in {f.name for f in dataclasses.fields(c)}), None)
        if owner is None and "=" in item:
            known = sorted({f.name for c in cfgs for f in dataclasses.fields(c)})
            raise ConfigError(f"unknown key {key!r}; known: {', '.join(known)}")
        apply_sets(owner if owner is not None else cfgs[0], [item])


def add_hf_arguments(q: argparse.ArgumentParser, algo: str) -> None:
    """The flags of a run on a Hugging Face causal LM (`--model PATH`)."""
    h = q.add_argument_group("a Hugging Face causal LM (instead of --sft)")
    h.add_argument("--model", help="folder of a transformers causal LM and its tokenizer")
    h.add_argument("--data", help="prompts: .jsonl / .json / .parquet or a datasets folder")
    h.add_argument("--prompt-column", help="column with the prompt (default prompt)")
    if algo == "ppo":
        h.add_argument("--reward", dest="reward", action="append", metavar="MODULE:FUNCTION",
                       help="reward function(s), TRL's signature (repeatable; summed)")
        h.add_argument("--value-model", help="folder of a separate value model's trunk "
                       "(default: a value head on the policy)")
    h.add_argument("--reward-weights", type=_number, nargs="+", metavar="W",
                   help="one weight per reward function and reward model")
    h.add_argument("--lora-r", type=int, help="LoRA rank (peft); 0 = full fine-tuning")
    h.add_argument("--bf16", action="store_true", help="bf16 autocast where supported")
    h.add_argument("--generate-dtype", choices=["bf16", "float32"],
                   help="generate in this precision and record its log-probs (a sampler "
                   "that differs from pi_old; the mismatch is logged)")
    h.add_argument("--sampler-correction", metavar="MODE",
                   help="none, token_truncate, token_mask, sequence_truncate or "
                   "sequence_mask: weight the policy loss by pi_old / mu as TRL's "
                   "vllm_importance_sampling_mode: per token or per answer, truncated to "
                   "[cap-min, cap] or masked outside it (tis = token_truncate; needs "
                   "--generate-dtype)")
    h.add_argument("--sampler-cap", type=_cap, help="C_max of the weights (3.0; none: no "
                   "upper bound, as TRL's clip_max None)")
    h.add_argument("--sampler-cap-min", type=_number, help="C_min of the weights (0: none)")
    h.add_argument("--device", help="cpu (default), cuda, cuda:N or auto")
    h.add_argument("--max-new-tokens", type=_positive_int, help="answer tokens at most (64)")
    h.add_argument("--eval-data", help="held-out prompts for eval.json (default: --data)")
    h.add_argument("--eval-prompts", type=int,
                   help="prompts evaluated before and after training (default 0: none)")
    h.add_argument("--resume", metavar="RUN", help="go on with a run folder from its "
                   "checkpoint (give its --reward functions again)")


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "rlhf", help="PPO and GRPO for a tiny language model that sorts digits",
        description="RLHF at laptop scale: a ~0.1M-parameter causal LM learns to sort digits. "
        "sft -> reward-model -> ppo / grpo, each writing a run folder; `study` runs the whole "
        "comparison and writes a report.")
    sub = p.add_subparsers(dest="stage", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--seed", type=int, help="random seed (default 1)")
        q.add_argument("--runs-dir", help="where run folders go (default runs/)")
        q.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                       help="set any config key (repeatable)")
        q.add_argument("--quiet", action="store_true", help="no progress lines")

    s = sub.add_parser("sft", help="supervised fine-tuning on a sloppy teacher")
    common(s)
    s.add_argument("--steps", type=_positive_int, help="Adam steps (default 1500)")
    s.set_defaults(func=cmd_sft)

    r = sub.add_parser("reward-model", help="Bradley-Terry reward model on SFT sample pairs")
    common(r)
    r.add_argument("--sft", required=True, help="SFT run folder")
    r.add_argument("--pairs", type=_positive_int, help="prompts sampled for pairs (4000)")
    r.add_argument("--label-noise", type=_number, help="label flip probability (0.1)")
    r.set_defaults(func=cmd_reward_model)

    o = sub.add_parser("ppo", help="PPO with the KL-to-reference reward")
    common(o)
    o.add_argument("--sft", help="SFT run folder of the sort task (policy init and pi_ref)")
    o.add_argument("--reward-model", help="reward-model run folder (sort task), or with "
                   "--model a sequence-classification reward model folder")
    g = o.add_mutually_exclusive_group()
    g.add_argument("--beta", type=_number, help="fixed KL coefficient (default 0.05)")
    g.add_argument("--target-kl", type=_number,
                   help="adaptive beta (Ziegler et al.) aiming at this sequence KL in nats")
    o.add_argument("--kl-estimator",
                   help="k1 (default; in the reward only k1 optimises KL(pi || pi_ref))")
    o.add_argument("--iterations", type=_positive_int, help="PPO iterations (100)")
    o.add_argument("--no-clip", action="store_true", help="plain surrogate: no trust region")
    add_hf_arguments(o, "ppo")
    o.set_defaults(func=cmd_ppo)

    for name in ("grpo", "rloo"):
        gr = sub.add_parser(name, help="GRPO: group-relative advantages, no critic" if name ==
                            "grpo" else "RLOO: GRPO's trainer with the leave-one-out baseline "
                            "(defaults: no std scaling, beta 0.05, k1 in the reward)")
        _grpo_arguments(gr, common, name)
    _add_study_parser(sub)


def _grpo_arguments(gr: argparse.ArgumentParser, common: Any, name: str) -> None:
    """GRPO's and RLOO's flags (one trainer; RLOO changes the baseline and the defaults)."""
    common(gr)
    gr.add_argument("--sft", help="SFT run folder of the sort task (policy init and pi_ref)")
    gr.add_argument("--reward", action="append", help="sort task: gold (default), exact, "
                    "sorted or rm; with --model: MODULE:FUNCTION (repeatable; summed)")
    gr.add_argument("--reward-model", help="reward-model run folder (sort task, --reward rm), "
                    "or with --model a sequence-classification reward model folder")
    gr.add_argument("--beta", type=_number, help="KL-to-reference coefficient (default 0; "
                    "rloo 0.05)")
    gr.add_argument("--kl-estimator",
                    help="k3 (default, in the loss: gradient of KL(pi_ref || pi)), k2 (in the "
                    "loss: of KL(pi || pi_ref)) or k1 (with --kl-placement reward)")
    gr.add_argument("--kl-placement",
                    help="loss (default; per token, partial over the answer) or reward "
                    "(r - beta * sum k1: full gradient of the sequence KL(pi || pi_ref))")
    gr.add_argument("--group-size", type=int, help="answers per prompt (8)")
    gr.add_argument("--loss-type", help="seq-mean (default), token-mean or dr-grpo")
    gr.add_argument("--iterations", type=_positive_int, help="iterations (80; --model 100)")
    add_hf_arguments(gr, name)
    gr.set_defaults(func=cmd_grpo, algo=name)


def _add_study_parser(sub: Any) -> None:
    st = sub.add_parser("study", help="the whole comparison, several seeds, with a report")
    st.add_argument("--out", default="rlhf-study", help="output folder (default rlhf-study/)")
    st.add_argument("--seeds", type=int, nargs="+", help="seeds (default 1 2 3)")
    st.add_argument("--workers", type=_positive_int, help="parallel processes (default 2)")
    st.add_argument("--only", nargs="+", metavar="VARIANT", help="a subset of the variants")
    st.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="set a study key (sft_steps, rm_pairs, ppo_iterations, ...)")
    st.add_argument("--report-only", action="store_true",
                    help="rebuild REPORT.md and the figures from an existing OUT folder")
    st.set_defaults(func=cmd_study)


def _base(cfg: Any, args: argparse.Namespace, **flags: Any) -> Any:
    from trustrl.rlhf.common import replace_fields

    replace_fields(cfg, {"seed": args.seed, "runs_dir": args.runs_dir, **flags})
    return apply_sets(cfg, args.sets)


def _echo(args: argparse.Namespace):
    return (lambda s: None) if getattr(args, "quiet", False) else (lambda s: print(s, flush=True))


def cmd_sft(args: argparse.Namespace) -> int:
    from trustrl.rlhf.sft import SFTConfig, train_sft

    cfg = _base(SFTConfig(), args, steps=args.steps)
    print(f"run: {train_sft(cfg, echo=_echo(args))}")
    return 0


def cmd_reward_model(args: argparse.Namespace) -> int:
    from trustrl.rlhf.reward_model import RewardModelConfig, train_reward_model

    cfg = _base(RewardModelConfig(), args, sft=args.sft, pairs=args.pairs,
                label_noise=args.label_noise)
    print(f"run: {train_reward_model(cfg, echo=_echo(args))}")
    return 0


def cmd_hf(algo: str, args: argparse.Namespace) -> int:
    """GRPO / RLOO / PPO on a Hugging Face causal LM (`--model`), or the resume of such a run."""
    from trustrl.rlhf.hf import HFConfig
    from trustrl.rlhf.hf_run import algo_config, read_run, train_hf

    if args.sft:
        raise ConfigError("give --sft (the sort task) or --model (a Hugging Face model), "
                          "not both")
    if args.resume:
        stored, cfg, hcfg = read_run(args.resume)
        if stored != algo:
            raise ConfigError(f"{args.resume} is a {stored} run, not {algo}")
        given = args.reward or []
        if given != hcfg.reward:
            raise ConfigError(f"resume needs the run's reward functions on the command line "
                              f"again (--reward {' --reward '.join(hcfg.reward) or '...'}): a "
                              "run folder is data and never names code to import")
        if args.iterations is not None:
            cfg.iterations = args.iterations
    else:
        cfg = algo_config(algo)
        hcfg = HFConfig()
        flags = {"beta": args.beta, "kl_estimator": args.kl_estimator,
                 "iterations": args.iterations, "sampler_correction": args.sampler_correction,
                 "sampler_cap": args.sampler_cap, "sampler_cap_min": args.sampler_cap_min}
        if algo == "ppo":
            flags["target_kl"] = args.target_kl
        else:
            flags.update(kl_placement=args.kl_placement, group_size=args.group_size,
                         loss_type=args.loss_type)
        from trustrl.rlhf.common import replace_fields

        replace_fields(cfg, {"seed": args.seed, "runs_dir": args.runs_dir, **flags})
        if algo == "ppo" and args.no_clip:
            cfg.clip_eps = None
        if args.sampler_cap == math.inf:
            cfg.sampler_cap = None
        hf_flags = {"model": args.model, "data": args.data,
                    "prompt_column": args.prompt_column, "reward": args.reward,
                    "reward_weights": args.reward_weights, "reward_model": args.reward_model,
                    "value_model": getattr(args, "value_model", None), "lora_r": args.lora_r,
                    "device": args.device, "max_new_tokens": args.max_new_tokens,
                    "eval_data": args.eval_data, "eval_prompts": args.eval_prompts,
                    "bf16": True if args.bf16 else None,
                    "generate_dtype": args.generate_dtype}
        for k, v in hf_flags.items():
            if v is not None:
                setattr(hcfg, k, v)
        apply_sets_to([cfg, hcfg], args.sets)
    print(f"run: {train_hf(algo, cfg, hcfg, echo=_echo(args), resume=args.resume)}")
    return 0


def _refuse_sampler_flags(args: argparse.Namespace) -> None:
    if (args.generate_dtype or args.sampler_correction or args.sampler_cap is not None
            or args.sampler_cap_min is not None):
        raise ConfigError("--generate-dtype and --sampler-correction / --sampler-cap(-min) "
                          "are for --model runs")


def _wants_hf(args: argparse.Namespace) -> bool:
    return bool(args.model or args.resume)


def cmd_ppo(args: argparse.Namespace) -> int:
    from trustrl.rlhf.ppo import PPOConfig, train_ppo

    if _wants_hf(args):
        return cmd_hf("ppo", args)
    if not args.sft or not args.reward_model:
        raise ConfigError("ppo needs --sft RUN and --reward-model RUN (the sort task), or "
                          "--model PATH (a Hugging Face model)")
    if args.reward:
        raise ConfigError("--reward MODULE:FUNCTION is for --model runs")
    _refuse_sampler_flags(args)
    cfg = _base(PPOConfig(), args, sft=args.sft, reward_model=args.reward_model, beta=args.beta,
                target_kl=args.target_kl, kl_estimator=args.kl_estimator,
                iterations=args.iterations)
    if args.no_clip:
        cfg.clip_eps = None
    print(f"run: {train_ppo(cfg, echo=_echo(args))}")
    return 0


def cmd_grpo(args: argparse.Namespace) -> int:
    from trustrl.rlhf.grpo import GRPOConfig, train_grpo
    from trustrl.rlhf.hf_run import algo_config

    if _wants_hf(args):
        return cmd_hf(args.algo, args)
    if not args.sft:
        raise ConfigError(f"{args.algo} needs --sft RUN (the sort task) or --model PATH (a "
                          "Hugging Face model)")
    if args.reward is not None and len(args.reward) > 1:
        raise ConfigError("the sort task takes one --reward (gold, exact, sorted or rm)")
    _refuse_sampler_flags(args)
    cfg = GRPOConfig() if args.algo == "grpo" else algo_config("rloo")
    if args.algo == "rloo":  # the sort study's budgets, RLOO's baseline and leash
        cfg.iterations, cfg.prompts_per_iter, cfg.minibatch_size = 80, 16, 32
        cfg.eval_prompts = GRPOConfig().eval_prompts
    cfg = _base(cfg, args, sft=args.sft, reward=(args.reward or [None])[0],
                reward_model=args.reward_model, beta=args.beta,
                kl_estimator=args.kl_estimator, kl_placement=args.kl_placement,
                group_size=args.group_size,
                loss_type=args.loss_type, iterations=args.iterations)
    print(f"run: {train_grpo(cfg, echo=_echo(args))}")
    return 0


def cmd_study(args: argparse.Namespace) -> int:
    from pathlib import Path

    from trustrl.rlhf.common import replace_fields
    from trustrl.rlhf.study import StudyConfig, run_study, write_report

    if args.report_only:
        if not (Path(args.out) / "index.json").is_file():
            raise ConfigError(f"{args.out} has no index.json from an earlier study")
        print(f"report: {write_report(Path(args.out))}")
        return 0
    cfg = replace_fields(StudyConfig(out=args.out), {"seeds": args.seeds,
                                                    "workers": args.workers,
                                                    "variants": args.only})
    apply_sets(cfg, args.sets)
    print(f"report: {run_study(cfg, echo=lambda s: print(s, flush=True))}")
    return 0
