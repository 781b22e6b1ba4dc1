"""benchmarks/sb3_switch.py and benchmarks/onehot_norm.py (issue 53): the steps of an SB3
user's switch run in trustrl (the SB3 half needs stable-baselines3, not a test dependency),
a failing step is one table cell, and the one-hot toy's "before" variant really normalises
the one-hots (and leaves Agent as it was)."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # sys.path restored after the test


def test_attempt_turns_an_error_into_one_line(bench) -> None:
    from sb3_switch import attempt

    def boom() -> None:
        raise ValueError("first line\nsecond line")

    assert attempt(boom) == "error: ValueError: first line"
    assert attempt(lambda: (4,)) == "(4,)"


def test_every_step_of_the_switch_runs_in_trustrl(bench, tmp_path: Path) -> None:
    from sb3_switch import steps_trustrl

    res = steps_trustrl(tmp_path, 512)
    wrong = "predict(obs of shape (3,))"
    assert res[wrong].startswith("error: ObservationError: observation of shape (3,)")
    assert not [k for k, v in res.items() if k != wrong and v.startswith("error")], res
    assert res["learn(n) again, num_timesteps after"] == "1024"  # the same run, continued
    assert res["save(path); PPO.load(path)"] == "same greedy actions: True"


def test_onehot_toy_is_a_valid_env_and_the_before_variant_normalises_one_hots(
        bench, tmp_path: Path) -> None:
    from onehot_norm import OneHotTarget, run

    from trustrl.records.agent import Agent

    check_env(OneHotTarget(skew=True), skip_render_check=True)
    assert isinstance(OneHotTarget().observation_space, gym.spaces.MultiDiscrete)
    defaults = Agent.__init__.__defaults__
    run("normalize_obs=True, one-hots normalised (before)", 1, 2048, tmp_path)  # asserts
    assert Agent.__init__.__defaults__ == defaults
