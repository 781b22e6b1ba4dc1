"""One step of the batched collector (trustrl.collect.batched), written once over an array
namespace.

`policy_env_step` takes every member's N envs one step on from the actor's outputs: the action
drawn from pre-drawn noise (`categorical_sample`, `gaussian_sample`) and its log-probability,
under the valid actions of each env's state where the env gives masks (its ``mask_fn``, bound
as `valid_actions`; the logits masked by distributions.mask_logits; `every_action`, no mask,
otherwise),
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

What differs per binding comes in as arguments (the env's ``transition``, mask function and
constants, the action kind's sampler) or as the globals each binding sets: ``o``,
``log_softmax``, ``mask_logits``, ``NO_MASK``, ``gaussian_log_density``, ``fold_moments``,
``normalized``, ``HALF``, ``HALF_LOG_2PI``
(float32 in compiled code, where a float64 scalar would promote float32 arithmetic).
tests/test_one_source.py checks that each binding runs this code.
"""

from __future__ import annotations

import re
import types
from typing import Any

import numpy as np
import torch

from trustrl.maths import distributions
from trustrl.maths import normalize as _normalize
from trustrl.maths.distributions import (
    HALF_LOG_2PI,
    gaussian_log_density,
    log_softmax_numpy,
    mask_logits_numpy,
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
mask_logits = mask_logits_numpy
HALF = 0.5
NO_MASK = np.zeros((0, 1), np.bool_)
"""The mask of an env whose every action is valid (or of a run with action_mask 'off'): no
rows, which `policy_env_step` and the samplers read as no mask (one shape test a step; each
binding has its own, of its arrays' type)."""


def observation_input(obs: Any, mean: Any, var: Any, clip: Any) -> Any:
    """Raw observations [P, n, d] -> the float32 network inputs: each member's running
    normaliser (mean, var [P, d]) applied by `normalize.normalized` in float64."""
    return o.astype(normalized(o.astype(obs, o.float64), mean[:, None], var[:, None], clip,
                               1e-8), o.float32)


def every_action(k: Any, state: Any) -> Any:
    """The valid actions of an env without masks (or of a run with action_mask 'off'):
    NO_MASK, none. (An env with masks gives its own function of the state, its ``mask_fn``:
    trustrl.envs.classic.)"""
    return NO_MASK


def categorical_sample(out: Any, noise: Any, log_std: Any, low: Any, high: Any, valid: Any
                       ) -> tuple[Any, Any, Any, Any]:
    """A softmax's actions from its logits `out` [P, N, n] and Gumbel `noise` (the Gumbel-max
    trick), under the valid actions `valid` [P*N, n] (NO_MASK: all valid): the logits masked
    by distributions.mask_logits first, so that an invalid action is never drawn and the
    log-probability is over the valid ones. Returns (actions [P, N], what the env receives
    (the same), their log-probabilities, the (masked) logits: pi_old's). log_std, low and high
    are the Gaussian's (unused)."""
    if valid.shape[0] > 0:
        out = mask_logits(out, valid.reshape(out.shape))
    a = o.argmax(out + noise, -1)
    logp = o.take_along_axis(log_softmax(out), a[:, :, None], 2)[:, :, 0]
    return a, a, logp, out


def gaussian_sample(out: Any, noise: Any, log_std: Any, low: Any, high: Any, valid: Any
                    ) -> tuple[Any, Any, Any, Any]:
    """A diagonal Gaussian's actions from its means `out` [P, N, n], log-std [P, 1, n] and
    standard normal `noise`: (the samples, the samples clipped to the bounds [low, high] for the
    env, the samples' log-probabilities [P, N], the means). valid is the softmax's (unused: Box
    actions are not masked)."""
    a = out + o.exp(log_std) * noise
    logp = gaussian_log_density(a, out, log_std, o.exp(-log_std), HALF, HALF_LOG_2PI).sum(2)
    return a, o.clamp(a, low, high), logp, out


def transition(*args: Any) -> Any:  # the env's, given by `bind`
    raise RuntimeError("policy_env_step is unbound: use trustrl.envs.step.bind")


sample = transition  # the action kind's sampler, given by `bind`
valid_actions = transition  # the env's mask function, or every_action: given by `bind`


def policy_env_step(k: Any, out: Any, noise: Any, reset: Any, log_std: Any,
                    state: tuple[Any, ...], settings: tuple[Any, ...]) -> tuple[Any, ...]:
    """One step of the batched collector, every member's N envs at once, from the actor's
    outputs `out` [P, N, n] at the current observations: the valid actions of the current
    states (`valid_actions(k, env_state)`: the env's mask function, or NO_MASK), the action
    drawn under them from `noise` [P, N, n] by `sample` (categorical_sample or
    gaussian_sample, with `log_std` [P, 1, n]), the env's step (`transition(k, ...)`:
    trustrl.envs.classic's with its constants k, resetting ended episodes to `reset`
    [P*N, state_dim]), the episode trackers and the
    observation and reward normalisers. `transition`, `sample` and `valid_actions` are
    globals that `bind` gives a copy (one per env, mask and binding).

    state: the carried state (env_state, elapsed, obs, ep_ret, ep_len, disc_return, obs_mean,
    obs_var, obs_count, ret_mean, ret_var, ret_count), trustrl.compute.compiled.records.Carry's
    order;
    settings: (norm_obs, norm_rew, gamma, obs_clip, reward_clip, act_lo, act_hi), EnvSettings'.
    Returns (actions, logp, rewards (scaled when norm_rew), terminated, truncated, fin_ret and
    fin_len (the episode's return and length so far), final_x (the network input of the true
    last observation), x (the next network input), the new state, the valid actions the
    action was drawn under ([P*N, n], or NO_MASK), the actor's outputs as sampled from (a
    softmax's logits masked: pi_old's)); nothing is updated in place. The easy mistake:
    bootstrapping a truncated episode from `obs` (already the reset state's first
    observation where an episode ended) instead of `final_x`, or reading the episode's
    return after the tracker was zeroed."""
    (env_state, elapsed, obs, ep_ret, ep_len, disc_return, obs_mean, obs_var, obs_count,
     ret_mean, ret_var, ret_count) = state
    norm_obs, norm_rew, gamma, obs_clip, r_clip, act_lo, act_hi = settings
    P, N, D = obs.shape[0], obs.shape[1], obs.shape[2]
    valid = valid_actions(k, env_state)
    a, a_env, logp, logits = sample(out, noise, log_std, act_lo, act_hi, valid)
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
             obs_count, ret_mean, ret_var, ret_count), valid, logits)


STEP_FUNCTIONS = (observation_input, every_action, categorical_sample, gaussian_sample,
                  policy_env_step)
"""The step's functions, each bound to torch below and compiled by
trustrl.compute.compiled.rollout."""
TORCH = rebound("_trustrl_envs_step_torch", "trustrl.envs.step over torch", globals(),
                STEP_FUNCTIONS,
                {"o": Namespace("trustrl_envs_step_torch_ops", torch, astype=torch.Tensor.to,
                                take_along_axis=torch.take_along_dim, clamp=torch.clamp,
                                branches=False, **{n: getattr(torch, n) for n in _NAMES}),
                 "log_softmax": masked_log_softmax, "mask_logits": distributions.mask_logits,
                 "NO_MASK": torch.zeros((0, 1), dtype=torch.bool),
                 "fold_moments": fold_moments_torch, "normalized": normalized_torch})
"""The step over torch tensors (any device; the log-softmax torch's fused kernel through
masked_log_softmax, the library's implementation of the same arithmetic)."""
_BOUND: dict[tuple[str, Any, Any], Any] = {}


def bind(binding: Any, env_transition: Any, discrete: bool, wrap: Any = None,
         env_mask: Any = None) -> Any:
    """`policy_env_step` of `binding` (this module for NumPy, `TORCH`, or a compiled binding's
    module) with the env's `env_transition` (``Dynamics.functions["transition"]``, a function
    of trustrl.envs.classic's over the same kind of arrays), the action kind's sampler and the
    env's mask function `env_mask` (``Dynamics._mask``, of the same namespace; None: the
    binding's `every_action`, no mask) as its globals `transition`, `sample` and
    `valid_actions`: a copy of the source's code in a module registered under a name made of
    the modules' (the same in every process: Numba's disk cache records it), passed through
    `wrap` (e.g. numba.njit) when given. Made once per binding, transition and mask."""
    key = (binding.__name__, env_transition, env_mask)
    f = _BOUND.get(key)
    if f is None:
        g = vars(binding)
        sampler = g["categorical_sample" if discrete else "gaussian_sample"]
        env_module = getattr(env_transition, "py_func", env_transition).__globals__["__name__"]
        name = re.sub(r"\W", "_", f"{binding.__name__}__{env_module}"
                      + ("" if env_mask is None else "__masked"))
        source = policy_env_step
        if env_mask is not None:  # its own name: Numba's disk cache files a function by its
            # source file and qualified name, and the env's unmasked step has the same types
            source = types.FunctionType(policy_env_step.__code__, policy_env_step.__globals__,
                                        policy_env_step.__name__)
            source.__qualname__ = f"{policy_env_step.__qualname__}_masked"
        module = rebound(name, f"trustrl.envs.step's policy_env_step over {binding.__name__}",
                         g, (source,),
                         {"transition": env_transition, "sample": sampler,
                          "valid_actions": g["every_action"] if env_mask is None else env_mask},
                         wrap)
        f = _BOUND[key] = module.policy_env_step
    return f
