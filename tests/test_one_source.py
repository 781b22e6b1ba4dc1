"""One source per concept: every binding of an array function runs the source's own code.

The fast paths must compile the algorithm's code, not rewrite it (issue "One source,
compiled"). For each concept written once over an array namespace, the NumPy binding and the
Numba binding hold functions whose code object *is* the source function's: a hand-written copy
in a binding fails here, whatever numbers it computes.
"""

from __future__ import annotations

import ast
import inspect

import numpy as np
import pytest

from trustrl.maths import advantages


def test_gae_numpy_binding_runs_the_source():
    assert advantages._NUMPY.gae_into.__code__ is advantages.gae_into.__code__
    assert advantages._NUMPY.gae_step.__code__ is advantages.gae_step.__code__
    assert advantages._NUMPY.o.__name__ == "numpy"


def test_gae_compiled_binding_runs_the_source():
    pytest.importorskip("numba")
    from trustrl.compute import compiled
    from trustrl.compute.compiled import iteration, kernels

    assert kernels.gae_into.py_func.__code__ is advantages.gae_into.__code__
    step = kernels.gae_into.py_func.__globals__["gae_step"]  # the elementwise form it calls
    assert step.__wrapped__.py_func.__code__ is advantages.gae_step.__code__
    assert compiled._kernels()["gae"] is kernels.gae_into
    assert iteration.gae_into is kernels.gae_into  # the fused iteration calls the same one


def test_running_moments_bindings_run_the_source():
    from trustrl.collect import batched
    from trustrl.envs import step
    from trustrl.maths import normalize

    assert normalize.fold_moments_torch.__code__ is normalize.fold_moments.__code__
    assert normalize._TORCH.o.__name__ == "torch"
    assert step.fold_moments is normalize.fold_moments  # the NumPy rollout's step
    assert step.TORCH.fold_moments is normalize.fold_moments_torch  # the torch rollout's
    assert batched.fold_moments_torch is normalize.fold_moments_torch  # the first obs'
    pytest.importorskip("numba")
    from trustrl.compute.compiled import rollout

    assert rollout.fold_moments.py_func.__code__ is normalize.fold_moments.__code__
    assert rollout.STEP.fold_moments is rollout.fold_moments  # the compiled rollout's step


def test_observation_normalisation_bindings_run_the_source():
    from trustrl.envs import step
    from trustrl.maths import normalize

    assert normalize.normalized_torch.__code__ is normalize.normalized.__code__
    assert step.normalized is normalize.normalized  # the NumPy rollout's
    assert step.TORCH.normalized is normalize.normalized_torch  # the torch rollout's
    pytest.importorskip("numba")
    from trustrl.compute.compiled import rollout

    assert rollout.normalized.py_func.__code__ is normalize.normalized.__code__
    assert rollout.STEP.normalized is rollout.normalized


def test_adam_compiled_binding_runs_the_source():
    from trustrl.maths import optim

    pytest.importorskip("numba")
    from trustrl.compute.compiled import kernels

    assert kernels.adam_step.py_func.__code__ is optim.adam_step.__code__
    assert kernels.adam_.py_func.__globals__["adam_step"] is kernels.adam_step


def test_trpos_compiled_line_search_runs_the_surrogates_source():
    """TRPO's compiled line-search evaluation (kernels.surrogate_kl) takes rho A from
    losses.surrogate_objective's code, and the log-probabilities and KL from the kernel the
    diagnostics read (one forward pass and distribution code for both)."""
    from trustrl.maths import losses

    pytest.importorskip("numba")
    from trustrl.compute.compiled import kernels

    assert kernels.surrogate_objective.py_func.__code__ is losses.surrogate_objective.__code__
    g = kernels.surrogate_kl.py_func.__globals__
    assert g["surrogate_objective"] is kernels.surrogate_objective
    assert g["actor_log_probs"] is kernels.actor_log_probs
    assert kernels.ppo_diagnostics.py_func.__globals__["actor_log_probs"] is (
        kernels.actor_log_probs)


def test_trpos_line_search_compiled_binding_runs_the_source():
    """TRPO's backtracking line search: the compiled loop is trust.line_search's own
    line_search_steps, its evaluation the compiled surrogate_kl; the eager search runs the
    same function."""
    from trustrl.maths.trust import line_search

    assert "line_search_steps" in inspect.unwrap(
        line_search.population_line_search).__code__.co_names
    pytest.importorskip("numba")
    from trustrl.compute import compiled
    from trustrl.compute.compiled import kernels

    assert kernels.line_search_steps.py_func.__code__ is line_search.line_search_steps.__code__
    assert kernels.line_search_steps.py_func.__globals__["evaluate"] is kernels.surrogate_kl_of
    assert kernels.surrogate_kl_of.py_func.__globals__["surrogate_kl"] is kernels.surrogate_kl
    assert compiled._kernels()["line_search"] is kernels.line_search_steps


def test_trpos_ratio_and_surrogate_are_the_losses_functions_everywhere():
    """TRPO's and NPG's rho = exp(logp - logp_old) and rho A, in every path that computes
    them: the torch line search (TRPO._surrogate_kl), both gradient backends'
    policy_gradient, and the compiled kernels (surrogate_kl, policy_gradient) call
    trustrl.maths.losses' policy_ratio and surrogate_objective (compiled from their code), and
    none of them writes an exp of its own."""
    from trustrl.algos import trpo
    from trustrl.compute import backends
    from trustrl.maths import losses

    torch_paths = (trpo.TRPO._surrogate_kl, backends.Autograd.policy_gradient,
                   backends.ClosedForm.policy_gradient)
    for f in map(inspect.unwrap, torch_paths):  # through torch.no_grad's wrapper
        names = f.__code__.co_names
        assert "policy_ratio" in names and "surrogate_objective" in names, f.__qualname__
        assert "exp" not in names, f.__qualname__
        assert f.__globals__["policy_ratio"] is losses.policy_ratio
        assert f.__globals__["surrogate_objective"] is losses.surrogate_objective
    pytest.importorskip("numba")
    from trustrl.compute.compiled import kernels

    for name in ("policy_ratio", "surrogate_objective"):
        assert getattr(kernels, name).py_func.__code__ is getattr(losses, name).__code__
    for kernel in (kernels.surrogate_kl, kernels.policy_gradient):
        g = kernel.py_func.__globals__
        assert g["policy_ratio"] is kernels.policy_ratio
        assert g["surrogate_objective"] is kernels.surrogate_objective
        code = kernel.py_func.__code__
        assert "policy_ratio" in code.co_names, code.co_name
        # the kernels' own exps are others (inv_std, the softmax's probabilities), never
        # of anything with logp_old in it
        tree = ast.parse(inspect.getsource(kernel.py_func))
        exps = [c for c in ast.walk(tree) if isinstance(c, ast.Call)
                and isinstance(c.func, ast.Attribute | ast.Name)
                and getattr(c.func, "attr", getattr(c.func, "id", "")) == "exp"]
        assert not any("logp_old" in ast.unparse(c) for c in exps), code.co_name


def test_the_policy_gradients_gaussian_derivatives_are_written_once():
    """The Gaussian's derivatives in its mean and log-std: torch's closed form (popnet) and the
    compiled policy gradient (kernels.policy_gradient) both run distributions' code."""
    from trustrl.maths import distributions
    from trustrl.nets import popnet

    names = ("gaussian_logp_grad_mean", "gaussian_logp_grad_log_std")
    for name in names:
        assert vars(popnet)[name] is getattr(distributions, name)
    pytest.importorskip("numba")
    from trustrl.compute.compiled import kernels

    g = kernels.policy_gradient.py_func.__globals__
    for name in names:
        stub = getattr(kernels, name)  # the elementwise form
        assert stub.__wrapped__.py_func.__code__ is getattr(distributions, name).__code__
        assert g[name] is stub
    for name in ("surrogate_objective", "categorical_logp_grad", "mlp_output", "mlp_grads"):
        assert g[name] is getattr(kernels, name), name


GAUSSIAN = ("gaussian_log_density", "gaussian_entropy_density", "gaussian_kl_density",
            "gaussian_var_ratio")


def test_gaussian_densities_compiled_binding_runs_the_source():
    """The compiled rollouts, PPO's epochs and the diagnostics call the densities the torch
    and NumPy paths call (trustrl.maths.distributions), compiled from their source."""
    from trustrl.maths import distributions

    pytest.importorskip("numba")
    from trustrl.compute.compiled import kernels, ppo, rollout

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
    from trustrl.maths import distributions
    from trustrl.nets import popnet

    assert popnet.categorical_entropy is distributions.categorical_entropy
    assert popnet.categorical_kl is distributions.categorical_kl
    assert popnet.masked_log_softmax is distributions.masked_log_softmax
    from trustrl.envs import step  # the rollouts' step: the source bound to NumPy, torch's

    assert step.log_softmax.__code__ is distributions.log_softmax.__code__
    assert step.log_softmax.__globals__["o"] is np
    assert step.TORCH.log_softmax is distributions.masked_log_softmax
    pytest.importorskip("numba")
    from trustrl.compute.compiled import kernels, ppo, rollout

    for name in CATEGORICAL:
        assert getattr(kernels, name).py_func.__code__ is getattr(distributions, name).__code__
        assert kernels.ppo_diagnostics.py_func.__globals__[name] is getattr(kernels, name)
    assert rollout.log_softmax is kernels.log_softmax
    assert rollout.STEP.log_softmax is kernels.log_softmax  # the compiled rollout's step
    assert rollout.categorical_step.py_func.__globals__["log_softmax"] is kernels.log_softmax
    epochs = ppo.minibatch_step.__globals__  # PPO's compiled minibatch step
    for name in CATEGORICAL:
        assert epochs[name] is getattr(kernels, name)


def test_action_masks_bindings_run_the_source():
    """The masking of a batch's logits (invalid actions at MASKED_LOGIT): torch's callers (the
    backends, TRPO's line search, the diagnostics) call distributions.mask_logits, and the
    compiled kernels (PPO's minibatch step, the diagnostics, TRPO's policy gradient and line
    search) its own code compiled over the compiled namespace: no copy of the masking in
    compiled/."""
    from trustrl.algos import common, trpo
    from trustrl.compute import backends
    from trustrl.maths import distributions

    for module in (backends, trpo, common):
        assert module.mask_logits is distributions.mask_logits, module.__name__
    pytest.importorskip("numba")
    from trustrl.compute.compiled import kernels, ppo, xp

    assert kernels.mask_logits.py_func.__code__ is distributions.mask_logits.__code__
    assert kernels.mask_logits.py_func.__globals__["o"] is xp
    assert kernels.masked.py_func.__globals__["mask_logits"] is kernels.mask_logits
    for kernel in (kernels.actor_log_probs, kernels.policy_gradient):
        assert kernel.py_func.__globals__["masked"] is kernels.masked
    assert ppo.minibatch_step.__globals__["mask_logits"] is kernels.mask_logits


CATEGORICAL_GRADS = ("categorical_logp_grad", "categorical_entropy_grad", "categorical_kl_grad")


def test_categorical_derivatives_bindings_run_the_source():
    """d log p(a) / d logits, the entropy's and the KL's gradients in the logits: the closed
    form's torch code (popnet) and PPO's compiled epochs call distributions' functions, the
    compiled ones elementwise forms of the source's code."""
    from trustrl.maths import distributions
    from trustrl.nets import popnet

    for name in CATEGORICAL_GRADS:
        assert getattr(popnet, name) is getattr(distributions, name)
    pytest.importorskip("numba")
    from trustrl.compute.compiled import kernels, ppo

    for name in CATEGORICAL_GRADS:
        stub = getattr(kernels, name)
        assert stub.__wrapped__.py_func.__code__ is getattr(distributions, name).__code__
        assert ppo.minibatch_step.__globals__[name] is stub


def test_no_categorical_derivative_written_out_in_the_policy_code():
    """No hand-written copy of those derivatives beside their calls (popnet and PPO's epochs
    each had one): onehot minus p, or p times (log p + H)."""
    import re
    from pathlib import Path

    import trustrl

    root = Path(trustrl.__file__).parent
    files = [root / "nets" / "popnet.py", root / "compute" / "backends.py",
             *sorted((root / "compute" / "compiled").glob("*.py"))]
    written = re.compile(r"\(onehot - |\* \(\w+(\[i, k\])? \+ ent")
    assert [p.name for p in files if written.search(p.read_text())] == []


MLP_CHAIN_RULE = ("activation_grad", "mlp_hidden_outputs", "mlp_output", "mlp_hidden_grads",
                  "mlp_grads", "mlp_jvp")


def test_mlp_chain_rule_bindings_run_the_source():
    """The MLP's forward pass, gradient and forward-mode (Fisher) product are popnet's
    functions: the torch network's methods call them (the closed form, TRPO's products), and
    the compiled kernels (PPO's epochs, the critic fit, the Fisher product, the rollouts'
    forward pass) call them compiled, with the compiled products as their free globals."""
    from trustrl.nets import popnet

    net = popnet.PopActorCritic
    for method, name in ((net._mlp, "mlp_output"), (net.mlp_forward, "mlp_output"),
                         (net.mlp_backward, "mlp_grads"), (net.actor_jvp, "mlp_jvp")):
        assert name in method.__code__.co_names, method.__name__
    pytest.importorskip("numba")
    from trustrl.compute.compiled import kernels, ppo

    for name in MLP_CHAIN_RULE:
        compiled = getattr(kernels._MLP, name)
        if name == "activation_grad":  # bound elementwise: one loop over the scalar form
            compiled = compiled.__wrapped__
        assert compiled.py_func.__code__ is getattr(popnet, name).__code__
    bound = vars(kernels._MLP)
    assert bound["affine"] is kernels.dense and bound["linear"] is kernels.linear
    assert bound["linear_t"] is kernels.linear_t and bound["layer_grad"] is kernels.layer_grad
    assert bound["activate"] is kernels.activation
    for kernel, names in ((kernels.mlp_forward, {"mlp_hidden_outputs"}),
                          (kernels.mlp_out, {"mlp_output"}),
                          (kernels.mlp_backward_hidden, {"mlp_hidden_grads"}),
                          (kernels.critic_fit, {"mlp_output", "mlp_grads"}),
                          (kernels.actor_fisher_product, {"mlp_jvp", "mlp_grads"})):
        assert names <= set(kernel.py_func.__code__.co_names), kernel.py_func.__name__
        for name in names:
            assert kernel.py_func.__globals__[name] is getattr(kernels._MLP, name)
    # PPO's minibatch step runs both networks, output layers included, through the chain
    # rule: no product of its own (np.dot, dot_tn) is left in it
    step = ppo.minibatch_step
    assert {"mlp_output", "mlp_grads"} <= set(step.__code__.co_names)
    for name in ("mlp_output", "mlp_grads"):
        assert step.__globals__[name] is getattr(kernels._MLP, name)
    assert not {"dot", "dot_tn", "mlp_forward", "mlp_backward_hidden"} & set(
        step.__code__.co_names)


def test_no_activation_derivative_written_out_beside_the_chain_rule():
    """tanh' and ReLU' are written once (popnet.activation_grad): the closed form's torch
    code and the compiled kernels hold no copy of them (popnet's methods, kernels' backward
    and Fisher product each had one)."""
    import inspect
    import re
    from pathlib import Path

    import trustrl
    from trustrl.nets import popnet

    root = Path(trustrl.__file__).parent
    files = [root / "compute" / "backends.py",
             *sorted((root / "compute" / "compiled").glob("*.py"))]
    written = re.compile(r"addcmul|\* h(\[i, k\])? \* h\b|\bh(\[i, k\])? > 0")
    texts = {p.name: p.read_text() for p in files}
    texts["PopActorCritic"] = inspect.getsource(popnet.PopActorCritic)
    assert [name for name, text in texts.items() if written.search(text)] == []


def test_no_log_softmax_written_out_in_the_policy_code():
    """The RL core's log-softmax is distributions' (the source, or torch's fused kernel
    through masked_log_softmax): no hand-written one in popnet, backends, batched or compiled/
    (five were there)."""
    import re
    from pathlib import Path

    import trustrl

    root = Path(trustrl.__file__).parent
    files = [root / "nets" / "popnet.py", root / "compute" / "backends.py",
             root / "collect" / "batched.py",
             *sorted((root / "compute" / "compiled").glob("*.py"))]
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
    assert hits == ["maths/distributions.py"]


def test_learner_metrics_compiled_binding_runs_the_source():
    """The fused iteration's episode and critic metrics are diagnostics' own functions (the
    batched learner's), compiled."""
    from trustrl.maths import diagnostics

    pytest.importorskip("numba")
    from trustrl.compute.compiled import iteration

    for name in ("critic_stats", "episode_stats"):
        assert getattr(iteration, name).py_func.__code__ is getattr(diagnostics, name).__code__


def test_conjugate_gradient_compiled_binding_runs_the_source():
    """TRPO's and NPG's CG: the compiled loop is trust.cg.cg_steps's own code, its product the
    compiled Fisher-vector product."""
    from trustrl.maths.trust import cg

    pytest.importorskip("numba")
    from trustrl.compute import compiled
    from trustrl.compute.compiled import kernels

    assert kernels.cg_steps.py_func.__code__ is cg.cg_steps.__code__
    assert kernels.cg_steps.py_func.__globals__["product"] is kernels.fisher_product_of
    assert compiled._kernels()["cg_steps"] is kernels.cg_steps
    # the CG with x^T F x and the step size (TRPO's steps 3-4) in one compiled call: the
    # source's natural_step, calling the compiled cg_steps and product
    assert kernels.natural_step.py_func.__code__ is cg.natural_step.__code__
    assert kernels.natural_step.py_func.__globals__["cg_steps"] is kernels.cg_steps
    assert kernels.natural_step.py_func.__globals__["product"] is kernels.fisher_product_of
    assert compiled._kernels()["natural_step"] is kernels.natural_step


def test_ppo_epoch_loop_bindings_run_the_source(monkeypatch):
    """PPO's K-epoch loop, its KL stop and its minibatch slicing: PPO.update's eager epochs
    run trust.kl_control.k_epochs itself (torch, Python step and diagnostics), and the
    compiled epochs (PPO's update on the compiled backend and the fused iteration) its code
    object, bound to the compiled minibatch step and diagnostics."""
    import torch

    from trustrl.algos import make_algorithm
    from trustrl.algos import ppo as algos_ppo
    from trustrl.compute.backends import ClosedForm
    from trustrl.maths import rng
    from trustrl.maths.trust import kl_control
    from trustrl.nets.policies import ActionSpec, ActorCritic
    from trustrl.nets.popnet import PopActorCritic
    from trustrl.settings.config import make_config

    calls = []

    def spy(*args, **kw):
        calls.append(args[1].shape)
        return kl_control.k_epochs(*args, **kw)

    monkeypatch.setattr(algos_ppo, "k_epochs", spy)
    net = PopActorCritic.from_policies([ActorCritic(3, ActionSpec("discrete", n=2), (4,))], "cpu")
    cfg = make_config("ppo", "CartPole-v1", None, {"num_steps": "8", "num_envs": "1",
                                                   "minibatch_size": "4",
                                                   "update_epochs": "2"}, {})
    algo = make_algorithm(cfg, net, ClosedForm(), rng.shuffle_keys([0]))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        obs = torch.randn(1, 8, 3, generator=g)
        actions = torch.randint(0, 2, (1, 8), generator=g)
        batch = {"obs": obs, "actions": actions,
                 "logp_old": net.log_prob(net.actor(obs), actions),
                 "values_old": net.critic(obs), "advantages": torch.randn(1, 8, generator=g),
                 "returns": torch.randn(1, 8, generator=g)}
    m = algo.update(batch, 0, 1e-3)
    assert calls == [(2, 1, 8)] and float(m["epochs_run"][0]) == 2.0

    pytest.importorskip("numba")
    from trustrl.compute import compiled
    from trustrl.compute.compiled import ppo, xp
    from trustrl.maths import losses
    from trustrl.maths.losses import Objective

    kernel = ppo.epochs_kernel(losses.clipped_surrogate_objective,
                               losses.clipped_surrogate_objective_grad)
    assert kernel.py_func.__code__ is kl_control.k_epochs.__code__
    bound = kernel.py_func.__globals__
    assert bound["o"] is xp and bound["diagnose"].py_func.__code__ is ppo.approx_kl.__code__
    assert bound["step"].py_func.__code__ is ppo.minibatch_step.__code__
    assert compiled._kernels()["ppo_epochs"] is kernel
    fused = compiled.compiled_rollout("CartPole-v1").iteration(Objective(
        losses.clipped_surrogate_objective, losses.clipped_surrogate_objective_grad, (0.2,)))
    assert fused.py_func.__globals__["ppo_epochs"] is kernel
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
    from trustrl.compute.compiled import compiled_dynamics, rollout

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
    from trustrl.collect import batched

    step_names = {"transition", "fold_moments", "normalized", "gaussian_log_density",
                  "log_softmax", "log_softmax_numpy", "argmax", "where", "_chan", "_normalize",
                  "fold_moments_torch", "normalized_torch"}
    codes = [batched.BatchedCollector._numpy_rollout.__code__,
             batched.BatchedCollector._policy_env_step.__code__]
    try:
        from trustrl.compute.compiled import rollout
    except ImportError:
        pass
    else:
        codes.append(rollout.rollout.__code__)
    for code in codes:
        assert not step_names & set(code.co_names), code.co_name


def test_every_file_compiled_code_is_built_from_is_watched_for_stale_caches():
    """Numba's disk cache checks only a function's own file, so the package drops its cache
    when any file in compiled._SOURCES changes: every file whose code the compiled
    functions of trustrl.compute.compiled are built from must be listed there (a chain rule
    or a step compiled from nets/ or envs/ included)."""
    from pathlib import Path

    pytest.importorskip("numba")
    from numba.core.registry import CPUDispatcher

    from trustrl.compute import compiled
    from trustrl.compute.compiled import iteration, kernels, ppo, rollout

    root = Path(compiled.__file__).resolve().parents[2]
    seen = set()
    for module in (kernels, ppo, rollout, iteration):
        for value in vars(module).values():
            funcs = [value] if isinstance(value, CPUDispatcher) else [
                v for v in vars(value).values() if isinstance(v, CPUDispatcher)
            ] if hasattr(value, "__dict__") and not isinstance(value, type) else []
            for f in funcs:
                path = Path(f.py_func.__code__.co_filename).resolve()
                if root in path.parents:
                    seen.add(path.relative_to(root).as_posix())
    assert {"nets/popnet.py", "envs/step.py", "maths/losses.py"} <= seen  # the test sees them
    missing = sorted(seen - set(compiled._SOURCES))
    assert not missing, f"compiled code built from files not in _SOURCES: {missing}"
PPO_LOSS = ("policy_ratio", "ppo_loss", "ppo_loss_grads")


def test_ppo_loss_combination_bindings_run_the_source():
    """PPO's minibatch loss from its terms (the ratio, the means, the coefficients, the clip
    fraction, the KL penalty, and the derivatives in logp, V, H and the KL): PPO.loss calls
    trustrl.maths.losses' functions in torch, and the compiled minibatch step (the one the
    epoch kernel binds, per objective) calls them compiled from their source."""
    from trustrl.algos import ppo as algos_ppo
    from trustrl.maths import losses

    for name in PPO_LOSS:
        assert getattr(algos_ppo, name) is getattr(losses, name)
        assert name in algos_ppo.PPO.loss.__code__.co_names, name
    pytest.importorskip("numba")
    from trustrl.compute.compiled import ppo

    step = ppo.epochs_kernel(losses.clipped_surrogate_objective,
                             losses.clipped_surrogate_objective_grad).py_func.__globals__["step"]
    for name in PPO_LOSS:
        assert getattr(ppo, name).py_func.__code__ is getattr(losses, name).__code__
        assert name in ppo.minibatch_step.__code__.co_names, name
        assert step.py_func.__globals__[name] is getattr(ppo, name)
    assert step.py_func.__globals__["PPOCoefficients"] is losses.PPOCoefficients


def test_advantage_normalisation_bindings_run_the_source():
    """(A - mean) / (std + eps) over a minibatch: PPO.loss (through common's name for it) and
    the compiled minibatch step run trustrl.maths.advantages.normalize_advantages; the compiled
    one gives torch's numbers (float64 sums there, float32 in torch: to rounding)."""
    import torch

    from trustrl.algos import common
    from trustrl.algos import ppo as algos_ppo

    assert common.normalize_advantages is advantages.normalize_advantages
    assert algos_ppo.normalize_advantages is advantages.normalize_advantages
    assert "normalize_advantages" in algos_ppo.PPO.loss.__code__.co_names
    pytest.importorskip("numba")
    from trustrl.compute.compiled import ppo

    f = ppo.normalize_advantages
    assert f.py_func.__code__ is advantages.normalize_advantages.__code__
    assert ppo.minibatch_step.__globals__["normalize_advantages"] is f
    for seed in range(3):
        a = np.random.default_rng(seed).normal(2.0, 3.0, (1, 37)).astype(np.float32)
        want = advantages.normalize_advantages(torch.from_numpy(a)).numpy()
        np.testing.assert_allclose(f(a, np.float32(1e-8)), want, rtol=1e-5, atol=1e-6)
    one = np.ones((1, 1), np.float32)
    assert f(one, np.float32(1e-8)) is one  # a single sample is left as it is


def test_gradient_clip_bindings_run_the_source():
    """The global-norm clip's factor min(max_norm / (norm + eps), 1): common.clip_grad_norm
    and the compiled minibatch step run trustrl.maths.optim.clip_coefficient."""
    import torch

    from trustrl.algos import common
    from trustrl.maths import optim

    assert common.clip_coefficient is optim.clip_coefficient
    assert "clip_coefficient" in common.clip_grad_norm.__code__.co_names
    g = torch.tensor([[3.0, 4.0], [0.3, 0.4]])
    clipped, norm = common.clip_grad_norm(g, 1.0)
    torch.testing.assert_close(norm, torch.tensor([5.0, 0.5]))
    torch.testing.assert_close(clipped, torch.tensor([[0.6, 0.8], [0.3, 0.4]]), rtol=1e-5,
                               atol=1e-6)
    pytest.importorskip("numba")
    from trustrl.compute.compiled import ppo

    f = ppo.clip_coefficient
    assert f.py_func.__code__ is optim.clip_coefficient.__code__
    assert ppo.minibatch_step.__globals__["clip_coefficient"] is f
    f32 = np.float32
    assert f(f32(5.0), f32(1.0), f32(1e-6), f32(1.0)) == f32(1.0) / (f32(5.0) + f32(1e-6))
    assert f(f32(0.5), f32(1.0), f32(1e-6), f32(1.0)) == f32(1.0)


def test_gaussian_derivatives_bindings_run_the_source():
    """The diagonal Gaussian's derivatives of the log-prob, the entropy and the KL in its mean
    and log-std: the closed form's torch code (popnet) and PPO's compiled minibatch step call
    trustrl.maths.distributions' functions, the compiled ones elementwise forms of the
    source's code."""
    from trustrl.maths import distributions
    from trustrl.nets import popnet

    uses = {"log_prob_backward": {"gaussian_logp_grad_mean", "gaussian_logp_grad_log_std"},
            "entropy_backward": {"gaussian_entropy_grad_log_std"},
            "kl_backward": {"gaussian_kl_grad_mean", "gaussian_kl_grad_log_std"}}
    for method, names in uses.items():
        assert names <= set(getattr(popnet.PopNet, method).__code__.co_names), method
    for name in distributions.GAUSSIAN_GRADS:
        assert getattr(popnet, name) is getattr(distributions, name)
    pytest.importorskip("numba")
    from trustrl.compute.compiled import kernels, ppo

    for name in distributions.GAUSSIAN_GRADS:
        stub = getattr(kernels, name)
        assert stub.__wrapped__.py_func.__code__ is getattr(distributions, name).__code__
        assert name in ppo.minibatch_step.__code__.co_names, name
        assert ppo.minibatch_step.__globals__[name] is stub


def test_no_gaussian_derivative_written_out_in_the_policy_code():
    """No hand-written copy of those derivatives beside their calls (popnet and PPO's
    compiled step each had one): z^2 - 1, or var_old + diff^2."""
    import re
    from pathlib import Path

    import trustrl

    root = Path(trustrl.__file__).parent
    files = [root / "nets" / "popnet.py", root / "compute" / "backends.py",
             *sorted((root / "compute" / "compiled").glob("*.py"))]
    written = re.compile(r"z \* z - |\+ diff \* diff")
    assert [p.name for p in files if written.search(p.read_text())] == []
