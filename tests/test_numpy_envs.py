"""trustrl.envs.numpy_classic against the batched torch envs (trustrl.envs.torch_classic).

The NumPy dynamics do the torch env's float operations in the same order and dtype, so the two
differ only where torch's sin/cos and NumPy's (glibc's) round differently (in float64 about 0.15%
of the calls, by one ulp) and in what the following arithmetic makes of that. Float64 is held to
1e-12 absolute, float32 to 1e-5 relative (rtol 1e-5, atol 1e-6); booleans and counters exactly.
Run with -s to see the observed differences.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

from trustrl.envs.no_vel import IDS as NO_VEL
from trustrl.envs.numpy_classic import (
    NUMPY_SUPPORTED,
    NumpyDynamics,
    make_numpy_dynamics,
)
from trustrl.envs.torch_classic import SUPPORTED, TorchVecEnv, make_torch_env

GYMNASIUM_FIVE = tuple(e for e in SUPPORTED if e not in NO_VEL and e != "MaskedPick-v0")
"""Gymnasium's own five (CartPoleNoVel-v1 and PendulumNoVel-v1: tests/test_torch_envs.py)."""

PI = math.pi
DTYPES = {"float64": (np.float64, torch.float64), "float32": (np.float32, torch.float32)}
NAMES = ("next_state", "elapsed", "next_obs", "reward", "terminated", "truncated", "final_obs")

# Half-widths (or [low, high] offsets) of the random perturbations added to the torch env's
# start states: wide enough that terminations, clips, walls and angle wraps all happen.
PERTURB = {
    "CartPole-v1": ([-2.6, -4.0, -0.25, -4.0], [2.6, 4.0, 0.25, 4.0]),
    "Acrobot-v1": ([-1.1 * PI, -1.1 * PI, -4.3 * PI, -9.5 * PI], [1.1 * PI, 1.1 * PI, 4.3 * PI,
                                                                   9.5 * PI]),
    "MountainCar-v0": ([-0.75, -0.08], [1.15, 0.08]),
    "MountainCarContinuous-v0": ([-0.75, -0.08], [1.15, 0.08]),
    "Pendulum-v1": ([-6 * PI, -9.0], [6 * PI, 9.0]),
}
# Hand-picked states for branches random ones hit rarely: thresholds, walls, bounds, turns.
EDGE_STATES = {
    "CartPole-v1": [[2.39, 1.0, 0.0, 0.0], [0.0, 0.0, 0.2, 2.0], [-2.39, -1.0, -0.2, -2.0]],
    "Acrobot-v1": [[PI, -PI, 4 * PI, -9 * PI], [-3.1, 3.1, -4 * PI, 9 * PI], [5 * PI, -7 * PI, 0,
                                                                            0]],
    "MountainCar-v0": [[-1.2, -0.07], [-1.19, -0.07], [0.49, 0.07], [0.6, 0.07], [0.0, 0.07]],
    "MountainCarContinuous-v0": [[-1.2, -0.07], [-1.19, -0.07], [0.44, 0.07], [0.0, -0.07]],
    "Pendulum-v1": [[PI, 8.0], [-PI, -8.0], [100.0, 0.0], [0.0, 7.99]],
}


def check_close(got: np.ndarray, want: np.ndarray, dtype: type, what: str) -> tuple[float, float]:
    """Assert the tolerance of the module docstring; returns the max abs diff and the max of
    |diff| / max(|want|, 1)."""
    assert got.dtype == want.dtype and got.shape == want.shape, what
    if got.dtype in (np.bool_, np.int64):
        np.testing.assert_array_equal(got, want, err_msg=what)
        return 0.0, 0.0
    if dtype == np.float64:
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12, err_msg=what)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=what)
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    rel = diff / np.maximum(np.abs(want.astype(np.float64)), 1.0)
    return float(diff.max(initial=0.0)), float(rel.max(initial=0.0))


def torch_outputs(env: TorchVecEnv, state: np.ndarray, elapsed: np.ndarray, actions: np.ndarray,
                  reset_state: np.ndarray) -> list[np.ndarray]:
    """TorchVecEnv.transition on the same inputs, as the NumPy 7-tuple."""
    next_state, el, out = env.transition(torch.from_numpy(state), torch.from_numpy(elapsed),
                                         torch.from_numpy(actions), torch.from_numpy(reset_state))
    return [t.numpy() for t in (next_state, el, out.next_obs, out.reward, out.terminated,
                                out.truncated, out.final_obs)]


def random_actions(dyn: NumpyDynamics, n: int, rng: np.random.Generator) -> np.ndarray:
    """Discrete: uniform. Box: uniform over 1.5x the bounds (a third are clipped), [n, 1]."""
    if dyn.action_kind == "discrete":
        assert dyn.n_actions is not None
        return rng.integers(0, dyn.n_actions, n)
    assert dyn.action_high is not None
    return rng.uniform(-1.5, 1.5, (n, 1)).astype(dyn.dtype) * dyn.dtype.type(dyn.action_high)


def random_inputs(env_id: str, dyn: NumpyDynamics, env: TorchVecEnv, rng: np.random.Generator
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(state, elapsed, actions, reset_state) for env.num_envs rows, edge states included."""
    n = env.num_envs
    lo, hi = (np.array(b) for b in PERTURB[env_id])
    edges = np.array(EDGE_STATES[env_id], dtype=np.float64)
    state = env.sample_states().double().numpy() + rng.uniform(lo, hi, (n, len(lo)))
    state[: len(edges)] = edges
    if env_id == "MountainCarContinuous-v0":  # its state is float32 in Gymnasium
        state = state.astype(np.float32)
    state = state.astype(dyn.state_dtype)
    elapsed = rng.integers(0, dyn.max_episode_steps, n)
    elapsed[-n // 20:] = dyn.max_episode_steps - 1  # 5% reach the time limit at this step
    return state, elapsed, random_actions(dyn, n, rng), env.sample_states().numpy()


# -- interface -----------------------------------------------------------------------------

def test_ids_and_attributes_match_the_torch_envs():
    assert NUMPY_SUPPORTED == frozenset(SUPPORTED)
    for env_id in SUPPORTED:
        for np_dtype, torch_dtype in DTYPES.values():
            dyn, env = make_numpy_dynamics(env_id, np_dtype), make_torch_env(env_id, 3,
                                                                             dtype=torch_dtype)
            assert dyn.env_id == env_id and dyn.dtype == np.dtype(np_dtype)
            for name in ("obs_dim", "state_dim", "action_kind", "n_actions", "action_dim",
                         "max_episode_steps"):
                assert getattr(dyn, name) == getattr(env, name), (env_id, name)
            assert str(dyn.state_dtype) == str(env.state_dtype).removeprefix("torch.")
            if env.action_kind == "box":
                assert [dyn.action_low] == env.action_low.tolist()
                assert [dyn.action_high] == env.action_high.tolist()
            obs = dyn.observe(env.sample_states().numpy())
            assert obs.shape == (3, env.obs_dim) and obs.dtype == np_dtype


def test_bad_arguments():
    with pytest.raises(ValueError, match="no NumPy version of 'LunarLander-v3'; supported: "):
        make_numpy_dynamics("LunarLander-v3")
    with pytest.raises(ValueError, match="dtype"):
        make_numpy_dynamics("CartPole-v1", np.float16)


# -- one step from random states -----------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("env_id", GYMNASIUM_FIVE)
def test_transition_matches_torch(env_id: str, dtype: str):
    """2,000 random states and actions, one call each: every output equal within tolerance,
    inputs untouched, no output sharing memory with an input or another output."""
    np_dtype, torch_dtype = DTYPES[dtype]
    rng = np.random.default_rng(11)
    n = 2000
    env = make_torch_env(env_id, n, dtype=torch_dtype, seed=5)
    dyn = make_numpy_dynamics(env_id, np_dtype)
    inputs = random_inputs(env_id, dyn, env, rng)
    kept = [x.copy() for x in inputs]
    wraps: list[int] = []
    if env_id == "Acrobot-v1":  # count the angles that needed wrapping after the RK4 step
        ns = dyn.functions  # the step's namespace: acrobot_wrap is looked up there per call
        wrap = ns["acrobot_wrap"]
        ns["acrobot_wrap"] = lambda k, x: (wraps.append(int(np.sum(np.abs(x) > PI))),
                                           wrap(k, x))[1]
    try:
        got = dyn.transition(*inputs)
    finally:
        if env_id == "Acrobot-v1":
            ns["acrobot_wrap"] = wrap
    want = torch_outputs(env, *inputs)
    for x, k in zip(inputs, kept, strict=True):
        np.testing.assert_array_equal(x, k)
    arrays = list(got) + list(inputs)
    for i, a in enumerate(got):
        assert not any(np.shares_memory(a, b) for b in arrays[i + 1:]), NAMES[i]
    figures = {name: check_close(g, w, np_dtype, name)
               for name, g, w in zip(NAMES, got, want, strict=True)}
    print(f"\n{env_id} {dtype}: " + ", ".join(f"{k} {a:.2g} (rel {r:.2g})"
                                            for k, (a, r) in figures.items() if a or r))

    # The branches were exercised.
    state, elapsed, actions, _ = inputs
    terminated, truncated, final_obs = got[4], got[5], got[6]
    assert truncated.sum() >= n // 20 and not truncated.all()
    if env_id != "Pendulum-v1":
        assert 0 < terminated.sum() < n
        assert (terminated & truncated).any()
    if dyn.action_kind == "box":
        assert (np.abs(actions) > dyn.action_high).mean() > 0.2
    if env_id.startswith("MountainCar"):
        pos, vel = final_obs[:, 0], final_obs[:, 1]
        near = lambda x, c: np.abs(x - c) < 1e-6  # noqa: E731 (MountainCarContinuous: float32)
        assert np.any(near(pos, -1.2) & (vel == 0))  # the left wall
        assert np.any(near(pos, 0.6)) and np.any(near(np.abs(vel), 0.07))  # the clips
    if env_id == "Acrobot-v1":
        assert wraps[0] > n // 10
        assert np.any(np.abs(final_obs[:, 4]) == np.float32(4 * PI) if dtype == "float32"
                      else np.abs(final_obs[:, 4]) == 4 * PI)
    if env_id == "Pendulum-v1":
        assert np.any(np.abs(final_obs[:, 2]) == 8.0)


def test_acrobot_wrap_is_the_torch_envs():
    """Angles up to six turns out, bit for bit with the torch env's wrap (which falls back to a
    modulo after 8 turns each way). The NumPy wrap stops each loop as soon as nothing is left to
    wrap, so it is also compared on inputs that leave the loops at other rounds: angles only
    below -pi, only above pi, none outside, and some beyond 8 turns."""
    x = np.random.default_rng(5).uniform(-40, 40, 4000)
    cases = [x, x[x < -PI], x[x > PI], x[np.abs(x) <= PI], np.array([PI, -PI, 3 * PI, -3 * PI]),
             np.concatenate([x, [60.0, -60.0]])]
    torch_env, dyn = make_torch_env("Acrobot-v1", 1), make_numpy_dynamics("Acrobot-v1")
    for i, case in enumerate(cases):
        want = torch_env.dyn.wrap(torch.tensor(case)).numpy()  # type: ignore[attr-defined]
        got = dyn.wrap(case.copy())  # type: ignore[attr-defined]
        np.testing.assert_array_equal(got, want, err_msg=f"case {i}")
        assert np.all(np.abs(got) <= PI)


# -- whole episodes ------------------------------------------------------------------------

def policy_actions(env_id: str, dyn: NumpyDynamics, obs: np.ndarray, rng: np.random.Generator
                   ) -> np.ndarray:
    """Even rows: a simple controller that reaches the env's own ending (CartPole balances to
    the time limit; Acrobot and the mountain cars pump energy and reach the goal; Pendulum
    damps). Odd rows: random actions."""
    a = random_actions(dyn, obs.shape[0], rng)
    o = obs[::2].astype(np.float64)
    if env_id == "CartPole-v1":
        a[::2] = o[:, 2] + 0.5 * o[:, 3] + 0.01 * o[:, 0] + 0.1 * o[:, 1] > 0
    elif env_id == "Acrobot-v1":
        a[::2] = np.where(o[:, 5] > 0, 2, 0)
    elif env_id == "MountainCar-v0":
        a[::2] = np.where(o[:, 1] > 0, 2, 0)
    elif env_id == "MountainCarContinuous-v0":
        a[::2, 0] = np.where(o[:, 1] >= 0, 1.3, -1.3)
    else:
        a[::2, 0] = -2.5 * o[:, 2]
    return a


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("env_id", GYMNASIUM_FIVE)
def test_episodes_match_torch(env_id: str, dtype: str):
    """16 envs, 300 steps with autoreset: both sides get the same actions and the same reset
    states. Float64 runs free (each side carries its own state), except Acrobot. Float32, and
    float64 Acrobot, are re-synced to the torch state before each step: a free trajectory of
    a chaotic env drifts from the other by amplified last-bit differences (float64 Acrobot
    running free passed 1e-12 at step 233 here, from one-ulp differences of torch's cos),
    which says nothing about the dynamics. The counters start spread over [0, limit), so
    rows meet the time limit at the step where they must (counted independently here)."""
    np_dtype, torch_dtype = DTYPES[dtype]
    n, steps = 16, 300
    rng = np.random.default_rng(3)
    env = make_torch_env(env_id, n, dtype=torch_dtype, seed=9)
    dyn = make_numpy_dynamics(env_id, np_dtype)
    limit = dyn.max_episode_steps
    t_state = np_state = env.sample_states().numpy()
    t_el = np_el = np.linspace(0, limit - 1, n).astype(np.int64)
    obs = dyn.observe(np_state)
    expected_el = np_el.copy()
    ends = {"terminated": 0, "truncated": 0}
    worst = 0.0
    for step in range(steps):
        actions = policy_actions(env_id, dyn, obs, rng)
        reset_state = env.sample_states().numpy()
        if dtype == "float32" or env_id == "Acrobot-v1":
            np_state = t_state
        got = dyn.transition(np_state, np_el, actions, reset_state)
        want = torch_outputs(env, t_state, t_el, actions, reset_state)
        for name, g, w in zip(NAMES, got, want, strict=True):
            worst = max(worst, check_close(g, w, np_dtype, f"{name} at step {step}")[0])
        np_state, np_el, obs = got[0], got[1], got[2]
        t_state, t_el = want[0], want[1]
        # the time limit, counted independently
        expected_el += 1
        assert np.array_equal(got[5], expected_el == limit), step
        done = got[4] | got[5]
        expected_el[done] = 0
        assert np.array_equal(np_el, expected_el), step
        assert np.array_equal(obs[done], dyn.observe(reset_state)[done])
        ends["terminated"] += int(got[4].sum())
        ends["truncated"] += int(got[5].sum())
    print(f"\n{env_id} {dtype}: {ends}, max |diff| over {steps} steps {worst:.2g}")
    assert ends["truncated"] >= 3
    if env_id != "Pendulum-v1":
        assert ends["terminated"] > 0


# -- the time limit and the autoreset, by hand ------------------------------------------------

@pytest.mark.parametrize("env_id", GYMNASIUM_FIVE)
def test_time_limit_and_autoreset_by_hand(env_id: str):
    """Counters one below and at the limit, with reset states far from the step's result:
    truncated exactly when the counter reaches the limit, the counter back to 0, next_obs and
    next_state from the reset state, final_obs from the step (equal to a step of the same
    state with no ending)."""
    dyn = make_numpy_dynamics(env_id, np.float64)
    env = make_torch_env(env_id, 4, dtype=torch.float64, seed=0)
    start = np.repeat(env.sample_states().numpy()[:1], 4, axis=0)
    reset_state = env.sample_states().numpy()
    limit = dyn.max_episode_steps
    elapsed = np.array([limit - 3, limit - 2, limit - 1, limit - 1])
    actions = np.zeros((4, 1)) if dyn.action_kind == "box" else np.zeros(4, np.int64)
    next_state, el, next_obs, reward, terminated, truncated, final_obs = dyn.transition(
        start, elapsed, actions, reset_state)
    assert not terminated.any()  # one step from a start state ends nothing
    assert truncated.tolist() == [False, False, True, True]
    assert el.tolist() == [limit - 2, limit - 1, 0, 0]
    np.testing.assert_array_equal(final_obs, np.repeat(final_obs[:1], 4, axis=0))
    np.testing.assert_array_equal(next_obs[:2], final_obs[:2])
    np.testing.assert_array_equal(next_obs[2:], dyn.observe(reset_state[2:]))
    np.testing.assert_array_equal(next_state[2:], reset_state[2:])
    assert not np.array_equal(next_obs[2:], final_obs[2:])
    np.testing.assert_array_equal(reward, np.repeat(reward[:1], 4))


# -- against Gymnasium itself ----------------------------------------------------------------

GYM_RANGES = {  # what an episode can reach (Pendulum's theta is unbounded)
    "CartPole-v1": [(-2.4, 2.4), (-3.0, 3.0), (-0.21, 0.21), (-3.5, 3.5)],
    "Acrobot-v1": [(-PI, PI), (-PI, PI), (-4 * PI, 4 * PI), (-9 * PI, 9 * PI)],
    "MountainCar-v0": [(-1.2, 0.6), (-0.07, 0.07)],
    "MountainCarContinuous-v0": [(-1.2, 0.6), (-0.07, 0.07)],
    "Pendulum-v1": [(-4 * PI, 4 * PI), (-8.0, 8.0)],
}


@pytest.mark.parametrize("env_id", GYMNASIUM_FIVE)
def test_float64_step_matches_gymnasium(env_id: str):
    """500 random states and actions (Box: float64, a third clipped) through Gymnasium's own
    env, one at a time: NumPy's float64 sin/cos are glibc's, as Gymnasium's, so the result is
    Gymnasium's to the last bit in most rows (the observations compared in float64, from
    Gymnasium's internal state); held to 1e-14."""
    import warnings

    import gymnasium as gym

    rng = np.random.default_rng(21)
    n = 500
    lo, hi = np.array(GYM_RANGES[env_id]).T
    states = rng.uniform(lo, hi, (n, len(lo)))
    mcc = env_id == "MountainCarContinuous-v0"
    if mcc:  # Gymnasium keeps this env's state in float32
        states = states.astype(np.float32).astype(np.float64)
    dyn = make_numpy_dynamics(env_id, np.float64)
    actions = random_actions(dyn, n, rng)
    got = dyn.transition(states, np.zeros(n, np.int64), actions, states.copy())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref: Any = gym.make(env_id).unwrapped
        ref.reset(seed=0)
        ref_state, ref_reward, ref_term = [], [], []
        for s, a in zip(states, actions, strict=True):
            ref.state = s.astype(np.float32) if mcc else s.copy()
            if env_id == "CartPole-v1":
                ref.steps_beyond_terminated = None  # else a step after a terminal state pays 0
            _, r, term, _, _ = ref.step(int(a) if dyn.action_kind == "discrete" else a.copy())
            ref_state.append(np.asarray(ref.state, np.float64))
            ref_reward.append(float(r))
            ref_term.append(term)
    want_obs = dyn.observe(np.array(ref_state))
    np.testing.assert_array_equal(got[4], ref_term)
    np.testing.assert_allclose(got[3], ref_reward, rtol=0, atol=1e-14)
    np.testing.assert_allclose(got[6], want_obs, rtol=0, atol=1e-14)
    print(f"\n{env_id} vs Gymnasium: rows not bit-equal: obs "
          f"{int(np.sum(np.any(got[6] != want_obs, 1)))}/{n}, reward "
          f"{int(np.sum(got[3] != ref_reward))}/{n}; max |diff| obs "
          f"{np.abs(got[6] - want_obs).max():.2g}, reward {np.abs(got[3] - ref_reward).max():.2g}")
