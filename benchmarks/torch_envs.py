"""Steps per second of the batched torch classic-control envs against Gymnasium's SyncVectorEnv.

    python benchmarks/torch_envs.py [--seconds 1.5] [--threads 1] [--device cpu]

For each env: trustrl's torch env (float32) at N = 1, 64, 4096 and Gymnasium's SyncVectorEnv
(same-step autoreset) at N = 1, 64. Actions are drawn beforehand and cycled, so only stepping is
timed (the torch env's autoreset included). Informational, not a test: the figures move with the
machine and its load.
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch

from trustrl.envs.torch_classic import SUPPORTED, make_torch_env

TORCH_N = (1, 64, 4096)
GYM_N = (1, 64)


def time_loop(
    step: Callable[[int], None], n_envs: int, seconds: float,
    sync: Callable[[], None] = lambda: None,
) -> float:
    """Call step(i) for about `seconds` (after a short warm-up); returns env steps per second.
    `sync` waits for queued device work (CUDA) before the clock is read."""
    for i in range(10):
        step(i)
    sync()
    calls, t0 = 0, time.perf_counter()
    while True:
        for _ in range(20):
            step(calls)
            calls += 1
        sync()
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            return calls * n_envs / elapsed


def torch_sps(env_id: str, n: int, seconds: float, device: str) -> float:
    env = make_torch_env(env_id, n, device=device, seed=0)
    env.reset()
    gen = torch.Generator(device=device).manual_seed(0)
    if env.action_kind == "discrete":
        acts = torch.randint(0, int(env.n_actions or 0), (16, n), generator=gen, device=device)
    else:
        low, high = env.action_low, env.action_high
        assert low is not None and high is not None
        acts = low + (high - low) * torch.rand(16, n, 1, generator=gen, device=device)

    def step(i: int) -> None:
        env.step(acts[i % 16])

    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    return time_loop(step, n, seconds, sync)


def gym_sps(env_id: str, n: int, seconds: float) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make_vec(env_id, num_envs=n, vectorization_mode="sync",
                           vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
        env.reset(seed=0)
        env.action_space.seed(0)
        acts = [env.action_space.sample() for _ in range(16)]

        def step(i: int) -> None:
            env.step(acts[i % 16])

        sps = time_loop(step, n, seconds)
    env.close()
    return sps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.5, help="timed seconds per cell")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--device", default="cpu", help="device of the torch envs")
    ap.add_argument("--envs", nargs="+", default=list(SUPPORTED))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cols = [f"torch N={n}" for n in TORCH_N] + [f"gym sync N={n}" for n in GYM_N]
    print(f"steps/s, float32, torch {torch.__version__} ({a.device}, {a.threads} thread(s)), "
          f"gymnasium {gym.__version__}, numpy {np.__version__}, {a.seconds:g} s per cell")
    print(f"{'env':<26}" + "".join(f"{c:>16}" for c in cols))
    for env_id in a.envs:
        row = [torch_sps(env_id, n, a.seconds, a.device) for n in TORCH_N]
        row += [gym_sps(env_id, n, a.seconds) for n in GYM_N]
        print(f"{env_id:<26}" + "".join(f"{x:>16,.0f}" for x in row), flush=True)


if __name__ == "__main__":
    main()
