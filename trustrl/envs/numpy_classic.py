"""NumPy twins of the batched torch classic-control envs, for a CPU rollout with few envs.

    dyn = make_numpy_dynamics("CartPole-v1", np.float32)
    state, elapsed, obs, reward, terminated, truncated, final_obs = dyn.transition(
        state, elapsed, actions, reset_state)

Why: with 1-64 envs on a CPU, a step costs what its operations cost to launch, not what they
compute: a torch op on a tiny tensor takes 1-5 us, a NumPy ufunc 0.3-1 us. These are pure
functions with ``TorchVecEnv.transition``'s semantics (``trustrl.envs.torch_classic``): the
caller owns the state, the elapsed-step counters and the reset states (drawn by the torch
``ResetSampler`` and converted with ``.numpy()``; nothing random happens here).

Equality with the torch envs: every float operation of the torch env is done here on the same
operands, in the same order and dtype (constants are 0-d arrays of the state's dtype, which
round a Python float the way torch and NumPy 2 round a scalar meeting a float32 tensor). The
only rewrites are exact ones: ``x * 1.0`` dropped, ``|x| > c`` for ``x < -c or x > c``, a table
lookup for ``where(a == 1, f, -f)`` and ``(a - 1) * c``, and clamps written as max then min.
So float64 results equal torch's up to the last-bit differences of the two libraries' sin and
cos (and what later steps make of them); see tests/test_numpy_envs.py for the measured figures.

Speed: a step is a few dozen ufunc calls. Columns are read as views, results are written into
preallocated columns with ``out=``, constants are 0-d arrays (a Python float operand costs about
0.3 us more per call), and the autoreset work is skipped when no episode ended (NumPy runs on
the host, so a data-dependent branch costs nothing but the ``count_nonzero``).

Inputs and outputs (N rows): ``state`` and ``reset_state`` [N, state_dim] in ``state_dtype``;
``elapsed`` int64 [N]; discrete actions [N] of any integer dtype, Box actions [N, 1] or [N]
(converted to ``dtype``). Inputs are never modified, and every returned array is new (none
shares memory with an input or with another output), so a caller may normalise observations in
place. Discrete actions outside the action space are not checked, as in the torch env: they
give undefined dynamics (here possibly an IndexError).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

__all__ = [
    "NUMPY_SUPPORTED",
    "NumpyAcrobot",
    "NumpyCartPole",
    "NumpyDynamics",
    "NumpyMountainCar",
    "NumpyMountainCarContinuous",
    "NumpyPendulum",
    "make_numpy_dynamics",
]

Array = np.ndarray[Any, Any]
TransitionOut = tuple[Array, Array, Array, Array, Array, Array, Array]

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_I64 = np.dtype(np.int64)
_ONE_I64 = np.array(1, _I64)
_U8 = np.dtype(np.uint8)


class NumpyDynamics:
    """One classic-control env's step as a pure NumPy function of (state, counters, actions).

    Subclasses set the class attributes (those of the matching ``TorchVecEnv``), build their
    constants in ``_setup`` and implement ``_step`` (state, converted actions -> new state,
    reward in ``dtype``, terminated) and ``_observe`` (state -> a new observation array in
    ``dtype``). This base class does the action conversion, the time limit and the autoreset.

    Attributes:
        env_id, obs_dim, state_dim, action_kind ("discrete" or "box"), n_actions (discrete),
        action_dim, action_low, action_high (box; floats), max_episode_steps: as the torch env.
        dtype: float32 or float64, of observations, rewards and Box actions.
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
    _float64_state: ClassVar[bool] = False

    def __init__(self, dtype: Any = np.float32) -> None:
        dt = np.dtype(dtype)
        if dt not in (_F32, _F64):
            raise ValueError(f"dtype must be np.float32 or np.float64, got {dt}")
        self.dtype: np.dtype[Any] = dt
        self.state_dtype: np.dtype[Any] = _F64 if self._float64_state else dt
        self._limit = np.array(self.max_episode_steps, _I64)
        self._const_cache: dict[tuple[int, float, str], Array] = {}
        self._setup()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env_id}, dtype={self.dtype})"

    # -- public interface -----------------------------------------------------------------------

    def transition(self, state: Array, elapsed: Array, actions: Any, reset_state: Array
                   ) -> TransitionOut:
        """One step of N envs: returns (next_state, elapsed, next_obs, reward, terminated,
        truncated, final_obs), as ``TorchVecEnv.transition`` does (its TorchStep flattened).

        truncated is set when the step count reaches ``max_episode_steps`` (independently of
        terminated); where either is set the row restarts from ``reset_state`` (its counter at
        0, next_obs its first observation) and final_obs keeps the true last observation.
        """
        n = state.shape[0]
        new_state, reward, terminated = self._step(state, self._convert_actions(actions, n))
        el = elapsed + _ONE_I64
        truncated = el >= self._limit
        done = terminated | truncated
        final_obs = self._observe(new_state)
        if np.count_nonzero(done):
            el[done] = 0
            np.copyto(new_state, reset_state, where=done[:, None])  # new_state is ours
            next_obs = self._observe(new_state)  # = where(done, observe(reset), final_obs)
        else:
            next_obs = final_obs.copy()
        return new_state, el, next_obs, reward, terminated, truncated, final_obs

    def observe(self, state: Array) -> Array:
        """Observations [N, obs_dim] in ``dtype`` of states [N, state_dim] (a new array)."""
        return self._observe(np.asarray(state, self.state_dtype))

    # -- helpers for subclasses -----------------------------------------------------------------

    def _c(self, value: float) -> Array:
        """A constant as a 0-d array of the state's dtype: rounded as torch rounds a Python
        scalar meeting a tensor of that dtype, and cheaper than a Python float operand."""
        return np.array(value, self.state_dtype)

    def _const(self, n: int, value: float, dtype: np.dtype[Any] | None = None) -> Array:
        """A new [n] array filled with ``value`` (copied from a cached one: np.full is slow)."""
        dt = self.dtype if dtype is None else dtype
        key = (n, value, dt.char)
        arr = self._const_cache.get(key)
        if arr is None:
            arr = self._const_cache[key] = np.full(n, value, dt)
        return arr.copy()

    def _convert_actions(self, actions: Any, n: int) -> Array:
        """Discrete: int64 [N] (floats truncated, as torch's ``.to(int64)``). Box: ``dtype``
        [N] (the one action column; both Box envs have action_dim 1)."""
        if self.action_kind == "discrete":
            return np.asarray(actions, _I64).reshape(n)
        return np.asarray(actions, self.dtype).reshape(n)

    def _setup(self) -> None:
        raise NotImplementedError

    def _step(self, state: Array, actions: Array) -> tuple[Array, Array, Array]:
        raise NotImplementedError

    def _observe(self, state: Array) -> Array:
        """Identity observation (CartPole, the mountain cars): a copy."""
        return state.copy()


class NumpyCartPole(NumpyDynamics):
    """CartPole-v1 (see ``torch_classic.CartPole``): state = observation [x, x_dot, theta,
    theta_dot]; actions {0, 1}; Euler step, tau = 0.02."""

    env_id = "CartPole-v1"
    obs_dim = 4
    state_dim = 4
    action_kind = "discrete"
    n_actions = 2
    max_episode_steps = 500

    def _setup(self) -> None:
        masspole, masscart, length = 0.1, 1.0, 0.5
        total_mass = masspole + masscart
        c = self._c
        self._force = np.array([-10.0, 10.0], self.state_dtype)  # where(a == 1, 10, -10)
        self._pml, self._total, self._masspole = c(masspole * length), c(total_mass), c(masspole)
        self._gravity, self._length, self._four_thirds = c(9.8), c(length), c(4.0 / 3.0)
        self._tau = c(0.02)
        # |x| > 2.4 or |theta| > 12 degrees, on the columns [x, theta] of the new state
        self._thresholds = np.array([2.4, 12 * 2 * math.pi / 360], self.state_dtype)

    def _step(self, state: Array, actions: Array) -> tuple[Array, Array, Array]:
        theta, theta_dot = state[:, 2], state[:, 3]
        pml, total = self._pml, self._total
        force = self._force[actions]
        costheta = np.cos(theta)
        sintheta = np.sin(theta)
        # Gymnasium's (and the torch env's) operations, in the same order.
        temp = (force + pml * np.square(theta_dot) * sintheta) / total
        denom = self._length * (self._four_thirds - self._masspole * np.square(costheta) / total)
        # deriv = [x_dot, xacc, theta_dot, thetaacc]; state + tau * deriv is the Euler step
        deriv = np.empty_like(state)
        thetaacc = np.divide(self._gravity * sintheta - costheta * temp, denom, out=deriv[:, 3])
        np.subtract(temp, pml * thetaacc * costheta / total, out=deriv[:, 1])
        deriv[:, 0::2] = state[:, 1::2]  # the *old* velocities move the positions
        new_state = state + self._tau * deriv
        out = np.abs(new_state[:, 0::2]) > self._thresholds
        terminated = out[:, 0] | out[:, 1]
        return new_state, self._const(state.shape[0], 1.0), terminated


class NumpyAcrobot(NumpyDynamics):
    """Acrobot-v1 (see ``torch_classic.Acrobot``): state [theta1, theta2, dtheta1, dtheta2],
    observation [cos t1, sin t1, cos t2, sin t2, dtheta1, dtheta2], actions {0, 1, 2} -> torque
    -1, 0, +1; one RK4 step of 0.2 s of the "book" dynamics; float64 state in both modes."""

    env_id = "Acrobot-v1"
    obs_dim = 6
    state_dim = 4
    action_kind = "discrete"
    n_actions = 3
    max_episode_steps = 500
    _float64_state = True

    def _setup(self) -> None:
        # Link masses, lengths and moments are 1, centres of mass 0.5: the torch env's
        # products of these constants are folded here exactly as Python folds them there.
        c = self._c
        self._torque = np.array([-1.0, 0.0, 1.0])  # (action - 1)
        self._k025, self._k125, self._k1, self._k05 = c(0.25), c(1.25), c(1.0), c(0.5)
        self._k49 = c(0.5 * 9.8)  # m2 * lc2 * g
        self._km05 = c(-0.5)  # -m2 * l1 * lc2
        self._k147 = c((0.5 + 1.0) * 9.8)  # (m1 * lc1 + m2 * l1) * g
        self._half_pi = c(math.pi / 2.0)
        self._dt, self._dt2, self._dt6, self._two = c(0.2), c(0.2 / 2.0), c(0.2 / 6.0), c(2.0)
        self._pi, self._minus_pi, self._two_pi = c(math.pi), c(-math.pi), c(math.pi - (-math.pi))
        self._max_vel = np.array([4 * math.pi, 9 * math.pi])
        self._min_vel = -self._max_vel
        self._rewards = np.array([-1.0, 0.0], self.dtype)  # indexed by terminated

    def _dsdt(self, s: Array, a: Array) -> Array:
        """ds/dt [N, 4] of the book dynamics with torque a [N]; torch_classic.Acrobot._dsdt
        term for term (``m * x`` with m = 1 dropped: exact)."""
        theta1, theta2, dtheta1, dtheta2 = s[:, 0], s[:, 1], s[:, 2], s[:, 3]
        cos2, sin2 = np.cos(theta2), np.sin(theta2)
        d1 = self._k025 + (self._k125 + cos2) + self._k1 + self._k1
        d2 = self._k025 + self._k05 * cos2 + self._k1
        phi2 = self._k49 * np.cos(theta1 + theta2 - self._half_pi)
        phi1 = (
            self._km05 * np.square(dtheta2) * sin2
            - dtheta2 * dtheta1 * sin2
            + self._k147 * np.cos(theta1 - self._half_pi)
            + phi2
        )
        out = np.empty_like(s)
        out[:, :2] = s[:, 2:]
        ddtheta2 = np.divide(
            a + d2 / d1 * phi1 - self._k05 * np.square(dtheta1) * sin2 - phi2,
            self._k125 - np.square(d2) / d1,
            out=out[:, 3],
        )
        np.divide(-(d2 * ddtheta2 + phi1), d1, out=out[:, 2])
        return out

    def _step(self, state: Array, actions: Array) -> tuple[Array, Array, Array]:
        a = self._torque[actions]
        dt2 = self._dt2
        k1 = self._dsdt(state, a)
        k2 = self._dsdt(state + dt2 * k1, a)
        k3 = self._dsdt(state + dt2 * k2, a)
        k4 = self._dsdt(state + self._dt * k3, a)
        two = self._two
        ns = state + self._dt6 * (k1 + two * k2 + two * k3 + k4)
        angles, vel = ns[:, :2], ns[:, 2:]
        self._wrap(angles)
        np.maximum(vel, self._min_vel, out=vel)
        np.minimum(vel, self._max_vel, out=vel)
        t1 = ns[:, 0]
        terminated = -np.cos(t1) - np.cos(ns[:, 1] + t1) > self._k1
        reward = self._rewards[terminated.view(_U8)]  # where(terminated, 0, -1)
        return ns, reward, terminated

    def _wrap(self, x: Array) -> None:
        """Gymnasium's ``wrap`` into [-pi, pi], in place: subtract 2 pi while above pi, then
        add it while below -pi (repeated, not a modulo: the two differ in the last bits). As
        in the torch env, at most 8 turns each way, then a modulo for anything still out."""
        pi, minus_pi, diff = self._pi, self._minus_pi, self._two_pi
        if not np.count_nonzero(np.abs(x) > pi):
            return
        for _ in range(8):
            above = x > pi
            if not np.count_nonzero(above):
                break
            np.subtract(x, diff, out=x, where=above)
        for _ in range(8):
            below = x < minus_pi
            if not np.count_nonzero(below):
                break
            np.add(x, diff, out=x, where=below)
        still = np.abs(x) > pi
        if np.count_nonzero(still):
            x[still] = np.remainder(x[still] + pi, diff) - pi

    def _observe(self, state: Array) -> Array:
        obs = np.empty((state.shape[0], 6), self.dtype)
        angles = state[:, :2]
        np.cos(angles, out=obs[:, 0:4:2])  # computed in float64, then rounded into dtype
        np.sin(angles, out=obs[:, 1:4:2])
        obs[:, 4:] = state[:, 2:]
        return obs


class NumpyMountainCar(NumpyDynamics):
    """MountainCar-v0 (see ``torch_classic.MountainCar``): state = observation [position,
    velocity]; actions {0, 1, 2} push -0.001, 0, +0.001."""

    env_id = "MountainCar-v0"
    obs_dim = 2
    state_dim = 2
    action_kind = "discrete"
    n_actions = 3
    max_episode_steps = 200

    def _setup(self) -> None:
        c = self._c
        force = c(0.001)
        self._push = np.array([-1.0, 0.0, 1.0], self.state_dtype) * force  # (action - 1) * force
        self._three, self._minus_gravity = c(3), c(-0.0025)
        self._max_speed, self._min_speed = c(0.07), c(-0.07)
        self._min_pos, self._max_pos, self._goal = c(-1.2), c(0.6), c(0.5)
        self._zero = c(0.0)

    def _step(self, state: Array, actions: Array) -> tuple[Array, Array, Array]:
        position, velocity = state[:, 0], state[:, 1]
        new_state = np.empty_like(state)
        pos, vel = new_state[:, 0], new_state[:, 1]
        push = self._push[actions]
        np.add(velocity, push + np.cos(self._three * position) * self._minus_gravity, out=vel)
        _clamp(vel, self._min_speed, self._max_speed)  # before the position update
        np.add(position, vel, out=pos)
        _clamp(pos, self._min_pos, self._max_pos)
        zero = self._zero
        vel[(pos == self._min_pos) & (vel < zero)] = 0.0  # the left wall stops the car
        terminated = (pos >= self._goal) & (vel >= zero)
        return new_state, self._const(state.shape[0], -1.0), terminated


class NumpyMountainCarContinuous(NumpyDynamics):
    """MountainCarContinuous-v0 (see ``torch_classic.MountainCarContinuous``, which explains
    the float32 roundings that float64 mode copies from Gymnasium): state = observation
    [position, velocity]; action [N, 1] in [-1, 1]; reward 100 at the goal minus 0.1 a^2 of
    the unclipped action."""

    env_id = "MountainCarContinuous-v0"
    obs_dim = 2
    state_dim = 2
    action_kind = "box"
    action_dim = 1
    action_low = -1.0
    action_high = 1.0
    max_episode_steps = 999

    def _setup(self) -> None:
        c = self._c
        self._lo, self._hi = c(-1.0), c(1.0)
        self._power, self._k0025, self._three32 = c(0.0015), c(0.0025), np.array(3, _F32)
        self._max_speed, self._min_speed = c(0.07), c(-0.07)
        self._min_pos, self._max_pos, self._goal = c(-1.2), c(0.6), c(0.45)
        self._zero, self._k01 = c(0.0), c(0.1)
        self._bonus = np.array([0.0, 100.0], self.state_dtype)  # where(terminated, 100, 0)

    def _step(self, state: Array, actions: Array) -> tuple[Array, Array, Array]:
        position, velocity = state[:, 0], state[:, 1]
        action = actions
        force = np.minimum(np.maximum(action, self._lo), self._hi)
        # 3 * position is computed in float32 in Gymnasium (its state is float32)
        three_pos = np.multiply(self._three32, position, dtype=_F32)
        inc = force * self._power - self._k0025 * np.cos(three_pos, dtype=self.state_dtype)
        new_state = np.empty_like(state)
        pos, vel = new_state[:, 0], new_state[:, 1]
        if self.state_dtype == _F64:
            # Gymnasium adds in float32 where a Python float meets its float32 state: when the
            # action was clipped and when the velocity was (see the torch env).
            a_clipped = (action < self._lo) | (action > self._hi)
            np.add(velocity, inc, out=vel)
            if np.count_nonzero(a_clipped):
                vel[a_clipped] = np.add(velocity, inc, dtype=_F32)[a_clipped]
            v_clipped = (vel > self._max_speed) | (vel < self._min_speed)
            _clamp(vel, self._min_speed, self._max_speed)
            np.add(position, vel, out=pos)
            f32 = a_clipped | v_clipped
            if np.count_nonzero(f32):
                pos[f32] = np.add(position, vel, dtype=_F32)[f32]
        else:
            np.add(velocity, inc, out=vel)
            _clamp(vel, self._min_speed, self._max_speed)
            np.add(position, vel, out=pos)
        _clamp(pos, self._min_pos, self._max_pos)
        zero = self._zero
        vel[(pos == self._min_pos) & (vel < zero)] = 0.0
        terminated = (pos >= self._goal) & (vel >= zero)
        reward = self._bonus[terminated.view(_U8)] - np.square(action) * self._k01
        if self.state_dtype == _F64:  # the state is float32 in Gymnasium after every step
            new_state = new_state.astype(_F32).astype(_F64)
        return new_state, reward, terminated


class NumpyPendulum(NumpyDynamics):
    """Pendulum-v1 (see ``torch_classic.Pendulum``): state [theta, thetadot], observation
    [cos theta, sin theta, thetadot], action [N, 1] torque in [-2, 2]; the reward is computed
    from the state before the step; never terminates."""

    env_id = "Pendulum-v1"
    obs_dim = 3
    state_dim = 2
    action_kind = "box"
    action_dim = 1
    action_low = -2.0
    action_high = 2.0
    max_episode_steps = 200

    def _setup(self) -> None:
        c = self._c
        self._lo, self._hi = c(-2.0), c(2.0)
        self._pi, self._two_pi = c(math.pi), c(2 * math.pi)
        self._k01, self._k0001, self._dt = c(0.1), c(0.001), c(0.05)
        self._k15, self._k3 = c(3 * 10.0 / (2 * 1.0)), c(3.0 / (1.0 * 1.0**2))  # 3g/2l, 3/ml^2
        self._max_speed, self._min_speed = c(8), c(-8)

    def _step(self, state: Array, actions: Array) -> tuple[Array, Array, Array]:
        th, thdot = state[:, 0], state[:, 1]
        u = np.minimum(np.maximum(actions, self._lo), self._hi)
        pi = self._pi
        norm_th = np.remainder(th + pi, self._two_pi) - pi
        costs = np.square(norm_th) + self._k01 * np.square(thdot) + self._k0001 * np.square(u)
        new_state = np.empty_like(state)
        newth, newthdot = new_state[:, 0], new_state[:, 1]
        np.add(thdot, (self._k15 * np.sin(th) + self._k3 * u) * self._dt, out=newthdot)
        _clamp(newthdot, self._min_speed, self._max_speed)
        np.add(th, newthdot * self._dt, out=newth)
        terminated = self._const(state.shape[0], False, np.dtype(bool))
        return new_state, np.negative(costs, out=costs), terminated

    def _observe(self, state: Array) -> Array:
        obs = np.empty((state.shape[0], 3), self.dtype)
        th = state[:, 0]
        np.cos(th, out=obs[:, 0])
        np.sin(th, out=obs[:, 1])
        obs[:, 2] = state[:, 1]
        return obs


def _clamp(x: Array, low: Array, high: Array) -> None:
    """torch.clamp in place: max with low, then min with high (np.clip costs 2x more)."""
    np.maximum(x, low, out=x)
    np.minimum(x, high, out=x)


_DYNAMICS: dict[str, type[NumpyDynamics]] = {
    cls.env_id: cls
    for cls in (NumpyCartPole, NumpyAcrobot, NumpyMountainCar, NumpyMountainCarContinuous,
                NumpyPendulum)
}
NUMPY_SUPPORTED: frozenset[str] = frozenset(_DYNAMICS)


def make_numpy_dynamics(env_id: str, dtype: Any = np.float32) -> NumpyDynamics:
    """The NumPy dynamics of ``env_id`` (one of ``NUMPY_SUPPORTED``) in ``dtype`` (np.float32
    or np.float64). Raises ValueError for any other id or dtype."""
    try:
        cls = _DYNAMICS[env_id]
    except KeyError:
        raise ValueError(
            f"no NumPy version of {env_id!r}; supported: {', '.join(sorted(NUMPY_SUPPORTED))}"
        ) from None
    return cls(dtype)
