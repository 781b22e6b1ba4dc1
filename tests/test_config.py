"""Config resolution: presets, precedence, parsing, docs, validation."""

from __future__ import annotations

import dataclasses

import pytest

from trustrl.settings.config import (
    PPOConfig,
    config_from_dict,
    config_to_dict,
    field_docs,
    make_config,
    parse_sets,
)
from trustrl.util.errors import ConfigError


def test_no_arguments_is_ppo_on_cartpole_with_the_lab_settings():
    cfg = make_config()
    assert cfg.algo == "ppo" and cfg.env_id == "CartPole-v1"
    assert cfg.batch_size == 512  # T = 512
    assert (cfg.update_epochs, cfg.minibatch_size, cfg.lr, cfg.anneal_lr) == (10, 64, 1e-3, True)
    assert (cfg.gamma, cfg.gae_lambda, cfg.clip_eps, cfg.vf_coef, cfg.ent_coef) == \
        (0.99, 0.95, 0.2, 0.5, 0.0)
    assert cfg.clip_value_loss is False and cfg.target_kl is None


def test_precedence_defaults_preset_file_set_flags():
    cfg = make_config("ppo", "Pendulum-v1", flags={"preset": "chapter"})
    assert cfg.gamma == 0.9 and cfg.batch_size == 2048  # preset over defaults
    cfg = make_config("ppo", "Pendulum-v1", file_values={"gamma": 0.95, "lr": 5e-4},
                      sets={"lr": "2e-4"}, flags={"seed": 9, "preset": "chapter"})
    assert (cfg.gamma, cfg.lr, cfg.seed) == (0.95, 2e-4, 9)
    # the env can come from the file, and its preset then applies
    cfg = make_config("ppo", file_values={"env_id": "Pendulum-v1", "preset": "chapter"})
    assert cfg.env_id == "Pendulum-v1" and cfg.gamma == 0.9
    # an env without a preset gets the dataclass defaults
    cfg = make_config("ppo", "FrozenLake-v1")
    assert cfg.preset is None and cfg.num_envs == PPOConfig().num_envs


@pytest.mark.parametrize("key,raw,value", [
    ("hidden_sizes", "128,128", (128, 128)),
    ("hidden_sizes", "32", (32,)),
    ("normalize_obs", "true", True),
    ("normalize_obs", "0", False),
    ("target_kl", "none", None),
    ("target_kl", "0.02", 0.02),
    ("total_steps", "1e5", 100_000),
    ("total_steps", "50_000", 50_000),
])
def test_set_values_are_parsed_to_the_field_type(key, raw, value):
    assert getattr(make_config(sets={key: raw}), key) == value


@pytest.mark.parametrize("sets,message", [
    ({"total_steps": "1.5"}, "bad value for total_steps"),
    ({"normalize_obs": "maybe"}, "bad value for normalize_obs"),
    ({"gamma": "1.5"}, "gamma must be in [0, 1]"),
    ({"vector": "threads"}, "vector must be"),
    ({"target_kl": "0"}, "target_kl must be in (0, 100], got 0"),
    ({"num_envs": "0"}, "num_envs must be in [1, 1,048,576], got 0"),  # CartPole: torch envs
    ({"num_envs": "0", "vector": "sync"}, "num_envs must be in [1, 4096], got 0"),
    ({"num_envs": "5000", "vector": "sync"}, "num_envs must be in [1, 4096] with Gymnasium's "
     "vector envs (up to 1,048,576 with vector 'torch'), got 5000"),
    ({"num_envs": "65536", "num_steps": "512", "vector": "torch"},
     "num_envs*num_steps = 33,554,432 is more than the bound 16,777,216 samples per batch"),
    ({"num_envs": "4096", "num_steps": "2048", "vector": "sync"},
     "num_envs*num_steps = 8,388,608 is more than the bound 4,194,304 samples per batch"),
    ({"hidden_sizes": "64,0"}, "hidden_sizes must be 0 to 32 widths, each in [1, 8192]"),
    ({"anneal_steps": "0", "anneal_lr": "true"}, "anneal_steps must be in [1, "),
    ({"anneal_steps": "1000000", "anneal_lr": "false"},
     "anneal_steps sets the horizon of anneal_lr and anneal_clip, and neither is on"),
    ({"anneal_clip": "true", "vector": "torch", "jit": "compile"},
     "anneal_clip runs with jit 'none'"),
    ({"anneal_steps": "1000", "anneal_lr": "true", "total_steps": "4096"},
     "anneal_steps 1000 is less than total_steps 4096"),
])
def test_bad_values_raise_one_line_config_errors(sets, message):
    with pytest.raises(ConfigError, match=None) as e:
        make_config(sets=sets)
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("vector", ["torch", "auto"])  # auto: CartPole runs on the torch envs
def test_a_gpu_sized_batch_of_torch_envs_is_accepted(vector):
    cfg = make_config(sets={"num_envs": "65536", "num_steps": "128", "vector": vector,
                            "total_steps": "100000000"})
    assert cfg.num_envs == 65536 and cfg.batch_size == 65536 * 128


def test_every_field_has_a_docstring():
    docs = field_docs(PPOConfig)
    for f in dataclasses.fields(PPOConfig):
        assert len(docs.get(f.name, "")) > 10, f.name


def test_round_trip_through_dict():
    cfg = make_config("ppo", "Pendulum-v1", sets={"hidden_sizes": "32,16", "target_kl": "0.03"})
    assert config_from_dict(config_to_dict(cfg)) == cfg


def test_parse_sets_keeps_equals_in_values():
    assert parse_sets(["env_id=mod:Env-v0", "a=b=c"]) == {"env_id": "mod:Env-v0", "a": "b=c"}


def test_help_lists_an_algorithms_own_default_of_a_shared_key():
    """PPO's defaults of num_steps and the normalisations differ from RunConfig's: `trustrl train
    --help` lists them under ppo with PPO's values; TRPO, which keeps RunConfig's, does not."""
    from trustrl.settings.config import PPOConfig, RunConfig, TRPOConfig, describe

    ppo, trpo = describe(PPOConfig, skip=RunConfig), describe(TRPOConfig, skip=RunConfig)
    for line in ("num_steps (int, default 512", "normalize_obs (bool, default True)",
                 "normalize_reward (bool, default True)"):
        assert line in ppo
    assert "num_steps" not in trpo and "normalize_obs" not in trpo
    assert "num_steps (int, default 128" in describe(RunConfig)
