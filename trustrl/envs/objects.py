"""Env objects, as Stable-Baselines3 users pass them: a constructed `gymnasium.Env` or a
Gymnasium vector env, wherever trustrl takes an env (the configs' env_id, `train`,
`evaluate`, the models of trustrl.model).

trustrl builds its own envs (a vector env in same-step autoreset mode, fresh envs with fixed
seeds for each evaluation), so an object is turned into a way to build more of it:

- an env made by `gym.make` (it has a spec: the id, the kwargs, the wrappers added after it
  with their kwargs) becomes that id, env_kwargs and wrappers: plain data that config.json
  records, so the run is rebuilt from its folder like any other;
- any other env (no spec, a wrapper that does not record its arguments, kwargs that are not
  plain data) becomes `EnvCopies`: each env a deep copy of the object. config.json records
  ENV_OBJECT + the class's import path; eval and resume of that folder ask for the env again
  (one line);
- a vector env gives its number of envs (num_envs) and its first sub-env, taken as above; an
  AsyncVectorEnv (whose sub-envs live in other processes) its spec only, and vector 'async'.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from trustrl.errors import ConfigError, EnvError
from trustrl.importing import import_path

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

    from trustrl.envs.factory import parse_env_kwargs, parse_wrappers

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


def take_env_object(cfg: Any) -> None:
    """A config whose env_id is an env object: env_id (and env_kwargs, wrappers, num_envs,
    vector) set from it (`describe`). A field given besides the object that contradicts it
    is a ConfigError."""
    if not is_env_object(cfg.env_id):
        return
    made = describe(cfg.env_id)
    given = cfg.__dict__.get("_given", set())
    from trustrl.config import field_default

    defaults = {f.name: field_default(f) for f in dataclasses.fields(cfg)}
    for k, v in made.items():
        mine = cfg.__dict__.get(k)
        if k != "env_id" and k in given and mine != v and mine != defaults[k]:
            raise ConfigError(f"{k} {mine!r:.40} was given with an env object whose {k} is "
                              f"{v!r:.40}: give one or the other")
    for k, v in made.items():
        object.__setattr__(cfg, k, v)
        given.add(k)


__all__ = ["ENV_OBJECT", "EnvCopies", "describe", "is_env_object", "take_env_object"]
