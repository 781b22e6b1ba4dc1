"""A masked PPO run on the compiled kernels against the same run on the closed form in torch
(docs/masking.md): trustrl's PPO on MaskedPick-v0 (action_mask auto) with
benchmarks/masking_vs_sb3.py's settings, grad_backend 'compiled' against 'closed-form',
alternating A B A B in one invocation, so that a change of the machine's load hits both sides
of a pair alike; the ratio is taken pair by pair. `--vector sync` (the default): the
Gymnasium collector; `--vector torch`: the batched collector, whose 'compiled' run takes the
compiled rollout and the fused iteration and whose 'closed-form' run the NumPy rollout and the
torch closed form.

    nice -n 10 python benchmarks/masking_compiled.py [--total-steps 20000] [--pairs 3] \\
        [--vector sync|torch] [--out benchmarks/results/masking_compiled]

Per run (after one untimed warm-up run of each: imports, the compiled kernels from the disk
cache): the seconds of learn() (train SPS = steps / seconds) and the final greedy return over
100 episodes under the env's masks (masking_vs_sb3.run_trustrl). results.json keeps every run.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from masking_vs_sb3 import SETTINGS, run_trustrl  # noqa: E402 - the same runs and settings

OUT = Path(__file__).resolve().parent / "results" / "masking_compiled"
BACKENDS = ("compiled", "closed-form")


def run(backend: str, seed: int, total: int, vector: str = "sync") -> dict[str, Any]:
    r = run_trustrl(seed, total, "auto", "ppo", backend, vector)
    return {"backend": backend, "seed": seed, "total_steps": total, "seconds": r["seconds"],
            "sps": total / r["seconds"],
            "final_return": statistics.fmean(r["returns"])}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--total-steps", type=int, default=20_000)
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--vector", choices=("sync", "torch"), default="sync")
    p.add_argument("--out", type=Path, default=None,
                   help=f"default {OUT} (vector sync), {OUT}_batched (vector torch)")
    a = p.parse_args(argv)
    if a.out is None:
        a.out = OUT if a.vector == "sync" else OUT.with_name(OUT.name + "_batched")
    import torch

    import trustrl

    for b in BACKENDS:  # warm-up: imports and the kernels (compiled once per machine)
        run(b, 99, 2048, a.vector)
    runs: list[dict[str, Any]] = []
    ratios = []
    for i in range(a.pairs):
        pair = {b: run(b, i, a.total_steps, a.vector) for b in BACKENDS}
        runs += list(pair.values())
        ratios.append(pair["compiled"]["sps"] / pair["closed-form"]["sps"])
        print(f"pair {i}: compiled {pair['compiled']['sps']:,.0f} SPS, closed-form "
              f"{pair['closed-form']['sps']:,.0f} SPS: {ratios[-1]:.2f}x (returns "
              f"{pair['compiled']['final_return']:.3f}, "
              f"{pair['closed-form']['final_return']:.3f})", flush=True)
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "results.json").write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()} CPU, 2 cores "
            "shared with other jobs, one torch thread per run",
            "command": "nice -n 10 python benchmarks/masking_compiled.py --total-steps "
                       f"{a.total_steps} --pairs {a.pairs}"
                       + ("" if a.vector == "sync" else f" --vector {a.vector}"),
            "vector": a.vector,
            "settings": SETTINGS, "versions": {"python": platform.python_version(),
                                               "torch": torch.__version__,
                                               "trustrl": trustrl.__version__},
            "ratios": ratios, "runs": runs}, indent=1))
    print(f"compiled / closed-form train SPS: median {statistics.median(ratios):.2f}x "
          f"(pairs {', '.join(f'{r:.2f}' for r in ratios)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
