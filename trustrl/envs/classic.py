"""The dynamics of Gymnasium's five classic-control envs (and of MaskedPick-v0, a game with
invalid moves whose dynamics also give each state's action mask), written once for NumPy and
torch.

    dyn = CartPole(NUMPY, np.float32)                  # or CartPole(torch_ops("cuda"), ...)
    state, elapsed, next_obs, reward, terminated, truncated, final_obs = dyn.transition(
        state, elapsed, actions, reset_state)

Each env is one class whose ``step`` (state, actions -> state, reward, terminated) and
``observe`` do the arithmetic through an array namespace ``self.o``: ``NUMPY`` (the CPU rollout
of ``trustrl.collect.batched``, with 1-64 envs, where a step costs what its operations cost to
launch) or a ``TorchOps`` on a device (``trustrl.envs.torch_classic``: many envs on CPU or CUDA,
compiled or
captured in a CUDA graph). The time limit and the same-step autoreset (``transition``) are
shared too. What differs between the libraries is confined to the ``ArrayOps`` below: the names
of a few functions (clip/clamp, concatenate/cat), the form a constant takes (a 0-d array of the
state's dtype for NumPy, which rounds a Python float the way torch rounds a scalar meeting a
tensor and costs less than a Python float operand; a Python number for torch), table lookups
(NumPy fancy indexing, ``index_select`` for torch), and one flag, ``branches``: NumPy runs on the
host, so a step may test ``if any(mask)`` and skip work nobody needs (the autoreset when no
episode ended, the angle wrap when no angle left [-pi, pi]); torch must not (a test reads a
device value back to the host and breaks CUDA graphs), so it always does that work, which
changes no number.

The arithmetic is Gymnasium 1.x's (``gymnasium/envs/classic_control``), in Gymnasium's order,
with only exact rewrites: products by constants equal to 1 dropped, ``|x| > c`` for
``x < -c or x > c``, table lookups for ``(a - 1) * c`` and ``where(a == 1, f, -f)``, and the Euler
step of CartPole as ``state + tau * (x_dot, xacc, theta_dot, thetaacc)``. Float64 therefore
matches Gymnasium fed float64 actions up to the last-bit differences of a library's sin/cos
(NumPy's are glibc's, Gymnasium's own); float32 matches it to float32 rounding. The per-env
docstrings say what is reproduced and the easy mistakes.

Inputs and outputs (N rows): ``state`` and ``reset_state`` [N, state_dim] in ``state_dtype``;
``elapsed`` int64 [N]; discrete actions [N] of any integer dtype (values outside the action
space are not checked: checking would need a host sync on a device; they give undefined
dynamics), Box actions [N, 1] or [N] (converted to ``dtype``, clipped to the bounds inside the
step as Gymnasium's envs do). Inputs are never modified and every returned array is new (none
shares memory with an input or another output), so the torch form is a pure function of its
inputs and a NumPy caller may normalise observations in place.
"""

from __future__ import annotations

import collections
import math
import operator
import re
from typing import Any, ClassVar

import numpy as np

from trustrl.util.rebind import rebound

__all__ = [
    "DYNAMICS",
    "MASKED",
    "NUMPY",
    "Acrobot",
    "ArrayOps",
    "CartPole",
    "CartPoleNoVel",
    "Dynamics",
    "MaskedPick",
    "MountainCar",
    "MountainCarContinuous",
    "NumpyOps",
    "Pendulum",
    "PendulumNoVel",
    "TorchOps",
    "torch_ops",
]

Array = Any  # an np.ndarray or a torch.Tensor, as the namespace makes them


# -- the array namespaces ------------------------------------------------------------------------

class ArrayOps:
    """What the dynamics need from an array library, under one set of names.

    Functions with the same meaning and name in NumPy and torch are attributes (``sin``, ``cos``,
    ``square``, ``abs``, ``remainder``, ``where``); the rest are methods. Dtypes are the
    library's own (``float32``, ``float64``, ``int64``, ``bool``).
    """

    branches: bool
    """True where the arrays live on the host, so ``if o.any(mask)`` costs nothing but the
    test; False for torch, whose step must never read a device value back."""

    float32: Any
    float64: Any
    int64: Any
    bool: Any
    sin: Any
    cos: Any
    square: Any
    abs: Any
    remainder: Any
    where: Any

    def dtype(self, dtype: Any) -> Any:
        """The library's canonical form of a dtype (NumPy: np.dtype(np.float32), not the type)."""
        return dtype

    def const(self, value: float, dtype: Any) -> Any:
        """A scalar operand that computes as ``value`` rounded to ``dtype`` would."""
        raise NotImplementedError

    def table(self, values: list[float], dtype: Any) -> Array:
        """A 1-d lookup table for ``take`` and ``pick``."""
        raise NotImplementedError

    def take(self, table: Array, index: Array) -> Array:
        """table[index] for an int64 index [N]."""
        raise NotImplementedError

    def pick(self, table: Array, mask: Array) -> Array:
        """table[1] where mask else table[0], for a 2-entry table and a bool mask [N]."""
        raise NotImplementedError

    def gather(self, x: Array, index: Array) -> Array:
        """x[i, index[i]] for x [N, n] and an int64 index [N] (a new [N] array)."""
        raise NotImplementedError

    def clip(self, x: Array, low: Any, high: Any) -> Array:
        """max(x, low), then min(., high): torch.clamp's order (np.clip costs 2x more)."""
        raise NotImplementedError

    def fill(self, x: Array, mask: Array, value: Any) -> Array:
        """x with ``value`` where mask is True. NumPy writes into x (a boolean assignment costs
        a third of np.where), so x must be an array the step itself made, never an input."""
        raise NotImplementedError

    def stack(self, columns: tuple[Array, ...], dtype: Any) -> Array:
        """A new [N, len(columns)] array in ``dtype`` (each column rounded into it)."""
        raise NotImplementedError

    def concat(self, blocks: tuple[Array, ...]) -> Array:
        """Blocks [N, k_i] side by side (a new array)."""
        raise NotImplementedError

    def column(self, x: Array) -> Array:
        """x [N] as a column [N, 1] (a view where the library has them)."""
        return x[:, None]

    def astype(self, x: Array, dtype: Any) -> Array:
        """x in ``dtype``, always a new array."""
        raise NotImplementedError

    def copy(self, x: Array) -> Array:
        """A new array equal to x."""
        raise NotImplementedError

    def cast(self, x: Array, dtype: Any) -> Array:
        """x in ``dtype``; x itself when it already is (only for values nobody modifies)."""
        raise NotImplementedError

    def full(self, n: int, value: Any, dtype: Any) -> Array:
        """A new [n] array filled with ``value``."""
        raise NotImplementedError

    def any(self, mask: Array) -> bool:
        """Whether any entry is True (only called where ``branches`` is True)."""
        raise NotImplementedError

    def actions(self, actions: Any, n: int, dtype: Any) -> Array:
        """Actions ([n], or Box actions [n, 1]) as ``dtype`` [n]: int64 for discrete ones (floats
        truncated toward zero), the env's dtype for Box ones."""
        raise NotImplementedError


class NumpyOps(ArrayOps):
    """NumPy: constants are 0-d arrays (about 0.3 us cheaper per operation than a Python float,
    and rounded like a torch scalar); columns are assembled into a preallocated array (np.stack
    costs 4x more on a few rows); filled arrays are copied from cached ones (np.full is slow)."""

    branches = True
    float32, float64, int64, bool = (np.dtype(np.float32), np.dtype(np.float64),
                                     np.dtype(np.int64), np.dtype(np.bool_))
    _u8 = np.dtype(np.uint8)

    def __init__(self) -> None:
        # instance attributes: np.where, a Python-level dispatcher, would bind as a method
        self.sin, self.cos, self.square, self.abs = np.sin, np.cos, np.square, np.abs
        self.remainder, self.where = np.remainder, np.where
        # take, copy, any: C functions, no Python frame per call (0.05-0.1 us each); any
        # returns the count, whose truth value is the answer
        self.take = operator.getitem  # type: ignore[method-assign]
        self.copy = np.ndarray.copy  # type: ignore[method-assign]
        self.any = np.count_nonzero  # type: ignore[method-assign]
        self._filled: dict[tuple[int, Any, str], np.ndarray[Any, Any]] = {}

    def __repr__(self) -> str:
        return "NUMPY"

    def dtype(self, dtype: Any) -> Any:
        return np.dtype(dtype)

    def const(self, value: float, dtype: Any) -> Any:
        return np.array(value, dtype)

    def table(self, values: list[float], dtype: Any) -> Array:
        return np.array(values, dtype)

    def pick(self, table: Array, mask: Array) -> Array:
        return table[mask.view(self._u8)]

    def gather(self, x: Array, index: Array) -> Array:
        return x[np.arange(x.shape[0]), index]

    def clip(self, x: Array, low: Any, high: Any) -> Array:
        return np.minimum(np.maximum(x, low), high)  # faster than out= on a few rows

    def fill(self, x: Array, mask: Array, value: Any) -> Array:
        x[mask] = value
        return x

    def stack(self, columns: tuple[Array, ...], dtype: Any) -> Array:
        out = np.empty((columns[0].shape[0], len(columns)), dtype)
        for j, c in enumerate(columns):
            out[:, j] = c
        return out

    def concat(self, blocks: tuple[Array, ...]) -> Array:
        return np.concatenate(blocks, axis=1)

    def astype(self, x: Array, dtype: Any) -> Array:
        return x.astype(dtype)

    def cast(self, x: Array, dtype: Any) -> Array:
        return x.astype(dtype, copy=False)

    def full(self, n: int, value: Any, dtype: Any) -> Array:
        key = (n, value, dtype.char)
        arr = self._filled.get(key)
        if arr is None:
            arr = self._filled[key] = np.full(n, value, dtype)
        return arr.copy()

    def actions(self, actions: Any, n: int, dtype: Any) -> Array:
        return np.asarray(actions, dtype).reshape(n)


NUMPY = NumpyOps()


class TorchOps(ArrayOps):
    """torch on one device: constants are Python numbers (what torch.compile and CUDA graphs
    take as literals), tables are tensors on the device, and nothing reads a value back to the
    host (``branches`` is False)."""

    branches = False

    def __init__(self, device: Any) -> None:
        import torch

        self._torch = torch
        self.device = torch.device(device)
        self.float32, self.float64, self.int64, self.bool = (torch.float32, torch.float64,
                                                             torch.int64, torch.bool)
        self.sin, self.cos, self.square, self.abs = torch.sin, torch.cos, torch.square, torch.abs
        self.remainder, self.where = torch.remainder, torch.where

    def __repr__(self) -> str:
        return f"TorchOps({self.device})"

    def const(self, value: float, dtype: Any) -> Any:
        return value

    def table(self, values: list[float], dtype: Any) -> Array:
        return self._torch.tensor(values, dtype=dtype, device=self.device)

    def take(self, table: Array, index: Array) -> Array:
        return self._torch.index_select(table, 0, index)

    def pick(self, table: Array, mask: Array) -> Array:
        return self._torch.index_select(table, 0, mask.to(self._torch.int64))

    def gather(self, x: Array, index: Array) -> Array:
        return self._torch.gather(x, 1, index[:, None])[:, 0]

    def clip(self, x: Array, low: Any, high: Any) -> Array:
        return self._torch.clamp(x, low, high)

    def fill(self, x: Array, mask: Array, value: Any) -> Array:
        return x.masked_fill(mask, value)

    def stack(self, columns: tuple[Array, ...], dtype: Any) -> Array:
        return self._torch.stack(columns, 1).to(dtype)

    def concat(self, blocks: tuple[Array, ...]) -> Array:
        return self._torch.cat(blocks, 1)

    def astype(self, x: Array, dtype: Any) -> Array:
        return x.to(dtype, copy=True)

    def copy(self, x: Array) -> Array:
        return x.clone()

    def cast(self, x: Array, dtype: Any) -> Array:
        return x.to(dtype)

    def full(self, n: int, value: Any, dtype: Any) -> Array:
        return self._torch.full((n,), value, dtype=dtype, device=self.device)

    def any(self, mask: Array) -> bool:  # never called: branches is False
        raise RuntimeError("a torch step must not branch on device values")

    def actions(self, actions: Any, n: int, dtype: Any) -> Array:
        a = self._torch.as_tensor(actions, device=self.device).detach()
        return a.to(dtype).reshape(n)


_TORCH_OPS: dict[Any, TorchOps] = {}


def torch_ops(device: Any = "cpu") -> TorchOps:
    """The (cached) torch namespace for ``device``."""
    import torch

    dev = torch.device(device)
    ops = _TORCH_OPS.get(dev)
    if ops is None:
        ops = _TORCH_OPS[dev] = TorchOps(dev)
    return ops


# -- binding the dynamics to a namespace ---------------------------------------------------------
#
# Each env's arithmetic is a set of module-level functions of (k, arrays): ``k`` is the env's
# constants (a namedtuple built once by ``_setup``) and the array operations are looked up on the
# global name ``o``, which this module never defines. ``bind`` gives every such function a copy of
# this module's globals with ``o`` set to a namespace, and with ``step`` and ``observe`` set to the
# env's own functions, so that the shared ``transition`` calls them. The same source then runs
# eagerly over NumPy or torch, and compiled by Numba over ``trustrl.compute.compiled.xp`` (whose
# ``wrap``
# hands each bound function to ``numba.njit``).

class _Unbound:
    """The module-level stand-in for a name that ``bind`` gives each function: calling a function
    written over ``o`` without binding it fails here, with this message."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, attr: str) -> Any:
        raise RuntimeError(f"{self.name} is unbound: call the function as bind() returns it")

    def __call__(self, *args: Any) -> Any:
        raise RuntimeError(f"{self.name} is unbound: call the function as bind() returns it")


o: Any = _Unbound("o")
"""The array namespace of the functions below (``ArrayOps``), given to each by ``bind``."""
step: Any = _Unbound("step")
observe: Any = _Unbound("observe")
"""The env's ``step`` and ``observe``, which ``transition`` calls: given by ``bind``."""

_FUNCTIONS: dict[str, Any] = {}
"""Every function written over ``o``, by name (filled by ``_over_o``)."""


def _over_o(f: Any) -> Any:
    """Register ``f`` as written over the namespace ``o`` (for ``bind``); returns it unchanged."""
    _FUNCTIONS[f.__name__] = f
    return f


_BOUND: dict[tuple[int, str, str, int], dict[str, Any]] = {}


def bind(ops: Any, step: Any, observe: Any, wrap: Any = None) -> dict[str, Any]:
    """Every registered function with ``o`` = ``ops`` and the free names ``step`` and ``observe``
    the bound forms of the env's ``step`` and ``observe``: a namespace (dict) of the bound
    functions by name. ``wrap`` (e.g. ``numba.njit``) is applied to each bound function.

    The namespace is the ``__dict__`` of a module registered in ``sys.modules`` (tools that
    find a function's globals through its module, as torch.compile's guards do, then see the
    bound names), made once per (namespace, env, wrap) and shared by the envs that ask again
    (a Numba-compiled namespace keeps its compiled functions)."""
    key = (id(ops), step.__name__, observe.__name__, id(wrap))
    ns = _BOUND.get(key)
    if ns is not None:
        return ns
    # A name that is the same in every process (Numba's disk cache records it and imports it
    # when it loads compiled code) and has no dot (importers would look for a package).
    ops_name = re.sub(r"\W", "_", getattr(ops, "__name__", None) or repr(ops))
    # the observation's name too where it is not the step's env's own (CartPoleNoVel shares
    # CartPole's step): the five envs keep the names Numba's disk cache knows them by
    own = observe is observe_state or (observe.__name__.removesuffix("_observe")
                                       == step.__name__.removesuffix("_step"))
    name = (f"_trustrl_classic_{ops_name}_{step.__name__}"
            + ("" if own else f"_{observe.__name__}") + ("" if wrap is None else "_wrapped"))
    ns = rebound(name, f"trustrl.envs.classic over {ops!r}", globals(), _FUNCTIONS.values(),
                 {"o": ops}, wrap).__dict__
    ns["step"], ns["observe"] = ns[step.__name__], ns[observe.__name__]
    ns["_wrap"] = wrap  # kept alive with the namespace, so that its id stays its own
    _BOUND[key] = ns
    return ns


# -- the shared part of every env ------------------------------------------------------------------

@_over_o
def transition(k: Any, state: Array, elapsed: Array, actions: Any, reset_state: Array
               ) -> tuple[Array, Array, Array, Array, Array, Array, Array]:
    """``Dynamics.transition`` with the env's constants ``k`` (see there)."""
    a = o.actions(actions, state.shape[0], k.action_dtype)
    new_state, reward, terminated = step(k, state, a)  # the env's, bound
    el = elapsed + k.one
    truncated = el >= k.limit
    done = terminated | truncated
    final_obs = observe(k, new_state)
    if o.branches and not o.any(done):  # NumPy: nothing ended, nothing to reset
        return new_state, el, o.copy(final_obs), reward, terminated, truncated, final_obs
    next_state = o.where(o.column(done), o.cast(reset_state, k.state_dtype), new_state)
    el = o.where(done, k.zero, el)
    # observe() is row-wise: rows that ended see the reset state's observation
    return next_state, el, observe(k, next_state), reward, terminated, truncated, final_obs


@_over_o
def observe_state(k: Any, state: Array) -> Array:
    """Identity observation (CartPole, the mountain cars, whose ``state_dtype`` is ``dtype``):
    a copy."""
    return o.copy(state)


class Dynamics:
    """One classic-control env's step as a pure function of (state, counters, actions), over
    the array namespace ``o``.

    Subclasses set the class attributes, build their constants in ``_setup`` (through
    ``o.const`` and ``o.table``, once, not per step, returned by ``constants``) and name their
    module-level ``step_fn`` (and ``observe_fn`` when the observation is not the state itself),
    written over ``o`` (see ``bind``). This base class does the action conversion, the time
    limit and the autoreset (the module-level ``transition``).

    Attributes:
        env_id: the Gymnasium id this env reproduces.
        obs_dim, state_dim: sizes of an observation and of the internal state.
        action_kind: "discrete" (then ``n_actions``) or "box" (then ``action_dim`` = 1,
            ``action_low``, ``action_high``, floats).
        max_episode_steps: the time limit Gymnasium registers for the id.
        dtype: float32 or float64 (the namespace's), of observations, rewards and Box actions.
        state_dtype: of the state and the arithmetic: ``dtype``, except Acrobot (float64).
        k: the constants (a namedtuple, one type per env class).
        functions: the bound functions (``bind``), ``transition`` among them.
    """

    env_id: ClassVar[str]
    obs_dim: ClassVar[int]
    state_dim: ClassVar[int]
    action_kind: ClassVar[str]
    max_episode_steps: ClassVar[int]
    n_actions: ClassVar[int | None] = None
    action_dim: ClassVar[int | None] = None
    action_low: ClassVar[float | None] = None
    action_high: ClassVar[float | None] = None
    float64_state: ClassVar[bool] = False
    step_fn: ClassVar[Any]
    observe_fn: ClassVar[Any] = staticmethod(observe_state)
    mask_fn: ClassVar[Any] = None
    """An env with invalid actions: its function (k, state [N, state_dim]) -> the valid actions
    [N, n_actions] (bool, a new array) of each state's observation, written over ``o`` like
    ``step_fn``; None for the envs whose every action is always valid."""

    def __init__(self, ops: ArrayOps, dtype: Any, wrap: Any = None) -> None:
        dtype = ops.dtype(dtype)
        if dtype not in (ops.float32, ops.float64):
            raise ValueError(f"dtype must be float32 or float64, got {dtype}")
        self.o = ops
        self.dtype = dtype
        self.state_dtype = ops.float64 if self.float64_state else dtype
        self.f64 = self.state_dtype == ops.float64
        self.k = self._setup()
        self.functions = bind(ops, type(self).step_fn, type(self).observe_fn, wrap)
        self._transition = self.functions["transition"]
        self._step, self._observe_k = self.functions["step"], self.functions["observe"]
        mask_fn = type(self).mask_fn
        self._mask = None if mask_fn is None else self.functions[mask_fn.__name__]
        """The bound mask function (``mask_fn``), None without one."""

    @property
    def masked(self) -> bool:
        """Whether the env gives action masks (``mask_fn``)."""
        return self._mask is not None

    def action_mask(self, state: Array) -> Array | None:
        """The valid actions [N, n_actions] (bool, a new array) of states [N, state_dim], as
        ``mask_fn`` gives them; None where the env has no masks."""
        if self._mask is None:
            return None
        return self._mask(self.k, self.o.cast(state, self.state_dtype))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env_id}, {self.o!r}, dtype={self.dtype})"

    def constants(self, **values: Any) -> Any:
        """The env's constants as a namedtuple (one type per env class, for Numba), with the
        fields every env's ``transition`` reads added."""
        o = self.o
        values.update(one=o.const(1, o.int64), zero=o.const(0, o.int64),
                      limit=o.const(self.max_episode_steps, o.int64),
                      action_dtype=o.int64 if self.action_kind == "discrete" else self.dtype,
                      f64=self.f64, dtype=self.dtype,
                      state_dtype=self.state_dtype)
        name = f"{type(self).__name__}Constants"
        kt = globals().get(name)
        if kt is None or kt._fields != tuple(values):
            # a module attribute, so that pickle (Numba's disk cache of signatures) finds it
            kt = collections.namedtuple(name, tuple(values), module=__name__)  # type: ignore
            globals()[name] = kt
        return kt(**values)

    def transition(self, state: Array, elapsed: Array, actions: Any, reset_state: Array
                   ) -> tuple[Array, Array, Array, Array, Array, Array, Array]:
        """One step of N envs: (next_state, elapsed, next_obs, reward, terminated, truncated,
        final_obs).

        truncated is set when the step count reaches ``max_episode_steps`` (independently of
        terminated); where either is set the row restarts from ``reset_state`` (its counter at
        0, next_obs its first observation) and final_obs keeps the true last observation.
        """
        return self._transition(self.k, state, elapsed, actions, reset_state)

    def observe(self, state: Array) -> Array:
        """Observations [N, obs_dim] (a new array, in ``dtype``) of states [N, state_dim] (in
        ``state_dtype``, or converted to it)."""
        return self._observe_k(self.k, self.o.cast(state, self.state_dtype))

    def _observe(self, state: Array) -> Array:
        return self._observe_k(self.k, state)

    def step(self, state: Array, actions: Array) -> tuple[Array, Array, Array]:
        """One step of the dynamics: (new state, a new array; reward [N] in ``dtype``;
        terminated [N] bool), actions as ``transition`` converts them."""
        return self._step(self.k, state, actions)

    # -- for subclasses ------------------------------------------------------------------------

    def _setup(self) -> Any:
        raise NotImplementedError


@_over_o
def cartpole_step(k: Any, state: Array, actions: Array) -> tuple[Array, Array, Array]:
    """``CartPole``'s step."""
    x_dot, theta, theta_dot = state[:, 1], state[:, 2], state[:, 3]
    pml, total = k.pml, k.total
    force = o.take(k.force, actions)
    costheta = o.cos(theta)
    sintheta = o.sin(theta)
    # Gymnasium's operations, in its order (so float64 matches to the last bits).
    temp = (force + pml * o.square(theta_dot) * sintheta) / total
    thetaacc = (k.gravity * sintheta - costheta * temp) / (
        k.length * (k.four_thirds - k.masspole * o.square(costheta) / total))
    xacc = temp - pml * thetaacc * costheta / total
    deriv = o.stack((x_dot, xacc, theta_dot, thetaacc), k.state_dtype)
    new_state = state + k.tau * deriv  # x + tau * x_dot, ..., with the old velocities
    out = o.abs(new_state[:, 0::2]) > k.thresholds
    terminated = out[:, 0] | out[:, 1]
    return new_state, o.full(state.shape[0], 1.0, k.dtype), terminated


class CartPole(Dynamics):
    """CartPole-v1. State [x, x_dot, theta, theta_dot]; observation = state; actions {0, 1}.

    Euler integration with tau = 0.02; the force is +10 for action 1 and -10 otherwise.
    Reward 1.0 on every step including the terminating one. Terminated when |x| > 2.4 or
    |theta| > 12 degrees (12 * 2 * pi / 360), tested on the state after the step. Reset:
    all four uniform(-0.05, 0.05). Easy mistakes: ``polemass_length`` is masspole * length with
    length the half-length 0.5; the masspole * cos^2 / total_mass term in thetaacc; the
    positions move with the *old* velocities.
    """

    env_id = "CartPole-v1"
    obs_dim = 4
    state_dim = 4
    action_kind = "discrete"
    n_actions = 2
    max_episode_steps = 500
    step_fn = staticmethod(cartpole_step)

    gravity = 9.8
    masscart = 1.0
    masspole = 0.1
    total_mass = masspole + masscart
    length = 0.5  # half the pole's length
    polemass_length = masspole * length
    force_mag = 10.0
    tau = 0.02
    theta_threshold_radians = 12 * 2 * math.pi / 360
    x_threshold = 2.4

    def _setup(self) -> Any:
        o, sd = self.o, self.state_dtype
        return self.constants(
            force=o.table([-self.force_mag, self.force_mag], sd),  # indexed by the action
            pml=o.const(self.polemass_length, sd), total=o.const(self.total_mass, sd),
            masspole=o.const(self.masspole, sd), gravity=o.const(self.gravity, sd),
            length=o.const(self.length, sd), four_thirds=o.const(4.0 / 3.0, sd),
            tau=o.const(self.tau, sd),
            # |x| > 2.4 or |theta| > 12 degrees, on the columns [x, theta] of the new state
            thresholds=o.table([self.x_threshold, self.theta_threshold_radians], sd))


@_over_o
def acrobot_dsdt(k: Any, s: Array, a: Array) -> Array:
    """ds/dt [N, 4] of the book dynamics with the torque a [N] held apart (its derivative is
    0, so carrying it through the stages would only add zeros): Gymnasium's ``_dsdt`` term
    for term, sin/cos of theta2 computed once."""
    theta1, theta2, dtheta1, dtheta2 = s[:, 0], s[:, 1], s[:, 2], s[:, 3]
    cos2, sin2 = o.cos(theta2), o.sin(theta2)
    k1, k05 = k.k1, k.k05
    d1 = k.k025 + (k.k125 + cos2) + k1 + k1  # m1 lc1^2 + m2 (...) + I1 + I2
    d2 = k.k025 + k05 * cos2 + k1  # m2 (lc2^2 + l1 lc2 cos2) + I2
    phi2 = k.k49 * o.cos(theta1 + theta2 - k.half_pi)
    phi1 = (
        k.km05 * o.square(dtheta2) * sin2
        - dtheta2 * dtheta1 * sin2  # 2 m2 l1 lc2 = 1
        + k.k147 * o.cos(theta1 - k.half_pi)
        + phi2
    )
    ddtheta2 = (a + d2 / d1 * phi1 - k05 * o.square(dtheta1) * sin2 - phi2) / (
        k.k125 - o.square(d2) / d1)
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return o.stack((dtheta1, dtheta2, ddtheta1, ddtheta2), k.state_dtype)


@_over_o
def acrobot_wrap(k: Any, x: Array) -> Array:
    """``Acrobot.wrap`` with the constants ``k``."""
    pi, minus_pi, diff = k.pi, k.minus_pi, k.two_pi
    if o.branches and not o.any(o.abs(x) > pi):
        return x
    for _ in range(k.wrap_turns):
        above = x > pi
        if o.branches and not o.any(above):
            break
        x = o.where(above, x - diff, x)
    for _ in range(k.wrap_turns):
        below = x < minus_pi
        if o.branches and not o.any(below):
            break
        x = o.where(below, x + diff, x)
    still = o.abs(x) > pi
    if o.branches and not o.any(still):
        return x
    return o.where(still, o.remainder(x + pi, diff) - pi, x)


@_over_o
def acrobot_step(k: Any, state: Array, actions: Array) -> tuple[Array, Array, Array]:
    """``Acrobot``'s step."""
    a = o.take(k.torque, actions)
    # Gymnasium's rk4(derivs, s_augmented, [0, dt]): the same operations, in the same order
    dt2, two = k.dt2, k.two
    k1 = acrobot_dsdt(k, state, a)
    k2 = acrobot_dsdt(k, state + dt2 * k1, a)
    k3 = acrobot_dsdt(k, state + dt2 * k2, a)
    k4 = acrobot_dsdt(k, state + k.dt * k3, a)
    ns = state + k.dt6 * (k1 + two * k2 + two * k3 + k4)
    new_state = o.concat((acrobot_wrap(k, ns[:, :2]),
                          o.clip(ns[:, 2:], k.vel_low, k.vel_high)))
    t1 = new_state[:, 0]
    terminated = -o.cos(t1) - o.cos(new_state[:, 1] + t1) > k.k1
    return new_state, o.pick(k.rewards, terminated), terminated


@_over_o
def acrobot_observe(k: Any, state: Array) -> Array:
    """``Acrobot``'s observation: computed in float64, then rounded into dtype."""
    t1, t2 = state[:, 0], state[:, 1]
    return o.stack((o.cos(t1), o.sin(t1), o.cos(t2), o.sin(t2), state[:, 2],
                    state[:, 3]), k.dtype)


class Acrobot(Dynamics):
    """Acrobot-v1. State [theta1, theta2, dtheta1, dtheta2]; observation
    [cos t1, sin t1, cos t2, sin t2, dtheta1, dtheta2]; actions {0, 1, 2} -> torque -1, 0, +1.

    One step is one classic RK4 step of dt = 0.2 s. Gymnasium integrates the state *with the
    torque appended* (a 5-vector whose fifth derivative is 0, so all four stages see the same
    torque) and keeps the first four components; here the torque is passed alongside the state,
    which is the same arithmetic. Easy mistakes: the torque is action - 1 (not the action index);
    the dynamics are the "book" variant (Gymnasium's default ``book_or_nips``), whose ddtheta2 has
    the extra ``- m2 l1 lc2 dtheta1^2 sin(theta2)`` term. After the step the angles are wrapped
    into [-pi, pi] by repeated +-2 pi (Gymnasium's ``wrap``, not a modulo; at high velocities one
    step can turn an angle several times) and the velocities clipped to +-4 pi and +-9 pi
    (``bound``). Terminated when -cos(t1) - cos(t2 + t1) > 1; reward -1 per step, 0 on the
    terminating step. Reset: all four uniform(-0.1, 0.1), rounded to float32 as Gymnasium does
    (its state is float64 after the first step).

    The state and the arithmetic are float64 even when ``dtype`` is float32 (observations and
    rewards are then rounded to float32): near the velocity bounds one RK4 step amplifies float32
    rounding into errors of up to ~1e-2, and float64 costs about 10% on CPU.
    """

    env_id = "Acrobot-v1"
    obs_dim = 6
    state_dim = 4
    action_kind = "discrete"
    n_actions = 3
    max_episode_steps = 500
    float64_state = True
    step_fn = staticmethod(acrobot_step)
    observe_fn = staticmethod(acrobot_observe)

    dt = 0.2
    LINK_LENGTH_1 = 1.0
    LINK_MASS_1 = 1.0
    LINK_MASS_2 = 1.0
    LINK_COM_POS_1 = 0.5
    LINK_COM_POS_2 = 0.5
    LINK_MOI = 1.0
    MAX_VEL_1 = 4 * math.pi
    MAX_VEL_2 = 9 * math.pi
    WRAP_TURNS = 8
    """Turns ``wrap`` undoes by repeated +-2 pi before falling back to a modulo (torch cannot
    loop until done without a host sync; |angle| up to ~29 rad, 4.6 turns, seen after one step)."""

    def _setup(self) -> Any:
        # Link masses, lengths and moments are 1 and the centres of mass 0.5, so Gymnasium's
        # products of these constants fold exactly into the ones below (m * x with m = 1 is x).
        m1, m2 = self.LINK_MASS_1, self.LINK_MASS_2
        l1, lc1, lc2 = self.LINK_LENGTH_1, self.LINK_COM_POS_1, self.LINK_COM_POS_2
        assert (m1, m2, l1, lc1, lc2, self.LINK_MOI) == (1.0, 1.0, 1.0, 0.5, 0.5, 1.0)
        o, sd = self.o, self.state_dtype
        c = lambda v: o.const(v, sd)  # noqa: E731
        g = 9.8
        dt = self.dt - 0  # rk4's t[1] - t[0]
        return self.constants(
            torque=o.table([-1.0, 0.0, 1.0], sd),  # AVAIL_TORQUE, indexed by the action
            k025=c(m1 * lc1**2),
            k125=c(l1**2 + lc2**2),  # also m2 lc2^2 + I2, in ddtheta2's denominator
            k1=c(1.0),  # I1, I2
            k05=c(l1 * lc2),  # in d2 and the extra book term
            k49=c(m2 * lc2 * g), km05=c(-m2 * l1 * lc2), k147=c((m1 * lc1 + m2 * l1) * g),
            half_pi=c(math.pi / 2.0),
            dt=c(dt), dt2=c(dt / 2.0), dt6=c(dt / 6.0), two=c(2.0),
            pi=c(math.pi), minus_pi=c(-math.pi), two_pi=c(math.pi - (-math.pi)),
            wrap_turns=self.WRAP_TURNS,
            vel_low=o.table([-self.MAX_VEL_1, -self.MAX_VEL_2], sd),
            vel_high=o.table([self.MAX_VEL_1, self.MAX_VEL_2], sd),
            rewards=o.table([-1.0, 0.0], self.dtype))  # picked by terminated

    def wrap(self, x: Array) -> Array:
        """Gymnasium's ``wrap`` into [-pi, pi]: subtract 2 pi while above pi, then add it while
        below -pi (repeated subtraction, not a modulo: the two differ in the last bits). At most
        ``WRAP_TURNS`` turns each way, then a modulo for anything still outside. NumPy stops as
        soon as nothing is left to wrap; torch does every round (no host sync)."""
        return self.functions["acrobot_wrap"](self.k, x)


@_over_o
def mountaincar_step(k: Any, state: Array, actions: Array) -> tuple[Array, Array, Array]:
    """``MountainCar``'s step."""
    position, velocity = state[:, 0], state[:, 1]
    push = o.take(k.push, actions)
    velocity = velocity + (push + o.cos(k.three * position) * k.minus_gravity)
    velocity = o.clip(velocity, k.min_speed, k.max_speed)  # before the position
    position = o.clip(position + velocity, k.min_pos, k.max_pos)
    zero = k.zero_f  # the left wall stops the car (velocity is the clip's new array)
    velocity = o.fill(velocity, (position == k.min_pos) & (velocity < zero), zero)
    terminated = (position >= k.goal) & (velocity >= k.goal_vel)
    reward = o.full(state.shape[0], -1.0, k.dtype)
    return o.stack((position, velocity), k.state_dtype), reward, terminated


class MountainCar(Dynamics):
    """MountainCar-v0. State = observation = [position, velocity]; actions {0, 1, 2}.

    velocity += (action - 1) * 0.001 + cos(3 position) * (-0.0025), clipped to +-0.07 *before*
    the position update; position += velocity, clipped to [-1.2, 0.6]; at the left wall
    (position == -1.2) a negative velocity is set to 0. Terminated when position >= 0.5 and
    velocity >= 0; reward -1 on every step. Reset: position uniform(-0.6, -0.4), velocity 0.
    """

    env_id = "MountainCar-v0"
    obs_dim = 2
    state_dim = 2
    action_kind = "discrete"
    n_actions = 3
    max_episode_steps = 200
    step_fn = staticmethod(mountaincar_step)

    min_position = -1.2
    max_position = 0.6
    max_speed = 0.07
    goal_position = 0.5
    goal_velocity = 0.0
    force = 0.001
    gravity = 0.0025

    def _setup(self) -> Any:
        o, sd = self.o, self.state_dtype
        c = lambda v: o.const(v, sd)  # noqa: E731
        return self.constants(
            # (action - 1) * force, looked up: -force, 0, force exactly
            push=o.table([-self.force, 0.0 * self.force, self.force], sd),
            three=c(3), minus_gravity=c(-self.gravity),
            max_speed=c(self.max_speed), min_speed=c(-self.max_speed),
            min_pos=c(self.min_position), max_pos=c(self.max_position),
            goal=c(self.goal_position), goal_vel=c(self.goal_velocity), zero_f=c(0.0))


@_over_o
def add_f32(a: Array, b: Array) -> Array:
    """a + b computed in float32 (both rounded to float32 first), returned in a's dtype."""
    return o.cast(o.cast(a, o.float32) + o.cast(b, o.float32), a.dtype)


@_over_o
def mountaincar_continuous_step(k: Any, state: Array, actions: Array
                                ) -> tuple[Array, Array, Array]:
    """``MountainCarContinuous``'s step."""
    sd, f32 = k.state_dtype, o.float32
    position, velocity = state[:, 0], state[:, 1]
    action = actions
    force = o.clip(action, k.lo, k.hi)
    three_pos = o.cast(k.three32 * o.cast(position, f32), sd)  # float32 in Gym
    inc = force * k.power - k.k0025 * o.cos(three_pos)
    v = velocity + inc
    if k.f64:
        # Gymnasium adds in float32 where a Python float meets its float32 state: when the
        # action was clipped (force is then a Python float) and when the velocity was.
        a_clipped = (action < k.lo) | (action > k.hi)
        if not o.branches or o.any(a_clipped):
            v = o.where(a_clipped, add_f32(velocity, inc), v)
        v_clipped = (v > k.max_speed) | (v < k.min_speed)
        v = o.clip(v, k.min_speed, k.max_speed)
        p = position + v
        in_f32 = a_clipped | v_clipped
        if not o.branches or o.any(in_f32):
            p = o.where(in_f32, add_f32(position, v), p)
    else:
        v = o.clip(v, k.min_speed, k.max_speed)
        p = position + v
    p = o.clip(p, k.min_pos, k.max_pos)
    zero = k.zero_f  # the left wall (v is the clip's new array)
    v = o.fill(v, (p == k.min_pos) & (v < zero), zero)
    terminated = (p >= k.goal) & (v >= k.goal_vel)
    reward = o.pick(k.bonus, terminated) - o.square(action) * k.k01  # raw action
    new_state = o.stack((p, v), sd)
    if k.f64:  # the state is float32 in Gymnasium after every step
        new_state = o.cast(o.cast(new_state, f32), sd)
    return new_state, reward, terminated


class MountainCarContinuous(Dynamics):
    """MountainCarContinuous-v0. State = observation = [position, velocity]; action [N, 1] in
    [-1, 1].

    force = clip(action, -1, 1); velocity += force * 0.0015 - 0.0025 cos(3 position), clipped to
    +-0.07; position += velocity, clipped to [-1.2, 0.6]; a negative velocity at the left wall is
    set to 0. Terminated when position >= 0.45 (not 0.5 as in MountainCar-v0) and velocity >= 0.
    Reward: 100 on termination, minus 0.1 * action^2 of the *unclipped* action (Gymnasium
    penalises the raw action, the dynamics see the clipped one). Reset: position
    uniform(-0.6, -0.4), velocity 0.

    Gymnasium stores this env's state as float32 after every step (and computes 3 * position in
    float32 from it), and under NumPy 2's promotion rules it adds in float32 where a Python float
    meets that state (after a clipped action or a clipped velocity). Float64 mode copies all of
    this (the state is rounded to float32 after each step, at reset and in ``set_state``), so that
    it reproduces Gymnasium fed float64 actions bit for bit, up to the library's cos; termination
    is tested before the rounding, as in Gymnasium (which compares float32 values with float32
    thresholds in the float32 cases: a position exactly at float32(0.45) is the one difference).
    """

    env_id = "MountainCarContinuous-v0"
    obs_dim = 2
    state_dim = 2
    action_kind = "box"
    action_dim = 1
    action_low = -1.0
    action_high = 1.0
    max_episode_steps = 999
    step_fn = staticmethod(mountaincar_continuous_step)

    min_position = -1.2
    max_position = 0.6
    max_speed = 0.07
    goal_position = 0.45
    goal_velocity = 0.0
    power = 0.0015

    def _setup(self) -> Any:
        o, sd = self.o, self.state_dtype
        c = lambda v: o.const(v, sd)  # noqa: E731
        assert self.action_low is not None and self.action_high is not None
        return self.constants(
            lo=c(self.action_low), hi=c(self.action_high),
            power=c(self.power), k0025=c(0.0025), three32=o.const(3, o.float32),
            max_speed=c(self.max_speed), min_speed=c(-self.max_speed),
            min_pos=c(self.min_position), max_pos=c(self.max_position),
            goal=c(self.goal_position), goal_vel=c(self.goal_velocity), zero_f=c(0.0),
            k01=c(0.1),
            bonus=o.table([0.0, 100.0], sd))  # picked by terminated


@_over_o
def pendulum_step(k: Any, state: Array, actions: Array) -> tuple[Array, Array, Array]:
    """``Pendulum``'s step."""
    th, thdot = state[:, 0], state[:, 1]
    u = o.clip(actions, k.lo, k.hi)
    pi = k.pi
    norm_th = o.remainder(th + pi, k.two_pi) - pi
    costs = o.square(norm_th) + k.k01 * o.square(thdot) + k.k0001 * o.square(u)
    newthdot = thdot + (k.k15 * o.sin(th) + k.k3 * u) * k.dt
    newthdot = o.clip(newthdot, k.min_speed, k.max_speed)
    newth = th + newthdot * k.dt
    terminated = o.full(state.shape[0], False, o.bool)
    return o.stack((newth, newthdot), k.state_dtype), -costs, terminated


@_over_o
def pendulum_observe(k: Any, state: Array) -> Array:
    """``Pendulum``'s observation [cos theta, sin theta, thetadot]."""
    th = state[:, 0]
    return o.stack((o.cos(th), o.sin(th), state[:, 1]), k.dtype)


class Pendulum(Dynamics):
    """Pendulum-v1. State [theta, thetadot]; observation [cos theta, sin theta, thetadot];
    action [N, 1] torque in [-2, 2].

    u = clip(action, -2, 2); reward = -(angle_normalize(theta)^2 + 0.1 thetadot^2 + 0.001 u^2),
    computed from the state *before* the step, with angle_normalize(x) = ((x + pi) mod 2 pi) - pi
    (a floor modulo: theta itself is never wrapped and grows without bound); then
    thetadot += (15 sin(theta) + 3 u) * 0.05, clipped to +-8 *before* theta += thetadot * 0.05.
    Never terminates (only the 200-step time limit). Reset: theta uniform(-pi, pi), thetadot
    uniform(-1, 1). Float64 mode matches Gymnasium fed float64 actions: with float32 actions
    NumPy 2 computes u^2 and 3 u in float32.
    """

    env_id = "Pendulum-v1"
    obs_dim = 3
    state_dim = 2
    action_kind = "box"
    action_dim = 1
    action_low = -2.0
    action_high = 2.0
    max_episode_steps = 200
    step_fn = staticmethod(pendulum_step)
    observe_fn = staticmethod(pendulum_observe)

    max_speed = 8
    max_torque = 2.0
    dt = 0.05
    g = 10.0
    m = 1.0
    l = 1.0

    def _setup(self) -> Any:
        o, sd = self.o, self.state_dtype
        c = lambda v: o.const(v, sd)  # noqa: E731
        g, m, l = self.g, self.m, self.l
        return self.constants(
            lo=c(-self.max_torque), hi=c(self.max_torque),
            pi=c(math.pi), two_pi=c(2 * math.pi),
            k01=c(0.1), k0001=c(0.001), dt=c(self.dt),
            k15=c(3 * g / (2 * l)), k3=c(3.0 / (m * l**2)),
            max_speed=c(self.max_speed), min_speed=c(-self.max_speed))


@_over_o
def cartpole_no_vel_observe(k: Any, state: Array) -> Array:
    """``CartPoleNoVel``'s observation [x, theta]: CartPole's without the velocities."""
    return o.stack((state[:, 0], state[:, 2]), k.dtype)


class CartPoleNoVel(CartPole):
    """CartPoleNoVel-v1 (trustrl.envs.no_vel, rl-baselines3-zoo's partially observed
    CartPole): CartPole-v1's dynamics, time limit and reset, observing [x, theta] only."""

    env_id = "CartPoleNoVel-v1"
    obs_dim = 2
    observe_fn = staticmethod(cartpole_no_vel_observe)


@_over_o
def pendulum_no_vel_observe(k: Any, state: Array) -> Array:
    """``PendulumNoVel``'s observation [cos theta, sin theta]: Pendulum's without thetadot."""
    th = state[:, 0]
    return o.stack((o.cos(th), o.sin(th)), k.dtype)


class PendulumNoVel(Pendulum):
    """PendulumNoVel-v1 (trustrl.envs.no_vel): Pendulum-v1's dynamics, time limit and reset,
    observing [cos theta, sin theta] only."""

    env_id = "PendulumNoVel-v1"
    obs_dim = 2
    observe_fn = staticmethod(pendulum_no_vel_observe)


# -- MaskedPick-v0: a game with invalid moves, and its masks ------------------------------------

@_over_o
def masked_pick_step(k: Any, state: Array, actions: Array) -> tuple[Array, Array, Array]:
    """``MaskedPick``'s step: the picked item's value, or the penalty and the end of the
    episode where it was picked before (the state then unchanged)."""
    n = k.n_items
    values, taken, count = state[:, :n], state[:, n:2 * n], state[:, 2 * n]
    invalid = o.gather(taken, actions) > k.half
    valid = ~invalid
    reward = o.where(invalid, k.penalty, o.gather(values, actions))
    hit = (o.column(actions) == k.items) & o.column(valid)  # the item taken this step
    new_count = count + o.astype(valid, k.state_dtype)
    terminated = invalid | (new_count >= k.picks)
    new_state = o.concat((values, o.where(hit, k.one_f, taken), o.column(new_count)))
    return new_state, o.astype(reward, k.dtype), terminated


@_over_o
def masked_pick_observe(k: Any, state: Array) -> Array:
    """``MaskedPick``'s observation: the values, then the picked flags (0/1)."""
    return o.astype(state[:, :2 * k.n_items], k.dtype)


@_over_o
def masked_pick_mask(k: Any, state: Array) -> Array:
    """``MaskedPick``'s valid actions: the items not picked yet."""
    return state[:, k.n_items:2 * k.n_items] < k.half


class MaskedPick(Dynamics):
    """MaskedPick-v0 (the Gymnasium env: trustrl.envs.masked_pick, which steps this source
    over NumPy). State [values (n_items), picked flags (n_items, 0/1), picks made]; observation
    [values, picked flags]; actions {0, ..., n_items - 1}: the item to pick.

    A valid pick pays the item's value and marks it picked; the episode ends (terminated)
    after ``picks`` of them. Picking an item again is invalid: reward ``penalty``, the episode
    ends, the state is unchanged. The mask (``mask_fn``) is the items not picked yet. No time
    limit: an episode takes at most ``picks`` steps (``max_episode_steps``, ``picks`` + 1, is
    never reached; it bounds the batched evaluation's loop). Reset: the values uniform in
    [0, 1), nothing picked. The defaults are MaskedPick-v0's; the Gymnasium env passes its
    keyword arguments (``n_items``, ``picks``, ``penalty``)."""

    env_id = "MaskedPick-v0"
    n_items = 8
    picks = 4
    penalty = -1.0
    obs_dim = 2 * n_items
    state_dim = 2 * n_items + 1
    action_kind = "discrete"
    n_actions = n_items
    max_episode_steps = picks + 1
    step_fn = staticmethod(masked_pick_step)
    observe_fn = staticmethod(masked_pick_observe)
    mask_fn = staticmethod(masked_pick_mask)

    def __init__(self, ops: ArrayOps, dtype: Any, wrap: Any = None, n_items: int | None = None,
                 picks: int | None = None, penalty: float | None = None) -> None:
        if n_items is not None or picks is not None or penalty is not None:
            n = self.n_items if n_items is None else int(n_items)
            self.n_items, self.n_actions, self.obs_dim, self.state_dim = n, n, 2 * n, 2 * n + 1
            self.picks = self.picks if picks is None else int(picks)
            self.penalty = self.penalty if penalty is None else float(penalty)
            self.max_episode_steps = self.picks + 1
        super().__init__(ops, dtype, wrap)

    def _setup(self) -> Any:
        o, sd = self.o, self.state_dtype
        return self.constants(
            n_items=self.n_items, items=o.table(list(range(self.n_items)), o.int64),
            picks=o.const(self.picks, sd), penalty=o.const(self.penalty, sd),
            half=o.const(0.5, sd), one_f=o.const(1.0, sd))


DYNAMICS: dict[str, type[Dynamics]] = {
    cls.env_id: cls for cls in (CartPole, Acrobot, MountainCar, MountainCarContinuous, Pendulum,
                                CartPoleNoVel, PendulumNoVel, MaskedPick)
}
"""The envs by Gymnasium id: Gymnasium's five classic-control envs in Gymnasium's order, then
the two without velocities (registered by trustrl.envs.no_vel), then MaskedPick-v0
(trustrl.envs.masked_pick), whose actions are masked."""
MASKED: frozenset[str] = frozenset(e for e, cls in DYNAMICS.items() if cls.mask_fn is not None)
"""The envs of DYNAMICS that give action masks."""

for _cls in DYNAMICS.values():
    # Each env's constants type (``CartPoleConstants``, ...) is made by its first instance and
    # kept as a module attribute; made here, at import, so that every type exists before Numba's
    # disk cache unpickles the signatures that name them (the index of the shared ``transition``
    # names all five).
    _cls(NUMPY, np.float64)
del _cls
