"""trustrl.envs.torch_classic against Gymnasium's own classic-control envs.

Float64 mode is held to Gymnasium's float64 internal state at 1e-12 (torch's and NumPy's sin/cos
may differ by an ulp); float32 mode to 1e-5. Gymnasium's observations are float32, so in float64
mode they are compared after rounding ours to float32, and the float64 values are compared with
the observation computed (in float64, by NumPy here) from Gymnasium's internal state.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import pytest
import torch

from trustrl.envs.no_vel import IDS as NO_VEL
from trustrl.envs.no_vel import KEEP
from trustrl.envs.numpy_classic import make_numpy_dynamics
from trustrl.envs.torch_classic import SUPPORTED, TorchVecEnv, make_torch_env

GYMNASIUM_FIVE = tuple(e for e in SUPPORTED if e not in NO_VEL and e != "MaskedPick-v0")
"""Gymnasium's own classic-control envs (the two without velocities: their own test)."""

F32, F64 = torch.float32, torch.float64
PI = math.pi
TOL = {F32: 1e-5, F64: 1e-12}

# Ranges for random test states: what an episode can reach (Pendulum's theta is unbounded).
STATE_RANGES = {
    "CartPole-v1": [(-2.4, 2.4), (-3.0, 3.0), (-0.21, 0.21), (-3.5, 3.5)],
    "Acrobot-v1": [(-PI, PI), (-PI, PI), (-4 * PI, 4 * PI), (-9 * PI, 9 * PI)],
    "MountainCar-v0": [(-1.2, 0.6), (-0.07, 0.07)],
    "MountainCarContinuous-v0": [(-1.2, 0.6), (-0.07, 0.07)],
    "Pendulum-v1": [(-4 * PI, 4 * PI), (-8.0, 8.0)],
}
# Hand-picked states for the branches random states hit rarely: walls, clips, thresholds.
EDGE_STATES = {
    "CartPole-v1": [[2.39, 1.0, 0.0, 0.0], [0.0, 0.0, 0.2, 2.0], [-2.39, -1.0, -0.2, -2.0]],
    "Acrobot-v1": [[PI, -PI, 4 * PI, -9 * PI], [-3.1, 3.1, -4 * PI, 9 * PI], [PI, 0.0, 0.0, 0.0]],
    "MountainCar-v0": [[-1.2, -0.07], [-1.19, -0.07], [0.49, 0.07], [0.6, 0.07], [0.0, 0.07]],
    "MountainCarContinuous-v0": [[-1.2, -0.07], [-1.19, -0.07], [0.44, 0.07], [0.0, -0.07]],
    "Pendulum-v1": [[PI, 8.0], [-PI, -8.0], [100.0, 0.0], [0.0, 7.99]],
}
# Reset distributions in Gymnasium's source: (low, high) per state component; None = exactly 0.
RESET_RANGES = {
    "CartPole-v1": [(-0.05, 0.05)] * 4,
    "Acrobot-v1": [(-0.1, 0.1)] * 4,
    "MountainCar-v0": [(-0.6, -0.4), None],
    "MountainCarContinuous-v0": [(-0.6, -0.4), None],
    "Pendulum-v1": [(-PI, PI), (-1.0, 1.0)],
    "MaskedPick-v0": [(0.0, 1.0)] * 8 + [None] * 9,  # the values; nothing picked
}
RESET_RANGES.update({e: RESET_RANGES[base] for e, base in NO_VEL.items()})  # their base's


def gym_obs(env_id: str, s: np.ndarray) -> np.ndarray:
    """Gymnasium's observation of float64 states [n, state_dim], kept in float64."""
    if env_id == "Acrobot-v1":
        return np.stack([np.cos(s[:, 0]), np.sin(s[:, 0]), np.cos(s[:, 1]), np.sin(s[:, 1]),
                         s[:, 2], s[:, 3]], 1)
    if env_id == "Pendulum-v1":
        return np.stack([np.cos(s[:, 0]), np.sin(s[:, 0]), s[:, 1]], 1)
    return s.copy()


def make_gym(env_id: str, wrapped: bool = False) -> gym.Env:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make(env_id)
    env.reset(seed=0)
    return env if wrapped else env.unwrapped


def set_gym_state(env: gym.Env, env_id: str, state: np.ndarray) -> None:
    """Put a float64 state into Gymnasium's env (MountainCarContinuous keeps float32 state)."""
    u = env.unwrapped
    u.state = state.astype(np.float32) if env_id == "MountainCarContinuous-v0" else state.copy()
    if env_id == "CartPole-v1":
        u.steps_beyond_terminated = None  # else a step after a terminal state gives reward 0


def gym_action(env: TorchVecEnv, a: np.ndarray, dtype: torch.dtype) -> int | np.ndarray:
    """One env's action as Gymnasium takes it. Float64 mode is compared with Gymnasium fed
    float64 actions: with float32 ones NumPy 2 does part of Pendulum's and MountainCarContinuous'
    arithmetic in float32."""
    if env.action_kind == "discrete":
        return int(a)
    return np.asarray(a, np.float32 if dtype == F32 else np.float64).reshape(1)


def gym_step(env: gym.Env, action: int | np.ndarray) -> tuple:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return env.step(action)


def internal_state(env: gym.Env) -> np.ndarray:
    return np.asarray(env.unwrapped.state, dtype=np.float64)


def random_actions(env: TorchVecEnv, n: int, rng: np.random.Generator) -> np.ndarray:
    """Discrete: uniform over the actions. Box: uniform over 1.5x the bounds, so ~1/3 clip."""
    if env.action_kind == "discrete":
        return rng.integers(0, env.n_actions, n)
    high = float(env.action_high[0])
    return rng.uniform(-1.5 * high, 1.5 * high, (n, 1)).astype(np.float32).astype(np.float64)


def max_abs(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


# -- construction and interface --------------------------------------------------------------

def test_supported_ids_and_spaces_match_gymnasium():
    assert SUPPORTED == ("CartPole-v1", "Acrobot-v1", "MountainCar-v0",
                         "MountainCarContinuous-v0", "Pendulum-v1", "CartPoleNoVel-v1",
                         "PendulumNoVel-v1", "MaskedPick-v0")
    for env_id in SUPPORTED:
        env = make_torch_env(env_id, 3)
        ref = make_gym(env_id, wrapped=True)
        assert env.env_id == env_id and env.num_envs == 3
        assert env.obs_dim == ref.observation_space.shape[0]
        # MaskedPick-v0 has no time limit (its episodes end within `picks` steps)
        assert env.max_episode_steps == (gym.spec(NO_VEL.get(env_id, env_id)).max_episode_steps
                                         or 5)
        if isinstance(ref.action_space, gym.spaces.Discrete):
            assert env.action_kind == "discrete" and env.n_actions == ref.action_space.n
        else:
            assert env.action_kind == "box" and env.action_dim == ref.action_space.shape[0]
            assert env.action_low.tolist() == ref.action_space.low.tolist()
            assert env.action_high.tolist() == ref.action_space.high.tolist()
        obs = env.reset(seed=0)
        assert obs.shape == (3, env.obs_dim) and obs.dtype == F32
        assert env.get_state().shape == (3, env.state_dim)


def test_bad_arguments():
    with pytest.raises(ValueError, match="supported: CartPole-v1, Acrobot-v1"):
        make_torch_env("LunarLander-v3", 4)
    with pytest.raises(ValueError, match="dtype"):
        make_torch_env("CartPole-v1", 4, dtype=torch.float16)
    with pytest.raises(ValueError, match="num_envs"):
        make_torch_env("CartPole-v1", 0)
    env = make_torch_env("CartPole-v1", 4)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(torch.zeros(4, dtype=torch.int64))
    with pytest.raises(ValueError, match="shape"):
        env.set_state(torch.zeros(3, 4))


def test_action_shapes_and_box_clipping():
    env = make_torch_env("Pendulum-v1", 2, dtype=F64)
    state = torch.tensor([[0.3, -1.0], [2.0, 4.0]], dtype=F64)
    results = []
    for a in (torch.tensor([[2.0], [-2.0]]), torch.tensor([9.0, -9.0])):  # [N, 1] and [N]
        env.set_state(state)
        results.append(env.step(a))
    torch.testing.assert_close(results[0].final_obs, results[1].final_obs, rtol=0, atol=0)
    torch.testing.assert_close(results[0].reward, results[1].reward, rtol=0, atol=0)
    # MountainCarContinuous: the dynamics see the clipped action, the reward the raw one.
    env = make_torch_env("MountainCarContinuous-v0", 1, dtype=F64)
    out = []
    for a in (1.0, 3.0):
        env.set_state(torch.tensor([[-0.5, 0.0]]))
        out.append(env.step(torch.tensor([[a]])))
    assert torch.equal(out[0].final_obs, out[1].final_obs)
    assert out[0].reward.item() - out[1].reward.item() == pytest.approx(0.1 * (9 - 1))
    # Discrete actions: any integer dtype.
    env = make_torch_env("CartPole-v1", 2, seed=0)
    env.reset()
    assert env.step(torch.tensor([0, 1], dtype=torch.int32)).next_obs.shape == (2, 4)


# -- dynamics equivalence ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F64], ids=["float32", "float64"])
@pytest.mark.parametrize("env_id", GYMNASIUM_FIVE)
def test_step_matches_gymnasium(env_id: str, dtype: torch.dtype):
    """Random states and actions, one step each, torch (all at once) against Gymnasium."""
    rng = np.random.default_rng(1)
    n_random = 1500
    lo, hi = np.array(STATE_RANGES[env_id]).T
    states = np.concatenate([rng.uniform(lo, hi, (n_random, len(lo))), EDGE_STATES[env_id]])
    if dtype == F32 or env_id == "MountainCarContinuous-v0":
        states = states.astype(np.float32).astype(np.float64)  # the same start in both
    n = len(states)
    env = make_torch_env(env_id, n, dtype=dtype, seed=0)
    actions = random_actions(env, n, rng)
    env.set_state(torch.tensor(states))
    out = env.step(torch.tensor(actions))
    after = env.get_state().double().numpy()

    ref = make_gym(env_id)
    ref_obs, ref_rew, ref_term, ref_state = [], [], [], []
    for i in range(n):
        set_gym_state(ref, env_id, states[i])
        obs, rew, term, trunc, _ = gym_step(ref, gym_action(env, actions[i], dtype))
        assert not trunc
        ref_obs.append(obs)
        ref_rew.append(rew)
        ref_term.append(term)
        ref_state.append(internal_state(ref))
    ref_obs, ref_rew = np.array(ref_obs), np.array(ref_rew)
    ref_term, ref_state = np.array(ref_term), np.array(ref_state)

    final_obs = out.final_obs.numpy()
    np.testing.assert_array_equal(out.terminated.numpy(), ref_term)
    assert not out.truncated.any()
    tol = TOL[dtype]
    np.testing.assert_allclose(out.reward.numpy(), ref_rew, rtol=0, atol=tol)
    if dtype == F32:
        np.testing.assert_allclose(final_obs, ref_obs, rtol=0, atol=tol)
    else:
        np.testing.assert_array_equal(final_obs.astype(np.float32), ref_obs)
        np.testing.assert_allclose(final_obs, gym_obs(env_id, ref_state), rtol=0, atol=tol)
        live = ~ref_term  # terminated rows were reset; their last state is checked via final_obs
        np.testing.assert_allclose(after[live], ref_state[live], rtol=0, atol=tol)
    if env_id.startswith("MountainCar"):  # the left-wall branch was exercised
        assert np.any((np.abs(final_obs[:, 0] + 1.2) < 1e-6) & (final_obs[:, 1] == 0))
    ref64 = gym_obs(env_id, ref_state) if dtype == F64 else ref_obs  # float64 against float64
    print(f"\n{env_id} {dtype}: max |obs diff| {max_abs(final_obs, ref64):.3g}, "
          f"|reward diff| {max_abs(out.reward.numpy(), ref_rew):.3g}"
          + (f", |state diff| {max_abs(after[live], ref_state[live]):.3g}" if dtype == F64 else ""))


def test_acrobot_wrap_is_gymnasiums_repeated_subtraction():
    """Bit for bit, including angles several turns out (one RK4 step near the velocity bounds
    can turn an angle by more than four turns)."""
    from gymnasium.envs.classic_control.acrobot import wrap

    x = np.concatenate([np.random.default_rng(5).uniform(-40, 40, 4000), [PI, -PI, 3 * PI]])
    got = make_torch_env("Acrobot-v1", 1).dyn.wrap(torch.tensor(x)).numpy()  # type: ignore
    np.testing.assert_array_equal(got, [wrap(v, -PI, PI) for v in x])


def episode_policy(env_id: str, kind: str) -> Callable[[np.ndarray], int | np.ndarray]:
    """'random' actions, or a simple controller of Gymnasium's observation that reaches the
    other way of ending (CartPole balances to the time limit; Acrobot and the mountain cars
    pump energy and terminate; Pendulum damps)."""
    rng = np.random.default_rng(2)
    if kind == "random":
        if env_id == "CartPole-v1":
            return lambda o: int(rng.integers(0, 2))
        if env_id in ("Acrobot-v1", "MountainCar-v0"):
            return lambda o: int(rng.integers(0, 3))
        high = 1.0 if env_id == "MountainCarContinuous-v0" else 2.0
        return lambda o: rng.uniform(-1.5 * high, 1.5 * high, 1)
    return {
        "CartPole-v1": lambda o: int(o[2] + 0.5 * o[3] + 0.01 * o[0] + 0.1 * o[1] > 0),
        "Acrobot-v1": lambda o: 2 if o[5] > 0 else 0,
        "MountainCar-v0": lambda o: 2 if o[1] > 0 else 0,
        "MountainCarContinuous-v0": lambda o: np.array([1.3 if o[1] >= 0 else -1.3]),
        "Pendulum-v1": lambda o: np.array([-2.5 * o[2]]),
    }[env_id]


@pytest.mark.parametrize("dtype", [F32, F64], ids=["float32", "float64"])
@pytest.mark.parametrize("kind", ["random", "policy"])
@pytest.mark.parametrize("env_id", GYMNASIUM_FIVE)
def test_episode_matches_gymnasium(env_id: str, kind: str, dtype: torch.dtype):
    """A whole episode of gym.make's env (with its TimeLimit) against the torch env (N = 1),
    same start state and actions, every step compared, until termination or truncation.

    Float64 runs free, from Gymnasium's start state. Float32 is re-synced to Gymnasium's state
    before each step (with the elapsed count): a free float32 trajectory drifts from the float64
    one (CartPole and Pendulum amplify rounding), which says nothing about the dynamics.
    """
    ref = make_gym(env_id, wrapped=True)
    ref.reset(seed=3)
    start = internal_state(ref).astype(np.float32).astype(np.float64)
    set_gym_state(ref, env_id, start)
    obs = gym_obs(env_id, start[None])[0].astype(np.float32)
    env = make_torch_env(env_id, 1, dtype=dtype, seed=0)
    env.set_state(torch.tensor(start[None]))
    policy = episode_policy(env_id, kind)
    tol, step = TOL[dtype], 0
    while True:
        if dtype == F32:
            env.set_state(torch.tensor(internal_state(ref)[None]), torch.tensor([step]))
        a = policy(obs)
        obs, rew, term, trunc, _ = gym_step(ref, gym_action(env, np.asarray(a), dtype))
        out = env.step(torch.tensor(np.asarray(a)).reshape(1, -1) if env.action_kind == "box"
                       else torch.tensor([a]))
        step += 1
        assert (bool(out.terminated[0]), bool(out.truncated[0])) == (term, trunc), step
        assert out.reward[0].item() == pytest.approx(rew, rel=0, abs=tol), step
        final = out.final_obs[0].numpy()
        if dtype == F32:
            np.testing.assert_allclose(final, obs, rtol=0, atol=tol, err_msg=f"step {step}")
        else:
            np.testing.assert_array_equal(final.astype(np.float32), obs, err_msg=f"step {step}")
            state = internal_state(ref)
            np.testing.assert_allclose(final, gym_obs(env_id, state[None])[0], rtol=0, atol=tol)
            if not (term or trunc):
                np.testing.assert_allclose(env.get_state()[0].numpy(), state, rtol=0, atol=tol)
        if term or trunc:
            break
    if trunc:
        assert step == env.max_episode_steps
    assert env.elapsed.item() == 0  # autoreset


# -- resets, autoreset, seeding ---------------------------------------------------------------

@pytest.mark.parametrize("env_id", GYMNASIUM_FIVE)
def test_reset_distribution(env_id: str):
    """reset() and autoreset draw from Gymnasium's reset distribution: inside its bounds,
    covering them, uniform (mean and std), and the bounds agree with Gymnasium's own resets."""
    n = 20_000
    env = make_torch_env(env_id, n, dtype=F64, seed=0)
    ref = make_gym(env_id)
    ref_states = []
    for seed in range(200):
        ref.reset(seed=seed)
        ref_states.append(internal_state(ref))
    ref_states = np.array(ref_states)

    env.reset()
    from_reset = env.get_state().numpy()
    env.set_state(torch.tensor(from_reset), torch.full((n,), env.max_episode_steps - 1))
    env.step(torch.tensor(random_actions(env, n, np.random.default_rng(0))))
    from_autoreset = env.get_state().numpy()  # every env was truncated, so all are fresh
    assert not np.array_equal(from_reset, from_autoreset)
    for states in (from_reset, from_autoreset):
        for j, bounds in enumerate(RESET_RANGES[env_id]):
            x = states[:, j]
            if bounds is None:
                assert np.all(x == 0) and np.all(ref_states[:, j] == 0)
                continue
            lo, hi = bounds
            width = hi - lo
            assert lo <= x.min() and x.max() <= hi
            assert lo <= ref_states[:, j].min() and ref_states[:, j].max() <= hi
            assert x.min() < lo + 0.001 * width and x.max() > hi - 0.001 * width
            assert abs(x.mean() - (lo + hi) / 2) < 4 * width / math.sqrt(12 * n)
            assert x.std() == pytest.approx(width / math.sqrt(12), rel=0.02)
        if env_id == "Acrobot-v1":  # Gymnasium draws the state in float32
            assert np.array_equal(states.astype(np.float32).astype(np.float64), states)


def test_autoreset_terminated_truncated_and_final_obs():
    env = make_torch_env("CartPole-v1", 4, dtype=F64, seed=0)
    states = torch.tensor([[2.39, 1.0, 0.0, 0.0],   # terminates (x > 2.4)
                           [0.0, 0.0, 0.0, 0.0],    # truncated: 500th step
                           [2.39, 1.0, 0.0, 0.0],   # both
                           [0.0, 0.0, 0.0, 0.0]],   # neither
                          dtype=F64)
    env.set_state(states, torch.tensor([0, 499, 499, 10]))
    out = env.step(torch.ones(4, dtype=torch.int64))
    assert out.terminated.tolist() == [True, False, True, False]
    assert out.truncated.tolist() == [False, True, True, False]
    assert out.reward.tolist() == [1.0] * 4
    ref = make_gym("CartPole-v1")
    for i in range(4):
        set_gym_state(ref, "CartPole-v1", states[i].numpy())
        gym_step(ref, 1)
        torch.testing.assert_close(out.final_obs[i], torch.tensor(internal_state(ref)))
    done = out.terminated | out.truncated
    assert torch.all(out.next_obs[done].abs() <= 0.05)  # fresh episodes
    assert not torch.equal(out.next_obs[done], out.final_obs[done])
    assert torch.equal(out.next_obs[~done], out.final_obs[~done])
    assert torch.equal(env.get_state(), out.next_obs)
    assert env.elapsed.tolist() == [0, 0, 0, 11]


def test_truncation_exactly_at_the_time_limit():
    env = make_torch_env("Pendulum-v1", 8, seed=0)
    env.reset()
    zero = torch.zeros(8, 1)
    for t in range(1, 200):
        out = env.step(zero)
        assert not out.truncated.any() and not out.terminated.any(), t
    assert env.elapsed.tolist() == [199] * 8
    out = env.step(zero)
    assert out.truncated.all() and not out.terminated.any()
    assert torch.all(out.next_obs[:, 2].abs() <= 1.0)  # reset thetadot
    assert not torch.equal(out.next_obs, out.final_obs)
    assert env.elapsed.tolist() == [0] * 8


def rollout(env: TorchVecEnv, steps: int, seed: int | None) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(123)  # the same actions for every env
    outs = [env.reset(seed=seed)]
    for _ in range(steps):
        if env.action_kind == "discrete":
            a = torch.randint(0, env.n_actions, (env.num_envs,), generator=gen)
        else:
            a = (torch.rand(env.num_envs, 1, generator=gen) * 2 - 1) * 2 * env.action_high
        outs.extend(env.step(a))
    return outs


@pytest.mark.parametrize("env_id", GYMNASIUM_FIVE)
def test_seeding(env_id: str):
    """Same seed, same trajectories (resets included); another seed, other ones."""
    steps = 120
    env = make_torch_env(env_id, 16)
    a = rollout(env, steps, seed=7)
    b = rollout(make_torch_env(env_id, 16), steps, seed=7)
    c = rollout(make_torch_env(env_id, 16, seed=7), steps, seed=None)  # constructor seed
    d = rollout(env, steps, seed=8)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert all(torch.equal(x, y) for x, y in zip(a, c, strict=True))
    assert not torch.equal(a[0], d[0])
    assert not all(torch.equal(x, y) for x, y in zip(a, d, strict=True))
    if env_id == "CartPole-v1":  # episodes ended and restarted within the rollout
        assert any(x.dtype == torch.bool and x.any() for x in a[1:])


# -- other devices ----------------------------------------------------------------------------

@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("env_id", GYMNASIUM_FIVE)
def test_cuda_matches_cpu(env_id: str):
    """The same states and actions on CUDA and on CPU, in float64, to 1e-12 relative (CUDA's
    sin and cos may differ from the CPU's in the last bits: Acrobot's four RK4 stages gave
    8.5e-14 relative, 1.04e-12 absolute, on an H200)."""
    rng = np.random.default_rng(4)
    lo, hi = np.array(STATE_RANGES[env_id]).T
    states = torch.tensor(rng.uniform(lo, hi, (512, len(lo))))
    cpu = make_torch_env(env_id, 512, dtype=F64)
    actions = torch.tensor(random_actions(cpu, 512, rng))
    gpu = make_torch_env(env_id, 512, device="cuda", dtype=F64, seed=0)
    assert gpu.reset().device.type == "cuda"
    outs = []
    for env in (cpu, gpu):
        env.set_state(states)
        outs.append(env.step(actions.to(env.device)))
    (c, g) = outs
    assert all(y.device.type == "cuda" for y in g)
    for name in ("final_obs", "reward", "terminated", "truncated"):
        torch.testing.assert_close(getattr(c, name), getattr(g, name).cpu(), rtol=1e-12,
                                   atol=1e-12)
    live = ~(c.terminated | c.truncated)  # ended rows were reset from different generators
    torch.testing.assert_close(c.next_obs[live], g.next_obs.cpu()[live], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("env_id", sorted(NO_VEL))
def test_no_vel_envs_are_their_base_env_without_velocities(env_id):
    """CartPoleNoVel-v1 and PendulumNoVel-v1 on torch (float32, float64) and NumPy: the base
    env's states, rewards and episode ends to the bit, with the same actions and resets
    (episodes end inside the 300 steps), and its observation's position columns; the first
    observation equals Gymnasium's NoVel env's from the same state."""
    base, keep = NO_VEL[env_id], list(KEEP[NO_VEL[env_id]])
    n, g = 8, np.random.default_rng(0)
    for dtype in (F32, F64):
        env, ref = make_torch_env(env_id, n, dtype=dtype, seed=3), make_torch_env(
            base, n, dtype=dtype, seed=3)
        dyn = make_numpy_dynamics(env_id, np.float32 if dtype == F32 else np.float64)
        state = env.sample_states()
        assert torch.equal(state, ref.sample_states())
        s_ref, s_np = state.clone(), state.numpy().copy()
        el = el_ref = torch.zeros(n, dtype=torch.int64)
        el_np = el.numpy().copy()
        ended = 0
        for _ in range(300):
            if env.action_kind == "discrete":
                a = torch.as_tensor(g.integers(0, 2, n))
            else:
                a = torch.as_tensor(g.uniform(-2, 2, (n, 1)), dtype=dtype)
            reset = env.sample_states()
            state, el, st = env.transition(state, el, a, reset)
            s_ref, el_ref, st_ref = ref.transition(s_ref, el_ref, a, reset)
            s_np, el_np, obs_np, r_np, term_np, trunc_np, fin_np = dyn.transition(
                s_np, el_np, a.numpy(), reset.numpy())
            assert torch.equal(state, s_ref) and torch.equal(el, el_ref)
            assert torch.equal(st.next_obs, st_ref.next_obs[:, keep])
            assert torch.equal(st.final_obs, st_ref.final_obs[:, keep])
            for x, y in ((st.reward, st_ref.reward), (st.terminated, st_ref.terminated),
                         (st.truncated, st_ref.truncated)):
                assert torch.equal(x, y)
            np.testing.assert_allclose(obs_np, st.next_obs.numpy(), rtol=0, atol=TOL[dtype])
            np.testing.assert_array_equal(term_np | trunc_np,
                                          (st.terminated | st.truncated).numpy())
            s_np = state.numpy().copy()  # re-synced: only the observation is under test
            el_np = el.numpy().copy()
            ended += int((st.terminated | st.truncated).sum())
        assert ended > 0
    gym_env = make_gym(env_id, wrapped=True)
    obs0, _ = gym_env.reset(seed=1)
    start = np.asarray(gym_env.unwrapped.state, np.float64)[None]
    np.testing.assert_allclose(obs0, make_torch_env(env_id, 1, dtype=F64)._observe(
        torch.as_tensor(start))[0].numpy(), rtol=0, atol=1e-6)
