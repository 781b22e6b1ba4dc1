"""Sweep SPEC parsing: trials and configs resolved in the documented order; a bad SPEC fails
with one line before anything runs (no sweep folder is created)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trustrl.cli import main
from trustrl.settings.config import PRESETS
from trustrl.sweep.spec import SpecError, load_spec, parse_seeds, parse_spec, variant_name
from trustrl.util.errors import EnvError, TrustrlError

BASE = {"seeds": [1, 2], "total_steps": 4096, "algos": ["ppo", "trpo"], "envs": ["CartPole-v1"]}


def test_trials_are_the_product_of_algos_envs_grid_and_seeds():
    spec = parse_spec({**BASE, "algos": {"ppo": {}}, "envs": ["CartPole-v1", "Pendulum-v1"],
                       "grid": {"clip_eps": [0.1, 0.3], "update_epochs": [4, 10]}})
    assert len(spec.trials) == 1 * 2 * 4 * 2
    ids = [t.id for t in spec.trials]
    assert len(set(ids)) == len(ids)
    assert ids[0] == "CartPole-v1__ppo__clip_eps=0.1,update_epochs=4__seed1"
    assert {t.variant for t in spec.trials} == {
        variant_name("ppo", {"clip_eps": c, "update_epochs": k}) for c in (0.1, 0.3)
        for k in (4, 10)}
    assert all(t.config["total_steps"] == 4096 for t in spec.trials)
    assert parse_spec(dict(BASE)).trials[0].id == parse_spec(dict(BASE)).trials[0].id


def test_config_layers_in_the_documented_order():
    spec = parse_spec({
        "seeds": "3..4", "algos": {"ppo": {"lr": 0.002, "ent_coef": 0.01}},
        "envs": {"CartPole-v1": {"total_steps": 40960, "overrides": {"lr": 0.003, "num_envs": 2},
                                 "algos": {"ppo": {"num_envs": 8}}}},
        "common": {"lr": 0.001, "ent_coef": 0.02, "gamma": 0.98},
        "grid": {"gamma": [0.9]}, "resources": {"cpus": 2}})
    c = spec.trials[0].config
    preset = PRESETS[("ppo", "CartPole-v1")]
    assert c["update_epochs"] == preset["update_epochs"]  # preset kept where nothing overrides
    assert c["ent_coef"] == 0.01      # algos.<algo> over common
    assert c["lr"] == 0.003           # envs.<env>.overrides over algos.<algo>
    assert c["num_envs"] == 8         # envs.<env>.algos.<algo> over envs.<env>.overrides
    assert c["gamma"] == 0.9          # the grid point over everything written above it
    assert c["total_steps"] == 40960 and [t.seed for t in spec.trials] == [3, 4]
    assert [t.config["seed"] for t in spec.trials] == [3, 4]
    assert spec.resources == {"cpus": 2.0, "gpus": 0.0}


@pytest.mark.parametrize("change, message", [
    ({"algos": ["ppo", "sac"]}, "unknown algorithm 'sac'"),
    ({"algos": []}, "algos is empty"),
    ({"algos": ["ppo"], "flavour": 1}, "unknown key 'flavour' in the spec"),
    ({"common": {"lrr": 0.1}}, "unknown config key 'lrr' for ppo in common (did you mean lr"),
    ({"common": {"update_epochs": 4}}, "unknown config key 'update_epochs' for trpo"),
    ({"common": {"seed": 4}}, "'seed' in common is not a config override"),
    ({"grid": {"max_kl": []}}, "grid.max_kl is empty"),
    ({"grid": {"max_kl": 0.01}}, "grid.max_kl must be a list"),
    ({"seeds": []}, "seeds is empty"),
    ({"seeds": [1, 1]}, "seeds repeats a seed"),
    ({"seeds": "1-3"}, "seeds must be a list of ints or 'A..B'"),
    ({"envs": []}, "envs is empty"),
    ({"envs": {"CartPole-v1": {"treshold": 5}}}, "unknown key 'treshold' in envs.CartPole-v1"),
    ({"envs": {"CartPole-v1": {"algos": {"npg": {}}}}}, "names 'npg', which is not in algos"),
    ({"common": {"gamma": "high"}}, "bad value for gamma"),
    ({"common": {"gamma": 1.5}}, "gamma must be in [0, 1]"),
    ({"total_steps": -5}, "total_steps must be an integer in [1, 1,000,000,000,000]"),
    ({"resources": {"gpu": 1}}, "unknown key 'gpu' in resources (did you mean gpus"),
])
def test_bad_spec_fails_with_one_line(change, message):
    with pytest.raises(SpecError) as e:
        parse_spec({**BASE, **change}, check_envs=False)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_unknown_env_fails_before_anything_runs():
    with pytest.raises(EnvError, match="CartPol-v1"):
        parse_spec({**BASE, "envs": ["CartPol-v1"]})


def test_seed_ranges():
    assert parse_seeds("1..4", "seeds") == [1, 2, 3, 4]
    assert parse_seeds([7, 3], "seeds") == [7, 3]
    with pytest.raises(SpecError):
        parse_seeds("4..1", "seeds")
    with pytest.raises(TrustrlError):
        parse_seeds([1, True], "seeds")


@pytest.mark.parametrize("text, message", [
    ("algos: [ppo, reinforce]\nenvs: [CartPole-v1]\nseeds: [1]\n", "unknown algorithm"),
    ("algos: [ppo]\nenvs: [CartPole-v1]\nseeds: [1]\ngrid: {lr: []}\n", "grid.lr is empty"),
    ("algos: [ppo]\nenvs: [CartPole-v1]\nseeds: [1]\ncommon: {clip: 0.1}\n",
     "unknown config key 'clip'"),
    ("algos: [ppo\n", "cannot parse"),
])
def test_cli_bad_spec_exits_2_and_creates_nothing(tmp_path, capsys, text, message):
    spec = tmp_path / "bad.yaml"
    spec.write_text(text)
    out = tmp_path / "sweep"
    assert main(["sweep", str(spec), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("trustrl: error: ") and message in err and "\n" not in err
    assert not out.exists()


def test_cli_refuses_an_existing_sweep_folder_and_bad_options(tmp_path, capsys):
    spec = tmp_path / "ok.yaml"
    spec.write_text("algos: [ppo]\nenvs: [CartPole-v1]\nseeds: [1]\ntotal_steps: 512\n")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("")
    assert main(["sweep", str(spec), "--out", str(tmp_path / "taken")]) == 2
    assert "--resume" in capsys.readouterr().err
    assert main(["sweep", str(spec), "--workers", "0"]) == 2
    assert main(["sweep"]) == 2
    assert main(["sweep", "--resume", str(tmp_path / "nothing")]) == 2
    assert "not a sweep folder" in capsys.readouterr().err
    assert main(["report", str(tmp_path), "--threshold", "CartPole-v1"]) == 2
    assert main(["sweep", str(spec), "--dry-run"]) == 0
    assert "CartPole-v1__ppo__seed1" in capsys.readouterr().out


@pytest.mark.parametrize("path", sorted(
    (Path(__file__).resolve().parent.parent / "benchmarks" / "suite").glob("*.yaml")),
    ids=lambda p: p.name)
def test_every_benchmark_suite_spec_is_valid(path):
    """The suite presets (benchmarks/suite/*.yaml) parse and validate, algorithm keys and
    config values included (env ids are not checked: Box2D and MuJoCo are optional extras)."""
    spec = load_spec(path, check_envs=False)
    assert spec.trials
