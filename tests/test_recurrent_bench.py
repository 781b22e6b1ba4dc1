"""benchmarks/recurrent_vs_sb3.py's Atari entry (issue 54, point 3): rl-baselines3-zoo's
`atari` settings for ppo_lstm reach sb3-contrib's RecurrentPPO and trustrl's PPO as the zoo
sets them. Nothing is trained: both learners are replaced by recorders of their arguments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
ENV = "BreakoutNoFrameskip-v4"

ZOO_ATARI = {"n_envs": 8, "n_steps": 128, "n_epochs": 4, "batch_size": 256, "lr": 2.5e-4,
             "clip_range": 0.1, "vf_coef": 0.5, "ent_coef": 0.01, "gamma": 0.99,
             "gae_lambda": 0.95, "max_grad_norm": 0.5, "lstm_hidden_size": 256}
"""The zoo's `atari` entry of hyperparams/ppo_lstm.yml (learning_rate lin_2.5e-4, clip_range
lin_0.1: linear to 0 over the run), the rest sb3-contrib's defaults."""


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # sys.path restored after the test
    import recurrent_vs_sb3

    return recurrent_vs_sb3


class _Recorder:
    """Stands for a learner: keeps its arguments, learns nothing."""

    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def __init__(self, *args: Any, **kwargs: Any):
        type(self).calls.append((args, kwargs))

    def learn(self, total: int) -> None:
        pass


def test_sb3_contrib_gets_the_zoos_atari_settings(bench, monkeypatch) -> None:
    sb3_contrib = pytest.importorskip("sb3_contrib")
    pytest.importorskip("ale_py")
    from stable_baselines3.common.atari_wrappers import EpisodicLifeEnv, FireResetEnv

    class Recorder(_Recorder):
        calls = []

    monkeypatch.setattr(sb3_contrib, "RecurrentPPO", Recorder)
    r = bench.run_sb3(ENV, 0, 0)
    assert r["returns"] == []  # no greedy evaluation at a budget that is not the zoo's
    (policy, env), kw = Recorder.calls[0]
    z = ZOO_ATARI
    assert policy == "CnnLstmPolicy"
    assert "policy_kwargs" not in kw  # sb3-contrib's own: LSTM of 256, one for the critic
    assert env.num_envs == z["n_envs"]
    assert env.observation_space.shape == (84, 84, 4)  # 4 frames stacked
    chain, e = [], env.venv.envs[0]
    while hasattr(e, "env"):
        chain.append(type(e))
        e = e.env
    assert FireResetEnv in chain and EpisodicLifeEnv not in chain  # terminal_on_life_loss False
    assert (kw["n_steps"], kw["batch_size"], kw["n_epochs"]) == (
        z["n_steps"], z["batch_size"], z["n_epochs"])
    assert kw["learning_rate"](1.0) == z["lr"] and kw["learning_rate"](0.5) == z["lr"] / 2
    assert kw["clip_range"](1.0) == z["clip_range"] and kw["clip_range"](0.0) == 0.0
    assert {k: kw[k] for k in ("gamma", "gae_lambda", "ent_coef", "vf_coef", "max_grad_norm")
            } == {k: z[k] for k in ("gamma", "gae_lambda", "ent_coef", "vf_coef",
                                    "max_grad_norm")}


@pytest.mark.parametrize("tool", ["lstm", "none"])
def test_trustrl_gets_the_same_settings_on_its_keys(bench, monkeypatch, tool) -> None:
    import trustrl.model
    from trustrl.settings.config import make_config

    class Recorder(_Recorder):
        calls = []

    monkeypatch.setattr(trustrl.model, "PPO", Recorder)
    r = bench.run_trustrl(ENV, 0, 0, tool)
    assert r["returns"] == []
    (env_id,), kw = Recorder.calls[0]
    z = ZOO_ATARI
    assert env_id == ENV and kw["recurrent"] == tool
    assert (kw["num_envs"], kw["num_steps"], kw["update_epochs"]) == (
        z["n_envs"], z["n_steps"], z["n_epochs"])
    # the zoo's minibatch of 256 steps: 2 envs' whole segments of 128, 4 minibatches an epoch
    assert kw["minibatch_size"] == z["batch_size"] and "sequence_length" not in kw
    assert (kw["lr"], kw["anneal_lr"], kw["clip_eps"], kw["anneal_clip"]) == (
        z["lr"], True, z["clip_range"], True)
    assert (kw["gamma"], kw["gae_lambda"], kw["ent_coef"], kw["vf_coef"],
            kw["max_grad_norm"]) == (z["gamma"], z["gae_lambda"], z["ent_coef"], z["vf_coef"],
                                     z["max_grad_norm"])
    assert kw["recurrent_hidden"] == z["lstm_hidden_size"]
    assert kw["hidden_sizes"] == ()  # SB3's net_arch for NatureCNN: the heads read features
    assert not kw["normalize_obs"] and not kw["normalize_reward"]
    assert kw["atari_episodic_life"] is False  # the zoo's terminal_on_life_loss False
    # the memoryless row shares its one NatureCNN, as the LSTM row and SB3's CnnPolicy do
    assert kw.get("shared_trunk", False) is (tool == "none")
    cfg = make_config("ppo", env_id, sets={k: v for k, v in kw.items()
                                           if k not in ("seed", "runs_dir")})
    assert (cfg.minibatch_size, cfg.recurrent, cfg.hidden_sizes) == (256, tool, ())


def test_the_atari_table_reports_speed_and_no_score(bench) -> None:
    runs = [{"tool": t, "seed": s, "total_steps": 10240, "sps": sps, "cpu_sps": sps + 1,
             "final_return": None}
            for t, sps in (("sb3-recurrent", 40.0), ("trustrl-lstm", 100.0),
                           ("trustrl-mlp", 90.0)) for s in (0, 1, 2)]
    text = bench.table({"env_id": ENV, "runs": runs, "date": "d", "machine": "m",
                        "versions": {}, "command": "c"})
    rows = [line for line in text.splitlines() if line.startswith("| trustrl-lstm")]
    assert rows == ["| trustrl-lstm | not measured (not the zoo's budget) | 100 [100, 100] | "
                    "2.50x | 101 [101, 101] | 2.46x |"]
    assert "the zoo trains 10,000,000" in text and "greedy mean" not in text
