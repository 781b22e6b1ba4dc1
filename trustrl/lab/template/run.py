"""Train the four PPO variants of the lab on CartPole-v1 with YOUR ppo_update, and plot them.

    python run.py                    # 40k steps per variant, about two minutes on 2 cores
    python run.py --target-kl 0.01   # the same, with approx-KL early stopping (aggressive runs)
    python run.py --steps 8192       # a quick look

The rollouts (trustrl's Collector), the advantages (trustrl's gae) and the learning-rate
schedule are done here; the update is ppo.ppo_update, the function you wrote in Task 4.

Variants (512 steps per iteration = 4 envs x 128 steps, minibatches of 64, lr annealed to 0):

    PPO                K = 10, lr 1e-3, clip 0.2
    aggressive         K = 40, lr 3e-3, clip 0.2
    aggressive, no clip  K = 40, lr 3e-3, plain surrogate (clip=False)
    one epoch          K = 1,  lr 1e-3

The summary line of each variant gives the mean return of the episodes that finished in the
last 10% of its steps, and the medians over its updates of approx KL, clip fraction and epochs
actually run. plot.png shows returns, approx KL (log scale), clip fraction and entropy.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from ppo import ppo_update  # your Task 4: ppo.py next to this script

from trustrl.collect.rollout import Collector
from trustrl.envs.make import check_env, make_vec_env
from trustrl.maths.advantages import gae
from trustrl.nets.policies import ActorCritic
from trustrl.records.agent import Agent

ENV_ID = "CartPole-v1"
NUM_ENVS, NUM_STEPS, MINIBATCH = 4, 128, 64
GAMMA, LAM = 0.99, 0.95
CLIP_EPS, VF_COEF, ENT_COEF, MAX_GRAD_NORM = 0.2, 0.5, 0.0, 0.5


@dataclass(frozen=True)
class Variant:
    name: str
    epochs: int
    lr: float
    clip: bool = True
    aggressive: bool = False  # --target-kl applies to these


VARIANTS = (
    Variant("PPO (K=10, lr 1e-3)", 10, 1e-3),
    Variant("aggressive (K=40, lr 3e-3)", 40, 3e-3, aggressive=True),
    Variant("aggressive, no clip", 40, 3e-3, clip=False, aggressive=True),
    Variant("one epoch (K=1, lr 1e-3)", 1, 1e-3),
)


@dataclass
class History:
    """What one variant's run produced: one entry per update, plus every finished episode."""

    steps: list[int] = field(default_factory=list)
    approx_kl: list[float] = field(default_factory=list)
    clip_fraction: list[float] = field(default_factory=list)
    epochs_run: list[float] = field(default_factory=list)
    entropy: list[float] = field(default_factory=list)
    episode_steps: list[int] = field(default_factory=list)
    episode_returns: list[float] = field(default_factory=list)


def train_variant(v: Variant, total_steps: int, seed: int, target_kl: float | None) -> History:
    """One run: collect 512 steps, GAE, your ppo_update; repeat until total_steps."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    spec = check_env(ENV_ID)
    envs = make_vec_env(ENV_ID, NUM_ENVS)
    policy = ActorCritic(spec.obs_dim, spec.action)
    agent = Agent(policy, spec)
    optimizer = torch.optim.Adam(policy.parameters(), lr=v.lr, eps=1e-5)
    collector = Collector(envs, agent, NUM_STEPS, None, Collector.start(envs, agent, seed))
    iterations = max(1, math.ceil(total_steps / (NUM_ENVS * NUM_STEPS)))
    h = History()
    try:
        for it in range(iterations):
            for group in optimizer.param_groups:  # linear annealing to 0
                group["lr"] = v.lr * (1.0 - it / iterations)
            rollout, episodes = collector.collect()
            adv, ret = gae(rollout.rewards, rollout.values, rollout.next_values,
                           rollout.terminated, rollout.truncated, GAMMA, LAM)
            batch = rollout.flatten(adv, ret)
            m = ppo_update(
                policy, optimizer, batch, epochs=v.epochs, minibatch_size=MINIBATCH,
                clip_eps=CLIP_EPS, vf_coef=VF_COEF, ent_coef=ENT_COEF,
                max_grad_norm=MAX_GRAD_NORM, target_kl=target_kl if v.aggressive else None,
                clip=v.clip,
            )
            with torch.no_grad():
                entropy = float(policy.dist(batch.obs).entropy().mean())
            step = collector.state.global_step
            h.steps.append(step)
            h.approx_kl.append(float(m["approx_kl"]))
            h.clip_fraction.append(float(m["clip_fraction"]))
            h.epochs_run.append(float(m["epochs_run"]))
            h.entropy.append(entropy)
            for e in episodes:
                h.episode_steps.append(e.global_step)
                h.episode_returns.append(e.ret)
    finally:
        envs.close()
    return h


def final_return(h: History) -> float:
    """Mean return of the episodes that finished in the last 10% of the run's steps."""
    if not h.episode_returns:
        return float("nan")
    last = h.steps[-1]
    tail = [r for s, r in zip(h.episode_steps, h.episode_returns, strict=True)
            if s > 0.9 * last]
    return float(np.mean(tail if tail else h.episode_returns[-1:]))


def smoothed(steps: list[int], returns: list[float], window: int = 10):
    """Rolling mean over the last `window` episodes, for a readable curve."""
    r = np.asarray(returns, dtype=float)
    if len(r) == 0:
        return np.asarray(steps), r
    c = np.cumsum(np.insert(r, 0, 0.0))
    out = np.array([(c[i + 1] - c[max(0, i + 1 - window)]) / min(window, i + 1)
                    for i in range(len(r))])
    return np.asarray(steps), out


def plot(results: dict[str, History], out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8), sharex=True)
    (ax_ret, ax_kl), (ax_clip, ax_ent) = axes
    for name, h in results.items():
        x, y = smoothed(h.episode_steps, h.episode_returns)
        ax_ret.plot(x, y, label=name)
        ax_kl.plot(h.steps, np.maximum(h.approx_kl, 1e-8), label=name)
        ax_clip.plot(h.steps, h.clip_fraction, label=name)
        ax_ent.plot(h.steps, h.entropy, label=name)
    ax_ret.set_title("episode return (mean of the last 10 episodes)")
    ax_ret.axhline(500, color="grey", lw=0.8, ls=":")
    ax_kl.set_yscale("log")
    ax_kl.set_title("approx KL(pi_old || pi) per update (k3, log scale, floor 1e-8)")
    ax_clip.set_title(f"clip fraction per update (|rho - 1| > {CLIP_EPS})")
    ax_ent.set_title("policy entropy after each update (nats; ln 2 = 0.69 is uniform)")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("environment steps")
    handles, labels = ax_ret.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=10)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40_000, help="env steps per variant (40000)")
    p.add_argument("--seed", type=int, default=0, help="random seed (0)")
    p.add_argument("--target-kl", type=float, default=None,
                   help="approx-KL early stopping for the two aggressive variants")
    p.add_argument("--out", type=Path, default=Path(__file__).with_name("plot.png"),
                   help="where to save the plot (plot.png next to this script)")
    args = p.parse_args(argv)
    if args.steps <= 0:
        p.error("--steps must be positive")

    torch.set_num_threads(1)  # tiny networks: threads cost more than they save
    results: dict[str, History] = {}
    header = (f"{'variant':<28} {'final return':>12} {'median KL':>10} "
              f"{'median clip frac':>16} {'median epochs':>13} {'time':>6}")
    print(f"{ENV_ID}, {args.steps} steps per variant, seed {args.seed}"
          + (f", target_kl {args.target_kl} on the aggressive variants"
             if args.target_kl is not None else ""))
    print(header)
    for v in VARIANTS:
        t0 = time.perf_counter()
        h = train_variant(v, args.steps, args.seed, args.target_kl)
        results[v.name] = h
        print(f"{v.name:<28} {final_return(h):>12.1f} {statistics.median(h.approx_kl):>10.4f} "
              f"{statistics.median(h.clip_fraction):>16.3f} "
              f"{statistics.median(h.epochs_run):>13.0f} {time.perf_counter() - t0:>5.0f}s",
              flush=True)
    title = f"PPO variants on {ENV_ID} (seed {args.seed}"
    title += f", target_kl {args.target_kl})" if args.target_kl is not None else ")"
    plot(results, args.out, title)
    print(f"plot: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
