"""Where the Gymnasium collector and the batched collector must agree, fed the same stream.

The batched engine samples its own actions and start states (counter-based RNG); here the
Gymnasium side is made to replay them: its sub-envs start from the engine's start states and
reset to the engine's reset states, and its policy returns the engine's actions. Everything the
algorithm sees must then be equal to float rounding: network inputs (normalised observations),
rewards (scaled), terminated / truncated, final observations and the bootstrap values.

The engine steps in float32, Gymnasium in float64, so over an episode the two trajectories drift
apart by the accumulated rounding, and how far depends on the machine's float kernels (NumPy's
float32 cos has SIMD variants that differ in the last bit) and on the trajectory: comparing whole
trajectories, MountainCarContinuous's 999-step episodes drifted by up to 2.7e-5 on one machine
where they had stayed under 1e-5 on another, and Pendulum's upright amplified it to 7e-2 within
256 steps for one seed of 12. So each Gymnasium step starts from the engine's own state before
that step, and that state must be where the Gymnasium env's own last step (or reset) left it:
what is compared is one step of each, and the tolerances hold whatever the machine and seed
(every check passes for seeds 1 to 20, both collectors, the four envs; the observations' largest
error is 0.28 of their tolerance).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from batched_shim import Pop

from trustrl.algos import make_algorithm
from trustrl.collect.rollout import Collector
from trustrl.compute.backends import pick
from trustrl.maths import rng
from trustrl.maths.normalize import ObsNormalizer, RewardScaler
from trustrl.nets.policies import ActorCritic
from trustrl.nets.popnet import PopActorCritic
from trustrl.records.agent import Agent
from trustrl.settings.config import make_config


def _cfg(env_id: str, **sets: object):
    base = {"num_envs": 2, "num_steps": 128, "update_epochs": 2, "minibatch_size": 64,
            "total_steps": 4096, "eval_every": 0, "eval_episodes": 2, "vector": "torch",
            "preset": "chapter" if env_id in ("CartPole-v1", "Pendulum-v1") else "none"}
    base.update(sets)
    return make_config("ppo", env_id, None, {k: str(v) for k, v in base.items()}, {})


class _Replay(gym.Wrapper):
    """A sub-env that starts from given states, resets to given states and takes each step from
    a given state: `states(k, n)` is the state to take at a reset after k steps of env n (k = 0:
    the first reset), `pre(k, n)` the state that step k of env n starts from. `gaps` collects the
    steps whose given state is not where the env's own last step or reset left it (float64)."""

    def __init__(self, env: gym.Env, n: int, states, pre):
        super().__init__(env)
        self.n, self.states, self.pre, self.k = n, states, pre, 0
        self.gaps: list[int] = []

    def reset(self, **kw):
        _, info = self.env.reset(**kw)
        u = self.env.unwrapped
        u.state = np.array(self.states(self.k, self.n), dtype=np.float64)
        obs = u._get_obs() if hasattr(u, "_get_obs") else np.array(u.state, dtype=np.float32)
        return obs, info

    def step(self, action):
        u, given = self.env.unwrapped, np.array(self.pre(self.k, self.n), dtype=np.float64)
        if not np.allclose(np.asarray(u.state, np.float64), given, rtol=1e-4, atol=1e-5):
            self.gaps.append(self.k)
        u.state = given
        self.k += 1
        return self.env.step(action)


CASES = [
    ("CartPole-v1", {"normalize_obs": True, "normalize_reward": True}, 2),
    ("MountainCar-v0", {}, 2),  # every episode truncated at step 200
    ("MountainCarContinuous-v0", {"normalize_reward": True, "log_std_init": 1.0}, 8),
    ("Pendulum-v1", {"normalize_obs": True, "normalize_reward": True}, 2),
]


@pytest.mark.parametrize("numpy_rollout", [True, False], ids=["numpy", "torch"])
@pytest.mark.parametrize(("env_id", "sets", "rollouts"), CASES, ids=[c[0] for c in CASES])
def test_collectors_agree_on_the_same_stream(env_id, sets, rollouts, numpy_rollout):
    cfg = _cfg(env_id, **sets)
    eng = Pop(cfg, [7], numpy_rollout=numpy_rollout)
    N, T = cfg.num_envs, cfg.num_steps
    start = eng.env_state.clone().numpy()
    resets: list[np.ndarray] = []
    sample = eng.collector.resets.sample
    eng.collector.resets.sample = lambda steps: (lambda r: (resets.append(r.numpy().copy()), r)[1])(
        sample(steps))
    pre: list[np.ndarray] = []  # the engine's state before each step: [T', N, state]
    # the collector's step (trustrl.envs.step) calls the dynamics' transition(k, state, ...)
    dyn = eng.collector._np_env if numpy_rollout else eng.collector.env.dyn
    transition = dyn._transition

    def recording_transition(k, state, *rest):
        pre.append(torch.as_tensor(state).double().reshape(N, -1).numpy())
        return transition(k, state, *rest)

    dyn._transition = recording_transition
    recs = []
    for _ in range(rollouts):
        recs.append(eng.collector.collect())
        eng.collector.it += 1  # fresh noise for the next rollout, as iterate() would
    rec = {k: torch.cat([r[k][:, 0] for r in recs]) for k in recs[0]}  # member 0: [T', N]
    all_resets = np.concatenate(resets)  # [T', N, state]

    def states(k: int, n: int) -> np.ndarray:
        return start[n] if k == 0 else all_resets[k - 1, n]

    envs = gym.vector.SyncVectorEnv(
        [lambda n=n: _Replay(gym.make(env_id), n, states, lambda k, m: pre[k][m])
         for n in range(N)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    finals: list[tuple[int, int, np.ndarray]] = []
    step = envs.step
    calls = [0]

    def recording_step(a):
        out = step(a)
        done = np.logical_or(out[2], out[3])
        for n in np.flatnonzero(done):
            finals.append((calls[0], int(n), np.asarray(out[4]["final_obs"][n], np.float64)))
        calls[0] += 1
        return out

    envs.step = recording_step
    policy = eng.policy(0)
    norm = ObsNormalizer((eng.D,), cfg.obs_clip) if cfg.normalize_obs else None
    agent = Agent(policy, eng.spec, norm, "cpu")
    actions = iter(rec["actions"])

    def replay_step(obs, with_out=False):
        a = next(actions)
        return a, policy.dist(obs).log_prob(a), policy.value(obs)

    policy.sample_step = replay_step
    scaler = RewardScaler(N, cfg.gamma, cfg.reward_clip) if cfg.normalize_reward else None
    col = Collector(envs, agent, T, scaler, Collector.start(envs, agent, 0))
    got = [col.collect()[0] for _ in range(rollouts)]
    # the engine carries each step's state to the next (up to one float32 step's rounding)
    assert all(not e.gaps for e in envs.envs), [e.gaps[:5] for e in envs.envs]
    envs.close()
    g = {k: torch.cat([getattr(r, k) for r in got])
         for k in ("obs", "logp", "values", "rewards", "next_values", "terminated", "truncated")}

    assert torch.equal(g["terminated"], rec["terminated"])
    assert torch.equal(g["truncated"], rec["truncated"])
    assert bool((g["terminated"] | g["truncated"]).any())  # the case exercises episode ends
    if env_id.startswith("MountainCar") or env_id.startswith("Pendulum"):
        assert bool(g["truncated"].any())
    assert len(pre) == len(rec["obs"])
    tol = 1e-5
    close = dict(rtol=10 * tol, atol=tol)
    assert torch.allclose(g["obs"], rec["obs"], **close), (g["obs"] - rec["obs"]).abs().max()
    assert torch.allclose(g["rewards"], rec["rewards"], **close)
    assert torch.allclose(g["logp"], rec["logp"], **close)
    assert torch.allclose(g["values"], rec["values"], **close)
    assert torch.allclose(g["next_values"], rec["next_values"], **close), (
        (g["next_values"] - rec["next_values"]).abs().max())
    # the true final observations of the Gymnasium side are the engine's (network inputs are
    # the raw observations when they are not normalised)
    if not cfg.normalize_obs:
        assert finals
        for t, n, obs in finals:
            assert np.allclose(obs, rec["final_x"][t, n].double().numpy(), rtol=tol,
                               atol=tol), (t, n)


@pytest.mark.parametrize("numpy_rollout", [True, False], ids=["numpy", "torch"])
def test_batched_collector_clips_box_actions_before_the_env(numpy_rollout):
    """MountainCarContinuous charges 0.1 a^2 of the action the env receives: with samples
    far outside [-1, 1], the reward of every step (no goal reached) is -0.1 clip(a)^2; the
    stored action and its log-prob stay those of the unclipped sample."""
    cfg = _cfg("MountainCarContinuous-v0", log_std_init=1.5, normalize_reward=False)
    eng = Pop(cfg, [0, 1], numpy_rollout=numpy_rollout)
    r = eng.collector.collect()
    a = r["actions"][..., 0].double()
    assert float(a.abs().max()) > 2.0
    expected = -0.1 * a.clamp(-1.0, 1.0) ** 2
    assert torch.allclose(r["rewards"].double(), expected, rtol=1e-5, atol=1e-7)
    net = eng.net
    out = net.actor(r["obs"].transpose(0, 1).reshape(2, -1, eng.D))
    lp = net.log_prob(out, r["actions"].transpose(0, 1).reshape(2, -1, 1))
    assert torch.allclose(lp, r["logp"].transpose(0, 1).reshape(2, -1), atol=1e-5)


@pytest.mark.parametrize("numpy_rollout", [True, False], ids=["numpy", "torch"])
def test_batched_evaluation_clips_like_the_gymnasium_evaluation(numpy_rollout):
    """A greedy policy whose mean is 3.0 (outside [-1, 1]) pushes with force 1: 999 steps of
    reward -0.1 each (constant full throttle never reaches the goal), not -0.9 each."""
    cfg = _cfg("MountainCarContinuous-v0")
    eng = Pop(cfg, [0], numpy_rollout=numpy_rollout)
    with torch.no_grad():
        v = eng.net.views(eng.net.flat)
        v["actor.w_out"].zero_()
        v["actor.b_out"].fill_(3.0)
    ret = eng.evaluate(2)
    assert torch.allclose(ret, torch.full_like(ret, -0.1 * 999), rtol=1e-5)
    from trustrl.collect.evaluate import evaluate

    agent = Agent(eng.policy(0), eng.spec, None, "cpu")
    gym_ret = evaluate(agent, "MountainCarContinuous-v0", 2, seed=0)
    assert np.allclose(gym_ret, -0.1 * 999, rtol=1e-5)


# --- truncation bootstraps from the true last observation -------------------------------------
class StepCountEnv(gym.Env):
    """Observation = steps taken / 10; reward 1; never terminates (a TimeLimit truncates it).
    The final observation of a truncated episode differs from every reset observation."""

    observation_space = gym.spaces.Box(0, 10, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t / 10], np.float32), 1.0, False, False, {}


def test_truncation_bootstraps_from_the_final_observation():
    limit = 7
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.wrappers.TimeLimit(StepCountEnv(), limit) for _ in range(2)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    from trustrl.envs.make import EnvSpec
    from trustrl.nets.policies import ActionSpec

    spec = EnvSpec("StepCount", 1, "box", 0, ActionSpec("discrete", n=2))
    torch.manual_seed(0)
    policy = ActorCritic(1, spec.action, (8,), "tanh")
    agent = Agent(policy, spec, None, "cpu")
    col = Collector(envs, agent, 20, None, Collector.start(envs, agent, 0))
    r = col.collect()[0]
    envs.close()
    assert bool(r.truncated.any()) and not bool(r.terminated.any())
    t_idx, n_idx = torch.nonzero(r.truncated, as_tuple=True)
    final_obs = torch.full((len(t_idx), 1), limit / 10)
    expected = policy.value(final_obs)
    assert torch.allclose(r.next_values[t_idx, n_idx], expected)
    reset_v = policy.value(torch.zeros(1, 1))
    assert not torch.allclose(expected, reset_v.expand_as(expected), atol=1e-4)
    # other steps bootstrap from V(next observation of the same episode)
    ok = ~r.truncated
    assert torch.allclose(r.next_values[:-1][ok[:-1]], r.values[1:][ok[:-1]])


# --- early stopping and the learning-rate schedule -----------------------------------------------
def test_early_stopped_means_epochs_were_skipped():
    """A KL past the target after the last epoch stops nothing: early_stopped = epochs_run < K,
    for the one PPO update of every collector."""
    torch.manual_seed(0)
    from trustrl.nets.policies import ActionSpec

    policy = ActorCritic(3, ActionSpec("discrete", n=2), (16,), "tanh")
    n = 256
    obs = torch.randn(1, n, 3)
    with torch.no_grad():
        d = policy.dist(obs[0])
        a = d.sample()
        batch = {"obs": obs, "actions": a[None], "logp_old": d.log_prob(a)[None],
                 "values_old": policy.value(obs[0])[None], "advantages": torch.randn(1, n),
                 "returns": torch.randn(1, n)}
    net = PopActorCritic.from_policies([policy], "cpu")
    for K, epochs, stopped in ((1, 1, 0), (4, 1, 1)):
        cfg = make_config("ppo", "CartPole-v1", None, {
            "update_epochs": str(K), "minibatch_size": "64", "target_kl": "1e-9",
            "num_steps": "64"}, {})
        algo = make_algorithm(cfg, net, pick(net), rng.shuffle_keys([0]))
        m = algo.update(batch, 0, 0.05)
        assert float(m["approx_kl"][0]) > 1e-9
        assert int(m["epochs_run"][0]) == epochs and int(m["early_stopped"][0]) == stopped


def test_per_member_early_stopping_members_stop_apart_and_equal_their_seed_alone():
    """A target that stops members at different epochs; each member's metrics and parameters
    are those of its seed run alone (so one member's stop does not stop the others)."""
    cfg = _cfg("CartPole-v1", num_envs=4, num_steps=32, update_epochs=8, minibatch_size=32,
               lr=0.003, target_kl=0.004)
    seeds = [3, 4, 5, 6]
    pop = Pop(cfg, seeds)
    alone = [Pop(cfg, [s]) for s in seeds]
    col = pop.columns.index("epochs_run")
    differed = False
    for _ in range(3):
        m = pop.iterate()[0]
        epochs = m[:, col]
        differed |= bool(epochs.max() != epochs.min()) and bool(epochs.max() < 8)
        for i, e in enumerate(alone):
            mi = e.iterate()[0]
            assert float(mi[0, col]) == float(epochs[i])
            assert torch.allclose(torch.nan_to_num(m[i]), torch.nan_to_num(mi[0]), rtol=1e-4,
                                  atol=1e-6)
    assert differed, "the target never stopped members at different epochs"
    for i, e in enumerate(alone):
        assert torch.allclose(pop.net.flat[i], e.net.flat[0], atol=1e-6)
