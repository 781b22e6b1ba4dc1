"""The compiled kernels' arguments, grouped: named tuples that Numba passes whole (the arrays
in them by reference, so a kernel moves state on in place as before). A kernel takes a few of
these instead of dozens of positional arguments; each field says what it holds.

Shapes: P members, N envs (or samples) per member, T steps, D the flat parameter count, n the
actor's outputs (actions of a softmax, or a Gaussian's mean dimensions).
"""

from __future__ import annotations

from typing import Any, NamedTuple


class Policy(NamedTuple):
    """The population's MLP actor-critic (trustrl.nets.popnet.PopActorCritic's layout)."""

    flat: Any  # [P, D] float32: the actor from column 0, the critic from critic_at
    sizes: Any  # int64 [L + 2]: the actor's layer sizes (n_in, h_1, ..., h_L, n)
    relu: bool  # the hidden activation: ReLU, else tanh
    discrete: bool  # a softmax over n actions, else a Gaussian's mean
    critic_at: int  # the critic's first column in flat
    log_std_at: int  # the log-std's first column (Box; 0 for a softmax)


class Draws(NamedTuple):
    """A rollout's random numbers, drawn ahead by trustrl.maths.rng."""

    noise: Any  # [T, P, N, n] float32: Gumbel (softmax) or standard normal (Gaussian)
    resets: Any  # [T, P*N, state_dim]: the start states of the episodes that end


class Carry(NamedTuple):
    """What the batched collector carries from one rollout to the next (moved on in place)."""

    env_state: Any  # [P*N, state_dim]
    elapsed: Any  # [P*N] steps into the episode
    obs: Any  # [P, N, obs_dim] the raw observation
    ep_ret: Any  # [P, N] the episode's return so far
    ep_len: Any  # [P, N] its length so far
    disc_return: Any  # [P, N] the discounted return the reward scaler tracks
    obs_mean: Any  # [P, obs_dim] the observation normaliser's moments
    obs_var: Any
    obs_count: Any  # [1]
    ret_mean: Any  # [P] the reward scaler's moments
    ret_var: Any
    ret_count: Any  # [1]


class EnvSettings(NamedTuple):
    """The collector's settings: normalisers and action bounds."""

    norm_obs: bool
    norm_rew: bool
    gamma: float
    obs_clip: float
    reward_clip: float
    act_lo: Any  # [n] float32 (Box; a placeholder for a softmax)
    act_hi: Any


class Steps(NamedTuple):
    """A rollout's records [T, P, N, ...], written by the rollout."""

    obs: Any  # [T, P, N, obs_dim] float32 the network's input (normalised)
    act_i: Any  # [T, P, N] int64 (softmax; [0, 0, 0] otherwise)
    act_f: Any  # [T, P, N, n] float32 (Gaussian; [0, 0, 0, 0] otherwise)
    logp: Any  # [T, P, N] float32 log pi_old(a | s)
    rewards: Any  # [T, P, N] float32 (scaled)
    terminated: Any  # [T, P, N] bool
    truncated: Any  # [T, P, N] bool
    fin_ret: Any  # [T, P, N] float64 the return of an episode that ended there
    fin_len: Any  # [T, P, N] int64 its length
    final_x: Any  # [T, P, N, obs_dim] float32 the network input of a truncated final state
    out: Any  # [T, P, N, n] float32 the actor's outputs (pi_old's; a softmax's logits masked
    # where the env gives masks)
    action_mask: Any  # [T, P, N, n] bool the valid actions each action was drawn under (an env
    # with masks; [0, 0, 0, 0] otherwise)


class Adam(NamedTuple):
    """Adam over the whole flat parameters (trustrl.maths.optim.PopAdam's state)."""

    m: Any  # [P, D] float32 first moments (moved on in place)
    v: Any  # [P, D] float32 second moments
    t: Any  # [P] int64 step counts
    lr: float
    beta1: float
    beta2: float
    eps: float


class Batch(NamedTuple):
    """PPO's batch [P, B, ...] (trustrl.collect.rollout.Batch's fields)."""

    obs: Any  # [P, B, obs_dim] float32
    act_i: Any  # [P, B] int64 (softmax; a [1, 1] placeholder otherwise)
    act_f: Any  # [P, B, n] float32 (Gaussian; a [1, 1, 1] placeholder otherwise)
    logp_old: Any  # [P, B] float32
    advantages: Any  # [P, B] float32
    returns: Any  # [P, B] float32
    values_old: Any  # [P, B] float32
    action_mask: Any  # [P, B, n] bool the valid actions of a masked softmax batch (kernels.
    # NO_MASK, zero-size, on an unmasked one)


class Loss(NamedTuple):
    """The loss's settings (PPO.loss and its config)."""

    clip_eps: float  # the ratio's clip range (the diagnostics' clip fraction)
    vf_coef: float
    ent_coef: float
    norm_adv: bool  # advantages normalised per minibatch
    objective_args: Any  # a tuple of floats: the objective's arguments after (ratio, A)
    clip_value: bool  # the value loss clipped around values_old
    max_grad_norm: float


class Penalty(NamedTuple):
    """A KL penalty beta KL(pi_old || pi) per member (PPO.kl_coef: zeros for none)."""

    kl_coef: Any  # [P] float64
    old_out: Any  # [P, B, n] float32 pi_old's outputs (a [1, 1, 1] placeholder for none)
    log_std_old: Any  # [P, n] float32 pi_old's log-std (Box; a [1, 1] placeholder otherwise)


class Update(NamedTuple):
    """What trustrl.algos.ppo.k_epochs's compiled `step` and `diagnose` take (its `args`)."""

    policy: Any  # Policy
    adam: Any  # Adam
    batch: Any  # Batch
    loss: Any  # Loss
    penalty: Any  # Penalty
    grad: Any  # [P, D] float32: room for a minibatch's gradients
    old_out: Any  # [P, B, n] float32 pi_old's outputs (the diagnostics')
    flat_old: Any  # [P, D] float32 pi_old's parameters
    quantiles: Any  # float64: the ratio quantiles the diagnostics report
    diag: Any  # [P, 7 + quantiles] float64: the last diagnostics (kernels.ppo_diagnostics')


class Epochs(NamedTuple):
    """PPO's K epochs: their shuffles and the KL early stop."""

    order: Any  # [K, P, B] int64 each epoch's order of the samples
    minibatch_size: int
    kl_stop: bool  # a member stops once its full-batch approx KL passed target_kl
    target_kl: float


class IterationOut(NamedTuple):
    """What the fused iteration writes besides the carried state and the parameters."""

    terminated: Any  # [T, P, N] bool
    truncated: Any  # [T, P, N] bool
    fin_ret: Any  # [T, P, N] float64
    fin_len: Any  # [T, P, N] int64
    last: Any  # [P, 4] float32 the last epoch's means: policy loss, value loss, grad norm,
    # clip fraction
    epochs_run: Any  # [P] float32
    diag: Any  # [P, 7 + quantiles] float64 (kernels.ppo_diagnostics' columns)
    stats: Any  # [P, 5] float64 (trustrl.compute.compiled.STATS)
    action_mask: Any  # [T, P, N, n] bool the rollout's masks (an env with masks, which the
    # update then reads; [0, 0, 0, 0] otherwise)


class Rows(NamedTuple):
    """The Gymnasium collector's records [T, N, ...] that the per-step policy kernels write a
    row of."""

    obs: Any  # [T, N, obs_dim] float32 the network inputs
    actions: Any  # [T, N, n] float32 (Box, unclipped) or [T, N] int64 (Discrete)
    logp: Any  # [T, N] float32
    values: Any  # [T, N] float32 V(s)
    out: Any  # [T, N, n] float32 the actor's outputs (pi_old's)
