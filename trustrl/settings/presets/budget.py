"""`--preset auto` and the run's budget: a preset is tuned for its own budget (a zoo preset for
the zoo's n_timesteps), and at a small part of it its batch may leave too few updates (issue
57). The rule, measured in docs/presets.md (benchmarks/preset_budget.py: the preset auto looks
at first, the chapter's on CartPole-v1 and Pendulum-v1 and else the zoo's, against trustrl's
defaults at 10%, 30% and 100% of the preset's budget, seeds 1-3 to derive, 4-6 to check):

    for (algo, env) in AUTO_PRESET_AT, auto takes the preset it looks at first at a budget of
    f (total_steps over the preset's own total_steps; a run without --total-steps: 1) when,
    at the largest measured fraction not above f, the preset led the defaults; below the
    least measured fraction, and where it did not lead, trustrl's defaults, unless the budget
    is less than one batch of the defaults (then the preset, which fits).

"Led" is the derivation's criterion: the preset's median on seeds 1-3 at least the defaults'
median plus the preset's own spread (max - min over the seeds), so that three seeds' noise does
not swap a setting that was measured as good for one that was not. The rule is per env and per
band of budget, since a preset's worth at a part of its budget differs from env to env and from
budget to budget (on Hopper-v5 the zoo's preset led at 10% and not at 30%, on Acrobot-v1 it led
at no fraction; the chapter's Pendulum-v1 preset led at 10% and 30% and not at 100%, where the
two tie). It covers the envs of AUTO_PRESET_ENVS, those measured. Out of the rule: the zoo's
PPO presets of the envs not measured (Humanoid, HumanoidStandup, BipedalWalkerHardcore, the -v4
MuJoCo ids, ...), a preset that auto does not look at first (`--preset zoo` on CartPole-v1),
CleanRL's, the presets of the other algorithms and the zoo's Atari presets (image
observations): none was measured against the defaults at a part of its budget, so `auto` takes
them as before. Every preset applied at less than its budget where auto would not take it is
said in one line (`Choice.note`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

AUTO_PRESET_AT: dict[str, dict[str, dict[float, bool]]] = {"ppo": {
    "Acrobot-v1": {0.1: False, 0.3: False, 1.0: False},
    "Ant-v5": {0.1: False, 0.3: False},
    "BipedalWalker-v3": {0.1: False},
    "CartPole-v1": {0.1: False, 0.3: True, 1.0: True},
    "HalfCheetah-v5": {0.1: True},
    "Hopper-v5": {0.1: True, 0.3: False},
    "InvertedDoublePendulum-v5": {0.1: False, 0.3: False},
    "InvertedPendulum-v5": {0.1: True, 0.3: True},
    "LunarLander-v3": {0.1: False, 0.3: False, 1.0: False},
    "LunarLanderContinuous-v3": {0.1: False, 0.3: False, 1.0: True},
    "MountainCar-v0": {0.1: False, 0.3: False, 1.0: False},
    "MountainCarContinuous-v0": {0.3: False, 1.0: False},
    "Pendulum-v1": {0.1: True, 0.3: True, 1.0: False},
    "Reacher-v5": {0.1: False, 0.3: False},
    "Swimmer-v5": {0.1: True, 0.3: True},
    "Walker2d-v5": {0.1: False, 0.3: False}}}
"""Per algorithm and env: per measured fraction of the budget of the preset auto looks at first
(the chapter's where there is one, else the zoo's), whether the preset led the defaults there
(a fraction where the defaults could not run is no verdict: MountainCarContinuous' 10%). The
values are benchmarks/preset_budget.py's `derive_rule` on the committed results (a test checks
that the two agree)."""

AUTO_PRESET_ENVS: frozenset[str] = frozenset(AUTO_PRESET_AT["ppo"])
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
    return (first and env_id in AUTO_PRESET_AT.get(algo, {})
            and not values.get("atari_wrappers"))


def fraction(total_steps: int | None, values: dict[str, Any]) -> float:
    """The run's budget as a fraction of the preset's (1.0 without a budget of its own)."""
    budget = values.get("total_steps")
    if total_steps is None or not budget:
        return 1.0
    return total_steps / budget


def band(at: dict[float, bool], f: float) -> float | None:
    """Of the measured fractions `at` (an entry of AUTO_PRESET_AT, or derive_rule's), the one
    whose verdict holds at a budget of f: the largest not above f (None: f is below the least
    measured)."""
    below = [m for m in at if m <= f + 1e-9]
    return max(below) if below else None


def takes(at: dict[float, bool], f: float) -> bool:
    """Whether the rule `at` takes the preset at a budget of f: where it passed at the band's
    measured fraction (never below the least measured)."""
    m = band(at, f)
    return m is not None and at[m]


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
    at = AUTO_PRESET_AT[algo][env_id] if in_rule else {}
    m, taken = band(at, f), takes(at, f)
    # a budget below the preset's where auto would not take it (out of the rule: any)
    far = f < 1 and not taken
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
    if taken:
        return Choice(label, values, f"auto: {label}; total_steps is {_pct(f)} of its budget, "
                      f"and at {_pct(m)} it passed the rule's test against trustrl's defaults "
                      f"({DOCS})", None)
    where = f"total_steps {total:,} is {_pct(f)} of {label}'s budget {budget:,}"
    why = (f"below the least fraction measured ({_pct(min(at))})"
           if m is None else
           f"and at {_pct(m)} it did not pass the rule's test against trustrl's defaults")
    if total is not None and total < defaults_batch:
        reason = (f"auto: {label}; total_steps {total:,} is {_pct(f)} of its budget, "
                  f"{why}, but less than one batch of trustrl's defaults "
                  f"({defaults_batch:,} steps)")
        return Choice(label, values, reason,
                      f"{where}: auto kept {label}, since trustrl's defaults need a batch of "
                      f"{defaults_batch:,} steps")
    reason = (f"auto: trustrl's defaults, not {label}: total_steps {total:,} is "
              f"{_pct(f)} of its budget {budget:,}, {why} ({DOCS})")
    # without --total-steps the run keeps the preset's budget
    kept = {} if total_steps is not None else {"total_steps": budget}
    # the line is for a budget below the preset's; at its budget or more, config.json's
    # preset_reason says what was taken
    return Choice(None, kept, reason,
                  f"{where}: auto took trustrl's defaults, as its budget rule says ({DOCS}); "
                  f"--preset {source} forces the preset" if f < 1 else None)


def spans(at: dict[float, bool]) -> list[tuple[float, float | None]]:
    """The budgets where auto takes a preset, from its measured verdicts `at`: (from, to)
    fractions, `to` excluded (None: no end)."""
    out: list[tuple[float, float | None]] = []
    start = None
    for m in sorted(at):
        if at[m] and start is None:
            start = m
        elif not at[m] and start is not None:
            out.append((start, m))
            start = None
    if start is not None:
        out.append((start, None))
    return out


def rule_text() -> str:
    """The rule in one sentence (--help, docs/settings.md, docs/presets.md)."""
    from trustrl.settings.presets.chapter import PRESETS

    rules = AUTO_PRESET_AT["ppo"]
    never = sorted(e for e, at in rules.items() if not spans(at))
    chapter = sorted(e for e in rules if ("ppo", e) in PRESETS)
    first = (f"the chapter's on {' and '.join(chapter)}, else the zoo's" if chapter
             else "the zoo's")
    taken = []
    for env in sorted(e for e in rules if spans(rules[e])):
        taken.append(" and ".join(
            f"from {_pct(a)}" + (f" to below {_pct(b)}" if b is not None else "")
            for a, b in spans(rules[env])) + f" on {env}")
    parts = []
    if taken:
        parts.append("it takes the preset " + ", ".join(taken[:-1])
                     + (" and " if len(taken) > 1 else "") + taken[-1]
                     + " (no --total-steps: the preset's budget, 100%), trustrl's defaults at "
                     "the other budgets")
    if never:
        parts.append(f"on {', '.join(never)} it takes the defaults in place of the preset "
                     "at every budget, the preset's own included (no --total-steps: the "
                     "defaults at the preset's budget)")
    return (f"per env where the PPO preset auto looks at first ({first}) was measured "
            "against trustrl's defaults at 10%, 30% and 100% of its budget, auto takes the "
            "preset at a budget where its median was at least the defaults' plus its own "
            "spread over seeds (a budget between two measured ones: the lower one's verdict; "
            "below the least measured: the defaults): "
            + "; ".join(parts) + "; in both cases the preset when the budget is less than "
            "one batch of the defaults. Elsewhere auto takes the preset as before, saying so "
            "when the budget is below a zoo preset's; --preset chapter or zoo takes that "
            f"preset (the rule and the table it is derived from: {DOCS})")
