"""One source per concept: every binding of an array function runs the source's own code.

The fast paths must compile the algorithm's code, not rewrite it (issue "One source,
compiled"). For each concept written once over an array namespace, the NumPy binding and the
Numba binding hold functions whose code object *is* the source function's: a hand-written copy
in a binding fails here, whatever numbers it computes.
"""

from __future__ import annotations

import numpy as np
import pytest

from trustrl import advantages


def test_gae_numpy_binding_runs_the_source():
    assert advantages._NUMPY.gae_into.__code__ is advantages.gae_into.__code__
    assert advantages._NUMPY.gae_step.__code__ is advantages.gae_step.__code__
    assert advantages._NUMPY.o.__name__ == "numpy"


def test_gae_compiled_binding_runs_the_source():
    pytest.importorskip("numba")
    from trustrl import compiled
    from trustrl.compiled import iteration, kernels

    assert kernels.gae_into.py_func.__code__ is advantages.gae_into.__code__
    step = kernels.gae_into.py_func.__globals__["gae_step"]  # the elementwise form it calls
    assert step.__wrapped__.py_func.__code__ is advantages.gae_step.__code__
    assert compiled._kernels()["gae"] is kernels.gae_into
    assert iteration.gae_into is kernels.gae_into  # the fused iteration calls the same one


def test_running_moments_bindings_run_the_source():
    from trustrl import batched, normalize
    from trustrl.envs import step

    assert normalize.fold_moments_torch.__code__ is normalize.fold_moments.__code__
    assert normalize._TORCH.o.__name__ == "torch"
    assert step.fold_moments is normalize.fold_moments  # the NumPy rollout's step
    assert step.TORCH.fold_moments is normalize.fold_moments_torch  # the torch rollout's
    assert batched.fold_moments_torch is normalize.fold_moments_torch  # the first obs'
    pytest.importorskip("numba")
    from trustrl.compiled import rollout

    assert rollout.fold_moments.py_func.__code__ is normalize.fold_moments.__code__
    assert rollout.STEP.fold_moments is rollout.fold_moments  # the compiled rollout's step


def test_observation_normalisation_bindings_run_the_source():
    from trustrl import normalize
    from trustrl.envs import step

    assert normalize.normalized_torch.__code__ is normalize.normalized.__code__
    assert step.normalized is normalize.normalized  # the NumPy rollout's
    assert step.TORCH.normalized is normalize.normalized_torch  # the torch rollout's
    pytest.importorskip("numba")
    from trustrl.compiled import rollout

    assert rollout.normalized.py_func.__code__ is normalize.normalized.__code__
    assert rollout.STEP.normalized is rollout.normalized


def test_adam_compiled_binding_runs_the_source():
    from trustrl import optim

    pytest.importorskip("numba")
    from trustrl.compiled import kernels

    assert kernels.adam_step.py_func.__code__ is optim.adam_step.__code__
    assert kernels.adam_.py_func.__globals__["adam_step"] is kernels.adam_step


GAUSSIAN = ("gaussian_log_density", "gaussian_entropy_density", "gaussian_kl_density",
            "gaussian_var_ratio")


def test_gaussian_densities_compiled_binding_runs_the_source():
    """The compiled rollouts, PPO's epochs and the diagnostics call the densities the torch
    and NumPy paths call (trustrl.distributions), compiled from their source."""
    from trustrl import distributions

    pytest.importorskip("numba")
    from trustrl.compiled import kernels, ppo, rollout

    for name in GAUSSIAN:
        assert getattr(kernels, name).py_func.__code__ is getattr(distributions, name).__code__
    assert rollout.gaussian_log_density is kernels.gaussian_log_density
    assert ppo.gaussian_log_density is kernels.gaussian_log_density
    assert ppo.gaussian_entropy_density is kernels.gaussian_entropy_density


CATEGORICAL = ("log_softmax", "categorical_entropy", "categorical_kl")


def test_categorical_bindings_run_the_source():
    """The categorical's log-softmax, entropy and KL: torch (Categorical, popnet) calls the
    source's entropy and KL and torch's fused log-softmax (masked_log_softmax); the compiled
    rollouts, PPO's epochs and the diagnostics call the source compiled."""
    from trustrl import distributions, popnet

    assert popnet.categorical_entropy is distributions.categorical_entropy
    assert popnet.categorical_kl is distributions.categorical_kl
    assert popnet.masked_log_softmax is distributions.masked_log_softmax
    from trustrl.envs import step  # the rollouts' step: the source bound to NumPy, torch's

    assert step.log_softmax.__code__ is distributions.log_softmax.__code__
    assert step.log_softmax.__globals__["o"] is np
    assert step.TORCH.log_softmax is distributions.masked_log_softmax
    pytest.importorskip("numba")
    from trustrl.compiled import kernels, ppo, rollout

    for name in CATEGORICAL:
        assert getattr(kernels, name).py_func.__code__ is getattr(distributions, name).__code__
        assert kernels.ppo_diagnostics.py_func.__globals__[name] is getattr(kernels, name)
    assert rollout.log_softmax is kernels.log_softmax
    assert rollout.STEP.log_softmax is kernels.log_softmax  # the compiled rollout's step
    assert rollout.categorical_step.py_func.__globals__["log_softmax"] is kernels.log_softmax
    epochs = ppo.ppo_epochs.__globals__
    for name in CATEGORICAL:
        assert epochs[name] is getattr(kernels, name)


def test_no_log_softmax_written_out_in_the_policy_code():
    """The RL core's log-softmax is distributions' (the source, or torch's fused kernel
    through masked_log_softmax): no hand-written one in popnet, backends, batched or compiled/
    (five were there)."""
    import re
    from pathlib import Path

    import trustrl

    root = Path(trustrl.__file__).parent
    files = [root / "popnet.py", root / "backends.py", root / "batched.py",
             *sorted((root / "compiled").glob("*.py"))]
    written = re.compile(r"torch\.log_softmax|def _?log_softmax|np\.log\(s[eo]?\)|\blse\b")
    assert [p.name for p in files if written.search(p.read_text())] == []


def test_no_gaussian_log_density_written_out_elsewhere():
    """The Gaussian's normalising constant log(2 pi) / 2 appears in one module: a copy of the
    density written out anywhere else (as the eight there were) would name it again."""
    import re
    from pathlib import Path

    import trustrl

    root = Path(trustrl.__file__).parent
    constant = re.compile(r"log\(2(\.0)? \* (math|np|torch)\.pi\)")
    hits = sorted(str(p.relative_to(root)) for p in root.rglob("*.py")
                  if constant.search(p.read_text()))
    assert hits == ["distributions.py"]


def test_learner_metrics_compiled_binding_runs_the_source():
    """The fused iteration's episode and critic metrics are diagnostics' own functions (the
    batched learner's), compiled."""
    from trustrl import diagnostics

    pytest.importorskip("numba")
    from trustrl.compiled import iteration

    for name in ("critic_stats", "episode_stats"):
        assert getattr(iteration, name).py_func.__code__ is getattr(diagnostics, name).__code__


def test_conjugate_gradient_compiled_binding_runs_the_source():
    """TRPO's and NPG's CG: the compiled loop is trust.cg.cg_steps's own code, its product the
    compiled Fisher-vector product."""
    from trustrl.trust import cg

    pytest.importorskip("numba")
    from trustrl import compiled
    from trustrl.compiled import kernels

    assert kernels.cg_steps.py_func.__code__ is cg.cg_steps.__code__
    assert kernels.cg_steps.py_func.__globals__["product"] is kernels.fisher_product_of
    assert compiled._kernels()["cg_steps"] is kernels.cg_steps


STEP = ("observation_input", "categorical_sample", "gaussian_sample", "policy_env_step")


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_batched_rollout_step_bindings_run_the_source(env_id):
    """One step of the batched collector (sampling, log-prob, env step, trackers,
    normalisers) is trustrl.envs.step's: the torch rollout, the NumPy rollout and the compiled
    rollout each call a copy of `policy_env_step` running the source's code object, with the
    env's transition and the action kind's sampler (itself the source's) as its globals."""
    from trustrl.envs import classic, step
    from trustrl.envs.numpy_classic import make_numpy_dynamics
    from trustrl.envs.torch_classic import make_torch_env

    discrete = classic.DYNAMICS[env_id].action_kind == "discrete"
    sampler = "categorical_sample" if discrete else "gaussian_sample"
    for name in STEP:
        assert getattr(step.TORCH, name).__code__ is getattr(step, name).__code__
    dyn_np = make_numpy_dynamics(env_id)
    dyn_torch = make_torch_env(env_id, 2).dyn
    for binding, dyn in ((step, dyn_np), (step.TORCH, dyn_torch)):
        f = step.bind(binding, dyn._transition, discrete)
        assert f.__code__ is step.policy_env_step.__code__
        assert f.__globals__["transition"] is dyn._transition
        assert f.__globals__["sample"] is getattr(binding, sampler)
        assert f.__globals__["sample"].__code__ is getattr(step, sampler).__code__
    pytest.importorskip("numba")
    from trustrl.compiled import compiled_dynamics, rollout

    for name in STEP:
        assert getattr(rollout.STEP, name).py_func.__code__ is getattr(step, name).__code__
    dyn = compiled_dynamics(env_id)
    run = rollout.bind(dyn).py_func
    assert run.__code__ is rollout.rollout.__code__
    f = run.__globals__["policy_env_step"]
    assert f.py_func.__code__ is step.policy_env_step.__code__
    assert f.py_func.__globals__["transition"] is dyn.functions["transition"]
    assert f.py_func.__globals__["sample"] is getattr(rollout.STEP, sampler)
    assert run.__globals__["observation_input"] is rollout.STEP.observation_input


def test_no_rollout_step_written_out_in_the_rollouts():
    """The rollouts' loops call the step and write its records; none samples, steps an env,
    tracks episodes or folds a normaliser itself (the NumPy and the compiled rollout each did,
    beside the torch step)."""
    from trustrl import batched

    step_names = {"transition", "fold_moments", "normalized", "gaussian_log_density",
                  "log_softmax", "log_softmax_numpy", "argmax", "where", "_chan", "_normalize",
                  "fold_moments_torch", "normalized_torch"}
    codes = [batched.BatchedCollector._numpy_rollout.__code__,
             batched.BatchedCollector._policy_env_step.__code__]
    try:
        from trustrl.compiled import rollout
    except ImportError:
        pass
    else:
        codes.append(rollout.rollout.__code__)
    for code in codes:
        assert not step_names & set(code.co_names), code.co_name
