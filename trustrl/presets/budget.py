"""`--preset auto` and the run's budget: a zoo preset is tuned for the zoo's n_timesteps, and
at a small part of it its large batch leaves too few updates (issue 57). The rule, measured in
docs/presets.md (benchmarks/preset_budget.py: each zoo preset against trustrl's defaults at
10%, 30% and 100% of the zoo's budget, 3 seeds):

    auto takes a zoo preset of an algorithm in AUTO_ZOO_FROM only when total_steps is at least
    AUTO_ZOO_FROM[algo] of the preset's own total_steps (a run without --total-steps runs the
    preset's budget: 100%); below, trustrl's defaults, unless the budget is less than one
    batch of the defaults (then the preset, which fits).

The rule covers the envs of AUTO_ZOO_ENVS, those measured. Out of the rule: the zoo's PPO
presets of the envs not measured (MuJoCo, BipedalWalker, Atari, ...), the
chapter's and CleanRL's presets, the zoo's presets of the other algorithms and its Atari
presets (image observations): none was measured against the defaults at a part of its
budget, so `auto` takes them as before. Every preset applied at less than the
rule's fraction of its budget is said in one line (`Choice.note`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

AUTO_ZOO_FROM: dict[str, float] = {"ppo": math.inf}
"""Per algorithm: the least fraction of a zoo preset's budget at which `auto` takes it (inf: at
no budget). The value is benchmarks/preset_budget.py's `derive_rule` on the committed results
(a test checks that the two agree): on Acrobot-v1 at 100% of the zoo's budget the defaults
learned more than the preset beyond their spread, so no measured fraction qualifies."""

AUTO_ZOO_ENVS: frozenset[str] = frozenset({"Acrobot-v1", "LunarLander-v3",
                                           "LunarLanderContinuous-v3", "MountainCar-v0",
                                           "MountainCarContinuous-v0"})
"""The envs whose PPO zoo preset was measured against trustrl's defaults (docs/presets.md; a
test checks that these are the envs of the committed results): the rule is derived from them
and applies to them alone, since a measurement on classic control and Box2D says nothing of a
MuJoCo preset's."""

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


def ruled(algo: str, source: str, values: dict[str, Any], env_id: str) -> bool:
    """Whether auto's budget rule covers this preset (a zoo preset of a measured algorithm on
    a measured env, not an Atari one)."""
    return (source == "zoo" and algo in AUTO_ZOO_FROM and env_id in AUTO_ZOO_ENVS
            and not values.get("atari_wrappers"))


def fraction(total_steps: int | None, values: dict[str, Any]) -> float:
    """The run's budget as a fraction of the preset's (1.0 without a budget of its own)."""
    budget = values.get("total_steps")
    if total_steps is None or not budget:
        return 1.0
    return total_steps / budget


def least_fraction(algo: str) -> float:
    """Below this fraction of a preset's budget a run is 'far below' it (the note): the rule's
    fraction, at most the whole budget."""
    return min(1.0, AUTO_ZOO_FROM.get(algo, AUTO_ZOO_FROM["ppo"]))


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%" if x >= 0.01 else f"{100 * x:.2g}%"


def decide(algo: str, env_id: str, request: str, source: str, values: dict[str, Any],
           total_steps: int | None, defaults_batch: int) -> Choice:
    """The choice for a preset `source` that exists for (algo, env_id), given the run's
    total_steps (None: the preset's) and the batch of trustrl's defaults."""
    label = f"{source}:{env_id}"
    f = fraction(total_steps, values)
    budget = values.get("total_steps")
    total = total_steps if total_steps is not None else budget
    far = f < least_fraction(algo)
    where = (f"total_steps {total:,} is {_pct(f)} of {label}'s budget {budget:,}"
             if far and total and budget else "")
    if request != "auto":
        reason = f"--preset {request} asked for {label}"
        auto = (f"; --preset auto would take trustrl's defaults here ({DOCS})"
                if ruled(algo, source, values, env_id) else "")
        note = f"{where}: {label} applied as asked{auto}" if where else None
        return Choice(label, values, reason, note)
    if not ruled(algo, source, values, env_id):
        reason = f"auto: {label}, the first preset for {algo} on {env_id}"
        # said for a zoo preset (tuned for the zoo's budget), not for the chapter's lab
        # settings or CleanRL's, whose budgets are their texts' (issue 57 is the zoo's)
        note = (f"{where}: auto kept {label} (its budget rule covers the PPO zoo presets "
                f"measured against the defaults only; {DOCS}); --preset none runs trustrl's "
                "defaults" if where and source == "zoo" else None)
        return Choice(label, values, reason, note)
    rule = AUTO_ZOO_FROM[algo]
    if f >= rule:
        return Choice(label, values, f"auto: {label}; total_steps is {_pct(f)} of its budget, "
                      f"at least the {_pct(rule)} from which auto takes a zoo preset", None)
    where = f"total_steps {total:,} is {_pct(f)} of {label}'s budget {budget:,}"
    from_ = (f"below the {_pct(rule)} from which auto takes a zoo preset"
             if rule <= 1 else "and auto takes a zoo preset at no budget")
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
                  "--preset zoo forces the preset" if f < 1 else None)


def rule_text() -> str:
    """The rule in one sentence (--help, docs/settings.md, docs/presets.md)."""
    rule = AUTO_ZOO_FROM["ppo"]
    if rule > 1:
        return ("on the envs where PPO's zoo preset was measured against trustrl's defaults ("
                f"{', '.join(sorted(AUTO_ZOO_ENVS))}), auto takes the defaults in place of "
                "the zoo preset at every budget, the zoo's own included (no --total-steps: "
                "the defaults at the preset's budget), unless the budget is less than one "
                "batch of the defaults; elsewhere it takes the preset as before, saying so "
                "when the budget is below the preset's; --preset zoo takes the zoo's (the "
                f"rule and the table it is derived from: {DOCS})")
    return (f"on the envs measured ({', '.join(sorted(AUTO_ZOO_ENVS))}), auto takes a PPO "
            f"zoo preset only when total_steps is at "
            f"least {_pct(rule)} of the preset's own total_steps (no --total-steps: the "
            "preset's budget); below, trustrl's defaults, unless the budget is less than one "
            f"batch of them (the rule and the table it is derived from: {DOCS})")
