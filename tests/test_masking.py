"""Invalid-action masking (docs/masking.md): the masked categorical maths against direct
enumeration over the valid actions, masks never violated (sampled, greedy, Agent.act,
evaluation), the rollout's stored masks used by the update's ratio and diagnostics, the mask
sources, the one-line errors, and end-to-end runs on MaskedPick-v0 and a MultiDiscrete env."""

from __future__ import annotations

import csv
import itertools
import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from trustrl.algos.common import diagnostics
from trustrl.collect.evaluate import evaluate
from trustrl.compute import backends
from trustrl.compute.backends import LossTerms
from trustrl.envs import masks
from trustrl.envs.spaces import ActionSpec
from trustrl.learn.learners import GymLearner
from trustrl.maths.distributions import Categorical, MultiCategorical, masked_log_softmax
from trustrl.settings.config import CONFIGS
from trustrl.util.errors import ConfigError, EnvError

SEEDS = (0, 1, 2, 3)


def random_masks(g: torch.Generator, rows: int, n: int) -> torch.Tensor:
    """Random masks [rows, n] with at least one valid action per row."""
    m = torch.rand(rows, n, generator=g) < 0.5
    m[torch.arange(rows), torch.randint(n, (rows,), generator=g)] = True
    return m


# --- the maths, against enumeration over the valid actions ----------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_categorical_log_prob_entropy_kl_over_valid_actions(seed):
    g = torch.Generator().manual_seed(seed)
    B, A = 32, 6
    logits_p = torch.randn(B, A, generator=g, dtype=torch.float64) * 3
    logits_q = torch.randn(B, A, generator=g, dtype=torch.float64) * 3
    mask = random_masks(g, B, A)
    p, q = Categorical(logits_p, mask), Categorical(logits_q, mask)
    for b in range(B):
        valid = [a for a in range(A) if mask[b, a]]
        z_p = sum(math.exp(logits_p[b, a]) for a in valid)
        z_q = sum(math.exp(logits_q[b, a]) for a in valid)
        prob_p = {a: math.exp(logits_p[b, a]) / z_p for a in valid}
        prob_q = {a: math.exp(logits_q[b, a]) / z_q for a in valid}
        for a in valid:
            lp = p.log_prob(torch.tensor([a]).expand(B))[b]
            assert float(lp) == pytest.approx(math.log(prob_p[a]), abs=1e-9)
        for a in set(range(A)) - set(valid):
            assert float(p.probs[b, a]) == 0.0
        ent = -sum(v * math.log(v) for v in prob_p.values())
        kl = sum(prob_p[a] * (math.log(prob_p[a]) - math.log(prob_q[a])) for a in valid)
        assert float(p.entropy()[b]) == pytest.approx(ent, abs=1e-9)
        assert float(p.kl(q)[b]) == pytest.approx(kl, abs=1e-9)


@pytest.mark.parametrize("seed", SEEDS)
def test_multicategorical_against_the_joint_distribution(seed):
    """Log-prob, entropy and KL of independent masked categoricals equal those of the joint
    distribution enumerated over every valid action tuple."""
    g = torch.Generator().manual_seed(seed)
    nvec = (3, 4, 2)
    B, n = 8, sum(nvec)
    lp_, lq_ = (torch.randn(B, n, generator=g, dtype=torch.float64) * 2 for _ in range(2))
    mask = torch.cat([random_masks(g, B, k) for k in nvec], dim=1)
    p, q = MultiCategorical(lp_, nvec, mask), MultiCategorical(lq_, nvec, mask)
    offsets = np.cumsum((0,) + nvec[:-1])

    def joint(logits, b):
        out = {}
        for a in itertools.product(*(range(k) for k in nvec)):
            if all(mask[b, o + ai] for o, ai in zip(offsets, a, strict=True)):
                out[a] = math.exp(sum(float(logits[b, o + ai]) for o, ai in zip(offsets, a,
                                                                                 strict=True)))
        z = sum(out.values())
        return {a: v / z for a, v in out.items()}

    for b in range(B):
        jp, jq = joint(lp_, b), joint(lq_, b)
        for a, v in jp.items():
            acts = torch.tensor(a).expand(B, -1)
            assert float(p.log_prob(acts)[b]) == pytest.approx(math.log(v), abs=1e-9)
        ent = -sum(v * math.log(v) for v in jp.values())
        kl = sum(v * (math.log(v) - math.log(jq[a])) for a, v in jp.items())
        assert float(p.entropy()[b]) == pytest.approx(ent, abs=1e-9)
        assert float(p.kl(q)[b]) == pytest.approx(kl, abs=1e-9)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gradients_finite_and_zero_on_invalid_logits(dtype):
    g = torch.Generator().manual_seed(5)
    for _ in range(4):
        logits = (torch.randn(64, 5, generator=g) * 10).to(dtype).requires_grad_(True)
        mask = random_masks(g, 64, 5)
        mask[0] = torch.tensor([True, False, False, False, False])  # one valid action
        d = Categorical(logits, mask)
        other = Categorical(logits.detach() + 1.0, mask)
        a = d.sample()
        loss = d.log_prob(a).sum() + d.entropy().sum() + d.kl(other).sum()
        assert torch.isfinite(loss)
        (grad,) = torch.autograd.grad(loss, logits)
        assert torch.isfinite(grad).all()
        assert (grad[~mask] == 0).all()
        assert torch.isfinite(masked_log_softmax(logits, mask)).all()


@pytest.mark.parametrize("seed", SEEDS)
def test_invalid_actions_never_sampled_nor_greedy(seed):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(100 + seed)
    B, A = 16, 7
    mask = random_masks(g, B, A)
    # the invalid actions get the largest logits: unmasked, they would be chosen most
    logits = torch.where(mask, torch.zeros(B, A), torch.full((B, A), 8.0))
    d = Categorical(logits, mask)
    for _ in range(200):
        a = d.sample()
        assert mask[torch.arange(B), a].all()
    assert mask[torch.arange(B), d.mode()].all()
    nvec = (3, 4)
    mm = torch.cat([random_masks(g, B, k) for k in nvec], dim=1)
    ml = torch.where(mm, torch.zeros(B, 7), torch.full((B, 7), 8.0))
    md = MultiCategorical(ml, nvec, mm)
    for a in [md.sample() for _ in range(200)] + [md.mode()]:
        assert mm[torch.arange(B), a[:, 0]].all() and mm[torch.arange(B), 3 + a[:, 1]].all()


# --- the masks' sources and checks --------------------------------------------------------

def test_check_masks_errors():
    disc = ActionSpec("discrete", n=3)
    ok = masks.check_masks([[1, 0, 1]], disc, 1, "env 'x'")
    assert ok.dtype == np.bool_ and ok.tolist() == [[True, False, True]]
    for bad, words in (([[True, False]], "shape"), ([[0.5, 1, 1]], "booleans"),
                       ([[False, False, False]], "allows no action"),
                       ([["a", "b", "c"]], "booleans")):
        with pytest.raises(EnvError, match=words) as e:
            masks.check_masks(bad, disc, 1, "env 'x'")
        assert "\n" not in str(e.value)
    multi = ActionSpec("multidiscrete", n=5, dim=2, nvec=(2, 3))
    with pytest.raises(EnvError, match="allows no action"):  # the second block is empty
        masks.check_masks([[True, False, False, False, False]], multi, 1, "env 'x'")


def test_action_mask_on_refused_where_it_cannot_hold(monkeypatch):
    with pytest.raises(ConfigError, match="cannot be masked"):
        GymLearner(CONFIGS["ppo"](env_id="Pendulum-v1", action_mask="on", vector="sync"))
    with pytest.raises(ConfigError, match="gives no mask"):
        GymLearner(CONFIGS["ppo"](env_id="CartPole-v1", action_mask="on", vector="sync"))
    with pytest.raises(ConfigError, match="batched collector"):
        CONFIGS["ppo"](env_id="CartPole-v1", action_mask="on", vector="torch").validate()
    # every algorithm takes masks now; one that did not would be refused in one line
    monkeypatch.setattr("trustrl.learn.learners.MASKED_ALGOS", ("ppo",))
    with pytest.raises(ConfigError, match="trpo does not use them"):
        GymLearner(CONFIGS["trpo"](env_id="MaskedPick-v0", vector="sync"))
    monkeypatch.undo()
    # off, or auto on an env without masks: no error, unmasked
    assert GymLearner(CONFIGS["trpo"](env_id="MaskedPick-v0", vector="sync",
                                      action_mask="off")).mask_source is None
    assert GymLearner(CONFIGS["ppo"](env_id="CartPole-v1", vector="sync")).mask_source is None


def small(env_id, **kw):
    kw = {"num_envs": 2, "num_steps": 64, "normalize_obs": False, "vector": "sync",
          "minibatch_size": 32, **kw}
    return CONFIGS[kw.pop("algo", "ppo")](env_id=env_id, **kw)


@pytest.mark.parametrize("env_id,source", [("MaskedPick-v0", "method"),
                                           ("masking_envs:InfoOnlyPick", "info")])
def test_collector_stores_the_mask_of_each_observation(env_id, source):
    """The stored mask of each step is that of its observation (the items not yet picked),
    and every stored action is valid under it, whichever source gives the masks."""
    for seed in SEEDS[:2]:
        lr = GymLearner(small(env_id, seed=seed))
        assert lr.mask_source == source
        for _ in range(2):
            ro, _ = lr.collector.collect()
            n = 8
            taken = ro.obs[..., n:] > 0.5
            assert torch.equal(ro.action_mask, ~taken)
            assert ro.action_mask.gather(-1, ro.actions.unsqueeze(-1)).all()


def _batch(lr):
    ro, _ = lr.collector.collect()
    b = ro.flatten(torch.zeros_like(ro.values), torch.zeros_like(ro.values))
    return {"obs": b.obs[None], "actions": b.actions[None], "logp_old": b.logp_old[None],
            "values_old": b.values_old[None], "advantages": b.advantages[None],
            "returns": b.returns[None], "old_out": b.old_out[None],
            "action_mask": b.action_mask[None]}


@pytest.mark.parametrize("backend", ["autograd", "closed-form"])
def test_update_ratio_uses_the_stored_mask(backend):
    """Before any step the update's log-probs equal the stored logp_old (ratio 1) and its
    diagnostics read KL 0 and the masked entropy: they use the mask the action was sampled
    under. Recomputed without it, the log-probs differ (checked, so the test can fail)."""
    for seed in SEEDS[:2]:
        lr = GymLearner(small("MaskedPick-v0", seed=seed, grad_backend=backend))
        batch = _batch(lr)
        net = lr.net
        seen: dict[str, torch.Tensor] = {}

        def capture(h, mb, want, seen=seen):
            seen["logp"], seen["entropy"] = h.logp.detach(), h.entropy.detach()
            return LossTerms(h.logp.mean(1) + h.entropy.mean(1))

        be = backends.pick(net, backend)
        g, _ = be.value_and_grad(net, net.views(net.flat.detach()), batch, capture)
        assert torch.isfinite(g).all()
        torch.testing.assert_close(seen["logp"], batch["logp_old"], atol=1e-5, rtol=0)
        out = net.actor(batch["obs"])
        masked = Categorical(out, batch["action_mask"])
        torch.testing.assert_close(seen["entropy"], masked.entropy(), atol=1e-5, rtol=0)
        unmasked = torch.log_softmax(out, -1).gather(-1, batch["actions"][..., None])[..., 0]
        assert (unmasked - batch["logp_old"]).abs().max() > 1e-2
        d = diagnostics(net, batch, batch["old_out"], net.flat.detach().clone(), 0.2, be)
        assert abs(float(d["approx_kl"][0])) < 1e-6 and abs(float(d["kl_exact"][0])) < 1e-6
        assert float(d["entropy"][0]) == pytest.approx(float(masked.entropy().mean().detach()),
                                                       abs=1e-5)


@pytest.mark.parametrize("algo", ["ppo", "ppo-penalty", "spo"])
def test_learner_iteration_passes_the_masks_to_the_update(algo):
    """A whole iteration with a vanishing learning rate: the policy does not move, so every
    KL diagnostic is 0 and no ratio leaves 1, which holds only if the learner's batch carries
    the rollout's masks to the update (unmasked log-probs would put the ratio far from 1)."""
    for seed in SEEDS[:2]:
        lr = GymLearner(small("MaskedPick-v0", seed=seed, lr=1e-12, algo=algo))
        (row,), _ = lr.iterate()
        # clip_fraction_mb: the ratio inside the loss's minibatches (PPO's own column)
        for k in ("approx_kl", "approx_kl_k1", "kl_exact", "clip_fraction", "clip_fraction_mb"):
            if k in row:
                assert abs(row[k]) < 1e-6, (k, row[k])
        assert row["ratio_min"] == pytest.approx(1.0, abs=1e-5)
        assert row["ratio_max"] == pytest.approx(1.0, abs=1e-5)


def test_agent_act_and_predict_never_return_an_invalid_action():
    lr = GymLearner(small("MaskedPick-v0"))
    agent = lr.agent(0)
    with torch.no_grad():  # the policy prefers action 0 by far
        agent.policy.policy_head.bias.copy_(torch.tensor([20.0] + [0.0] * 7))
    obs = np.random.default_rng(0).random((16, 16)).astype(np.float32)
    mask = np.ones((16, 8), bool)
    mask[:, 0] = False
    assert (agent.act(obs) == 0).all()  # unmasked: action 0 (so the masked check can fail)
    for det in (True, False):
        for _ in range(20):
            assert (agent.act(obs, deterministic=det, action_masks=mask) != 0).all()
            a, _ = agent.predict(obs[0], deterministic=det, action_masks=mask[0])
            assert int(a) != 0
    with pytest.raises(EnvError, match="shape"):
        agent.act(obs, action_masks=mask[:, :3])


def test_evaluate_reads_the_env_masks():
    """A greedy policy set on action 0 picks it twice unmasked (the penalty: return < 0); with
    the env's masks (action_mask auto) it never makes an invalid move (return >= 0)."""
    lr = GymLearner(small("MaskedPick-v0"))
    agent = lr.agent(0)
    with torch.no_grad():
        agent.policy.policy_head.bias.copy_(torch.tensor([20.0] + [0.0] * 7))
    masked = evaluate(agent, "MaskedPick-v0", 8)
    unmasked = evaluate(agent, "MaskedPick-v0", 8, action_mask="off")
    assert (masked >= 0).all() and (unmasked < 0).all()


def test_bad_env_masks_are_one_line_errors():
    for kind, words in (("shape", "shape"), ("dtype", "booleans"), ("empty", "no action")):
        with pytest.raises(EnvError, match=words):
            GymLearner(small("masking_envs:BadMaskPick", env_kwargs={"kind": kind}))


# --- end to end ---------------------------------------------------------------------------

def _returns(run):
    with open(run / "episodes.csv", newline="") as f:
        return [float(r["return"]) for r in csv.DictReader(f)]


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_cli_masked_pick(tmp_path, cli_env, mode):
    """Masked (auto), no invalid move is ever made: every episode's return is >= 0; unmasked
    (off), the random start makes them (the penalty -1 ends episodes below 0)."""
    p = subprocess.run([sys.executable, "-m", "trustrl", "train", "--env", "MaskedPick-v0",
                        "--total-steps", "2048", "--runs-dir", "runs", "--set", "num_envs=4",
                        "--set", "num_steps=128", "--set", f"action_mask={mode}",
                        "--set", "eval_episodes=4", "--set", "tensorboard=false"],
                       env=cli_env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    (run,) = list((tmp_path / "runs").iterdir())
    returns = _returns(run)
    assert len(returns) > 100
    if mode == "auto":
        assert min(returns) >= 0.0
    else:
        assert min(returns) < 0.0


def test_cli_bad_mask_is_one_line(tmp_path, cli_env):
    p = subprocess.run([sys.executable, "-m", "trustrl", "train", "--env",
                        "masking_envs:BadMaskPick", "--total-steps", "2048", "--runs-dir", "runs",
                        "--set", "env_kwargs={\"kind\": \"empty\"}"],
                       env=cli_env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "no action" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_multidiscrete_masked_training_never_invalid():
    """MultiDiscrete([3, 4]) with per-dimension masks (3 + 4 booleans): no invalid action in
    the rollouts of a short training run (an invalid one ends the episode with -1). (A
    MultiDiscrete policy runs on autograd: no closed form.)"""
    for seed in SEEDS[:2]:
        lr = GymLearner(small("masking_envs:MultiPick", seed=seed))
        assert lr.mask_source == "method"
        for _ in range(3):
            ro, eps = lr.collector.collect()
            m, a = ro.action_mask, ro.actions.long()
            assert m.gather(-1, a[..., :1]).all() and m[..., 3:].gather(-1, a[..., 1:]).all()
            assert (ro.rewards > 0).all()
        rows, _ = lr.iterate()
        assert all(math.isfinite(rows[0][k]) for k in ("approx_kl", "kl_exact", "entropy"))


@pytest.mark.parametrize("env_id", ["MaskedPick-v0", "masking_envs:InfoOnlyPick"])
def test_resume_with_masks_is_exact(env_id):
    """A learner restored from a checkpoint mid-run (masks from info: the carried mask of the
    next observation is in the checkpoint) continues exactly as the one that never stopped."""
    import pickle

    from trustrl.records.runs import TIMING_COLUMNS

    # 66 steps a rollout: the checkpoint falls mid-episode (episodes of 4 valid picks)
    a = GymLearner(small(env_id, seed=3, num_steps=66))
    a.iterate()
    ck = pickle.loads(pickle.dumps(a.state_dict()))
    (row_a,), eps_a = a.iterate()
    b = GymLearner(small(env_id, seed=3, num_steps=66))
    b.load_state_dict(ck)
    (row_b,), eps_b = b.iterate()
    drop = set(TIMING_COLUMNS)
    assert {k: v for k, v in row_a.items() if k not in drop} == \
        {k: v for k, v in row_b.items() if k not in drop}
    assert eps_a == eps_b
