"""Batched, torch-native copies of Gymnasium's classic-control envs.

    env = make_torch_env("CartPole-v1", num_envs=4096, device="cuda", seed=0)
    obs = env.reset()                                    # [N, obs_dim]
    obs, reward, terminated, truncated, final_obs = env.step(actions)

N envs step in one call, with no Python loop over envs and no host round trip: every tensor
stays on the env's device, and a step never reads a value back to the host (no ``.item()``, no
``if mask.any()``), so the step can later be captured in a CUDA graph or compiled.

What is reproduced, from Gymnasium 1.x's ``gymnasium/envs/classic_control``:

- dynamics, reward, termination and observation of CartPole-v1, Acrobot-v1 (``book_or_nips =
  "book"``), MountainCar-v0, MountainCarContinuous-v0 and Pendulum-v1, with the arithmetic in
  Gymnasium's order, so that float64 mode matches Gymnasium's float64 internal state to within an
  ulp of torch's ``sin``/``cos`` (for the Box envs: Gymnasium fed float64 actions), and float32
  mode matches it to float32 rounding (Acrobot integrates in float64 in both modes);
- the time limits of ``gym.make`` (500, 500, 200, 999, 200 steps): ``truncated`` is set when the
  elapsed step count reaches the limit, independently of ``terminated`` (both can be True, as with
  Gymnasium's ``TimeLimit``);
- the reset distributions (not Gymnasium's random streams: torch and NumPy generators differ);
- SAME_STEP autoreset, as in ``gymnasium.vector`` with ``AutoresetMode.SAME_STEP``: where a step
  ends an episode, ``next_obs`` is already the first observation of the next episode and
  ``final_obs`` holds the true last observation (other rows of ``final_obs`` equal ``next_obs``).

Actions: Discrete envs take integer tensors [N] (values outside the action space are not checked,
since checking would need a device-to-host sync, and give undefined dynamics); Box envs take
[N, 1] (or [N]) float tensors, clipped to the bounds inside ``step`` as Gymnasium's envs do.

Seeding: each env owns a ``torch.Generator`` on its device, seeded by the constructor's ``seed``
or by ``reset(seed)``; without either it is seeded nondeterministically. Reset states for all N
envs are drawn at every step and used only where an episode ended: the generator advances by
the same amount every step, so trajectories depend only on the seed and the actions, and no
``if done.any()`` is needed.

Float64 mode is for testing against Gymnasium (whose own internal state is float64, apart from
the float32 cases noted per env); float32 mode is the fast one for training.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar, NamedTuple

import torch
from torch import Tensor

__all__ = [
    "SUPPORTED",
    "Acrobot",
    "CartPole",
    "MountainCar",
    "MountainCarContinuous",
    "Pendulum",
    "TorchStep",
    "TorchVecEnv",
    "make_torch_env",
]


class TorchStep(NamedTuple):
    """What ``TorchVecEnv.step`` returns; unpacks like Gymnasium's 5-tuple, final_obs for info.

    next_obs [N, obs_dim]: observation after the step, the reset observation where an episode ended.
    reward [N]: the step's reward (of the ended episode where one ended), in the env's dtype.
    terminated [N] bool: the env's own terminal condition.
    truncated [N] bool: the time limit was reached at this step.
    final_obs [N, obs_dim]: the true observation after the step, before any autoreset.
    """

    next_obs: Tensor
    reward: Tensor
    terminated: Tensor
    truncated: Tensor
    final_obs: Tensor


class TorchVecEnv:
    """N copies of one classic-control env, stepped together on one device.

    Subclasses set the class attributes and implement ``_sample_state`` (the reset distribution),
    ``_transition`` (one step of the dynamics: state, actions -> state, reward, terminated) and
    ``_observe`` (state -> observation). This base class does the time limit, autoreset, seeding,
    action conversion and the state accessors.

    Attributes:
        env_id: the Gymnasium id this env reproduces.
        num_envs: N.
        obs_dim: observation size; observations are [N, obs_dim] in ``dtype``.
        state_dim: size of the internal state (``get_state``/``set_state`` layout).
        action_kind: "discrete" (then ``n_actions``) or "box" (then ``action_dim``,
            ``action_low`` and ``action_high``, tensors [action_dim] on the device).
        max_episode_steps: the time limit Gymnasium registers for the id.
        device, dtype: where and in which float type (float32 or float64) observations,
            rewards and actions live.
        state_dtype: the float type of the internal state and of the arithmetic: ``dtype``,
            except for Acrobot, which always integrates in float64 (see its docstring).
    """

    env_id: ClassVar[str]
    obs_dim: ClassVar[int]
    state_dim: ClassVar[int]
    action_kind: ClassVar[str]
    max_episode_steps: ClassVar[int]
    n_actions: ClassVar[int | None] = None
    action_dim: ClassVar[int | None] = None
    _box_low: ClassVar[float] = 0.0
    _box_high: ClassVar[float] = 0.0
    _state_dtype: ClassVar[torch.dtype | None] = None  # None: the env's dtype

    def __init__(
        self,
        num_envs: int,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        seed: int | None = None,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        self.num_envs = int(num_envs)
        self.device = torch.device(device)
        self.dtype = dtype
        self.state_dtype = self._state_dtype or dtype
        self._gen = torch.Generator(device=self.device)
        if seed is None:
            self._gen.seed()
        else:
            self._gen.manual_seed(int(seed))
        self.action_low: Tensor | None = None
        self.action_high: Tensor | None = None
        if self.action_kind == "box":
            assert self.action_dim is not None
            self.action_low = torch.full(
                (self.action_dim,), self._box_low, device=self.device, dtype=dtype
            )
            self.action_high = torch.full(
                (self.action_dim,), self._box_high, device=self.device, dtype=dtype
            )
        self.random_source: Callable[[tuple[int, ...], torch.dtype], Tensor] | None = None
        """Where reset states' uniforms come from instead of the generator, when set: called
        with (shape, dtype) and returning uniforms in [0, 1) (trustrl.fast.rng.ResetSampler
        gives each env row its own counter-based stream, so populations of seeds stay
        independent)."""
        self._state: Tensor | None = None
        self._elapsed = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)

    # -- public interface -------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> Tensor:
        """Start a new episode in every env; returns the observations [N, obs_dim].

        ``seed`` reseeds the env's generator first (the same seed then gives the same resets
        and, with the same actions, the same trajectories).
        """
        if seed is not None:
            self._gen.manual_seed(int(seed))
        self._state = self._sample_state()
        self._elapsed.zero_()
        return self._observe(self._state).to(self.dtype)

    def step(self, actions: Tensor) -> TorchStep:
        """Step all N envs; see ``TorchStep`` for what comes back. Ended envs are reset."""
        if self._state is None:
            raise RuntimeError("call reset() (or set_state()) before step()")
        reset_state = self._sample_state()  # drawn every step: no host sync to test done.any()
        self._state, self._elapsed, out = self.transition(
            self._state, self._elapsed, actions, reset_state)
        return out

    def transition(self, state: Tensor, elapsed: Tensor, actions: Tensor, reset_state: Tensor
                   ) -> tuple[Tensor, Tensor, TorchStep]:
        """The pure form of ``step``: from (state, elapsed counters), actions and the states
        to reset ended episodes to, return (new state, new counters, TorchStep). Touches no
        attribute, so it can be compiled or captured in a CUDA graph with its inputs."""
        a = self._convert_actions(actions)
        new_state, reward, terminated = self._transition(state, a)
        elapsed = elapsed + 1
        truncated = elapsed >= self.max_episode_steps
        done = terminated | truncated
        final_obs = self._observe(new_state).to(self.dtype)
        next_state = torch.where(done[:, None], reset_state, new_state)
        elapsed = elapsed.masked_fill(done, 0)
        next_obs = torch.where(done[:, None], self._observe(reset_state).to(self.dtype), final_obs)
        return next_state, elapsed, TorchStep(
            next_obs, reward.to(self.dtype), terminated, truncated, final_obs)

    def sample_states(self) -> Tensor:
        """N start states [N, state_dim] from the reset distribution (draws from the source)."""
        return self._sample_state()

    def get_state(self) -> Tensor:
        """A copy of the internal state [N, state_dim] in ``state_dtype`` (layout in each env's
        docstring)."""
        if self._state is None:
            raise RuntimeError("no state yet: call reset() or set_state() first")
        return self._state.clone()

    def set_state(self, state: Tensor, elapsed: Tensor | None = None) -> None:
        """Overwrite the internal state [N, state_dim] and the elapsed-step counters [N].

        ``elapsed`` None sets the counters to 0 (a fresh episode starting from ``state``).
        The state is copied and converted to the env's device and ``state_dtype``.
        """
        state = torch.as_tensor(state).to(device=self.device, dtype=self.state_dtype)
        if state.shape != (self.num_envs, self.state_dim):
            raise ValueError(
                f"state must have shape {(self.num_envs, self.state_dim)}, got {tuple(state.shape)}"
            )
        self._state = self._canonical_state(state.clone())
        if elapsed is None:
            self._elapsed.zero_()
        else:
            el = torch.as_tensor(elapsed).to(device=self.device, dtype=torch.int64)
            self._elapsed = el.reshape(self.num_envs).clone()

    @property
    def elapsed(self) -> Tensor:
        """A copy of the per-env elapsed step counters [N] (int64; 0 right after a reset)."""
        return self._elapsed.clone()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.env_id}, num_envs={self.num_envs}, "
            f"device={self.device}, dtype={self.dtype})"
        )

    # -- helpers for subclasses ---------------------------------------------------------------

    def _convert_actions(self, actions: Tensor) -> Tensor:
        actions = torch.as_tensor(actions, device=self.device).detach()
        if self.action_kind == "discrete":
            return actions.to(torch.int64).reshape(self.num_envs)
        assert self.action_dim is not None
        return actions.to(self.dtype).reshape(self.num_envs, self.action_dim)

    def _uniform(self, low: float, high: float, shape: tuple[int, ...]) -> Tensor:
        """Uniform samples in [low, high] (high only by rounding) from the env's generator."""
        if self.random_source is not None:
            u = self.random_source(shape, self.state_dtype)
        else:
            u = torch.rand(shape, generator=self._gen, device=self.device, dtype=self.state_dtype)
        return low + (high - low) * u

    def _canonical_state(self, state: Tensor) -> Tensor:
        """Hook for envs whose Gymnasium state has a coarser type (see MountainCarContinuous)."""
        return state

    def _sample_state(self) -> Tensor:
        """N fresh start states [N, state_dim] from the reset distribution."""
        raise NotImplementedError

    def _transition(self, state: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """One step of the dynamics: (next state, reward [N], terminated [N] bool), with the
        state and reward in ``state_dtype`` and actions as ``_convert_actions`` returns them."""
        raise NotImplementedError

    def _observe(self, state: Tensor) -> Tensor:
        """Observation [N, obs_dim] of ``state`` (in ``state_dtype``; ``step`` casts it)."""
        raise NotImplementedError


class CartPole(TorchVecEnv):
    """CartPole-v1. State [x, x_dot, theta, theta_dot]; observation = state; actions {0, 1}.

    Euler integration with tau = 0.02; the force is +10 for action 1 and -10 otherwise.
    Reward 1.0 on every step including the terminating one. Terminated when |x| > 2.4 or
    |theta| > 12 degrees (12 * 2 * pi / 360), tested on the state after the step. Reset:
    all four uniform(-0.05, 0.05). Easy mistakes: ``polemass_length`` is masspole * length with
    length the half-length 0.5; the masspole * cos^2 / total_mass term in thetaacc.
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
    length = 0.5
    polemass_length = masspole * length
    force_mag = 10.0
    tau = 0.02
    theta_threshold_radians = 12 * 2 * math.pi / 360
    x_threshold = 2.4

    def _sample_state(self) -> Tensor:
        return self._uniform(-0.05, 0.05, (self.num_envs, 4))

    def _transition(self, state: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        x, x_dot, theta, theta_dot = state.unbind(1)
        force = torch.where(actions == 1, self.force_mag, -self.force_mag).to(self.state_dtype)
        costheta = torch.cos(theta)
        sintheta = torch.sin(theta)
        # Same operations in the same order as Gymnasium (so float64 matches to the last bits).
        temp = (force + self.polemass_length * torch.square(theta_dot) * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length
            * (4.0 / 3.0 - self.masspole * torch.square(costheta) / self.total_mass)
        )
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        x = x + self.tau * x_dot
        x_dot = x_dot + self.tau * xacc
        theta = theta + self.tau * theta_dot
        theta_dot = theta_dot + self.tau * thetaacc
        terminated = (
            (x < -self.x_threshold)
            | (x > self.x_threshold)
            | (theta < -self.theta_threshold_radians)
            | (theta > self.theta_threshold_radians)
        )
        reward = torch.ones_like(x)
        return torch.stack((x, x_dot, theta, theta_dot), 1), reward, terminated

    def _observe(self, state: Tensor) -> Tensor:
        return state.clone()


class Acrobot(TorchVecEnv):
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
    _state_dtype = torch.float64

    dt = 0.2
    LINK_LENGTH_1 = 1.0
    LINK_MASS_1 = 1.0
    LINK_MASS_2 = 1.0
    LINK_COM_POS_1 = 0.5
    LINK_COM_POS_2 = 0.5
    LINK_MOI = 1.0
    MAX_VEL_1 = 4 * math.pi
    MAX_VEL_2 = 9 * math.pi

    def _sample_state(self) -> Tensor:
        s = self._uniform(-0.1, 0.1, (self.num_envs, 4))
        return s.to(torch.float32).to(self.state_dtype)

    def _dsdt(self, s: Tensor, a: Tensor) -> Tensor:
        """Gymnasium's ``_dsdt`` (book variant) term for term, on s [N, 4] with the torque a [N]
        held apart: its derivative is 0, so carrying it through the stages would only add zeros.
        sin/cos of theta2 are computed once (Gymnasium computes the same values up to 3 times)."""
        m1 = self.LINK_MASS_1
        m2 = self.LINK_MASS_2
        l1 = self.LINK_LENGTH_1
        lc1 = self.LINK_COM_POS_1
        lc2 = self.LINK_COM_POS_2
        I1 = self.LINK_MOI
        I2 = self.LINK_MOI
        g = 9.8
        pi = math.pi
        theta1, theta2, dtheta1, dtheta2 = s.unbind(1)
        cos2, sin2 = torch.cos(theta2), torch.sin(theta2)
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * cos2) + I1 + I2
        d2 = m2 * (lc2**2 + l1 * lc2 * cos2) + I2
        phi2 = m2 * lc2 * g * torch.cos(theta1 + theta2 - pi / 2.0)
        phi1 = (
            -m2 * l1 * lc2 * dtheta2**2 * sin2
            - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin2
            + (m1 * lc1 + m2 * l1) * g * torch.cos(theta1 - pi / 2)
            + phi2
        )
        ddtheta2 = (
            a + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * sin2 - phi2
        ) / (m2 * lc2**2 + I2 - d2**2 / d1)
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return torch.stack((dtheta1, dtheta2, ddtheta1, ddtheta2), 1)

    def _rk4(self, y0: Tensor, a: Tensor) -> Tensor:
        """One RK4 step of length dt, as Gymnasium's ``rk4(derivs, s_augmented, [0, dt])``
        (the same operations, elementwise, in the same order)."""
        dt = self.dt - 0  # t[1] - t[0]
        dt2 = dt / 2.0
        k1 = self._dsdt(y0, a)
        k2 = self._dsdt(y0 + dt2 * k1, a)
        k3 = self._dsdt(y0 + dt2 * k2, a)
        k4 = self._dsdt(y0 + dt * k3, a)
        return y0 + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)

    @staticmethod
    def _wrap(x: Tensor, m: float, M: float) -> Tensor:
        """Gymnasium's ``wrap``: subtract (M - m) while x > M, then add it while x < m.

        Repeated subtraction, not a modulo (the two differ in the last bits). Near the velocity
        bounds one RK4 step can turn an angle by more than four turns (|angle| up to ~29 rad
        seen), so the loop is unrolled 8 times each way, with no host sync; anything still
        outside [m, M] after that falls back to a modulo.
        """
        diff = M - m
        for _ in range(8):
            x = torch.where(x > M, x - diff, x)
        for _ in range(8):
            x = torch.where(x < m, x + diff, x)
        return torch.where((x > M) | (x < m), torch.remainder(x - m, diff) + m, x)

    def _transition(self, state: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        torque = (actions - 1).to(self.state_dtype)  # AVAIL_TORQUE = [-1.0, 0.0, +1]
        ns = self._rk4(state, torque)
        t1, t2 = self._wrap(ns[:, :2], -math.pi, math.pi).unbind(1)
        d1 = torch.clamp(ns[:, 2], -self.MAX_VEL_1, self.MAX_VEL_1)
        d2 = torch.clamp(ns[:, 3], -self.MAX_VEL_2, self.MAX_VEL_2)
        terminated = -torch.cos(t1) - torch.cos(t2 + t1) > 1.0
        reward = torch.where(terminated, 0.0, -1.0).to(self.state_dtype)
        return torch.stack((t1, t2, d1, d2), 1), reward, terminated

    def _observe(self, state: Tensor) -> Tensor:
        t1, t2, d1, d2 = state.unbind(1)
        return torch.stack(
            (torch.cos(t1), torch.sin(t1), torch.cos(t2), torch.sin(t2), d1, d2), 1
        )


class MountainCar(TorchVecEnv):
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

    def _sample_state(self) -> Tensor:
        pos = self._uniform(-0.6, -0.4, (self.num_envs,))
        return torch.stack((pos, torch.zeros_like(pos)), 1)

    def _transition(self, state: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        position, velocity = state.unbind(1)
        push = (actions - 1).to(self.state_dtype) * self.force
        velocity = velocity + (push + torch.cos(3 * position) * (-self.gravity))
        velocity = torch.clamp(velocity, -self.max_speed, self.max_speed)
        position = position + velocity
        position = torch.clamp(position, self.min_position, self.max_position)
        velocity = torch.where((position == self.min_position) & (velocity < 0), 0.0, velocity)
        terminated = (position >= self.goal_position) & (velocity >= self.goal_velocity)
        reward = torch.full_like(position, -1.0)
        return torch.stack((position, velocity), 1), reward, terminated

    def _observe(self, state: Tensor) -> Tensor:
        return state.clone()


class MountainCarContinuous(TorchVecEnv):
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
    it reproduces Gymnasium fed float64 actions bit for bit, up to torch's cos; termination is
    tested before the rounding, as in Gymnasium (which compares float32 values with float32
    thresholds in the float32 cases: a position exactly at float32(0.45) is the one difference).
    """

    env_id = "MountainCarContinuous-v0"
    obs_dim = 2
    state_dim = 2
    action_kind = "box"
    action_dim = 1
    _box_low = -1.0
    _box_high = 1.0
    max_episode_steps = 999

    min_position = -1.2
    max_position = 0.6
    max_speed = 0.07
    goal_position = 0.45
    goal_velocity = 0.0
    power = 0.0015

    def _canonical_state(self, state: Tensor) -> Tensor:
        return state.to(torch.float32).to(self.state_dtype)

    def _sample_state(self) -> Tensor:
        pos = self._uniform(-0.6, -0.4, (self.num_envs,))
        return self._canonical_state(torch.stack((pos, torch.zeros_like(pos)), 1))

    def _transition(self, state: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        position, velocity = state.unbind(1)
        action = actions[:, 0]
        force = torch.clamp(action, self._box_low, self._box_high)
        three_pos = (3 * position.to(torch.float32)).to(self.state_dtype)  # float32 in Gymnasium
        inc = force * self.power - 0.0025 * torch.cos(three_pos)
        if self.state_dtype == torch.float64:
            # Gymnasium adds in float32 where a Python float meets its float32 state: when the
            # action was clipped (force is then a Python float) and when the velocity was.
            a_clipped = (action < self._box_low) | (action > self._box_high)
            velocity = torch.where(a_clipped, _add_f32(velocity, inc), velocity + inc)
            v_clipped = (velocity > self.max_speed) | (velocity < -self.max_speed)
            velocity = torch.clamp(velocity, -self.max_speed, self.max_speed)
            position = torch.where(
                a_clipped | v_clipped, _add_f32(position, velocity), position + velocity
            )
        else:
            velocity = torch.clamp(velocity + inc, -self.max_speed, self.max_speed)
            position = position + velocity
        position = torch.clamp(position, self.min_position, self.max_position)
        velocity = torch.where((position == self.min_position) & (velocity < 0), 0.0, velocity)
        terminated = (position >= self.goal_position) & (velocity >= self.goal_velocity)
        bonus = torch.where(terminated, 100.0, 0.0).to(self.state_dtype)
        reward = bonus - torch.square(action) * 0.1  # the unclipped action, as in Gymnasium
        new_state = self._canonical_state(torch.stack((position, velocity), 1))
        return new_state, reward, terminated

    def _observe(self, state: Tensor) -> Tensor:
        return state.clone()


class Pendulum(TorchVecEnv):
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
    _box_low = -2.0
    _box_high = 2.0
    max_episode_steps = 200

    max_speed = 8
    max_torque = 2.0
    dt = 0.05
    g = 10.0
    m = 1.0
    l = 1.0

    def _sample_state(self) -> Tensor:
        theta = self._uniform(-math.pi, math.pi, (self.num_envs,))
        thetadot = self._uniform(-1.0, 1.0, (self.num_envs,))
        return torch.stack((theta, thetadot), 1)

    def _transition(self, state: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        th, thdot = state.unbind(1)
        g, m, l, dt = self.g, self.m, self.l, self.dt
        u = torch.clamp(actions[:, 0], -self.max_torque, self.max_torque)
        norm_th = torch.remainder(th + math.pi, 2 * math.pi) - math.pi
        costs = norm_th**2 + 0.1 * thdot**2 + 0.001 * (u**2)
        newthdot = thdot + (3 * g / (2 * l) * torch.sin(th) + 3.0 / (m * l**2) * u) * dt
        newthdot = torch.clamp(newthdot, -self.max_speed, self.max_speed)
        newth = th + newthdot * dt
        terminated = torch.zeros_like(th, dtype=torch.bool)
        return torch.stack((newth, newthdot), 1), -costs, terminated

    def _observe(self, state: Tensor) -> Tensor:
        th, thdot = state.unbind(1)
        return torch.stack((torch.cos(th), torch.sin(th), thdot), 1)


def _add_f32(a: Tensor, b: Tensor) -> Tensor:
    """a + b computed in float32 (both rounded to float32 first), returned in a's dtype."""
    return (a.to(torch.float32) + b.to(torch.float32)).to(a.dtype)


_ENVS: dict[str, type[TorchVecEnv]] = {
    cls.env_id: cls for cls in (CartPole, Acrobot, MountainCar, MountainCarContinuous, Pendulum)
}
SUPPORTED: tuple[str, ...] = tuple(_ENVS)


def make_torch_env(
    env_id: str,
    num_envs: int,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    seed: int | None = None,
) -> TorchVecEnv:
    """Build the batched torch version of ``env_id`` (one of ``SUPPORTED``).

    Raises ValueError for any other id, naming the supported ones.
    """
    try:
        cls = _ENVS[env_id]
    except KeyError:
        raise ValueError(
            f"no torch version of {env_id!r}; supported: {', '.join(SUPPORTED)}"
        ) from None
    return cls(num_envs, device=device, dtype=dtype, seed=seed)
