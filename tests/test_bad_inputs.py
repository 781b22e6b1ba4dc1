"""Every bad input is one line on stderr and exit status 2, and nothing hangs (issue 18, points 4
and 6). Through the real CLI entry, trustrl.cli.main, in-process (a few in a subprocess): the
examples the reviewers found, then a property-based test over every config key with
non-finite, negative, zero, huge and wrong-typed values, by --set and in a JSON config file."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import types
import typing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trustrl.cli import main
from trustrl.settings.config import (
    CONFIGS,
    RANGES,
    check_checkpoint_config,
    config_to_dict,
    make_config,
)
from trustrl.util.errors import ConfigError

TINY = ["--total-steps", "64", "--set", "num_envs=1", "--set", "num_steps=64",
        "--set", "eval_episodes=1", "--set", "eval_every=0", "--set", "tensorboard=false",
        "--set", "hidden_sizes=8", "--quiet"]
"""A run that takes well under a second: one iteration of 64 steps, one final evaluation."""


def run_cli(args: list[str], cwd: Path) -> tuple[int, str, str]:
    """trustrl.cli.main(args) in `cwd`: (exit status, stdout, stderr). Any exception other
    than SystemExit escapes (a traceback is what these tests must never see)."""
    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(args)
            except SystemExit as e:  # argparse
                rc = e.code if isinstance(e.code, int) else 2
    finally:
        os.chdir(old)
    return rc, out.getvalue(), err.getvalue()


def statuses(root: Path) -> list[str]:
    return [json.loads(p.read_text())["status"] for p in root.rglob("status.json")]


def assert_one_line_error(rc: int, err: str, *fragments: str) -> str:
    lines = err.strip().splitlines()
    assert rc == 2, (rc, err)
    assert len(lines) == 1 and lines[0].startswith("trustrl") and "error:" in lines[0], err
    assert "Traceback" not in err
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]


def assert_bad(args: list[str], cwd: Path, *fragments: str) -> str:
    """Exit 2 with one line containing each fragment, and no run folder made."""
    before = {p for p in cwd.rglob("status.json")}
    rc, _, err = run_cli(args, cwd)
    line = assert_one_line_error(rc, err, *fragments)
    assert {p for p in cwd.rglob("status.json")} == before, "a run folder was made"
    return line


@pytest.fixture
def tiny_run(tmp_path_factory) -> Path:
    """One finished CartPole PPO run (made once per test that asks)."""
    cwd = tmp_path_factory.mktemp("tiny")
    rc, out, err = run_cli(["train", "--runs-dir", "runs", *TINY], cwd)
    assert rc == 0, err
    (run,) = (cwd / "runs").iterdir()
    return run


# ----- the reviewers' examples ----------------------------------------------------------------
@pytest.mark.parametrize("args,fragment", [
    (["--seed", "-1"], "seed must be in [0, 2,147,483,647], got -1"),
    (["--seed", str(2**40)], "seed must be in [0, 2,147,483,647]"),
    (["--seed", "2**40"], "bad value for seed"),
    (["--seed", "1.5"], "bad value for seed"),
    (["--set", "lr=inf"], "lr must be a finite number, got inf"),
    (["--set", "vf_coef=inf"], "vf_coef must be a finite number"),
    (["--set", "ent_coef=nan"], "ent_coef must be a finite number, got nan"),
    (["--env", "Pendulum-v1", "--set", "log_std_init=inf"], "log_std_init must be a finite"),
    (["--env", "Pendulum-v1", "--set", "log_std_init=1000"], "log_std_init must be in [-20, 5]"),
    (["trpo", "--set", "max_kl=inf"], "max_kl must be a finite number"),
    (["trpo", "--set", "damping=nan"], "damping must be a finite number"),
    (["npg", "--set", "max_kl=1e9"], "max_kl must be in (0, 10]"),
    (["--set", "max_grad_norm=nan"], "max_grad_norm must be a finite number"),
    (["--env", ""], "--env is empty"),
    (["--config", ""], "--config is empty"),
    (["--seeds", ""], "--seeds is empty"),
    (["--resume", ""], "--resume is empty"),
    (["--set", "env_id="], "env_id is empty"),
    (["--set", "num_envs=10000000"], "num_envs must be in [1, 1,048,576], got 10,000,000"),
    (["--set", "vector=sync", "--set", "num_envs=10000"],
     "num_envs must be in [1, 4096] with Gymnasium's vector envs (up to 1,048,576"),
    (["--set", "num_envs=4096", "--set", "num_steps=8192"], "bound 16,777,216 samples"),
    (["--set", "vector=sync", "--set", "num_envs=4096", "--set", "num_steps=4096"],
     "bound 4,194,304 samples"),
    (["--set", "hidden_sizes=100000,100000"], "each in [1, 8192]"),
    (["--set", "hidden_sizes=8192,8192,8192"], "hidden weights per network; the bound is"),
    (["--set", "hidden_sizes=" + ",".join(["4"] * 40)], "0 to 32 widths"),
    (["--set", "eval_max_steps=0"], "eval_max_steps must be in [1, 10,000,000]"),
    (["--set", "total_steps=1e400"], "bad value for total_steps"),
    (["--set", "total_steps=" + "9" * 5000], "bad value for total_steps"),
    (["--set", "normalize_obs=2"], "bad value for normalize_obs"),
    (["--set", "=3"], "--set expects key=value"),
    (["--seeds", "0-2999999"], "more than 65,536 seeds"),
    (["--seeds", "0-99999999999999999999"], "is outside [0, 2,147,483,647]"),
    (["--seeds", "0-299", "--set", "num_envs=4096", "--set", "num_steps=1",
      "--total-steps", "4096"], "is more than the bound 1,048,576"),
    (["--seeds", "-5-3"], "--seeds"),
    (["--seed", "1", "--seeds", "1-2"], "give --seed or --seeds, not both"),
])
def test_reviewers_train_examples_are_one_line(tmp_path, args, fragment):
    assert_bad(["train", "--runs-dir", "runs", *args], tmp_path, fragment)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.parametrize("vector", ["sync", "auto"])
def test_the_largest_seed_runs_on_both_collectors(tmp_path, vector):
    rc, out, err = run_cli(["train", "--runs-dir", "runs", *TINY, "--vector", vector,
                            "--seed", str(2**31 - 1)], tmp_path)
    assert rc == 0 and "run:" in out, err
    assert statuses(tmp_path) == ["finished"]


def test_config_file_values_keep_their_type(tmp_path):
    (tmp_path / "a.toml").write_text("seed = true\n")
    assert_bad(["train", "--config", "a.toml"], tmp_path, "bad value for seed: True")
    (tmp_path / "b.toml").write_text('env_id = 5\n')
    assert_bad(["train", "--config", "b.toml"], tmp_path, "bad value for env_id")
    (tmp_path / "c.toml").write_text("lr = inf\n")
    assert_bad(["train", "--config", "c.toml"], tmp_path, "lr must be a finite number")
    (tmp_path / "d.json").write_text('{"gamma": NaN}')
    assert_bad(["train", "--config", "d.json"], tmp_path, "gamma must be a finite number")
    (tmp_path / "e.json").write_text('{"hidden_sizes": [64, true]}')
    assert_bad(["train", "--config", "e.json"], tmp_path, "bad value for hidden_sizes")
    (tmp_path / "f.toml").write_text("[ppo]\nlr = 0.1\n")
    assert_bad(["train", "--config", "f.toml"], tmp_path, "is a table")
    (tmp_path / "g.json").write_text("[1, 2]")
    assert_bad(["train", "--config", "g.json"], tmp_path, "must hold key = value pairs")


def test_binary_missing_and_folder_config_files(tmp_path):
    (tmp_path / "bin.toml").write_bytes(bytes(range(256)) * 4)
    assert_bad(["train", "--config", "bin.toml"], tmp_path, "not UTF-8 text")
    (tmp_path / "nul.toml").write_bytes(b"lr = 0.1\x00\n")
    assert_bad(["train", "--config", "nul.toml"], tmp_path, "not a text file")
    (tmp_path / "dir.toml").mkdir()
    assert_bad(["train", "--config", "dir.toml"], tmp_path, "is a folder")
    (tmp_path / "big.toml").write_text("# x\n" * 300_000)
    assert_bad(["train", "--config", "big.toml"], tmp_path, "larger than 1,000,000 bytes")


def test_runs_dir_that_is_a_file_or_under_a_file(tmp_path):
    (tmp_path / "afile").write_text("x")
    assert_bad(["train", "--runs-dir", "afile", *TINY], tmp_path, "afile is a file")
    assert_bad(["train", "--runs-dir", "afile/sub", *TINY], tmp_path, "afile is a file")
    assert_bad(["train", "--set", "runs_dir=", *TINY], tmp_path, "runs_dir is empty")
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        try:
            assert_bad(["train", "--runs-dir", "ro/runs", *TINY], tmp_path, "not writable")
        finally:
            ro.chmod(0o700)


def test_usage_errors_are_one_line(tmp_path):
    for args in (["train", "--no-such-flag"], ["eval"], ["eval", "x", "--episodes", "many"],
                 ["nosuchcommand"], ["plot"], ["sweep", "--backend", "spark", "x.yaml"]):
        assert_bad(args, tmp_path)


def test_resume_with_a_broken_or_edited_config(tmp_path, tiny_run):
    (tmp_path / "list").mkdir()
    (tmp_path / "list" / "config.json").write_text("[1, 2]")
    assert_bad(["train", "--resume", "list"], tmp_path, "must be a mapping of keys, got list")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "config.json").write_bytes(b"\xff\xfe\x00")
    assert_bad(["train", "--resume", "bin"], tmp_path, "cannot read")
    (tmp_path / "algo").mkdir()
    d = json.loads((tiny_run / "config.json").read_text())
    (tmp_path / "algo" / "config.json").write_text(json.dumps({**d, "algo": "sac"}))
    assert_bad(["train", "--resume", "algo"], tmp_path, "unknown algorithm 'sac'")
    (tmp_path / "lr").mkdir()
    (tmp_path / "lr" / "config.json").write_text(json.dumps({**d, "lr": -1}))
    assert_bad(["train", "--resume", "lr"], tmp_path, "lr must be in (0, 1]")
    assert_bad(["train", "--resume", "nowhere"], tmp_path, "no such run folder")
    for name, change in (("env", {"env_id": "Acrobot-v1"}), ("noclip", {"algo": "ppo-noclip"})):
        shutil.copytree(tiny_run, tmp_path / name)  # a finished run, marked stopped, edited
        (tmp_path / name / "config.json").write_text(json.dumps({**d, **change}))
        status = json.loads((tmp_path / name / "status.json").read_text())
        (tmp_path / name / "status.json").write_text(json.dumps({**status, "status": "stopped"}))
        line = assert_bad(["train", "--resume", name], tmp_path,
                          "config.json differs from the checkpoint's config")
        assert list(change)[0] in line and statuses(tmp_path / name) == ["stopped"]
    assert_bad(["train", "--resume", str(tiny_run), "--seed", "3"], tmp_path,
               "--resume takes the run's own config")


def test_checkpoint_config_must_match_config_json():
    """check_checkpoint_config: what resume must call once the checkpoint is loaded."""
    cfg = make_config("ppo", "CartPole-v1")
    check_checkpoint_config(dict(config_to_dict(cfg), runs_dir="elsewhere"), cfg, "run")
    for change in ({"env_id": "Acrobot-v1"}, {"algo": "ppo-noclip"}, {"hidden_sizes": [32]}):
        with pytest.raises(ConfigError, match="differs from the checkpoint's config") as e:
            check_checkpoint_config({**config_to_dict(cfg), **change}, cfg, "run")
        assert list(change)[0] in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="holds no config"):
        check_checkpoint_config(None, cfg, "run")


def test_eval_refuses_an_env_with_other_spaces(tmp_path, tiny_run):
    assert_bad(["eval", str(tiny_run), "--env", "Acrobot-v1"], tmp_path,
               "trained on CartPole-v1 (box observations of size 4)", "size 6")
    assert_bad(["eval", str(tiny_run), "--env", "Pendulum-v1"], tmp_path,
               "observations of size 3")
    assert_bad(["eval", str(tiny_run), "--env", "MountainCar-v0"], tmp_path,
               "size 2")
    assert_bad(["eval", str(tiny_run), "--env", ""], tmp_path, "--env is empty")
    assert_bad(["eval", str(tiny_run), "--seed", "-1"], tmp_path, "--seed must be in")
    assert_bad(["eval", str(tiny_run), "--seed", str(2**40)], tmp_path, "--seed must be in")
    assert_bad(["eval", str(tiny_run), "--episodes", "0"], tmp_path, "--episodes must be in")
    assert_bad(["eval", str(tiny_run), "--episodes", "10000000"], tmp_path,
               "--episodes must be in [1, 10,000]")
    rc, out, err = run_cli(["eval", str(tiny_run), "--episodes", "2"], tmp_path)
    assert rc == 0 and "greedy over 2 episodes" in out, err


def test_plot_of_empty_or_foreign_metrics_and_bad_out(tmp_path, tiny_run):
    for name, text, fragment in (("empty", "", "has no rows yet"),
                                 ("header", "iteration,global_step\n", "has no rows yet"),
                                 ("nocols", "a,b\n1,2\n", "has no column global_step"),
                                 ("text", "global_step,ep_return_mean\nx,y\n", "not a number")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.csv").write_text(text)
        assert_bad(["plot", name], tmp_path, fragment)
        assert not (tmp_path / name / "learning_curve.png").exists()
    assert_bad(["plot", str(tiny_run), "--out", "curve.xyz"], tmp_path,
               "the extension must be one of")
    assert_bad(["plot", str(tiny_run), "--out", "noext"], tmp_path, "the extension must be")
    (tmp_path / "afile").write_text("x")
    assert_bad(["plot", str(tiny_run), "--out", "afile/c.png"], tmp_path, "is not a folder")
    (tmp_path / "d.png").mkdir()
    assert_bad(["plot", str(tiny_run), "--out", "d.png"], tmp_path, "it is a folder")
    rc, out, err = run_cli(["plot", str(tiny_run), "--out", "new/sub/c.svg"], tmp_path)
    assert rc == 0 and (tmp_path / "new" / "sub" / "c.svg").is_file(), err


def test_reproduce_out_that_is_a_file(tmp_path):
    (tmp_path / "afile").write_text("x")
    assert_bad(["reproduce", "--only", "000.ex9.1", "--out", "afile"], tmp_path, "afile is a file")
    assert not (tmp_path / "afile" / "REPORT.md").exists()


def test_sweep_bad_folders_specs_and_sizes(tmp_path):
    spec = tmp_path / "s.yaml"
    bomb = ('a: &a ["x","x","x","x","x","x","x","x","x"]\n'
            "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
            "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
            "seeds: *e\nalgos: [ppo]\nenvs: [CartPole-v1]\n")
    spec.write_text(bomb)
    assert_bad(["sweep", "s.yaml", "--dry-run"], tmp_path, "YAML aliases")
    spec.write_text("seeds: 0..2999999\nalgos: [ppo]\nenvs: [CartPole-v1]\n")
    assert_bad(["sweep", "s.yaml", "--dry-run"], tmp_path, "3,000,000 seeds", "20,000")
    spec.write_text("seeds: 0..99\nalgos: [ppo, trpo]\nenvs: [CartPole-v1]\n"
                    "grid: {lr: [0.1, 0.2, 0.3, 0.4, 0.5], clip_eps: [0.1, 0.2, 0.3, 0.4, "
                    "0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9, "
                    "2.0, 2.1]}\n")
    assert_bad(["sweep", "s.yaml", "--dry-run"], tmp_path, "more than 20,000 trials")
    spec.write_text("seeds: [1]\nalgos: [ppo]\nenvs: [CartPole-v1]\n"
                    "grid: {" + ", ".join(f"k{i}: [1, 2]" for i in range(40)) + "}\n")
    assert_bad(["sweep", "s.yaml", "--dry-run"], tmp_path, "the grid has more than 20,000")
    keys = ["lr", "clip_eps", "vf_coef", "ent_coef", "gamma", "gae_lambda", "max_grad_norm",
            "adam_eps", "obs_clip", "reward_clip"]
    spec.write_text("seeds: [1]\nalgos: [ppo]\nenvs: [CartPole-v1]\ngrid: {"
                    + ", ".join(f"{k}: [0.123456789012345]" for k in keys) + "}\n")
    assert_bad(["sweep", "s.yaml", "--dry-run"], tmp_path, "characters long (at most 200)")
    spec.write_text("seeds: [-1]\nalgos: [ppo]\nenvs: [CartPole-v1]\n")
    assert_bad(["sweep", "s.yaml", "--dry-run"], tmp_path, "seed -1 is outside")
    spec.write_text("seeds: [1]\nalgos: [ppo]\nenvs: {CartPole-v1: {threshold: .nan}}\n")
    assert_bad(["sweep", "s.yaml", "--dry-run"], tmp_path, "threshold must be a finite")
    spec.write_text("seeds: [1]\nalgos: [ppo]\nenvs: [CartPole-v1]\ncommon: {lr: .inf}\n")
    assert_bad(["sweep", "s.yaml", "--dry-run"], tmp_path, "lr must be a finite number")
    spec.write_bytes(b"\xff\xfe" * 10)
    assert_bad(["sweep", "s.yaml", "--dry-run"], tmp_path, "not UTF-8")
    (tmp_path / "afile").write_text("x")
    spec.write_text("seeds: [1]\nalgos: [ppo]\nenvs: [CartPole-v1]\n")
    assert_bad(["sweep", "s.yaml", "--out", "afile"], tmp_path, "afile is a file")
    assert_bad(["sweep", "s.yaml", "--workers", "100000"], tmp_path, "--workers must be in")
    for name, text, fragment in (("malformed", "{bad", "cannot read"),
                                 ("alist", "[1, 2]", "must hold a JSON object, got list"),
                                 ("noid", '{"name": "x", "trials": [{"id": 5}]}',
                                  "trials[0].id must be str"),
                                 ("escape", json.dumps({"name": "x", "trials": [{
                                     "id": "../../x", "algo": "ppo", "env_id": "CartPole-v1",
                                     "seed": 1, "variant": "ppo", "grid": {}, "config": {}}]}),
                                  "is not a plain folder name")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "sweep.json").write_text(text)
        assert_bad(["sweep", "--resume", name, "--dry-run"], tmp_path, fragment)
        assert_bad(["sweep", "--resume", name], tmp_path, fragment)
        assert_bad(["report", name], tmp_path, fragment)
    assert_bad(["report", "malformed", "--boot", "10000000000"], tmp_path, "--boot must be in")
    assert_bad(["report", "malformed", "--threshold", "CartPole-v1=nan"], tmp_path,
               "a finite number")


# ----- nothing hangs ----------------------------------------------------------------------------
def test_evaluation_caps_episodes_of_an_env_without_a_time_limit(tmp_path):
    """CliffWalking-v1 has no max_episode_steps: a greedy policy that never reaches the goal
    used to loop for ever in the first evaluation. In a subprocess with a timeout, so that a
    regression fails instead of hanging the suite."""
    code = (
        "import torch\n"
        "from trustrl.records.agent import Agent\n"
        "from trustrl.envs.make import check_env\n"
        "from trustrl.collect.evaluate import evaluate\n"
        "from trustrl.nets.policies import ActorCritic\n"
        "spec = check_env('CliffWalking-v1')\n"
        "pol = ActorCritic(spec.obs_dim, spec.action, (4,), 'tanh', False, 0.0, True)\n"
        "with torch.no_grad():\n"
        "    pol.policy_head.weight.zero_(); pol.policy_head.bias.copy_(torch.tensor("
        "[5.0, 0, 0, 0]))\n"  # always 'up': never terminates
        "r = evaluate(Agent(pol, spec, None, 'cpu'), 'CliffWalking-v1', 3, max_steps=37)\n"
        "print(r.tolist())\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.strip()) == [-37.0, -37.0, -37.0]


def test_training_on_an_env_without_a_time_limit_finishes(tmp_path):
    rc, out, err = run_cli(["train", "--env", "CliffWalking-v1", "--runs-dir", "runs", *TINY,
                            "--set", "eval_every=1", "--set", "eval_max_steps=7"], tmp_path)
    assert rc == 0, err
    (run,) = (tmp_path / "runs").iterdir()
    # the goal is 13 steps away: cut after 7 steps of -1 (or -100 off the cliff), every return
    # is -7 - 99 k; the default cap (10,000) would give returns of -10,000 or less
    for f in ("eval.json", "eval_initial.json"):
        returns = json.loads((run / f).read_text())["returns"]
        assert all(-700 <= r <= -7 and (r + 7) % 99 == 0 for r in returns), (f, returns)
    assert json.loads((run / "config.json").read_text())["eval_max_steps"] == 7
    rc, out, err = run_cli(["eval", str(run), "--episodes", "2"], tmp_path)  # the run's cap
    assert rc == 0 and "CliffWalking-v1 greedy over 2 episodes" in out, err


def test_time_limited_envs_keep_their_own_limit(tmp_path, tiny_run):
    """eval_max_steps only cuts envs with no limit: CartPole's 500 stands even with a cap of 1
    (the tiny run's untrained policy is checked to last more than one step)."""
    from trustrl.collect.evaluate import evaluate
    from trustrl.records.agent import Agent

    agent = Agent.load(tiny_run)
    capped = evaluate(agent, "CartPole-v1", 3, max_steps=1)
    assert (capped > 1).all() and (capped == evaluate(agent, "CartPole-v1", 3)).all()


# ----- property-based: every config key, hostile values -----------------------------------------
def _keys() -> list[tuple[str, str, typing.Any]]:
    """(algo, key, type) for every config key of every algorithm (shared keys once)."""
    out, seen = [], set()
    for algo, cls in CONFIGS.items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name not in seen:
                seen.add(f.name)
                out.append((algo, f.name, hints[f.name]))
    return out


KEYS = _keys()
WRONG = ["true", "false", "yes", "abc", "[1, 2]", "1,2", "", " ", "None", "0x10", "1.5", "{}",
         "'1'", "1 2", "\x00", "1e", "--", "inf", "-inf", "nan", "NaN", "1e999", "-1e999",
         "0", "-0", "0.0", "-1", "-1e-300", "1e-300", "5e-324"]


def _base(tp: typing.Any) -> typing.Any:
    """X for Optional[X] (X | None), else tp itself."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return next(a for a in typing.get_args(tp) if a is not type(None))
    return tp


@st.composite
def hostile_set(draw) -> tuple[str, str, str]:
    """(algo, key, value string) for --set: non-finite, negative, zero, tiny, huge (past the
    key's bound where it has one, so no valid value asks for a long run) or wrong-typed."""
    algo, key, tp = draw(st.sampled_from(KEYS))
    base = _base(tp)
    hi = RANGES[key].hi if key in RANGES else None
    if base is int:
        huge = st.integers(int(hi) + 1 if hi is not None else 10**7, 10**40)
    elif base is float:
        huge = st.floats(hi * 1.5 + 1 if hi is not None else 1e10, 1e300)
    else:
        huge = st.integers(10**7, 10**40)
    value = draw(st.one_of(
        st.sampled_from(WRONG),
        st.sampled_from(["inf", "-inf", "nan", "+inf", "-nan", "1e999", "Infinity"]),
        st.integers(-10**40, -1),
        st.floats(-1e300, -1e-300),
        huge,
        st.text(max_size=12),
        st.lists(st.integers(-5, 10**5), min_size=0, max_size=4).map(
            lambda xs: ",".join(map(str, xs))),
    ))
    return algo, key, str(value)


@st.composite
def hostile_file_value(draw) -> tuple[str, str, typing.Any]:
    """(algo, key, value) for a JSON config file, where values keep their JSON type."""
    algo, key, tp = draw(st.sampled_from(KEYS))
    value = draw(st.one_of(
        st.booleans(), st.none(), st.integers(-2**70, 2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=8), st.lists(st.integers(-3, 2**40), max_size=3),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    ))
    return algo, key, value


TALLY = {"tried": 0, "ran": 0, "refused": 0}


def assert_within_rules(saved: dict) -> None:
    """What a run accepted obeys the documented rules: the type of each key (a bool is not a
    number), numbers finite and inside RANGES. A value let through unchecked (nan for a key
    the run happens not to use, say) fails here even when the run finished."""
    cls = CONFIGS[saved["algo"]]
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        v, tp = saved[f.name], _base(hints[f.name])
        if v is None:
            continue
        if tp in (int, float):
            assert not isinstance(v, bool) and isinstance(v, (int, float)), (f.name, v)
            assert math.isfinite(v), (f.name, v)
            if tp is int:
                assert isinstance(v, int), (f.name, v)
            if f.name in RANGES:
                assert RANGES[f.name].holds(v), (f.name, v)


def check_case(algo: str, extra: list[str], key: str, file_values: dict | None = None) -> None:
    """Run one case in a fresh folder: a finished run, or exit 2 with one line and no run
    folder; never a traceback, never a folder left 'running'. file_values go to a JSON
    --config file."""
    with tempfile.TemporaryDirectory() as d:
        cwd = Path(d)
        (cwd / "afile").write_text("x")
        runs = [] if key == "runs_dir" else ["--runs-dir", "runs"]
        extra = [a.replace("@CWD", d) for a in extra]
        if file_values is not None:
            values = {k: v.replace("@CWD", d) if isinstance(v, str) else v
                      for k, v in file_values.items()}
            (cwd / "c.json").write_text(json.dumps(values))
            extra += ["--config", "c.json"]
        TALLY["tried"] += 1
        rc, out, err = run_cli(["train", algo, *runs, *TINY, *extra], cwd)
        assert "Traceback" not in err
        assert "running" not in statuses(cwd)
        if rc == 0:
            TALLY["ran"] += 1
            assert "run:" in out and set(statuses(cwd)) == {"finished"}, (out, err)
            for saved in cwd.rglob("config.json"):
                assert_within_rules(json.loads(saved.read_text()))
        else:
            TALLY["refused"] += 1
            assert_one_line_error(rc, err)
            assert statuses(cwd) == [], "a refused config left a run folder"


FUZZ = settings(max_examples=int(os.environ.get("TRUSTRL_FUZZ_EXAMPLES", "150")), deadline=None,
                derandomize=os.environ.get("TRUSTRL_FUZZ_RANDOM") is None,
                suppress_health_check=[HealthCheck.too_slow], database=None)


def test_every_config_key_with_hostile_values_set_and_in_a_file():
    @FUZZ
    @given(hostile_set())
    def by_set(case):
        algo, key, value = case
        if key == "runs_dir" and value.strip() and not value.startswith("afile"):
            value = "@CWD/" + value  # stay inside the case's folder
        check_case(algo, ["--set", f"{key}={value}"], key)

    @FUZZ
    @given(hostile_file_value())
    def in_file(case):
        algo, key, value = case
        if key == "runs_dir" and isinstance(value, str) and value.strip():
            value = "@CWD/" + value
        check_case(algo, [], key, {key: value})

    by_set()
    in_file()
    print(f"\nbad-input fuzz: {TALLY['tried']} cases tried: {TALLY['ran']} valid runs "
          f"finished, {TALLY['refused']} refused with one line and exit 2, 0 tracebacks")
    assert TALLY["refused"] > TALLY["tried"] // 2 and TALLY["ran"] > 0


def test_rlhf_seed_and_runs_dir_are_checked(tmp_path):
    (tmp_path / "afile").write_text("x")
    assert_bad(["rlhf", "sft", "--seed", "-1", "--runs-dir", str(tmp_path / "r")], tmp_path,
               "seed")
    assert_bad(["rlhf", "sft", "--seed", str(2**40), "--runs-dir", str(tmp_path / "r")],
               tmp_path, "seed")
    assert_bad(["rlhf", "sft", "--runs-dir", str(tmp_path / "afile")], tmp_path, "is a file")
    assert not (tmp_path / "r").exists()


def test_a_sweep_folder_whose_sweep_json_is_a_list(tmp_path):
    from trustrl.sweep.folder import SweepFolder
    from trustrl.util.errors import TrustrlError

    (tmp_path / "sweep.json").write_text("[1, 2]")
    with pytest.raises(TrustrlError):
        SweepFolder.open(tmp_path)
