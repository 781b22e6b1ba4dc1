"""`trustrl rlhf sft | reward-model | ppo | grpo | study`.

Only the standard library at module level (the parser is built for every `trustrl` call);
torch and the training code are imported inside the handlers.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from typing import Any

from trustrl.errors import ConfigError

STAGES = ("sft", "reward-model", "ppo", "grpo", "study")


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
    o.add_argument("--sft", required=True, help="SFT run folder (policy init and pi_ref)")
    o.add_argument("--reward-model", required=True, help="reward-model run folder")
    g = o.add_mutually_exclusive_group()
    g.add_argument("--beta", type=_number, help="fixed KL coefficient (default 0.05)")
    g.add_argument("--target-kl", type=_number,
                   help="adaptive beta (Ziegler et al.) aiming at this sequence KL in nats")
    o.add_argument("--kl-estimator",
                   help="k1 (default; in the reward only k1 optimises KL(pi || pi_ref))")
    o.add_argument("--iterations", type=_positive_int, help="PPO iterations (100)")
    o.add_argument("--no-clip", action="store_true", help="plain surrogate: no trust region")
    o.set_defaults(func=cmd_ppo)

    gr = sub.add_parser("grpo", help="GRPO: group-relative advantages, no critic")
    common(gr)
    gr.add_argument("--sft", required=True, help="SFT run folder (policy init and pi_ref)")
    gr.add_argument("--reward", help="gold (default), exact, sorted or rm")
    gr.add_argument("--reward-model", help="reward-model run folder (for --reward rm)")
    gr.add_argument("--beta", type=_number, help="KL-to-reference coefficient (default 0)")
    gr.add_argument("--kl-estimator",
                    help="k3 (default, in the loss: gradient of KL(pi_ref || pi)), k2 (in the "
                    "loss: of KL(pi || pi_ref)) or k1 (with --kl-placement reward)")
    gr.add_argument("--kl-placement",
                    help="loss (default; per token, partial over the answer) or reward "
                    "(r - beta * sum k1: full gradient of the sequence KL(pi || pi_ref))")
    gr.add_argument("--group-size", type=int, help="answers per prompt (8)")
    gr.add_argument("--loss-type", help="seq-mean (default), token-mean or dr-grpo")
    gr.add_argument("--iterations", type=_positive_int, help="iterations (80)")
    gr.set_defaults(func=cmd_grpo)

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


def cmd_ppo(args: argparse.Namespace) -> int:
    from trustrl.rlhf.ppo import PPOConfig, train_ppo

    cfg = _base(PPOConfig(), args, sft=args.sft, reward_model=args.reward_model, beta=args.beta,
                target_kl=args.target_kl, kl_estimator=args.kl_estimator,
                iterations=args.iterations)
    if args.no_clip:
        cfg.clip_eps = None
    print(f"run: {train_ppo(cfg, echo=_echo(args))}")
    return 0


def cmd_grpo(args: argparse.Namespace) -> int:
    from trustrl.rlhf.grpo import GRPOConfig, train_grpo

    cfg = _base(GRPOConfig(), args, sft=args.sft, reward=args.reward,
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
