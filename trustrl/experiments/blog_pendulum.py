"""The blog's PPO on Pendulum (002, sections 2.6-2.7), in its exact setting, for reproduction.

Deliberately not trustrl's PPO: one env, whole episodes until a batch holds >= 2048 steps,
plain discounted returns G_t (no bootstrap, no GAE), advantages G - V(s) standardised over the
batch, K = 10 epochs of minibatch 64 with separate actor and critic Adam steps (lr 3e-4, no
gradient clipping, no annealing), PyTorch's default layer initialisation, log-std starting at
-0.5, gamma 0.95, eps 0.2. Variants: no clip (the plain surrogate) and K = 1.
The losses are trustrl's own (clipped_surrogate_loss, surrogate_loss).
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from trustrl.maths.distributions import DiagGaussian
from trustrl.maths.losses import clipped_surrogate_loss, surrogate_loss


@dataclass(frozen=True)
class BlogSettings:
    gamma: float = 0.95
    batch_steps: int = 2048
    epochs: int = 10
    minibatch: int = 64
    lr: float = 3e-4
    clip_eps: float = 0.2
    log_std_init: float = -0.5
    iterations: int = 60
    clip: bool = True


class Actor(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, log_std_init: float, h: int = 64):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(obs_dim, h), nn.Tanh(), nn.Linear(h, h), nn.Tanh())
        self.mean = nn.Linear(h, act_dim)
        self.log_std = nn.Parameter(torch.zeros(act_dim) + log_std_init)

    def dist(self, obs: torch.Tensor) -> DiagGaussian:
        return DiagGaussian(self.mean(self.body(obs)), self.log_std)


def critic(obs_dim: int, h: int = 64) -> nn.Module:
    return nn.Sequential(nn.Linear(obs_dim, h), nn.Tanh(), nn.Linear(h, h), nn.Tanh(),
                         nn.Linear(h, 1))


def discounted_returns(rewards: list[float], gamma: float) -> list[float]:
    g, out = 0.0, []
    for r in reversed(rewards):
        g = r + gamma * g
        out.append(g)
    return out[::-1]


@torch.no_grad()
def collect(env: gym.Env, actor: Actor, s: BlogSettings):
    S, A, LOGP, RET, ep_rets = [], [], [], [], []
    lo, hi = env.action_space.low, env.action_space.high
    steps = 0
    while steps < s.batch_steps:
        obs, _ = env.reset()
        rewards, done = [], False
        while not done:
            d = actor.dist(torch.as_tensor(obs, dtype=torch.float32)[None])
            a = d.sample()
            S.append(obs)
            A.append(a[0].numpy())
            LOGP.append(float(d.log_prob(a)))
            obs, r, term, trunc, _ = env.step(np.clip(a[0].numpy(), lo, hi))
            rewards.append(float(r))
            done = term or trunc
            steps += 1
        RET += discounted_returns(rewards, s.gamma)
        ep_rets.append(sum(rewards))
    return (torch.as_tensor(np.array(S), dtype=torch.float32),
            torch.as_tensor(np.array(A), dtype=torch.float32),
            torch.tensor(LOGP), torch.tensor(RET, dtype=torch.float32), float(np.mean(ep_rets)))


def update(actor: Actor, value: nn.Module, popt: torch.optim.Optimizer,
           vopt: torch.optim.Optimizer, batch, s: BlogSettings) -> None:
    S, A, logp_old, ret, _ = batch
    with torch.no_grad():
        adv = ret - value(S).squeeze(-1)
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    for _ in range(s.epochs):
        for idx in torch.randperm(S.shape[0]).split(s.minibatch):
            ratio = torch.exp(actor.dist(S[idx]).log_prob(A[idx]) - logp_old[idx])
            loss = (clipped_surrogate_loss(ratio, adv[idx], s.clip_eps) if s.clip
                    else surrogate_loss(ratio, adv[idx]))
            v_loss = (value(S[idx]).squeeze(-1) - ret[idx]).pow(2).mean()
            # One backward pass for both: the actor's and the critic's parameters are disjoint
            # and the critic does not read the actor, so these are the blog's two separate
            # steps, bit for bit (tested), for one autograd call instead of two.
            popt.zero_grad()
            vopt.zero_grad()
            (loss + v_loss).backward()
            popt.step()
            vopt.step()


@torch.no_grad()
def greedy_eval(actor: Actor, env_id: str = "Pendulum-v1", n: int = 10, seed: int = 123) -> float:
    env = gym.make(env_id)
    lo, hi = env.action_space.low, env.action_space.high
    total = 0.0
    for i in range(n):
        obs, _ = env.reset(seed=seed + i)
        done = False
        while not done:
            a = actor.dist(torch.as_tensor(obs, dtype=torch.float32)[None]).mode()[0].numpy()
            obs, r, term, trunc, _ = env.step(np.clip(a, lo, hi))
            total += float(r)
            done = term or trunc
    env.close()
    return total / n


def run(seed: int, s: BlogSettings) -> dict:
    """One run: per-iteration mean episode return, and the final greedy evaluation."""
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    np.random.seed(seed)
    env = gym.make("Pendulum-v1")
    env.reset(seed=seed)
    env.action_space.seed(seed)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    actor, value = Actor(obs_dim, act_dim, s.log_std_init), critic(obs_dim)
    popt = torch.optim.Adam(actor.parameters(), s.lr)
    vopt = torch.optim.Adam(value.parameters(), s.lr)
    curve = []
    for _ in range(s.iterations):
        batch = collect(env, actor, s)
        update(actor, value, popt, vopt, batch, s)
        curve.append(batch[-1])
    env.close()
    return {"seed": seed, "curve": curve, "greedy": greedy_eval(actor),
            "settings": s.__dict__}
