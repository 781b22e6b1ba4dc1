"""Build Gymnasium vector envs and check that trustrl can handle their spaces."""

from __future__ import annotations

import difflib
import warnings
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from trustrl.errors import EnvError
from trustrl.policies import ActionSpec

SUPPORTED_ACTIONS = "Discrete, Box"
SUPPORTED_OBS = "Box, Discrete (one-hot)"


@dataclass(frozen=True)
class EnvSpec:
    """What the networks need to know about an env: observation size and action spec."""

    env_id: str
    obs_dim: int
    obs_kind: str  # "box" or "discrete"
    obs_n: int
    action: ActionSpec


EXTRAS = {"box2d": "Box2D", "mujoco": "MuJoCo", "atari": "the Atari emulator ale-py"}
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
    """Gymnasium 1.x knows the ALE/... ids only once ale_py is imported: import it (when it is
    installed) before looking the id up, and name the extra when it is not."""
    if not env_id.split(":")[-1].startswith("ALE/") or any(k.startswith("ALE/")
                                                           for k in gym.registry):
        return
    try:
        import ale_py

        gym.register_envs(ale_py)
    except ImportError as e:
        raise _missing_dependency(env_id, "atari", e) from None


def _make_one(env_id: str) -> gym.Env:
    if not isinstance(env_id, str) or not env_id.strip():
        raise EnvError(f"env id must be a non-empty string, got {env_id!r:.60}")
    _register_ale(env_id)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return gym.make(env_id)
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


def check_env(env_id: str) -> EnvSpec:
    """Make one env and return its EnvSpec, or raise EnvError naming what is unsupported."""
    env = _make_one(env_id)
    try:
        obs_space, act_space = env.observation_space, env.action_space
    finally:
        env.close()
    if isinstance(act_space, gym.spaces.Discrete):
        action = ActionSpec("discrete", n=int(act_space.n))
    elif isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1:
        action = ActionSpec(
            "box", dim=int(act_space.shape[0]),
            low=tuple(float(x) for x in act_space.low),
            high=tuple(float(x) for x in act_space.high),
        )
    else:
        raise EnvError(
            f"{env_id} has action space {type(act_space).__name__}"
            f"{getattr(act_space, 'shape', '')}; trustrl supports {SUPPORTED_ACTIONS} (1-D)"
        )
    if isinstance(obs_space, gym.spaces.Box):
        return EnvSpec(env_id, int(np.prod(obs_space.shape)), "box", 0, action)
    if isinstance(obs_space, gym.spaces.Discrete):
        return EnvSpec(env_id, int(obs_space.n), "discrete", int(obs_space.n), action)
    raise EnvError(
        f"{env_id} has observation space {type(obs_space).__name__}; "
        f"trustrl supports {SUPPORTED_OBS}"
    )


def _actions_text(a: ActionSpec) -> str:
    return f"{a.n} discrete actions" if a.kind == "discrete" else f"{a.dim}-D box actions"


def check_compatible(spec: EnvSpec, env_id: str) -> EnvSpec:
    """An agent trained on `spec` can act in `env_id` only when the spaces match: EnvError
    naming the difference otherwise (instead of a shape error inside the network)."""
    other = check_env(env_id)
    if (other.obs_kind, other.obs_dim) != (spec.obs_kind, spec.obs_dim):
        raise EnvError(f"the agent was trained on {spec.env_id} ({spec.obs_kind} observations "
                       f"of size {spec.obs_dim}); {env_id} has {other.obs_kind} observations of "
                       f"size {other.obs_dim}")
    a, b = spec.action, other.action
    if (a.kind, a.n, a.dim) != (b.kind, b.n, b.dim):
        raise EnvError(f"the agent was trained on {spec.env_id} ({_actions_text(a)}); {env_id} "
                       f"has {_actions_text(b)}")
    return other


def obs_to_array(obs: np.ndarray, spec: EnvSpec) -> np.ndarray:
    """Vector-env observations as float [N, obs_dim] (one-hot for Discrete observations)."""
    if spec.obs_kind == "discrete":
        return np.eye(spec.obs_n, dtype=np.float64)[np.asarray(obs, np.int64)]
    return np.asarray(obs, np.float64).reshape(len(obs), -1)


def make_vec_env(env_id: str, num_envs: int, vector: str = "sync") -> gym.vector.VectorEnv:
    """A vector env in same-step autoreset mode.

    In SAME_STEP mode a step that ends an episode returns the reset observation and puts the
    true last observation in info['final_obs']: every step is then a real transition, and the
    final observation is there for bootstrapping on truncation.
    """
    _make_one(env_id).close()  # turns a bad id into EnvError before workers start
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gym.make_vec(
            env_id,
            num_envs=num_envs,
            vectorization_mode=vector,
            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
        )
