"""Stable-Baselines3 side of the peer benchmarks: run by the SB3 venv's python, never by trustrl's.

    SB3_PYTHON benchmarks/peer_sb3.py train --params JSON --seed 1
    SB3_PYTHON benchmarks/peer_sb3.py solve --seed 1 [--eval-steps 10000] [--max-steps 100000]
    SB3_PYTHON benchmarks/peer_sb3.py default --env ENV --seed 1 --total-steps 100000
    SB3_PYTHON benchmarks/peer_sb3.py zoo --env ENV --params JSON --seed 1 --total-steps 100000
    SB3_PYTHON benchmarks/peer_sb3.py zoo-atari --env GAME --params JSON --seed 1 \
        --total-steps 307200 --anneal-steps 10000000

Only SB3's public API (PPO, make_vec_env, VecNormalize, EvalCallback,
StopTrainingOnRewardThreshold). Prints one line `RESULT {json}` on stdout at the end.

`train` takes the tool-neutral setting of benchmarks/peers_cpu.py (env_id, num_envs, num_steps,
update_epochs, num_minibatches, lr, anneal_lr, gamma, gae_lambda, clip_coef, clip_vloss,
ent_coef, vf_coef, max_grad_norm, norm_obs, norm_reward, total_steps) and maps it onto SB3's
PPO arguments. Differences that remain (SB3's own choices, kept as a user gets them): the value
loss is the MSE of the clipped prediction (CleanRL: 0.5 * max of clipped and unclipped squared
errors), the learning rate anneals with SB3's progress (measured after each rollout, CleanRL's
before it), and VecNormalize keeps one running statistic shared by all envs.

`solve` is rl-baselines3-zoo's tuned CartPole-v1 PPO setting (see time_to_solve.py for the
source) with a deterministic 10-episode evaluation every `--eval-steps` env steps that stops
training once the mean is 500.

`default` is SB3's PPO as a user gets it, nothing set: `PPO("MlpPolicy", ENV, seed=S)` (one
env, n_steps 2048, batch 64, 10 epochs, lr 3e-4 constant, no normalisation) learning for
`--total-steps`, then a greedy evaluation of 10 episodes (`predict(deterministic=True)`, episode
i reset with seed S + 10000 + i, trustrl's protocol); the curve is every training episode's
(step, return) from SB3's Monitor (benchmarks/defaults_vs_sb3.py).

`zoo` is an rl-baselines3-zoo PPO entry (its keys, the zoo's defaults filled in, passed as JSON
by benchmarks/mujoco_cpu.py from trustrl.settings.presets.zoo) built the way the zoo builds it:
make_vec_env with n_envs, VecNormalize when `normalize` (gamma the entry's), lin_X schedules
as linear ones, policy_kwargs (net_arch for both networks, activation, log_std_init,
ortho_init); then the same greedy evaluation as `default`, through the frozen VecNormalize.

`zoo-atari` is the zoo's `atari` block (its keys as JSON) on an ALE game, built the way the zoo
builds it (make_atari_env, VecFrameStack, CnnPolicy): no evaluation, the curve of its training
games' raw scores (benchmarks/SUITE.md, Enduro).
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

# Zoo hyperparameters (rl-baselines3-zoo hyperparams/ppo.yml, CartPole-v1, "Tuned").
ZOO_CARTPOLE: dict[str, Any] = {
    "n_envs": 8, "n_timesteps": 100_000, "n_steps": 32, "batch_size": 256, "gae_lambda": 0.8,
    "gamma": 0.98, "n_epochs": 20, "ent_coef": 0.0, "learning_rate": "lin_0.001",
    "clip_range": "lin_0.2",
}


def linear(initial: float) -> Callable[[float], float]:
    """SB3 schedules receive progress_remaining (1 at the start, 0 at the end)."""
    return lambda progress_remaining: progress_remaining * initial


def zoo_schedule(v: Any, total_steps: int = 0, horizon: int | None = None) -> Any:
    """A zoo learning rate or clip range for SB3: `lin_X` linear from X to 0 over the run, or
    over `horizon` steps of which this run of `total_steps` is the start (the zoo's schedule at
    a shorter budget); a number stays constant."""
    if not (isinstance(v, str) and v.startswith("lin_")):
        return float(v)
    x = float(v[4:])
    if horizon is None or horizon == total_steps:
        return linear(x)
    # progress_remaining runs 1 -> 0 over this run's total_steps
    return lambda pr: x * max(0.0, 1.0 - (1.0 - pr) * total_steps / horizon)


def last_returns(model: Any, n: int = 10) -> list[float]:
    """Undiscounted returns of the last n finished training episodes (Monitor, raw rewards)."""
    return [float(e["r"]) for e in list(model.ep_info_buffer)[-n:]]


def train(params: dict[str, Any], seed: int) -> dict[str, Any]:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    torch.set_num_threads(1)
    monitor_dir = tempfile.mkdtemp(prefix="sb3-monitor-")
    env = make_vec_env(params["env_id"], n_envs=params["num_envs"], seed=seed,
                       vec_env_cls=DummyVecEnv, monitor_dir=monitor_dir)
    if params["norm_obs"] or params["norm_reward"]:
        env = VecNormalize(env, norm_obs=params["norm_obs"], norm_reward=params["norm_reward"],
                           clip_obs=10.0, clip_reward=10.0, gamma=params["gamma"])
    batch = params["num_envs"] * params["num_steps"]
    lr = float(params["lr"])
    model = PPO(
        "MlpPolicy", env, device="cpu", seed=seed, verbose=0,
        n_steps=params["num_steps"], batch_size=batch // params["num_minibatches"],
        n_epochs=params["update_epochs"],
        learning_rate=linear(lr) if params["anneal_lr"] else lr,
        gamma=params["gamma"], gae_lambda=params["gae_lambda"],
        clip_range=params["clip_coef"],
        clip_range_vf=params["clip_coef"] if params["clip_vloss"] else None,
        ent_coef=params["ent_coef"], vf_coef=params["vf_coef"],
        max_grad_norm=params["max_grad_norm"], normalize_advantage=True,
        policy_kwargs={"net_arch": {"pi": [64, 64], "vf": [64, 64]},
                       "activation_fn": torch.nn.Tanh},
    )
    t0 = time.perf_counter()
    model.learn(total_timesteps=params["total_steps"])
    seconds = time.perf_counter() - t0
    returns = last_returns(model)
    return {"steps": int(model.num_timesteps), "train_seconds": seconds,
            "last10_return": sum(returns) / len(returns) if returns else None,
            "threads": torch.get_num_threads(),
            "curve": monitor_curve(monitor_dir, params["num_envs"])}


def monitor_curve(folder: str, num_envs: int, frames_per_step: int = 1
                  ) -> list[tuple[int, float]]:
    """(global step, return) of every finished training episode, from the Monitor files: the
    envs of a DummyVecEnv step together, so an episode that ends after an env's k-th step ends
    at global step k * num_envs. A Monitor inside a frame skip (make_atari_env's) counts
    frames: frames_per_step turns them into the agent's steps (to within the no-op resets)."""
    out: list[tuple[int, float]] = []
    for path in glob.glob(os.path.join(folder, "*.monitor.csv")):
        with open(path) as f:
            rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
        steps = 0
        for r in rows:
            steps += int(r["l"])
            out.append((steps // frames_per_step * num_envs, float(r["r"])))
    shutil.rmtree(folder, ignore_errors=True)
    return sorted(out)


def solve(seed: int, eval_steps: int, max_steps: int) -> dict[str, Any]:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import EvalCallback, StopTrainingOnRewardThreshold
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    z = ZOO_CARTPOLE
    env = make_vec_env("CartPole-v1", n_envs=z["n_envs"], seed=seed)
    eval_env = make_vec_env("CartPole-v1", n_envs=1, seed=seed + 10_000)
    model = PPO(
        "MlpPolicy", env, device="cpu", seed=seed, verbose=0, n_steps=z["n_steps"],
        batch_size=z["batch_size"], gae_lambda=z["gae_lambda"], gamma=z["gamma"],
        n_epochs=z["n_epochs"], ent_coef=z["ent_coef"], learning_rate=linear(0.001),
        clip_range=linear(0.2),
    )
    stop = StopTrainingOnRewardThreshold(reward_threshold=500.0, verbose=0)
    # eval_freq counts calls of the callback, one per vector step of n_envs env steps.
    callback = EvalCallback(eval_env, callback_on_new_best=stop, n_eval_episodes=10,
                            eval_freq=max(1, eval_steps // z["n_envs"]), deterministic=True,
                            verbose=0)
    model.learn(total_timesteps=max_steps, callback=callback)
    solved = callback.best_mean_reward >= 500.0
    return {"solved": bool(solved), "solved_at_epoch": time.time() if solved else None,
            "steps": int(model.num_timesteps), "best_eval": float(callback.best_mean_reward),
            "evaluations": len(callback.evaluations_timesteps)}


def default(env_id: str, seed: int, total_steps: int, episodes: int = 10) -> dict[str, Any]:
    import torch
    from stable_baselines3 import PPO

    torch.set_num_threads(1)
    # What PPO("MlpPolicy", "ENV") builds from an id (a Monitor-wrapped env in a DummyVecEnv),
    # with the Monitor writing to a file for the curve.
    from stable_baselines3.common.env_util import make_vec_env
    monitor_dir = tempfile.mkdtemp(prefix="sb3-monitor-")
    env = make_vec_env(env_id, n_envs=1, seed=seed, monitor_dir=monitor_dir)
    model = PPO("MlpPolicy", env, seed=seed, device="cpu", verbose=0)
    t0 = time.perf_counter()
    model.learn(total_timesteps=total_steps)
    seconds = time.perf_counter() - t0
    return greedy_result(model, env_id, seed, seconds, monitor_dir, 1, episodes)


def greedy_result(model: Any, env_id: str, seed: int, seconds: float, monitor_dir: str,
                  n_envs: int, episodes: int, norm: Any = None) -> dict[str, Any]:
    """The RESULT of `default` and `zoo`: the greedy return of `episodes` episodes (episode i
    reset with seed + 10000 + i, observations through the frozen VecNormalize `norm` if any),
    versions and the training curve."""
    import gymnasium as gym
    import numpy as np
    import stable_baselines3
    import torch

    eval_env = gym.make(env_id)
    returns = []
    for i in range(episodes):
        obs, _ = eval_env.reset(seed=seed + 10_000 + i)
        total, done = 0.0, False
        while not done:
            x = norm.normalize_obs(np.asarray(obs)[None])[0] if norm is not None else obs
            action, _ = model.predict(x, deterministic=True)
            obs, reward, terminated, truncated, _ = eval_env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return {"env_id": env_id, "seed": seed, "steps": int(model.num_timesteps),
            "train_seconds": seconds, "final_returns": returns,
            "final_mean": sum(returns) / len(returns),
            "versions": {"stable_baselines3": stable_baselines3.__version__,
                         "gymnasium": gym.__version__, "torch": torch.__version__},
            "curve": monitor_curve(monitor_dir, n_envs)}


def zoo(env_id: str, params: dict[str, Any], seed: int, total_steps: int,
        episodes: int = 10) -> dict[str, Any]:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    torch.set_num_threads(1)
    z = dict(params)
    n_envs = int(z["n_envs"])
    monitor_dir = tempfile.mkdtemp(prefix="sb3-monitor-")
    env = make_vec_env(env_id, n_envs=n_envs, seed=seed, vec_env_cls=DummyVecEnv,
                       monitor_dir=monitor_dir)
    if z.get("normalize"):
        env = VecNormalize(env, gamma=float(z["gamma"]))
    pk = dict(z.get("policy_kwargs") or {})
    width = list(pk.pop("net_arch", (64, 64)))
    act = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}[pk.pop("activation_fn", "tanh")]
    policy_kwargs = dict(net_arch={"pi": width, "vf": width}, activation_fn=act, **pk)
    model = PPO("MlpPolicy", env, device="cpu", seed=seed, verbose=0,
                n_steps=int(z["n_steps"]), batch_size=int(z["batch_size"]),
                n_epochs=int(z["n_epochs"]), learning_rate=zoo_schedule(z["learning_rate"]),
                gamma=float(z["gamma"]), gae_lambda=float(z["gae_lambda"]),
                clip_range=zoo_schedule(z["clip_range"]), ent_coef=float(z["ent_coef"]),
                vf_coef=float(z["vf_coef"]), max_grad_norm=float(z["max_grad_norm"]),
                policy_kwargs=policy_kwargs)
    t0 = time.perf_counter()
    model.learn(total_timesteps=total_steps)
    seconds = time.perf_counter() - t0
    norm = env if isinstance(env, VecNormalize) else None
    return greedy_result(model, env_id, seed, seconds, monitor_dir, n_envs, episodes, norm)


def atari_vec_env(env_id: str, n_envs: int, seed: int, n_stack: int, **make_kwargs: Any) -> Any:
    """An Atari game the way SB3 and the zoo build it: make_atari_env (SB3's AtariWrapper;
    `make_kwargs` such as wrapper_kwargs, vec_env_cls, monitor_dir) of n_envs, then
    VecFrameStack of n_stack. The NoFrameskip-v4 and ALE/ ids registered first (Gymnasium 1.x
    registers them on demand)."""
    import ale_py
    import gymnasium as gym
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    return VecFrameStack(make_atari_env(env_id, n_envs=n_envs, seed=seed, **make_kwargs),
                         n_stack=n_stack)


def zoo_atari(env_id: str, params: dict[str, Any], seed: int, total_steps: int,
              anneal_steps: int | None = None) -> dict[str, Any]:
    """The zoo's `atari` block (`params`) built the way the zoo builds it: make_atari_env
    (SB3's AtariWrapper, a Monitor of the raw game score inside it) with n_envs, VecFrameStack
    of frame_stack, CnnPolicy; `lin_X` schedules decay over `anneal_steps` (default: this
    run's steps), as the zoo's run had them at that step. No evaluation: the curve is every
    training game's raw score (no lives are lost in games like Enduro, so a game is one
    episode)."""
    import gymnasium as gym
    import stable_baselines3
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    torch.set_num_threads(1)
    z = dict(params)
    horizon = anneal_steps or total_steps
    if (z.get("env_wrapper"), z.get("policy")) != ("AtariWrapper", "CnnPolicy"):
        raise SystemExit("zoo-atari takes the zoo's atari block (AtariWrapper, CnnPolicy)")
    n_envs = int(z["n_envs"])
    monitor_dir = tempfile.mkdtemp(prefix="sb3-monitor-")
    env = atari_vec_env(env_id, n_envs, seed, int(z["frame_stack"]), vec_env_cls=DummyVecEnv,
                        monitor_dir=monitor_dir)
    model = PPO("CnnPolicy", env, device="cpu", seed=seed, verbose=0,
                n_steps=int(z["n_steps"]), batch_size=int(z["batch_size"]),
                n_epochs=int(z["n_epochs"]),
                learning_rate=zoo_schedule(z["learning_rate"], total_steps, horizon),
                clip_range=zoo_schedule(z["clip_range"], total_steps, horizon),
                ent_coef=float(z["ent_coef"]), vf_coef=float(z["vf_coef"]))
    t0 = time.perf_counter()
    model.learn(total_timesteps=total_steps)
    seconds = time.perf_counter() - t0
    return {"env_id": env_id, "seed": seed, "steps": int(model.num_timesteps),
            "train_seconds": seconds, "anneal_steps": horizon,
            "versions": {"stable_baselines3": stable_baselines3.__version__,
                         "gymnasium": gym.__version__, "torch": torch.__version__},
            "curve": monitor_curve(monitor_dir, n_envs, frames_per_step=4)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="mode", required=True)
    t = sub.add_parser("train", help="PPO with a tool-neutral setting (JSON)")
    t.add_argument("--params", required=True, help="the setting as a JSON object")
    t.add_argument("--seed", type=int, default=1)
    s = sub.add_parser("solve", help="zoo CartPole-v1 PPO until a greedy mean of 500")
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--eval-steps", type=int, default=10_000)
    s.add_argument("--max-steps", type=int, default=ZOO_CARTPOLE["n_timesteps"])
    d = sub.add_parser("default", help="SB3's default PPO on an env, then 10 greedy episodes")
    d.add_argument("--env", required=True)
    d.add_argument("--seed", type=int, default=1)
    d.add_argument("--total-steps", type=int, default=100_000)
    zp = sub.add_parser("zoo", help="a zoo PPO entry (JSON) on an env, then 10 greedy episodes")
    zp.add_argument("--env", required=True)
    zp.add_argument("--params", required=True, help="the zoo entry as a JSON object")
    zp.add_argument("--seed", type=int, default=1)
    zp.add_argument("--total-steps", type=int, default=100_000)
    za = sub.add_parser("zoo-atari", help="the zoo's atari block (JSON) on a game: the curve of "
                        "its training games")
    za.add_argument("--env", required=True)
    za.add_argument("--params", required=True, help="the zoo's atari block as a JSON object")
    za.add_argument("--seed", type=int, default=1)
    za.add_argument("--total-steps", type=int, default=100_000)
    za.add_argument("--anneal-steps", type=int, default=None,
                    help="decay lin_ schedules over this many steps (the zoo's: 10000000)")
    a = p.parse_args()
    if a.mode == "zoo-atari":
        result = zoo_atari(a.env, json.loads(a.params), a.seed, a.total_steps, a.anneal_steps)
    elif a.mode == "zoo":
        result = zoo(a.env, json.loads(a.params), a.seed, a.total_steps)
    elif a.mode == "train":
        result = train(json.loads(a.params), a.seed)
    elif a.mode == "default":
        result = default(a.env, a.seed, a.total_steps)
    else:
        result = solve(a.seed, a.eval_steps, a.max_steps)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
