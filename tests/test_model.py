"""The models of trustrl.model (issue 53, point 2): trustrl.PPO(env, **settings) and the other
algorithms, learn() twice is one run, predict() in SB3's shape, save/load; and the one preset
rule of every entry point (CLI, make_config, the config classes, the models)."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import trustrl
from tests.test_bad_inputs import run_cli
from trustrl.model import MODELS
from trustrl.settings.config import CONFIGS, make_config

TINY = dict(num_envs=2, num_steps=64, update_epochs=2, minibatch_size=64, eval_every=0,
            eval_episodes=2, tensorboard=False, anneal_lr=False)
TRAINING_COLUMNS = ("iteration", "global_step", "lr", "ep_return_mean", "episodes",
                    "value_loss", "approx_kl", "entropy", "clip_fraction")


def _rows(run: Path) -> list[dict[str, str]]:
    import csv

    with open(run / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def _weights(model: trustrl.Model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.policy.parameters()])


@pytest.mark.parametrize("vector,seed", [("sync", 1), ("sync", 2), ("torch", 3)])
def test_two_learn_calls_are_one_run(tmp_path, vector, seed):
    """learn(n) twice continues the same run: the metrics rows and the weights equal one
    learn(2n)'s (constant schedules, CPU)."""
    settings = dict(TINY, vector=vector, seed=seed, grad_backend="closed-form")
    twice = trustrl.PPO("CartPole-v1", runs_dir=str(tmp_path / "a"), **settings)
    twice.learn(256)
    assert twice.num_timesteps == 256
    first_dir = twice.run_dir
    twice.learn(256)
    assert twice.num_timesteps == 512 and twice.run_dir == first_dir
    once = trustrl.PPO("CartPole-v1", runs_dir=str(tmp_path / "b"), **settings).learn(512)
    a, b = _rows(twice.run_dir), _rows(once.run_dir)
    assert len(a) == len(b) == 4
    for ra, rb in zip(a, b, strict=True):
        assert {k: ra[k] for k in TRAINING_COLUMNS} == {k: rb[k] for k in TRAINING_COLUMNS}
    assert torch.equal(_weights(twice), _weights(once))
    saved = json.loads((twice.run_dir / "config.json").read_text())
    assert saved["total_steps"] == 512
    assert json.loads((twice.run_dir / "status.json").read_text())["status"] == "finished"


def test_predict_takes_one_observation_or_a_batch(tmp_path):
    model = trustrl.PPO("MlpPolicy", "CartPole-v1", runs_dir=str(tmp_path), vector="sync",
                        **TINY).learn(128)
    obs, _ = gym.make("CartPole-v1").reset(seed=0)
    action, state = model.predict(obs, deterministic=True)
    assert state is None and np.shape(action) == () and int(action) in (0, 1)
    assert action == model.agent.act(obs)
    batch = np.stack([obs, -obs, obs])
    actions, state = model.predict(batch, deterministic=True)
    assert state is None and actions.shape == (3,) and actions[0] == action
    # as the env returns them, through the model's own vector env
    envs = model.get_env()
    obs, _ = envs.reset(seed=1)
    actions, _ = model.predict(obs)
    assert actions.shape == (model.config.num_envs,)
    envs.step(actions)


def test_save_and_load(tmp_path):
    model = trustrl.PPO(gym.make("Pendulum-v1"), runs_dir=str(tmp_path / "runs"),
                        vector="sync", **TINY).learn(128)
    path = tmp_path / "ppo_pendulum.pt"
    model.save(path)
    loaded = trustrl.PPO.load(path)
    assert loaded.config == model.config
    obs = np.stack([gym.make("Pendulum-v1").reset(seed=s)[0] for s in range(4)])
    assert np.array_equal(loaded.predict(obs, deterministic=True)[0],
                          model.predict(obs, deterministic=True)[0])
    assert trustrl.Agent.load(path).spec == model.agent.spec  # an ordinary agent file too
    with pytest.raises(trustrl.ConfigError, match="holds a ppo model"):
        trustrl.TRPO.load(path)
    # learning from a loaded model: a new run that starts from its weights
    loaded.learn(128)
    assert loaded.run_dir != model.run_dir
    saved = json.loads((loaded.run_dir / "config.json").read_text())
    assert saved["init_from"] == str(path.resolve())


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "100"])
def test_learn_refuses_a_bad_step_count(bad):
    with pytest.raises(trustrl.ConfigError, match="total_timesteps"):
        trustrl.PPO("CartPole-v1").learn(bad)


def test_every_algorithm_has_a_model():
    assert set(MODELS) == set(CONFIGS)
    for algo, cls in MODELS.items():
        assert getattr(trustrl, cls.__name__) is cls and cls.__name__ in trustrl.__all__
        assert cls("Pendulum-v1").config == make_config(algo, "Pendulum-v1")


# ----- one preset rule ---------------------------------------------------------------------
@pytest.mark.parametrize("algo,env", [("ppo", "CartPole-v1"), ("trpo", "Pendulum-v1"),
                                      ("ppo", "Acrobot-v1"), ("ppo-penalty", "CartPole-v1"),
                                      ("npg", "MountainCar-v0"), ("ppo", "FrozenLake-v1")])
def test_a_config_class_applies_the_preset_make_config_does(algo, env):
    cls = CONFIGS[algo]
    assert cls(env_id=env) == make_config(algo, env)
    assert cls(env_id=env, gamma=0.97, seed=4) == make_config(
        algo, env, sets={"gamma": "0.97"}, flags={"seed": 4})
    assert cls(env_id=env, preset="none") == make_config(algo, env, sets={"preset": "none"})
    late = cls(seed=4)  # the default env's preset, then another env's: as if made with it
    late.env_id = env
    assert late == make_config(algo, env, flags={"seed": 4})


def test_preset_values_given_stay_and_a_record_is_taken_as_it_is():
    cfg = trustrl.PPOConfig(env_id="CartPole-v1", num_envs=8)
    assert cfg.preset == "chapter:CartPole-v1" and cfg.num_envs == 8 and cfg.lr == 1e-3
    cfg.preset = "zoo"
    assert cfg == make_config("ppo", "CartPole-v1", sets={"preset": "zoo", "num_envs": 8})
    record = trustrl.PPOConfig(env_id="CartPole-v1", preset="chapter:CartPole-v1")
    assert record.lr == 3e-4  # a record (config.json's) applies nothing


def test_cli_train_config_class_and_model_write_the_same_config_json(tmp_path):
    steps = ["--total-steps", "1024"]
    rc, _, err = run_cli(["train", "--env", "CartPole-v1", *steps, "--quiet",
                          "--runs-dir", "cli"], tmp_path)
    assert rc == 0, err
    made = trustrl.train(make_config("ppo", "CartPole-v1", flags={
        "total_steps": 1024, "runs_dir": str(tmp_path / "api")}))
    cls = trustrl.train(trustrl.PPOConfig(env_id="CartPole-v1", total_steps=1024,
                                          runs_dir=str(tmp_path / "cls")))
    model = trustrl.PPO("CartPole-v1", runs_dir=str(tmp_path / "model")).learn(1024)

    def saved(run: Path) -> dict:
        d = json.loads((run / "config.json").read_text())
        d.pop("runs_dir")
        return d

    cli = saved(next((tmp_path / "cli").iterdir()))
    assert cli["preset"] == "chapter:CartPole-v1"
    assert saved(made.run_dir) == cli
    assert saved(cls.run_dir) == cli
    # the model chooses its preset before learn() gives the budget: the same preset and
    # values, its reason said of the preset's own budget
    by_model = saved(model.run_dir)
    assert "100% of its budget" in by_model.pop("preset_reason")
    assert by_model == {k: v for k, v in cli.items() if k != "preset_reason"}


@pytest.mark.parametrize("key,hint", [("learning_rate", "did you mean lr"),
                                      ("n_epochs", "update_epochs"),
                                      ("batch_size", "minibatch_size"),
                                      ("n_steps", "num_steps")])
def test_sb3_names_get_trustrls(key, hint):
    with pytest.raises(trustrl.ConfigError, match=hint):
        trustrl.PPO("CartPole-v1", **{key: 1})
    with pytest.raises(trustrl.ConfigError, match=hint) as e:
        make_config("ppo", "CartPole-v1", sets={key: "1"})
    assert "--set" not in str(e.value)  # from Python: the argument's name


def test_a_learn_past_anneal_steps_is_refused_and_changes_nothing(tmp_path):
    settings = dict(TINY, anneal_lr=True, anneal_steps=256)
    model = trustrl.PPO("CartPole-v1", runs_dir=str(tmp_path), vector="sync", **settings)
    model.learn(256)
    with pytest.raises(trustrl.ConfigError, match="anneal_steps 256 is less than total_steps"):
        model.learn(128)
    assert model.num_timesteps == 256 and model.config.total_steps == 256
    assert json.loads((model.run_dir / "config.json").read_text())["total_steps"] == 256
