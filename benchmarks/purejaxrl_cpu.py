"""trustrl against PureJaxRL on a CPU (with CleanRL and SB3 in the same invocation): CartPole-v1
in CleanRL's PPO setting, which is PureJaxRL's own, each tool pinned to one core and one thread.

    python benchmarks/purejaxrl_cpu.py --purejaxrl $PEERS/purejaxrl \\
        --purejaxrl-python $PEERS/purejaxrl-venv/bin/python \\
        [--cleanrl $PEERS/cleanrl --cleanrl-python $PEERS/cleanrl-venv/bin/python] \\
        [--sb3-python $PEERS/sb3-venv/bin/python] [--repeats 3] [--rows one seeds wide]
        [--core 0] [--json out.json]

Rows (4 epochs x 4 minibatches, 128 steps per env, lr 2.5e-4 annealed, entropy 0.01, value
loss clipped, grad norm 0.5, 64x64 tanh):
- one:   1 seed, 4 envs, 99,840 steps;
- seeds: 16 seeds in one process (PureJaxRL: jax.vmap over the seed; trustrl: --seeds 1-16),
         4 envs and 99,840 steps each;
- wide:  1 seed, 64 envs, 999,424 steps.

Measures, per row, repeats alternating the tools (PureJaxRL, trustrl, PureJaxRL, ...):
- steady-state train SPS. PureJaxRL: env steps / seconds of a second call of the jitted train
  function (benchmarks/purejaxrl_gpu.py --table cpu: the first call compiles). trustrl: env
  steps / seconds of its training loop from the end of the first iteration (which loads the
  compiled code) to the end of the last but one (the last runs the final greedy evaluation),
  by metrics.csv's wall_time, summed over the seeds of a population;
- the learning outcome: PureJaxRL's mean return of the episodes finished in the last 10% of
  updates, trustrl's over its episodes in the last 10% of steps (all seeds of the row).
For the row `one`, also end to end (launch to final result, process wall): PureJaxRL with a
cold compile (no persistent cache) and with JAX's persistent compilation cache warm (a folder
filled by a run just before), trustrl with its Numba cache warm (its normal state after the
first run on a machine) and cold (an empty NUMBA_CACHE_DIR); and CleanRL's and SB3's train SPS
(benchmarks/peers_cpu.py's measure) when their venvs are given.

Pinning: this script pins itself to CORE (os.sched_setaffinity), so every process it starts
runs on that core, with OMP_NUM_THREADS=1, MKL_NUM_THREADS=1 and, for JAX,
XLA_FLAGS=--xla_cpu_multi_thread_eigen=false; trustrl sets torch_threads=1 (and its BLAS to one
thread), CleanRL and SB3 run as benchmarks/peers_cpu.py runs them. Figures move with machine
load: run on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import peers_cpu  # noqa: E402  (benchmarks/peers_cpu.py: CleanRL's and SB3's runners)

ROWS: dict[str, dict[str, Any]] = {
    "one": {"num_envs": 4, "steps": 99_840, "seeds": 1},
    "seeds": {"num_envs": 4, "steps": 99_840, "seeds": 16},
    "wide": {"num_envs": 64, "steps": 999_424, "seeds": 1},
}


def one_thread_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """peers_cpu's one-thread environment, with JAX's and OpenBLAS's thread settings too."""
    return dict(peers_cpu.thread_env(), OPENBLAS_NUM_THREADS="1",
                XLA_FLAGS="--xla_cpu_multi_thread_eigen=false", **(extra or {}))


def run(cmd: list[str], cwd: Path, extra: dict[str, str] | None = None) -> tuple[str, float]:
    """(stdout, process wall seconds) of cmd; a failure stops the benchmark with the tool's
    stderr tail."""
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=one_thread_env(extra))
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        tail = "\n".join(p.stderr.strip().splitlines()[-15:])
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}\n{tail}")
    return p.stdout, wall


def purejaxrl(a: argparse.Namespace, row: str, once: bool = False,
              cache: str | None = None) -> tuple[dict[str, Any], float]:
    cmd = [a.purejaxrl_python, str(HERE / "purejaxrl_gpu.py"), "--purejaxrl", a.purejaxrl,
           "--table", "cpu", "--runs", row]
    if once:
        cmd.append("--once")
    if cache:
        cmd += ["--cache", cache]
    with tempfile.TemporaryDirectory(prefix="bench-pjx-") as tmp:
        out, wall = run(cmd, Path(tmp))
    return json.loads(out.strip().splitlines()[-1]), wall


def trustrl_command(row: str, runs: Path) -> list[str]:
    r = ROWS[row]
    n = r["num_envs"]
    cmd = [sys.executable, "-m", "trustrl", "train", "ppo", "--env", "CartPole-v1",
           "--total-steps", str(r["steps"]), "--runs-dir", str(runs), "--quiet"]
    cmd += ["--seeds", f"1-{r['seeds']}"] if r["seeds"] > 1 else ["--seed", "1"]
    sets = {"num_envs": n, "num_steps": 128, "update_epochs": 4, "minibatch_size": n * 32,
            "lr": 2.5e-4, "anneal_lr": "true", "adam_eps": 1e-5, "gamma": 0.99,
            "gae_lambda": 0.95, "clip_eps": 0.2, "clip_value_loss": "true", "ent_coef": 0.01,
            "vf_coef": 0.5, "max_grad_norm": 0.5, "norm_adv": "true", "target_kl": "None",
            "normalize_obs": "false", "normalize_reward": "false", "hidden_sizes": "64,64",
            "activation": "tanh", "eval_every": 0, "torch_threads": 1, "device": "cpu"}
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    return cmd


def read_run(folder: Path) -> tuple[float, float | None, float]:
    """(steady-state SPS, mean return of the episodes in the last 10% of steps, whole-loop
    SPS) of a trustrl run folder or population folder (its members' folders summed). The
    whole loop includes the first iteration, which loads the compiled code from the disk
    cache (and compiles it on a machine's first run), and the final greedy evaluation."""
    members = sorted(p.parent for p in folder.rglob("metrics.csv"))
    sps, rets, whole = 0.0, [], 0.0
    for m in members:
        with open(m / "metrics.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        # steady: from the end of the first iteration to the end of the last but one (the
        # last runs the final greedy evaluation)
        first, end, last = rows[0], rows[-2], rows[-1]
        sps += (int(end["global_step"]) - int(first["global_step"])) / (
            float(end["wall_time"]) - float(first["wall_time"]))
        whole += int(last["global_step"]) / float(last["wall_time"])
        total = int(last["global_step"])
        with open(m / "episodes.csv", newline="") as f:
            rets += [float(e["return"]) for e in csv.DictReader(f)
                     if int(e["global_step"]) > 0.9 * total]
    return sps, (statistics.mean(rets) if rets else None), whole


def trustrl(a: argparse.Namespace, row: str, cold: bool = False
            ) -> tuple[float, float | None, float, float]:
    """(steady SPS, last-10% return, process wall seconds, whole-loop SPS) of one run."""
    with tempfile.TemporaryDirectory(prefix="bench-trustrl-") as tmp:
        extra = {"NUMBA_CACHE_DIR": str(Path(tmp) / "numba")} if cold else None
        _, wall = run(trustrl_command(row, Path(tmp) / "runs"), HERE.parent, extra)
        (folder,) = (Path(tmp) / "runs").iterdir()
        sps, ret, whole = read_run(folder)
    return sps, ret, wall, whole


def med(xs: list[float]) -> str:
    return f"{statistics.median(xs):,.0f} ({min(xs):,.0f}-{max(xs):,.0f})"


def fmt_ret(xs: list[float | None]) -> str:
    ys = [x for x in xs if x is not None]
    return ", ".join(f"{x:.1f}" for x in ys) if ys else "-"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--purejaxrl", required=True, help="folder with PureJaxRL's ppo.py and "
                   "wrappers.py")
    p.add_argument("--purejaxrl-python", required=True, help="python of the PureJaxRL venv")
    p.add_argument("--cleanrl", help="folder holding CleanRL's ppo.py")
    p.add_argument("--cleanrl-python", help="python of the CleanRL venv")
    p.add_argument("--sb3-python", help="python of the Stable-Baselines3 venv")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS))
    p.add_argument("--core", type=int, default=0, help="the CPU every process is pinned to")
    p.add_argument("--no-e2e", action="store_true", help="skip the end-to-end measures")
    p.add_argument("--json", help="also write every number to this JSON file")
    a = p.parse_args()
    if a.repeats < 1:
        p.error("--repeats must be positive")
    if bool(a.cleanrl) != bool(a.cleanrl_python):
        p.error("CleanRL needs both --cleanrl and --cleanrl-python")
    os.sched_setaffinity(0, {a.core})  # inherited by every process started below
    raw: dict[str, Any] = {}
    print(f"# purejaxrl_cpu: {time.strftime('%Y-%m-%d %H:%M')}, pinned to core {a.core}, "
          f"one thread per tool; medians of {a.repeats} (range)", flush=True)
    for row in a.rows:
        pj_sps, pj_ret, tr_sps, tr_ret, tr_whole = [], [], [], [], []
        for rep in range(a.repeats):
            res, _ = purejaxrl(a, row)
            pj_sps.append(res["sps"])
            pj_ret.append(res["final_return"])
            sps, ret, _, whole = trustrl(a, row)
            tr_sps.append(sps)
            tr_ret.append(ret)
            tr_whole.append(whole)
            print(f"  {row} rep {rep + 1}: PureJaxRL {res['sps']:,.0f} SPS (first call "
                  f"{res['first_s']:.1f} s), trustrl {sps:,.0f} SPS", file=sys.stderr,
                  flush=True)
        ratios = [t / q for t, q in zip(tr_sps, pj_sps, strict=True)]
        raw[row] = {"purejaxrl_sps": pj_sps, "trustrl_sps": tr_sps,
                    "trustrl_whole_loop_sps": tr_whole, "purejaxrl_return": pj_ret,
                    "trustrl_return": tr_ret}
        print(f"| {row} | trustrl {med(tr_sps)} | PureJaxRL {med(pj_sps)} | "
              f"**{statistics.median(ratios):.2f}x** (pairs "
              f"{', '.join(f'{r:.2f}' for r in ratios)}) | returns, last 10%: trustrl "
              f"{fmt_ret(tr_ret)}; PureJaxRL {fmt_ret(pj_ret)} |", flush=True)
    if not a.no_e2e:
        e2e: dict[str, list[float]] = {k: [] for k in (
            "purejaxrl_cold", "purejaxrl_warm", "trustrl_warm", "trustrl_cold")}
        for _ in range(a.repeats):
            with tempfile.TemporaryDirectory(prefix="bench-jaxcache-") as cache:
                e2e["purejaxrl_cold"].append(purejaxrl(a, "one", once=True)[1])
                purejaxrl(a, "one", once=True, cache=cache)  # fills the cache
                e2e["purejaxrl_warm"].append(purejaxrl(a, "one", once=True, cache=cache)[1])
            e2e["trustrl_warm"].append(trustrl(a, "one")[2])
            e2e["trustrl_cold"].append(trustrl(a, "one", cold=True)[2])
        raw["end_to_end"] = e2e
        m = {k: statistics.median(v) for k, v in e2e.items()}
        cold_ratio = m["purejaxrl_cold"] / m["trustrl_warm"]
        warm_ratio = m["purejaxrl_warm"] / m["trustrl_warm"]
        print(f"| end to end, `one`, process wall s | trustrl {m['trustrl_warm']:.1f} (Numba "
              f"cache warm), {m['trustrl_cold']:.1f} (cold) | PureJaxRL "
              f"{m['purejaxrl_cold']:.1f} (cold compile), {m['purejaxrl_warm']:.1f} (JAX cache "
              f"warm) | cold PureJaxRL / warm trustrl **{cold_ratio:.2f}x**; warm / warm "
              f"**{warm_ratio:.2f}x** |", flush=True)
    peers = []
    if a.cleanrl:
        peers.append(("CleanRL", peers_cpu.run_cleanrl))
    if a.sb3_python:
        peers.append(("SB3", peers_cpu.run_sb3))
    if peers and "one" in raw:
        s = peers_cpu.SETTINGS["cartpole"]
        pa = argparse.Namespace(cleanrl=a.cleanrl, cleanrl_python=a.cleanrl_python,
                                sb3_python=a.sb3_python)
        for name, runner in peers:
            got = [runner(s, rep + 1, ROWS["one"]["steps"], pa) for rep in range(a.repeats)]
            sps = [r.sps for r in got]
            raw[name] = {"sps": sps, "last10_return": [r.last10_return for r in got]}
            t = statistics.median(raw["one"]["trustrl_sps"])
            w = statistics.median(raw["one"]["trustrl_whole_loop_sps"])
            q = statistics.median(sps)
            print(f"| {name}, `one` (its own train-time measure) | {med(sps)} train SPS | "
                  f"trustrl / {name}: steady **{t / q:.2f}x**, whole loop (trustrl's first "
                  f"iteration, which loads the compiled code, included) **{w / q:.2f}x** |",
                  flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(raw, indent=2) + "\n")


if __name__ == "__main__":
    main()
