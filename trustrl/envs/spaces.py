"""Observation spaces as one flat float vector, and back.

Every observation trustrl supports becomes one float row [obs_dim] before it reaches the
networks, the rollout buffers and the normaliser: a Box is flattened, a Discrete one-hot
encoded, a MultiDiscrete a concatenation of one-hots, a MultiBinary its bits as floats, a uint8
image (see `is_image_space`) scaled to [0, 1] and transposed to channels-first (CHW) before it
is flattened, a Dict (keys in the space's order) or a Tuple the concatenation of its
parts. The layout (`obs_layout`) says where each part sits in the row, as plain data (saved in
agent files): the feature extractors of trustrl.nets.extractors cut the row up again (a CNN per
image, the rest passed through), and its `unflatten` rebuilds the structured observation for
a user's extractor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

IMAGE_CHANNELS = (1, 3, 4)


def is_image_space(space: gym.Space) -> bool:
    """An image as Stable-Baselines3 detects one: a Box of 3 dimensions, dtype uint8, bounds
    0 and 255, with 1, 3 or 4 channels first (CHW) or last (HWC)."""
    return (isinstance(space, gym.spaces.Box) and len(space.shape) == 3
            and space.dtype == np.uint8 and bool(np.all(space.low == 0))
            and bool(np.all(space.high == 255))
            and (space.shape[0] in IMAGE_CHANNELS or space.shape[-1] in IMAGE_CHANNELS))


class UnsupportedSpace(ValueError):
    """A space (or a part of one) that trustrl cannot encode; the message names it."""


def _part(path: list[Any], space: gym.Space) -> dict[str, Any]:
    where = "".join(f"[{p!r}]" for p in path)
    if is_image_space(space):
        shape = list(space.shape)
        last = shape[-1] in IMAGE_CHANNELS and shape[0] not in IMAGE_CHANNELS
        chw = [shape[2], shape[0], shape[1]] if last else shape
        return {"path": path, "kind": "image", "shape": shape, "chw": chw,
                "channels_last": last, "size": math.prod(shape)}
    if isinstance(space, gym.spaces.Box):
        return {"path": path, "kind": "box", "shape": list(space.shape),
                "size": math.prod(space.shape)}
    if isinstance(space, gym.spaces.Discrete):
        return {"path": path, "kind": "discrete", "shape": [], "n": int(space.n),
                "start": int(space.start), "size": int(space.n)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        if space.nvec.ndim != 1:
            raise UnsupportedSpace(f"MultiDiscrete{where} of shape {space.nvec.shape} (1-D only)")
        nvec = [int(n) for n in space.nvec]
        start = [int(s) for s in np.broadcast_to(getattr(space, "start", 0), len(nvec))]
        return {"path": path, "kind": "multidiscrete", "shape": [len(nvec)], "nvec": nvec,
                "start": start, "size": sum(nvec)}
    if isinstance(space, gym.spaces.MultiBinary):
        shape = [int(n) for n in np.atleast_1d(space.n)]
        return {"path": path, "kind": "multibinary", "shape": shape, "size": math.prod(shape)}
    raise UnsupportedSpace(f"{type(space).__name__}{where}")


def obs_layout(space: gym.Space) -> list[dict[str, Any]]:
    """The parts of an observation space, in the order they sit in the flat row: dicts of
    plain values (path: the keys / indices from the top; kind; shape; size; offset)."""
    parts: list[dict[str, Any]] = []

    def walk(path: list[Any], s: gym.Space) -> None:
        if isinstance(s, gym.spaces.Dict):
            for k, sub in s.spaces.items():
                walk(path + [str(k)], sub)
        elif isinstance(s, gym.spaces.Tuple):
            for i, sub in enumerate(s.spaces):
                walk(path + [i], sub)
        else:
            parts.append(_part(path, s))

    walk([], space)
    if not parts:
        raise UnsupportedSpace("an empty Dict or Tuple")
    off = 0
    for p in parts:
        p["offset"] = off
        off += p["size"]
    return parts


def top_kind(space: gym.Space) -> str:
    """The observation kind named in an EnvSpec: dict, tuple, or the one part's kind."""
    if isinstance(space, gym.spaces.Dict):
        return "dict"
    if isinstance(space, gym.spaces.Tuple):
        return "tuple"
    return obs_layout(space)[0]["kind"]


def _leaf(obs: Any, path: Sequence[Any]) -> Any:
    for k in path:
        obs = obs[k]
    return obs


def _shape_text(shape: Sequence[Any]) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _where(path: Sequence[Any]) -> str:
    return "observation" + "".join(f"[{k!r}]" for k in path)


def _leaf_array(obs: Any, p: dict[str, Any]) -> np.ndarray:
    """One part of a user's observation as an array of numbers, or ObservationError."""
    from trustrl.util.errors import ObservationError

    x = obs
    for k in p["path"]:
        try:
            x = x[k]
        except (KeyError, IndexError, TypeError):
            kind = "key" if isinstance(k, str) else "item"
            raise ObservationError(f"{_where(p['path'])}: the observation has no {kind} {k!r} "
                                   f"(got {type(x).__name__})") from None
    try:
        a = np.asarray(x)
    except (ValueError, TypeError) as e:
        raise ObservationError(f"{_where(p['path'])} cannot be read as an array of numbers "
                               f"({str(e).splitlines()[0][:80]})") from None
    if a.dtype == object or not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
        raise ObservationError(f"{_where(p['path'])} must hold numbers, got dtype {a.dtype}")
    return a


def check_observation(obs: Any, layout: Sequence[dict[str, Any]]) -> tuple[Any, bool]:
    """A user's observation (one, or a batch [N, ...]; arrays, lists or tuples; a Dict
    observation as a dict, a Tuple one as a tuple) -> (the batch as arrays, whether it was
    one observation). ObservationError in one line naming the shape expected (or the keys,
    or the values a Discrete part takes) for anything else."""
    from trustrl.util.errors import ObservationError

    leaves, single, count = [], None, None
    for p in layout:
        a = _leaf_array(obs, p)
        shape = tuple(p["shape"])
        if a.shape == shape:
            one = True
        elif a.ndim == len(shape) + 1 and a.shape[1:] == shape:
            one = False
        else:
            raise ObservationError(f"{_where(p['path'])} of shape {_shape_text(a.shape)}: "
                                   f"expected {_shape_text(shape)} (one observation) or "
                                   f"{_shape_text(('N', *shape))} (a batch)")
        n = 1 if one else a.shape[0]
        if single is not None and (one != single or n != count):
            raise ObservationError(f"{_where(p['path'])} has {n} row(s) and the parts before "
                                   f"it {count}: give every part one observation or the "
                                   "same batch")
        single, count = one, n
        if p["kind"] in ("discrete", "multidiscrete"):
            lo = np.asarray(p["start"])
            hi = lo + np.asarray(p["n"] if p["kind"] == "discrete" else p["nvec"])
            if a.size and (not np.all(np.isfinite(a)) or np.any(a != np.floor(a))
                           or np.any(a < lo) or np.any(a >= hi)):
                raise ObservationError(f"{_where(p['path'])}: a {p['kind'].capitalize()} "
                                       f"observation takes whole numbers in [{lo.min()}, "
                                       f"{hi.max() - 1}], got {a.ravel()[:4].tolist()}")
        elif a.dtype != bool and a.size and not np.all(np.isfinite(a)):
            raise ObservationError(f"{_where(p['path'])} holds NaN or inf")
        leaves.append((list(p["path"]), a[None] if one else a))
    return _nest(leaves), bool(single)


def _nest(items: list[tuple[list[Any], Any]]) -> Any:
    """Leaves by path -> the structure they came from (dicts for keys, tuples for items)."""
    if len(items) == 1 and not items[0][0]:
        return items[0][1]
    groups: dict[Any, list[tuple[list[Any], Any]]] = {}
    for path, v in items:
        groups.setdefault(path[0], []).append((path[1:], v))
    if isinstance(next(iter(groups)), int):
        return tuple(_nest(g) for g in groups.values())
    return {k: _nest(g) for k, g in groups.items()}


def stack_obs(items: Sequence[Any]) -> Any:
    """A list of single observations (e.g. a vector env's info["final_obs"] rows) -> one batch
    (dicts and tuples part by part)."""
    first = items[0]
    if isinstance(first, dict):
        return {k: stack_obs([x[k] for x in items]) for k in first}
    if isinstance(first, tuple):
        return tuple(stack_obs([x[i] for x in items]) for i in range(len(first)))
    return np.stack([np.asarray(x) for x in items])


def all_images(layout: Sequence[dict[str, Any]]) -> bool:
    """Whether every part of the row is an image (Atari's frames, a Dict of cameras)."""
    return bool(layout) and all(p["kind"] == "image" for p in layout)


def flatten_obs(obs: Any, layout: Sequence[dict[str, Any]], pixels: bool = False
                ) -> np.ndarray:
    """A batch of observations [N, ...] (Dict: a dict of batches) -> float [N, obs_dim].

    pixels (a layout of images only, `all_images`): the rows as uint8 pixel values, channels
    first, not scaled; the networks scale them (trustrl.nets.extractors.float_pixels) to the same
    float32 values this function gives without it. A quarter of the bytes to store and copy."""
    if pixels:
        if not all_images(layout):
            raise ValueError("pixels rows need a layout of images only")
        rows = [_image_rows(np.asarray(_leaf(obs, p["path"])), p) for p in layout]
        return np.concatenate(rows, axis=1) if len(rows) > 1 else np.ascontiguousarray(rows[0])
    cols = []
    for p in layout:
        x = np.asarray(_leaf(obs, p["path"]))
        n = x.shape[0] if x.ndim else 1
        kind = p["kind"]
        if kind == "discrete":
            cols.append(np.eye(p["n"], dtype=np.float64)[x.astype(np.int64).reshape(n)
                                                          - p["start"]])
        elif kind == "multidiscrete":
            x = x.astype(np.int64).reshape(n, -1) - np.asarray(p["start"])
            cols.extend(np.eye(k, dtype=np.float64)[x[:, i]] for i, k in enumerate(p["nvec"]))
        elif kind == "image":
            # float32 (what the networks take): an 84x84x4 frame is 28k values a step
            cols.append(_image_rows(x, p).astype(np.float32) * PIXEL_SCALE)
        else:  # box, multibinary
            cols.append(np.asarray(x, np.float64).reshape(n, -1))
    return cols[0] if len(cols) == 1 else np.concatenate(cols, axis=1)


PIXEL_SCALE = np.float32(1.0 / 255.0)
"""Image values 0..255 -> [0, 1]: uint8 * this, in float32 (torch.float32 gives the same)."""


def _image_rows(x: np.ndarray, p: dict[str, Any]) -> np.ndarray:
    """An image part's batch x [N, ...] as uint8 rows [N, C*H*W], channels first."""
    n = x.shape[0] if x.ndim else 1
    x = x.reshape(n, *p["shape"])
    if p["channels_last"]:
        x = x.transpose(0, 3, 1, 2)
    return x.reshape(n, -1)


RAW_KINDS = ("image", "discrete", "multidiscrete", "multibinary")
"""Parts of an observation the observation normaliser leaves alone: images (scaled to [0, 1]
only), one-hots and bits, whose values are on a fixed scale already (normalised, a rare
category's one-hot becomes a large input)."""


def raw_columns(layout: Sequence[dict[str, Any]], obs_dim: int,
                kinds: Sequence[str] = RAW_KINDS) -> np.ndarray | None:
    """[obs_dim] bool: the columns of the parts of `kinds` (never normalised), or None: none."""
    parts = [p for p in layout if p["kind"] in kinds]
    if not parts:
        return None
    m = np.zeros(obs_dim, bool)
    for p in parts:
        m[p["offset"]:p["offset"] + p["size"]] = True
    return m


@dataclass(frozen=True)
class ActionSpec:
    """What the actor outputs. 'discrete': n actions; 'box': dim = the number of entries of
    an action of shape `shape` (flattened for the Gaussian), bounds flattened;
    'multidiscrete': nvec, dim = len(nvec), n = sum(nvec) logits; 'multibinary': dim = n bits
    (shape: the space's). start: the space's start values (Discrete, MultiDiscrete) when not 0.
    """

    kind: str
    n: int = 0
    dim: int = 0
    low: tuple[float, ...] = ()
    high: tuple[float, ...] = ()
    nvec: tuple[int, ...] = ()
    shape: tuple[int, ...] = ()
    start: tuple[int, ...] = ()

    @property
    def n_out(self) -> int:
        """The actor's output width: logits (discrete, multidiscrete, multibinary) or means."""
        return self.dim if self.kind == "box" else self.n

    @classmethod
    def from_dict(cls, d: dict) -> ActionSpec:
        """From `__dict__` as saved in agent files (lists back to tuples)."""
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})

    def space(self):  # -> gymnasium.Space
        """The Gymnasium action space (for a user's network factory)."""
        if self.kind == "discrete":
            return gym.spaces.Discrete(self.n, start=self.start[0] if self.start else 0)
        if self.kind == "multidiscrete":
            return gym.spaces.MultiDiscrete(list(self.nvec), start=list(self.start) or None)
        if self.kind == "multibinary":
            return gym.spaces.MultiBinary(list(self.shape) or self.n)
        shape = self.shape or (self.dim,)
        return gym.spaces.Box(np.asarray(self.low, np.float32).reshape(shape),
                              np.asarray(self.high, np.float32).reshape(shape))
