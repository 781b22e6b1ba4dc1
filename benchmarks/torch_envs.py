"""Steps per second of the batched torch classic-control envs against Gymnasium's SyncVectorEnv.

    python benchmarks/torch_envs.py [--seconds 1.5] [--threads 1] [--device cpu]

For each env: trustrl's torch env (float32) at N = 1, 64, 4096 and Gymnasium's SyncVectorEnv
(same-step autoreset) at N = 1, 64. Actions are drawn beforehand and cycled, so only stepping is
timed (the torch env's autoreset included). Informational, not a test: the figures move with the
machine and its load.

    python benchmarks/torch_envs.py --against OTHER_CHECKOUT [--blocks 20] [--device cpu]

times instead ``step`` of this checkout's torch envs against another checkout's (e.g. ``git
worktree add OLD_CHECKOUT <commit>``; its ``trustrl/envs/torch_classic.py`` is loaded from the file,
so it must not import other trustrl modules that changed), interleaved block by block in the
same process: thread CPU time on a CPU (so a loaded machine slows both alike), wall time with a
synchronisation on CUDA. The minimum and the median per step over the blocks are printed.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
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


def load_torch_classic(root: str) -> object:
    """The module trustrl/envs/torch_classic.py of another checkout, loaded from its file."""
    path = f"{root}/trustrl/envs/torch_classic.py"
    spec = importlib.util.spec_from_file_location("_other_torch_classic", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def compare(other_root: str, envs: list[str], ns: tuple[int, ...], blocks: int, device: str
            ) -> None:
    """us per step of this checkout's torch envs against another's, interleaved."""
    other = load_torch_classic(other_root)
    cuda = torch.device(device).type == "cuda"
    clock = time.perf_counter if cuda else time.thread_time
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    print(f"us per torch env step (float32, {device}), {'wall' if cuda else 'thread CPU'} time,"
          f" {blocks} interleaved blocks of 50 steps; 'old' = {other_root}")
    print(f"{'env':<26}{'N':>6}{'old min':>10}{'new min':>10}{'old med':>10}{'new med':>10}"
          f"{'new/old min':>13}{'new/old med':>13}")
    for env_id in envs:
        for n in ns:
            makers = {"old": other.make_torch_env, "new": make_torch_env}  # type: ignore
            envs_ = {k: m(env_id, n, device=device, seed=0) for k, m in makers.items()}
            gen = torch.Generator(device=device).manual_seed(0)
            e = envs_["new"]
            if e.action_kind == "discrete":
                acts = torch.randint(0, int(e.n_actions or 0), (16, n), generator=gen,
                                     device=device)
            else:
                acts = 2 * torch.rand(16, n, 1, generator=gen, device=device) - 1
            times: dict[str, list[float]] = {k: [] for k in envs_}

            def block(k: str, steps: int = 50) -> float:
                env = envs_[k]
                sync()
                t0 = clock()
                for i in range(steps):
                    env.step(acts[i % 16])
                sync()
                return (clock() - t0) / steps * 1e6

            for k in envs_:
                envs_[k].reset()
                block(k)
            for b in range(blocks):
                for k in (("old", "new") if b % 2 == 0 else ("new", "old")):
                    times[k].append(block(k))
            mins = {k: min(v) for k, v in times.items()}
            meds = {k: statistics.median(v) for k, v in times.items()}
            print(f"{env_id:<26}{n:>6}{mins['old']:>10.1f}{mins['new']:>10.1f}"
                  f"{meds['old']:>10.1f}{meds['new']:>10.1f}{mins['new'] / mins['old']:>13.3f}"
                  f"{meds['new'] / meds['old']:>13.3f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.5, help="timed seconds per cell")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--device", default="cpu", help="device of the torch envs")
    ap.add_argument("--envs", nargs="+", default=list(SUPPORTED))
    ap.add_argument("--against", metavar="CHECKOUT",
                    help="compare step() with another checkout's torch envs (see above)")
    ap.add_argument("--blocks", type=int, default=20, help="interleaved blocks (--against)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.against:
        compare(a.against, a.envs, TORCH_N, a.blocks, a.device)
        return
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
