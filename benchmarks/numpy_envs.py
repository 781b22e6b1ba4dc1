"""Microseconds per transition call: NumPy dynamics against the batched torch envs, on CPU.

    python benchmarks/numpy_envs.py [--seconds 0.5] [--n 1 4 64] [--envs CartPole-v1 ...]

For each env and N: ``NumpyDynamics.transition`` (trustrl.envs.numpy_classic) and
``TorchVecEnv.transition`` (trustrl.envs.torch_classic), both float32, torch on one thread. Both
run the same loop: the state and counters carried from call to call (so episodes end and
autoreset as in a rollout), actions and reset states drawn beforehand and cycled, so only the
transition is timed. The best of 3 repeats is printed. Informational, not a test: the figures
move with the machine and its load.

    python benchmarks/numpy_envs.py --against OTHER_CHECKOUT [--blocks 40]

times instead the NumPy transition of this checkout against the one of another checkout (e.g.
``git worktree add OLD_CHECKOUT <commit>``; its ``trustrl/envs/numpy_classic.py`` is loaded from the
file, so it must not import other trustrl modules that changed), in the same process and
interleaved block by block, in thread CPU time, so that a loaded machine slows both alike. Each
block is 200 calls; the minimum and the median over the blocks are printed, and new/old of each.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
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


def load_numpy_classic(root: str) -> object:
    """The module trustrl/envs/numpy_classic.py of another checkout, loaded from its file."""
    path = f"{root}/trustrl/envs/numpy_classic.py"
    spec = importlib.util.spec_from_file_location("_other_numpy_classic", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def compare(other_root: str, envs: list[str], ns: list[int], blocks: int) -> None:
    """This checkout's NumPy transition against another's, interleaved, in thread CPU time."""
    other = load_numpy_classic(other_root)
    print(f"us per NumPy transition call (float32), thread CPU time, {blocks} interleaved blocks"
          f" of 200 calls; 'old' = {other_root}")
    print(f"{'env':<26}{'N':>4}{'old min':>10}{'new min':>10}{'old med':>10}{'new med':>10}"
          f"{'new/old min':>13}{'new/old med':>13}")
    for env_id in envs:
        for n in ns:
            start, acts_t, resets_t = inputs(env_id, n)
            acts, resets = list(acts_t.numpy()), list(resets_t.numpy())
            dyns = {"old": other.make_numpy_dynamics(env_id, np.float32),  # type: ignore
                    "new": make_numpy_dynamics(env_id, np.float32)}
            carry = {k: [start.numpy(), np.zeros(n, dtype=np.int64)] for k in dyns}
            times: dict[str, list[float]] = {k: [] for k in dyns}

            def block(k: str, calls: int = 200) -> float:
                dyn, c = dyns[k], carry[k]
                t0 = time.thread_time()
                for i in range(calls):
                    j = i % CYCLE
                    out = dyn.transition(c[0], c[1], acts[j], resets[j])
                    c[0], c[1] = out[0], out[1]
                return (time.thread_time() - t0) / calls * 1e6

            for k in dyns:  # warm-up
                block(k)
            for b in range(blocks):
                for k in (("old", "new") if b % 2 == 0 else ("new", "old")):
                    times[k].append(block(k))
            mins = {k: min(v) for k, v in times.items()}
            meds = {k: statistics.median(v) for k, v in times.items()}
            print(f"{env_id:<26}{n:>4}{mins['old']:>10.2f}{mins['new']:>10.2f}"
                  f"{meds['old']:>10.2f}{meds['new']:>10.2f}{mins['new'] / mins['old']:>13.3f}"
                  f"{meds['new'] / meds['old']:>13.3f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=0.5, help="timed seconds per repeat")
    ap.add_argument("--n", type=int, nargs="+", default=[1, 4, 64], help="numbers of envs")
    ap.add_argument("--envs", nargs="+", default=list(SUPPORTED))
    ap.add_argument("--against", metavar="CHECKOUT",
                    help="compare the NumPy transition with another checkout's (see above)")
    ap.add_argument("--blocks", type=int, default=40, help="interleaved blocks (--against)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.against:
        compare(a.against, a.envs, a.n, a.blocks)
        return
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
