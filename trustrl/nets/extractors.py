"""Feature extractors: the module in front of the actor's and the critic's MLP heads.

Every observation reaches the networks as one flat float row [B, obs_dim] (see
trustrl.envs.spaces: images already scaled to [0, 1] and channels-first, Discrete parts
one-hot). A layout (plain data, saved in agent files) says where each part sits in the row.

    None                 the MLP reads the row itself (Box, Discrete, MultiDiscrete,
                         MultiBinary, Dict/Tuple of these): the closed-form backend applies.
    CombinedExtractor    a CNN per image part (NatureCNN, or SmallCNN for images under 36
                         pixels), every other part passed through flat, all concatenated
                         (Stable-Baselines3's CombinedExtractor; also for one image alone).
    UserExtractor        a user's module on the structured observation (`unflatten`): a
                         tensor per part ([B, C, H, W] images, one-hots, floats), in a dict
                         for Dict spaces and a tuple for Tuple spaces; its size in the
                         attribute `features_dim` (or `out_features`).

A user's network comes from a factory named by an import path "module:attr" (`load_factory`):
a callable returning an nn.Module, called with the env's observation and action spaces when
it takes two arguments, else with none (see docs/custom_networks.md).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from trustrl.envs.spaces import PIXEL_SCALE
from trustrl.util.errors import ConfigError
from trustrl.util.importing import import_path as _import_path
from trustrl.util.importing import resolve

NATURE_MIN = 36
"""NatureCNN's smallest input side (8x8 stride 4, 4x4 stride 2, 3x3 stride 1)."""


def _ortho(layer: nn.Module, ortho_init: bool) -> nn.Module:
    """Orthogonal weights with gain sqrt(2) and zero biases (PyTorch's default init if not
    ortho_init, e.g. for a network whose weights are loaded next)."""
    if ortho_init:
        nn.init.orthogonal_(layer.weight, math.sqrt(2.0))  # type: ignore[arg-type]
        nn.init.zeros_(layer.bias)  # type: ignore[arg-type]
    return layer


def _conv(c_in: int, c_out: int, k: int, s: int, p: int, ortho_init: bool) -> nn.Module:
    return _ortho(nn.Conv2d(c_in, c_out, k, s, p), ortho_init)


_SCALE = float(PIXEL_SCALE)  # exactly the float32 1/255 (a Python scalar: no device copy)


def float_pixels(x: Tensor) -> Tensor:
    """uint8 pixel rows (trustrl.envs.spaces.flatten_obs with pixels) -> float32 in [0, 1],
    the values flatten_obs gives without it; float input is returned as it is."""
    if x.dtype != torch.uint8:
        return x
    # scaled in place: a fresh array of a minibatch's frames costs more in page faults than
    # the multiplication (the conversion's own array is new and holds no gradient)
    return x.to(torch.float32).mul_(_SCALE)


CHANNELS_LAST_MIN = 32
"""Batches of at least this many images go through the CNN in channels-last layout (CPU)."""


class NatureCNN(nn.Module):
    """Mnih et al. (2015): conv 32 8x8/4, conv 64 4x4/2, conv 64 3x3/1, each ReLU, then
    linear to `features_dim` (512) and ReLU. Input [B, C, H, W] in [0, 1], H, W >= 36."""

    def __init__(self, chw: Sequence[int], features_dim: int = 512, ortho_init: bool = True):
        super().__init__()
        c, h, w = chw
        o = ortho_init
        self.convs = nn.Sequential(_conv(c, 32, 8, 4, 0, o), nn.ReLU(), _conv(32, 64, 4, 2, 0, o),
                                   nn.ReLU(), _conv(64, 64, 3, 1, 0, o), nn.ReLU(), nn.Flatten())
        self._head(c, h, w, features_dim, o)

    def _head(self, c: int, h: int, w: int, features_dim: int, ortho_init: bool) -> None:
        with torch.no_grad():
            n = self.convs(torch.zeros(1, c, h, w)).shape[1]
        self.linear = _ortho(nn.Linear(n, features_dim), ortho_init)
        self.features_dim = features_dim

    def forward(self, x: Tensor) -> Tensor:
        """x: [B, C, H, W] in [0, 1], or uint8 pixel values (scaled here, after the layout
        change, which then moves a quarter of the bytes)."""
        if x.device.type == "cpu" and x.shape[0] >= CHANNELS_LAST_MIN:
            # oneDNN's convolutions on channels-last input: NatureCNN's forward and backward
            # on 256 Atari frames took 116 ms against 175 ms (one thread); at a rollout's few
            # frames the plain layout is the faster
            x = x.contiguous(memory_format=torch.channels_last)
        return torch.relu(self.linear(self.convs(float_pixels(x))))


class SmallCNN(NatureCNN):
    """For images smaller than NatureCNN takes: conv 32 3x3/2, conv 64 3x3/2, conv 64 3x3/1
    (padding 1), then linear 512 and ReLU."""

    def __init__(self, chw: Sequence[int], features_dim: int = 512, ortho_init: bool = True):
        nn.Module.__init__(self)
        c, h, w = chw
        o = ortho_init
        self.convs = nn.Sequential(_conv(c, 32, 3, 2, 1, o), nn.ReLU(), _conv(32, 64, 3, 2, 1, o),
                                   nn.ReLU(), _conv(64, 64, 3, 1, 1, o), nn.ReLU(), nn.Flatten())
        self._head(c, h, w, features_dim, o)


def _nature_size(chw: Sequence[int]) -> bool:
    """Whether an image [C, H, W] is large enough for NatureCNN."""
    return min(chw[1], chw[2]) >= NATURE_MIN


def image_cnn(chw: Sequence[int], ortho_init: bool = True) -> NatureCNN:
    """NatureCNN where the image is large enough, else SmallCNN."""
    cls = NatureCNN if _nature_size(chw) else SmallCNN
    return cls(chw, ortho_init=ortho_init)


def nature_cnn(layout: Sequence[dict[str, Any]]) -> bool:
    """Whether the default network has a NatureCNN: an image part of sides >= NATURE_MIN."""
    return any(p["kind"] == "image" and _nature_size(p["chw"]) for p in layout)


def needs_extractor(layout: Sequence[dict[str, Any]]) -> bool:
    """Whether the default network needs a CombinedExtractor (an image part)."""
    return any(p["kind"] == "image" for p in layout)


class CombinedExtractor(nn.Module):
    """A CNN per image part, the other parts of the row passed through as they are (already
    flat, one-hot or float), concatenated: [B, obs_dim] -> [B, features_dim]."""

    def __init__(self, layout: Sequence[dict[str, Any]], ortho_init: bool = True):
        super().__init__()
        self.layout = [dict(p) for p in layout]
        self.cnns = nn.ModuleList(image_cnn(p["chw"], ortho_init) for p in self.layout
                                  if p["kind"] == "image")
        self.features_dim = (sum(c.features_dim for c in self.cnns)
                             + sum(p["size"] for p in self.layout if p["kind"] != "image"))

    def forward(self, x: Tensor) -> Tensor:
        outs, i = [], 0
        for p in self.layout:
            cols = x[:, p["offset"]:p["offset"] + p["size"]]
            if p["kind"] == "image":
                outs.append(self.cnns[i](cols.reshape(x.shape[0], *p["chw"])))
                i += 1
            else:
                outs.append(cols)
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)


def _part_tensor(x: Tensor, p: dict[str, Any]) -> Tensor:
    cols = x[:, p["offset"]:p["offset"] + p["size"]]
    if p["kind"] == "image":
        return cols.reshape(x.shape[0], *p["chw"])
    if p["kind"] in ("box", "multibinary") and len(p["shape"]) > 1:
        return cols.reshape(x.shape[0], *p["shape"])
    return cols


def _nest(layout: Sequence[dict[str, Any]], leaf: Callable[[dict[str, Any]], Any],
          tuple_of: Callable[[list[Any]], Any], dict_of: Callable[[dict[str, Any]], Any]
          ) -> Any:
    if len(layout) == 1 and not layout[0]["path"]:
        return leaf(layout[0])
    root: dict[Any, Any] = {}
    for p in layout:
        node = root
        for k in p["path"][:-1]:
            node = node.setdefault(k, {})
        node[p["path"][-1]] = leaf(p)

    def build(node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        if all(isinstance(k, int) for k in node):
            return tuple_of([build(node[i]) for i in sorted(node)])
        return dict_of({k: build(v) for k, v in node.items()})

    return build(root)


def unflatten(x: Tensor, layout: Sequence[dict[str, Any]]) -> Any:
    """A flat batch [B, obs_dim] -> the structured observation as a user's network sees it:
    per part a tensor [B, *shape] (images [B, C, H, W] in [0, 1]; Discrete and MultiDiscrete
    parts as their one-hots [B, n] / [B, sum(nvec)]; the rest as floats), in dicts and tuples
    as the space nests them. A plain Box space gives [B, *shape]. uint8 pixel rows are
    scaled first."""
    x = float_pixels(x)
    return _nest(layout, lambda p: _part_tensor(x, p), tuple, dict)


def layout_space(layout: Sequence[dict[str, Any]]) -> gym.Space:
    """The observation space rebuilt from a layout (for a user's network factory when an
    agent file is loaded): shapes, sizes and image dtypes as the env's; Box bounds not kept."""
    def leaf(p: dict[str, Any]) -> gym.Space:
        if p["kind"] == "image":
            return gym.spaces.Box(0, 255, tuple(p["shape"]), np.uint8)
        if p["kind"] == "box":
            return gym.spaces.Box(-np.inf, np.inf, tuple(p["shape"]), np.float32)
        if p["kind"] == "discrete":
            return gym.spaces.Discrete(p["n"], start=p.get("start", 0))
        if p["kind"] == "multidiscrete":
            return gym.spaces.MultiDiscrete(p["nvec"], start=p.get("start"))
        return gym.spaces.MultiBinary(p["shape"])

    return _nest(layout, leaf, gym.spaces.Tuple, gym.spaces.Dict)


def features_dim(module: nn.Module) -> int | None:
    """A feature extractor's output size (its `features_dim` or `out_features`), else None."""
    for attr in ("features_dim", "out_features"):
        v = getattr(module, attr, None)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


class UserExtractor(nn.Module):
    """A user's feature extractor on the structured observation: [B, obs_dim] -> features."""

    def __init__(self, module: nn.Module, layout: Sequence[dict[str, Any]]):
        super().__init__()
        self.inner = module
        self.layout = [dict(p) for p in layout]
        self.features_dim = features_dim(module)

    def forward(self, x: Tensor) -> Tensor:
        return self.inner(unflatten(x, self.layout))


# --- a user's network by import path -------------------------------------------------------

def import_path(obj: Any) -> str:
    """The "module:qualname" of a top-level function or class (ConfigError otherwise)."""
    path = _import_path(obj) if callable(obj) else None
    if path is None:
        raise ConfigError(f"policy {obj!r:.60} must be a function or class defined at the top "
                          "level of an importable module (given as 'module:name')")
    return path


def load_factory(path: str) -> Callable[..., Any]:
    """The callable named by "package.module:attr" (attr may be dotted), imported with the
    current folder on the path; ConfigError with one line when it cannot be. The standard
    library's callables are refused (an agent file naming os:system is refused, not run)."""
    return resolve(path, "policy", ConfigError)


def call_factory(path: str, observation_space: gym.Space, action_space: gym.Space
                 ) -> nn.Module:
    """Import the factory and call it (with the two spaces when it takes two arguments)."""
    factory = load_factory(path)
    try:
        sig = inspect.signature(factory)
        required = [p for p in sig.parameters.values()
                    if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY,
                                                           p.POSITIONAL_OR_KEYWORD)]
        takes_two = len(required) >= 2 or (
            len([p for p in sig.parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]) >= 2)
    except (TypeError, ValueError):
        takes_two = False
    try:
        module = factory(observation_space, action_space) if takes_two else factory()
    except Exception as e:  # noqa: BLE001 - the user's code
        raise ConfigError(f"policy {path!r}: the factory failed: {type(e).__name__}: "
                          f"{(str(e).splitlines() or [''])[0]}") from None
    if not isinstance(module, nn.Module):
        raise ConfigError(f"policy {path!r} returned {type(module).__name__}, not a "
                          "torch.nn.Module")
    return module
