"""PPO's batched iteration as one compiled call against the same iteration as separate calls
(docs/compiled.md, "The whole iteration as one call"), in one process, alternating.

    taskset -c 0 python benchmarks/fused_iteration.py [--seeds 1] [--iterations 200] [--rounds 3]

One learner in CleanRL's CartPole setting (4 envs x 128 steps, 4 epochs x 4 minibatches of
128, 64x64 tanh; the setting of benchmarks/purejaxrl_cpu.py), one torch thread, the compiled
backend (the `[compiled]` extra). Each round times `BatchedLearner.step` for --iterations
iterations with `learner.fused` off, then on, and prints both medians in ms and their ratio;
the time inside the fused call itself is printed beside them. Both paths compute the same
numbers (tests/test_compiled.py), so the learner simply carries on from one to the other.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from trustrl.compute import compiled
from trustrl.learn.learners import BatchedLearner
from trustrl.settings.config import make_config

SETTING = {"num_envs": 4, "num_steps": 128, "update_epochs": 4, "minibatch_size": 128,
           "lr": 2.5e-4, "anneal_lr": True, "adam_eps": 1e-5, "clip_value_loss": True,
           "ent_coef": 0.01, "max_grad_norm": 0.5, "target_kl": None, "normalize_obs": False,
           "normalize_reward": False, "eval_every": 0, "torch_threads": 1}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=1, help="members of the population")
    p.add_argument("--iterations", type=int, default=200, help="timed iterations per path")
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    if not compiled.available():
        raise SystemExit("needs the compiled extra: pip install \"trustrl[compiled]\"")
    torch.set_num_threads(1)
    cfg = make_config("ppo", env_id="CartPole-v1", sets=dict(SETTING, total_steps=10**9))
    learner = BatchedLearner(cfg, list(range(1, a.seeds + 1)))
    if not learner.fused:
        raise SystemExit("this learner does not fuse its iteration (see BatchedLearner._fusable)")
    inside: list[float] = []
    announced = compiled._first_call_announced

    def timed_call(name, what, kernel, *args):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        out = announced(name, what, kernel, *args)
        if name.startswith("ppo_iteration"):
            inside.append(time.perf_counter() - t0)
        return out

    compiled._first_call_announced = timed_call
    for fused in (False, True):  # load (or compile) both paths' code before timing
        learner.fused = fused
        for _ in range(5):
            learner.step()
    print(f"# CartPole-v1, {a.seeds} member(s), 4 x 128 steps an iteration; medians of "
          f"{a.iterations} iterations (ms)")
    for r in range(a.rounds):
        times = {}
        for fused in (False, True):
            learner.fused = fused
            inside.clear()
            ts = []
            for _ in range(a.iterations):
                t0 = time.perf_counter()
                learner.step()
                ts.append(time.perf_counter() - t0)
            times[fused] = statistics.median(ts) * 1e3
        call = statistics.median(inside) * 1e3
        print(f"round {r + 1}: separate calls {times[False]:.2f}, one call {times[True]:.2f} "
              f"(inside the call {call:.2f}), separate / one {times[False] / times[True]:.2f}x")


if __name__ == "__main__":
    main()
