"""The batched collector's rollout as one compiled call (Numba): `BatchedCollector`'s NumPy
rollout (trustrl.collect.batched) with no Python between its operations.

T steps of P members' N envs: the actor's forward pass (kernels.mlp_forward), the action from
the rollout's noise (drawn by trustrl.maths.rng before the call, as for the NumPy rollout), its
log-probability, the env step (``transition``: trustrl.envs.classic's, compiled from the same
source over trustrl.compute.compiled.xp), the episode trackers and the running observation and
return
normalisers, in the NumPy rollout's order of operations and dtypes; the carried state is
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
    layer_views,
    log_softmax,
    mask_logits,
    mlp_out,
    mlp_output,
)
from trustrl.compute.compiled.xp import compiled_source
from trustrl.envs import step
from trustrl.maths import normalize


def policy_env_step(*args: Any) -> Any:  # the env's step (trustrl.envs.step's), by bind()
    raise RuntimeError("rollout is unbound: use trustrl.compute.compiled.rollout.bind")


store_action = policy_env_step  # the action kind's, given by bind()


@njit(cache=True, error_model="numpy")
def store_categorical(act_i, act_f, t, a):  # type: ignore[no-untyped-def]
    """A softmax's actions [P, N] into row t of the records' act_i."""
    act_i[t] = a


@njit(cache=True, error_model="numpy")
def store_gaussian(act_i, act_f, t, a):  # type: ignore[no-untyped-def]
    """A Gaussian's actions [P, N, n] into row t of the records' act_f."""
    act_f[t] = a


def rollout(k, policy, draws, carry, env, steps):  # type: ignore[no-untyped-def]
    """The NumPy rollout's T steps: k the env's constants, then the records of
    trustrl.compute.compiled.records: `policy` (the actor, its log-std for Box actions), `draws`
    (noise [T, P, N, n_out]: Gumbel for discrete actions, standard normal for Box; resets
    [T, P*N, state_dim]), `carry` (the collector's carried state, moved on in place), `env`
    (normalisers' settings, action bounds) and `steps`, the records written (act_i for
    discrete actions, act_f for Box; out the actor's outputs, pi_old's, a softmax's logits
    masked where the env gives masks; action_mask the valid actions each action was drawn
    under, where the env gives masks: [T, P, N, n], else a zero-size placeholder). Each step is the
    actor's forward pass (popnet's mlp_output compiled, per member, over the layer views made
    once per call) and trustrl.envs.step.policy_env_step,
    compiled. Returns the network input of the last observation [P, N, D]."""
    flat, sizes, relu, discrete, _, ls_off = policy
    noise, resets = draws
    (obs_b, act_i, act_f, logp_b, rew_b, term_b, trunc_b, fin_ret, fin_len, final_x,
     out_b, mask_b) = steps
    T, P, N, n_out = noise.shape
    state = (carry.env_state, carry.elapsed, carry.obs, carry.ep_ret, carry.ep_len,
             carry.disc_return, carry.obs_mean, carry.obs_var, carry.obs_count, carry.ret_mean,
             carry.ret_var, carry.ret_count)
    log_std = np.zeros((P, 1, n_out), np.float32)
    if not discrete:
        for p in range(P):
            for j in range(n_out):
                log_std[p, 0, j] = flat[p, ls_off + j]
    if env.norm_obs:
        x = observation_input(carry.obs, carry.obs_mean, carry.obs_var, env.obs_clip)
    else:
        x = carry.obs.copy()
    out = np.empty((P, N, n_out), np.float32)
    # each member's (W, b) views, made once for the T steps (views: Adam does not move them
    # during a rollout)
    layers = [layer_views(flat[p], sizes) for p in range(P)]
    for t in range(T):
        obs_b[t] = x
        for p in range(P):
            out[p] = mlp_output(layers[p], np.ascontiguousarray(x[p]), relu)[0]
        a, logp, rew, term, trunc, f_ret, f_len, f_x, x, state, valid, logits = \
            policy_env_step(k, out, noise[t], resets[t], log_std, state, env)
        out_b[t] = logits
        if valid.shape[0] > 0:  # a masked env: the valid actions a was drawn under
            mask_b[t] = valid.reshape((P, N, n_out))
        store_action(act_i, act_f, t, a)
        logp_b[t] = logp
        rew_b[t] = rew
        term_b[t] = term
        trunc_b[t] = trunc
        fin_ret[t] = f_ret
        fin_len[t] = f_len
        final_x[t] = f_x
    _carry_over(carry, state)
    return x


@njit(cache=True, error_model="numpy")
def _carry_over(carry, state):  # type: ignore[no-untyped-def]
    """Write the state after a rollout (policy_env_step's order) into `carry`, in place."""
    carry.env_state[...] = state[0]
    carry.elapsed[...] = state[1]
    carry.obs[...] = state[2]
    carry.ep_ret[...] = state[3]
    carry.ep_len[...] = state[4]
    carry.disc_return[...] = state[5]
    carry.obs_mean[...] = state[6]
    carry.obs_var[...] = state[7]
    carry.obs_count[...] = state[8]
    carry.ret_mean[...] = state[9]
    carry.ret_var[...] = state[10]
    carry.ret_count[...] = state[11]


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
STEP = compiled_source(step, tuple(f.__name__ for f in step.STEP_FUNCTIONS), bind={
    "log_softmax": log_softmax, "mask_logits": mask_logits, "NO_MASK": step.NO_MASK,
    "gaussian_log_density": gaussian_log_density,
    "fold_moments": fold_moments, "normalized": normalized, "HALF": HALF,
    "HALF_LOG_2PI": HALF_LOG_2PI})
"""trustrl.envs.step's step (`policy_env_step`, the samplers, `observation_input`) compiled from
its source over trustrl.compute.compiled.xp, with distributions' and normalize's functions compiled
and the Gaussian's constants float32."""
observation_input = STEP.observation_input
_BOUND: dict[int, Any] = {}


def bind(dyn: Any, masked: bool = False) -> Any:
    """The compiled rollout of the env whose compiled dynamics are ``dyn`` (an
    ``trustrl.envs.classic.Dynamics`` over trustrl.compute.compiled.xp, wrapped by Numba), with its
    action kind's sampler and, `masked`, the env's masks (``dyn``'s mask function): one per
    env class, dtype and masking, cached on disk."""
    key = (type(dyn), dyn.dtype, masked)
    f = _BOUND.get(key)  # type: ignore[call-overload]
    if f is None:
        discrete = dyn.action_kind == "discrete"
        jit = njit(cache=True, error_model="numpy")
        ns: dict[str, Any] = dict(globals())
        ns["policy_env_step"] = step.bind(STEP, dyn.functions["transition"], discrete, jit,
                                          dyn._mask if masked else None)
        ns["store_action"] = store_categorical if discrete else store_gaussian
        g = types.FunctionType(rollout.__code__, ns, "rollout")
        # masked: a name of its own (Numba's disk cache files a function by its source file
        # and qualified name, and the env's unmasked rollout takes the same types)
        g.__qualname__ = rollout.__qualname__ + ("_masked" if masked else "")
        f = _BOUND[key] = jit(g)  # type: ignore[index]
        f.masked = masked
    return f
