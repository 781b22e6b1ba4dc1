"""`--preset auto` and the run's budget: a preset is tuned for its own budget (a zoo preset for
the zoo's n_timesteps), and at a small part of it its batch may leave too few updates (issue
57). The rule, measured in docs/presets.md (benchmarks/preset_budget.py: the preset auto looks
at first, the chapter's on CartPole-v1 and Pendulum-v1 and else the zoo's, against trustrl's
defaults at 10%, 30% and 100% of the preset's budget, 3 seeds):

    auto takes the preset it looks at first for (algo, env) in AUTO_PRESET_FROM only when
    total_steps is at least AUTO_PRESET_FROM[algo][env] of the preset's own total_steps (a
    run without --total-steps runs the preset's budget: 100%); below, trustrl's defaults,
    unless the budget is less than one batch of the defaults (then the preset, which fits).

The rule is per env, since a preset's worth at a part of its budget differs from env to env
(on Hopper-v5 the zoo's preset learned more than the defaults at 10%, on Acrobot-v1 less at
100%), and it covers the envs of AUTO_PRESET_ENVS, those measured. Out of the rule: the zoo's
PPO presets of the envs not measured (HalfCheetah, BipedalWalker, Atari, ...), a preset that
auto does not look at first (`--preset zoo` on CartPole-v1), CleanRL's, the presets of the
other algorithms and the zoo's Atari presets (image observations): none was measured against
the defaults at a part of its budget, so `auto` takes them as before. Every preset applied at
less than the rule's fraction of its budget is said in one line (`Choice.note`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

AUTO_PRESET_FROM: dict[str, dict[str, float]] = {"ppo": {
    "Acrobot-v1": math.inf, "CartPole-v1": 0.3, "Hopper-v5": 0.1, "LunarLander-v3": math.inf,
    "LunarLanderContinuous-v3": math.inf, "MountainCar-v0": math.inf,
    "MountainCarContinuous-v0": math.inf, "Pendulum-v1": 0.1}}
"""Per algorithm and env: the least fraction of the budget of the preset auto looks at first
(the chapter's where there is one, else the zoo's) at which `auto` takes it (inf: at no
budget). The values are benchmarks/preset_budget.py's `derive_rule` on the committed results
(a test checks that the two agree): per env, the least measured fraction from which, at that
and every larger measured fraction, the preset's median on seeds 1-3 was at least the
defaults'."""

AUTO_PRESET_ENVS: frozenset[str] = frozenset(AUTO_PRESET_FROM["ppo"])
"""The envs whose first PPO preset was measured against trustrl's defaults (docs/presets.md;
a test checks that these are the envs of the committed results): the rule applies to them
alone, since a measurement on one env says nothing of another env's preset."""

DOCS = "docs/presets.md"


@dataclass(frozen=True)
class Choice:
    """What a run's preset request resolved to."""

    label: str | None
    """'SOURCE:ENV' or None (trustrl's defaults)."""
    values: dict[str, Any]
    reason: str
    """Why, one sentence (config.json's preset_reason)."""
    note: str | None = None
    """One line for the run to print when its budget is far below the preset's, else None."""


def ruled(algo: str, first: bool, values: dict[str, Any], env_id: str) -> bool:
    """Whether auto's budget rule covers this preset: the one auto looks at first (`first`)
    for a measured algorithm on a measured env, not an Atari one."""
    return (first and env_id in AUTO_PRESET_FROM.get(algo, {})
            and not values.get("atari_wrappers"))


def fraction(total_steps: int | None, values: dict[str, Any]) -> float:
    """The run's budget as a fraction of the preset's (1.0 without a budget of its own)."""
    budget = values.get("total_steps")
    if total_steps is None or not budget:
        return 1.0
    return total_steps / budget


def least_fraction(algo: str, env_id: str, ruled: bool) -> float:
    """Below this fraction of a preset's budget a run is 'far below' it (the note): the rule's
    fraction for the env (for a preset out of the rule: the whole budget), at most the whole
    budget."""
    return min(1.0, AUTO_PRESET_FROM[algo][env_id]) if ruled else 1.0


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%" if x >= 0.01 else f"{100 * x:.2g}%"


def decide(algo: str, env_id: str, request: str, source: str, values: dict[str, Any],
           total_steps: int | None, defaults_batch: int, first: bool) -> Choice:
    """The choice for a preset `source` that exists for (algo, env_id), given the run's
    total_steps (None: the preset's), the batch of trustrl's defaults and whether `source`
    is the one auto looks at first for (algo, env_id)."""
    label = f"{source}:{env_id}"
    f = fraction(total_steps, values)
    budget = values.get("total_steps")
    total = total_steps if total_steps is not None else budget
    in_rule = ruled(algo, first, values, env_id)
    far = f < least_fraction(algo, env_id, in_rule)
    where = (f"total_steps {total:,} is {_pct(f)} of {label}'s budget {budget:,}"
             if far and total and budget else "")
    if request != "auto":
        reason = f"--preset {request} asked for {label}"
        auto = (f"; --preset auto would take trustrl's defaults here ({DOCS})"
                if in_rule else "")
        note = f"{where}: {label} applied as asked{auto}" if where else None
        return Choice(label, values, reason, note)
    if not in_rule:
        reason = f"auto: {label}, the first preset for {algo} on {env_id}"
        # said for a zoo preset (tuned for the zoo's budget), not for the chapter's lab
        # settings of the other algorithms or CleanRL's, whose budgets are their texts'
        note = (f"{where}: auto kept {label} (its budget rule covers the PPO presets "
                f"measured against the defaults only; {DOCS}); --preset none runs trustrl's "
                "defaults" if where and source == "zoo" else None)
        return Choice(label, values, reason, note)
    rule = AUTO_PRESET_FROM[algo][env_id]
    if f >= rule:
        return Choice(label, values, f"auto: {label}; total_steps is {_pct(f)} of its budget, "
                      f"at least the {_pct(rule)} from which auto takes it", None)
    where = f"total_steps {total:,} is {_pct(f)} of {label}'s budget {budget:,}"
    from_ = (f"below the {_pct(rule)} from which auto takes it"
             if rule <= 1 else "and auto takes it at no budget")
    if total is not None and total < defaults_batch:
        reason = (f"auto: {label}; total_steps {total:,} is {_pct(f)} of its budget, "
                  f"{from_}, but less than one batch of trustrl's defaults "
                  f"({defaults_batch:,} steps)")
        return Choice(label, values, reason,
                      f"{where}: auto kept {label}, since trustrl's defaults need a batch of "
                      f"{defaults_batch:,} steps")
    reason = (f"auto: trustrl's defaults, not {label}: total_steps {total:,} is "
              f"{_pct(f)} of its budget {budget:,}, {from_} ({DOCS})")
    # without --total-steps the run keeps the preset's budget (a rule above 100% gets here)
    kept = {} if total_steps is not None else {"total_steps": budget}
    # the line is for a budget below the preset's; at its budget or more, config.json's
    # preset_reason says what was taken
    return Choice(None, kept, reason,
                  f"{where}: auto took trustrl's defaults, as its budget rule says ({DOCS}); "
                  f"--preset {source} forces the preset" if f < 1 else None)


def rule_text() -> str:
    """The rule in one sentence (--help, docs/settings.md, docs/presets.md)."""
    from trustrl.settings.presets.chapter import PRESETS

    rules = AUTO_PRESET_FROM["ppo"]
    never = sorted(e for e, f in rules.items() if f > 1)
    from_ = sorted((f, e) for e, f in rules.items() if f <= 1)
    chapter = sorted(e for e in rules if ("ppo", e) in PRESETS)
    first = (f"the chapter's on {' and '.join(chapter)}, else the zoo's" if chapter
             else "the zoo's")
    parts = []
    if from_:
        parts.append("auto takes it from " + ", ".join(
            f"{_pct(f)} of its budget on {e}" for f, e in from_)
            + " (no --total-steps: the preset's budget), trustrl's defaults below that")
    if never:
        parts.append(f"on {', '.join(never)} it takes the defaults in place of the preset "
                     "at every budget, the preset's own included (no --total-steps: the "
                     "defaults at the preset's budget)")
    return (f"per env where the PPO preset auto looks at first ({first}) was measured "
            "against trustrl's defaults: " + "; ".join(parts) + "; in both cases the preset "
            "when the budget is less than one batch of the defaults. Elsewhere auto takes the "
            "preset as before, saying so when the budget is below a zoo preset's; --preset "
            "chapter or zoo takes that preset (the rule and the table it is derived from: "
            f"{DOCS})")
