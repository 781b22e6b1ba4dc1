"""Envs as users have them: an id, 'module:Id', an env class or a factory, kwargs, wrappers.

`EnvFactory` is how one env is built: `make()` calls the env (a Gymnasium id through
gym.make, or an env class or function called with the kwargs), then wraps it with each wrapper
in order (`wrapper(env, **its_kwargs)`). The config's `env_id`, `env_kwargs` and `wrappers`
describe it; `record_env` turns them into what config.json holds (import paths 'module:qualname'
and plain-data kwargs), from which `env_factory` builds the same env again (`trustrl eval`,
`--resume`). A callable with no import path (a lambda, a local function, a class of the script
being run) is recorded as NOT_IMPORTABLE + its name: the run says it cannot be re-made.
"""

from __future__ import annotations

import copy
import importlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trustrl.util.errors import ConfigError, EnvError
from trustrl.util.importing import IMPORT_PATH as _PATH
from trustrl.util.importing import import_path
from trustrl.util.importing import resolve as _resolve

NOT_IMPORTABLE = "<not importable> "
"""Prefix of a recorded env or wrapper that was a callable with no import path."""

_MAX_KWARGS_CHARS = 100_000


def _short(v: Any, limit: int = 60) -> str:
    text = repr(v)
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ----- import paths (trustrl.util.importing) ---------------------------------------------------
def resolve(path: str, what: str) -> Any:
    """The callable at 'module:attr[.attr]' (the module imported), or EnvError in one line."""
    return _resolve(path, what, EnvError)


def _one_line(e: BaseException) -> str:
    msg = (str(e).splitlines() or [""])[0].strip()
    return f"{type(e).__name__}: {msg[:200]}" if msg else type(e).__name__


def _label(target: Any) -> str:
    if isinstance(target, str):
        return target
    if isinstance(getattr(target, "env_label", None), str):  # an env object's copies
        return target.env_label
    return import_path(target) or NOT_IMPORTABLE + str(
        getattr(target, "__qualname__", None) or type(target).__name__)


# ----- the config's values ----------------------------------------------------------------
def parse_env_kwargs(raw: Any, name: str = "env_kwargs") -> dict[str, Any]:
    """A JSON object (text from --set) or a mapping -> a dict of plain data (what config.json
    can record), or ConfigError in one line."""
    if isinstance(raw, str):
        text = raw.strip()
        if not text:
            return {}
        if len(text) > _MAX_KWARGS_CHARS:
            raise ConfigError(f"{name} is longer than {_MAX_KWARGS_CHARS:,} characters")
        try:
            raw = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise ConfigError(f"{name} must be a JSON object such as '{{\"continuous\": true}}'"
                              f", got {_short(text)} ({str(e).splitlines()[0][:80]})") from None
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{name} must be a mapping of keyword arguments (a JSON object such "
                          f"as '{{\"continuous\": true}}'), got {_short(raw)} "
                          f"({type(raw).__name__})")
    for k in raw:
        if not isinstance(k, str) or not k.isidentifier():
            raise ConfigError(f"{name}: key {_short(k, 40)} is not a keyword argument name")
    try:  # plain data only: config.json must be able to rebuild the env
        text = json.dumps(dict(raw), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        raise ConfigError(f"{name} must hold plain data (numbers, strings, booleans, lists, "
                          f"mappings) so that config.json can rebuild the env: "
                          f"{str(e).splitlines()[0][:100]}; pass other objects through an env "
                          "factory function") from None
    return json.loads(text)


def parse_wrappers(raw: Any) -> list[Any]:
    """Wrappers in order, each an import path 'module:Class' (or, through the Python API, a
    callable), or {"wrapper": path, "kwargs": {...}} / [path, {...}] with keyword arguments.
    Text (from --set) is a comma-separated list of paths or a JSON list. Returns the canonical
    list: a path (or callable) alone, a dict where there are kwargs. ConfigError otherwise."""
    if raw is None:
        return []
    if isinstance(raw, str):
        text = raw.strip()
        if not text:
            return []
        if text.startswith("["):
            try:
                raw = json.loads(text)
            except (ValueError, RecursionError) as e:
                raise ConfigError(f"wrappers: {_short(text)} is not a JSON list "
                                  f"({str(e).splitlines()[0][:80]})") from None
        else:
            raw = [p.strip() for p in text.split(",")]
    if not isinstance(raw, (list, tuple)):
        raise ConfigError(f"wrappers must be a list of import paths 'module:Class', got "
                          f"{_short(raw)} ({type(raw).__name__})")
    out: list[Any] = []
    for item in raw:
        kwargs: Any = {}
        if isinstance(item, Mapping):
            extra = set(item) - {"wrapper", "kwargs"}
            if "wrapper" not in item or extra:
                raise ConfigError(f"wrappers: an entry with keyword arguments is "
                                  f"{{\"wrapper\": \"module:Class\", \"kwargs\": {{...}}}}, got "
                                  f"{_short(dict(item))}")
            item, kwargs = item["wrapper"], item.get("kwargs", {})
        elif isinstance(item, (list, tuple)):
            if len(item) != 2:
                raise ConfigError(f"wrappers: an entry [wrapper, kwargs] has two items, got "
                                  f"{_short(item)}")
            item, kwargs = item
        if isinstance(item, str):
            if not _PATH.match(item.strip()):
                raise ConfigError(f"wrappers: {_short(item)} is not an import path "
                                  "'module:Class'")
            item = item.strip()
        elif not callable(item):
            raise ConfigError(f"wrappers: {_short(item)} is neither an import path "
                              "'module:Class' nor a callable")
        kwargs = parse_env_kwargs(kwargs, "wrapper kwargs")
        out.append({"wrapper": item, "kwargs": kwargs} if kwargs else item)
    return out


def check_env_target(env: Any) -> None:
    """env_id: a non-empty id or path (str), or through the Python API a callable."""
    if callable(env) and not isinstance(env, str):
        return
    if not isinstance(env, str):
        raise ConfigError(f"env_id must be an env id, 'module:Name' or (Python API) an env "
                          f"class or function, or a gymnasium.Env or vector env object, got "
                          f"{_short(env)} ({type(env).__name__})")


def record_env(env: Any, wrappers: list[Any]) -> tuple[str, list[Any]]:
    """(env_id, wrappers) as config.json records them: callables by their import path, or
    NOT_IMPORTABLE + their name where they have none."""
    rec: list[Any] = []
    for w in wrappers:
        if isinstance(w, Mapping):
            rec.append({"wrapper": _label(w["wrapper"]), "kwargs": w.get("kwargs", {})})
        else:
            rec.append(_label(w))
    return _label(env), rec


# ----- building ---------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class EnvFactory:
    """One env as the config describes it: `make()` builds it (picklable: the async vector
    env sends it to its workers)."""

    env: Any
    """A Gymnasium id, 'module:Id', 'module:Name' of a class or function, or a callable."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the env (env_kwargs)."""
    wrappers: tuple[tuple[Any, dict[str, Any]], ...] = ()
    """(wrapper, kwargs) pairs applied in order."""
    atari: str | None = None
    """'train' or 'eval': an Atari id behind trustrl.envs.atari's preprocessing (None: not)."""
    episodic_life: bool = True
    """With atari 'train': a lost life ends the training episode (the config's
    atari_episodic_life); false: whole games. No effect otherwise."""

    @property
    def label(self) -> str:
        """The env's name in messages, folder names and EnvSpec.env_id."""
        return _label(self.env)

    @property
    def plain_id(self) -> str | None:
        """The Gymnasium id when this is a bare id (no kwargs, no wrappers), else None."""
        if isinstance(self.env, str) and not self.kwargs and not self.wrappers \
                and not self.atari and self._callable() is None:  # not 'module:Class'
            return self.env
        return None

    def __str__(self) -> str:
        return self.label

    def _callable(self) -> Callable[..., Any] | None:
        """The env class or function to call, or None for a Gymnasium id."""
        env = self.env
        if not isinstance(env, str):
            return env
        if env.startswith(NOT_IMPORTABLE):
            raise EnvError(f"this run's env was given to trustrl.train as a callable with no "
                           f"import path ({env[len(NOT_IMPORTABLE):]}): config.json cannot "
                           "re-make it; define it at the top level of a module")

        if env.startswith(ENV_OBJECT):
            raise EnvError(f"this run's env was an env object ({env[len(ENV_OBJECT):]}): "
                           "config.json cannot re-make it; pass the env again (trustrl."
                           "evaluate(agent, env), trustrl.resume(run, env=env), "
                           "trustrl.PPO.load(path, env=env))")
        module, sep, name = env.partition(":")
        if not sep or not _PATH.match(env):
            return None  # an id ('CartPole-v1', 'module:Env-v0'): gym.make
        import gymnasium as gym

        try:
            mod: Any = importlib.import_module(module)
        except Exception:  # noqa: BLE001 - gym.make says it
            return None
        if name in gym.registry or env in gym.registry:
            return None  # the module registered an id of that name
        if hasattr(mod, name.split(".")[0]):
            return resolve(env, "env")
        return None

    def make(self) -> Any:
        """Build the env and wrap it; raises what the env or a wrapper raises (EnvError for
        an import path that does not import)."""
        import gymnasium as gym

        fn = self._callable()
        if fn is None and self.atari:
            from trustrl.envs.atari import atari_env

            env = atari_env(self.env, self.kwargs, train=self.atari == "train",
                            episodic_life=self.episodic_life)
        elif fn is None:
            env = gym.make(self.env, **self.kwargs)
        else:
            try:
                env = fn(**self.kwargs)
            except Exception as e:  # noqa: BLE001 - the user's constructor: one line
                raise EnvError(f"cannot make env {self.label!r}: {_one_line(e)}") from None
            if not isinstance(env, gym.Env):
                raise EnvError(f"env {self.label!r} returned {_short(env, 40)} "
                               f"({type(env).__name__}), not a gymnasium.Env")
        for w, kw in self.wrappers:
            wrap = resolve(w, "wrapper") if isinstance(w, str) else w
            try:
                env = wrap(env, **kw)
            except Exception as e:  # noqa: BLE001 - a wrapper that rejects its kwargs or env
                env.close()
                raise EnvError(f"wrapper {_label(w)!r} on env {self.label!r}: "
                               f"{_one_line(e)}") from None
            if not isinstance(env, gym.Env):
                raise EnvError(f"wrapper {_label(w)!r} returned {_short(env, 40)}, not a "
                               "gymnasium.Env")
        return env

    def check_wrappers(self) -> None:
        """Each wrapper path imports (EnvError in one line otherwise), before any env."""
        for w, _ in self.wrappers:
            if isinstance(w, str):
                resolve(w, "wrapper")


def env_factory(cfg: Any) -> EnvFactory:
    """The EnvFactory of a config (its env_id, env_kwargs, wrappers, atari_wrappers and
    atari_episodic_life)."""
    check_env_target(cfg.env_id)
    pairs = []
    for w in parse_wrappers(getattr(cfg, "wrappers", None)):
        if isinstance(w, Mapping):
            pairs.append((w["wrapper"], dict(w["kwargs"])))
        else:
            pairs.append((w, {}))
    for w, _ in pairs:
        if isinstance(w, str) and w.startswith(NOT_IMPORTABLE):
            raise EnvError(f"this run's wrapper {w[len(NOT_IMPORTABLE):]} was a callable with "
                           "no import path: config.json cannot re-make it; define it at the "
                           "top level of a module")
    from trustrl.envs.atari import is_atari_id

    atari = "train" if getattr(cfg, "atari_wrappers", True) and is_atari_id(cfg.env_id) else None
    factory = EnvFactory(cfg.env_id, parse_env_kwargs(getattr(cfg, "env_kwargs", None)),
                         tuple(pairs), atari,
                         episodic_life=getattr(cfg, "atari_episodic_life", True) is not False)
    factory.check_wrappers()
    return factory


def as_factory(env: Any) -> EnvFactory:
    """An EnvFactory as it is, or one for what users give as an env: a Gymnasium id,
    'module:Name', an env class or function, a gymnasium.Env or vector env object
    (trustrl.envs.objects)."""
    if isinstance(env, EnvFactory):
        return env

    if is_env_object(env):
        from types import SimpleNamespace

        made = describe(env)
        return env_factory(SimpleNamespace(env_id=made["env_id"], atari_wrappers=True,
                                           env_kwargs=made.get("env_kwargs"),
                                           wrappers=made.get("wrappers")))
    check_env_target(env)
    return EnvFactory(env)


__all__ = ["NOT_IMPORTABLE", "EnvFactory", "as_factory", "check_env_target", "env_factory",
           "import_path", "parse_env_kwargs", "parse_wrappers", "record_env", "resolve"]


# --- env objects (gym.Env, vector envs), as SB3 users pass them -----------------------------
# Env objects, as Stable-Baselines3 users pass them: a constructed `gymnasium.Env` or a
# Gymnasium vector env, wherever trustrl takes an env (the configs' env_id, `train`,
# `evaluate`, the models of trustrl.model).
#
# trustrl builds its own envs (a vector env in same-step autoreset mode, fresh envs with fixed
# seeds for each evaluation), so an object is turned into a way to build more of it:
#
# - an env made by `gym.make` (it has a spec: the id, the kwargs, the wrappers added after it
#   with their kwargs) becomes that id, env_kwargs and wrappers: plain data that config.json
#   records, so the run is rebuilt from its folder like any other;
# - any other env (no spec, a wrapper that does not record its arguments, kwargs that are not
#   plain data) becomes `EnvCopies`: each env a deep copy of the object. config.json records
#   ENV_OBJECT + the class's import path; eval and resume of that folder ask for the env again
#   (one line);
# - a vector env gives its number of envs (num_envs) and its first sub-env, taken as above; an
#   AsyncVectorEnv (whose sub-envs live in other processes) its spec only, and vector 'async'.

ENV_OBJECT = "<env object> "
"""Prefix of a recorded env_id that was an env object trustrl could not describe by its spec;
the class's import path follows (or its name)."""

_VECTOR_KEYS = ("num_envs", "vectorization_mode", "vector_kwargs", "wrappers")
"""Keys gym.make_vec adds to a vector env's spec.kwargs: not the env's own kwargs."""


class EnvCopies:
    """An env function that returns a deep copy of one env object each call (picklable when
    the object is: the async vector env sends it to its workers)."""

    def __init__(self, template: Any):
        self.template = template

    @property
    def env_label(self) -> str:
        """The name config.json records: ENV_OBJECT + the class's import path (or name)."""
        cls = type(getattr(self.template, "unwrapped", self.template))
        return ENV_OBJECT + (import_path(cls) or cls.__qualname__)

    def __call__(self, **kwargs: Any) -> Any:
        if kwargs:
            raise EnvError(f"env_kwargs go with an env id, class or function; {self.env_label} "
                           "is an object, built already")
        return copy.deepcopy(self.template)

    def __repr__(self) -> str:
        return f"EnvCopies({self.template!r})"


def is_env_object(env: Any) -> bool:
    """Whether `env` is a constructed gymnasium.Env or Gymnasium vector env."""
    import gymnasium as gym

    return isinstance(env, (gym.Env, gym.vector.VectorEnv))


def _from_spec(spec: Any, drop: tuple[str, ...] = ()) -> dict[str, Any] | None:
    """env_id, env_kwargs and wrappers that gym.make turns back into the env of `spec`, or
    None where the spec cannot say (an unregistered id, a wrapper that keeps no arguments or
    has no import path, kwargs that are not plain data)."""
    import gymnasium as gym

    if spec is None or spec.id not in gym.registry:
        return None
    registered = gym.registry[spec.id]
    kwargs = {k: v for k, v in (spec.kwargs or {}).items()
              if k not in drop and registered.kwargs.get(k, object()) != v}
    if spec.max_episode_steps != registered.max_episode_steps:
        kwargs["max_episode_steps"] = spec.max_episode_steps  # a gym.make argument
    wrappers: list[Any] = []
    for w in spec.additional_wrappers or ():
        entry = w.entry_point
        if w.kwargs is None or not isinstance(entry, str) or entry.startswith("__main__:"):
            return None
        wrappers.append({"wrapper": entry, "kwargs": dict(w.kwargs)} if w.kwargs else entry)
    try:
        return {"env_id": spec.id, "env_kwargs": parse_env_kwargs(kwargs),
                "wrappers": parse_wrappers(wrappers)}
    except ConfigError:
        return None


def _spec_of(env: Any) -> Any:
    try:
        return env.spec
    except Exception:  # noqa: BLE001 - a wrapper whose spec cannot be made
        return None


def describe(env: Any) -> dict[str, Any]:
    """The config fields that build more of the env object `env` (module docstring)."""
    import gymnasium as gym

    fields: dict[str, Any] = {}
    if isinstance(env, gym.vector.VectorEnv):
        fields["num_envs"] = int(env.num_envs)
        subs = getattr(env, "envs", None)
        if not subs:  # AsyncVectorEnv: only its spec
            made = _from_spec(_spec_of(env), _VECTOR_KEYS)
            if made is None:
                raise ConfigError(f"{type(env).__name__}: its sub-envs live in other processes "
                                  "and it has no spec of a registered id to make them again; "
                                  "give the env id, class or function instead")
            return {**fields, **made, "vector": "async"}
        env = subs[0]
    made = _from_spec(_spec_of(env))
    if made is not None:
        return {**fields, **made}
    try:
        copy.deepcopy(env)
    except Exception as e:  # noqa: BLE001 - a socket, a process, a renderer...
        msg = (str(e).splitlines() or [""])[0][:120]
        raise ConfigError(f"env object {type(env).__name__} cannot be copied for trustrl's envs "
                          f"({type(e).__name__}: {msg}); give its class or a function that "
                          "makes it") from None
    return {**fields, "env_id": EnvCopies(env)}


def take_env_object(cfg: Any, defaults: dict[str, Any]) -> None:
    """A config whose env_id is an env object: env_id (and env_kwargs, wrappers, num_envs,
    vector) set from it (`describe`). A field given besides the object that contradicts it
    is a ConfigError."""
    if not is_env_object(cfg.env_id):
        return
    made = describe(cfg.env_id)
    given = cfg.__dict__.get("_given", set())
    for k, v in made.items():
        mine = cfg.__dict__.get(k)
        if k != "env_id" and k in given and mine != v and mine != defaults[k]:
            raise ConfigError(f"{k} {mine!r:.40} was given with an env object whose {k} is "
                              f"{v!r:.40}: give one or the other")
    for k, v in made.items():
        object.__setattr__(cfg, k, v)
        given.add(k)


__all__ = ["ENV_OBJECT", "EnvCopies", "describe", "is_env_object", "take_env_object"]
