"""The sweep SPEC: which algorithms, envs, seeds and settings, parsed into fixed trials.

A SPEC is a YAML (or JSON) mapping:

    name: classic-control          # optional; default: the file's stem
    seeds: [1, 2, 3]               # a list of ints, or "1..10" (both ends included)
    total_steps: 100000            # optional budget of every trial (else the preset's)
    algos: [ppo, trpo]             # a list, or a mapping algo -> config overrides
    envs:                          # a list of ids, or a mapping id -> settings:
      CartPole-v1:
        seeds: 1..10               #   this env's seeds (default: the top-level seeds)
        total_steps: 100000        #   this env's budget
        threshold: 500             #   for steps-to-threshold in the report
        overrides: {eval_every: 4} #   config keys for every algorithm on this env
        algos: {ppo: {lr: 0.001}}  #   config keys for one algorithm on this env
    common: {tensorboard: false}   # config keys for every trial
    grid: {clip_eps: [0.1, 0.2]}   # every combination is a variant (of each algorithm)
    resources: {cpus: 1, gpus: 0}  # what each trial asks of a Ray cluster (the local
                                   # backend runs one trial per worker process)

A trial's config is resolved like `trustrl train`: dataclass defaults < the (algo, env) preset <
common < algos.<algo> < envs.<env>.overrides < envs.<env>.algos.<algo> < grid point < seed and
budget. Every key of every trial is checked, and every env made once, before anything runs:
a bad SPEC fails with one line that names where in the file the problem is.
"""

from __future__ import annotations

import collections
import dataclasses
import difflib
import itertools
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trustrl.util.errors import ConfigError, TrustrlError

TOP_KEYS = ("name", "seeds", "total_steps", "algos", "envs", "common", "grid", "resources")
ENV_KEYS = ("seeds", "total_steps", "threshold", "overrides", "algos")
RESOURCE_KEYS = ("cpus", "gpus")
MAX_TRIALS = 20_000
"""Trials of one sweep (seeds x grid points x algorithms x envs): refused above this, before
any list of them is built."""
MAX_SPEC_BYTES = 1_000_000
RESERVED = {"seed": "set seeds with `seeds`", "env_id": "list envs under `envs`",
            "total_steps": "set the budget with `total_steps` (top level or per env)",
            "runs_dir": "the sweep folder holds the runs"}


class SpecError(TrustrlError):
    """A sweep SPEC that cannot be run (unknown algorithm, key, env; empty list; bad value)."""


@dataclass(frozen=True)
class Trial:
    """One train() call: everything that decides its numbers is in `config` (seed included)."""

    id: str
    algo: str
    env_id: str
    seed: int
    variant: str
    grid: dict[str, Any]
    config: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trial:
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls)})


@dataclass
class Spec:
    """A validated SPEC: the trials in a fixed order, plus what the report needs."""

    name: str
    trials: list[Trial]
    thresholds: dict[str, float] = field(default_factory=dict)
    resources: dict[str, float] = field(default_factory=lambda: {"cpus": 1, "gpus": 0})


# ----- small parsers --------------------------------------------------------------------------
def _short(v: Any) -> str:
    from trustrl.settings.config import _short as short

    return short(v)


def _unknown(key: str, allowed: Any, where: str) -> SpecError:
    close = difflib.get_close_matches(str(key), list(allowed), n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return SpecError(f"unknown key {_short(key)} in {where}{hint}; allowed: {', '.join(allowed)}")


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SpecError(f"{where:.80} must be a mapping of key: value, got "
                        f"{type(value).__name__}")
    return {str(k): v for k, v in value.items()}


def parse_seeds(value: Any, where: str) -> list[int]:
    """A list of ints or "A..B" (inclusive). Empty, duplicated or non-integer seeds fail."""
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(-?\d+)\s*\.\.\s*(-?\d+)\s*", value)
        if not m:
            raise SpecError(f"{where} must be a list of ints or 'A..B', got {_short(value)}")
        first, last = int(m.group(1)), int(m.group(2))
        if last - first + 1 > MAX_TRIALS:
            raise SpecError(f"{where} {value!r:.60} lists {last - first + 1:,} seeds; a sweep "
                            f"has at most {MAX_TRIALS:,} trials")
        seeds = list(range(first, last + 1))
    elif isinstance(value, list):
        if not all(isinstance(s, int) and not isinstance(s, bool) for s in value):
            raise SpecError(f"{where} must hold integers, got {_short(value)}")
        seeds = list(value)
    else:
        raise SpecError(f"{where} must be a list of ints or 'A..B', got {_short(value)}")
    from trustrl.settings.config import MAX_SEED

    bad = [s for s in (seeds[0], seeds[-1], min(seeds), max(seeds)) if not 0 <= s <= MAX_SEED] \
        if seeds else []
    if bad:
        raise SpecError(f"{where}: seed {bad[0]} is outside [0, {MAX_SEED:,}]")
    if not seeds:
        raise SpecError(f"{where} is empty: a sweep needs at least one seed")
    if len(set(seeds)) != len(seeds):
        raise SpecError(f"{where} repeats a seed: {_short(value)}")
    return seeds


def _budget(value: Any, where: str) -> int | None:
    if value is None:
        return None
    from trustrl.settings.config import MAX_TOTAL_STEPS

    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            0 < value <= MAX_TOTAL_STEPS) or (isinstance(value, float) and not value.is_integer()):
        raise SpecError(f"{where} must be an integer in [1, {MAX_TOTAL_STEPS:,}], got "
                        f"{_short(value)}")
    return int(value)


def _check_overrides(algo: str, values: dict[str, Any], where: str) -> None:
    from trustrl.settings.config import CONFIGS

    names = [f.name for f in dataclasses.fields(CONFIGS[algo])]
    for key in values:
        if key in RESERVED:
            raise SpecError(f"{_short(key)} in {where} is not a config override: {RESERVED[key]}")
        if key not in names:
            close = difflib.get_close_matches(key, names, n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise SpecError(f"unknown config key {_short(key)} for {algo} in {where}{hint}")


def _grid_points(grid: dict[str, Any]) -> list[dict[str, Any]]:
    """The cartesian product of the grid, in the order the keys and values are written."""
    size = 1
    for key, values in grid.items():
        if not isinstance(values, list):
            raise SpecError(f"grid.{key} must be a list of values, got {_short(values)}")
        if not values:
            raise SpecError(f"grid.{key} is empty: it would make no trials")
        size *= len(values)
        if size > MAX_TRIALS:
            raise SpecError(f"the grid has more than {MAX_TRIALS:,} points (a sweep has at most "
                            f"{MAX_TRIALS:,} trials)")
    keys = list(grid)
    return [dict(zip(keys, combo, strict=True))
            for combo in itertools.product(*(grid[k] for k in keys))]


def _fmt_value(v: Any) -> str:
    if isinstance(v, list):
        return "-".join(str(x) for x in v)
    return str(v)


def variant_name(algo: str, point: dict[str, Any]) -> str:
    """'ppo' or 'ppo[clip_eps=0.1,lr=0.001]': the label the report groups seeds by."""
    if not point:
        return algo
    return algo + "[" + ",".join(f"{k}={_fmt_value(v)}" for k, v in point.items()) + "]"


def trial_id(env_id: str, algo: str, point: dict[str, Any], seed: int) -> str:
    """A folder name that is the same every time the same SPEC is read:
    <env>__<algo>[__key=value,...]__seed<seed>."""
    grid = ",".join(f"{k}={_fmt_value(v)}" for k, v in point.items())
    name = f"{env_id}__{algo}" + (f"__{grid}" if grid else "")
    return re.sub(r"[^A-Za-z0-9_.=,-]+", "-", name) + f"__seed{seed}"


_TRIAL_TYPES = {"id": str, "algo": str, "env_id": str, "seed": int, "variant": str, "grid": dict,
                "config": dict}


def check_sweep_file(path: Path) -> dict[str, Any]:
    """A sweep folder's sweep.json, read and checked in shape before the folder is used: a JSON
    object whose trials (at most MAX_TRIALS) each have their fields with the right types, an id
    that is a plain folder name (no '/', not '..') and a config trustrl accepts; numbers in
    resources and thresholds finite. SpecError (one line) otherwise."""
    from trustrl.settings.config import config_from_dict

    f = Path(path) / "sweep.json"
    if not Path(path).is_dir():
        raise SpecError(f"{path} is not a sweep folder (no such folder)")
    if not f.is_file():
        raise SpecError(f"{path} is not a sweep folder (no sweep.json)")
    try:
        if f.stat().st_size > 50 * MAX_SPEC_BYTES:
            raise SpecError(f"{f} is larger than {50 * MAX_SPEC_BYTES:,} bytes")
        meta = json.loads(f.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise SpecError(f"cannot read {f}: {str(e).splitlines()[0][:120] if str(e) else e}"
                        ) from None
    if not isinstance(meta, dict):
        raise SpecError(f"{f} must hold a JSON object, got {type(meta).__name__}")
    if not isinstance(meta.get("name"), str):
        raise SpecError(f"{f}: name must be a string")
    trials = meta.get("trials")
    if not isinstance(trials, list) or not 1 <= len(trials) <= MAX_TRIALS:
        raise SpecError(f"{f}: trials must be a list of 1 to {MAX_TRIALS:,} trials")
    for i, t in enumerate(trials):
        where = f"{f}: trials[{i}]"
        if not isinstance(t, dict):
            raise SpecError(f"{where} is not an object")
        for key, tp in _TRIAL_TYPES.items():
            v = t.get(key)
            if not isinstance(v, tp) or (tp is int and isinstance(v, bool)):
                raise SpecError(f"{where}.{key} must be {tp.__name__}, got {_short(v)}")
        if not re.fullmatch(r"[A-Za-z0-9_.=,-]+", t["id"]) or t["id"] in (".", ".."):
            raise SpecError(f"{where}.id {_short(t['id'])} is not a plain folder name")
        try:
            cfg = config_from_dict(dict(t["config"], runs_dir="trial"))
        except ConfigError as e:
            raise SpecError(f"{where}.config: {e}") from None
        if (cfg.algo, cfg.env_id, cfg.seed) != (t["algo"], t["env_id"], t["seed"]):
            raise SpecError(f"{where}: its config is for {cfg.algo} on {cfg.env_id}, seed "
                            f"{cfg.seed}, not the trial's {_short(t['algo'])} on "
                            f"{_short(t['env_id'])}, seed {t['seed']}")
    for key in ("resources", "thresholds"):
        table = meta.get(key, {})
        if not isinstance(table, dict) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                for v in table.values()):
            raise SpecError(f"{f}: {key} must map names to finite numbers")
    if any(v < 0 for v in meta.get("resources", {}).values()):
        raise SpecError(f"{f}: resources must be >= 0")
    return meta


# ----- the whole SPEC -------------------------------------------------------------------------
def load_spec_text(text: str, source: str) -> dict[str, Any]:
    """Parse YAML (a superset of JSON); a parse error is one line naming the file. Anchors
    and aliases (&a / *a) are refused: a few lines of them expand to billions of values."""
    try:
        import yaml
    except ModuleNotFoundError:  # pragma: no cover - pyyaml is a core dependency
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise SpecError(f"cannot parse {source}: {e} (install pyyaml for YAML)") from None
    else:
        try:
            for event in yaml.parse(text, Loader=yaml.SafeLoader):
                if isinstance(event, yaml.AliasEvent):
                    mark = event.start_mark
                    where = f" (line {mark.line + 1})" if mark is not None else ""
                    raise SpecError(f"cannot use {source}: YAML aliases (*name){where} are not "
                                    "allowed in a SPEC; write the values out")
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise SpecError(f"cannot parse {source}: " + " ".join(str(e).split())[:300]) from None
        except RecursionError:
            raise SpecError(f"cannot parse {source}: nested too deeply") from None
    if not isinstance(data, dict):
        raise SpecError(f"{source} must be a mapping (name, seeds, algos, envs, ...)")
    return data


def read_spec_file(path: str | Path, what: str = "sweep spec") -> dict[str, Any]:
    """A SPEC file's mapping (load_spec_text); SpecError in one line where it cannot be read."""
    p = Path(path)
    if p.is_dir():
        raise SpecError(f"{what} {p} is a folder")
    if not p.is_file():
        raise SpecError(f"{what} not found: {p}")
    try:
        if p.stat().st_size > MAX_SPEC_BYTES:
            raise SpecError(f"{what} {p} is larger than {MAX_SPEC_BYTES:,} bytes")
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{what} {p} is not UTF-8 text (YAML)") from None
    except OSError as e:
        raise SpecError(f"cannot read {what} {p}: {e.strerror or e}") from None
    return load_spec_text(text, str(p))


def load_spec(path: str | Path, check_envs: bool = True) -> Spec:
    """Read and validate a SPEC file; returns every trial with its resolved config."""
    return parse_spec(read_spec_file(path), default_name=Path(path).stem, check_envs=check_envs)


def spec_name(data: dict[str, Any], keys: tuple[str, ...], default_name: str) -> str:
    """The SPEC's keys checked against `keys`, and its name (a plain folder name)."""
    for key in data:
        if key not in keys:
            raise _unknown(key, keys, "the spec")
    name = str(data.get("name") or default_name)
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise SpecError(f"name must use letters, digits, '_', '.', '-', got {_short(name)}")
    return name


def parse_resources(value: Any) -> dict[str, float]:
    """`resources`: what each trial asks of a Ray cluster ({cpus: 1, gpus: 0} by default)."""
    resources = _mapping(value, "resources")
    for key in resources:
        if key not in RESOURCE_KEYS:
            raise _unknown(key, RESOURCE_KEYS, "resources")
    res = {"cpus": resources.get("cpus", 1), "gpus": resources.get("gpus", 0)}
    for key, v in res.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < math.inf:
            raise SpecError(f"resources.{key} must be a number >= 0, got {_short(v)}")
    return {k: float(v) for k, v in res.items()}


def check_algo(algo: Any, where: str) -> None:
    from trustrl.settings.config import CONFIGS

    if algo not in CONFIGS:
        close = difflib.get_close_matches(str(algo), list(CONFIGS), n=2)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise SpecError(f"unknown algorithm {_short(algo)} in {where}{hint}; "
                        f"choose from {', '.join(CONFIGS)}")


def parse_spec(data: dict[str, Any], default_name: str = "sweep",
               check_envs: bool = True) -> Spec:
    """Validate a SPEC mapping and resolve every trial's config (nothing runs)."""
    from trustrl.settings.config import config_to_dict, make_config

    name = spec_name(data, TOP_KEYS, default_name)

    algos_raw = data.get("algos")
    if isinstance(algos_raw, list):
        algos: dict[str, dict[str, Any]] = {str(a): {} for a in algos_raw}
    else:
        algos = {a: _mapping(v, f"algos.{a}") for a, v in _mapping(algos_raw, "algos").items()}
    if not algos:
        raise SpecError("algos is empty or missing: name at least one algorithm")
    for algo in algos:
        check_algo(algo, "algos")

    envs_raw = data.get("envs")
    if isinstance(envs_raw, list):
        envs: dict[str, dict[str, Any]] = {str(e): {} for e in envs_raw}
    else:
        envs = {e: _mapping(v, f"envs.{e}") for e, v in _mapping(envs_raw, "envs").items()}
    if not envs:
        raise SpecError("envs is empty or missing: name at least one env id")
    for env_id, settings in envs.items():
        for key in settings:
            if key not in ENV_KEYS:
                raise _unknown(key, ENV_KEYS, f"envs.{env_id}")
        for a in _mapping(settings.get("algos"), f"envs.{env_id}.algos"):
            if a not in algos:
                raise SpecError(f"envs.{env_id}.algos names {_short(a)}, which is not in algos")

    top_seeds = parse_seeds(data["seeds"], "seeds") if "seeds" in data else None
    top_budget = _budget(data.get("total_steps"), "total_steps")
    common = _mapping(data.get("common"), "common")
    grid = _mapping(data.get("grid"), "grid")
    points = _grid_points(grid)
    res = parse_resources(data.get("resources"))

    total = 0
    for env_id, settings in envs.items():
        seeds = (parse_seeds(settings["seeds"], f"envs.{env_id}.seeds") if "seeds" in settings
                 else top_seeds)
        total += len(seeds or []) * len(algos) * len(points)
        if total > MAX_TRIALS:
            raise SpecError(f"the spec makes more than {MAX_TRIALS:,} trials (envs x algos x "
                            f"grid points x seeds), the bound of one sweep")

    if check_envs:
        from trustrl.envs.make import check_env

        for env_id in envs:
            check_env(env_id)  # EnvError (one line, with close matches) before anything runs

    trials: list[Trial] = []
    thresholds: dict[str, float] = {}
    for env_id, settings in envs.items():
        where = f"envs.{env_id}"
        seeds = (parse_seeds(settings["seeds"], f"{where}.seeds") if "seeds" in settings
                 else top_seeds)
        if seeds is None:
            raise SpecError(f"no seeds for {env_id}: set `seeds` at the top or in {where}")
        budget = _budget(settings.get("total_steps"), f"{where}.total_steps") or top_budget
        if settings.get("threshold") is not None:
            t = settings["threshold"]
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
                raise SpecError(f"{where}.threshold must be a finite number, got {_short(t)}")
            thresholds[env_id] = float(t)
        env_over = _mapping(settings.get("overrides"), f"{where}.overrides")
        env_algo = _mapping(settings.get("algos"), f"{where}.algos")
        for algo, algo_over in algos.items():
            own = _mapping(env_algo.get(algo), f"{where}.algos.{algo}")
            layers = [(common, "common"), (algo_over, f"algos.{algo}"),
                      (env_over, f"{where}.overrides"), (own, f"{where}.algos.{algo}")]
            merged: dict[str, Any] = {}
            for values, layer_where in layers:
                _check_overrides(algo, values, layer_where)
                merged.update(values)
            for point in points:
                _check_overrides(algo, point, "grid")
                variant = variant_name(algo, point)
                for seed in seeds:
                    flags = {"seed": seed, "total_steps": budget, "env_id": env_id}
                    try:
                        cfg = make_config(algo, env_id, merged, dict(point), flags)
                    except ConfigError as e:
                        raise SpecError(f"{env_id} / {variant}: {e}") from None
                    d = config_to_dict(cfg)
                    d["runs_dir"] = ""  # set by the trial to its own folder
                    trials.append(Trial(trial_id(env_id, algo, point, seed), algo, env_id, seed,
                                        variant, dict(point), d))
    ids = [t.id for t in trials]
    long = [i for i in ids if len(i) > 200]
    if long:
        raise SpecError(f"the trial folder name {long[0][:60]!r}... is {len(long[0])} characters "
                        "long (at most 200): shorten the env id or the grid values")
    dup = sorted(i for i, n in collections.Counter(ids).items() if n > 1)  # O(n), not O(n^2)
    if dup:
        raise SpecError(f"two trials would share the folder {dup[0]!r}; make the env ids or "
                        "grid values distinct")
    return Spec(name, trials, thresholds, {k: float(v) for k, v in res.items()})
