"""Presets: tuned settings per (algorithm, env), applied under the config file, --set and the
flags (defaults < preset < file < --set < flags). Two sources:

- `chapter` (presets/chapter.py): the chapter's lab and the blog's settings on CartPole-v1
  and Pendulum-v1, for every algorithm (tested and reproduced);
- `zoo` (presets/zoo.py): rl-baselines3-zoo's tuned PPO and TRPO settings for the classic
  control, Box2D, MuJoCo (v4, v5) and Atari (NoFrameskip-v4) envs, each number's source
  named there;
- `cleanrl` (presets/cleanrl.py): CleanRL's ppo_atari.py setting for the ALE/...-v5 games.

A run asks for one with `--preset` (or the config key `preset`): `auto` (the default: the
chapter's where there is one, else the zoo's, else CleanRL's, else none; for the PPO preset
of an env measured, the budget rule of presets/budget.py: the preset or trustrl's defaults),
`chapter`,
`zoo`, `cleanrl` or `none`. The run's config.json records the one applied as `SOURCE:ENV`, or
null, and why (`preset_reason`).
"""

from __future__ import annotations

import textwrap
from typing import Any

from trustrl.settings.presets.budget import AUTO_PRESET_AT, Choice, decide
from trustrl.settings.presets.chapter import PRESETS
from trustrl.settings.presets.cleanrl import CLEANRL_PRESETS
from trustrl.settings.presets.zoo import ENTRIES, ZOO_PRESETS
from trustrl.util.errors import ConfigError

SOURCES = ("chapter", "zoo", "cleanrl")
REQUESTS = ("auto", "chapter", "zoo", "cleanrl", "none")
"""What `--preset` takes; config.json's `chapter:ENV` / `zoo:ENV` is taken too."""


def table(source: str) -> dict[tuple[str, str], dict[str, Any]]:
    """The presets of one source by (algo, env id)."""
    return {"chapter": PRESETS, "zoo": ZOO_PRESETS, "cleanrl": CLEANRL_PRESETS}[source]


def unusable(source: str, algo: str, env_id: str) -> str | None:
    """Why a preset cannot run in trustrl yet, or None."""
    entry = ENTRIES.get((algo, env_id)) if source == "zoo" else None
    return entry.unusable if entry is not None else None


def _parse_request(request: Any, env_id: str) -> str:
    if request is None:
        return "none"
    if not isinstance(request, str):
        raise ConfigError(f"preset must be one of {', '.join(REQUESTS)}, got "
                          f"{str(request)[:40]!r} ({type(request).__name__})")
    text = request.strip()
    source, sep, env = text.partition(":")
    source = source.strip().lower()
    if text == "" or source in ("none", "null"):
        source = "none"
    if source not in REQUESTS or (sep and source not in SOURCES):
        raise ConfigError(f"unknown preset {text[:60]!r}: choose {', '.join(REQUESTS)} "
                          "(`trustrl presets` lists them)")
    if sep and env.strip() != env_id:
        raise ConfigError(f"preset {text[:80]!r} is for {env.strip()[:60]}, and this run's "
                          f"env is {env_id}; use --preset {source}, auto or none")
    return source


def _missing(source: str, algo: str, env_id: str) -> str:
    others = sorted(a for (a, e) in table(source) if e == env_id)
    if others:
        return (f"no {source} preset for {algo} on {env_id}: the {source} presets for "
                f"{env_id} are for {', '.join(others)}")
    return (f"no {source} preset for {env_id} (`trustrl presets` lists the envs that have "
            "one); use --preset auto or none")


def auto_source(algo: str, env_id: str) -> str | None:
    """The source of the preset auto looks at first for (algo, env_id): the first of SOURCES
    with a usable preset for it, or None."""
    for s in SOURCES:
        if (algo, env_id) in table(s) and not unusable(s, algo, env_id):
            return s
    return None


def choose(algo: str, env_id: str, request: Any = "auto", total_steps: int | None = None,
           defaults_batch: int = 0) -> Choice:
    """The preset a run asks for, given its total_steps (None: the preset's own) and the batch
    of trustrl's defaults: its label 'SOURCE:ENV' or None, its config values, why, and a
    one-line note when the budget is far below the preset's (trustrl.settings.presets.budget).
    ConfigError (one line) for an unknown name, a preset that does not exist for this
    algorithm and env, or one not usable yet."""
    source = _parse_request(request, env_id)
    if source == "none":
        return Choice(None, {}, "--preset none: trustrl's defaults")
    first = auto_source(algo, env_id)
    if source == "auto":
        if first is not None:
            return decide(algo, env_id, "auto", first, dict(table(first)[(algo, env_id)]),
                          total_steps, defaults_batch, first=True)
        return Choice(None, {}, f"auto: no preset for {algo} on {env_id}, trustrl's defaults")
    if (algo, env_id) not in table(source):
        raise ConfigError(_missing(source, algo, env_id))
    why = unusable(source, algo, env_id)
    if why:
        raise ConfigError(f"the {source} preset for {algo} on {env_id} is not usable yet: {why}")
    return decide(algo, env_id, str(request).strip(), source,
                  dict(table(source)[(algo, env_id)]), total_steps, defaults_batch,
                  first=source == first)


def select_preset(algo: str, env_id: str, request: Any = "auto", total_steps: int | None = None
                  ) -> tuple[str | None, dict[str, Any]]:
    """`choose`'s label and config values."""
    c = choose(algo, env_id, request, total_steps)
    return c.label, c.values


def check_label(label: Any, env_id: str) -> None:
    """A config's `preset`: None or a label 'SOURCE:ENV', as make_config records it
    (ConfigError otherwise). The env is not compared with env_id: an edited config.json's env
    is resume's to refuse, with its own message."""
    if label is None:
        return
    source, sep, env = str(label).partition(":")
    if not isinstance(label, str) or not sep or source not in SOURCES or not env.strip():
        raise ConfigError(f"preset {str(label)[:60]!r} is not the record of a preset (null, "
                          f"'chapter:ENV', 'zoo:ENV' or 'cleanrl:ENV'); choose a preset with "
                          "--preset or --set preset=auto|chapter|zoo|cleanrl|none")


def summary() -> list[str]:
    """Per source and algorithm, the envs that have a preset (for --help), wrapped."""
    lines: list[str] = []
    chapter_envs = sorted({e for (_, e) in PRESETS})
    chapter_algos = list(dict.fromkeys(a for (a, _) in PRESETS))
    lines.append(f"  chapter ({', '.join(chapter_algos)}): {', '.join(chapter_envs)}")
    cleanrl_envs = sorted({e for (_, e) in CLEANRL_PRESETS})
    lines.append(f"  cleanrl (ppo): {', '.join(cleanrl_envs)}")
    for algo in dict.fromkeys(a for (a, _) in ZOO_PRESETS):
        usable = [e for (a, e) in ZOO_PRESETS if a == algo and not unusable("zoo", a, e)]
        not_yet = [e for (a, e) in ZOO_PRESETS if a == algo and unusable("zoo", a, e)]
        lines.append(f"  zoo ({algo}): {', '.join(usable)}")
        if not_yet:
            lines.append(f"  zoo ({algo}), written out but not usable yet: {', '.join(not_yet)}")
    return [w for line in lines
            for w in textwrap.wrap(line, 96, subsequent_indent="      ", break_on_hyphens=False)]


__all__ = ["CLEANRL_PRESETS", "PRESETS", "ZOO_PRESETS", "SOURCES", "REQUESTS", "select_preset",
           "choose", "Choice", "AUTO_PRESET_AT", "auto_source",
           "check_label", "summary", "table", "unusable"]
