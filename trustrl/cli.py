"""trustrl command line: train | eval | plot | reproduce | lab.

Every user error ends as one line on stderr and exit status 2; nothing on disk is removed.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import sys
import textwrap
import typing
from pathlib import Path
from typing import Any

from trustrl.lab.commands import add_parser as add_lab_parser
from trustrl.lab.commands import cmd_lab
from trustrl.util.errors import TrustrlError
from trustrl.util.progress import mode_word

COMMAND_MODULES: tuple[str, ...] = ("trustrl.sweep.cli", "trustrl.demo.cli", "trustrl.rlhf.cli",
                                    "trustrl.settings.presets.cli")
"""Modules that add a subcommand: each has add_parser(subparsers), which registers its parser
and sets `func` (args -> exit status) with set_defaults. Imported when the parser is built, so
they import only the standard library at module level (keeps `trustrl --help` fast)."""


def _train_help() -> str:
    from trustrl.settings.config import CONFIGS, RunConfig, describe
    from trustrl.settings.presets import summary
    from trustrl.settings.presets.budget import rule_text

    lines = ["config keys (set with --set key=value or in a --config TOML/JSON/YAML file):",
             f"\n[every algorithm] {RunConfig.__doc__}", describe(RunConfig)]
    shown: dict[tuple[str, ...], str] = {}
    for algo, cls in CONFIGS.items():
        doc = " ".join((cls.__doc__ or "").split())
        own = describe(cls, skip=RunConfig)
        key = tuple(sorted(f.name for f in dataclasses.fields(cls)))
        if key in shown:
            lines.append(f"\n[{algo}] {doc}\n  (same keys as {shown[key]})")
            continue
        shown[key] = algo
        lines.append(f"\n[{algo}] {doc}")
        lines.append(own)
    lines.append("\npresets (applied before --config and --set; --preset auto takes the "
                 "chapter's, else the zoo's; `trustrl presets ENV` shows the values):")
    lines.extend(textwrap.wrap(rule_text() + ".", 96, initial_indent="  ",
                               subsequent_indent="  ", break_on_hyphens=False))
    lines.extend(summary())
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    """argparse with its usage errors as one line (`trustrl CMD: error: ...`, exit 2), like
    every other bad input; --help still shows the usage."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="trustrl",
        description="Trust-region RL (PPO, TRPO, NPG) on Gymnasium and batched torch envs: "
        "instrumented and resumable; demos, sweeps and RLHF.",
    )
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser(
        "train", help="train an agent (default: PPO on CartPole-v1)",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_train_help(),
        description="Train an agent and write a run folder runs/<env>__<algo>__<seed>__<time>/.",
    )
    t.add_argument("algo", nargs="?", default="ppo",
                   help="ppo (default), ppo-penalty, trpo, npg, ppo-noclip, ppo-dualclip, spo "
                        "or pg")
    t.add_argument("--env", dest="env_id", help="Gymnasium env id (default CartPole-v1)")
    t.add_argument("--total-steps", type=str, help="environment steps to train for")
    t.add_argument("--seed", type=str, help="random seed")
    t.add_argument("--seeds", metavar="LIST",
                   help="train a population of seeds in one process, e.g. 0-255 or 1,2,5 "
                   "(batched torch envs: implies --vector torch)")
    t.add_argument("--vector", help="auto (default: torch where it runs, i.e. the five "
                   "classic-control envs and the two without velocities, every algorithm, "
                   "memoryless policies; else sync), sync, async, or torch "
                   "(batched envs, the whole iteration on --device)")
    t.add_argument("--device", help="cpu (default) or cuda")
    t.add_argument("--preset", help="auto (default: the chapter's preset for the algorithm "
                   "and env, else rl-baselines3-zoo's, else CleanRL's, else none; for PPO on "
                   "the envs measured a budget rule, see the end of this help), chapter, "
                   "zoo, cleanrl or none; config.json records the one applied and why "
                   "(`trustrl presets` lists them)")
    t.add_argument("--config", help="TOML, JSON or YAML file of config keys")
    t.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config key (repeatable)")
    t.add_argument("--runs-dir", help="where run folders go (default runs/)")
    t.add_argument("--init-from", metavar="RUN", help="fine-tune: start from a trained agent's "
                   "weights and observation statistics (a run folder or agent.pt; the config "
                   "key init_from)")
    t.add_argument("--resume", metavar="RUN", help="continue a stopped run from its checkpoint; "
                   "with --total-steps N, train a stopped or finished run on to N steps")
    t.add_argument("--trust-checkpoint", "--trust-files", dest="trust_files",
                   action="store_true",
                   help="with --resume or --init-from: read a run or agent file not signed "
                   "with your key (from someone else) although it names code to import or "
                   "holds pickled envs; only for files you trust: that code can do anything")
    t.add_argument("--quiet", action="store_true", help="no progress output")

    e = sub.add_parser("eval", help="evaluate a trained agent (as its run evaluated: greedy "
                       "unless its eval_deterministic is false)")
    e.add_argument("run", help="run folder or agent file")
    e.add_argument("--episodes", type=int, default=10)
    mode = e.add_mutually_exclusive_group()
    mode.add_argument("--stochastic", action="store_true",
                      help="sample the actions (seeded: the same agent, the same returns)")
    mode.add_argument("--greedy", action="store_true", help="act at the policy's mode")
    e.add_argument("--seed", type=int, default=None, help="seed of the first episode")
    e.add_argument("--env", dest="env_id", help="env id (default: the run's)")
    e.add_argument("--trust-files", action="store_true",
                   help="import the code a run or agent file not signed with your key names "
                   "(its env, wrappers, network); only for files you trust")

    pl = sub.add_parser("plot", help="plot learning curves of one or more runs (trustrl train "
                        "runs, or RLHF runs of one kind: SFT, reward model, PPO, GRPO / RLOO)")
    pl.add_argument("runs", nargs="+", help="run folders")
    pl.add_argument("--out", help="PNG path (default: learning_curve.png or runs/compare.png)")
    add_lab_parser(sub)

    rp = sub.add_parser("reproduce", help="recompute every table and figure of the seed texts",
                        description="Recompute the seeds' numbers, compare each with the number "
                        "the text states, and write DIR/REPORT.md with figures. Exit status 1 "
                        "when a claim differs.")
    rp.add_argument("--only", nargs="+", metavar="ID", help="claim ids (or id prefixes)")
    rp.add_argument("--quick", action="store_true",
                    help="reduced seed counts and budgets (minutes, for CI)")
    rp.add_argument("--out", default="reproduction", help="output folder (default reproduction/)")
    rp.add_argument("--list", action="store_true", help="list the claims and exit")
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_parser(sub)
    return p


def cmd_train(args: argparse.Namespace) -> int:
    from trustrl.settings.config import (
        check_population,
        check_seed_list,
        check_writable_dir,
        load_config_file,
        make_config,
        parse_sets,
        preset_choice,
    )
    from trustrl.training.train import resume, start

    if args.resume:
        if (args.config or args.sets or args.env_id is not None
                or args.seed is not None or args.seeds or args.vector or args.device
                or args.runs_dir is not None or args.preset is not None
                or args.init_from is not None):
            raise TrustrlError("--resume takes the run's own config (and --total-steps to "
                               "extend it); drop the other options")
        total = None
        if args.total_steps is not None:
            from trustrl.settings.config import RANGES, _parse_value

            total = _parse_value("total_steps", int, args.total_steps)
            if not RANGES["total_steps"].holds(total):
                raise TrustrlError(f"--total-steps must be {RANGES['total_steps'].text()}, "
                                   f"got {total}")
        _check_resume_folder(Path(args.resume))
        _trust_if(args.trust_files)
        result = resume(args.resume, progress=not args.quiet, total_steps=total)
    elif args.trust_files and args.init_from is None:
        raise TrustrlError("--trust-files goes with --resume RUN or --init-from RUN")
    else:
        _trust_if(args.trust_files)
        seeds = None
        if args.seeds:
            from trustrl.training.train import parse_seeds

            if args.seed is not None:
                raise TrustrlError("give --seed or --seeds, not both")
            check_seed_list(args.seeds)  # bounds first: a range is not expanded before
            seeds = parse_seeds(args.seeds)
            if args.vector not in (None, "auto", "torch"):
                raise TrustrlError("--seeds runs on the batched collector: drop --vector "
                                   f"{args.vector} (or use a sweep for Gymnasium envs)")
            args.vector = "torch"
        flags = {"env_id": args.env_id, "total_steps": args.total_steps, "seed": args.seed,
                 "runs_dir": args.runs_dir, "vector": args.vector, "device": args.device,
                 "preset": args.preset, "init_from": args.init_from}
        layers = (load_config_file(args.config) if args.config else {}, parse_sets(args.sets),
                  {k: v for k, v in flags.items() if v is not None})
        cfg = make_config(args.algo, args.env_id, *layers, cli=True)
        note = preset_choice(args.algo, cfg.env_id, *layers).note
        check_writable_dir(cfg.runs_dir, "runs_dir")
        if seeds is not None:
            check_population(cfg, len(seeds))
        trainer = start(cfg, progress=not args.quiet, seeds=seeds)  # train's first half
        if note:  # the budget is far below the preset's: say what was done, once the run
            print(f"trustrl: {note}", file=sys.stderr)  # is checked (a bad one: its error)
        result = trainer.run(None)
    return _report(result)


def _trust_if(asked: bool) -> None:
    """--trust-files: this process and its workers read files not signed with the user's key
    (trustrl.util.safeio.trust_files)."""
    if asked:
        from trustrl.util.safeio import trust_files

        trust_files()


def _check_resume_folder(path: Path) -> None:
    """A folder to resume: it exists and its config.json is a JSON object naming a known
    algorithm, with valid values (the run's own loader checks the rest)."""
    from trustrl.settings.config import config_from_dict

    if not path.is_dir():
        raise TrustrlError(f"--resume {path}: no such run folder")
    cfg_path = path / "config.json"
    if not cfg_path.is_file():
        raise TrustrlError(f"{path} is not a trustrl run folder (no config.json)")
    config_from_dict(_read_json(cfg_path))


def _read_json(path: Path) -> Any:
    """JSON from a file trustrl wrote, or a one-line error (unreadable, not UTF-8, malformed)."""
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise TrustrlError(f"cannot read {path}: {msg[:120]}") from None


def _report(result: Any) -> int:
    ev = result.final_eval
    print(f"run: {result.run_dir}")
    if not ev:
        print("stopped before the end: continue with `trustrl train --resume "
              f"{result.run_dir}`")
    elif len(result.member_dirs) <= 1:
        print(f"{mode_word(ev.get('greedy'))} evaluation over {ev['episodes']} episodes: "
              f"{ev['mean']:.1f} ± {ev['std']:.1f}")
    else:
        print(f"{len(result.member_dirs)} seeds, {mode_word(ev.get('greedy'))} evaluation over "
              f"{ev['episodes']} episodes each: mean {ev['mean']:.1f} (seeds from "
              f"{ev['min']:.1f} to {ev['max']:.1f}); per seed in {result.run_dir / 'summary.json'}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from trustrl.collect.evaluate import (
        DEFAULT_EVAL_MAX_STEPS,
        EVAL_SEED_OFFSET,
        evaluate,
        evaluation_env,
    )
    from trustrl.envs.factory import EnvFactory
    from trustrl.envs.make import check_compatible
    from trustrl.records.agent import Agent
    from trustrl.settings.config import MAX_EVAL_EPISODES, MAX_SEED, RANGES, check_type

    if not 1 <= args.episodes <= MAX_EVAL_EPISODES:
        raise TrustrlError(f"--episodes must be in [1, {MAX_EVAL_EPISODES:,}], got "
                           f"{args.episodes}")
    if args.seed is not None and not 0 <= args.seed <= MAX_SEED:
        raise TrustrlError(f"--seed must be in [0, {MAX_SEED:,}], got {args.seed}")
    if args.env_id is not None and not args.env_id.strip():
        raise TrustrlError("--env is empty: give an env id, or leave it out for the run's own")
    if not Path(args.run).exists():
        raise TrustrlError(f"{args.run}: no such run folder or agent file")
    saved: dict[str, Any] = {}
    cfg_path = Path(args.run) / "config.json"
    if cfg_path.is_file():
        saved = _read_json(cfg_path)
        if not isinstance(saved, dict):
            raise TrustrlError(f"{cfg_path} does not hold a config (a JSON object)")
    elif Path(args.run).is_file() and (Path(args.run).parent / "config.json").is_file():
        cfg_path = Path(args.run).parent / "config.json"  # agent.pt in its run folder
        saved = _read_json(cfg_path)
        saved = saved if isinstance(saved, dict) else {}
    _trust_if(args.trust_files)
    if saved:  # before anything is imported: code named by a run of someone else's is data
        from trustrl.records.runs import check_env_code
        from trustrl.util.safeio import OPT_IN

        check_env_code(cfg_path.parent, saved, OPT_IN)
    agent = Agent.load(args.run)  # its own signature covers the code it names
    env_id: Any = args.env_id or agent.spec.env_id
    bare = saved.get("atari_wrappers") is False  # an Atari id trained without preprocessing
    if env_id != agent.spec.env_id:  # the agent's network fits the env's spaces
        check_compatible(agent.spec, EnvFactory(env_id) if bare else evaluation_env(env_id))
    elif saved.get("env_kwargs") or saved.get("wrappers") or ":" in env_id:
        # the run's env: its class or function, kwargs and wrappers (checked above)
        env_id = _run_env({"env_id": env_id, **saved}, cfg_path)
    if bare and isinstance(env_id, str):
        env_id = EnvFactory(env_id)  # evaluate() then leaves it bare
    seed = args.seed
    if seed is None:
        base = saved.get("seed", 0)
        check_type(f"seed in {cfg_path}", int, base)
        seed = base + EVAL_SEED_OFFSET
    max_steps = saved.get("eval_max_steps", DEFAULT_EVAL_MAX_STEPS)
    check_type(f"eval_max_steps in {cfg_path}", int, max_steps)
    if not RANGES["eval_max_steps"].holds(max_steps):
        raise TrustrlError(f"eval_max_steps in {cfg_path} must be "
                           f"{RANGES['eval_max_steps'].text()}, got {max_steps}")
    deterministic = saved.get("eval_deterministic", True)
    check_type(f"eval_deterministic in {cfg_path}", bool, deterministic)
    deterministic = (deterministic or args.greedy) and not args.stochastic
    returns = evaluate(agent, env_id, args.episodes, deterministic=deterministic, seed=seed,
                       max_steps=max_steps)
    env_id = getattr(env_id, "label", env_id)
    print(f"{env_id} {mode_word(deterministic)} over {len(returns)} episodes: "
          f"{returns.mean():.2f} ± {returns.std():.2f} (min {returns.min():.1f}, "
          f"max {returns.max():.1f})")
    return 0


def _run_env(saved: dict[str, Any], cfg_path: Path) -> Any:
    """The EnvFactory a run's config.json records (env_id, env_kwargs, wrappers, the Atari
    keys)."""
    from types import SimpleNamespace

    from trustrl.envs.factory import env_factory
    from trustrl.settings.config import _parse_value

    env_id = saved.get("env_id")
    if not isinstance(env_id, str):
        raise TrustrlError(f"env_id in {cfg_path} must be a string, got {env_id!r:.40}")
    return env_factory(SimpleNamespace(
        env_id=env_id, env_kwargs=_parse_value("env_kwargs", dict, saved.get("env_kwargs")),
        wrappers=_parse_value("wrappers", list, saved.get("wrappers")),
        atari_wrappers=saved.get("atari_wrappers") is not False,
        atari_episodic_life=saved.get("atari_episodic_life") is not False))


def cmd_plot(args: argparse.Namespace) -> int:
    from trustrl.records.plotting import RETURN_CURVE, check_figure_path, metrics_header, plot_runs

    for r in args.runs:
        if not (Path(r) / "metrics.csv").is_file():
            raise TrustrlError(f"{r} is not a run folder with metrics.csv")
    out = args.out or (Path(args.runs[0]) / "learning_curve.png" if len(args.runs) == 1
                       else Path(args.runs[0]).parent / "compare.png")
    check_figure_path(out)
    heads = [metrics_header(r) for r in args.runs]
    curve = RETURN_CURVE
    if not all(RETURN_CURVE.y in h for h in heads):  # RLHF runs, told by their columns
        from trustrl.rlhf.curves import curves_of

        drawn = [RETURN_CURVE if RETURN_CURVE.y in h else c
                 for h, c in zip(heads, curves_of(heads), strict=True)]
        kinds = list(dict.fromkeys(c.kind if c else "unknown columns" for c in drawn))
        if len(kinds) > 1:
            raise TrustrlError(f"these runs draw different curves ({', '.join(kinds)}): "
                               "plot them apart")
        curve = drawn[0] or RETURN_CURVE  # unknown columns: plot_runs says which is missing
    print(plot_runs(args.runs, out, curve=curve))
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    import time

    import torch

    from trustrl.experiments.report import run_claims, select, write_report

    torch.set_num_threads(1)  # the claims' tensors are tiny; threads only add overhead

    claims = select(args.only)
    if args.list:
        for c in claims:
            print(f"{c.id:32s} {c.cost:6s} {c.source}: {c.title}")
        return 0
    t0 = time.perf_counter()
    try:
        outcomes = run_claims(claims, Path(args.out), args.quick,
                              echo=lambda s: print(s, flush=True))
    except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM: the one line says what is left
        e.left = (f"no report written; the figures made so far are under "  # type: ignore[attr-defined]
                  f"{Path(args.out) / 'figures'}: run it again (--only the claims not shown)")
        raise
    report = write_report(outcomes, Path(args.out), args.quick, time.perf_counter() - t0)
    open_ = [o.claim.id for o in outcomes if o.result.unexplained]
    print(f"report: {report}")
    if open_:
        print(f"{len(open_)} claim(s) differ without an explanation: {', '.join(open_)}",
              file=sys.stderr)
        return 1
    return 0


POSITIONALS = {"algo", "run", "runs", "spec", "dir", "command", "task", "folder", "path"}
"""Argument names written without dashes in messages."""


def _refuse_empty_strings(args: argparse.Namespace) -> None:
    """An option or argument given as an empty string (`--config ""`, `--resume ""`, `--env ""`)
    is an error, never silently the default."""
    for name, value in vars(args).items():
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, str) and not v.strip() for v in values):
            flag = {"env_id": "--env", "sets": "--set"}.get(
                name, name if name in POSITIONALS else "--" + name.replace("_", "-"))
            raise TrustrlError(f"{flag} is empty")


def _import_from_cwd() -> None:
    """Envs, wrappers and factories named 'module:Name' import from the current folder, as
    under `python -m trustrl` (searched after the installed packages, so that a stray file
    there cannot shadow a module trustrl needs)."""
    import os

    try:
        cwd = os.getcwd()
    except OSError:  # the folder was removed
        return
    if "" not in sys.path and cwd not in sys.path:
        sys.path.append(cwd)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _import_from_cwd()
    commands = {"train": cmd_train, "eval": cmd_eval, "plot": cmd_plot, "lab": cmd_lab,
                "reproduce": cmd_reproduce}
    from trustrl.util.children import terminate_like_ctrl_c

    terminate_like_ctrl_c()  # `kill PID`: every command stops as on Ctrl-C, says what it left
    try:
        _refuse_empty_strings(args)
        func = getattr(args, "func", None) or commands[args.command]
        return func(args)
    except TrustrlError as e:
        print(f"trustrl: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        from trustrl.training.train import Terminated

        run, left = getattr(e, "run_dir", None), getattr(e, "left", None)
        what = "terminated" if isinstance(e, Terminated) else "interrupted"
        if left is not None:  # what the command left and how to go on
            print(f"trustrl: {what}; {left}", file=sys.stderr)
        elif run is not None:  # printed with --quiet too: the way back to the run
            print(f"trustrl: {what}; the run is saved as stopped in {run}: continue with "
                  f"`trustrl train --resume {run}`", file=sys.stderr)
        else:
            print(f"trustrl: {what}", file=sys.stderr)
        return 143 if isinstance(e, Terminated) else 130
    except BrokenPipeError:  # `trustrl ... | head`: the reader left; say nothing more
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except RecursionError:
        print("trustrl: error: input nested too deeply to read", file=sys.stderr)
        return 2
    except MemoryError:
        print("trustrl: error: out of memory (an input or setting too large for this machine)",
              file=sys.stderr)
        return 2
    except Exception as e:
        run, left = getattr(e, "run_dir", None), getattr(e, "left", None)
        if left is not None:  # an error during a run that says what it left
            msg = (str(e).splitlines() or [""])[0] or type(e).__name__
            print(f"trustrl: error: {type(e).__name__}: {msg[:200]}; {left}", file=sys.stderr)
            return 2
        if run is None and isinstance(e, OSError):  # a full or read-only disk, say
            where = f" ({e.filename})" if e.filename else ""
            print(f"trustrl: error: {e.strerror or e}{where}", file=sys.stderr)
            return 2
        if run is None:
            raise
        # an error during a run (an env that raises, say): the folder keeps its rows and
        # last checkpoint with status "failed"
        msg = (str(e).splitlines() or [""])[0] or type(e).__name__
        print(f"trustrl: error: the run failed ({type(e).__name__}: {msg[:200]}); {run} is "
              f"kept with status 'failed': fix the cause, then `trustrl train --resume {run}`",
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
