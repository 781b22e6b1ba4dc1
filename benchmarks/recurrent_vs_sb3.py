"""Recurrent PPO: sb3-contrib's RecurrentPPO against trustrl's PPO with recurrent=lstm, and a
memoryless trustrl PPO for contrast, on CartPoleNoVel-v1 (CartPole without its velocities,
docs/recurrent.md), with rl-baselines3-zoo's settings for RecurrentPPO, same budget, one
invocation.

    nice -n 10 python benchmarks/recurrent_vs_sb3.py [--total-steps 50000] [--seeds 0,1,2] \\
        [--out benchmarks/results/recurrent_DATE]
    python benchmarks/recurrent_vs_sb3.py --report-only --out DIR   # the tables again

Needs sb3-contrib (`pip install "trustrl[bench]"`). The settings are rl-baselines3-zoo's for
`ppo_lstm` on CartPoleNoVel-v1 (hyperparams/ppo_lstm.yml, "# Tuned"): normalize True (VecNormalize,
observations and rewards), n_envs 8, n_timesteps 1e5, MlpLstmPolicy, n_steps 32, batch_size 256,
gae_lambda 0.8, gamma 0.98, n_epochs 20, ent_coef 0.0, learning_rate lin_0.001, clip_range
lin_0.2, policy_kwargs dict(ortho_init=False, activation_fn=nn.ReLU, lstm_hidden_size=64,
enable_critic_lstm=True, net_arch=dict(pi=[64], vf=[64])). trustrl maps them onto its keys
(SETTINGS). One difference in the network: sb3-contrib's actor and critic each have their own
LSTM (enable_critic_lstm), trustrl's share one (docs/recurrent.md).

    sb3-recurrent    RecurrentPPO("MlpLstmPolicy") with the zoo's settings
    trustrl-lstm     trustrl PPO, recurrent lstm, recurrent_hidden 64, the same settings
    trustrl-mlp      trustrl PPO, recurrent none (64-unit ReLU MLPs), the same settings

Measured per run, after an untimed warm-up of each tool: the seconds of learn() (train SPS =
steps / seconds) and the final greedy return over 20 episodes reset with seeds 10000 + i
(observation statistics frozen). One torch thread per run. results.json keeps every run;
RESULT.md and the table in docs/recurrent.md (between its markers) are generated from it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
DOC = HERE.parent / "docs" / "recurrent.md"
MARK_BEGIN, MARK_END = "<!-- recurrent-table:begin -->", "<!-- recurrent-table:end -->"
sys.path.insert(0, str(HERE))
from beside_contrib import (  # noqa: E402 - the benchmarks beside sb3-contrib share these
    plot,
    run_interleaved,
    spread,
    write_between_markers,
)

ENV_ID = "CartPoleNoVel-v1"
TOOLS = ("sb3-recurrent", "trustrl-lstm", "trustrl-mlp")
EVAL_EPISODES = 20
EVAL_SEED = 10_000
SETTINGS = {"num_envs": 8, "num_steps": 32, "minibatch_size": 256, "gae_lambda": 0.8,
            "gamma": 0.98, "update_epochs": 20, "ent_coef": 0.0, "lr": 1e-3, "anneal_lr": True,
            "clip_eps": 0.2, "anneal_clip": True, "ortho_init": False, "activation": "relu",
            "hidden_sizes": (64,), "normalize_obs": True, "normalize_reward": True,
            "vf_coef": 0.5, "max_grad_norm": 0.5}
"""The zoo's settings on trustrl's keys (n_steps -> num_steps, batch_size -> minibatch_size,
n_epochs -> update_epochs, lin_ schedules -> anneal_lr / anneal_clip over the run's steps,
normalize -> normalize_obs and normalize_reward; vf_coef and max_grad_norm: SB3's defaults)."""


def run_sb3(seed: int, total: int) -> dict[str, Any]:
    import torch
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    import trustrl.envs  # noqa: F401 - registers CartPoleNoVel-v1

    torch.set_num_threads(1)
    s = SETTINGS
    env = VecNormalize(make_vec_env(ENV_ID, n_envs=s["num_envs"], seed=seed), gamma=s["gamma"])
    model = RecurrentPPO(
        "MlpLstmPolicy", env, n_steps=s["num_steps"], batch_size=s["minibatch_size"],
        n_epochs=s["update_epochs"], learning_rate=lambda f: f * s["lr"],
        clip_range=lambda f: f * s["clip_eps"], gamma=s["gamma"], gae_lambda=s["gae_lambda"],
        ent_coef=s["ent_coef"], vf_coef=s["vf_coef"], max_grad_norm=s["max_grad_norm"],
        policy_kwargs=dict(ortho_init=False, activation_fn=torch.nn.ReLU, lstm_hidden_size=64,
                           enable_critic_lstm=True, net_arch=dict(pi=[64], vf=[64])),
        seed=seed, device="cpu", verbose=0)
    t, c = time.perf_counter(), time.process_time()
    model.learn(total)
    seconds, cpu = time.perf_counter() - t, time.process_time() - c
    env.training, env.norm_reward = False, False
    eval_env = VecNormalize(make_vec_env(ENV_ID, n_envs=1), training=False, norm_reward=False)
    eval_env.obs_rms = env.obs_rms
    returns = []
    for i in range(EVAL_EPISODES):
        eval_env.seed(EVAL_SEED + i)
        obs = eval_env.reset()
        state, start, done, ret = None, np.ones(1, bool), False, 0.0
        while not done:
            a, state = model.predict(obs, state=state, episode_start=start, deterministic=True)
            obs, r, d, _ = eval_env.step(a)
            ret += float(eval_env.get_original_reward()[0])
            done, start = bool(d[0]), d
        returns.append(ret)
    env.close()
    return {"seconds": seconds, "cpu_seconds": cpu, "returns": returns}


def run_trustrl(seed: int, total: int, recurrent: str) -> dict[str, Any]:
    from trustrl.model import PPO

    with tempfile.TemporaryDirectory() as runs:
        model = PPO(ENV_ID, seed=seed, recurrent=recurrent, recurrent_hidden=64, vector="sync",
                    eval_every=0, eval_episodes=1, tensorboard=False, runs_dir=runs,
                    torch_threads=1, preset="none", **SETTINGS)
        t, c = time.perf_counter(), time.process_time()
        model.learn(total)
        seconds, cpu = time.perf_counter() - t, time.process_time() - c
        returns = model.agent.evaluate(ENV_ID, EVAL_EPISODES, deterministic=True,
                                       seed=EVAL_SEED)
    return {"seconds": seconds, "cpu_seconds": cpu, "returns": [float(x) for x in returns]}


def run_one(tool: str, seed: int, total: int) -> dict[str, Any]:
    if tool == "sb3-recurrent":
        r = run_sb3(seed, total)
    else:
        r = run_trustrl(seed, total, "lstm" if tool == "trustrl-lstm" else "none")
    r.update(tool=tool, seed=seed, total_steps=total, sps=total / r["seconds"],
             cpu_sps=total / r["cpu_seconds"], final_return=float(np.mean(r["returns"])))
    return r


def table(results: dict[str, Any]) -> str:
    runs = results["runs"]
    total = runs[0]["total_steps"]
    cpu = all("cpu_sps" in r for r in runs)  # results before 2026-12-07 have wall time only
    lines = [f"{ENV_ID}, {total:,} steps (the zoo trains 100,000), seeds "
             f"{sorted({r['seed'] for r in runs})}: mean [min, max] over seeds. Final return: "
             f"the greedy mean over {EVAL_EPISODES} evaluation episodes (500 is the most). SPS "
             "= steps / seconds of learn()"
             + (" (wall time), CPU SPS = steps / CPU seconds of learn() (process time, one "
                "thread: the work, whatever else the machine runs)." if cpu else "."),
             "", "| tool | final greedy return | train SPS | SPS / sb3-recurrent |"
             + (" CPU SPS | CPU SPS / sb3-recurrent |" if cpu else ""),
             "|---|---|---|---|" + ("---|---|" if cpu else "")]
    peer = [r for r in runs if r["tool"] == "sb3-recurrent"]
    sps_peer = statistics.fmean(r["sps"] for r in peer)
    for tool in TOOLS:
        rs = [r for r in runs if r["tool"] == tool]
        if not rs:
            continue
        sps = [r["sps"] for r in rs]
        row = (f"| {tool} | {spread([r['final_return'] for r in rs], '.1f')} | "
               f"{spread(sps, ',.0f')} | {statistics.fmean(sps) / sps_peer:.2f}x |")
        if cpu:
            c = [r["cpu_sps"] for r in rs]
            row += (f" {spread(c, ',.0f')} | "
                    f"{statistics.fmean(c) / statistics.fmean(r['cpu_sps'] for r in peer):.2f}x |")
        lines.append(row)
    v = results["versions"]
    lines += ["", f"Measured {results['date']} on {results['machine']}; "
              + ", ".join(f"{k} {x}" for k, x in v.items()) + ". Command: `"
              + results["command"] + "`."]
    return "\n".join(lines)


def draw(results: dict[str, Any], path: Path) -> None:
    """The figure of docs/recurrent.md, from a results.json (make_pages redraws it)."""
    plot(results, TOOLS, "sb3-recurrent",
         f"{ENV_ID}: trustrl beside sb3-contrib's RecurrentPPO", path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--total-steps", type=int, default=50_000)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--out", type=Path,
                   default=HERE / "results" / f"recurrent_{time.strftime('%Y-%m-%d')}")
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--resume", action="store_true",
                   help="keep the runs in OUT/results.json and run only the missing ones")
    p.add_argument("--no-docs", action="store_true",
                   help="do not rewrite docs/recurrent.md's table (a partial result)")
    a = p.parse_args(argv)
    if not a.report_only:
        cmd = ("nice -n 10 python benchmarks/recurrent_vs_sb3.py --total-steps "
               f"{a.total_steps} --seeds {a.seeds}" + (" --resume" if a.resume else ""))
        run_interleaved(TOOLS, [int(s) for s in a.seeds.split(",")], a.total_steps, 512,
                        run_one, a.out, cmd, SETTINGS, 1, resume=a.resume)
    text = table(json.loads((a.out / "results.json").read_text()))
    (a.out / "RESULT.md").write_text("# Recurrent PPO: trustrl against sb3-contrib's "
                                     "RecurrentPPO\n\n" + text + "\n")
    if not a.no_docs:
        write_between_markers(DOC, MARK_BEGIN, MARK_END, text)  # docs/recurrent.md's table
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
