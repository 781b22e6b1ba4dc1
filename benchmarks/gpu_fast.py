"""Steps per second of trustrl's fast path (PPO on batched torch envs) on one GPU.

    python benchmarks/gpu_fast.py [--settings single,envs2048,seeds1024,envs65536]
                                  [--modes eager,graph] [--algo ppo|trpo] [--out FILE.jsonl]

The settings mirror PureJaxRL's CartPole-v1 PPO (benchmarks/purejaxrl_gpu.py times it in the
same session): 64x64 tanh actor and critic, lr 2.5e-4 annealed, gamma 0.99, lambda 0.95, clip
0.2, ent 0.01, vf 0.5, grad-norm 0.5, 4 epochs; and

    single     1 agent,      4 envs x 128 steps, 4 minibatches (PureJaxRL's default)
    envs2048   1 agent,   2048 envs x 128 steps, 8 minibatches
    seeds1024  1024 agents,  4 envs x 128 steps each, 4 minibatches (a population of seeds)
    envs65536  1 agent,  65536 envs x 128 steps, 8 minibatches

Timing: the training loop only, after warm-up (and, for mode "graph", after the CUDA graph is
captured), as PureJaxRL is timed after compilation: `iterations` iterations between two
torch.cuda.synchronize() calls, with no host transfer in between. SPS = env steps of all agents
/ seconds. One JSON line per (setting, mode) with SPS, the mean episode return of the last
iteration (a learning sanity check) and peak GPU memory.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from trustrl.learn.learners import BatchedLearner
from trustrl.settings.config import make_config

SETTINGS = {
    "single": dict(P=1, N=4, minibatches=4, iterations=300),
    "envs2048": dict(P=1, N=2048, minibatches=8, iterations=40),
    "seeds1024": dict(P=1024, N=4, minibatches=4, iterations=40),
    "envs65536": dict(P=1, N=65536, minibatches=8, iterations=8),
}


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run(setting: str, mode: str, device: str, iterations: int | None = None,
        algo: str = "ppo", profile: str | None = None) -> dict:
    s = SETTINGS[setting]
    P, N, T = s["P"], s["N"], 128
    iters = iterations or s["iterations"]
    warm = 3
    common = {"num_envs": N, "num_steps": T, "gamma": 0.99, "gae_lambda": 0.95,
              "vector": "torch", "device": device, "total_steps": N * T * (iters + warm)}
    t0 = time.perf_counter()
    if algo == "trpo":  # the core TRPO defaults; the critic on the same minibatch count
        sets = {**common, "vf_minibatch_size": N * T // s["minibatches"]}
        algo_name = "trpo"
    else:
        sets = {**common, "update_epochs": 4, "minibatch_size": N * T // s["minibatches"],
                "lr": 2.5e-4, "anneal_lr": True, "ent_coef": 0.01, "vf_coef": 0.5,
                "max_grad_norm": 0.5, "clip_eps": 0.2}
        algo_name = "ppo"
    sets["jit"] = "compile" if "compile" in mode else "cuda-graph" if "graph" in mode else "none"
    cfg = make_config(algo_name, "CartPole-v1", None, {k: str(v) for k, v in sets.items()}, {})
    eng = BatchedLearner(cfg, list(range(P)))
    build = time.perf_counter() - t0
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(warm):
        eng.step()
    _sync(device)
    warmup = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(iters):
        metrics = eng.step()[0]
    _sync(device)
    dt = time.perf_counter() - t0
    if profile:  # after the timed loop: 3 more iterations under torch.profiler
        _profile(eng, device, f"{algo} {setting} {mode}", profile)
    ret = metrics[:, eng.columns.index("ep_return_mean")]
    ret = ret[~torch.isnan(ret)]
    return {"setting": setting, "algo": algo, "mode": mode, "agents": P, "envs_per_agent": N,
            "steps": T,
            "iterations_timed": iters, "seconds": round(dt, 4),
            "sps": round(P * N * T * iters / dt), "build_s": round(build, 2),
            "warmup_s": round(warmup, 2),
            "last_ep_return_mean": None if ret.numel() == 0 else round(float(ret.mean()), 1),
            "peak_gpu_mib": round(torch.cuda.max_memory_allocated() / 2**20) if cuda else None,
            "torch": torch.__version__,
            "device": torch.cuda.get_device_name() if cuda else "cpu"}


def _profile(eng: BatchedLearner, device: str, title: str, path: str, iters: int = 3) -> None:
    """Append to `path` the top operators of `iters` iterations and the GPU kernels each ran."""
    acts = [torch.profiler.ProfilerActivity.CPU]
    cuda = device.startswith("cuda")
    if cuda:
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(iters):
            eng.step()
        _sync(device)
    events = prof.events()
    kernels = sum(1 for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
    launches = sum(1 for e in events if e.name in ("cudaLaunchKernel", "cudaGraphLaunch"))
    table = prof.key_averages().table(
        sort_by="self_cuda_time_total" if cuda else "self_cpu_time_total", row_limit=15)
    with open(path, "a") as f:
        f.write(f"## {title}: {iters} iterations, {kernels / iters:.0f} GPU kernels and "
                f"{launches / iters:.0f} kernel or graph launches per iteration\n{table}\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--modes", default="eager,graph")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--iterations", type=int, default=None, help="override the timed count")
    ap.add_argument("--algo", choices=["ppo", "trpo"], default="ppo")
    ap.add_argument("--out", default=None)
    ap.add_argument("--profile", default=None,
                    help="append a torch.profiler table of 3 more iterations to this file")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False  # same float32 arithmetic as the CPU tests
    if a.device == "cpu":  # a check of the script; trustrl's own CPU default is one thread
        torch.set_num_threads(1)
    out = open(a.out, "a") if a.out else None  # noqa: SIM115
    for setting in a.settings.split(","):
        for mode in a.modes.split(","):
            try:
                row = run(setting, mode, a.device, a.iterations, a.algo, a.profile)
            except Exception as e:  # noqa: BLE001  (report and go on to the next setting)
                row = {"setting": setting, "mode": mode, "error": f"{type(e).__name__}: {e}"}
            line = json.dumps(row)
            print(line, flush=True)
            if out:
                out.write(line + "\n")
                out.flush()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    if out:
        out.close()


if __name__ == "__main__":
    main()
