"""The array namespace of ``trustrl.envs.classic`` and ``trustrl.maths.losses`` for Numba: the
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

import builtins
import math
import types as types_
from typing import Any

import numpy as np
from numba import literal_unroll, njit, types
from numba.extending import overload

branches = True
float32, float64, int64, bool = np.float32, np.float64, np.int64, np.bool_  # noqa: A001
sin, cos, square, abs, remainder = np.sin, np.cos, np.square, np.abs, np.remainder  # noqa: A001
minimum, maximum, zeros_like = np.minimum, np.maximum, np.zeros_like  # torch's names too
exp, log, sqrt = np.exp, np.log, np.sqrt  # trustrl.maths.distributions' and trustrl.maths.optim's
take_along_axis = np.take_along_axis  # trustrl.envs.step's
finfo, full_like = np.finfo, np.full_like  # trustrl.maths.distributions.mask_logits'
isfinite = np.isfinite  # trustrl.maths.trust.cg.natural_step's

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
def amax(x, axis):  # type: ignore[no-untyped-def]
    """np.amax over the last axis (`axis` -1, the only one the sources reduce a maximum over:
    trustrl.maths.distributions.log_softmax), which Numba's np.amax lacks: one loop per row."""
    rows, out = _rows(x, x.dtype)
    for i in range(rows.shape[0]):
        m = rows[i, 0]
        for k in range(1, rows.shape[1]):
            m = builtins.max(m, rows[i, k])
        out[i] = m
    return out.reshape(x.shape[:-1])


@_jit
def _rows(x, d):  # type: ignore[no-untyped-def]
    """x [..., n] as C-contiguous rows [-1, n], and room [-1] of dtype d for one value per
    row: what the last-axis reductions below loop over."""
    rows = np.ascontiguousarray(x).reshape((-1, x.shape[-1]))
    return rows, np.empty(rows.shape[0], d)


def mean(x, axis):  # type: ignore[no-untyped-def]
    """The mean over the last axis (`axis` -1, the only one the sources reduce a mean over:
    trustrl.maths.losses.ppo_loss, trustrl.maths.advantages.normalize_advantages): of a 1-d
    array np.mean's scalar; of more dimensions each row's [..., ] in x's dtype, summed in
    float64. (Numba's np.mean takes no axis.)"""
    return np.mean(x, axis)


def std(x, axis):  # type: ignore[no-untyped-def]
    """The unbiased standard deviation over the last axis (`axis` -1, torch's std), each row's
    [...] in x's dtype, the mean and the squares summed in float64."""
    return np.std(x, axis, ddof=1)


@_jit
def _row_mean(row):  # type: ignore[no-untyped-def]
    """The mean of a 1-d array, summed in float64."""
    s = 0.0
    for k in range(row.shape[0]):
        s += row[k]
    return s / row.shape[0]


@overload(mean)
def _mean_impl(x, axis):  # type: ignore[no-untyped-def]
    if x.ndim == 1:
        return lambda x, axis: np.mean(x)

    def impl(x, axis):  # type: ignore[no-untyped-def]
        rows = np.ascontiguousarray(x).reshape((-1, x.shape[-1]))
        out = np.empty(rows.shape[0], x.dtype)
        for i in range(rows.shape[0]):
            out[i] = _row_mean(rows[i])
        return out.reshape(x.shape[:-1])

    return impl


@overload(std)
def _std_impl(x, axis):  # type: ignore[no-untyped-def]
    def impl(x, axis):  # type: ignore[no-untyped-def]
        n = x.shape[-1]
        rows = np.ascontiguousarray(x).reshape((-1, n))
        out = np.empty(rows.shape[0], x.dtype)
        for i in range(rows.shape[0]):
            mu = _row_mean(rows[i])
            ss = 0.0
            for k in range(n):
                ss += (rows[i, k] - mu) ** 2
            out[i] = math.sqrt(ss / (n - 1))
        return out.reshape(x.shape[:-1])

    return impl


@_jit
def argmax(x, axis):  # type: ignore[no-untyped-def]
    """np.argmax over the last axis (`axis` -1, the only one the sources take it over:
    trustrl.envs.step.categorical_sample), one loop per row, the first maximum's index as
    np.argmax's: Numba's np.argmax with an axis runs a generic loop (on the [1, 4, 2] of one
    CartPole step 1.51 against 0.10 us, timed one after the other in one process)."""
    rows, out = _rows(x, np.int64)
    for i in range(rows.shape[0]):
        best = 0
        m = rows[i, 0]
        for k in range(1, rows.shape[1]):
            if m != m:  # a NaN is the maximum, its first index np.argmax's
                break
            if rows[i, k] > m or rows[i, k] != rows[i, k]:
                m = rows[i, k]
                best = k
        out[i] = best
    return out.reshape(x.shape[:-1])


@_jit
def sum(x, axis):  # type: ignore[no-untyped-def]  # noqa: A001
    """The sum over the last axis (`axis` -1, the only one the sources sum over with o.sum:
    trustrl.maths.distributions' log-softmax, entropy and KL), in x's dtype, one loop per row:
    Numba's sum with an axis runs a generic loop."""
    rows, out = _rows(x, x.dtype)
    for i in range(rows.shape[0]):
        s = rows[i, 0]
        for k in range(1, rows.shape[1]):
            s += rows[i, k]
        out[i] = s
    return out.reshape(x.shape[:-1])


@_jit
def take(tab, index):  # type: ignore[no-untyped-def]
    return tab[index]


@_jit
def pick(tab, mask):  # type: ignore[no-untyped-def]
    return np.where(mask, tab[1], tab[0])


@_jit
def gather(x, index):  # type: ignore[no-untyped-def]
    out = np.empty(x.shape[0], x.dtype)
    for i in range(x.shape[0]):
        out[i] = x[i, index[i]]
    return out


@_jit
def clip(x, low, high):  # type: ignore[no-untyped-def]
    return np.minimum(np.maximum(x, low), high)


clamp = clip  # torch's name, which trustrl.maths.losses uses


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


def compiled_source(module: Any, names: tuple[str, ...], elementwise_names: tuple[str, ...] = (),
                    fastmath: bool = False, bind: dict[str, Any] | None = None) -> Any:
    """The array functions `names` of `module` (written over a free global ``o``) compiled by
    Numba over this namespace, and its elementwise functions `elementwise_names` as
    `elementwise` (scalars in, or one loop over arrays): a module registered as
    ``_trustrl_xp_<the module's dotted name, dots as _>`` (Numba's disk cache records that
    name) whose attributes are the compiled functions, each running the source function's
    own code object (``f.py_func.__code__ is getattr(module, name).__code__``), cached on
    disk. The one-source functions `module` imports from other modules (functions whose
    globals hold an ``o``: a variant's objective calling trustrl.maths.losses' terms) are bound
    there the same way and given to it compiled. `fastmath` lets LLVM reassociate (vectorised
    sums; the last bits change). `bind` gives other free globals of the source their compiled
    values (trustrl.maths.trust.cg's `product`: the compiled Fisher-vector product). Made once per
    process and function; later calls add the functions not yet bound."""
    import sys
    import types as pytypes

    from trustrl.util.rebind import rebound

    name = "_trustrl_xp_" + module.__name__.replace(".", "_")
    bound = sys.modules.get(name)
    missing = tuple(n for n in elementwise_names + names
                    if bound is None or n not in vars(bound) or bound.__dict__[n] is getattr(
                        module, n))
    if not missing:
        return bound
    deps: dict[str, Any] = {}
    for key, f in vars(module).items():  # one-source functions of other modules
        if not isinstance(f, pytypes.FunctionType):
            continue
        home: Any = sys.modules.get(str(f.__module__))
        fname = str(f.__name__)
        if home is not None and home is not module and "o" in f.__globals__ \
                and getattr(home, fname, None) is f:
            deps[key] = _Lazy(home, fname)
    bound = rebound(name, f"{module.__name__} over trustrl.compute.compiled.xp", vars(module),
                    (getattr(module, n) for n in missing),
                    {"o": sys.modules[__name__], **(bind or {})},
                    njit(cache=True, fastmath=fastmath, error_model="numpy"))
    for key, lazy in deps.items():
        if bound.__dict__.get(key) is getattr(lazy.module, lazy.name):  # not rebound here
            bound.__dict__[key] = getattr(compiled_source(lazy.module, (lazy.name,)), lazy.name)
    for n in elementwise_names:  # the other functions see the elementwise form
        if n in missing:
            setattr(bound, n, elementwise(getattr(bound, n), n))
    return bound


class _Lazy:
    """A function of another module to bind once this module's are."""

    def __init__(self, module: Any, name: str) -> None:
        self.module, self.name = module, name


def _flat(x):  # type: ignore[no-untyped-def]
    return x


@overload(_flat)
def _flat_impl(x):  # type: ignore[no-untyped-def]
    """An array as 1-d (a view where it is C-contiguous; 1-d arrays as they are), a scalar as
    it is."""
    if isinstance(x, types.Array):
        if x.ndim == 1:
            return lambda x: x
        if x.layout == "C":
            return lambda x: x.reshape(-1)
        return lambda x: np.ascontiguousarray(x).reshape(-1)
    return lambda x: x


def elementwise(scalar: Any, name: str) -> Any:
    """The compiled form of an elementwise source function (arithmetic on arguments of one
    shape, or scalars): `scalar` (its njit dispatcher) where every argument is a scalar, and
    one loop over the elements where some are arrays (of one size; the result has the first
    array's shape and dtype): what NumPy and torch do with the same function on whole arrays,
    at the cost of one loop (a compiled array expression allocates per operation and ran
    2-7x slower than the loop)."""

    def stub(*args):  # type: ignore[no-untyped-def]
        return scalar.py_func(*args)

    stub.__name__ = stub.__qualname__ = name
    stub.__wrapped__ = scalar  # type: ignore[attr-defined]
    impls: dict[tuple[bool, ...], Any] = {}

    @overload(stub)
    def _impl(*args):  # type: ignore[no-untyped-def]
        if args and isinstance(args[0], types.BaseTuple):  # Numba passes *args as one tuple
            args = tuple(args[0])
        arrays = tuple(isinstance(a, types.Array) for a in args)
        if not builtins.any(arrays):  # this module's `any` is the namespace's
            return lambda *args: scalar(*args)
        key = tuple(a.ndim if isinstance(a, types.Array) else 0 for a in args)
        impl = impls.get(key)
        if impl is None:
            n, k = len(args), arrays.index(True)
            one_d = builtins.all(d <= 1 for d in key)  # index the arrays as they are
            flats = "".join(f"    a{i} = args[{i}]\n" if one_d or not key[i]
                            else f"    a{i} = _flat(args[{i}])\n" for i in range(n))
            call = ", ".join(f"a{i}[j]" if key[i] else f"a{i}" for i in range(n))
            src = (f"def impl(*args):\n{flats}"
                   f"    out = np.empty_like(a{k})\n"
                   f"    for j in range(out.shape[0]):\n"
                   f"        out[j] = _scalar({call})\n"
                   f"    return out{'' if one_d else f'.reshape(args[{k}].shape)'}\n")
            code = compile(src, f"<trustrl elementwise {name}>", "exec")
            ns = dict(globals())
            ns["_scalar"] = scalar
            impl = impls[key] = types_.FunctionType(code.co_consts[0], ns, name)
        return impl

    return stub
