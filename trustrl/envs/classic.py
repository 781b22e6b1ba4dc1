"""The dynamics of Gymnasium's five classic-control envs, written once for NumPy and torch.

    dyn = CartPole(NUMPY, np.float32)                  # or CartPole(torch_ops("cuda"), ...)
    state, elapsed, next_obs, reward, terminated, truncated, final_obs = dyn.transition(
        state, elapsed, actions, reset_state)

Each env is one class whose ``step`` (state, actions -> state, reward, terminated) and
``observe`` do the arithmetic through an array namespace ``self.o``: ``NUMPY`` (the CPU rollout
of ``trustrl.batched``, with 1-64 envs, where a step costs what its operations cost to launch) or a
``TorchOps`` on a device (``trustrl.envs.torch_classic``: many envs on CPU or CUDA, compiled or
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

import math
import operator
from typing import Any, ClassVar

import numpy as np

__all__ = [
    "DYNAMICS",
    "NUMPY",
    "Acrobot",
    "ArrayOps",
    "CartPole",
    "Dynamics",
    "MountainCar",
    "MountainCarContinuous",
    "NumpyOps",
    "Pendulum",
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

    def index_actions(self, actions: Any, n: int) -> Array:
        """Discrete actions as int64 [n] (floats truncated toward zero)."""
        raise NotImplementedError

    def float_actions(self, actions: Any, n: int, dtype: Any) -> Array:
        """The one column of Box actions ([n, 1] or [n]) as ``dtype`` [n]."""
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

    def index_actions(self, actions: Any, n: int) -> Array:
        return np.asarray(actions, self.int64).reshape(n)

    def float_actions(self, actions: Any, n: int, dtype: Any) -> Array:
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

    def index_actions(self, actions: Any, n: int) -> Array:
        a = self._torch.as_tensor(actions, device=self.device).detach()
        return a.to(self._torch.int64).reshape(n)

    def float_actions(self, actions: Any, n: int, dtype: Any) -> Array:
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


# -- the shared part of every env ------------------------------------------------------------------

class Dynamics:
    """One classic-control env's step as a pure function of (state, counters, actions), over
    the array namespace ``o``.

    Subclasses set the class attributes, build their constants in ``_setup`` (through
    ``o.const`` and ``o.table``, once, not per step) and implement ``step`` and, when the
    observation is not the state itself, ``_observe``. This base class does the action
    conversion, the time limit and the autoreset.

    Attributes:
        env_id: the Gymnasium id this env reproduces.
        obs_dim, state_dim: sizes of an observation and of the internal state.
        action_kind: "discrete" (then ``n_actions``) or "box" (then ``action_dim`` = 1,
            ``action_low``, ``action_high``, floats).
        max_episode_steps: the time limit Gymnasium registers for the id.
        dtype: float32 or float64 (the namespace's), of observations, rewards and Box actions.
        state_dtype: of the state and the arithmetic: ``dtype``, except Acrobot (float64).
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

    def __init__(self, ops: ArrayOps, dtype: Any) -> None:
        dtype = ops.dtype(dtype)
        if dtype not in (ops.float32, ops.float64):
            raise ValueError(f"dtype must be float32 or float64, got {dtype}")
        self.o = ops
        self.dtype = dtype
        self.state_dtype = ops.float64 if self.float64_state else dtype
        self.f64 = self.state_dtype == ops.float64
        self._one = ops.const(1, ops.int64)
        self._zero = ops.const(0, ops.int64)
        self._limit = ops.const(self.max_episode_steps, ops.int64)
        self._discrete = self.action_kind == "discrete"
        self._setup()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env_id}, {self.o!r}, dtype={self.dtype})"

    def transition(self, state: Array, elapsed: Array, actions: Any, reset_state: Array
                   ) -> tuple[Array, Array, Array, Array, Array, Array, Array]:
        """One step of N envs: (next_state, elapsed, next_obs, reward, terminated, truncated,
        final_obs).

        truncated is set when the step count reaches ``max_episode_steps`` (independently of
        terminated); where either is set the row restarts from ``reset_state`` (its counter at
        0, next_obs its first observation) and final_obs keeps the true last observation.
        """
        o = self.o
        n = state.shape[0]
        a = (o.index_actions(actions, n) if self._discrete
             else o.float_actions(actions, n, self.dtype))
        new_state, reward, terminated = self.step(state, a)
        el = elapsed + self._one
        truncated = el >= self._limit
        done = terminated | truncated
        final_obs = self._observe(new_state)
        if o.branches and not o.any(done):  # NumPy: nothing ended, nothing to reset
            return new_state, el, o.copy(final_obs), reward, terminated, truncated, final_obs
        next_state = o.where(done[:, None], o.cast(reset_state, self.state_dtype), new_state)
        el = o.where(done, self._zero, el)
        # observe() is row-wise: rows that ended see the reset state's observation
        return next_state, el, self._observe(next_state), reward, terminated, truncated, \
            final_obs

    def observe(self, state: Array) -> Array:
        """Observations [N, obs_dim] (a new array, in ``dtype``) of states [N, state_dim] (in
        ``state_dtype``, or converted to it)."""
        return self._observe(self.o.cast(state, self.state_dtype))

    # -- for subclasses ------------------------------------------------------------------------

    def _setup(self) -> None:
        raise NotImplementedError

    def step(self, state: Array, actions: Array) -> tuple[Array, Array, Array]:
        """One step of the dynamics: (new state, a new array; reward [N] in ``dtype``;
        terminated [N] bool), actions as ``transition`` converts them."""
        raise NotImplementedError

    def _observe(self, state: Array) -> Array:
        """Identity observation (CartPole, the mountain cars, whose ``state_dtype`` is
        ``dtype``): a copy."""
        return self.o.copy(state)


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

    def _setup(self) -> None:
        o, sd = self.o, self.state_dtype
        self._force = o.table([-self.force_mag, self.force_mag], sd)  # indexed by the action
        self._pml, self._total = o.const(self.polemass_length, sd), o.const(self.total_mass, sd)
        self._masspole, self._gravity = o.const(self.masspole, sd), o.const(self.gravity, sd)
        self._length, self._four_thirds = o.const(self.length, sd), o.const(4.0 / 3.0, sd)
        self._tau = o.const(self.tau, sd)
        # |x| > 2.4 or |theta| > 12 degrees, on the columns [x, theta] of the new state
        self._thresholds = o.table([self.x_threshold, self.theta_threshold_radians], sd)

    def step(self, state: Array, actions: Array) -> tuple[Array, Array, Array]:
        o = self.o
        x_dot, theta, theta_dot = state[:, 1], state[:, 2], state[:, 3]
        pml, total = self._pml, self._total
        force = o.take(self._force, actions)
        costheta = o.cos(theta)
        sintheta = o.sin(theta)
        # Gymnasium's operations, in its order (so float64 matches to the last bits).
        temp = (force + pml * o.square(theta_dot) * sintheta) / total
        thetaacc = (self._gravity * sintheta - costheta * temp) / (
            self._length * (self._four_thirds - self._masspole * o.square(costheta) / total))
        xacc = temp - pml * thetaacc * costheta / total
        deriv = o.stack((x_dot, xacc, theta_dot, thetaacc), self.state_dtype)
        new_state = state + self._tau * deriv  # x + tau * x_dot, ..., with the old velocities
        out = o.abs(new_state[:, 0::2]) > self._thresholds
        terminated = out[:, 0] | out[:, 1]
        return new_state, o.full(state.shape[0], 1.0, self.dtype), terminated


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

    def _setup(self) -> None:
        # Link masses, lengths and moments are 1 and the centres of mass 0.5, so Gymnasium's
        # products of these constants fold exactly into the ones below (m * x with m = 1 is x).
        m1, m2 = self.LINK_MASS_1, self.LINK_MASS_2
        l1, lc1, lc2 = self.LINK_LENGTH_1, self.LINK_COM_POS_1, self.LINK_COM_POS_2
        assert (m1, m2, l1, lc1, lc2, self.LINK_MOI) == (1.0, 1.0, 1.0, 0.5, 0.5, 1.0)
        o, sd = self.o, self.state_dtype
        c = lambda v: o.const(v, sd)  # noqa: E731
        g = 9.8
        self._torque = o.table([-1.0, 0.0, 1.0], sd)  # AVAIL_TORQUE, indexed by the action
        self._k025 = c(m1 * lc1**2)
        self._k125 = c(l1**2 + lc2**2)  # also m2 lc2^2 + I2, in ddtheta2's denominator
        self._k1 = c(1.0)  # I1, I2
        self._k05 = c(l1 * lc2)  # in d2 and the extra book term
        self._k49 = c(m2 * lc2 * g)
        self._km05 = c(-m2 * l1 * lc2)
        self._k147 = c((m1 * lc1 + m2 * l1) * g)
        self._half_pi = c(math.pi / 2.0)
        dt = self.dt - 0  # rk4's t[1] - t[0]
        self._dt, self._dt2, self._dt6, self._two = c(dt), c(dt / 2.0), c(dt / 6.0), c(2.0)
        self._pi, self._minus_pi, self._two_pi = c(math.pi), c(-math.pi), c(math.pi - (-math.pi))
        self._vel_low = o.table([-self.MAX_VEL_1, -self.MAX_VEL_2], sd)
        self._vel_high = o.table([self.MAX_VEL_1, self.MAX_VEL_2], sd)
        self._rewards = o.table([-1.0, 0.0], self.dtype)  # picked by terminated

    def _dsdt(self, s: Array, a: Array) -> Array:
        """ds/dt [N, 4] of the book dynamics with the torque a [N] held apart (its derivative is
        0, so carrying it through the stages would only add zeros): Gymnasium's ``_dsdt`` term
        for term, sin/cos of theta2 computed once."""
        o = self.o
        theta1, theta2, dtheta1, dtheta2 = s[:, 0], s[:, 1], s[:, 2], s[:, 3]
        cos2, sin2 = o.cos(theta2), o.sin(theta2)
        k1, k05 = self._k1, self._k05
        d1 = self._k025 + (self._k125 + cos2) + k1 + k1  # m1 lc1^2 + m2 (...) + I1 + I2
        d2 = self._k025 + k05 * cos2 + k1  # m2 (lc2^2 + l1 lc2 cos2) + I2
        phi2 = self._k49 * o.cos(theta1 + theta2 - self._half_pi)
        phi1 = (
            self._km05 * o.square(dtheta2) * sin2
            - dtheta2 * dtheta1 * sin2  # 2 m2 l1 lc2 = 1
            + self._k147 * o.cos(theta1 - self._half_pi)
            + phi2
        )
        ddtheta2 = (a + d2 / d1 * phi1 - k05 * o.square(dtheta1) * sin2 - phi2) / (
            self._k125 - o.square(d2) / d1)
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return o.stack((dtheta1, dtheta2, ddtheta1, ddtheta2), self.state_dtype)

    def step(self, state: Array, actions: Array) -> tuple[Array, Array, Array]:
        o = self.o
        a = o.take(self._torque, actions)
        # Gymnasium's rk4(derivs, s_augmented, [0, dt]): the same operations, in the same order
        dt2, two = self._dt2, self._two
        k1 = self._dsdt(state, a)
        k2 = self._dsdt(state + dt2 * k1, a)
        k3 = self._dsdt(state + dt2 * k2, a)
        k4 = self._dsdt(state + self._dt * k3, a)
        ns = state + self._dt6 * (k1 + two * k2 + two * k3 + k4)
        new_state = o.concat((self.wrap(ns[:, :2]),
                              o.clip(ns[:, 2:], self._vel_low, self._vel_high)))
        t1 = new_state[:, 0]
        terminated = -o.cos(t1) - o.cos(new_state[:, 1] + t1) > self._k1
        return new_state, o.pick(self._rewards, terminated), terminated

    def wrap(self, x: Array) -> Array:
        """Gymnasium's ``wrap`` into [-pi, pi]: subtract 2 pi while above pi, then add it while
        below -pi (repeated subtraction, not a modulo: the two differ in the last bits). At most
        ``WRAP_TURNS`` turns each way, then a modulo for anything still outside. NumPy stops as
        soon as nothing is left to wrap; torch does every round (no host sync)."""
        o = self.o
        pi, minus_pi, diff = self._pi, self._minus_pi, self._two_pi
        if o.branches and not o.any(o.abs(x) > pi):
            return x
        for _ in range(self.WRAP_TURNS):
            above = x > pi
            if o.branches and not o.any(above):
                break
            x = o.where(above, x - diff, x)
        for _ in range(self.WRAP_TURNS):
            below = x < minus_pi
            if o.branches and not o.any(below):
                break
            x = o.where(below, x + diff, x)
        still = o.abs(x) > pi
        if o.branches and not o.any(still):
            return x
        return o.where(still, o.remainder(x + pi, diff) - pi, x)

    def _observe(self, state: Array) -> Array:
        o = self.o
        t1, t2 = state[:, 0], state[:, 1]
        # computed in float64, then rounded into dtype
        return o.stack((o.cos(t1), o.sin(t1), o.cos(t2), o.sin(t2), state[:, 2], state[:, 3]),
                       self.dtype)


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

    min_position = -1.2
    max_position = 0.6
    max_speed = 0.07
    goal_position = 0.5
    goal_velocity = 0.0
    force = 0.001
    gravity = 0.0025

    def _setup(self) -> None:
        o, sd = self.o, self.state_dtype
        c = lambda v: o.const(v, sd)  # noqa: E731
        # (action - 1) * force, looked up: -force, 0, force exactly
        self._push = o.table([-self.force, 0.0 * self.force, self.force], sd)
        self._three, self._minus_gravity = c(3), c(-self.gravity)
        self._max_speed, self._min_speed = c(self.max_speed), c(-self.max_speed)
        self._min_pos, self._max_pos = c(self.min_position), c(self.max_position)
        self._goal, self._goal_vel, self._zero_f = c(self.goal_position), \
            c(self.goal_velocity), c(0.0)

    def step(self, state: Array, actions: Array) -> tuple[Array, Array, Array]:
        o = self.o
        position, velocity = state[:, 0], state[:, 1]
        push = o.take(self._push, actions)
        velocity = velocity + (push + o.cos(self._three * position) * self._minus_gravity)
        velocity = o.clip(velocity, self._min_speed, self._max_speed)  # before the position
        position = o.clip(position + velocity, self._min_pos, self._max_pos)
        zero = self._zero_f  # the left wall stops the car (velocity is the clip's new array)
        velocity = o.fill(velocity, (position == self._min_pos) & (velocity < zero), zero)
        terminated = (position >= self._goal) & (velocity >= self._goal_vel)
        reward = o.full(state.shape[0], -1.0, self.dtype)
        return o.stack((position, velocity), self.state_dtype), reward, terminated


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

    min_position = -1.2
    max_position = 0.6
    max_speed = 0.07
    goal_position = 0.45
    goal_velocity = 0.0
    power = 0.0015

    def _setup(self) -> None:
        o, sd = self.o, self.state_dtype
        c = lambda v: o.const(v, sd)  # noqa: E731
        assert self.action_low is not None and self.action_high is not None
        self._lo, self._hi = c(self.action_low), c(self.action_high)
        self._power, self._k0025, self._three32 = c(self.power), c(0.0025), \
            o.const(3, o.float32)
        self._max_speed, self._min_speed = c(self.max_speed), c(-self.max_speed)
        self._min_pos, self._max_pos = c(self.min_position), c(self.max_position)
        self._goal, self._goal_vel, self._zero_f = c(self.goal_position), \
            c(self.goal_velocity), c(0.0)
        self._k01 = c(0.1)
        self._bonus = o.table([0.0, 100.0], sd)  # picked by terminated

    def step(self, state: Array, actions: Array) -> tuple[Array, Array, Array]:
        o, sd, f32 = self.o, self.state_dtype, self.o.float32
        position, velocity = state[:, 0], state[:, 1]
        action = actions
        force = o.clip(action, self._lo, self._hi)
        three_pos = o.cast(self._three32 * o.cast(position, f32), sd)  # float32 in Gymnasium
        inc = force * self._power - self._k0025 * o.cos(three_pos)
        v = velocity + inc
        if self.f64:
            # Gymnasium adds in float32 where a Python float meets its float32 state: when the
            # action was clipped (force is then a Python float) and when the velocity was.
            a_clipped = (action < self._lo) | (action > self._hi)
            if not o.branches or o.any(a_clipped):
                v = o.where(a_clipped, _add_f32(o, velocity, inc), v)
            v_clipped = (v > self._max_speed) | (v < self._min_speed)
            v = o.clip(v, self._min_speed, self._max_speed)
            p = position + v
            in_f32 = a_clipped | v_clipped
            if not o.branches or o.any(in_f32):
                p = o.where(in_f32, _add_f32(o, position, v), p)
        else:
            v = o.clip(v, self._min_speed, self._max_speed)
            p = position + v
        p = o.clip(p, self._min_pos, self._max_pos)
        zero = self._zero_f  # the left wall (v is the clip's new array)
        v = o.fill(v, (p == self._min_pos) & (v < zero), zero)
        terminated = (p >= self._goal) & (v >= self._goal_vel)
        reward = o.pick(self._bonus, terminated) - o.square(action) * self._k01  # the raw action
        new_state = o.stack((p, v), sd)
        if self.f64:  # the state is float32 in Gymnasium after every step
            new_state = o.cast(o.cast(new_state, f32), sd)
        return new_state, reward, terminated


def _add_f32(o: ArrayOps, a: Array, b: Array) -> Array:
    """a + b computed in float32 (both rounded to float32 first), returned in a's dtype."""
    return o.cast(o.cast(a, o.float32) + o.cast(b, o.float32), a.dtype)


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

    max_speed = 8
    max_torque = 2.0
    dt = 0.05
    g = 10.0
    m = 1.0
    l = 1.0

    def _setup(self) -> None:
        o, sd = self.o, self.state_dtype
        c = lambda v: o.const(v, sd)  # noqa: E731
        g, m, l = self.g, self.m, self.l
        self._lo, self._hi = c(-self.max_torque), c(self.max_torque)
        self._pi, self._two_pi = c(math.pi), c(2 * math.pi)
        self._k01, self._k0001, self._dt = c(0.1), c(0.001), c(self.dt)
        self._k15, self._k3 = c(3 * g / (2 * l)), c(3.0 / (m * l**2))
        self._max_speed, self._min_speed = c(self.max_speed), c(-self.max_speed)

    def step(self, state: Array, actions: Array) -> tuple[Array, Array, Array]:
        o = self.o
        th, thdot = state[:, 0], state[:, 1]
        u = o.clip(actions, self._lo, self._hi)
        pi = self._pi
        norm_th = o.remainder(th + pi, self._two_pi) - pi
        costs = o.square(norm_th) + self._k01 * o.square(thdot) + self._k0001 * o.square(u)
        newthdot = thdot + (self._k15 * o.sin(th) + self._k3 * u) * self._dt
        newthdot = o.clip(newthdot, self._min_speed, self._max_speed)
        newth = th + newthdot * self._dt
        terminated = o.full(state.shape[0], False, o.bool)
        return o.stack((newth, newthdot), self.state_dtype), -costs, terminated

    def _observe(self, state: Array) -> Array:
        o = self.o
        th = state[:, 0]
        return o.stack((o.cos(th), o.sin(th), state[:, 1]), self.dtype)


DYNAMICS: dict[str, type[Dynamics]] = {
    cls.env_id: cls for cls in (CartPole, Acrobot, MountainCar, MountainCarContinuous, Pendulum)
}
"""The five envs by Gymnasium id, in Gymnasium's order."""
