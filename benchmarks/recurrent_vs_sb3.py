"""Recurrent PPO: sb3-contrib's RecurrentPPO against trustrl's PPO with recurrent=lstm, and a
memoryless trustrl PPO for contrast, on rl-baselines3-zoo's partially observed envs
(CartPoleNoVel-v1, PendulumNoVel-v1: the velocities removed, docs/recurrent.md) and one Atari
game (BreakoutNoFrameskip-v4, NatureCNN then the LSTM), with the zoo's settings for
RecurrentPPO, same budget, one invocation.

    nice -n 10 python benchmarks/recurrent_vs_sb3.py [--env CartPoleNoVel-v1] \\
        [--total-steps 50000] [--seeds 0,1,2] [--out benchmarks/results/recurrent_DATE] \\
        [--resume] [--no-docs]
    python benchmarks/recurrent_vs_sb3.py --report-only --out DIR   # the tables again

Needs sb3-contrib (`pip install "trustrl[bench]"`). The settings are rl-baselines3-zoo's for
`ppo_lstm` (hyperparams/ppo_lstm.yml), mapped onto trustrl's keys (ENVS):

- CartPoleNoVel-v1 ("# Tuned"): normalize True (VecNormalize, observations and rewards),
  n_envs 8, n_timesteps 1e5, MlpLstmPolicy, n_steps 32, batch_size 256, gae_lambda 0.8, gamma
  0.98, n_epochs 20, ent_coef 0.0, learning_rate lin_0.001, clip_range lin_0.2, policy_kwargs
  dict(ortho_init=False, activation_fn=nn.ReLU, lstm_hidden_size=64, enable_critic_lstm=True,
  net_arch=dict(pi=[64], vf=[64])). A minibatch of 256 steps is 8 envs' whole segments of 32.
- PendulumNoVel-v1: n_envs 4, n_timesteps 1e5, MlpLstmPolicy, n_steps 1024, gae_lambda 0.95,
  gamma 0.9, n_epochs 10, ent_coef 0.0, learning_rate 1e-3, clip_range 0.2, use_sde True,
  sde_sample_freq 4; the rest sb3-contrib's defaults (batch_size 64, lstm_hidden_size 256, one
  LSTM each for actor and critic, net_arch pi [64, 64] and vf [64, 64], tanh, orthogonal init,
  no normalisation). trustrl trains minibatches of 64 steps as one sequence each
  (sequence_length 64, from the state the rollout had there); it has no gSDE, so its actions
  are drawn from a state-independent diagonal Gaussian (the difference the table's row names).
- BreakoutNoFrameskip-v4 (the zoo's `atari` entry, the id its Atari benchmarks train): the
  AtariWrapper with terminal_on_life_loss False, frame_stack 4, n_envs 8, n_timesteps 1e7,
  CnnLstmPolicy, n_steps 128, n_epochs 4, batch_size 256, learning_rate lin_2.5e-4,
  clip_range lin_0.1, vf_coef 0.5, ent_coef 0.01; the rest sb3-contrib's defaults (gamma
  0.99, gae_lambda 0.95, max_grad_norm 0.5, LSTM of 256 each for actor and critic behind one
  NatureCNN, no hidden layers after it: net_arch [] for NatureCNN, orthogonal init).
  sb3-contrib runs on SB3's make_atari_env (that wrapper) and VecFrameStack(4); trustrl on
  its own chain, as `trustrl train --env BreakoutNoFrameskip-v4` builds it (trustrl.envs.atari:
  no-op reset, frame skip 4 with max-pooling, 84x84 grey, FIRE at reset, rewards clipped to
  their sign, 4 stacked frames: the same steps) with atari_episodic_life false, the zoo's
  terminal_on_life_loss False: a lost life does not end the training episode (FIRE is pressed
  after it), so the LSTM state and the value bootstrap are reset at a game's end only. The
  first table of 2026-12-07 (benchmarks/results/recurrent_atari_2026-12-07) was measured
  before that key existed, with trustrl's EpisodicLife on (a lost life ended its training
  episode); recurrent_atari_2026-12-07b with the key false.
  A minibatch of 256 steps is 2 envs' whole segments of 128 on both (4 per epoch). The
  zoo's 1e7 steps take hours per run on a CPU: this entry measures the train SPS at a
  shorter budget and no score (`evaluate` False: no greedy evaluation, the table says so).

One difference in the network on both: sb3-contrib's actor and critic each have their own
LSTM (enable_critic_lstm), trustrl's share one (docs/recurrent.md).

    sb3-recurrent    RecurrentPPO("MlpLstmPolicy") with the zoo's settings
    trustrl-lstm     trustrl PPO, recurrent lstm, the same settings
    trustrl-mlp      trustrl PPO, recurrent none (the same MLPs; on Atari the same NatureCNN,
                     shared by actor and critic), the same settings

Measured per run, after an untimed warm-up of each tool: the seconds of learn() (train SPS =
steps / seconds; and CPU SPS = steps / CPU seconds, one thread) and, where the env's entry
evaluates, the final greedy return over 20 episodes reset with seeds 10000 + i (observation
statistics frozen). One torch thread
per run. results.json keeps every run; RESULT.md and the env's table in docs/recurrent.md (between
its markers: CartPoleNoVel-v1's and BreakoutNoFrameskip-v4's; PendulumNoVel-v1's section is
written by hand) are generated from it.
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
ATARI_BEGIN, ATARI_END = ("<!-- recurrent-atari-table:begin -->",
                          "<!-- recurrent-atari-table:end -->")
sys.path.insert(0, str(HERE))
from beside_contrib import (  # noqa: E402 - the benchmarks beside sb3-contrib share these
    plot,
    run_interleaved,
    spread,
    write_between_markers,
)

TOOLS = ("sb3-recurrent", "trustrl-lstm", "trustrl-mlp")
EVAL_EPISODES = 20
EVAL_SEED = 10_000
ENVS: dict[str, dict[str, Any]] = {
    "CartPoleNoVel-v1": {
        "settings": {"num_envs": 8, "num_steps": 32, "minibatch_size": 256,
                     "gae_lambda": 0.8, "gamma": 0.98, "update_epochs": 20, "ent_coef": 0.0,
                     "lr": 1e-3, "anneal_lr": True, "clip_eps": 0.2, "anneal_clip": True,
                     "ortho_init": False, "activation": "relu", "hidden_sizes": (64,),
                     "normalize_obs": True, "normalize_reward": True, "vf_coef": 0.5,
                     "max_grad_norm": 0.5},
        "recurrent_hidden": 64, "normalize": True, "best": "500 is the most",
        "zoo_steps": 100_000, "markers": (MARK_BEGIN, MARK_END),
        "sb3": lambda torch: {"policy_kwargs": dict(
            ortho_init=False, activation_fn=torch.nn.ReLU, lstm_hidden_size=64,
            enable_critic_lstm=True, net_arch=dict(pi=[64], vf=[64]))}},
    "PendulumNoVel-v1": {
        "settings": {"num_envs": 4, "num_steps": 1024, "minibatch_size": 64,
                     "sequence_length": 64, "gae_lambda": 0.95, "gamma": 0.9,
                     "update_epochs": 10, "ent_coef": 0.0, "lr": 1e-3, "anneal_lr": False,
                     "clip_eps": 0.2, "anneal_clip": False, "ortho_init": True,
                     "activation": "tanh", "hidden_sizes": (64, 64), "normalize_obs": False,
                     "normalize_reward": False, "vf_coef": 0.5, "max_grad_norm": 0.5},
        "recurrent_hidden": 256, "normalize": False, "best": "0 is the most",
        "zoo_steps": 100_000,
        "sb3": lambda torch: {"use_sde": True, "sde_sample_freq": 4}},
    "BreakoutNoFrameskip-v4": {
        "settings": {"num_envs": 8, "num_steps": 128, "minibatch_size": 256,
                     "gae_lambda": 0.95, "gamma": 0.99, "update_epochs": 4, "ent_coef": 0.01,
                     "lr": 2.5e-4, "anneal_lr": True, "clip_eps": 0.1, "anneal_clip": True,
                     "ortho_init": True, "hidden_sizes": (), "normalize_obs": False,
                     "normalize_reward": False, "vf_coef": 0.5, "max_grad_norm": 0.5},
        "recurrent_hidden": 256, "normalize": False, "zoo_steps": 10_000_000,
        "atari": {"terminal_on_life_loss": False, "frame_stack": 4}, "evaluate": False,
        "markers": (ATARI_BEGIN, ATARI_END), "memoryless": {"shared_trunk": True},
        "sb3": lambda torch: {}},
}
"""Per env: the zoo's settings on trustrl's keys (n_steps -> num_steps, batch_size ->
minibatch_size (and sequence_length where the zoo's minibatch is shorter than a segment),
n_epochs -> update_epochs, lin_ schedules -> anneal_lr / anneal_clip over the run's steps,
normalize -> normalize_obs and normalize_reward; vf_coef and max_grad_norm: SB3's defaults),
the LSTM's units, whether the zoo normalises, the zoo's budget (zoo_steps), sb3-contrib's
own extra arguments (a function of the torch module); an Atari game has `atari` (the zoo's
AtariWrapper keywords and frame stack: sb3-contrib's CnnLstmPolicy on make_atari_env, trustrl
on its own Atari chain with atari_episodic_life = terminal_on_life_loss) and `evaluate` False
(no greedy evaluation: train SPS only); `markers`:
the pair between which docs/recurrent.md shows the env's table (none: a section by hand);
`memoryless`: more keys of the trustrl-mlp row (on Atari one NatureCNN for actor and critic,
shared_trunk, as the LSTM row's and SB3's CnnPolicy's, not trustrl's default of one each)."""


def run_sb3(env_id: str, seed: int, total: int) -> dict[str, Any]:
    import torch
    from peer_sb3 import atari_vec_env
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    import trustrl.envs  # noqa: F401 - registers the NoVel envs

    torch.set_num_threads(1)
    e = ENVS[env_id]
    s = e["settings"]
    atari = e.get("atari")
    if atari:
        wrap = {k: v for k, v in atari.items() if k != "frame_stack"}
        env = atari_vec_env(env_id, s["num_envs"], seed, atari["frame_stack"],
                            wrapper_kwargs=wrap)
    else:
        env = make_vec_env(env_id, n_envs=s["num_envs"], seed=seed)
    if e["normalize"]:
        env = VecNormalize(env, gamma=s["gamma"])
    lr = (lambda f: f * s["lr"]) if s["anneal_lr"] else s["lr"]
    clip = (lambda f: f * s["clip_eps"]) if s["anneal_clip"] else s["clip_eps"]
    extra = e["sb3"](torch)
    model = RecurrentPPO(
        "CnnLstmPolicy" if atari else "MlpLstmPolicy", env, n_steps=s["num_steps"],
        batch_size=s["minibatch_size"], n_epochs=s["update_epochs"], learning_rate=lr,
        clip_range=clip, gamma=s["gamma"], gae_lambda=s["gae_lambda"], ent_coef=s["ent_coef"],
        vf_coef=s["vf_coef"], max_grad_norm=s["max_grad_norm"], seed=seed, device="cpu",
        verbose=0, **extra)
    t, c = time.perf_counter(), time.process_time()
    model.learn(total)
    seconds, cpu = time.perf_counter() - t, time.process_time() - c
    if not e.get("evaluate", True):
        env.close()
        return {"seconds": seconds, "cpu_seconds": cpu, "returns": []}
    eval_env = make_vec_env(env_id, n_envs=1)
    if e["normalize"]:
        env.training, env.norm_reward = False, False
        eval_env = VecNormalize(eval_env, training=False, norm_reward=False)
        eval_env.obs_rms = env.obs_rms
    returns = []
    for i in range(EVAL_EPISODES):
        eval_env.seed(EVAL_SEED + i)
        obs = eval_env.reset()
        state, start, done, ret = None, np.ones(1, bool), False, 0.0
        while not done:
            a, state = model.predict(obs, state=state, episode_start=start, deterministic=True)
            obs, r, d, _ = eval_env.step(a)
            ret += float(eval_env.get_original_reward()[0] if e["normalize"] else r[0])
            done, start = bool(d[0]), d
        returns.append(ret)
    env.close()
    return {"seconds": seconds, "cpu_seconds": cpu, "returns": returns}


def run_trustrl(env_id: str, seed: int, total: int, recurrent: str) -> dict[str, Any]:
    from trustrl.model import PPO

    e = ENVS[env_id]
    sets = dict(e["settings"])
    if recurrent == "none":
        sets.pop("sequence_length", None)
        sets.update(e.get("memoryless", {}))
    if "atari" in e:  # SB3's AtariWrapper keyword on trustrl's key
        sets["atari_episodic_life"] = e["atari"]["terminal_on_life_loss"]
    with tempfile.TemporaryDirectory() as runs:
        model = PPO(env_id, seed=seed, recurrent=recurrent,
                    recurrent_hidden=e["recurrent_hidden"], vector="sync", eval_every=0,
                    eval_episodes=1, tensorboard=False, runs_dir=runs, torch_threads=1,
                    preset="none", **sets)
        t, c = time.perf_counter(), time.process_time()
        model.learn(total)
        seconds, cpu = time.perf_counter() - t, time.process_time() - c
        returns = (model.agent.evaluate(env_id, EVAL_EPISODES, deterministic=True,
                                        seed=EVAL_SEED) if e.get("evaluate", True) else [])
    return {"seconds": seconds, "cpu_seconds": cpu, "returns": [float(x) for x in returns]}


def runner(env_id: str) -> Any:
    """run_one(tool, seed, total) on env_id, for run_interleaved."""
    def run_one(tool: str, seed: int, total: int) -> dict[str, Any]:
        if tool == "sb3-recurrent":
            r = run_sb3(env_id, seed, total)
        else:
            r = run_trustrl(env_id, seed, total, "lstm" if tool == "trustrl-lstm" else "none")
        r.update(tool=tool, seed=seed, total_steps=total, sps=total / r["seconds"],
                 cpu_sps=total / r["cpu_seconds"],
                 final_return=float(np.mean(r["returns"])) if r["returns"] else None)
        return r
    return run_one


def table(results: dict[str, Any]) -> str:
    runs = results["runs"]
    env_id = results.get("env_id", "CartPoleNoVel-v1")  # results before --env: CartPole
    total = runs[0]["total_steps"]
    cpu = all("cpu_sps" in r for r in runs)  # results before 2026-12-07 have wall time only
    e = ENVS[env_id]
    scored = e.get("evaluate", True)
    lines = [f"{env_id}, {total:,} steps (the zoo trains {e['zoo_steps']:,}), seeds "
             f"{sorted({r['seed'] for r in runs})}: mean [min, max] over seeds. "
             + (f"Final return: the greedy mean over {EVAL_EPISODES} evaluation episodes "
                f"({e['best']})." if scored else
                f"No score: {total / e['zoo_steps']:.1%} of the zoo's budget says nothing of "
                "the score the zoo's settings reach, so the runs are not evaluated.")
             + " SPS "
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
        score = (spread([r["final_return"] for r in rs], ".1f") if scored
                 else "not measured (not the zoo's budget)")
        row = (f"| {tool} | {score} | "
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
         f"{results.get('env_id', 'CartPoleNoVel-v1')}: trustrl beside sb3-contrib's "
         "RecurrentPPO", path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", choices=list(ENVS), default="CartPoleNoVel-v1")
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
        cmd = ("nice -n 10 python benchmarks/recurrent_vs_sb3.py "
               + ("" if a.env == "CartPoleNoVel-v1" else f"--env {a.env} ")
               + f"--total-steps {a.total_steps} --seeds {a.seeds}"
               + (" --resume" if a.resume else ""))
        run_interleaved(TOOLS, [int(s) for s in a.seeds.split(",")], a.total_steps,
                        max(512, ENVS[a.env]["settings"]["num_envs"]
                            * ENVS[a.env]["settings"]["num_steps"]),
                        runner(a.env), a.out, cmd, ENVS[a.env]["settings"], 1,
                        resume=a.resume, extra={"env_id": a.env})
    text = table(json.loads((a.out / "results.json").read_text()))
    (a.out / "RESULT.md").write_text("# Recurrent PPO: trustrl against sb3-contrib's "
                                     "RecurrentPPO\n\n" + text + "\n")
    markers = ENVS[json.loads((a.out / "results.json").read_text()).get(
        "env_id", "CartPoleNoVel-v1")].get("markers")
    if not a.no_docs and markers:
        write_between_markers(DOC, *markers, text)  # the env's table in docs/recurrent.md
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
