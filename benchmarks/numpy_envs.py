"""Microseconds per transition call: NumPy dynamics against the batched torch envs, on CPU.

    python benchmarks/numpy_envs.py [--seconds 0.5] [--n 1 4 64] [--envs CartPole-v1 ...]

For each env and N: ``NumpyDynamics.transition`` (trustrl.envs.numpy_classic) and
``TorchVecEnv.transition`` (trustrl.envs.torch_classic), both float32, torch on one thread. Both
run the same loop: the state and counters carried from call to call (so episodes end and
autoreset as in a rollout), actions and reset states drawn beforehand and cycled, so only the
transition is timed. The best of 3 repeats is printed. Informational, not a test: the figures
move with the machine and its load.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import torch

from trustrl.envs.numpy_classic import make_numpy_dynamics
from trustrl.envs.torch_classic import SUPPORTED, make_torch_env

CYCLE = 64  # pre-drawn actions and reset states, cycled


def time_calls(step: Callable[[int], None], seconds: float, repeats: int = 3) -> float:
    """Best-of-`repeats` mean microseconds per step(i) call, each repeat about `seconds`."""
    for i in range(50):  # warm-up
        step(i)
    best = float("inf")
    for _ in range(repeats):
        calls, t0 = 0, time.perf_counter()
        while True:
            for _ in range(100):
                step(calls)
                calls += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= seconds:
                break
        best = min(best, elapsed / calls * 1e6)
    return best


def inputs(env_id: str, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Start states [n, state_dim], CYCLE action batches and CYCLE reset-state batches."""
    env = make_torch_env(env_id, n, seed=0)
    gen = torch.Generator().manual_seed(0)
    if env.action_kind == "discrete":
        acts = torch.randint(0, int(env.n_actions or 0), (CYCLE, n), generator=gen)
    else:
        low, high = env.action_low, env.action_high
        assert low is not None and high is not None
        acts = low + (high - low) * torch.rand(CYCLE, n, 1, generator=gen)
    resets = torch.stack([env.sample_states() for _ in range(CYCLE)])
    return env.sample_states(), acts, resets


def torch_us(env_id: str, n: int, seconds: float) -> float:
    env = make_torch_env(env_id, n, seed=0)
    start, acts, resets = inputs(env_id, n)
    carry = [start, torch.zeros(n, dtype=torch.int64)]

    def step(i: int) -> None:
        k = i % CYCLE
        carry[0], carry[1], _ = env.transition(carry[0], carry[1], acts[k], resets[k])

    with torch.inference_mode():
        return time_calls(step, seconds)


def numpy_us(env_id: str, n: int, seconds: float) -> float:
    dyn = make_numpy_dynamics(env_id, np.float32)
    start, acts_t, resets_t = inputs(env_id, n)
    acts, resets = list(acts_t.numpy()), list(resets_t.numpy())
    carry = [start.numpy(), np.zeros(n, dtype=np.int64)]

    def step(i: int) -> None:
        k = i % CYCLE
        out = dyn.transition(carry[0], carry[1], acts[k], resets[k])
        carry[0], carry[1] = out[0], out[1]

    return time_calls(step, seconds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=0.5, help="timed seconds per repeat")
    ap.add_argument("--n", type=int, nargs="+", default=[1, 4, 64], help="numbers of envs")
    ap.add_argument("--envs", nargs="+", default=list(SUPPORTED))
    a = ap.parse_args()
    torch.set_num_threads(1)
    print(f"us per transition call, float32, best of 3 x {a.seconds:g} s; numpy {np.__version__}"
          f", torch {torch.__version__} (1 thread)")
    cols = [f"{lib} N={n}" for n in a.n for lib in ("numpy", "torch")]
    print(f"{'env':<26}" + "".join(f"{c:>12}" for c in cols) + "   torch/numpy")
    for env_id in a.envs:
        row, ratios = [], []
        for n in a.n:
            us_np, us_t = numpy_us(env_id, n, a.seconds), torch_us(env_id, n, a.seconds)
            row += [us_np, us_t]
            ratios.append(f"{us_t / us_np:.1f}x")
        print(f"{env_id:<26}" + "".join(f"{x:>12.1f}" for x in row) + "   " + " ".join(ratios),
              flush=True)


if __name__ == "__main__":
    main()
