"""PPO's epochs of minibatch steps as one compiled call (Numba): trustrl.maths.trust.kl_control's
`k_epochs` (the K-epoch loop with its KL stop, the code PPO.update runs eagerly) compiled by
`epochs_kernel`, its `step` this module's `minibatch_step` and its `diagnose` `approx_kl`.

`minibatch_step` composes compiled one-source functions, for each member still active on its
minibatch (the order is drawn by trustrl.maths.rng outside the call, as for the eager epoch):
the advantages normalised over the minibatch (trustrl.maths.advantages.normalize_advantages),
both networks' forward and backward passes, output layers included (trustrl.nets.popnet's
chain rule: kernels.mlp_output, mlp_grads), the action's log-probability, the entropy and their
derivatives in the actor's output (trustrl.maths.distributions' categorical or diagonal
Gaussian functions, the logits masked by distributions.mask_logits on a masked batch), the
algorithm's objective and trustrl.maths.losses' value error combined into PPO's loss and its
derivatives (losses.ppo_loss and ppo_loss_grads, the functions PPO.loss calls), the global
gradient-norm clip (trustrl.maths.optim.clip_coefficient, common.clip_grad_norm's factor) and
one Adam step (optim.adam_step), parameters and moments updated in place. What is written here
is the gathering of the minibatch and the loops that call those functions per element.
tests/test_compiled.py holds this call equal to the eager closed
form's epoch to float rounding, tests/test_one_source.py each shared function it calls to its
source.
"""

from __future__ import annotations

import hashlib
import inspect
import marshal
import math
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit

from trustrl.compute.compiled import xp
from trustrl.compute.compiled.kernels import (
    HALF,
    HALF_LOG_2PI,
    ONE,
    TWO,
    adam_,
    categorical_entropy,
    categorical_entropy_grad,
    categorical_kl,
    categorical_kl_grad,
    categorical_logp_grad,
    gaussian_entropy_density,
    gaussian_entropy_grad_log_std,
    gaussian_kl_density,
    gaussian_kl_grad_log_std,
    gaussian_kl_grad_mean,
    gaussian_log_density,
    gaussian_logp_grad_log_std,
    gaussian_logp_grad_mean,
    gaussian_var_ratio,
    layer_views,
    log_softmax,
    mask_logits,
    mlp_grads,
    mlp_output,
    ppo_diagnostics,
    sum_squares,
)
from trustrl.compute.compiled.xp import compiled_source
from trustrl.maths import advantages, losses, optim
from trustrl.maths.losses import PPOCoefficients
from trustrl.maths.trust import kl_control
from trustrl.util.errors import NotCompilable

_LOSS_TERMS = ("value_error", "value_error_grad", "policy_ratio", "ppo_loss", "ppo_loss_grads")

L = compiled_source(losses, _LOSS_TERMS)
"""trustrl.maths.losses' value terms and PPO's combination of the terms (ppo_loss,
ppo_loss_grads) over ``o`` = trustrl.compute.compiled.xp, compiled."""
policy_ratio, ppo_loss, ppo_loss_grads = L.policy_ratio, L.ppo_loss, L.ppo_loss_grads
"""PPO.loss's ratio and its combination of the terms (the minibatch's loss, its derivatives)."""
normalize_advantages = compiled_source(advantages, ("normalize_advantages",)).normalize_advantages
"""trustrl.maths.advantages.normalize_advantages, compiled (PPO.loss's, on a member's [1, M])."""
clip_coefficient = compiled_source(optim, ("clip_coefficient",)).clip_coefficient
"""trustrl.maths.optim.clip_coefficient, compiled (common.clip_grad_norm's factor)."""


def OBJECTIVE(ratio, advantages, *args):  # type: ignore[no-untyped-def]  # noqa: N802
    """The algorithm's per-sample objective (its `objective`, compiled): given by
    `epochs_kernel`."""
    raise RuntimeError("ppo_epochs is unbound: use trustrl.compute.compiled.ppo.epochs_kernel")


OBJECTIVE_GRAD = OBJECTIVE
"""d objective / d ratio per sample (the algorithm's `objective_grad`, compiled)."""


def minibatch_step(args, idx, active):  # type: ignore[no-untyped-def]
    """trustrl.maths.trust.kl_control.k_epochs's `step`, compiled: one minibatch step of every
    active member on its samples idx [P, M], with the records of `args` (a records.Update): `policy`
    (flat [P, D] float32: the actor from column 0, the critic, with the same hidden sizes and one
    output, from critic_at; the log-std at log_std_at for Box), `adam` (its moments and step counts,
    advanced here), `batch` [P, N, ...] (act_i for discrete actions, act_f [P, N, n] for Box;
    action_mask [P, N, n] a masked batch's valid actions, the logits masked by
    distributions.mask_logits before the log-softmax, or kernels.NO_MASK), `loss` (objective_args:
    the objective's arguments after the ratio and the advantages, a tuple of floats: PPO-clip's
    (clip_eps,)), `penalty` (kl_coef [P] float64, beta on the exact KL(pi_old || pi) per member,
    PPO.kl_coef: 0 for no penalty, with pi_old's outputs and log-std; placeholders where no member
    has a penalty) and `grad` [P, D] (room for the gradients). active [P] bool. Returns, per member
    [P, 5], the minibatch's policy loss (with the penalty), value loss, pre-clip gradient norm, clip
    fraction and mean KL."""
    policy, adam, batch, loss, penalty, grad_all = (args.policy, args.adam, args.batch,
                                                     args.loss, args.penalty, args.grad)
    flat, sizes, relu, discrete, c0, ls_off = policy
    m, v, t, lr, b1, b2, adam_eps = adam
    obs, act_i, act_f, logp_old, adv, returns, values_old, action_mask = batch
    clip_eps, vf_coef, ent_coef, norm_adv, obj_args, clip_value, max_grad_norm = loss
    kl_coef, old_out, ls_old = penalty
    P, M = idx.shape
    Lh = sizes.shape[0] - 2
    d, n = sizes[0], sizes[Lh + 1]
    csizes = sizes.copy()
    csizes[Lh + 1] = 1
    f32 = np.float32
    metrics = np.zeros((P, 5), np.float32)
    for p in range(P):
        if not active[p]:
            continue
        th = flat[p]
        grad = grad_all[p]
        x = np.empty((M, d), np.float32)
        a_i = np.empty(M, np.int64)
        a_f = np.empty((M, n), np.float32)
        lpo = np.empty(M, np.float32)
        A = np.empty(M, np.float32)
        R = np.empty(M, np.float32)
        V0 = np.empty(M, np.float32)
        for i in range(M):  # element by element: a row slice per i costs more
            j = idx[p, i]
            for k in range(d):
                x[i, k] = obs[p, j, k]
            if discrete:
                a_i[i] = act_i[p, j]
            else:
                for k in range(n):
                    a_f[i, k] = act_f[p, j, k]
            lpo[i] = logp_old[p, j]
            A[i] = adv[p, j]
            R[i] = returns[p, j]
            V0[i] = values_old[p, j]
        if norm_adv:  # trustrl.maths.advantages.normalize_advantages, compiled
            A = normalize_advantages(A.reshape((1, M)), f32(1e-8)).reshape(M)
        # the networks
        layers, critic = layer_views(th, sizes), layer_views(th[c0:], csizes)
        out, acts = mlp_output(layers, x, relu)  # trustrl.nets.popnet's chain rule
        v_out, acts_c = mlp_output(critic, x, relu)
        value = v_out.reshape(M)
        # the distribution: log pi(a|s), the entropy and what their derivatives reuse
        logp = np.empty(M, np.float32)
        ent = np.empty(M, np.float32)
        lpa = np.empty((M, n), np.float32)  # log-softmax (discrete) or z (Box)
        prob = np.empty((M, n), np.float32)
        inv_std = np.empty(n, np.float32)
        if discrete:  # trustrl.maths.distributions' log-softmax and entropy, compiled
            if action_mask.shape[0] > 0:  # a masked batch: the minibatch's valid actions
                valid = np.empty((M, n), np.bool_)
                for i in range(M):
                    for k in range(n):
                        valid[i, k] = action_mask[p, idx[p, i], k]
                out = mask_logits(out, valid)  # an invalid logit's p, and gradient, are 0
            lpa = log_softmax(out)
            prob = np.exp(lpa)
            ent = categorical_entropy(lpa)
            for i in range(M):
                logp[i] = lpa[i, a_i[i]]
        else:
            h = f32(0.0)
            for k in range(n):
                inv_std[k] = np.exp(-th[ls_off + k])
                h += gaussian_entropy_density(th[ls_off + k], HALF, HALF_LOG_2PI)
            for i in range(M):
                lp = f32(0.0)
                for k in range(n):
                    lpa[i, k] = (a_f[i, k] - out[i, k]) * inv_std[k]  # z, for d logp
                    lp += gaussian_log_density(a_f[i, k], out[i, k], th[ls_off + k],
                                               inv_std[k], HALF, HALF_LOG_2PI)
                logp[i] = lp
                ent[i] = h
        # PPO.loss's terms: the algorithm's objective and trustrl.maths.losses' value error,
        # combined by losses.ppo_loss and ppo_loss_grads (all compiled from their source)
        ratio = policy_ratio(logp, lpo)
        # the penalty beta * mean KL(pi_old || pi) (PPO.loss with kl_coef): the KL per
        # state and, for the chain rule, pi_old's probabilities (Discrete) or its
        # output minus the new one (Box)
        beta = f32(kl_coef[p])
        kl = np.zeros(M, np.float32)
        ref = np.empty((M if beta != 0.0 else 0, n), np.float32)
        if beta != 0.0:
            if discrete:
                lo = np.empty((M, n), np.float32)
                for i in range(M):
                    for k in range(n):
                        lo[i, k] = old_out[p, idx[p, i], k]
                lo = log_softmax(lo)
                ref = np.exp(lo)
                kl = categorical_kl(lo, lpa)
            else:
                for i in range(M):
                    j = idx[p, i]
                    for k in range(n):
                        ls_n = th[ls_off + k]
                        kl[i] += gaussian_kl_density(
                            old_out[p, j, k], ls_old[p, k], out[i, k], ls_n,
                            inv_std[k], gaussian_var_ratio(ls_old[p, k], ls_n, f32(2.0)),
                            HALF, f32(1.0), f32(2.0))
                        ref[i, k] = out[i, k] - old_out[p, j, k]
        # in float64: value_error_grad's branches then return one type under Numba
        V, R64, V064 = value.astype(np.float64), R.astype(np.float64), V0.astype(np.float64)
        if clip_value:
            v_err = L.value_error(V, R64, V064, clip_eps)
            v_err_grad = L.value_error_grad(V, R64, V064, clip_eps)
        else:
            v_err = L.value_error(V, R64)
            v_err_grad = L.value_error_grad(V, R64)
        coefs = PPOCoefficients(clip_eps, vf_coef, ent_coef, beta)
        _, pl, vl, clip_fraction, kl_mean = ppo_loss(
            ratio, OBJECTIVE(ratio, A, *obj_args), v_err, ent, kl, coefs)
        d_logp64, d_value64, d_ent64, d_kl64 = ppo_loss_grads(
            ratio, OBJECTIVE_GRAD(ratio, A, *obj_args), v_err_grad, coefs)
        d_logp, d_value = d_logp64.astype(np.float32), d_value64.astype(np.float32)
        d_ent, g_kl = f32(d_ent64), f32(d_kl64)
        # the chain rule: distribution, output layers, hidden layers
        g_out = np.empty((M, n), np.float32)
        if discrete:
            for i in range(M):
                for k in range(n):
                    onehot = f32(1.0) if k == a_i[i] else f32(0.0)
                    g = categorical_logp_grad(d_logp[i], onehot, prob[i, k])
                    if ent_coef != 0.0:
                        g += categorical_entropy_grad(d_ent, prob[i, k], lpa[i, k], ent[i])
                    if beta != 0.0:  # d KL / d logits = p_new - p_old
                        g += categorical_kl_grad(g_kl, prob[i, k], ref[i, k])
                    g_out[i, k] = g
        else:  # trustrl.maths.distributions' Gaussian derivatives, compiled
            for k in range(n):
                g_ls = f32(0.0)
                for i in range(M):
                    z = lpa[i, k]
                    g_out[i, k] = gaussian_logp_grad_mean(d_logp[i], z, inv_std[k])
                    g_ls += gaussian_logp_grad_log_std(d_logp[i], z, ONE)
                if beta != 0.0:  # the KL penalty's
                    inv_var = inv_std[k] * inv_std[k]
                    var_old = np.exp(TWO * ls_old[p, k])
                    for i in range(M):
                        diff = ref[i, k]
                        g_out[i, k] += gaussian_kl_grad_mean(g_kl, diff, inv_var)
                        g_ls += gaussian_kl_grad_log_std(g_kl, diff, inv_var, var_old, ONE)
                if ent_coef != 0.0:
                    g_ls += gaussian_entropy_grad_log_std(d_ent) * M
                grad[ls_off + k] = g_ls
        mlp_grads(layers, acts, g_out, relu, layer_views(grad, sizes))
        mlp_grads(critic, acts_c, d_value.reshape((M, 1)), relu,
                  layer_views(grad[c0:], csizes))
        # common.clip_grad_norm, then one Adam step (trustrl.maths.optim's arithmetic)
        norm = f32(math.sqrt(sum_squares(grad)))
        if max_grad_norm > 0:  # trustrl.maths.optim.clip_coefficient, compiled
            coef = clip_coefficient(norm, f32(max_grad_norm), f32(1e-6), f32(1.0))
            if coef < 1.0:
                grad *= coef
        t[p] += 1.0
        adam_(th, m[p], v[p], grad, t[p], lr, b1, b2, adam_eps)
        metrics[p, 0] = pl
        metrics[p, 1] = vl
        metrics[p, 2] = norm
        metrics[p, 3] = clip_fraction
        metrics[p, 4] = kl_mean
    return metrics


_KERNELS: dict[tuple[Any, Any], Any] = {}


def source_tag(*functions: Any) -> str:
    """A short digest of the source files (or, without one, the code) of `functions`: it names
    a kernel bound to them, so Numba's disk cache keeps one entry per objective and drops it
    when the objective's module changes."""
    h = hashlib.sha1()
    for f in functions:
        h.update(f"{f.__module__}.{f.__qualname__}".encode())
        try:
            h.update(Path(inspect.getfile(f)).read_bytes())
        except (OSError, TypeError):
            h.update(marshal.dumps(f.__code__))
    return h.hexdigest()[:12]


def bound_objective(objective: Any, objective_grad: Any) -> tuple[Any, Any]:
    """`objective` and `objective_grad` (one-source functions of their modules, over ``o``)
    compiled over trustrl.compute.compiled.xp."""
    out = []
    for f in (objective, objective_grad):
        module: Any = sys.modules.get(str(getattr(f, "__module__", None)))
        name = str(getattr(f, "__name__", ""))
        if module is None or getattr(module, name, None) is not f:
            raise NotCompilable(f"{f.__qualname__} is not a function of its module (a lambda "
                                "or a nested function); the compiled kernels call module "
                                "functions")
        out.append(getattr(compiled_source(module, (name,)), name))
    return out[0], out[1]


def approx_kl(args):  # type: ignore[no-untyped-def]
    """trustrl.maths.trust.kl_control.k_epochs's `diagnose`, compiled: the full-batch diagnostics
    of the
    updated policy (kernels.ppo_diagnostics, written into args.diag) and each member's
    approx KL from them, in float32 (the value torch compares with the target)."""
    b = args.batch
    ppo_diagnostics(args.policy, b.obs, b.act_i, b.act_f, b.logp_old, args.old_out,
                    args.flat_old, args.loss.clip_eps, args.quantiles, args.diag, b.action_mask)
    return args.diag[:, 1].astype(np.float32)


def epochs_kernel(objective: Any, objective_grad: Any) -> Any:
    """trustrl.maths.trust.kl_control.k_epochs (its own code object) compiled over
    trustrl.compute.compiled.xp,
    its `step` the compiled `minibatch_step` with `objective` and `objective_grad` as the
    policy term and its `diagnose` the compiled `approx_kl`: one kernel per pair, cached on
    disk under names holding `source_tag` of the two (Numba's cache tells functions apart by
    name and file, not by the globals they were bound to)."""
    key = (objective, objective_grad)
    kernel: Any = _KERNELS.get(key)
    if kernel is None:
        tag = source_tag(objective, objective_grad)
        jit = njit(cache=True, error_model="numpy")
        obj, grad = bound_objective(objective, objective_grad)
        ns: dict[str, Any] = dict(globals())
        ns["OBJECTIVE"], ns["OBJECTIVE_GRAD"] = obj, grad
        step = types.FunctionType(minibatch_step.__code__, ns, "minibatch_step")
        step.__qualname__ = f"minibatch_step_{tag}"
        loop_ns: dict[str, Any] = dict(vars(kl_control))
        loop_ns.update(o=xp, step=jit(step), diagnose=_APPROX_KL)
        loop = types.FunctionType(kl_control.k_epochs.__code__, loop_ns, "k_epochs")
        loop.__qualname__ = f"k_epochs_{tag}"
        loop.__doc__ = kl_control.k_epochs.__doc__
        kernel = _KERNELS[key] = jit(loop)
        kernel.source_tag = tag
    return kernel


_APPROX_KL = njit(cache=True, error_model="numpy")(approx_kl)
