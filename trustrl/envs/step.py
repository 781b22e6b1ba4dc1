"""One step of the batched collector (trustrl.collect.batched), written once over an array
namespace.

`policy_env_step` takes every member's N envs one step on from the actor's outputs: the action
drawn from pre-drawn noise (`categorical_sample`, `gaussian_sample`) and its log-probability,
the env's step (trustrl.envs.classic's ``transition``, given as an argument with the env's
constants), the same-step autoreset's records, the episode trackers and the observation and
reward normalisers (trustrl.maths.normalize's `fold_moments` and `normalized`). The functions are
written over a free global ``o``:

- NumPy here: the batched collector's NumPy rollout runs them as they are;
- torch (`TORCH`): the torch rollout, any device, and the unit torch.compile captures (no
  branch tests a tensor's values: ``o.branches`` is False there; the log-softmax is torch's
  fused kernel through masked_log_softmax, the library's implementation of the same
  arithmetic);
- Numba (trustrl.compute.compiled.rollout): compiled over trustrl.compute.compiled.xp, called once
per step in
  the compiled rollout's T loop.

What differs per binding comes in as arguments (the env's ``transition`` and constants, the
action kind's sampler) or as the globals each binding sets: ``o``, ``log_softmax``,
``gaussian_log_density``, ``fold_moments``, ``normalized``, ``HALF``, ``HALF_LOG_2PI``
(float32 in compiled code, where a float64 scalar would promote float32 arithmetic).
tests/test_one_source.py checks that each binding runs this code.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import torch

from trustrl.maths import normalize as _normalize
from trustrl.maths.distributions import (
    HALF_LOG_2PI,
    gaussian_log_density,
    log_softmax_numpy,
    masked_log_softmax,
)
from trustrl.maths.normalize import fold_moments, fold_moments_torch, normalized, normalized_torch
from trustrl.util.rebind import Namespace, rebound

__all__ = ["STEP_FUNCTIONS", "TORCH", "bind", "categorical_sample", "gaussian_sample",
           "observation_input", "policy_env_step"]

_NAMES = ("where", "argmax", "exp", "sqrt", "float32", "float64")
"""The namespace's names the step takes from the array library as it is (set as attributes,
not looked up per call)."""


def _take_last(x: Any, index: Any, axis: int) -> Any:
    """np.take_along_axis for x [P, N, n] and index [P, N, 1] along the last axis, by one
    fancy index (np.take_along_axis builds its index in Python: several times the cost)."""
    n = x.shape[-1]
    return x.reshape(-1, n)[np.arange(index.size), index.reshape(-1)].reshape(index.shape)


o: Any = Namespace("trustrl_envs_step_numpy", np, clamp=_normalize.o.clamp,
                   astype=np.ndarray.astype, take_along_axis=_take_last,
                   any=np.count_nonzero, branches=True, **{n: getattr(np, n) for n in _NAMES})
log_softmax = log_softmax_numpy
HALF = 0.5


def observation_input(obs: Any, mean: Any, var: Any, clip: Any) -> Any:
    """Raw observations [P, n, d] -> the float32 network inputs: each member's running
    normaliser (mean, var [P, d]) applied by `normalize.normalized` in float64."""
    return o.astype(normalized(o.astype(obs, o.float64), mean[:, None], var[:, None], clip,
                               1e-8), o.float32)


def categorical_sample(out: Any, noise: Any, log_std: Any, low: Any, high: Any
                       ) -> tuple[Any, Any, Any]:
    """A softmax's actions from its logits `out` [P, N, n] and Gumbel `noise` (the Gumbel-max
    trick): (actions [P, N], what the env receives (the same), their log-probabilities).
    log_std, low and high are the Gaussian's (unused)."""
    a = o.argmax(out + noise, -1)
    logp = o.take_along_axis(log_softmax(out), a[:, :, None], 2)[:, :, 0]
    return a, a, logp


def gaussian_sample(out: Any, noise: Any, log_std: Any, low: Any, high: Any
                    ) -> tuple[Any, Any, Any]:
    """A diagonal Gaussian's actions from its means `out` [P, N, n], log-std [P, 1, n] and
    standard normal `noise`: (the samples, the samples clipped to the bounds [low, high] for the
    env, the samples' log-probabilities [P, N])."""
    a = out + o.exp(log_std) * noise
    logp = gaussian_log_density(a, out, log_std, o.exp(-log_std), HALF, HALF_LOG_2PI).sum(2)
    return a, o.clamp(a, low, high), logp


def transition(*args: Any) -> Any:  # the env's, given by `bind`
    raise RuntimeError("policy_env_step is unbound: use trustrl.envs.step.bind")


sample = transition  # the action kind's sampler, given by `bind`


def policy_env_step(k: Any, out: Any, noise: Any, reset: Any, log_std: Any,
                    state: tuple[Any, ...], settings: tuple[Any, ...]) -> tuple[Any, ...]:
    """One step of the batched collector, every member's N envs at once, from the actor's
    outputs `out` [P, N, n] at the current observations: the action drawn from `noise`
    [P, N, n] by `sample` (categorical_sample or gaussian_sample, with `log_std` [P, 1, n]),
    the env's step (`transition(k, ...)`: trustrl.envs.classic's with its constants k,
    resetting ended episodes to `reset` [P*N, state_dim]), the episode trackers and the
    observation and reward normalisers. `transition` and `sample` are globals that `bind`
    gives a copy (one per env and binding).

    state: the carried state (env_state, elapsed, obs, ep_ret, ep_len, disc_return, obs_mean,
    obs_var, obs_count, ret_mean, ret_var, ret_count), trustrl.compute.compiled.records.Carry's
    order;
    settings: (norm_obs, norm_rew, gamma, obs_clip, reward_clip, act_lo, act_hi), EnvSettings'.
    Returns (actions, logp, rewards (scaled when norm_rew), terminated, truncated, fin_ret and
    fin_len (the episode's return and length so far), final_x (the network input of the true
    last observation), x (the next network input), the new state); nothing is updated in
    place. The easy mistake: bootstrapping a truncated episode from `obs` (already the reset
    state's first observation where an episode ended) instead of `final_x`, or reading the
    episode's return after the tracker was zeroed."""
    (env_state, elapsed, obs, ep_ret, ep_len, disc_return, obs_mean, obs_var, obs_count,
     ret_mean, ret_var, ret_count) = state
    norm_obs, norm_rew, gamma, obs_clip, r_clip, act_lo, act_hi = settings
    P, N, D = obs.shape[0], obs.shape[1], obs.shape[2]
    a, a_env, logp = sample(out, noise, log_std, act_lo, act_hi)
    env_state, elapsed, next_obs, r, term, trunc, final_obs = transition(
        k, env_state, elapsed, a_env, reset)
    obs = next_obs.reshape((P, N, D))
    final_obs = final_obs.reshape((P, N, D))
    r, term, trunc = r.reshape((P, N)), term.reshape((P, N)), trunc.reshape((P, N))
    done = term | trunc
    fin_ret = ep_ret + r
    fin_len = ep_len + 1
    ep_ret = o.where(done, 0.0, fin_ret)
    ep_len = o.where(done, 0, fin_len)
    if norm_obs:
        obs_mean, obs_var, obs_count = fold_moments(obs_mean, obs_var, obs_count,
                                                    o.astype(obs, o.float64))
        x = observation_input(obs, obs_mean, obs_var, obs_clip)
        # final_obs differs from obs only in the rows whose episode ended
        final_x = (observation_input(final_obs, obs_mean, obs_var, obs_clip)
                   if not o.branches or o.any(done) else x)
    else:
        x, final_x = obs, final_obs
    if norm_rew:
        r64 = o.astype(r, o.float64)
        disc = disc_return * gamma + r64
        ret_mean, ret_var, ret_count = fold_moments(ret_mean, ret_var, ret_count, disc)
        rew = o.astype(o.clamp(r64 / o.sqrt(ret_var[:, None] + 1e-8), -r_clip, r_clip),
                       o.float32)
        disc_return = o.where(done, 0.0, disc)
    else:
        rew = r
    return (a, logp, rew, term, trunc, fin_ret, fin_len, final_x, x,
            (env_state, elapsed, obs, ep_ret, ep_len, disc_return, obs_mean, obs_var,
             obs_count, ret_mean, ret_var, ret_count))


STEP_FUNCTIONS = (observation_input, categorical_sample, gaussian_sample, policy_env_step)
"""The step's functions, each bound to torch below and compiled by
trustrl.compute.compiled.rollout."""
TORCH = rebound("_trustrl_envs_step_torch", "trustrl.envs.step over torch", globals(),
                STEP_FUNCTIONS,
                {"o": Namespace("trustrl_envs_step_torch_ops", torch, astype=torch.Tensor.to,
                                take_along_axis=torch.take_along_dim, clamp=torch.clamp,
                                branches=False, **{n: getattr(torch, n) for n in _NAMES}),
                 "log_softmax": masked_log_softmax, "fold_moments": fold_moments_torch,
                 "normalized": normalized_torch})
"""The step over torch tensors (any device; the log-softmax torch's fused kernel through
masked_log_softmax, the library's implementation of the same arithmetic)."""
_BOUND: dict[tuple[str, Any], Any] = {}


def bind(binding: Any, env_transition: Any, discrete: bool, wrap: Any = None) -> Any:
    """`policy_env_step` of `binding` (this module for NumPy, `TORCH`, or a compiled binding's
    module) with the env's `env_transition` (``Dynamics.functions["transition"]``, a function
    of trustrl.envs.classic's over the same kind of arrays) and the action kind's sampler as
    its globals `transition` and `sample`: a copy of the source's code in a module registered
    under a name made of the two modules' (the same in every process: Numba's disk cache
    records it), passed through `wrap` (e.g. numba.njit) when given. Made once per binding
    and transition."""
    key = (binding.__name__, env_transition)
    f = _BOUND.get(key)
    if f is None:
        g = vars(binding)
        sampler = g["categorical_sample" if discrete else "gaussian_sample"]
        env_module = getattr(env_transition, "py_func", env_transition).__globals__["__name__"]
        name = re.sub(r"\W", "_", f"{binding.__name__}__{env_module}")
        module = rebound(name, f"trustrl.envs.step's policy_env_step over {binding.__name__}",
                         g, (policy_env_step,),
                         {"transition": env_transition, "sample": sampler}, wrap)
        f = _BOUND[key] = module.policy_env_step
    return f
