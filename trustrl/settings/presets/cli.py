"""`trustrl presets [ENV] [--algo ALGO]`: the envs with a preset, or one env's presets with
their values and sources. Standard library only at module level."""

from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "presets", help="list the tuned presets (the chapter's, rl-baselines3-zoo's, CleanRL's)",
        description="Without ENV: every env that has a preset, and for which algorithms. With "
        "ENV: its presets' config values, their source and what the mapping left out. "
        "`trustrl train --env ENV` applies the preset (--preset auto|chapter|zoo|cleanrl|none).")
    p.add_argument("env", nargs="?", help="an env id, e.g. LunarLander-v3")
    p.add_argument("--algo", help="only this algorithm's presets")
    p.set_defaults(func=cmd_presets)


def _value(v: object) -> str:
    if isinstance(v, tuple):
        return ",".join(str(x) for x in v)
    return str(v)


def cmd_presets(args: argparse.Namespace) -> int:
    from trustrl.settings.config import CONFIGS
    from trustrl.settings.presets import SOURCES, table, unusable
    from trustrl.settings.presets.cleanrl import CLEANRL_SOURCE
    from trustrl.settings.presets.zoo import ENTRIES
    from trustrl.util.errors import TrustrlError

    if args.algo is not None and args.algo not in CONFIGS:
        raise TrustrlError(f"unknown algorithm {args.algo!r}; choose from {', '.join(CONFIGS)}")
    keys = [(s, a, e) for s in SOURCES for (a, e) in table(s)
            if args.algo in (None, a) and args.env in (None, e)]
    if not keys:
        what = f"{args.algo} on {args.env}" if args.algo and args.env else args.env or args.algo
        raise TrustrlError(f"no preset for {what}; `trustrl presets` lists them")
    if args.env is None:
        envs: dict[str, dict[str, list[str]]] = {}
        for s, a, e in keys:
            mark = "" if not unusable(s, a, e) else " (not usable yet)"
            envs.setdefault(e, {}).setdefault(s, []).append(a + mark)
        width = max(len(e) for e in envs)
        print(f"{'env':<{width}}  presets (--preset auto takes the chapter's, else the "
              "zoo's, else CleanRL's; for PPO on the envs measured a budget rule: docs/presets.md)")
        for e, by_source in envs.items():
            print(f"{e:<{width}}  " + "; ".join(f"{s}: {', '.join(algos)}"
                                               for s, algos in by_source.items()))
        print("\n`trustrl presets ENV` shows an env's values and their sources.")
        return 0
    for s, a, e in keys:
        print(f"{s} preset for {a} on {e} (--preset {s}):")
        if s == "zoo":
            entry = ENTRIES[(a, e)]
            print(f"  source: {entry.source}")
            for note in entry.notes:
                print(f"  note: {note}")
        elif s == "cleanrl":
            print(f"  source: {CLEANRL_SOURCE}; trustrl/settings/presets/cleanrl.py says what "
                  "differs")
        else:
            print("  source: trustrl/settings/presets/chapter.py (the chapter's and the blog's "
                  "settings)")
        why = unusable(s, a, e)
        if why:
            print(f"  not usable yet: {why}")
        print("  " + " ".join(f"{k}={_value(v)}" for k, v in table(s)[(a, e)].items()))
    return 0
