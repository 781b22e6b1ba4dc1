"""PPO's whole iteration on the batched classic-control collector as one compiled call (Numba):
what `learners.BatchedLearner` does in an iteration with the compiled rollout and the compiled
backend, with no Python between its parts.

    rollout           T steps of every member's envs (trustrl.compute.compiled.rollout.rollout)
    bootstrap_values  V of every state and the bootstrap values (the same module)
    gae_into          the advantages (trustrl.maths.advantages' recursion, compiled)
    ppo_epochs        the K epochs of minibatch steps, each member stopping on its own with
                      a KL target (trust.kl_control.k_epochs compiled: compiled.ppo)
    ppo_diagnostics   the full-batch diagnostics after the update (kernels.ppo_diagnostics)
    the learner's own metrics: episodes ended, their mean return and length, the critic's
                      explained variance and value loss before the update

Each part is the function the unfused path calls (the same compiled code, in the same order,
on the same numbers), so the two paths agree to float rounding (tests/test_compiled.py); what
is left to Python is one call an iteration: the random numbers (drawn ahead by trustrl.maths.rng),
the learning rate, Adam's step count and the metrics' columns. Like the rollout it calls, the
function names the env's ``rollout`` as a global that ``bind`` gives it.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np
from numba import njit

from trustrl.compute.compiled.kernels import gae_into, ppo_diagnostics
from trustrl.compute.compiled.records import Batch, Penalty, Steps, Update
from trustrl.compute.compiled.rollout import bootstrap_values
from trustrl.compute.compiled.xp import compiled_source
from trustrl.maths import diagnostics


def rollout(*args: Any) -> Any:  # the env's compiled rollout, given by bind()
    raise RuntimeError("ppo_iteration is unbound: use trustrl.compute.compiled.iteration.bind")


ppo_epochs = rollout  # the algorithm's compiled epochs (compiled.ppo.epochs_kernel), by bind()


def _flat(x):  # type: ignore[no-untyped-def]
    """[T, P, N, W] -> [P, T*N, W] (the learner's bflat), element by element."""
    T, P, N, W = x.shape
    out = np.empty((P, T * N, W), x.dtype)
    for t in range(T):
        for p in range(P):
            for i in range(N):
                for w in range(W):
                    out[p, t * N + i, w] = x[t, p, i, w]
    return out


def _flat3(x):  # type: ignore[no-untyped-def]
    """`_flat` of a [T, P, N] array: [P, T*N]."""
    T, P, N = x.shape
    return _flat(x.reshape((T, P, N, 1))).reshape((P, T * N))


def ppo_iteration(k, policy, draws, carry, env, gl, adam, epochs, loss, qs, out):  # type: ignore[no-untyped-def]  # noqa: E501
    """One iteration of P members, with the records of trustrl.compute.compiled.records: the
    rollout's (k the env's constants, `policy` the parameters, `draws`, `carry` moved on in
    place, `env`: trustrl.compute.compiled.rollout's, in the collector's order:
    `BatchedCollector.rollout_state`), gl = gamma * lambda, the update's as ppo_epochs' (`adam`
    advanced in place; `epochs`: every epoch's shuffle [K, P, T*N], the minibatch size and the
    KL stop: members stop when their full-batch approx KL passed target_kl after an epoch),
    qs the diagnostics' ratio quantiles. Writes `out`: the episodes (terminated, truncated,
    fin_ret, fin_len [T, P, N]), the rollout's masks (action_mask [T, P, N, n] where the env
    gives masks, which the epochs and the diagnostics then read), last [P, 4] (the last
    epoch each member ran: mean policy loss, value loss, pre-clip gradient norm, clip
    fraction), epochs_run [P], diag
    [P, 7 + len(qs)] (ppo_diagnostics' columns) and stats [P, 5]
    (trustrl.compute.compiled.STATS)."""
    flat, sizes, relu, discrete, c0, ls_off = policy
    noise = draws.noise
    obs = carry.obs
    order, mb, use_mask, target_kl = epochs
    clip_eps, gamma = loss.clip_eps, env.gamma
    term_b, trunc_b, fin_ret, fin_len, last, epochs_run, diag, stats, mask_b = out
    T, P, N, n_out = noise.shape
    D = obs.shape[2]
    f32 = np.float32
    obs_b = np.empty((T, P, N, D), f32)
    act_i = np.zeros((T, P, N) if discrete else (0, 0, 0), np.int64)
    act_f = np.zeros((0, 0, 0, 0) if discrete else (T, P, N, n_out), f32)
    logp_b = np.empty((T, P, N), f32)
    rew_b = np.empty((T, P, N), f32)
    final_x = np.empty((T, P, N, D), f32)
    out_b = np.empty((T, P, N, n_out), f32)
    x = rollout(k, policy, draws, carry, env,
                Steps(obs_b, act_i, act_f, logp_b, rew_b, term_b, trunc_b, fin_ret, fin_len,
                      final_x, out_b, mask_b))
    csizes = sizes.copy()
    csizes[sizes.shape[0] - 1] = 1
    values = np.empty((T, P, N), f32)
    next_v = np.empty((T, P, N), f32)
    bootstrap_values(flat, c0, csizes, relu, obs_b, final_x, x, term_b, trunc_b, values,
                     next_v)
    adv = np.empty((T, P * N), f32)
    not_term = (~term_b).astype(f32).reshape((T, P * N))
    not_done = (~(term_b | trunc_b)).astype(f32).reshape((T, P * N))
    gae_into(adv, rew_b.reshape((T, P * N)), values.reshape((T, P * N)),
             next_v.reshape((T, P * N)), not_term, not_done, f32(gamma), f32(gl))
    # the batch [P, T*N, ...]; returns = advantages + values in float32, as the learner's
    B = T * N
    adv_f = _flat3(adv.reshape((T, P, N)))
    val_f = _flat3(values)
    ret_f = np.empty((P, B), f32)
    for p in range(P):
        for j in range(B):
            ret_f[p, j] = adv_f[p, j] + val_f[p, j]
    obs_f = _flat(obs_b)
    logp_f = _flat3(logp_b)
    out_f = _flat(out_b)
    act_i_f = _flat3(act_i) if discrete else np.zeros((1, 1), np.int64)
    act_f_f = np.zeros((1, 1, 1), f32) if discrete else _flat(act_f)
    flat_old = flat.copy()
    # PPO.update: trust.kl_control.k_epochs, compiled (the algorithm's epochs kernel)
    active = np.ones(P, np.bool_)
    means = np.zeros((P, 5), f32)
    # the penalty's coefficient: none (its algorithm runs unfused)
    no_kl = Penalty(np.zeros(P), np.zeros((1, 1, 1), f32), np.zeros((1, 1), f32))
    # an env with masks: the masks each action was drawn under (the ratio's, the diagnostics')
    mask_f = _flat(mask_b) if mask_b.shape[0] > 0 else np.zeros((0, 0, 0), np.bool_)
    update = Update(policy, adam, Batch(obs_f, act_i_f, act_f_f, logp_f, adv_f, ret_f, val_f,
                                        mask_f),
                    loss, no_kl, np.zeros_like(flat), out_f, flat_old, qs, diag)
    epochs_run[:] = 0.0
    ppo_epochs(update, np.ascontiguousarray(order), mb, active, use_mask, f32(target_kl), True,
               means, epochs_run)
    last[:] = means[:, :4]
    if not use_mask:  # with the KL stop, the last epoch's diagnostics are the final policy's
        ppo_diagnostics(policy, obs_f, act_i_f, act_f_f, logp_f, out_f, flat_old, clip_eps,
                        qs, diag, mask_f)
    # the learner's metrics: the episodes that ended, the critic before the update
    n_ep, ret_mean, len_mean = episode_stats(term_b | trunc_b, fin_ret,
                                             fin_len.astype(np.float64), np.nan)
    explained, value_loss_fresh = critic_stats(val_f.astype(np.float64),
                                               ret_f.astype(np.float64), np.nan)
    for p in range(P):
        stats[p, 0] = ret_mean[p]
        stats[p, 1] = len_mean[p]
        stats[p, 2] = n_ep[p]
        stats[p, 3] = explained[p]
        stats[p, 4] = value_loss_fresh[p]


_STATS = compiled_source(diagnostics, ("critic_stats", "episode_stats"))
critic_stats, episode_stats = _STATS.critic_stats, _STATS.episode_stats
_HELPERS = (_flat, _flat3)
_BOUND: dict[tuple[int, int], Any] = {}


def bind(rollout_fn: Any, epochs: Any) -> Any:
    """The compiled iteration around ``rollout_fn`` (an env's compiled rollout,
    trustrl.compute.compiled.rollout.bind's) and ``epochs`` (an algorithm's compiled epochs,
    trustrl.compute.compiled.ppo.epochs_kernel's): one per env, objective and masking,
    cached on disk (its signature holds the env's constants' type, as the rollout's does; its
    name the objective's source tag and the rollout's masking)."""
    key = (id(rollout_fn), id(epochs))
    f = _BOUND.get(key)
    if f is None:
        jit = njit(cache=True, error_model="numpy")
        ns: dict[str, Any] = dict(globals())
        ns["rollout"], ns["ppo_epochs"] = rollout_fn, epochs
        for h in _HELPERS:
            ns[h.__name__] = jit(types.FunctionType(h.__code__, ns, h.__name__))
        g = types.FunctionType(ppo_iteration.__code__, ns, "ppo_iteration")
        # the objective's tag, and the rollout's masking: Numba's disk cache files a function
        # by its source file and qualified name
        g.__qualname__ = (f"{ppo_iteration.__qualname__}_{epochs.source_tag}"
                          + ("_masked" if getattr(rollout_fn, "masked", False) else ""))
        f = _BOUND[key] = jit(g)
    return f
