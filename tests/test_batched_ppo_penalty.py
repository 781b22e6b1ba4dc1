"""ppo-penalty on the batched collector (trustrl/algos/ppo_penalty.py on trustrl.collect.batched)
against the reference single-run PPOPenalty (tests/reference_algos.py)."""

from __future__ import annotations

import math

import pytest
import torch
from batched_shim import Pop
from reference_algos import PPOPenalty

import trustrl
from trustrl.collect.rollout import Batch
from trustrl.learn.learners import init_policies
from trustrl.settings.config import make_config


def cfg_for(env: str, **sets):
    base = {"num_envs": 4, "num_steps": 32, "total_steps": 1024, "eval_every": 0,
            "eval_episodes": 2, "vector": "torch", "ent_coef": 0.01, "lr": 3e-3,
            "update_epochs": 3, "minibatch_size": 128, "beta_init": 3.0, "kl_target": 0.01}
    base.update(sets)
    return make_config("ppo-penalty", env, None, {k: str(v) for k, v in base.items()}, {})


@pytest.mark.parametrize("kl_target", [1.0, 1e-5], ids=["beta-halves", "beta-doubles"])
@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])
def test_batched_ppo_penalty_update_equals_core(env, kl_target):
    """One minibatch per epoch (no shuffling effect): the same parameters, losses, KL and
    the same beta adaptation as the core on the same batch."""
    cfg = cfg_for(env, kl_target=kl_target)
    eng = Pop(cfg, [5])
    core = init_policies(eng.spec, cfg, [5])[0]
    torch.manual_seed(0)
    B = cfg.batch_size
    obs = torch.randn(1, B, eng.D)
    acts = torch.randint(0, 2, (1, B)) if env == "CartPole-v1" else torch.randn(1, B, 1)
    with torch.no_grad():
        logp = eng.net.log_prob(eng.net.actor(obs), acts)
        values = eng.net.critic(obs)
    adv, ret = torch.randn(1, B), torch.randn(1, B) * 3
    m = eng.algo.update({"obs": obs, "actions": acts, "logp_old": logp, "values_old": values,
                         "advantages": adv, "returns": ret}, 0, cfg.lr)
    algo = PPOPenalty(core, cfg)
    mc = algo.update(Batch(obs[0], acts[0], logp[0], values[0], adv[0], ret[0]), progress=0.0)
    for a, c in zip(eng.policy(0).parameters(), core.parameters(), strict=True):
        assert torch.allclose(a, c, atol=2e-5), (a - c).abs().max()
    for k in ("policy_loss", "value_loss", "kl_penalty", "grad_norm", "kl_exact", "beta"):
        assert math.isclose(float(m[k][0]), mc[k], rel_tol=1e-3, abs_tol=1e-6), k
    assert math.isclose(float(eng.algo.beta[0]), algo.kl_control.beta)
    assert algo.kl_control.beta == (1.5 if kl_target == 1.0 else 6.0)  # the case is exercised
    assert mc["kl_penalty"] > 0


def test_beta_adapts_per_member_and_members_equal_their_seed_alone():
    cfg = cfg_for("CartPole-v1", minibatch_size=32, beta_init=1.0, kl_target=0.003)
    pop, alone = Pop(cfg, [3, 4]), Pop(cfg, [4])
    betas = set()
    for _ in range(4):
        m, mi = pop.iterate()[0], alone.iterate()[0]
        assert torch.allclose(torch.nan_to_num(m[1]), torch.nan_to_num(mi[0]), rtol=1e-4,
                              atol=1e-6)
        betas.update(float(b) for b in pop.algo.beta)
    assert len(betas) > 1  # beta moved
    assert torch.allclose(pop.net.flat[1], alone.net.flat[0], atol=1e-6)


def test_ppo_penalty_trains_on_both_collectors_with_one_header(tmp_path):
    heads = []
    for vector in ("sync", "torch"):
        res = trustrl.train(cfg_for("CartPole-v1", vector=vector, minibatch_size=64,
                                    runs_dir=tmp_path / vector, tensorboard=False))
        heads.append((res.run_dir / "metrics.csv").read_text().splitlines()[0])
    assert heads[0] == heads[1] and "beta,kl_penalty" in heads[0]
