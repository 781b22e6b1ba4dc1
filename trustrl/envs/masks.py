"""Invalid-action masks from an env, found automatically (the config key action_mask).

Two sources, looked for in this order, as sb3-contrib's MaskablePPO and common env libraries
give them:

    method  an `action_masks()` method of the env (through any Gymnasium wrappers; a vector
            env's sub-envs by `envs.call("action_masks")`), returning the mask of the
            current observation;
    info    `info["action_mask"]` returned by reset and step (in a vector env, stacked
            [N, n]; with Gymnasium's SAME_STEP autoreset the info of a step that ended an
            episode is the reset's, so the mask is always that of the returned observation).

A mask is a row of booleans per env: True where the action is valid. Discrete(n): n of them;
MultiDiscrete(nvec): sum(nvec), each dimension's mask concatenated (sb3-contrib's layout). A
mask of another length, not of booleans (or 0/1 numbers), or with no valid action in a row (a
dimension's block, for MultiDiscrete) is an EnvError naming the env and what was expected.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trustrl.envs.spaces import ActionSpec
from trustrl.util.errors import ConfigError, EnvError

MODES = ("auto", "on", "off")
"""The config key action_mask's values."""
INFO_KEY = "action_mask"
METHOD = "action_masks"


def mask_size(action: ActionSpec) -> int | None:
    """The booleans of one env's mask: n (Discrete), sum(nvec) (MultiDiscrete); None for the
    spaces that cannot be masked (Box, MultiBinary)."""
    if action.kind == "discrete":
        return int(action.n)
    if action.kind == "multidiscrete":
        return int(sum(action.nvec))
    return None


def find_source(envs: Any, reset_info: dict[str, Any]) -> str | None:
    """'method' if the vector env's sub-envs have action_masks() (through their wrappers),
    else 'info' if the reset's info holds 'action_mask', else None."""
    try:
        has = envs.call("has_wrapper_attr", METHOD)
    except Exception:  # noqa: BLE001 - an env without the Gymnasium 1.x wrapper API
        has = ()
    if len(has) and all(bool(h) for h in has):
        return "method"
    if INFO_KEY in reset_info:
        return "info"
    return None


def resolve(mode: str, source: str | None, action: ActionSpec, label: str) -> str | None:
    """The source a run uses: None when mode is 'off' or ('auto') the env gives no mask;
    ConfigError for 'on' with no source or with an action space that cannot be masked."""
    if mode not in MODES:
        raise ConfigError(f"action_mask must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "off":
        return None
    if mask_size(action) is None:
        if mode == "on":
            raise ConfigError(f"action_mask 'on': {label}'s {action.kind} action space cannot "
                              "be masked (Discrete and MultiDiscrete only)")
        return None
    if source is None and mode == "on":
        raise ConfigError(f"action_mask 'on': {label} gives no mask (neither an "
                          f"{METHOD}() method nor info[{INFO_KEY!r}])")
    return source


def check_masks(mask: Any, action: ActionSpec, n_envs: int, label: str) -> np.ndarray:
    """The masks of n_envs envs as a bool array [n_envs, mask_size], or an EnvError: wrong
    length, not booleans or 0/1, or a row (a MultiDiscrete dimension) with no valid action."""
    size = mask_size(action)
    assert size is not None
    try:
        m = np.asarray(mask)
    except Exception:  # noqa: BLE001 - ragged lists and odd objects
        raise EnvError(f"{label}: the action mask is not an array of booleans") from None
    if m.dtype != np.bool_:
        if m.dtype.kind not in "iuf" or not np.isin(m, (0, 1)).all():
            raise EnvError(f"{label}: the action mask must hold booleans (or 0/1), got "
                           f"dtype {m.dtype}")
        m = m.astype(bool)
    if m.shape != (n_envs, size):
        raise EnvError(f"{label}: the action mask has shape {tuple(m.shape[1:])} per env, "
                       f"expected ({size},) for the {action.kind} action space")
    blocks = [m] if action.kind == "discrete" else np.split(m, np.cumsum(action.nvec)[:-1], 1)
    for b in blocks:
        empty = ~b.any(axis=1)
        if empty.any():
            raise EnvError(f"{label}: the action mask of env {int(np.argmax(empty))} allows "
                           "no action")
    return m


def read_masks(envs: Any, source: str, info: dict[str, Any], action: ActionSpec,
               label: str) -> np.ndarray:
    """The masks [N, mask_size] of the vector env's current observations: from each sub-env's
    action_masks() ('method') or from the last reset's or step's info ('info')."""
    n = envs.num_envs
    if source == "method":
        raw: Any = envs.call(METHOD)
        try:
            raw = np.stack([np.asarray(r) for r in raw])
        except ValueError:
            raise EnvError(f"{label}: {METHOD}() returned masks of different shapes") from None
    else:
        if INFO_KEY not in info:
            raise EnvError(f"{label}: info[{INFO_KEY!r}] is missing after a step (it was "
                           "given at reset)")
        raw = info[INFO_KEY]
    return check_masks(raw, action, n, label)


def env_masks(env: Any, action: ActionSpec, info: dict[str, Any] | None = None
              ) -> np.ndarray | None:
    """The mask of one (non-vector) env's current observation [mask_size], from its
    action_masks() or `info`; None when it gives none (for Agent.act's callers)."""
    if mask_size(action) is None:
        return None
    has = getattr(env, "has_wrapper_attr", None)
    if has is not None and has(METHOD):
        raw = env.get_wrapper_attr(METHOD)()
    elif info is not None and INFO_KEY in info:
        raw = info[INFO_KEY]
    else:
        return None
    return check_masks(np.asarray(raw)[None], action, 1, "env")[0]


def probe(env_id: Any) -> str | None:
    """The mask source of an env (an id or an EnvFactory), from one env made and reset with
    seed 0: 'method', 'info' or None (what `find_source` tells of a vector env)."""
    from trustrl.envs.make import _make_one

    env = _make_one(env_id)
    try:
        _, info = env.reset(seed=0)
        if env.has_wrapper_attr(METHOD):
            return "method"
        return "info" if isinstance(info, dict) and INFO_KEY in info else None
    finally:
        env.close()


def run_source(mode: str, env_id: Any, action: ActionSpec, label: str) -> str | None:
    """The mask source a run on the Gymnasium collector uses (config key action_mask = mode):
    the env is probed (one env made and reset) unless the mode is 'off' or the action space
    cannot be masked, or 'auto' meets an Atari game behind trustrl's chain (ALE games give
    no masks: no extra emulator made); ConfigError where 'on' cannot hold (`resolve`)."""
    if mode == "off" or (mode == "auto" and (mask_size(action) is None
                                             or getattr(env_id, "atari", None))):
        return resolve(mode, None, action, label)
    return resolve(mode, probe(env_id) if mask_size(action) is not None else None, action,
                   label)
