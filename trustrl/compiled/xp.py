"""The array namespace of ``trustrl.envs.classic`` and ``trustrl.losses`` for Numba: the
classic-control dynamics and PPO's loss terms, compiled from the same source that runs eagerly
over NumPy and torch (losses.py names its namespace's functions as torch does: ``clamp``,
``minimum``, ``maximum``, ``where``, ``zeros_like``; they are here under those names too).

``trustrl.envs.classic.bind(xp, ..., wrap=jit)`` gives each of that module's functions this
module as its ``o``. Numba resolves ``o.name`` at compile time to what this module holds: NumPy
ufuncs for the element-wise functions that NumPy and Numba share (``sin``, ``cos``, ``square``,
``abs``, ``remainder``), and ``njit`` functions with ``trustrl.envs.classic.ArrayOps``'s meaning
for the rest. ``dtype``, ``const`` and ``table`` are plain Python: they run once, when an env's
constants are built. Constants are NumPy scalars of the state's dtype, so that float32
arithmetic stays float32 in compiled code (a float64 scalar would promote it).

``branches`` is True: compiled code runs on the host, so a step may skip work nobody needs
(``if o.any(mask)``), as the NumPy form does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import literal_unroll, njit

branches = True
float32, float64, int64, bool = np.float32, np.float64, np.int64, np.bool_  # noqa: A001
sin, cos, square, abs, remainder = np.sin, np.cos, np.square, np.abs, np.remainder  # noqa: A001
minimum, maximum, zeros_like = np.minimum, np.maximum, np.zeros_like  # torch's names too

_jit = jit = njit(cache=True, error_model="numpy")
"""How trustrl.envs.classic's functions are compiled over this namespace (``bind``'s wrap)."""


def dtype(d: Any) -> Any:
    """The scalar type (np.float32, ...), which Numba takes as a compile-time dtype."""
    return np.dtype(d).type


def const(value: float, d: Any) -> Any:
    """A NumPy scalar of dtype d."""
    return np.dtype(d).type(value)


def table(values: list[float], d: Any) -> np.ndarray:
    return np.array(values, d)


@_jit
def where(mask, x, y):  # type: ignore[no-untyped-def]
    """np.where with NumPy's broadcasting of mask, x and y."""
    return np.where(mask, x, y)


@_jit
def take(tab, index):  # type: ignore[no-untyped-def]
    return tab[index]


@_jit
def pick(tab, mask):  # type: ignore[no-untyped-def]
    return np.where(mask, tab[1], tab[0])


@_jit
def clip(x, low, high):  # type: ignore[no-untyped-def]
    return np.minimum(np.maximum(x, low), high)


clamp = clip  # torch's name, which trustrl.losses uses


@_jit
def fill(x, mask, value):  # type: ignore[no-untyped-def]
    x[mask] = value
    return x


@_jit
def stack(columns, d):  # type: ignore[no-untyped-def]
    out = np.empty((columns[0].shape[0], len(columns)), d)
    j = 0
    for c in literal_unroll(columns):
        out[:, j] = c
        j += 1
    return out


@_jit
def concat(blocks):  # type: ignore[no-untyped-def]
    width = 0
    for b in literal_unroll(blocks):
        width += b.shape[1]
    out = np.empty((blocks[0].shape[0], width), blocks[0].dtype)
    j = 0
    for b in literal_unroll(blocks):
        out[:, j:j + b.shape[1]] = b
        j += b.shape[1]
    return out


@_jit
def column(x):  # type: ignore[no-untyped-def]
    return np.ascontiguousarray(x).reshape((x.shape[0], 1))


@_jit
def astype(x, d):  # type: ignore[no-untyped-def]
    return x.astype(d)


@_jit
def cast(x, d):  # type: ignore[no-untyped-def]
    return x.astype(d)


@_jit
def copy(x):  # type: ignore[no-untyped-def]
    return x.copy()


@_jit
def full(n, value, d):  # type: ignore[no-untyped-def]
    return np.full(n, value, d)


@_jit
def any(mask):  # type: ignore[no-untyped-def]  # noqa: A001
    return mask.any()


@_jit
def actions(a, n, d):  # type: ignore[no-untyped-def]
    return np.ascontiguousarray(a).reshape(n).astype(d)
