"""Recurrent policies (recurrent=lstm|gru, docs/recurrent.md): the one unroll against a
brute-force loop of PyTorch's own cells, resets cutting the dependence, acting equal to the
unroll, whole-sequence minibatches, exact resume, predict's state, errors, the CLI."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from trustrl.algos.common import sequence_epoch, shuffled_epoch
from trustrl.envs.spaces import ActionSpec
from trustrl.learn.learners import GymLearner
from trustrl.nets.policies import RecurrentActorCritic, unroll
from trustrl.nets.popnet import ModuleNet
from trustrl.settings.config import CONFIGS
from trustrl.util.errors import ConfigError

SEEDS = (0, 1, 2)
KINDS = ("lstm", "gru")


def make_policy(kind: str, seed: int, obs_dim: int = 3, n_actions: int = 4,
                hidden: int = 8) -> RecurrentActorCritic:
    torch.manual_seed(seed)
    pol = RecurrentActorCritic(obs_dim, ActionSpec("discrete", n=n_actions), kind, hidden,
                               (16,), "tanh")
    with torch.no_grad():  # non-zero biases, so that every parameter is exercised
        for p in pol.cell.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return pol


def segment(seed: int, T: int = 7, N: int = 3, D: int = 3, S: int = 16):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(T, N, D, generator=g)
    starts = torch.zeros(T, N, dtype=torch.bool)
    starts[3, 0] = starts[5, 2] = starts[1, 1] = True  # resets inside the segment
    state0 = 0.5 * torch.randn(N, S, generator=g)
    return obs, starts, state0


def brute_force(pol: RecurrentActorCritic, obs, starts, state0):
    """The same network by hand: PyTorch's nn.LSTMCell / nn.GRUCell (sharing the policy's
    parameters) stepped in a Python loop, the state zeroed where an episode starts, then the
    heads; (actor outputs [T, N, k], values [T, N])."""
    H = pol.cell.hidden_size
    ref = (nn.LSTMCell if pol.kind == "lstm" else nn.GRUCell)(obs.shape[-1], H)
    ref.weight_ih, ref.weight_hh = pol.cell.weight_ih, pol.cell.weight_hh
    ref.bias_ih, ref.bias_hh = pol.cell.bias_ih, pol.cell.bias_hh
    h, c = state0[:, :H], state0[:, H:]
    outs, vals = [], []
    for t in range(obs.shape[0]):
        keep = (~starts[t]).float()[:, None]
        if pol.kind == "lstm":
            h, c = ref(obs[t], (h * keep, c * keep))
        else:
            h = ref(obs[t], h * keep)
        outs.append(pol.policy_head(pol.actor_trunk(h)))
        vals.append(pol.value_head(pol.critic_trunk(h)).squeeze(-1))
    return torch.stack(outs), torch.stack(vals)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", SEEDS)
def test_gradient_equals_brute_force_unroll(kind, seed):
    """The training path (ModuleNet over the flat parameters, the segment's rows time-major
    with their start states) gives the outputs and the gradient of a loss of them that a
    hand-written loop over PyTorch's cells gives."""
    pol = make_policy(kind, seed)
    obs, starts, state0 = segment(seed, S=pol.state_size)
    T, N, D = obs.shape
    g = torch.Generator().manual_seed(100 + seed)
    wa, wv = torch.randn(T, N, 4, generator=g), torch.randn(T, N, generator=g)

    net = ModuleNet.from_policies([pol], pol.action, "cpu")
    out, v = net.actor_critic(obs.reshape(1, T * N, D), net.views(net.flat),
                              starts=starts.reshape(1, -1), state0=state0[None])
    loss = (out.reshape(T, N, 4) * wa).sum() + (v.reshape(T, N) * wv).sum()
    (grad,) = torch.autograd.grad(loss, net.flat)

    ref_out, ref_v = brute_force(pol, obs, starts, state0)
    ref_loss = (ref_out * wa).sum() + (ref_v * wv).sum()
    params = [p for _, p in pol.named_parameters()]
    ref_grad = torch.cat([x.reshape(-1) for x in torch.autograd.grad(ref_loss, params)])
    torch.testing.assert_close(out.reshape(T, N, 4), ref_out, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(v.reshape(T, N), ref_v, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad[0], ref_grad, rtol=1e-4, atol=1e-6)
    assert ref_grad.abs().sum() > 0


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", SEEDS)
def test_reset_cuts_the_dependence(kind, seed):
    """After an episode start, the outputs do not depend on anything before it: the
    gradient w.r.t. the earlier inputs and the start state is exactly zero (and not zero
    without the reset, so the test can fail)."""
    pol = make_policy(kind, seed)
    obs, starts, state0 = segment(seed, S=pol.state_size)
    obs.requires_grad_(True)
    state0.requires_grad_(True)
    out, v, _ = pol.unroll(obs, starts, state0)
    # env 0 restarts at t = 3: its outputs from t = 3 on
    (g_obs, g_s0) = torch.autograd.grad(out[3:, 0].sum() + v[3:, 0].sum(), (obs, state0))
    assert torch.equal(g_obs[:3, 0], torch.zeros_like(g_obs[:3, 0]))
    assert torch.equal(g_s0[0], torch.zeros_like(g_s0[0]))
    assert g_obs[3:, 0].abs().sum() > 0
    # other envs never leak into env 0 either
    assert torch.equal(g_obs[:, 1:], torch.zeros_like(g_obs[:, 1:]))
    # without the reset the earlier steps do matter
    out2, v2, _ = pol.unroll(obs, torch.zeros_like(starts), state0)
    (g2,) = torch.autograd.grad(out2[3:, 0].sum() + v2[3:, 0].sum(), obs)
    assert g2[:3, 0].abs().sum() > 0


@pytest.mark.parametrize("kind", KINDS)
def test_acting_step_by_step_equals_the_unroll(kind):
    """T calls of sample_step (T = 1 each, the state carried) give the actor outputs and
    values of one unroll over the segment, and the same final state."""
    for seed in SEEDS:
        pol = make_policy(kind, seed)
        obs, starts, state0 = segment(seed, S=pol.state_size)
        out, v, last = pol.unroll(obs, starts, state0)
        state = state0
        for t in range(obs.shape[0]):
            _, _, vt, ot, state = pol.sample_step(obs[t], True, None, state, starts[t])
            torch.testing.assert_close(ot, out[t].detach(), rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(vt, v[t].detach(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(state, last.detach(), rtol=1e-5, atol=1e-6)


def small(**kw):
    kw = {"env_id": "CartPoleNoVel-v1", "recurrent": "lstm", "recurrent_hidden": 16,
          "hidden_sizes": (16,), "num_envs": 4, "num_steps": 40, "minibatch_size": 80,
          "update_epochs": 2, "vector": "sync", "total_steps": 4000, **kw}
    return CONFIGS[kw.pop("algo", "ppo")](**kw)


@pytest.mark.parametrize("kind", KINDS)
def test_collector_records_what_the_update_unrolls(kind):
    """The collector's stored pi_old outputs (acting, one step at a time from the carried
    state) equal the training path's unroll of the stored segment (rows, episode starts,
    start state), across episode ends inside the segment and from one rollout to the next
    (the state carried between them)."""
    for seed in SEEDS[:2]:
        lr = GymLearner(small(seed=seed, recurrent=kind))
        for it in range(2):
            ro, _ = lr.collector.collect()
            T, N = ro.starts.shape
            assert ro.starts[1:].any()  # CartPoleNoVel's random-policy episodes are short
            assert bool(ro.starts[0].all()) == (it == 0)
            assert (ro.state0.abs().sum() > 0) == (it > 0)
            out = lr.net.actor(ro.obs.reshape(1, T * N, -1), starts=ro.starts.reshape(1, -1),
                               state0=ro.state0[None])
            torch.testing.assert_close(out[0], ro.actor_out.reshape(T * N, -1),
                                       rtol=1e-5, atol=1e-6)


def test_minibatches_are_whole_env_sequences():
    """Each minibatch is some envs' whole columns, time-major, with their start states; an
    epoch covers every env once; the order depends on the counter."""
    T, N, S = 5, 6, 2
    t_idx, e_idx = torch.meshgrid(torch.arange(T), torch.arange(N), indexing="ij")
    batch = {"obs": (100 * t_idx + e_idx).reshape(1, T * N, 1).float(),
             "starts": torch.zeros(1, T * N, dtype=torch.bool),
             "state0": torch.arange(N).float()[None, :, None].expand(1, N, S).clone(),
             "returns": torch.zeros(1, T * N)}
    keys = torch.tensor([7])
    seen, orders = [], []
    for counter in (0, 1, 2):
        envs_in_epoch = []
        for mb in shuffled_epoch(batch, keys, counter, 2 * T):
            code = mb["obs"][0, :, 0].reshape(T, -1)
            envs = (code[0] % 100).long()
            assert torch.equal(code, 100 * torch.arange(T)[:, None] + envs[None].float())
            assert torch.equal(mb["state0"][0, :, 0].long(), envs)
            envs_in_epoch += envs.tolist()
        assert sorted(envs_in_epoch) == list(range(N))
        orders.append(envs_in_epoch)
    assert len({tuple(o) for o in orders}) > 1
    seen = list(sequence_epoch(batch, keys, 0, T))  # one env a minibatch
    assert len(seen) == N


def test_resume_is_exact(tmp_path):
    """A learner restored from a checkpoint mid-run (mid-episode: the recurrent state and the
    episode starts are in it; written and read in the checkpoints' safe format) continues
    exactly as the one that never stopped."""
    from trustrl.records.runs import TIMING_COLUMNS
    from trustrl.util.safeio import load_safe, save_safe

    for kind in KINDS:
        a = GymLearner(small(seed=3, recurrent=kind, num_steps=33, minibatch_size=66))
        a.iterate()
        save_safe(a.state_dict(), tmp_path / f"{kind}.pt")
        ck = load_safe(tmp_path / f"{kind}.pt")
        assert ck["collector"]["hidden"] is not None and ck["collector"]["hidden"].any()
        (row_a,), eps_a = a.iterate()
        b = GymLearner(small(seed=3, recurrent=kind, num_steps=33, minibatch_size=66))
        b.load_state_dict(ck)
        (row_b,), eps_b = b.iterate()
        drop = set(TIMING_COLUMNS)
        assert {k: v for k, v in row_a.items() if k not in drop} == \
            {k: v for k, v in row_b.items() if k not in drop}
        assert eps_a == eps_b
        assert torch.equal(a.net.flat, b.net.flat)


def test_predict_carries_the_state():
    """predict(obs, state, episode_start) -> (action, state): stepping an episode with it
    gives the greedy actions of the unroll over the episode; episode_start resets; a
    memoryless agent returns None; the agent file keeps the recurrent network."""
    lr = GymLearner(small(seed=1, normalize_obs=False))
    agent = lr.agent()
    pol = agent.policy
    g = np.random.default_rng(0)
    obs = g.normal(size=(6, 2, 2)).astype(np.float32)
    starts = np.zeros((6, 2), bool)
    starts[0] = True
    starts[4, 1] = True
    out, _, _ = pol.unroll(torch.as_tensor(obs), torch.as_tensor(starts),
                           pol.initial_state(2))
    state = None
    for t in range(6):
        a, state = agent.predict(obs[t], state, starts[t], deterministic=True)
        assert state.shape == (2, pol.state_size)
        assert np.array_equal(a, out[t].argmax(-1).numpy())
    # one observation (no batch): its own state of one row
    a1, s1 = agent.predict(obs[0, 0], deterministic=True)
    assert np.ndim(a1) == 0 and s1.shape == (1, pol.state_size)
    # the same state fed back, but every env restarting: as from None
    a_r, s_r = agent.predict(obs[0], state, np.ones(2, bool), deterministic=True)
    a_n, s_n = agent.predict(obs[0], None, None, deterministic=True)
    assert np.array_equal(a_r, a_n) and np.allclose(s_r, s_n)
    # the agent file rebuilds the recurrent network
    from trustrl.records.agent import Agent

    back = Agent.from_state(agent.state())
    assert back.recurrent and back.policy.kind == "lstm"
    for k, x in agent.policy.state_dict().items():
        assert torch.equal(x, back.policy.state_dict()[k])
    a2, s2 = back.predict(obs[0], None, None, deterministic=True)
    assert np.array_equal(a2, a_n) and np.array_equal(s2, s_n)
    # a memoryless agent's state is None
    plain = GymLearner(small(seed=1, recurrent="none")).agent()
    assert plain.predict(obs[0], deterministic=True)[1] is None


@pytest.mark.parametrize("sets,match", [
    ({"vector": "torch", "jit": "compile"}, "run eagerly"),
    ({"vector": "torch", "grad_backend": "compiled"}, "autograd backend"),
    ({"algo": "trpo"}, "PPO family, not trpo"),
    ({"algo": "npg"}, "PPO family, not npg"),
    ({"grad_backend": "closed-form"}, "autograd backend"),
    ({"grad_backend": "compiled"}, "autograd backend"),
    ({"minibatch_size": 50}, "multiple of num_steps"),
    ({"policy": "mymod:Net"}, "policy module"),
])
def test_bad_combinations_are_one_line_errors(sets, match):
    if "algo" in sets:  # TRPO's and NPG's configs have no minibatch_size
        cfg = CONFIGS[sets["algo"]](env_id="CartPoleNoVel-v1", recurrent="lstm", vector="sync")
    else:
        cfg = small(**{k: v for k, v in sets.items() if k in ("env_id", "vector")})
        for k, v in sets.items():
            setattr(cfg, k, v)
    with pytest.raises(ConfigError, match=match) as e:
        cfg.validate()
    assert "\n" not in str(e.value)


def test_unroll_is_the_cells_arithmetic_on_a_fresh_cell():
    """unroll's hand-written gates equal nn.LSTMCell's and nn.GRUCell's forward on a cell
    with PyTorch's own init (gate order, biases)."""
    for kind, cls in (("lstm", nn.LSTMCell), ("gru", nn.GRUCell)):
        torch.manual_seed(0)
        cell = cls(3, 5)
        x = torch.randn(1, 4, 3)
        h0 = torch.randn(4, 10 if kind == "lstm" else 5)
        hs, state = unroll(kind, cell, x, torch.zeros(1, 4), h0)
        ref = cell(x[0], (h0[:, :5], h0[:, 5:])) if kind == "lstm" else cell(x[0], h0)
        ref_h = ref[0] if kind == "lstm" else ref
        torch.testing.assert_close(hs[0], ref_h)
        if kind == "lstm":
            torch.testing.assert_close(state[:, 5:], ref[1])


def test_cli_cartpole_novel_end_to_end(tmp_path, cli_env):
    """trustrl train with recurrent=gru on CartPoleNoVel-v1, then trustrl eval of the run's
    agent file; a bad combination is one line, exit status 2."""
    common = [sys.executable, "-m", "trustrl"]
    p = subprocess.run(common + [
        "train", "--env", "CartPoleNoVel-v1", "--total-steps", "1024", "--runs-dir", "runs",
        "--set", "recurrent=gru", "--set", "recurrent_hidden=16", "--set", "num_envs=4",
        "--set", "num_steps=64", "--set", "minibatch_size=128", "--set", "update_epochs=2",
        "--set", "eval_episodes=2", "--set", "tensorboard=false"],
        env=cli_env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    (run,) = list((tmp_path / "runs").iterdir())
    assert (run / "agent.pt").is_file()
    p = subprocess.run(common + ["eval", str(run), "--episodes", "2"], env=cli_env,
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    p = subprocess.run(common + ["train", "trpo", "--env", "CartPoleNoVel-v1",
                                 "--set", "recurrent=lstm", "--runs-dir", "runs"],
                       env=cli_env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "PPO family" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


@pytest.mark.parametrize("algo", ["ppo-noclip", "ppo-dualclip", "ppo-penalty", "spo", "pg"])
def test_ppo_family_iterates_with_a_recurrent_policy(algo):
    """Every PPO variant runs its update on the whole-sequence minibatches (the pi_old outputs
    of ppo-penalty's KL included): finite metrics, parameters moved."""
    if algo == "pg":  # one step on the whole batch: no minibatch_size
        cfg = CONFIGS["pg"](env_id="CartPoleNoVel-v1", recurrent="lstm", recurrent_hidden=16,
                            num_envs=4, num_steps=40, vector="sync")
    else:
        cfg = small(seed=0, algo=algo)
    lr = GymLearner(cfg)
    before = lr.net.flat.detach().clone()
    (row,), _ = lr.iterate()
    assert np.isfinite(row["value_loss"]) and np.isfinite(row["kl_exact"])
    assert not torch.equal(before, lr.net.flat)


def test_recurrent_with_action_masks_never_invalid():
    """Masks and recurrence together (MaskedPick-v0: an invalid pick ends the episode with
    -1): no invalid action in the rollouts, and the update runs."""
    lr = GymLearner(small(env_id="MaskedPick-v0", seed=1, recurrent="gru"))
    assert lr.mask_source == "method"
    for _ in range(2):
        ro, _ = lr.collector.collect()
        assert ro.action_mask.gather(-1, ro.actions.long()[..., None]).all()
        assert (ro.rewards > 0).all()
        T, N = ro.starts.shape
        out = lr.net.actor(ro.obs.reshape(1, T * N, -1), starts=ro.starts.reshape(1, -1),
                           state0=ro.state0[None])
        from trustrl.maths.distributions import mask_logits

        torch.testing.assert_close(mask_logits(out[0], ro.action_mask.reshape(T * N, -1)),
                                   ro.actor_out.reshape(T * N, -1), rtol=1e-5, atol=1e-6)
    (row,), _ = lr.iterate()
    assert np.isfinite(row["approx_kl"])


def test_image_observations_go_through_the_cnn_then_the_cell():
    """An image env: NatureCNN's features feed the LSTM; the collector's uint8 rows unroll
    to the outputs it acted on; one update runs."""
    import test_spaces  # noqa: F401 - registers trustrl-test/ImageObs-v0

    lr = GymLearner(small(env_id="trustrl-test/ImageObs-v0", seed=0, num_steps=8,
                          minibatch_size=16, num_envs=2, update_epochs=1))
    assert lr.agent().policy.features is not None and lr.collector.pixels
    ro, _ = lr.collector.collect()
    T, N = ro.starts.shape
    out = lr.net.actor(ro.obs.reshape(1, T * N, -1), starts=ro.starts.reshape(1, -1),
                       state0=ro.state0[None])
    torch.testing.assert_close(out[0], ro.actor_out.reshape(T * N, -1), rtol=1e-4, atol=1e-5)
    (row,), _ = lr.iterate()
    assert np.isfinite(row["value_loss"])


def test_box_actions_pendulum_no_vel():
    """PendulumNoVel-v1 (Box actions: the Gaussian's log-std beside the recurrent network):
    the velocity is gone from the observation, and an iteration runs."""
    lr = GymLearner(small(env_id="PendulumNoVel-v1", seed=0, recurrent="gru"))
    assert lr.spec.obs_dim == 2
    (row,), _ = lr.iterate()
    assert np.isfinite(row["value_loss"]) and np.isfinite(row["kl_exact"])


def test_evaluation_carries_the_state():
    """trustrl.evaluate plays a recurrent agent with its state carried through each episode:
    the returns of a hand-written loop over predict(obs, state, episode_start), and not those
    of an agent that forgets (state None at every step)."""
    import gymnasium as gym

    from trustrl.collect.evaluate import evaluate

    def by_hand(agent, carry: bool) -> list[float]:
        out = []
        for i in range(4):
            env = gym.make("CartPoleNoVel-v1")
            obs, _ = env.reset(seed=10_000 + i)
            state, start, done, ret = None, np.ones(1, bool), False, 0.0
            while not done:
                a, nxt = agent.predict(obs[None], state if carry else None, start, True)
                state, start = nxt, np.zeros(1, bool)
                obs, r, term, trunc, _ = env.step(int(a[0]))
                ret, done = ret + r, term or trunc
            out.append(ret)
        return out

    forgetful_differs = []
    for seed in SEEDS:
        agent = GymLearner(small(seed=seed, normalize_obs=False)).agent()
        with torch.no_grad():  # a cell whose state matters to the greedy action
            agent.policy.cell.weight_hh.mul_(4.0)
            agent.policy.policy_head.weight.mul_(50.0)
        got = evaluate(agent, "CartPoleNoVel-v1", episodes=4, seed=10_000).tolist()
        assert got == by_hand(agent, True)
        forgetful_differs.append(got != by_hand(agent, False))
    assert any(forgetful_differs)
