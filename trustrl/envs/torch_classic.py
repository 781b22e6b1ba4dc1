"""Batched, torch-native copies of Gymnasium's classic-control envs.

    env = make_torch_env("CartPole-v1", num_envs=4096, device="cuda", seed=0)
    obs = env.reset()                                    # [N, obs_dim]
    obs, reward, terminated, truncated, final_obs = env.step(actions)

N envs step in one call, with no Python loop over envs and no host round trip: every tensor
stays on the env's device, and a step never reads a value back to the host (no ``.item()``, no
``if mask.any()``), so the step can later be captured in a CUDA graph or compiled.

The dynamics (the arithmetic of a step, the observation, the time limit and the same-step
autoreset) are ``trustrl.envs.classic``'s, written once for torch and NumPy; this module adds
what only the torch envs have: a device, a random generator, the reset distributions and the
state accessors. What is reproduced, from Gymnasium 1.x's ``gymnasium/envs/classic_control``:

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

from trustrl.envs import classic
from trustrl.maths import rng

__all__ = [
    "SUPPORTED",
    "Acrobot",
    "CartPole",
    "MaskedPick",
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

    Subclasses set ``dynamics`` (a ``trustrl.envs.classic.Dynamics`` class: the step, the
    observation, the time limit and the autoreset; its env_id, sizes, action space and time
    limit become the subclass's class attributes) and implement ``_sample_state`` (the reset
    distribution). This base class does the seeding, the resets and the state accessors.

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

    dynamics: ClassVar[type[classic.Dynamics]]
    env_id: ClassVar[str]
    obs_dim: ClassVar[int]
    state_dim: ClassVar[int]
    action_kind: ClassVar[str]
    max_episode_steps: ClassVar[int]
    n_actions: ClassVar[int | None] = None
    action_dim: ClassVar[int | None] = None

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        d = cls.dynamics
        cls.env_id, cls.obs_dim, cls.state_dim = d.env_id, d.obs_dim, d.state_dim
        cls.action_kind, cls.max_episode_steps = d.action_kind, d.max_episode_steps
        cls.n_actions, cls.action_dim = d.n_actions, d.action_dim

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
        self.dyn = self.dynamics(classic.torch_ops(self.device), dtype)
        """The shared dynamics, over torch on this env's device."""
        self.state_dtype = self.dyn.state_dtype
        self._gen = torch.Generator(device=self.device)
        if seed is None:
            self._gen.seed()
        else:
            self._gen.manual_seed(int(seed))
        self.action_low: Tensor | None = None
        self.action_high: Tensor | None = None
        if self.action_kind == "box":
            d = self.dynamics
            assert d.action_dim is not None and d.action_low is not None
            assert d.action_high is not None
            self.action_low = torch.full(
                (d.action_dim,), d.action_low, device=self.device, dtype=dtype
            )
            self.action_high = torch.full(
                (d.action_dim,), d.action_high, device=self.device, dtype=dtype
            )
        self.random_source: Callable[[tuple[int, ...], torch.dtype], Tensor] | None = None
        """Where reset states' uniforms come from instead of the generator, when set: called
        with (shape, dtype) and returning uniforms in [0, 1) (trustrl.maths.rng.ResetSampler
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
        return self._observe(self._state)

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
        next_state, el, next_obs, reward, terminated, truncated, final_obs = \
            self.dyn.transition(state, elapsed, actions, reset_state)
        return next_state, el, TorchStep(next_obs, reward, terminated, truncated, final_obs)

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

    def _observe(self, state: Tensor) -> Tensor:
        """Observation [N, obs_dim] of ``state``, a new tensor in ``dtype``."""
        return self.dyn.observe(state)


class CartPole(TorchVecEnv):
    """CartPole-v1 (dynamics: ``trustrl.envs.classic.CartPole``). Reset: all four
    uniform(-0.05, 0.05)."""

    dynamics = classic.CartPole

    def _sample_state(self) -> Tensor:
        return self._uniform(-0.05, 0.05, (self.num_envs, 4))


class Acrobot(TorchVecEnv):
    """Acrobot-v1 (dynamics: ``trustrl.envs.classic.Acrobot``; float64 state in both modes).
    Reset: all four uniform(-0.1, 0.1), rounded to float32 as Gymnasium does (its state is
    float64 after the first step)."""

    dynamics = classic.Acrobot

    def _sample_state(self) -> Tensor:
        s = self._uniform(-0.1, 0.1, (self.num_envs, 4))
        return s.to(torch.float32).to(self.state_dtype)


class MountainCar(TorchVecEnv):
    """MountainCar-v0 (dynamics: ``trustrl.envs.classic.MountainCar``). Reset: position
    uniform(-0.6, -0.4), velocity 0."""

    dynamics = classic.MountainCar

    def _sample_state(self) -> Tensor:
        pos = self._uniform(-0.6, -0.4, (self.num_envs,))
        return torch.stack((pos, torch.zeros_like(pos)), 1)


class MountainCarContinuous(TorchVecEnv):
    """MountainCarContinuous-v0 (dynamics: ``trustrl.envs.classic.MountainCarContinuous``).
    Reset: position uniform(-0.6, -0.4), velocity 0. Gymnasium keeps this env's state in
    float32: float64 mode rounds it to float32 at reset and in ``set_state`` too."""

    dynamics = classic.MountainCarContinuous

    def _canonical_state(self, state: Tensor) -> Tensor:
        return state.to(torch.float32).to(self.state_dtype)

    def _sample_state(self) -> Tensor:
        pos = self._uniform(-0.6, -0.4, (self.num_envs,))
        return self._canonical_state(torch.stack((pos, torch.zeros_like(pos)), 1))


class Pendulum(TorchVecEnv):
    """Pendulum-v1 (dynamics: ``trustrl.envs.classic.Pendulum``). Reset: theta
    uniform(-pi, pi), thetadot uniform(-1, 1)."""

    dynamics = classic.Pendulum

    def _sample_state(self) -> Tensor:
        theta = self._uniform(-math.pi, math.pi, (self.num_envs,))
        thetadot = self._uniform(-1.0, 1.0, (self.num_envs,))
        return torch.stack((theta, thetadot), 1)


class CartPoleNoVel(CartPole):
    """CartPoleNoVel-v1 (dynamics: ``trustrl.envs.classic.CartPoleNoVel``): CartPole-v1
    observing [x, theta]. Reset: CartPole's."""

    dynamics = classic.CartPoleNoVel


class PendulumNoVel(Pendulum):
    """PendulumNoVel-v1 (dynamics: ``trustrl.envs.classic.PendulumNoVel``): Pendulum-v1
    observing [cos theta, sin theta]. Reset: Pendulum's."""

    dynamics = classic.PendulumNoVel


class MaskedPick(TorchVecEnv):
    """MaskedPick-v0 (dynamics and masks: ``trustrl.envs.classic.MaskedPick``). Reset: the
    values uniform in [0, 1), nothing picked (the Gymnasium env draws its values from its own
    generator: the same distribution, another stream)."""

    dynamics = classic.MaskedPick

    def _sample_state(self) -> Tensor:
        d = self.dynamics
        values = self._uniform(0.0, 1.0, (self.num_envs, d.n_items))
        return torch.cat((values, values.new_zeros(self.num_envs, d.n_items + 1)), 1)

    def action_mask(self, state: Tensor | None = None) -> Tensor:
        """The valid actions [N, n_actions] (bool) of `state` (default: the current one)."""
        if state is None:
            state = self.get_state()
        mask = self.dyn.action_mask(state)
        assert mask is not None
        return mask


_ENVS: dict[str, type[TorchVecEnv]] = {
    cls.env_id: cls for cls in (CartPole, Acrobot, MountainCar, MountainCarContinuous, Pendulum,
                                CartPoleNoVel, PendulumNoVel, MaskedPick)
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


class ResetSampler:
    """Start states for T steps of R env rows at once, each row from its own stream.

    A TorchVecEnv draws a reset state for every row at every step (used where an episode
    ended). Here the draws of T steps come from one batched hash: call j of a reset, at step t,
    row r, hashes (key_r, counter + t * calls + j), where `calls` is how many uniform draws the
    env's reset distribution makes. `counter` is a device tensor advanced in place, so the
    sampler runs inside a CUDA graph, and the numbers a row sees depend only on its key and on
    the number of steps taken, never on how many other rows there are.
    """

    def __init__(self, env_id: str, keys: Tensor, width: int = 4):
        self.env_id, self.keys, self.width = env_id, keys, width
        self.rows = keys.shape[0]
        self.counter = torch.zeros((), dtype=torch.int64, device=keys.device)
        self._envs: dict[int, object] = {}
        probe = make_torch_env(env_id, 1, device=keys.device)
        calls = [0]

        def count(shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
            calls[0] += 1
            self.width = max(self.width, math.prod(shape[1:]))  # the widest call's numbers
            return torch.zeros(shape, dtype=dtype, device=keys.device)

        probe.random_source = count
        probe.sample_states()
        self.calls = calls[0]
        self._ahead: tuple[int, int, Tensor] | None = None  # (counter, steps, states) drawn

    def sample_ahead(self, steps: int, calls_ahead: int) -> Tensor:
        """`sample(steps)`, with the states of up to `calls_ahead` such calls drawn at once
        and handed out in turn: the same numbers (a row's draws depend only on the counter),
        one batched hash for many rollouts (CPU; a CUDA graph replays `sample`). The counter
        still advances by steps * calls per call, so a checkpoint saves where the next call
        starts; a counter moved from outside (a loaded checkpoint) draws afresh."""
        c = int(self.counter)
        if calls_ahead <= 1:
            return self.sample(steps)
        kept = self._ahead
        per_call = steps * self.calls
        if (kept is None or kept[1] != steps or per_call == 0
                or not 0 <= c - kept[0] < kept[2].shape[0] * self.calls
                or (c - kept[0]) % per_call):
            start = c
            states = self.sample(steps * calls_ahead)
            self.counter.fill_(start)
            kept = self._ahead = (start, steps, states)
        first = (c - kept[0]) // max(self.calls, 1)
        self.counter += per_call
        return kept[2][first:first + steps]

    def sample(self, steps: int) -> Tensor:
        """[steps, rows, state_dim] start states; advances the counter by steps * calls."""
        env = self._envs.get(steps)
        if env is None:
            env = self._envs[steps] = make_torch_env(self.env_id, steps * self.rows,
                                                     device=self.keys.device)
        call = [0]
        t = torch.arange(steps, device=self.keys.device)

        def source(shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
            k = math.prod(shape[1:])
            ctr = self.counter + t * self.calls + call[0]
            call[0] += 1
            u = rng.uniform(self.keys[None, :], ctr[:, None], self.width, torch.float64)
            return u[:, :, :k].reshape(shape).to(dtype)

        env.random_source = source  # type: ignore[attr-defined]
        states = env.sample_states()  # type: ignore[attr-defined]
        self.counter += steps * self.calls
        return states.view(steps, self.rows, -1)
