"""The tune SPEC: one algorithm on one env, the config keys to search and how to score a trial.

A SPEC is a YAML (or JSON) mapping, the sweep SPEC's keys where they mean the same thing:

    name: cartpole-ppo             # optional; default: the file's stem
    algo: ppo
    env: CartPole-v1
    seed: 0                        # every trial's seed (default 0)
    total_steps: 20000             # every trial's budget (else the preset's)
    trials: 20                     # trials in the study, in all (a resume adds up to it)
    common: {eval_every: 2}        # config keys of every trial
    space:                         # the searched config keys, one distribution each:
      lr: {log-float: [1.0e-4, 1.0e-2]}   # float, log-float: [low, high]
      n_epochs: {int: [3, 10]}            # int: [low, high] or [low, high, step]; log-int
      num_envs: {categorical: [4, 8]}     # numbers, strings or booleans
    first:                         # optional: points the study tries first, in this order
      - {lr: 3.0e-4, n_epochs: 10} #   (e.g. the preset's values); keys left out are sampled
    objective: final               # final: the last evaluation's mean return; mean: the mean
                                   # over all of the run's periodic evaluations
    direction: maximize            # or minimize
    sampler: {tpe: {seed: 0, startup_trials: 5}}       # tpe (default) or random
    pruner: {median: {startup_trials: 2, warmup_evals: 1}}  # median (default), halving, none
    resources: {cpus: 1, gpus: 0}  # what each trial asks of a Ray cluster

A trial's config is resolved like a sweep trial's: dataclass defaults < the (algo, env) preset <
common < the trial's sampled values < seed and budget. Every key is checked, each end of every
distribution (each choice of a categorical) resolved into a config, and the env made once before
anything runs: a bad SPEC fails with one line naming where in the file the problem is.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trustrl.sweep.spec import (
    SpecError,
    _budget,
    _check_overrides,
    _mapping,
    _short,
    _unknown,
    check_algo,
    parse_resources,
    read_spec_file,
    spec_name,
)
from trustrl.util.errors import ConfigError

TOP_KEYS = ("name", "algo", "env", "seed", "total_steps", "trials", "common", "space", "first",
            "objective", "direction", "sampler", "pruner", "resources")
KINDS = ("float", "log-float", "int", "log-int", "categorical")
OBJECTIVES = ("final", "mean")
DIRECTIONS = ("maximize", "minimize")
SAMPLERS = {"tpe": ("seed", "startup_trials", "multivariate"), "random": ("seed",)}
PRUNERS = {"median": ("startup_trials", "warmup_evals"),
           "halving": ("min_evals", "reduction_factor"), "none": ()}
MAX_STUDY_TRIALS = 5_000
"""Trials of one study (each one a run folder; the study's sweep.json lists them all)."""
MAX_CHOICES = 1_000


@dataclass(frozen=True)
class Dist:
    """One searched key: kind in KINDS; low/high (and step) for numbers, choices otherwise."""

    kind: str
    low: float | int | None = None
    high: float | int | None = None
    step: int | None = None
    choices: tuple[Any, ...] = ()

    def optuna(self) -> Any:
        """The Optuna distribution (optuna imported here: an optional dependency)."""
        from optuna.distributions import (
            CategoricalDistribution,
            FloatDistribution,
            IntDistribution,
        )

        if self.kind == "categorical":
            return CategoricalDistribution(list(self.choices))
        if self.kind in ("int", "log-int"):
            return IntDistribution(int(self.low), int(self.high),  # type: ignore[arg-type]
                                   log=self.kind == "log-int", step=self.step or 1)
        return FloatDistribution(float(self.low), float(self.high),  # type: ignore[arg-type]
                                 log=self.kind == "log-float")

    def holds(self, v: Any) -> bool:
        """Whether `v` is a value of this distribution (a point of `first`)."""
        if self.kind == "categorical":
            return any(type(v) is type(c) and v == c for c in self.choices)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return False
        if self.kind.endswith("int") and not isinstance(v, int):
            return False
        return self.low <= v <= self.high  # type: ignore[operator]

    def ends(self) -> list[Any]:
        """The values checked before anything runs: both ends, or every choice."""
        return list(self.choices) if self.kind == "categorical" else [self.low, self.high]


@dataclass
class TuneSpec:
    """A validated tune SPEC (plain data: `as_dict` is what tune.json keeps)."""

    name: str
    algo: str
    env_id: str
    seed: int
    total_steps: int | None
    trials: int
    common: dict[str, Any]
    space: dict[str, Dist]
    first: list[dict[str, Any]] = field(default_factory=list)
    objective: str = "final"
    direction: str = "maximize"
    sampler: dict[str, Any] = field(default_factory=lambda: {"tpe": {}})
    pruner: dict[str, Any] = field(default_factory=lambda: {"median": {}})
    resources: dict[str, float] = field(default_factory=lambda: {"cpus": 1.0, "gpus": 0.0})

    def config(self, params: dict[str, Any]) -> dict[str, Any]:
        """A trial's resolved config (as config.json holds it) for sampled `params`;
        ConfigError when trustrl refuses the combination."""
        from trustrl.settings.config import config_to_dict, make_config

        flags = {"seed": self.seed, "total_steps": self.total_steps, "env_id": self.env_id}
        d = config_to_dict(make_config(self.algo, self.env_id, dict(self.common), dict(params),
                                       flags))
        d["runs_dir"] = ""  # set by the trial to its own folder
        return d

    def best_file(self, params: dict[str, Any]) -> dict[str, Any]:
        """The keys of a `trustrl train --config` file that resolves to the trial's config:
        the env, budget, seed and preset, the common keys and the trial's values."""
        d = self.config(params)
        keys = ["env_id", "preset", "total_steps", "seed", *self.common, *params]
        return {k: d[k] for k in dict.fromkeys(keys)}

    def as_dict(self) -> dict[str, Any]:
        space = {}
        for key, dist in self.space.items():
            if dist.kind == "categorical":
                space[key] = {"categorical": list(dist.choices)}
            else:
                ends = [dist.low, dist.high] + ([dist.step] if dist.step else [])
                space[key] = {dist.kind: ends}
        return {"name": self.name, "algo": self.algo, "env": self.env_id, "seed": self.seed,
                "total_steps": self.total_steps, "trials": self.trials, "common": self.common,
                "space": space, "first": self.first, "objective": self.objective,
                "direction": self.direction,
                "sampler": self.sampler, "pruner": self.pruner, "resources": self.resources}


# ----- parts --------------------------------------------------------------------------------
def _number(v: Any, where: str) -> float:
    """A number; a string that reads as one too (YAML reads 1e-4, without a dot, as a string)."""
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            pass
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise SpecError(f"{where} must be a finite number, got {_short(v)}")
    return v


def _int(v: Any, where: str, low: int = 0, high: int = 10**9) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
        raise SpecError(f"{where} must be an integer in [{low:,}, {high:,}], got {_short(v)}")
    return v


def parse_dist(value: Any, where: str) -> Dist:
    """{kind: [low, high]} (int also [low, high, step]) or {categorical: [choices]}."""
    if not isinstance(value, dict) or len(value) != 1:
        raise SpecError(f"{where} must be {{kind: [...]}}, kind one of {', '.join(KINDS)} "
                        f"(e.g. {{log-float: [1.0e-4, 1.0e-2]}}); got {_short(value)}")
    kind, args = next(iter(value.items()))
    kind = str(kind)
    if kind not in KINDS:
        close = difflib.get_close_matches(kind, KINDS, n=2)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise SpecError(f"unknown distribution {_short(kind)} in {where}{hint}; "
                        f"choose from {', '.join(KINDS)}")
    where = f"{where}.{kind}"
    if not isinstance(args, list):
        raise SpecError(f"{where} must be a list, got {_short(args)}")
    if kind == "categorical":
        if not 1 <= len(args) <= MAX_CHOICES:
            raise SpecError(f"{where} must list 1 to {MAX_CHOICES:,} choices")
        for c in args:
            if c is not None and not isinstance(c, (bool, int, float, str)):
                raise SpecError(f"{where}: choice {_short(c)} is not a number, string or "
                                "boolean (Optuna's choices are plain values)")
        if len({repr(c) for c in args}) != len(args):
            raise SpecError(f"{where} repeats a choice: {_short(args)}")
        return Dist(kind, choices=tuple(args))
    integer = kind.endswith("int")
    if len(args) not in ((2, 3) if kind == "int" else (2,)):
        form = "[low, high] or [low, high, step]" if kind == "int" else "[low, high]"
        raise SpecError(f"{where} must be {form}, got {_short(args)}")
    low: float
    high: float
    if integer:
        low, high = (_int(a, where, -10**12, 10**12) for a in args[:2])
        step = _int(args[2], f"{where} step", 1) if len(args) == 3 else None
    else:
        low, high = (_number(a, where) for a in args)
        step = None
    if not low < high:
        raise SpecError(f"{where}: low {_short(low)} must be below high {_short(high)}")
    if kind.startswith("log") and low <= 0:
        raise SpecError(f"{where}: a log scale needs low > 0, got {_short(low)}")
    return Dist(kind, low, high, step)


def _one_of(value: Any, names: dict[str, tuple[str, ...]], where: str,
            default: str) -> dict[str, Any]:
    """`name` or {name: {settings}} -> {name: {settings}}, settings keys checked."""
    if value is None:
        value = default
    if isinstance(value, str):
        value = {value: {}}
    if not isinstance(value, dict) or len(value) != 1:
        raise SpecError(f"{where} must be one of {', '.join(names)} (or {{name: {{settings}}}})"
                        f", got {_short(value)}")
    name, settings = next(iter(value.items()))
    if name not in names:
        raise _unknown(name, names, where)
    settings = _mapping(settings, f"{where}.{name}")
    for key, v in settings.items():
        if key not in names[name]:
            raise _unknown(key, names[name] or ("(none)",), f"{where}.{name}")
        if key == "multivariate":
            if not isinstance(v, bool):
                raise SpecError(f"{where}.{name}.{key} must be true or false, got {_short(v)}")
        else:
            low = 0 if key in ("seed", "startup_trials", "warmup_evals") else 1
            _int(v, f"{where}.{name}.{key}", low, 2**31 - 1)
    return {name: settings}


def _choice(value: Any, allowed: tuple[str, ...], where: str, default: str) -> str:
    v = default if value is None else value
    if v not in allowed:
        raise _unknown(v, allowed, where) if isinstance(v, str) else SpecError(
            f"{where} must be one of {', '.join(allowed)}, got {_short(v)}")
    return str(v)


# ----- the whole SPEC -------------------------------------------------------------------------
def load_tune_spec(path: str | Path, check_envs: bool = True) -> TuneSpec:
    """Read and validate a tune SPEC file (nothing runs)."""
    return parse_tune_spec(read_spec_file(path, "tune spec"), default_name=Path(path).stem,
                           check_envs=check_envs)


def parse_tune_spec(data: dict[str, Any], default_name: str = "study",
                    check_envs: bool = True) -> TuneSpec:
    """Validate a tune SPEC mapping; every distribution's ends are resolved into configs."""
    from trustrl.settings.config import MAX_SEED

    name = spec_name(data, TOP_KEYS, default_name)
    if len(name) > 100:
        raise SpecError(f"name is {len(name)} characters long (at most 100)")
    algo = data.get("algo", "ppo")
    check_algo(algo, "algo")
    env_id = data.get("env")
    if not isinstance(env_id, str) or not env_id.strip():
        raise SpecError("env is missing: name one env id (e.g. env: CartPole-v1)")
    seed = _int(data.get("seed", 0), "seed", 0, MAX_SEED)
    budget = _budget(data.get("total_steps"), "total_steps")
    if "trials" not in data:
        raise SpecError("trials is missing: how many trials the study runs in all")
    trials = _int(data["trials"], "trials", 1, MAX_STUDY_TRIALS)
    common = _mapping(data.get("common"), "common")
    _check_overrides(algo, common, "common")
    space_raw = _mapping(data.get("space"), "space")
    if not space_raw:
        raise SpecError("space is empty or missing: name at least one config key to search")
    _check_overrides(algo, space_raw, "space")
    both = sorted(set(space_raw) & set(common))
    if both:
        raise SpecError(f"{both[0]} is both in common and in space: keep it in one")
    space = {k: parse_dist(v, f"space.{k}") for k, v in space_raw.items()}
    first = _first(data.get("first"), space, trials)
    objective = _choice(data.get("objective"), OBJECTIVES, "objective", "final")
    direction = _choice(data.get("direction"), DIRECTIONS, "direction", "maximize")
    sampler = _one_of(data.get("sampler"), SAMPLERS, "sampler", "tpe")
    pruner = _one_of(data.get("pruner"), PRUNERS, "pruner", "median")
    res = parse_resources(data.get("resources"))
    spec = TuneSpec(name, algo, env_id, seed, budget, trials, common, space, first, objective,
                    direction, sampler, pruner, res)

    if check_envs:
        from trustrl.envs.make import check_env

        check_env(env_id)  # EnvError (one line, with close matches) before anything runs
    try:
        base = spec.config({})
    except ConfigError as e:
        raise SpecError(f"{env_id} / {algo} with common: {e}") from None
    if "none" not in pruner and not base["eval_every"]:
        raise SpecError("the pruner needs periodic evaluations: set eval_every >= 1 in common "
                        "(or pruner: none)")
    for key, dist in space.items():
        for value in dist.ends():
            try:
                spec.config({key: value})
            except ConfigError as e:
                raise SpecError(f"space.{key}: the value {_short(value)}: {e}") from None
    for i, point in enumerate(first):
        try:
            spec.config(point)
        except ConfigError as e:
            raise SpecError(f"first[{i}]: {e}") from None
    return spec


def _first(value: Any, space: dict[str, Dist], trials: int) -> list[dict[str, Any]]:
    """The points tried first: a list of {key: value}, keys of the space, values in it."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise SpecError(f"first must be a list of {{key: value}} points, got {_short(value)}")
    if len(value) > trials:
        raise SpecError(f"first lists {len(value)} points for a study of {trials} trials")
    points = []
    for i, point in enumerate(value):
        point = _mapping(point, f"first[{i}]")
        for key, v in point.items():
            if key not in space:
                raise _unknown(key, list(space), f"first[{i}] (a point of the space)")
            if space[key].kind.endswith("float") and isinstance(v, str):
                v = point[key] = _number(v, f"first[{i}].{key}")
            if not space[key].holds(v):
                raise SpecError(f"first[{i}].{key} = {_short(v)} is not a value of "
                                f"space.{key}")
        points.append(point)
    return points
