"""An SB3 user's switch, step by step, in trustrl and in Stable-Baselines3 (issue 53).

    pip install stable-baselines3 torch==2.13.0    # SB3 is not a trustrl dependency
    python benchmarks/sb3_switch.py --out OUT [--steps 1024]

Each step is what a Stable-Baselines3 user does first, written once per library in its own
idiom, in the same process on CartPole-v1: an env object, `PPO("MlpPolicy", env)`, `learn`
twice (does the second call continue?), `predict` on one observation, a batch and a list,
save and load (the same greedy actions after?), an evaluation callback that keeps the best
model plus a stop-on-reward callback, a wrong-shape observation, and the evaluation helper.
Prints a Markdown table: per step what each library gave (a value, or the error's type and
first line). A step counts as failed only when it raises; whether an answer is the one a user
wants is for the reader.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

ENV = "CartPole-v1"


def attempt(fn: Callable[[], Any]) -> str:
    """fn()'s answer as text, or `error: Type: first line` (never raises)."""
    try:
        return str(fn())
    except Exception as e:  # noqa: BLE001 - the table records any failure
        first = (str(e).strip().splitlines() or [""])[0]
        return f"error: {type(e).__name__}: {first[:120]}"


def switch(build: Callable[[Any], tuple[Any, str]], load: Callable[[Path], Any],
           callbacks: Callable[[Any, Path], str], evaluate: Callable[[Any, Any], Any],
           out: Path, n: int, suffix: str) -> dict[str, str]:
    """Every step, with each library's own calls given as functions: build(env) -> (model,
    what it is), load(path), callbacks(model, folder) -> what they did, evaluate(model, env)
    -> the returns; the rest (learn, predict, save) is SB3's API, which trustrl's models share.
    """
    env = gym.make(ENV)
    obs, _ = env.reset(seed=0)
    batch = np.stack([obs] * 4)
    made: dict[str, Any] = {}

    def make() -> str:
        made["model"], text = build(env)
        return text

    res = {"PPO('MlpPolicy', env object)": attempt(make)}
    model = made.get("model")

    def save_load() -> str:
        path = out / f"ppo{suffix}"
        model.save(path)
        same = np.array_equal(model.predict(batch, deterministic=True)[0],
                              load(path).predict(batch, deterministic=True)[0])
        return f"same greedy actions: {same}"

    res.update({
        "learn(n), num_timesteps after": attempt(lambda: model.learn(n).num_timesteps),
        "learn(n) again, num_timesteps after": attempt(lambda: model.learn(n).num_timesteps),
        "predict(one obs) -> action shape": attempt(
            lambda: np.shape(model.predict(obs, deterministic=True)[0])),
        "predict(batch of 4) -> action shape": attempt(
            lambda: np.shape(model.predict(batch, deterministic=True)[0])),
        "predict(list of 4 floats)": attempt(
            lambda: model.predict(obs.tolist(), deterministic=True)[0]),
        "predict(obs of shape (3,))": attempt(lambda: model.predict(obs[:3])[0]),
        "save(path); PPO.load(path)": attempt(save_load),
        "eval + best-model + stop-on-reward callbacks": attempt(
            lambda: callbacks(model, out / f"best{suffix.split('.')[0]}")),
        "evaluate(model, env, 5 episodes) -> returns": attempt(
            lambda: len(evaluate(model, gym.make(ENV)))),
    })
    return res


def steps_trustrl(out: Path, n: int) -> dict[str, str]:
    """The steps in trustrl."""
    import trustrl

    def build(env: Any) -> tuple[Any, str]:
        model = trustrl.PPO("MlpPolicy", env, seed=1, runs_dir=str(out / "runs"),
                            tensorboard=False)
        return model, f"PPO, num_envs {model.config.num_envs}"

    def callbacks(model: Any, folder: Path) -> str:
        best = folder / "agent.pt"
        cb = [trustrl.EvalCallback(gym.make(ENV), every_steps=n // 2, episodes=5,
                                   best_path=best),
              trustrl.StopOnReward(threshold=1e9)]
        model.learn(n, callback=cb)
        return f"{len(cb[0].results)} evaluations, best model saved: {best.is_file()}"

    return switch(build, trustrl.PPO.load, callbacks,
                  lambda model, env: trustrl.evaluate(model.agent, env, episodes=5),
                  out, n, "_trustrl.pt")


def steps_sb3(out: Path, n: int) -> dict[str, str]:
    """The steps in Stable-Baselines3."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import EvalCallback, StopTrainingOnRewardThreshold
    from stable_baselines3.common.evaluation import evaluate_policy

    def build(env: Any) -> tuple[Any, str]:
        model = PPO("MlpPolicy", env, seed=1, n_steps=256, device="cpu")
        return model, f"PPO, num_envs {model.n_envs}"

    def callbacks(model: Any, folder: Path) -> str:
        stop = StopTrainingOnRewardThreshold(reward_threshold=1e9)
        cb = EvalCallback(gym.make(ENV), eval_freq=n // 2, n_eval_episodes=5,
                          best_model_save_path=str(folder), log_path=str(folder),
                          callback_on_new_best=stop, verbose=0)  # log_path: keeps the results
        model.learn(n, callback=cb, reset_num_timesteps=False)
        return (f"{len(cb.evaluations_results)} evaluations, best model saved: "
                f"{(folder / 'best_model.zip').is_file()}")

    return switch(build, lambda path: PPO.load(path, device="cpu"), callbacks,
                  lambda model, env: evaluate_policy(model, env, n_eval_episodes=5,
                                                     return_episode_rewards=True)[0],
                  out, n, "_sb3.zip")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="folder for the runs and files (default: a temporary one)")
    p.add_argument("--steps", type=int, default=1024, help="env steps per learn call")
    a = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(a.out or tmp)
        out.mkdir(parents=True, exist_ok=True)
        start = time.time()
        tr = steps_trustrl(out, a.steps)
        sb = steps_sb3(out, a.steps)
    import stable_baselines3
    import torch

    import trustrl

    print(f"{ENV}, learn({a.steps}) per call; trustrl {trustrl.__version__}, "
          f"stable-baselines3 {stable_baselines3.__version__}, torch {torch.__version__}, "
          f"gymnasium {gym.__version__}; {time.time() - start:.0f} s in all\n")
    print("| step | trustrl | stable-baselines3 |\n|---|---|---|")
    for step in tr:
        cells = [tr[step], sb.get(step, "-")]
        print(f"| {step} | " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
