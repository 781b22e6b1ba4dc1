"""Build Gymnasium vector envs and check that trustrl can handle their spaces."""

from __future__ import annotations

import difflib
import warnings
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from trustrl.envs.factory import EnvFactory, as_factory
from trustrl.envs.spaces import (
    ActionSpec,
    UnsupportedSpace,
    all_images,
    flatten_obs,
    obs_layout,
    top_kind,
)
from trustrl.util.errors import EnvError, TrustrlError
from trustrl.util.lifeline import forks_die_with_parent

SUPPORTED_ACTIONS = "Discrete, Box (any shape), MultiDiscrete (1-D), MultiBinary"
SUPPORTED_OBS = ("Box (any shape; uint8 images to a CNN), Discrete and MultiDiscrete (one-hot), "
                 "MultiBinary, Dict and Tuple of these")


@dataclass(frozen=True)
class EnvSpec:
    """What the networks need to know about an env: observation size and action spec.

    obs_dim is the width of the flat float row every observation becomes (trustrl.envs.spaces);
    obs_layout says where each part of the observation sits in it (plain data; empty in agent
    files written before it existed: a flat Box or a one-hot Discrete)."""

    env_id: str
    obs_dim: int
    obs_kind: str  # box, image, discrete, multidiscrete, multibinary, dict or tuple
    obs_n: int
    action: ActionSpec
    obs_layout: tuple = ()

    def layout(self) -> list[dict]:
        """obs_layout, or for an older spec without one the layout it implies."""
        if self.obs_layout:
            return list(self.obs_layout)
        if self.obs_kind == "discrete":
            return [{"path": [], "kind": "discrete", "shape": [], "n": self.obs_n, "start": 0,
                     "size": self.obs_n, "offset": 0}]
        return [{"path": [], "kind": "box", "shape": [self.obs_dim], "size": self.obs_dim,
                 "offset": 0}]


EXTRAS = {"box2d": "Box2D", "mujoco": "MuJoCo", "atari": "the Atari emulator ale-py or OpenCV"}
_EXTRA_NOTE = {"box2d": " (Box2D builds with swig: pip install swig first if it fails)"}
"""trustrl's optional extras (pyproject.toml) for Gymnasium's env families, and what they hold."""


def _extra_for(env_id: str) -> str | None:
    """The trustrl extra an env id needs (box2d, mujoco, atari), from its namespace or its
    registered entry point; None for an env of no known family."""
    if env_id.split(":")[-1].startswith("ALE/"):
        return "atari"
    try:
        spec = gym.spec(env_id)
    except Exception:  # noqa: BLE001 - an unregistered id: no family
        return None
    entry = spec.entry_point if isinstance(spec.entry_point, str) else ""
    for family, extra in (("gymnasium.envs.box2d", "box2d"), ("gymnasium.envs.mujoco", "mujoco"),
                          ("ale_py", "atari"), ("shimmy.atari", "atari")):
        if entry.startswith(family):
            return extra
    return None


def _missing_dependency(env_id: str, extra: str | None, e: BaseException) -> EnvError:
    if extra is None:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        return EnvError(f"env {env_id!r} needs a package that is not installed: {msg}")
    return EnvError(f"env {env_id!r} needs {EXTRAS[extra]}, which is not installed: "
                    f'pip install "trustrl[{extra}]"{_EXTRA_NOTE.get(extra, "")}')


def _register_ale(env_id: str) -> None:
    """Gymnasium 1.x knows ale-py's ids (ALE/Breakout-v5, BreakoutNoFrameskip-v4, ...) only
    once ale_py is imported: import it (when it is installed) before looking up an id that
    Gymnasium does not know yet, and name the extra for an ALE/... id when it is not."""
    base = env_id.split(":")[-1]
    if any(k.startswith("ALE/") for k in gym.registry) or (
            not base.startswith("ALE/") and base in gym.registry):
        return
    try:
        import ale_py

        gym.register_envs(ale_py)
        quiet = getattr(getattr(ale_py, "ALEInterface", None), "setLoggerMode", None)
        if quiet is not None:  # no banner per env (ale-py's own module; not a stand-in)
            quiet(ale_py.LoggerMode.Error)
    except ImportError as e:
        if base.startswith("ALE/"):
            raise _missing_dependency(env_id, "atari", e) from None


def _make_one(env: str | EnvFactory) -> gym.Env:
    """One env from an id or an EnvFactory (kwargs, wrappers), or EnvError in one line."""
    if not isinstance(env, EnvFactory) and (not isinstance(env, str) or not env.strip()):
        raise EnvError(f"env id must be a non-empty string, got {env!r:.60}")
    factory = as_factory(env)
    env_id = factory.label  # in messages
    if isinstance(factory.env, str):
        _register_ale(factory.env)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return factory.make()
    except TrustrlError:  # an import path that does not import, a factory returning no env
        raise
    except gym.error.DependencyNotInstalled as e:
        raise _missing_dependency(env_id, _extra_for(env_id), e) from None
    except gym.error.Error as e:
        base = env_id.split(":")[-1]
        close = difflib.get_close_matches(base, list(gym.registry.keys()), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise EnvError(f"unknown env id {env_id!r} ({msg}){hint}") from None
    except ImportError as e:  # ModuleNotFoundError too: an env family whose package is missing
        extra = _extra_for(env_id)
        if extra is not None:
            raise _missing_dependency(env_id, extra, e) from None
        raise EnvError(f"cannot make env {env_id!r}: {e}") from None
    except Exception as e:  # an env whose constructor fails
        raise EnvError(f"cannot make env {env_id!r}: {type(e).__name__}: {e}") from None


def action_spec(space: gym.Space) -> ActionSpec:
    """The ActionSpec of a Gymnasium action space, or UnsupportedSpace."""
    if isinstance(space, gym.spaces.Discrete):
        start = int(space.start)
        return ActionSpec("discrete", n=int(space.n), start=(start,) if start else ())
    if isinstance(space, gym.spaces.Box) and space.shape:
        return ActionSpec(
            "box", dim=int(np.prod(space.shape)), shape=tuple(int(n) for n in space.shape),
            low=tuple(float(x) for x in space.low.reshape(-1)),
            high=tuple(float(x) for x in space.high.reshape(-1)),
        )
    if isinstance(space, gym.spaces.MultiDiscrete) and space.nvec.ndim == 1:
        nvec = tuple(int(n) for n in space.nvec)
        start = tuple(int(x) for x in np.broadcast_to(getattr(space, "start", 0), len(nvec)))
        return ActionSpec("multidiscrete", n=sum(nvec), dim=len(nvec), nvec=nvec,
                          start=start if any(start) else ())
    if isinstance(space, gym.spaces.MultiBinary):
        shape = tuple(int(n) for n in np.atleast_1d(space.n))
        return ActionSpec("multibinary", n=int(np.prod(shape)), dim=int(np.prod(shape)),
                          shape=shape)
    raise UnsupportedSpace(f"{type(space).__name__}{getattr(space, 'shape', '')}")


def spaces_spec(env_id: str, obs_space: gym.Space, act_space: gym.Space) -> EnvSpec:
    """An EnvSpec from the two spaces, or EnvError naming what is unsupported."""
    try:
        action = action_spec(act_space)
    except UnsupportedSpace as e:
        raise EnvError(f"{env_id} has action space {e}; trustrl supports "
                       f"{SUPPORTED_ACTIONS}") from None
    try:
        layout = obs_layout(obs_space)
        kind = top_kind(obs_space)
    except UnsupportedSpace as e:
        raise EnvError(f"{env_id} has observation space {type(obs_space).__name__} ({e}); "
                       f"trustrl supports {SUPPORTED_OBS}") from None
    obs_dim = sum(p["size"] for p in layout)
    obs_n = layout[0]["n"] if kind == "discrete" else 0
    return EnvSpec(env_id, obs_dim, kind, obs_n, action, tuple(layout))


def env_label(env: str | EnvFactory) -> str:
    """An env id, or an EnvFactory's label (its id or import path)."""
    return env.label if isinstance(env, EnvFactory) else env


def check_env(env_id: str | EnvFactory, first_step: bool = True) -> EnvSpec:
    """Make one env and return its EnvSpec, or raise EnvError naming what is unsupported;
    with `first_step`, its reset and one step are made and what they return is checked
    (`check_first_step`)."""
    env = _make_one(env_id)
    env_id = env_label(env_id)  # an EnvFactory's id or import path
    try:
        obs_space, act_space = env.observation_space, env.action_space
        spec = spaces_spec(env_id, obs_space, act_space)
        if spec.obs_dim == 0:
            raise EnvError(f"env {env_id!r} has an observation space with no elements "
                           f"({_short(obs_space)})")
        if first_step:
            check_first_step(env, env_id)
    finally:
        try:
            env.close()
        except Exception:  # noqa: BLE001 - an env that fails to close: its error is not ours
            pass
    return spec


def _short(x: Any, limit: int = 60) -> str:
    text = repr(x)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _one_line(e: BaseException) -> str:
    msg = (str(e).splitlines() or [""])[0].strip()
    return f"{type(e).__name__}: {msg[:160]}" if msg else type(e).__name__


def _check_obs(obs: Any, space: gym.Space, env_id: str, where: str) -> None:
    """A Box observation: numbers, as many as the space has, finite."""
    if not isinstance(space, gym.spaces.Box):
        return
    try:
        a = np.asarray(obs)
    except Exception:  # noqa: BLE001 - ragged lists and the like
        a = np.asarray(None)
    if a.dtype.kind not in "biuf":
        raise EnvError(f"env {env_id!r}: {where} returned an observation of "
                       f"{type(obs).__name__} {_short(obs, 40)}, not numbers of shape "
                       f"{space.shape}")
    if a.size != int(np.prod(space.shape)):
        raise EnvError(f"env {env_id!r}: {where} returned an observation of shape {a.shape}; "
                       f"its observation space has shape {space.shape}")
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        raise EnvError(f"env {env_id!r}: {where} returned a non-finite observation (NaN or "
                       "inf)")


def check_first_step(env: gym.Env, env_id: str) -> None:
    """The first reset and step of an env return what Gymnasium 1.x promises: reset
    (observation, info dict); step (observation, reward, terminated, truncated, info) with a
    finite number as reward and booleans; Box observations of the space's size, finite.
    EnvError in one line naming the env otherwise. A step that raises is left to the run (an
    env may refuse a random action)."""
    try:
        out = env.reset(seed=0)
    except Exception as e:  # noqa: BLE001 - the user's env
        raise EnvError(f"env {env_id!r}: reset raised {_one_line(e)}") from None
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict)):
        raise EnvError(f"env {env_id!r}: reset returned {_short(out, 40)}; Gymnasium envs "
                       "return (observation, info), info a dict")
    _check_obs(out[0], env.observation_space, env_id, "reset")
    try:
        step = env.step(env.action_space.sample())
    except Exception:  # noqa: BLE001
        return
    if not (isinstance(step, tuple) and len(step) == 5):
        raise EnvError(f"env {env_id!r}: step returned {_short(step, 40)}; Gymnasium envs "
                       "return (observation, reward, terminated, truncated, info)")
    obs, reward, terminated, truncated, info = step
    r = np.asarray(reward) if isinstance(reward, (int, float, np.number, np.ndarray)) \
        and not isinstance(reward, bool) else np.asarray(None)
    if r.dtype.kind not in "iuf" or r.size != 1:
        raise EnvError(f"env {env_id!r}: step returned the reward {_short(reward, 40)} "
                       f"({type(reward).__name__}), not a number")
    if not np.isfinite(r).all():
        raise EnvError(f"env {env_id!r}: step returned a non-finite reward ({reward})")
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if not isinstance(flag, (bool, np.bool_)):
            raise EnvError(f"env {env_id!r}: step returned {name} {_short(flag, 40)} "
                           f"({type(flag).__name__}), not a bool")
    if not isinstance(info, dict):
        raise EnvError(f"env {env_id!r}: step returned info {_short(info, 40)}, not a dict")
    _check_obs(obs, env.observation_space, env_id, "step")


def check_memory(spec: EnvSpec, batch: int, copies: int = 4) -> None:
    """EnvError in one line when a batch of `batch` observations (float32, `copies` arrays of
    it: the rollout's, the normalised one, the minibatch's, the network's activations) would
    not fit in the memory available now (Linux: MemAvailable; not checked elsewhere)."""
    need = spec.obs_dim * 4 * batch * copies
    free = available_memory()
    if free is not None and need > free:
        raise EnvError(f"env {spec.env_id!r}: observations of {spec.obs_dim:,} numbers need "
                       f"about {need / 2**30:.1f} GiB for a batch of {batch:,} "
                       f"(num_envs x num_steps); {free / 2**30:.1f} GiB of memory is "
                       "available: lower num_steps or num_envs")


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation (MemAvailable), or None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _actions_text(a: ActionSpec) -> str:
    if a.kind == "discrete":
        return f"{a.n} discrete actions"
    if a.kind == "multidiscrete":
        return f"MultiDiscrete{list(a.nvec)} actions"
    if a.kind == "multibinary":
        return f"{a.n} binary actions"
    return f"{a.dim}-D box actions" if len(a.shape) <= 1 else f"box actions of shape {a.shape}"


def check_compatible(spec: EnvSpec, env_id: str) -> EnvSpec:
    """An agent trained on `spec` can act in `env_id` only when the spaces match: EnvError
    naming the difference otherwise (instead of a shape error inside the network)."""
    other = check_env(env_id)
    if ((other.obs_kind, other.obs_dim) != (spec.obs_kind, spec.obs_dim)
            or (spec.obs_layout and [(p["kind"], p["shape"]) for p in spec.layout()]
                != [(p["kind"], p["shape"]) for p in other.layout()])):
        raise EnvError(f"the agent was trained on {spec.env_id} ({spec.obs_kind} observations "
                       f"of size {spec.obs_dim}); {env_id} has {other.obs_kind} observations of "
                       f"size {other.obs_dim}")
    a, b = spec.action, other.action
    if (a.kind, a.n, a.dim, a.nvec) != (b.kind, b.n, b.dim, b.nvec):
        raise EnvError(f"the agent was trained on {spec.env_id} ({_actions_text(a)}); {env_id} "
                       f"has {_actions_text(b)}")
    return other


def obs_to_array(obs: np.ndarray, spec: EnvSpec, pixels: bool = False) -> np.ndarray:
    """Vector-env observations as float [N, obs_dim] (trustrl.envs.spaces.flatten_obs: one-hot
    for Discrete parts, images scaled to [0, 1] and channels-first, Dict/Tuple parts
    concatenated). pixels: an observation of images only as uint8 rows, not scaled
    (`pixel_rows`)."""
    if pixels:
        return flatten_obs(obs, spec.layout(), pixels=True)
    if spec.obs_kind == "discrete" and spec.obs_layout == ():
        return np.eye(spec.obs_n, dtype=np.float64)[np.asarray(obs, np.int64)]
    if spec.obs_kind == "box" and len(spec.obs_layout) <= 1:
        return np.asarray(obs, np.float64).reshape(len(obs), -1)
    return flatten_obs(obs, spec.layout())


def pixel_rows(spec: EnvSpec) -> bool:
    """Whether observations can travel as uint8 pixel rows: every part an image."""
    return all_images(spec.layout())


def pickle_drops_state(env: gym.Env) -> str | None:
    """Why pickling this (sub-)env would not carry its mid-episode state, or None if it would.

    Gymnasium's EzPickle envs (Box2D's, MuJoCo's, ale-py's) pickle as their constructor's
    arguments only: unpickled, such an env is a fresh one that was never reset (Box2D's step
    then fails, MuJoCo's goes on from the model's initial pose) while the wrappers around it and
    the observation carried beside it belong to the old episode. A wrapper in the chain that
    carries the unwrapped env's state through pickle itself (`carries_env_state = True`, as
    trustrl.envs.atari.EmulatorState) makes the pickle whole again."""
    from gymnasium.utils import EzPickle

    inner = env.unwrapped
    if not isinstance(inner, EzPickle) or type(inner).__getstate__ is not EzPickle.__getstate__:
        return None
    e: Any = env
    while isinstance(e, gym.Wrapper):
        if getattr(e, "carries_env_state", False):
            return None
        e = e.env
    return (f"{type(inner).__name__} pickles as its constructor's arguments only "
            "(gymnasium's EzPickle), not its state")


def make_vec_env(env_id: str | EnvFactory, num_envs: int, vector: str = "sync"
                 ) -> gym.vector.VectorEnv:
    """A vector env in same-step autoreset mode, of an id or an EnvFactory (an env class or
    function, kwargs, wrappers: trustrl.envs.factory).

    In SAME_STEP mode a step that ends an episode returns the reset observation and puts the
    true last observation in info['final_obs']: every step is then a real transition, and the
    final observation is there for bootstrapping on truncation.
    """
    _make_one(env_id).close()  # turns a bad id into EnvError before workers start
    factory = as_factory(env_id)
    mode = gym.vector.AutoresetMode.SAME_STEP
    # async workers are forked here: they die with this process (kill -9 included)
    with warnings.catch_warnings(), forks_die_with_parent():
        warnings.simplefilter("ignore")
        if factory.plain_id is None:
            cls = gym.vector.SyncVectorEnv if vector == "sync" else gym.vector.AsyncVectorEnv
            return cls([factory.make] * num_envs, autoreset_mode=mode)
        env_id = factory.plain_id
        return gym.make_vec(
            env_id,
            num_envs=num_envs,
            vectorization_mode=vector,
            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
        )
