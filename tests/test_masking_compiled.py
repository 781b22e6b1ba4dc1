"""Action masks on the compiled backend (docs/masking.md): PPO's compiled epochs, the compiled
diagnostics and TRPO's compiled policy gradient, line-search evaluation and Fisher product
equal the closed form in torch on masked batches (several members, to float rounding); an
invalid action gets probability 0 and gradient 0; a masked run takes the compiled kernels.

The compiled kernels hold Discrete and Box policies (the MLP population network); a
MultiDiscrete policy runs on autograd, masked or not, so there is no compiled MultiDiscrete
case here (tests/test_masking.py trains one masked)."""

from __future__ import annotations

import pytest
import torch
from test_compiled import assert_same_updates
from test_masking import small
from test_masking_trpo import enumerated, trpo

from trustrl.algos import make_algorithm
from trustrl.algos.common import diagnostics
from trustrl.compute import compiled
from trustrl.compute.backends import Autograd, ClosedForm
from trustrl.learn.learners import GymLearner
from trustrl.maths import rng
from trustrl.maths.distributions import Categorical, mask_logits
from trustrl.nets.policies import ActionSpec, ActorCritic
from trustrl.nets.popnet import PopActorCritic
from trustrl.settings.config import make_config

pytestmark = pytest.mark.skipif(not compiled.available(), reason="needs trustrl[compiled]")

N_ACTIONS = 5
NEVER = N_ACTIONS - 1
"""An action invalid in every sample: its output column gets no gradient at all."""


def masked_members(hidden, activation, P, B, seed):  # type: ignore[no-untyped-def]
    """P policies (Discrete(5)) as a population, a masked batch drawn from them (random masks
    with at least one valid action a row, action NEVER invalid everywhere; the actions
    sampled under the masks) and pi_old's masked logits; the generator for more draws."""
    action = ActionSpec("discrete", n=N_ACTIONS)
    torch.manual_seed(seed)
    pols = [ActorCritic(4, action, hidden, activation) for _ in range(P)]
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(P, B, 4, generator=g)
    mask = torch.rand(P, B, N_ACTIONS, generator=g) < 0.5
    mask[..., torch.randint(NEVER, (1,), generator=g)] = True  # a valid action in every row
    mask[..., NEVER] = False
    net = PopActorCritic.from_policies(pols, "cpu")
    with torch.no_grad():
        old_out = mask_logits(net.actor(obs), mask)
        d = Categorical(old_out.reshape(P * B, -1))
        actions = torch.multinomial(d.probs, 1, generator=g).reshape(P, B)
        logp_old = d.log_prob(actions.reshape(-1)).reshape(P, B)
    return pols, g, {"obs": obs, "actions": actions, "logp_old": logp_old,
                     "old_out": old_out, "action_mask": mask}


def never_columns(net: PopActorCritic) -> list[int]:
    """The actor's output-layer columns (weights and bias) of action NEVER."""
    seg = {s.name: s for s in net.segments}
    w, b = seg["actor.w_out"], seg["actor.b_out"]
    h = w.shape[0]
    return [w.offset + j * N_ACTIONS + NEVER for j in range(h)] + [b.offset + NEVER]


PPO_CASES = [
    # algo, hidden, activation, settings
    ("ppo", (16, 8), "tanh", {}),
    ("ppo", (16,), "relu", {"target_kl": "0.002", "ent_coef": "0.02",
                            "clip_value_loss": "true"}),
    ("ppo-penalty", (16, 8), "tanh", {"ent_coef": "0.01"}),
    ("spo", (8,), "tanh", {"norm_adv": "false", "minibatch_size": "24"}),
]


@pytest.mark.parametrize("case", range(len(PPO_CASES)))
def test_masked_compiled_ppo_update_equals_the_closed_form(case):
    """PPO's update (K epochs of minibatch steps, the KL stop, the KL penalty, the entropy
    bonus) on a masked batch through the compiled epochs and through the eager closed form, 3
    members from the same parameters: parameters, Adam's moments and every metric agree to
    float rounding; the columns of an action invalid everywhere never move (gradient 0, on
    both); unmasked, the compiled update differs (so the test can fail)."""
    algo, hidden, act, extra = PPO_CASES[case]
    P, N = 3, 72
    pols, g, batch = masked_members(hidden, act, P, N, case)
    batch.update(advantages=torch.randn(P, N, generator=g), returns=torch.randn(P, N, generator=g),
                 values_old=torch.randn(P, N, generator=g))
    sets = {"num_steps": str(N), "num_envs": "1", "minibatch_size": "32", "update_epochs": "4",
            **extra}
    results = {}
    for name, backend, b in (("compiled", compiled.Compiled(), batch),
                             ("closed-form", ClosedForm(), batch),
                             ("unmasked", compiled.Compiled(),
                              {k: x for k, x in batch.items() if k != "action_mask"})):
        net = PopActorCritic.from_policies(pols, "cpu")
        cfg = make_config(algo, "CartPole-v1", None, sets, {})
        alg = make_algorithm(cfg, net, backend, rng.shuffle_keys([0, 1, 2]))
        ms = [alg.update(b, c, alg.learning_rate(0.1 * c)) for c in range(2)]
        results[name] = (net.flat.detach().clone(), alg.opt, ms)
    assert_same_updates(results["compiled"], results["closed-form"])
    (fc, oc, _), (fe, _, _) = results["compiled"], results["closed-form"]
    start = PopActorCritic.from_policies(pols, "cpu").flat.detach()
    cols = never_columns(PopActorCritic.from_policies(pols, "cpu"))
    assert torch.equal(fc[:, cols], start[:, cols]) and torch.equal(fe[:, cols], start[:, cols])
    assert float(oc.m[:, cols].abs().max()) == 0.0  # its gradient was 0 in every step
    assert float((fc - start).abs().max()) > 1e-3  # the other columns moved
    fu = results["unmasked"][0]
    assert float((fu - fc).abs().max()) > 1e-3


@pytest.mark.parametrize("hidden, activation, B", [((16, 8), "tanh", 57), ((8,), "relu", 9)])
def test_masked_compiled_diagnostics_equal_the_closed_form(hidden, activation, B):
    """algos.common.diagnostics on a masked batch through the compiled kernel and with torch,
    3 members moved away from pi_old: every column to float rounding, and the entropy and
    exact KL those of the distributions over each sample's valid actions (enumerated: an
    invalid action has probability 0); unmasked, the kernel's differ."""
    P = 3
    pols, g, batch = masked_members(hidden, activation, P, B, B)
    net = PopActorCritic.from_policies(pols, "cpu")
    flat_old = net.flat.detach().clone()
    with torch.no_grad():
        net.flat.add_(0.5 * torch.randn(net.flat.shape, generator=g))  # far from pi_old
    old_out, mask = batch["old_out"], batch["action_mask"]
    fast = diagnostics(net, batch, old_out, flat_old, 0.2, compiled.Compiled())
    slow = diagnostics(net, batch, old_out, flat_old, 0.2, ClosedForm())
    assert fast.keys() == slow.keys()
    for k in slow:
        assert fast[k].dtype == slow[k].dtype, k
        torch.testing.assert_close(fast[k], slow[k], rtol=2e-5, atol=2e-6, msg=k)
    assert float(slow["clip_fraction"].max()) > 0  # the ratios are far from 1
    with torch.no_grad():
        raw_new, raw_old = net.actor(batch["obs"]), PopActorCritic.from_policies(
            pols, "cpu").actor(batch["obs"])
    for p in range(P):
        _, kl = enumerated(raw_old[p].double(), raw_new[p].double(), mask[p],
                           batch["actions"][p])
        _, ent = enumerated(raw_new[p].double(), raw_new[p].double(), mask[p],
                            batch["actions"][p], entropy=True)
        assert float(fast["kl_exact"][p]) == pytest.approx(float(kl.mean()), rel=1e-4)
        assert float(fast["entropy"][p]) == pytest.approx(float(ent.mean()), rel=1e-4)
    unmasked = diagnostics(net, {k: x for k, x in batch.items() if k != "action_mask"},
                           old_out, flat_old, 0.2, compiled.Compiled())
    assert float((unmasked["entropy"] - fast["entropy"]).abs().max()) > 1e-2


@pytest.mark.parametrize("hidden, activation, B", [((16, 8), "tanh", 57), ((8,), "relu", 9)])
def test_masked_compiled_trpo_kernels_equal_the_closed_form(hidden, activation, B):
    """TRPO's and NPG's compiled kernels on a masked batch, 3 members: the policy gradient (g,
    L, pi_old's masked logits) and the line search's surrogate and KL at a candidate equal
    the closed form's to float rounding; the gradient of an action invalid everywhere is 0;
    the line search's KL is that of the distributions over the valid actions (enumerated).
    Unmasked, the compiled gradient differs (so the test can fail)."""
    from trustrl.algos.trpo import TRPO

    P = 3
    pols, g, batch = masked_members(hidden, activation, P, B, B)
    net = PopActorCritic.from_policies(pols, "cpu")
    flat_old = net.flat.detach().clone()
    mask = batch["action_mask"]
    logp_old = batch["logp_old"] + 0.3 * torch.randn(P, B, generator=g)  # rho != 1
    adv = torch.randn(P, B, generator=g)
    args = (net, batch["obs"], batch["actions"], logp_old, adv, flat_old)
    fast = compiled.Compiled().policy_gradient(*args, action_mask=mask)
    slow = ClosedForm().policy_gradient(*args, action_mask=mask)
    for a, b, name in zip(fast, slow, ("g", "L", "old_out"), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=name)
    torch.testing.assert_close(fast[2], batch["old_out"], rtol=1e-5, atol=1e-5)
    assert float(fast[0][:, never_columns(net)].abs().max()) == 0.0
    assert float(fast[0][:, net.critic_slice].abs().max()) == 0.0
    assert float(fast[0].abs().max()) > 1e-3
    unmasked = compiled.Compiled().policy_gradient(*args)
    assert float((unmasked[0] - fast[0]).abs().max()) > 1e-4
    cand = flat_old + 0.3 * torch.randn(flat_old.shape, generator=g)
    cfg = make_config("trpo", env_id="CartPole-v1")
    got = {}
    for name, backend in (("compiled", compiled.Compiled()), ("torch", ClosedForm())):
        algo = TRPO(net, cfg, backend, torch.zeros(P, 2, dtype=torch.int64))
        got[name] = algo._surrogate_kl(batch, adv, batch["old_out"], flat_old, cand)
    for a, b in zip(got["compiled"], got["torch"], strict=True):
        assert a.dtype == b.dtype and a.shape == (P,)
        torch.testing.assert_close(a, b, rtol=2e-5, atol=2e-6)
    with torch.no_grad():
        raw_new, raw_old = net.actor(batch["obs"], net.views(cand)), net.actor(batch["obs"])
    for p in range(P):
        _, kl = enumerated(raw_old[p].double(), raw_new[p].double(), mask[p],
                           batch["actions"][p])
        assert float(got["compiled"][1][p]) == pytest.approx(float(kl.mean()), rel=1e-4)


def test_masked_compiled_fisher_product_needs_no_mask():
    """The compiled Fisher-vector product reads no mask: given pi_old's masked logits (whose
    probabilities are 0 on the invalid actions) it equals the autograd Hessian of the mean
    KL over the valid actions (autograd masking the new logits too), 3 members; from the
    unmasked logits it differs (so the test can fail)."""
    P, B = 3, 40
    pols, g, batch = masked_members((16, 8), "tanh", P, B, 7)
    net = PopActorCritic.from_policies(pols, "cpu")
    flat_old = net.flat.detach().clone()
    v = torch.randn(flat_old.shape, generator=g) * net.actor_mask
    obs, old_out, mask = batch["obs"], batch["old_out"], batch["action_mask"]
    fast = compiled.Compiled().fisher_product(net, obs, old_out, flat_old, 0.1,
                                              action_mask=mask)(v)
    truth = Autograd().fisher_product(net, obs, old_out, flat_old, 0.1, action_mask=mask)(v)
    torch.testing.assert_close(fast, truth, rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        raw = net.actor(obs)
    unmasked = compiled.Compiled().fisher_product(net, obs, raw, flat_old, 0.1)(v)
    assert float((unmasked - fast).abs().max()) > 1e-3


@pytest.mark.parametrize("algo", ["ppo", "trpo"])
def test_a_masked_run_takes_the_compiled_kernels(algo, capsys):
    """A masked run with grad_backend auto (Numba installed) trains on the compiled backend
    and says nothing about it; its first iterations equal the closed-form run's (same seed;
    one learner after the other: they share torch's random stream) to float rounding, 2
    seeds."""
    def run(seed, backend):  # type: ignore[no-untyped-def]
        cfg = (small("MaskedPick-v0", seed=seed, grad_backend=backend) if algo == "ppo"
               else trpo(seed, grad_backend=backend))
        learner = GymLearner(cfg)
        rows = [learner.iterate()[0][0] for _ in range(2)]
        return learner, rows

    for seed in (0, 1):
        (fast, rf), (slow, rs) = run(seed, "auto"), run(seed, "closed-form")
        assert fast.algo.backend.name == "compiled"
        assert "note" not in capsys.readouterr().err
        for a, b in zip(rf, rs, strict=True):
            for k in ("value_loss", "approx_kl", "kl_exact", "entropy", "clip_fraction"):
                assert a[k] == pytest.approx(b[k], rel=2e-3, abs=2e-5), (k, seed)
        torch.testing.assert_close(fast.net.flat, slow.net.flat, rtol=1e-3, atol=1e-4)
