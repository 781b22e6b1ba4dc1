"""PPO lab: the pieces of PPO-clip, for you to write.

Four tasks, graded by test_ppo.py (see README.md):

    Task 1  clipped_surrogate_loss               the policy loss of PPO-clip
    Task 2  approx_kl, clip_fraction             the two numbers to watch during an update
    Task 3  value_loss                           the critic's loss, plain and clipped
    Task 4  ppo_update                           K epochs of minibatch steps on one batch

Check your work with `trustrl lab check` (or `python -m pytest -m task1`, ...). Every function
below raises NotImplementedError until you replace its body. Conventions used throughout:

    B              number of samples (state-action pairs) in a batch or minibatch
    logp_new       log pi_theta(a_t | s_t) under the policy being optimised, shape [B]
    logp_old       log pi_old(a_t | s_t), stored when the batch was collected, shape [B]
    rho            the probability ratio pi_theta / pi_old = exp(logp_new - logp_old)

Once a task passes, `trustrl lab solution N` shows the reference implementation of Task N.
"""

from __future__ import annotations

import torch
from torch import Tensor

# --------------------------------------------------------------------------------------------
# Task 1
# --------------------------------------------------------------------------------------------


def clipped_surrogate_loss(
    logp_new: Tensor, logp_old: Tensor, advantages: Tensor, clip_eps: float
) -> Tensor:
    """The PPO-clip policy loss: a scalar that an optimizer MINIMISES.

    Args:
        logp_new: [B] log-probabilities of the batch's actions under the current policy. They
            carry gradients; the loss must stay differentiable with respect to them.
        logp_old: [B] log-probabilities stored at collection time (constants).
        advantages: [B] advantage estimates A_t (already normalised by the caller, or not).
        clip_eps: the clip range epsilon, e.g. 0.2 (the band is [1 - eps, 1 + eps]).

    Returns:
        A 0-dim tensor: minus the batch mean of min(rho * A, clip(rho, 1-eps, 1+eps) * A).

    Steps:
        1. rho = exp(logp_new - logp_old), shape [B]. Work with log-probabilities and take the
           exponential of their difference; dividing probabilities is fragile.
        2. The unclipped term rho * A and the clipped term clip(rho, 1-eps, 1+eps) * A, both [B].
        3. Their element-wise minimum, [B]: the pessimistic of the two for every sample.
        4. Average over the batch and flip the sign (we maximise the objective, optimizers
           minimise losses).

    The easy mistake: clipping the advantage instead of the ratio, or reaching for max where
    the advantage is negative. With min and torch.clamp, autograd gives every one of the four
    cases of the chapter's table without a single if statement.
    """
    raise NotImplementedError("Task 1: write clipped_surrogate_loss")


# --------------------------------------------------------------------------------------------
# Task 2
# --------------------------------------------------------------------------------------------


def approx_kl(logp_new: Tensor, logp_old: Tensor) -> float:
    """Estimate KL(pi_old || pi_new) from the batch's log-probabilities (the k3 estimator).

    Args:
        logp_new: [B] log-probabilities of the stored actions under the current policy.
        logp_old: [B] log-probabilities of the same actions stored at collection time.

    Returns:
        A Python float: mean over the batch of (rho - 1) - log(rho).

    Steps:
        1. log_rho = logp_new - logp_old and rho = exp(log_rho), shape [B].
        2. Per sample (rho - 1) - log_rho: never negative, since log x <= x - 1.
        3. Mean over the batch, under torch.no_grad(), as a float (.item()).

    The easy mistake: logging mean(-log rho) (the k1 estimator). It is unbiased too, but single
    samples can be negative and it is much noisier; or taking the log-ratio the wrong way round.
    """
    raise NotImplementedError("Task 2: write approx_kl")


def clip_fraction(logp_new: Tensor, logp_old: Tensor, clip_eps: float) -> float:
    """The fraction of samples whose ratio has left the band [1 - eps, 1 + eps].

    Args:
        logp_new, logp_old: [B] log-probabilities, as in approx_kl.
        clip_eps: the clip range epsilon.

    Returns:
        A Python float in [0, 1].

    Steps:
        1. rho = exp(logp_new - logp_old), shape [B].
        2. A boolean [B]: rho > 1 + eps or rho < 1 - eps.
        3. Its mean as a float (convert the booleans to float first), under torch.no_grad().

    The easy mistake: comparing the log-ratio with eps (|log rho| > eps is a different band),
    checking only one edge, or returning a count instead of a fraction.
    """
    raise NotImplementedError("Task 2: write clip_fraction")


# --------------------------------------------------------------------------------------------
# Task 3
# --------------------------------------------------------------------------------------------


def value_loss(
    values: Tensor,
    returns: Tensor,
    values_old: Tensor | None = None,
    clip_eps: float | None = None,
) -> Tensor:
    """The critic's loss: 0.5 * mean((V - R)^2), or its clipped version.

    Args:
        values: [B] V_phi(s_t) under the current critic (carry gradients).
        returns: [B] the critic's targets R_t = A_t + V_old(s_t) (constants).
        values_old: [B] V_old(s_t) stored at collection time, or None.
        clip_eps: how far V may move from V_old before the clipped term takes over, or None.

    Returns:
        A 0-dim tensor.

    Steps:
        1. err = (values - returns) ** 2, shape [B].
        2. If values_old or clip_eps is None: return 0.5 * err.mean().
        3. Otherwise v_clip = values_old + clamp(values - values_old, -eps, eps), shape [B],
           and err_clip = (v_clip - returns) ** 2.
        4. Return 0.5 * mean(max(err, err_clip)).

    The easy mistake: min instead of max in step 4. As for the policy, the clipped version is
    the pessimistic one, which for a loss means the LARGER of the two. Also keep the 0.5 and the
    mean (not the sum): the value-loss weight vf_coef is tuned for this scale.
    """
    raise NotImplementedError("Task 3: write value_loss")


# --------------------------------------------------------------------------------------------
# Task 4
# --------------------------------------------------------------------------------------------


def ppo_update(
    agent,
    optimizer: torch.optim.Optimizer,
    batch,
    *,
    epochs: int,
    minibatch_size: int,
    clip_eps: float,
    vf_coef: float,
    ent_coef: float,
    max_grad_norm: float,
    target_kl: float | None = None,
    clip: bool = True,
) -> dict[str, float]:
    """Improve the policy and the critic on one batch: K epochs of shuffled minibatch steps.

    Args:
        agent: the actor-critic network (a trustrl.nets.policies.ActorCritic):
            agent.dist(obs) -> a distribution d with d.log_prob(actions) [B] and d.entropy() [B];
            agent.value(obs) -> V(s) [B].
        optimizer: built over agent.parameters() (Adam in run.py); you only call zero_grad,
            step, and clip the gradients in between.
        batch: a trustrl.collect.rollout.Batch with tensors of first dimension B = len(batch):
            obs [B, obs_dim], actions [B] (or [B, act_dim]), logp_old [B], values_old [B],
            advantages [B], returns [B]. logp_old and values_old were frozen at collection.
        epochs: K, the number of passes over the batch.
        minibatch_size: samples per optimizer step (B is a multiple of it in the lab).
        clip_eps: the clip range for clipped_surrogate_loss.
        vf_coef, ent_coef: the weights c1 and c2 of the value loss and the entropy bonus.
        max_grad_norm: the global gradient norm is rescaled to at most this before each step.
        target_kl: if not None, stop the epochs early once approx KL exceeds it.
        clip: False optimises the plain surrogate -mean(rho * A) instead (the "no clip"
            variant of run.py); everything else stays the same.

    Returns:
        A dict with at least "epochs_run" (epochs actually run), "approx_kl" and
        "clip_fraction" (both measured on the whole batch at the end of the update, against
        the stored logp_old). You may add more (losses, entropy, ...).

    Steps:
        1. B = len(batch). For epoch = 1..K:
        2.   idx = torch.randperm(B); walk through it in slices of minibatch_size.
        3.   For each minibatch mb = idx[start:start + minibatch_size]:
               a. dist = agent.dist(batch.obs[mb]); logp_new = dist.log_prob(batch.actions[mb]);
                  entropy = dist.entropy().mean(); values = agent.value(batch.obs[mb]).
               b. adv = batch.advantages[mb], normalised WITHIN this minibatch:
                  (adv - adv.mean()) / (adv.std() + 1e-8).
               c. Policy loss: clipped_surrogate_loss(logp_new, batch.logp_old[mb], adv,
                  clip_eps) if clip, else -mean(exp(logp_new - logp_old) * adv).
               d. v_loss = value_loss(values, batch.returns[mb]).
               e. loss = policy_loss + vf_coef * v_loss - ent_coef * entropy.
               f. optimizer.zero_grad(); loss.backward();
                  torch.nn.utils.clip_grad_norm_(agent.parameters(), max_grad_norm);
                  optimizer.step().
        4.   After the epoch: under torch.no_grad(), compute logp_new on the WHOLE batch and
             approx_kl(logp_new, batch.logp_old). If target_kl is not None and it exceeds
             target_kl, stop: no further epochs (this epoch still counts in epochs_run).
        5. Return {"epochs_run": ..., "approx_kl": ..., "clip_fraction": ...} measured on the
           whole batch with the final policy.

    The easy mistakes: recomputing logp_old from the current policy (it must stay the one
    stored in the batch: it is the centre of the trust region, and after the first step the
    current policy has moved away from it); normalising the advantages once over the whole
    batch instead of per minibatch; checking the KL on one minibatch or after every step.
    """
    raise NotImplementedError("Task 4: write ppo_update")
