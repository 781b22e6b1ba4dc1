"""Action masking: sb3-contrib's MaskablePPO against trustrl's PPO, masked and unmasked, and
trustrl's TRPO masked, on trustrl's MaskedPick-v0 (docs/masking.md), same budget (and, for the
PPOs, the same settings), in one invocation.

    nice -n 10 python benchmarks/masking_vs_sb3.py [--total-steps 40000] [--seeds 0,1,2] \\
        [--out benchmarks/results/masking]
    python benchmarks/masking_vs_sb3.py --report-only   # the table again from results.json

Needs sb3-contrib (`pip install "trustrl[bench]"`). Every tool runs PPO with the same settings:
4 envs x 128 steps a batch, 10 epochs of minibatches of 64, lr 3e-4 (constant), gamma 0.99,
GAE lambda 0.95, clip 0.2, no entropy bonus, value coefficient 0.5, gradient norm 0.5, 64x64
tanh MLPs for actor and critic, no observation normalisation; one torch thread.

    sb3-maskable     MaskablePPO("MlpPolicy"), masks from the env's action_masks()
    trustrl-masked   trustrl PPO, action_mask auto (the env's action_masks())
    trustrl-unmasked trustrl PPO, action_mask off (invalid moves end the episode with -1)
    trustrl-trpo-masked  trustrl TRPO, action_mask auto: the same batches (4 envs x 128
                     steps), gamma and GAE lambda, no observation normalisation, one torch
                     thread; TRPO's defaults otherwise (max_kl 0.01, 10 CG iterations, the
                     critic's Adam at 1e-3 for 5 epochs of minibatches of 64)

Measured per run, after an untimed warm-up run of each tool: the seconds of learn() (train
SPS = steps / seconds; trustrl's run writes its run folder and one evaluation of 1 episode at
the end, SB3 neither) and the final greedy return over 100 episodes reset with seeds
10000 + i (the masked tools act under the env's masks, the unmasked one without).
results.json keeps every run; report.md (and the table in docs/masking.md, between its
markers) is generated from it.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from beside_contrib import (  # noqa: E402 - the benchmarks beside sb3-contrib share these
    plot,
    run_interleaved,
    spread,
    write_between_markers,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "results" / "masking"
DOC = ROOT / "docs" / "masking.md"
ENV_ID = "MaskedPick-v0"
TOOLS = ("sb3-maskable", "trustrl-masked", "trustrl-unmasked", "trustrl-trpo-masked")
EVAL_EPISODES = 100
EVAL_SEED = 10_000
SETTINGS = {"num_envs": 4, "num_steps": 128, "update_epochs": 10, "minibatch_size": 64,
            "lr": 3e-4, "gamma": 0.99, "gae_lambda": 0.95, "clip_eps": 0.2, "ent_coef": 0.0,
            "vf_coef": 0.5, "max_grad_norm": 0.5}
MARK_BEGIN, MARK_END = "<!-- masking-table:begin -->", "<!-- masking-table:end -->"


def run_sb3(seed: int, total: int) -> dict[str, Any]:
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.env_util import make_vec_env

    from trustrl.envs.masked_pick import MaskedPick

    torch.set_num_threads(1)
    s = SETTINGS
    monitor = tempfile.TemporaryDirectory()
    env = make_vec_env(MaskedPick, n_envs=s["num_envs"], seed=seed, monitor_dir=monitor.name)
    model = MaskablePPO("MlpPolicy", env, n_steps=s["num_steps"], batch_size=s["minibatch_size"],
                        n_epochs=s["update_epochs"], learning_rate=s["lr"], gamma=s["gamma"],
                        gae_lambda=s["gae_lambda"], clip_range=s["clip_eps"],
                        ent_coef=s["ent_coef"], vf_coef=s["vf_coef"],
                        max_grad_norm=s["max_grad_norm"], seed=seed, device="cpu", verbose=0)
    t = time.perf_counter()
    model.learn(total)
    seconds = time.perf_counter() - t
    env.close()
    train = []
    for f in sorted(Path(monitor.name).glob("*.monitor.csv")):
        rows = f.read_text().splitlines()[2:]  # a JSON line, then the header r,l,t
        train += [float(r.split(",")[0]) for r in rows]
    monitor.cleanup()
    game = MaskedPick()
    returns = []
    for i in range(EVAL_EPISODES):
        obs, _ = game.reset(seed=EVAL_SEED + i)
        done, ret = False, 0.0
        while not done:
            a, _ = model.predict(obs, deterministic=True, action_masks=game.action_masks())
            obs, r, term, trunc, _ = game.step(int(a))
            ret, done = ret + r, term or trunc
        returns.append(ret)
    return {"seconds": seconds, "returns": returns, "train_returns": train}


def run_trustrl(seed: int, total: int, mask: str, algo: str = "ppo",
                grad_backend: str = "auto", vector: str = "sync") -> dict[str, Any]:
    from trustrl.model import PPO, TRPO

    common = {"seed": seed, "action_mask": mask, "vector": vector, "eval_every": 0,
              "eval_episodes": 1, "tensorboard": False, "torch_threads": 1,
              "grad_backend": grad_backend}
    with tempfile.TemporaryDirectory() as runs:
        if algo == "trpo":
            model: Any = TRPO(ENV_ID, runs_dir=runs, **common, **{
                k: SETTINGS[k] for k in ("num_envs", "num_steps", "gamma", "gae_lambda")})
        else:
            model = PPO(ENV_ID, anneal_lr=False, runs_dir=runs, **common, **SETTINGS)
        t = time.perf_counter()
        model.learn(total)
        seconds = time.perf_counter() - t
        returns = model.agent.evaluate(ENV_ID, EVAL_EPISODES, deterministic=True,
                                       seed=EVAL_SEED, action_mask=mask)
        with open(Path(model.run_dir) / "episodes.csv", newline="") as f:
            train = [float(r["return"]) for r in csv.DictReader(f)]
    return {"seconds": seconds, "returns": [float(x) for x in returns], "train_returns": train}


def run_one(tool: str, seed: int, total: int) -> dict[str, Any]:
    if tool == "sb3-maskable":
        r = run_sb3(seed, total)
    else:
        r = run_trustrl(seed, total, "off" if tool == "trustrl-unmasked" else "auto",
                        "trpo" if tool == "trustrl-trpo-masked" else "ppo")
    train = r.pop("train_returns")
    r.update(tool=tool, seed=seed, total_steps=total, sps=total / r["seconds"],
             final_return=float(np.mean(r["returns"])), train_episodes=len(train),
             train_return=float(np.mean(train)),
             invalid_fraction=float(np.mean(np.asarray(train) < 0)))
    return r


def best_play() -> float:
    """The mean return of the best play (the 4 largest values) on the evaluation episodes."""
    from trustrl.envs.masked_pick import MaskedPick

    game, best = MaskedPick(), []
    for i in range(EVAL_EPISODES):
        game.reset(seed=EVAL_SEED + i)
        best.append(float(np.sort(game.values)[-game.picks:].sum()))
    return float(np.mean(best))


def table(results: dict[str, Any]) -> str:
    runs = results["runs"]
    total = runs[0]["total_steps"]
    lines = [f"{ENV_ID}, {total:,} steps, seeds {results['seeds']}: mean [min, max] over "
             "seeds. Final return: the greedy mean over the 100 evaluation episodes (best "
             f"play on them {best_play():.3f}; random valid play 2.0 expected). Training "
             "return: the mean over every training episode (how fast it learned); invalid: "
             "the fraction of training episodes ended by an invalid move. SPS = steps / "
             "seconds of learn().",
             "", "| tool | final greedy return | training return | invalid | train SPS | "
             "SPS / sb3-maskable |", "|---|---|---|---|---|---|"]
    sps_peer = statistics.fmean(r["sps"] for r in runs if r["tool"] == "sb3-maskable")
    for tool in TOOLS:
        rs = [r for r in runs if r["tool"] == tool]
        if not rs:
            continue
        sps = [r["sps"] for r in rs]
        lines.append(f"| {tool} | {spread([r['final_return'] for r in rs], '.3f')} | "
                     f"{spread([r['train_return'] for r in rs], '.3f')} | "
                     f"{statistics.fmean(r['invalid_fraction'] for r in rs):.1%} | "
                     f"{spread(sps, ',.0f')} | {statistics.fmean(sps) / sps_peer:.2f}x |")
    v = results["versions"]
    lines += ["", f"Measured {results['date']} on {results['machine']}; "
              + ", ".join(f"{k} {x}" for k, x in v.items()) + ". Command: `"
              + results["command"] + "`."]
    return "\n".join(lines)


def write_report(out: Path) -> str:
    results = json.loads((out / "results.json").read_text())
    text = table(results)
    (out / "report.md").write_text("# Action masking: trustrl against sb3-contrib's "
                                   "MaskablePPO\n\n" + text + "\n")
    write_between_markers(DOC, MARK_BEGIN, MARK_END, text)
    return text


def draw(results: dict[str, Any], path: Path) -> None:
    """The figure of docs/masking.md, from a results.json (make_pages redraws it)."""
    plot(results, TOOLS, "sb3-maskable", f"{ENV_ID}: trustrl beside sb3-contrib's MaskablePPO",
         path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--total-steps", type=int, default=40_000)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--report-only", action="store_true")
    a = p.parse_args(argv)
    if not a.report_only:
        cmd = "nice -n 10 python benchmarks/masking_vs_sb3.py --total-steps " \
              f"{a.total_steps} --seeds {a.seeds}"
        run_interleaved(TOOLS, [int(s) for s in a.seeds.split(",")], a.total_steps, 2048,
                        run_one, a.out, cmd, SETTINGS, 3)
    print(write_report(a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
