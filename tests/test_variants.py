"""PPO's variants and a user's subclass on every backend: an objective written over the array
namespace runs compiled (its own source, bound by trustrl.compute.compiled.ppo.epochs_kernel) and
equals autograd; torch-only code runs eagerly and the run says so in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trustrl.algos import make_algorithm
from trustrl.algos.spo import spo_objective, spo_objective_grad
from trustrl.compute import compiled
from trustrl.compute.backends import Autograd, ClosedForm
from trustrl.maths import rng
from trustrl.nets.policies import ActionSpec, ActorCritic
from trustrl.nets.popnet import PopActorCritic
from trustrl.settings.config import make_config

needs_numba = pytest.mark.skipif(not compiled.available(), reason="needs trustrl[compiled]")
HERE = Path(__file__).parent


@pytest.mark.parametrize("eps", [0.1, 0.2, 0.35])
def test_spo_objective_grad_is_its_derivative_and_tops_on_the_band_edge(eps):
    g = torch.Generator().manual_seed(0)
    ratio = (0.3 + 1.4 * torch.rand(500, generator=g, dtype=torch.float64)).requires_grad_()
    adv = torch.randn(500, generator=g, dtype=torch.float64)
    (d,) = torch.autograd.grad(spo_objective(ratio, adv, eps).sum(), ratio)
    torch.testing.assert_close(spo_objective_grad(ratio.detach(), adv, eps), d)
    top = 1.0 + torch.sign(adv) * eps  # the parabola's top: PPO's band edge
    assert float(spo_objective_grad(top, adv, eps).abs().max()) < 1e-12
    # and it is a maximum: the objective there beats any other ratio
    grid = torch.linspace(0.0, 2.0, 401, dtype=torch.float64)[:, None]
    assert bool((spo_objective(grid, adv, eps) <= spo_objective(top, adv, eps) + 1e-12).all())


def _batch(kind: str, seed: int):
    action = ActionSpec("discrete", n=3) if kind == "discrete" else ActionSpec(
        "box", dim=2, low=(-1.0, -1.0), high=(1.0, 1.0))
    torch.manual_seed(seed)
    pols = [ActorCritic(4, action, (16,), "tanh", log_std_init=-0.3 * i) for i in range(2)]
    P, N = 2, 64
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(P, N, 4, generator=g)
    net0 = PopActorCritic.from_policies(pols, "cpu")
    with torch.no_grad():
        out = net0.actor(obs)
        actions = (torch.randint(0, 3, (P, N), generator=g) if kind == "discrete"
                   else out + torch.randn(P, N, 2, generator=g))
        batch = {"obs": obs, "actions": actions,
                 "logp_old": net0.log_prob(out, actions) + 0.3 * torch.randn(P, N, generator=g),
                 "values_old": net0.critic(obs), "advantages": torch.randn(P, N, generator=g),
                 "returns": torch.randn(P, N, generator=g)}
    return pols, batch


def _update(algo: str, backend, pols, batch, **sets):
    net = PopActorCritic.from_policies(pols, "cpu")
    cfg = make_config(algo, "CartPole-v1", None,
                      {"num_steps": "64", "num_envs": "1", "minibatch_size": "32",
                       "update_epochs": "3", "ent_coef": "0.01", **sets}, {})
    alg = make_algorithm(cfg, net, backend, rng.shuffle_keys([0, 1]))
    ms = [alg.update(batch, c, alg.learning_rate(0.1 * c)) for c in range(2)]
    return alg, net.flat.detach().clone(), ms


@needs_numba
@pytest.mark.parametrize("kind", ["discrete", "box"])
@pytest.mark.parametrize("algo,sets", [("ppo-dualclip", {"dual_clip": "1.25"}), ("spo", {}),
                                       ("ppo-penalty", {"beta_init": "3.0"}),
                                       ("ppo", {"algo_class": "user_objective:CappedPPO"})])
def test_a_variants_objective_runs_compiled_and_equals_autograd(kind, algo, sets):
    """The update through the compiled kernel bound to the variant's objective (and, for
    ppo-penalty, its KL term), and through autograd (which differentiates the torch binding of
    the same source), 2 members, two updates (ppo-penalty's beta adapts between them): the
    same parameters and metrics to float rounding; the kernel ran (no eager note), and the
    objective mattered (PPO-clip's update lands elsewhere)."""
    pols, batch = _batch(kind, 3)
    ac, fc, mc = _update(algo, compiled.Compiled(), pols, batch, **sets)
    assert ac.eager_reason is None
    obj = ac.objective()
    assert (obj.fn, obj.grad) in compiled.ppo._KERNELS  # the kernel bound to this objective
    _, fa, ma = _update(algo, Autograd(), pols, batch, **sets)
    torch.testing.assert_close(fc, fa, rtol=1e-4, atol=2e-5)
    for a, b in zip(mc, ma, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5, msg=k)
    _, fp, _ = _update("ppo", Autograd(), pols, batch)
    assert float((fc - fp).abs().max()) > 1e-4


@needs_numba
@pytest.mark.parametrize("cls,why", [("TorchOnlyPPO", "does not compile"),
                                     ("OwnLossPPO", "OwnLossPPO.loss is torch code")])
def test_torch_code_runs_eagerly_and_the_run_says_so_once(cls, why, capsys):
    pols, batch = _batch("discrete", 5)
    ac, fc, mc = _update("ppo", compiled.Compiled(), pols, batch,
                         algo_class=f"user_objective:{cls}")
    err = capsys.readouterr().err.strip().splitlines()
    notes = [ln for ln in err if "runs eagerly" in ln]
    assert len(notes) == 1 and why in notes[0], err
    _, fe, _ = _update("ppo", ClosedForm(), pols, batch, algo_class=f"user_objective:{cls}")
    torch.testing.assert_close(fc, fe, rtol=1e-6, atol=1e-7)


def test_algo_class_from_the_python_api_records_its_import_path():
    import user_objective

    from trustrl.settings.config import PPOConfig

    cfg = PPOConfig(env_id="CartPole-v1", algo_class=user_objective.CappedPPO)
    assert cfg.algo_class == "user_objective:CappedPPO"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trustrl", "train", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("path,message", [
    ("user_objective:NotAnAlgorithm", "is not a subclass of trustrl.algos.ppo.PPO"),
    ("user_objective:Missing", "has no attribute 'Missing'"),
    ("no_such_module_xyz:PPO", "cannot import module"),
])
def test_a_bad_algo_class_is_one_line(path, message, tmp_path):
    p = _cli("--total-steps", "512", "--runs-dir", str(tmp_path), "--quiet",
             "--set", f"algo_class={path}", "--set", "tensorboard=false", cwd=HERE)
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], p.stderr


def test_a_users_subclass_trains_from_the_cli(tmp_path):
    p = _cli("--total-steps", "1024", "--runs-dir", str(tmp_path), "--quiet",
             "--set", "algo_class=user_objective:CappedPPO", "--set", "tensorboard=false",
             "--set", "eval_episodes=1", cwd=HERE)
    assert p.returncode == 0, p.stderr
    run = Path(next(ln for ln in p.stdout.splitlines() if ln.startswith("run: "))[5:])
    assert json.loads((run / "config.json").read_text())["algo_class"] == \
        "user_objective:CappedPPO"
    assert "runs eagerly" not in p.stderr


@needs_numba
def test_the_batched_learner_falls_back_from_the_fused_iteration_with_one_note(capsys):
    """A torch-only objective on the batched learner: the fused iteration is tried, its
    typing fails before anything ran, and the learner goes on unfused and eager, with one
    note; its metrics equal a run on the eager closed form."""
    from trustrl.learn.learners import BatchedLearner

    def run(backend):
        cfg = make_config("ppo", env_id="CartPole-v1", sets={
            "num_envs": 2, "num_steps": 32, "eval_every": 0, "grad_backend": backend,
            "algo_class": "user_objective:TorchOnlyPPO"})
        learner = BatchedLearner(cfg, [0])
        fused = learner.fused
        return learner, fused, torch.stack([learner.step()[0] for _ in range(2)])

    lc, fused, mc = run("compiled")
    notes = [ln for ln in capsys.readouterr().err.splitlines() if "runs eagerly" in ln]
    assert fused and not lc.fused and lc.collector.rollout_kind == "compiled"
    assert len(notes) == 1, notes
    _, _, me = run("closed-form")  # the NumPy rollout: equal to the compiled one to rounding
    torch.testing.assert_close(mc, me, rtol=1e-4, atol=1e-5, equal_nan=True)
