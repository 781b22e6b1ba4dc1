"""The batched collector's rollout, per kind: time `BatchedCollector.collect()` with the torch,
NumPy and compiled rollouts (one process, one torch thread).

    python benchmarks/rollout_step.py [--kinds torch numpy compiled] [--envs CartPole-v1 ...]
        [--members 1] [--num-envs 4] [--steps 128] [--collects 30] [--rounds 5]

Each round times --collects collections of each (env, kind) in turn (round robin, so that a
drift of the machine's speed moves every kind alike) after one uncounted collection (the
compiled rollout compiles or loads there); prints the median milliseconds of process CPU time
per collection over rounds (min-max): CPU time, not wall time, so that other processes on a
loaded machine move the figures less. Uses the collector's public interface only, so the same
script times two checkouts of trustrl (run it under each PYTHONPATH, alternately, and take the
ratio).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from trustrl.collect.batched import BatchedCollector
from trustrl.settings.config import make_config
from trustrl.envs.make import check_env
from trustrl.learn.learners import init_policies
from trustrl.nets.popnet import PopActorCritic


def collector(env_id: str, kind: str, members: int, num_envs: int, steps: int
              ) -> BatchedCollector:
    """A collector of `members` seeds with the PPO preset's policy, both normalisers on."""
    seeds = list(range(members))
    cfg = make_config("ppo", env_id=env_id, sets=dict(
        num_envs=num_envs, num_steps=steps, normalize_obs=True, normalize_reward=True))
    net = PopActorCritic.from_policies(init_policies(check_env(env_id), cfg, seeds), "cpu")
    return BatchedCollector(cfg, net, seeds, numpy_rollout=kind != "torch",
                            compiled_rollout=kind == "compiled")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kinds", nargs="+", default=["torch", "numpy", "compiled"])
    ap.add_argument("--envs", nargs="+", default=["CartPole-v1", "Pendulum-v1"])
    ap.add_argument("--members", type=int, default=1)
    ap.add_argument("--num-envs", type=int, default=4)
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--collects", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    runs = {(e, k): collector(e, k, args.members, args.num_envs, args.steps)
            for e in args.envs for k in args.kinds}
    for c in runs.values():
        c.collect()
    times: dict[tuple[str, str], list[float]] = {key: [] for key in runs}
    for _ in range(args.rounds):
        for key, c in runs.items():
            t0 = time.process_time()
            for _ in range(args.collects):
                c.collect()
            times[key].append((time.process_time() - t0) / args.collects * 1e3)
    for (env_id, kind), ms in times.items():
        print(f"{env_id:16s} {kind:9s} {statistics.median(ms):8.3f} ms CPU per collect "
              f"({min(ms):.3f}-{max(ms):.3f})")


if __name__ == "__main__":
    main()
