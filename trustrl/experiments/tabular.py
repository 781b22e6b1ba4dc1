"""Exact dynamic programming on small finite MDPs with tabular softmax policies.

The chapter's theory (the performance difference lemma, the surrogate L matching J to first
order, TRPO's lower bound, KL ~ 1/2 dtheta^T F dtheta) is about exact expectations. On an MDP
with a handful of states every one of them is a linear solve, so the statements can be checked to
float64 round-off instead of up to Monte-Carlo noise. Everything here is float64 torch, pure
(no state, no in-place updates of inputs) and differentiable with autograd through
torch.linalg.solve, so gradients and Hessians of J and L are exact too.

Notation (one MDP): S states, A actions, P[s, a, s'] transition probabilities, R[s, a] expected
rewards, mu[s] the start distribution, gamma the discount. A policy is a [S, A] matrix of
probabilities pi[s, a]; a tabular softmax policy has logits theta[S, A] and pi = softmax(theta)
row by row. Values are discounted sums without normalisation: J = E[sum_t gamma^t r_t] = mu . V,
and the discounted state visitation d(s) = sum_t gamma^t p_t(s) sums to 1 / (1 - gamma).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from trustrl.maths.distributions import Categorical

DTYPE = torch.float64


@dataclass(frozen=True)
class TabularMDP:
    """A finite discounted MDP: P [S, A, S] (rows sum to 1), R [S, A], mu [S], gamma in [0, 1)."""

    P: Tensor
    R: Tensor
    mu: Tensor
    gamma: float

    def __post_init__(self) -> None:
        S, A = self.R.shape
        if self.P.shape != (S, A, S) or self.mu.shape != (S,):
            raise ValueError(f"shapes P {tuple(self.P.shape)}, R {tuple(self.R.shape)}, "
                             f"mu {tuple(self.mu.shape)} do not fit together")
        if not 0.0 <= self.gamma < 1.0:
            raise ValueError(f"gamma must be in [0, 1), got {self.gamma}")

    @property
    def n_states(self) -> int:
        return int(self.R.shape[0])

    @property
    def n_actions(self) -> int:
        return int(self.R.shape[1])

    @property
    def value_scale(self) -> float:
        """max |R| / (1 - gamma): a bound on |V|, |Q| and |J|, the scale for round-off errors."""
        return float(self.R.abs().max()) / (1.0 - self.gamma)


def random_mdp(n_states: int, n_actions: int, gamma: float, rng: np.random.Generator,
               concentration: float = 0.5) -> TabularMDP:
    """A random MDP: each P[s, a, :] ~ Dirichlet(concentration) (below 1: peaked, slower
    mixing), R ~ N(0, 1), mu ~ Dirichlet(1) (every state a possible start)."""
    P = rng.dirichlet(np.full(n_states, concentration), size=(n_states, n_actions))
    R = rng.standard_normal((n_states, n_actions))
    mu = rng.dirichlet(np.ones(n_states))
    return TabularMDP(torch.tensor(P, dtype=DTYPE), torch.tensor(R, dtype=DTYPE),
                      torch.tensor(mu, dtype=DTYPE), float(gamma))


def random_logits(n_states: int, n_actions: int, rng: np.random.Generator,
                  scale: float = 1.0) -> Tensor:
    """Logits theta[S, A] with i.i.d. N(0, scale^2) entries."""
    return torch.tensor(scale * rng.standard_normal((n_states, n_actions)), dtype=DTYPE)


def policy(theta: Tensor) -> Tensor:
    """pi[s, a] = softmax(theta[s, :])[a]."""
    return torch.softmax(theta, dim=-1)


def transition_matrix(mdp: TabularMDP, pi: Tensor) -> Tensor:
    """P_pi[s, s'] = sum_a pi[s, a] P[s, a, s']."""
    return torch.einsum("sa,sat->st", pi, mdp.P)


def reward_vector(mdp: TabularMDP, pi: Tensor) -> Tensor:
    """r_pi[s] = sum_a pi[s, a] R[s, a]."""
    return (pi * mdp.R).sum(-1)


def _resolvent_system(mdp: TabularMDP, pi: Tensor) -> Tensor:
    return torch.eye(mdp.n_states, dtype=pi.dtype) - mdp.gamma * transition_matrix(mdp, pi)


def state_values(mdp: TabularMDP, pi: Tensor) -> Tensor:
    """V^pi by one linear solve: V = (I - gamma P_pi)^-1 r_pi."""
    return torch.linalg.solve(_resolvent_system(mdp, pi), reward_vector(mdp, pi))


def action_values(mdp: TabularMDP, pi: Tensor) -> Tensor:
    """Q^pi[s, a] = R[s, a] + gamma sum_s' P[s, a, s'] V^pi(s')."""
    return mdp.R + mdp.gamma * mdp.P @ state_values(mdp, pi)


def advantages(mdp: TabularMDP, pi: Tensor) -> Tensor:
    """A^pi[s, a] = Q^pi(s, a) - V^pi(s); sum_a pi[s, a] A^pi[s, a] = 0 in every state."""
    V = state_values(mdp, pi)
    return mdp.R + mdp.gamma * mdp.P @ V - V[:, None]


def discounted_visitation(mdp: TabularMDP, pi: Tensor) -> Tensor:
    """d^pi(s) = sum_t gamma^t p_t(s), unnormalised (sums to 1 / (1 - gamma)).

    p_t = mu P_pi^t, so d^T = mu^T (I - gamma P_pi)^-1: one transposed linear solve.
    """
    return torch.linalg.solve(_resolvent_system(mdp, pi).T, mdp.mu.to(pi.dtype))


def state_distributions(mdp: TabularMDP, pi: Tensor, horizon: int) -> Tensor:
    """p_t(s) for t = 0 .. horizon - 1 ([horizon, S]), by propagating p_{t+1} = p_t P_pi."""
    P_pi = transition_matrix(mdp, pi)
    rows = [mdp.mu.to(pi.dtype)]
    for _ in range(horizon - 1):
        rows.append(rows[-1] @ P_pi)
    return torch.stack(rows)


def truncation_horizon(gamma: float, rel_tail: float = 1e-13) -> int:
    """Smallest T with gamma^T <= rel_tail * (1 - gamma): truncating sum_t gamma^t x_t, |x_t|
    <= c, after T terms then leaves a tail below rel_tail * c."""
    if gamma == 0.0:
        return 1
    return max(1, math.ceil(math.log(rel_tail * (1.0 - gamma)) / math.log(gamma)))


def objective(mdp: TabularMDP, theta: Tensor) -> Tensor:
    """J(theta) = E[sum_t gamma^t r_t] = mu . V^{pi_theta} (a 0-d tensor, differentiable)."""
    return mdp.mu.to(theta.dtype) @ state_values(mdp, policy(theta))


def old_policy_terms(mdp: TabularMDP, theta_old: Tensor) -> tuple[Tensor, Tensor]:
    """(d^old, A^old): the old policy's unnormalised discounted visitation [S] and advantages
    [S, A], the two things the surrogate holds fixed (computed detached from theta_old)."""
    pi_old = policy(theta_old.detach())
    return discounted_visitation(mdp, pi_old), advantages(mdp, pi_old)


def surrogate(mdp: TabularMDP, theta: Tensor, theta_old: Tensor,
              old: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """The exact surrogate of the chapter's derivation, with the true advantage and the old
    policy's unnormalised discounted visitation:

        L(theta) = sum_t gamma^t sum_s p_t^old(s) sum_a pi_theta(a|s) A^old(s, a)
                 = sum_s d^old(s) sum_a pi_theta(a|s) A^old(s, a).

    theta_old is held fixed (detached): gradients flow through pi_theta only. `old` may pass
    old_policy_terms(mdp, theta_old), precomputed, when L is evaluated at many theta.
    """
    d_old, A_old = old if old is not None else old_policy_terms(mdp, theta_old)
    return d_old @ (policy(theta) * A_old).sum(-1)


def kl_per_state(theta_old: Tensor, theta: Tensor) -> Tensor:
    """KL(pi_old(.|s) || pi_theta(.|s)) for every state ([S]), via trustrl's Categorical."""
    return Categorical(theta_old).kl(Categorical(theta))


def normalised_visitation(mdp: TabularMDP, pi: Tensor) -> Tensor:
    """(1 - gamma) d^pi: the discounted visitation as a probability distribution over states."""
    d = discounted_visitation(mdp, pi)
    return d / d.sum()


def mean_kl(mdp: TabularMDP, theta_old: Tensor, theta: Tensor) -> Tensor:
    """sum_s w(s) KL(pi_old(.|s) || pi_theta(.|s)), w the old policy's normalised visitation
    (the population version of the chapter's batch-averaged KL)."""
    w = normalised_visitation(mdp, policy(theta_old.detach()))
    return w @ kl_per_state(theta_old.detach(), theta)


def fisher(mdp: TabularMDP, theta_old: Tensor) -> Tensor:
    """F = E_{s ~ w, a ~ pi_old}[grad log pi grad log pi^T] over the flattened logits [S * A],
    w the old normalised visitation.

    For a softmax, grad_{theta[s, :]} log pi(a|s) = e_a - pi(.|s) and zero for other states, so
    F is block diagonal with blocks w(s) (diag(pi_s) - pi_s pi_s^T).
    """
    pi = policy(theta_old.detach())
    w = normalised_visitation(mdp, pi)
    blocks = [w[s] * (torch.diag(pi[s]) - torch.outer(pi[s], pi[s]))
              for s in range(mdp.n_states)]
    return torch.block_diag(*blocks)
