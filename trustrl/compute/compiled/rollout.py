"""The batched collector's rollout as one compiled call (Numba): `BatchedCollector`'s NumPy
rollout (trustrl.collect.batched) with no Python between its operations.

T steps of P members' N envs: the actor's forward pass (kernels.mlp_forward), the action from
the rollout's noise (drawn by trustrl.maths.rng before the call, as for the NumPy rollout), its
log-probability, the env step (``transition``: trustrl.envs.classic's, compiled from the same
source over trustrl.compute.compiled.xp), the episode trackers and the running observation and
return normalisers, in the NumPy rollout's order of operations and dtypes; the carried state is
updated in place. The function below names ``transition`` as a global that ``bind`` gives it:
one compiled rollout per env.

It equals the NumPy rollout to float rounding (tests/test_compiled.py): the differences are the
tanh of the hidden layers (kernels' rational approximation, a few ulp) and the libraries' sin
and cos in float32.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np
from numba import njit

from trustrl.compute.compiled.kernels import (
    HALF,
    HALF_LOG_2PI,
    gaussian_log_density,
    log_softmax,
    mlp_out,
)
from trustrl.compute.compiled.xp import compiled_source
from trustrl.maths import normalize


def transition(*args: Any) -> Any:  # the env's, given by bind()
    raise RuntimeError("rollout is unbound: use trustrl.compute.compiled.rollout.bind")


def _chan(mean, var, count, x):  # type: ignore[no-untyped-def]
    """Fold x [P, N, ...] (over axis 1) into the running mean and variance [P, ...] and the
    shared count [1], in place: trustrl.maths.normalize.fold_moments, compiled from its source."""
    new_mean, new_var, total = fold_moments(mean, var, count, x.astype(np.float64))
    mean[...] = new_mean
    var[...] = new_var
    count[...] = total


def _normalize(x, mean, var, clip):  # type: ignore[no-untyped-def]
    """batched._numpy_normalize: raw observations [P, n, d] -> float32 network inputs, each
    element through trustrl.maths.normalize.normalized (compiled from its source)."""
    P, n, d = x.shape
    out = np.empty((P, n, d), np.float32)
    for p in range(P):
        for i in range(n):
            for k in range(d):
                out[p, i, k] = normalized(np.float64(x[p, i, k]), mean[p, k], var[p, k], clip,
                                          1e-8)
    return out


def rollout(k, policy, draws, carry, env, steps):  # type: ignore[no-untyped-def]
    """The NumPy rollout's T steps: k the env's constants, then the records of
    trustrl.compute.compiled.records: `policy` (the actor, its log-std for Box actions), `draws`
    (noise [T, P, N, n_out]: Gumbel for discrete actions, standard normal for Box; resets
    [T, P*N, state_dim]), `carry` (the collector's carried state, moved on in place), `env`
    (normalisers' settings, action bounds) and `steps`, the records written (act_i for
    discrete actions, act_f for Box; out the actor's outputs, pi_old's). Returns the network
    input of the last observation [P, N, D]."""
    flat, sizes, relu, discrete, _, ls_off = policy
    noise, resets = draws
    (env_state, elapsed, obs, ep_ret, ep_len, disc_return, obs_mean, obs_var, obs_count,
     ret_mean, ret_var, ret_count) = carry
    norm_obs, norm_rew, gamma, obs_clip, r_clip, act_lo, act_hi = env
    (obs_b, act_i, act_f, logp_b, rew_b, term_b, trunc_b, fin_ret, fin_len, final_x,
     out_b) = steps
    T, P, N, n_out = noise.shape
    D = obs.shape[2]
    x = _normalize(obs, obs_mean, obs_var, obs_clip) if norm_obs else obs.copy()
    out = np.empty((P, N, n_out), np.float32)
    std = np.empty((P, n_out), np.float32)
    inv_std = np.empty((P, n_out), np.float32)
    if not discrete:
        for p in range(P):
            for j in range(n_out):
                ls = flat[p, ls_off + j]
                std[p, j] = np.exp(ls)
                inv_std[p, j] = np.exp(-ls)
    a_env_f = np.empty((P * N, n_out), np.float32)
    a_env_i = np.empty(P * N, np.int64)
    for t in range(T):
        obs_b[t] = x
        for p in range(P):
            out[p] = mlp_out(flat[p], sizes, relu, np.ascontiguousarray(x[p]))
        out_b[t] = out
        lsm = log_softmax(out) if discrete else out  # trustrl.maths.distributions', compiled
        for p in range(P):
            for i in range(N):
                if discrete:
                    best = 0
                    best_v = out[p, i, 0] + noise[t, p, i, 0]
                    for j in range(1, n_out):
                        v = out[p, i, j] + noise[t, p, i, j]
                        if v > best_v:
                            best, best_v = j, v
                    logp_b[t, p, i] = lsm[p, i, best]
                    act_i[t, p, i] = best
                    a_env_i[p * N + i] = best
                else:
                    lp = np.float32(0.0)
                    for j in range(n_out):
                        a = out[p, i, j] + std[p, j] * noise[t, p, i, j]
                        lp += gaussian_log_density(a, out[p, i, j], flat[p, ls_off + j],
                                                   inv_std[p, j], HALF, HALF_LOG_2PI)
                        act_f[t, p, i, j] = a
                        a_env_f[p * N + i, j] = min(max(a, act_lo[j]), act_hi[j])
                    logp_b[t, p, i] = lp
        if discrete:
            nstate, nelapsed, next_obs, r, term, trunc, fobs = transition(
                k, env_state, elapsed, a_env_i, resets[t])
        else:
            nstate, nelapsed, next_obs, r, term, trunc, fobs = transition(
                k, env_state, elapsed, a_env_f, resets[t])
        env_state[...] = nstate
        elapsed[...] = nelapsed
        any_done = False
        for p in range(P):
            for i in range(N):
                q = p * N + i
                done = term[q] or trunc[q]
                any_done = any_done or done
                ep_ret[p, i] += r[q]
                ep_len[p, i] += 1
                fin_ret[t, p, i] = ep_ret[p, i]
                fin_len[t, p, i] = ep_len[p, i]
                if done:
                    ep_ret[p, i] = 0.0
                    ep_len[p, i] = 0
                term_b[t, p, i] = term[q]
                trunc_b[t, p, i] = trunc[q]
        nxt = next_obs.reshape((P, N, D))
        if norm_obs:
            _chan(obs_mean, obs_var, obs_count, nxt)
            x = _normalize(nxt, obs_mean, obs_var, obs_clip)
            if any_done:
                final_x[t] = _normalize(fobs.reshape((P, N, D)), obs_mean, obs_var, obs_clip)
            else:
                final_x[t] = x
        else:
            x = nxt.copy()
            final_x[t] = fobs.reshape((P, N, D))
        if norm_rew:
            r64 = r.reshape((P, N)).astype(np.float64)
            for p in range(P):
                for i in range(N):
                    disc_return[p, i] = disc_return[p, i] * gamma + r64[p, i]
            _chan(ret_mean, ret_var, ret_count, disc_return)
            for p in range(P):
                sd = np.sqrt(ret_var[p] + 1e-8)
                for i in range(N):
                    rew_b[t, p, i] = min(max(r64[p, i] / sd, -r_clip), r_clip)
                    if term[p * N + i] or trunc[p * N + i]:
                        disc_return[p, i] = 0.0
        else:
            rew_b[t] = r.reshape((P, N))
        obs[...] = nxt
    return x


@njit(cache=True, error_model="numpy")
def bootstrap_values(flat, c0, sizes, relu, obs_b, final_x, x_last, term_b, trunc_b,  # type: ignore[no-untyped-def]  # noqa: E501
                     values, next_v):
    """The batched collector's values after a rollout (BatchedCollector.collect): V of every
    recorded input obs_b [T, P, N, D] into values [T, P, N] (one matrix product per layer and
    member), and the bootstrap values next_v [T, P, N]: V of the next input of the same
    episode, V(final_x) where the episode was truncated (computed for those rows only), 0
    where it terminated; V(x_last) [P, N, D] after the last step."""
    T, P, N, D = obs_b.shape
    for p in range(P):
        rows = np.empty((T * N, D), np.float32)
        for t in range(T):
            rows[t * N:(t + 1) * N] = obs_b[t, p]
        v = mlp_out(flat[p, c0:], sizes, relu, rows)
        last = mlp_out(flat[p, c0:], sizes, relu, np.ascontiguousarray(x_last[p]))
        for t in range(T):
            for i in range(N):
                values[t, p, i] = v[t * N + i, 0]
                next_v[t, p, i] = v[(t + 1) * N + i, 0] if t + 1 < T else last[i, 0]
        rows_t = np.empty(T * N, np.int64)  # the truncated steps (t * N + i)
        n_trunc = 0
        for t in range(T):
            for i in range(N):
                if trunc_b[t, p, i]:
                    rows_t[n_trunc] = t * N + i
                    n_trunc += 1
        if n_trunc > 0:
            fin = np.empty((n_trunc, D), np.float32)
            for k in range(n_trunc):
                fin[k] = final_x[rows_t[k] // N, p, rows_t[k] % N]
            fv = mlp_out(flat[p, c0:], sizes, relu, fin)
            for k in range(n_trunc):
                next_v[rows_t[k] // N, p, rows_t[k] % N] = fv[k, 0]
        for t in range(T):
            for i in range(N):
                if term_b[t, p, i]:
                    next_v[t, p, i] = 0.0


@njit(cache=True, error_model="numpy")
def gaussian_step(flat, sizes_a, c0, sizes_c, relu, ls_off, x, noise, t, rows):  # type: ignore[no-untyped-def]  # noqa: E501
    """One env step's policy work in the Gymnasium collector (trustrl.collect.rollout.Collector) for
    a Box action: what `ActorCritic.sample_step` computes with a DiagGaussian, as one call.
    flat: one member's parameters (the actor from column 0, the critic from c0, the log-std
    at ls_off); x [N, D]: the network inputs (already normalised); noise [N, n]: the standard
    normal draws the eager sample takes (torch.randn_like of the means). Writes row t of the
    records `rows` (records.Rows): obs [T, N, D], actions [T, N, n] (the unclipped samples),
    logp [T, N], values [T, N] (V(s)) and out [T, N, n] (the means: pi_old's output)."""
    obs_b, act_b, logp_b, val_b, out_b = rows
    out = mlp_out(flat, sizes_a, relu, x)
    v = mlp_out(flat[c0:], sizes_c, relu, x)
    N, n = out.shape
    for i in range(N):
        lp = np.float32(0.0)
        for j in range(n):
            ls = flat[ls_off + j]
            std = np.exp(ls)
            a = out[i, j] + std * noise[i, j]
            lp += gaussian_log_density(a, out[i, j], ls, np.exp(-ls), HALF, HALF_LOG_2PI)
            act_b[t, i, j] = a
            out_b[t, i, j] = out[i, j]
        logp_b[t, i] = lp
        val_b[t, i] = v[i, 0]
        obs_b[t, i] = x[i]


@njit(cache=True, error_model="numpy")
def categorical_step(flat, sizes_a, c0, sizes_c, relu, x, q, t, rows):  # type: ignore[no-untyped-def]  # noqa: E501
    """`gaussian_step` for a Discrete action: what `ActorCritic.sample_step` computes with a
    Categorical. q [N, n]: the Exp(1) draws torch.multinomial takes for one sample (it draws
    the action as argmax p / q, the exponential form of the Gumbel-max trick), so the action
    is the eager one unless two of p / q tie to rounding. rows.actions [T, N] holds the
    actions (int64), rows.out [T, N, n] the logits."""
    obs_b, act_b, logp_b, val_b, out_b = rows
    out = mlp_out(flat, sizes_a, relu, x)
    v = mlp_out(flat[c0:], sizes_c, relu, x)
    N, n = out.shape
    lsm = log_softmax(out)  # trustrl.maths.distributions', compiled
    for i in range(N):
        best, best_v = 0, np.float32(-1.0)
        for j in range(n):
            pj = np.exp(lsm[i, j])
            r = pj / q[i, j]
            if r > best_v:
                best, best_v = j, r
            out_b[t, i, j] = out[i, j]
        act_b[t, i] = best
        logp_b[t, i] = lsm[i, best]
        val_b[t, i] = v[i, 0]
        obs_b[t, i] = x[i]


_NORMALIZE = compiled_source(normalize,
                             ("merge_moments", "fold_moments", "normalized"))
fold_moments, normalized = _NORMALIZE.fold_moments, _NORMALIZE.normalized
_HELPERS = (_chan, _normalize)
_BOUND: dict[int, Any] = {}


def bind(dyn: Any) -> Any:
    """The compiled rollout of the env whose compiled dynamics are ``dyn`` (an
    ``trustrl.envs.classic.Dynamics`` over trustrl.compute.compiled.xp, wrapped by Numba): one per
    env class and dtype, cached on disk."""
    key = (type(dyn), dyn.dtype)
    f = _BOUND.get(key)  # type: ignore[call-overload]
    if f is None:
        jit = njit(cache=True, error_model="numpy")
        ns: dict[str, Any] = dict(globals())
        ns["transition"] = dyn.functions["transition"]
        for h in _HELPERS:
            ns[h.__name__] = jit(types.FunctionType(h.__code__, ns, h.__name__))
        g = types.FunctionType(rollout.__code__, ns, "rollout")
        g.__qualname__ = rollout.__qualname__
        f = _BOUND[key] = jit(g)  # type: ignore[index]
    return f
