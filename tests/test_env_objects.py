"""Env objects everywhere (issue 53, point 1): a constructed gymnasium.Env or a Gymnasium vector
env in the configs, train, evaluate and the models; what config.json records of them; eval and
resume of a run whose env object cannot be re-made ask for it in one line."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

import trustrl
from tests.helper_envs import MultiDiscreteEnv
from tests.test_bad_inputs import assert_one_line_error, run_cli
from trustrl.envs.objects import ENV_OBJECT, EnvCopies
from trustrl.settings.config import make_config

SMALL = dict(total_steps=128, num_envs=2, num_steps=32, minibatch_size=32, update_epochs=1,
             eval_every=0, eval_episodes=2, tensorboard=False, vector="sync")


class Unregistered(gym.Env):
    """An env object with no spec; made here with an argument its class alone would not know."""

    def __init__(self, horizon: int = 50):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.horizon = horizon

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), {}

    def step(self, action):
        self.t += 1
        obs = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return obs, float(action == (obs[0] > 0)), False, self.t >= self.horizon, {}


def test_an_env_made_by_gym_make_is_recorded_as_its_id_kwargs_and_wrappers():
    env = gym.wrappers.RecordEpisodeStatistics(
        gym.make("FrozenLake-v1", is_slippery=False, max_episode_steps=30))
    cfg = trustrl.PPOConfig(env_id=env)
    assert cfg.env_id == "FrozenLake-v1"
    assert cfg.env_kwargs == {"is_slippery": False, "max_episode_steps": 30}
    assert cfg.wrappers == [{"wrapper": "gymnasium.wrappers.common:RecordEpisodeStatistics",
                             "kwargs": {"buffer_length": 100, "stats_key": "episode"}}]
    # the same config as the id with those kwargs and wrappers, preset included
    assert trustrl.PPOConfig(env_id=gym.make("CartPole-v1")) == make_config("ppo", "CartPole-v1")


def test_a_vector_env_gives_its_number_of_envs():
    sync = gym.make_vec("Acrobot-v1", num_envs=3, vectorization_mode="sync")
    cfg = trustrl.TRPOConfig(env_id=sync)
    assert (cfg.env_id, cfg.num_envs, cfg.preset) == ("Acrobot-v1", 3, "zoo:Acrobot-v1")
    with pytest.raises(trustrl.ConfigError, match="num_envs 5 was given with an env object"):
        trustrl.PPOConfig(env_id=sync, num_envs=5)
    sub = gym.vector.SyncVectorEnv([lambda: Unregistered(7)] * 2)
    cfg = trustrl.PPOConfig(env_id=sub)
    assert isinstance(cfg.env_id, EnvCopies) and cfg.num_envs == 2


def test_an_env_object_without_a_spec_trains_on_copies_and_is_asked_for_again(tmp_path):
    env = Unregistered(horizon=5)
    res = trustrl.train(trustrl.PPOConfig(env_id=env, runs_dir=str(tmp_path / "runs"), **SMALL))
    saved = json.loads((res.run_dir / "config.json").read_text())
    assert saved["env_id"] == f"{ENV_OBJECT}{Unregistered.__module__}:Unregistered"
    assert res.run_dir.name.startswith("Unregistered__ppo__")
    with open(res.run_dir / "episodes.csv") as f:
        lengths = {line.split(",")[4].strip() for line in list(f)[1:]}
    assert lengths == {"5"}  # the object's horizon, not the class's default
    assert env.spec is None and not hasattr(env, "t")  # copies stepped, not the object
    note = json.loads((res.run_dir / "status.json").read_text())["note"]
    assert "env object" in note
    # evaluate takes the object (and its class)
    returns = trustrl.evaluate(res.agent, env, episodes=3)
    assert returns.shape == (3,) and np.all(returns <= 5)
    assert trustrl.evaluate(res.agent, Unregistered, episodes=1).shape == (1,)
    # the folder alone cannot re-make it: one line, from the CLI and from Python
    rc, _, err = run_cli(["eval", str(res.run_dir), "--episodes", "1"], tmp_path)
    assert_one_line_error(rc, err, "env object", "pass the env again")
    with pytest.raises(trustrl.EnvError, match="pass the env again"):
        trustrl.resume(res.run_dir, total_steps=192)
    # given again, resume goes on
    more = trustrl.resume(res.run_dir, total_steps=192, env=Unregistered(horizon=5))
    assert more.final_eval["global_step"] == 192


def test_models_and_train_take_every_kind_of_env(tmp_path):
    kinds = {"id": "CartPole-v1", "class": gym.envs.classic_control.CartPoleEnv,
             "function": lambda: gym.make("CartPole-v1"), "object": gym.make("CartPole-v1"),
             "vector": gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")}
    for name, env in kinds.items():
        model = trustrl.PPO(env, runs_dir=str(tmp_path / name),
                            **{k: v for k, v in SMALL.items() if k != "total_steps"})
        model.learn(64)
        assert model.num_timesteps == 64, name
        assert trustrl.evaluate(model.agent, env, episodes=1).shape == (1,)
    lam = next((tmp_path / "function").iterdir())
    assert lam.name.startswith("CartPole-v1__ppo__")  # not '-not-importable-lambda-'


def test_an_env_that_cannot_be_copied_says_so():
    class Holding(MultiDiscreteEnv):
        def __deepcopy__(self, memo):
            raise TypeError("cannot pickle '_thread.lock' object")

    with pytest.raises(trustrl.ConfigError, match="cannot be copied") as e:
        trustrl.PPOConfig(env_id=Holding())
    assert "\n" not in str(e.value)
