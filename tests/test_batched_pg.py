"""pg on the batched collector (trustrl/algos/pg.py on trustrl.collect.batched) against the
reference single-run PG (tests/reference_algos.py)."""

from __future__ import annotations

import math

import pytest
import torch
from batched_shim import Pop
from reference_algos import PG

import trustrl
from trustrl.collect.rollout import Batch
from trustrl.learn.learners import init_policies
from trustrl.settings.config import make_config


def cfg_for(env: str, **sets):
    base = {"num_envs": 4, "num_steps": 32, "total_steps": 1024, "eval_every": 0,
            "eval_episodes": 2, "vector": "torch", "ent_coef": 0.01, "lr": 3e-3}
    base.update(sets)
    return make_config("pg", env, None, {k: str(v) for k, v in base.items()}, {})


@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])
def test_batched_pg_update_equals_core_pg(env):
    cfg = cfg_for(env)
    eng = Pop(cfg, [5])
    core = init_policies(eng.spec, cfg, [5])[0]
    torch.manual_seed(0)
    B = cfg.batch_size
    obs = torch.randn(1, B, eng.D)
    acts = torch.randint(0, 2, (1, B)) if env == "CartPole-v1" else torch.randn(1, B, 1)
    with torch.no_grad():  # pi_old is the policy that collected: logp_old = log pi(a|s)
        logp = eng.net.log_prob(eng.net.actor(obs), acts)
        values = eng.net.critic(obs)
    adv, ret = torch.randn(1, B), torch.randn(1, B) * 3
    m = eng.algo.update({"obs": obs, "actions": acts, "logp_old": logp, "values_old": values,
                         "advantages": adv, "returns": ret}, 0, cfg.lr)
    pg = PG(core, cfg)
    mc = pg.update(Batch(obs[0], acts[0], logp[0], values[0], adv[0], ret[0]), progress=0.0)
    for a, c in zip(eng.policy(0).parameters(), core.parameters(), strict=True):
        assert torch.allclose(a, c, atol=2e-5), (a - c).abs().max()
    for k in ("policy_loss", "value_loss", "grad_norm", "approx_kl", "kl_exact", "entropy"):
        assert math.isclose(float(m[k][0]), mc[k], rel_tol=1e-3, abs_tol=1e-6), k
    assert float(eng.algo.opt.t[0]) == 1  # one Adam step


def test_batched_pg_population_member_equals_its_seed_alone():
    cfg = cfg_for("CartPole-v1", normalize_obs=True)
    pop, alone = Pop(cfg, [3, 4]), Pop(cfg, [4])
    for _ in range(3):
        m, mi = pop.iterate()[0], alone.iterate()[0]
        assert torch.allclose(torch.nan_to_num(m[1]), torch.nan_to_num(mi[0]), rtol=1e-4,
                              atol=1e-6)
    assert torch.allclose(pop.net.flat[1], alone.net.flat[0], atol=1e-6)


def test_pg_trains_on_both_collectors_with_one_header(tmp_path):
    heads = []
    for vector in ("sync", "torch"):
        res = trustrl.train(cfg_for("CartPole-v1", vector=vector, runs_dir=tmp_path / vector,
                                    tensorboard=False))
        heads.append((res.run_dir / "metrics.csv").read_text().splitlines()[0])
    assert heads[0] == heads[1] and heads[0].endswith("policy_loss,grad_norm")
