"""benchmarks/rllib_beside.py's Atari row (issue 55 point 4): its settings mapping and the
result's note that the row is train SPS only (no Ray needed: the report side)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # sys.path restored after the test
    import rllib_beside

    return rllib_beside


def _results(bench, envs: list[str]) -> dict:
    run = {"side": "trustrl", "runners": 1, "seed": 1, "train_sps": 200.0,
           "collect_share": 0.5, "final_return": 1.0, "load": [1.0, 2.0],
           "iterations": [{"return_window": 1.0, "global_step": 1024}]}
    return {"date": "2026-12-06", "command": "c", "machine": "m", "versions": {}, "envs": envs,
            "runners": [1], "variants": [""], "settings": {e: {} for e in envs},
            "mapping": bench.mapping(envs),
            "runs": [dict(run, env=e, side=side) for e in envs for side in ("trustrl", "rllib")]}


def test_atari_rows_join_the_mapping_only_with_an_atari_env(bench) -> None:
    assert bench.mapping(["CartPole-v1", "HalfCheetah-v5"]) == bench.MAPPING
    both = bench.mapping(["CartPole-v1", "ALE/Breakout-v5"])
    assert both[:len(bench.MAPPING)] == bench.MAPPING
    assert both[len(bench.MAPPING):] == bench.ATARI_MAPPING
    assert any("NatureCNN" in row[0] for row in bench.ATARI_MAPPING)


def test_an_atari_result_says_it_is_train_sps_only(bench) -> None:
    atari = bench.markdown(_results(bench, ["ALE/Breakout-v5"]))
    assert "**train SPS only**" in atari
    assert "| ALE/Breakout-v5 | 1 | trustrl | 200 | 200 | 1.00 |" in atari
    assert "NatureCNN" in atari  # the Atari mapping rows are printed
    assert "train SPS only" not in bench.markdown(_results(bench, ["CartPole-v1"]))


def test_the_atari_setting_is_cleanrls_network_without_obs_normalisation(bench) -> None:
    s = dict(bench.COMMON, **bench.SETTINGS["ALE/Breakout-v5"])
    assert s["shared_trunk"] and s["hidden_sizes"] == () and not s["normalize_obs"]
    assert s["num_envs"] * s["num_steps"] == 1024
