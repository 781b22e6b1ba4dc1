"""The CLI the way a user runs it: subprocesses, exit codes, one-line errors."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trustrl.records.runs import TIMING_COLUMNS

SMALL = ["--set", "num_envs=2", "--set", "num_steps=128", "--set", "update_epochs=4",
         "--set", "eval_every=2", "--set", "eval_episodes=3", "--set", "tensorboard=false"]


def run(args, env, cwd, timeout=300):
    return subprocess.run([sys.executable, "-m", "trustrl", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return [{k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in csv.DictReader(f)]


def only_run(runs: Path) -> Path:
    (r,) = list(runs.iterdir())
    return r


def test_train_eval_plot_end_to_end(tmp_path, cli_env):
    p = run(["train", "--total-steps", "2048", "--seed", "3", "--runs-dir", "runs", *SMALL],
            cli_env, tmp_path)
    assert p.returncode == 0, p.stderr
    rd = only_run(tmp_path / "runs")
    assert rd.name.startswith("CartPole-v1__ppo__3__")
    assert f"run: {rd.relative_to(tmp_path)}" in p.stdout or str(rd) in p.stdout
    assert "greedy evaluation over 3 episodes" in p.stdout
    assert len(rows(rd / "metrics.csv")) == 8

    e = run(["eval", str(rd), "--episodes", "4"], cli_env, tmp_path)
    assert e.returncode == 0, e.stderr
    assert "greedy over 4 episodes" in e.stdout
    s = run(["eval", str(rd), "--episodes", "2", "--stochastic"], cli_env, tmp_path)
    assert s.returncode == 0 and "sampled over 2 episodes" in s.stdout
    both = run(["eval", str(rd), "--stochastic", "--greedy"], cli_env, tmp_path)
    assert both.returncode == 2 and "not allowed with" in both.stderr

    p2 = run(["train", "--total-steps", "1024", "--seed", "4", "--runs-dir", "runs", *SMALL],
             cli_env, tmp_path)
    assert p2.returncode == 0, p2.stderr
    runs = sorted((tmp_path / "runs").iterdir())
    out = tmp_path / "both.png"
    pl = run(["plot", *map(str, runs), "--out", str(out)], cli_env, tmp_path)
    assert pl.returncode == 0, pl.stderr
    assert out.stat().st_size > 10_000 and out.read_bytes()[:4] == b"\x89PNG"


def test_config_file_and_set_precedence(tmp_path, cli_env):
    (tmp_path / "c.toml").write_text('update_epochs = 3\nlr = 0.002\nseed = 7\n')
    p = run(["train", "--config", "c.toml", "--set", "lr=0.0005", "--total-steps", "512",
             "--runs-dir", "runs", "--set", "num_envs=2", "--set", "eval_every=0",
             "--set", "eval_episodes=1", "--set", "tensorboard=false"], cli_env, tmp_path)
    assert p.returncode == 0, p.stderr
    cfg = json.loads((only_run(tmp_path / "runs") / "config.json").read_text())
    assert cfg["update_epochs"] == 3 and cfg["lr"] == 0.0005 and cfg["seed"] == 7
    assert cfg["minibatch_size"] == 64  # from the CartPole preset


def test_help_lists_every_config_field_with_its_docstring(tmp_path, cli_env):
    from dataclasses import fields

    from trustrl.settings.config import PPOConfig, field_docs

    p = run(["train", "--help"], cli_env, tmp_path)
    assert p.returncode == 0
    docs = field_docs(PPOConfig)
    for f in fields(PPOConfig):
        assert f.name in p.stdout and docs[f.name], f.name
    assert "Clip range epsilon" in p.stdout and "presets" in p.stdout


BAD = [
    (["--env", "CartPol-v1"], "did you mean CartPole-v1"),
    (["--env", "NoSuchEnv-v0"], "unknown env id"),
    (["--env", "helper_envs:TextObsToy-v0"], "observation space Text"),
    (["--total-steps", "0"], "total_steps must be in [1, 1,000,000,000,000], got 0"),
    (["--total-steps", "-100"], "total_steps must be in [1, "),
    (["--total-steps", "abc"], "bad value for total_steps"),
    (["--set", "update_epochs=0"], "update_epochs must be in [1, 10,000], got 0"),
    (["--set", "clip_eps=0"], "clip_eps must be in (0, 10]"),
    (["--set", "clip_eps=-0.2"], "clip_eps must be in (0, 10]"),
    (["--set", "lr=0"], "lr must be in (0, 1], got 0"),
    (["--set", "lr=-1e-3"], "lr must be in (0, 1], got -0.001"),
    (["--set", "minibatch_size=100000"], "larger than the batch"),
    (["--set", "no_such_key=1"], "unknown config key 'no_such_key'"),
    (["--set", "clip_epsilon=0.1"], "did you mean clip_eps"),
    (["--set", "lr"], "expects key=value"),
    (["--config", "missing.toml"], "config file not found"),
    (["nosuchalgo"], "unknown algorithm"),
    (["--resume", "no/such/run"], "--resume takes the run's own config"),  # with --runs-dir
    (["trpo", "--set", "max_kl=0"], "max_kl must be in (0, 10], got 0"),
    (["npg", "--set", "max_kl=-0.01"], "max_kl must be in (0, 10]"),
    (["trpo", "--set", "cg_iters=0"], "cg_iters must be in [1, 1000], got 0"),
    (["trpo", "--set", "damping=-0.1"], "damping must be in [0, 1,000,000], got -0.1"),
    (["trpo", "--set", "backtrack_ratio=1"], "backtrack_ratio must be in (0, 1)"),
    (["trpo", "--set", "backtrack_ratio=0"], "backtrack_ratio must be in (0, 1)"),
    (["trpo", "--set", "shared_trunk=true"], "needs separate actor and critic"),
    (["ppo-penalty", "--set", "kl_target=0"], "kl_target must be in (0, 10], got 0"),
    (["ppo-penalty", "--set", "clip_eps=0"], "clip_eps must be in (0, 10]"),
    (["trpo", "--set", "update_epochs=3"], "unknown config key 'update_epochs'"),
]


@pytest.mark.parametrize("args,message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_one_line_nonzero_exit(tmp_path, cli_env, args, message):
    p = run(["train", "--runs-dir", "runs", *args], cli_env, tmp_path, timeout=60)
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("trustrl: error:") and message in lines[0], lines[0]
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_bad_config_file_contents(tmp_path, cli_env):
    (tmp_path / "bad.toml").write_text("lr = [unclosed\n")
    p = run(["train", "--config", "bad.toml"], cli_env, tmp_path, timeout=60)
    assert p.returncode == 2 and "cannot parse config file" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_eval_and_plot_bad_input(tmp_path, cli_env):
    for args, msg in ((["eval", "nowhere"], "no such run folder or agent file"),
                      (["plot", "nowhere"], "not a run folder")):
        p = run(args, cli_env, tmp_path, timeout=60)
        assert p.returncode == 2 and msg in p.stderr and "Traceback" not in p.stderr


def test_nan_observation_stops_with_env_and_step_and_keeps_run(tmp_path, cli_env):
    args = ["train", "--env", "helper_envs:NaNCartPole-v0", "--total-steps", "4096",
            "--runs-dir", "runs", *SMALL]
    p = run(args, cli_env, tmp_path)
    assert p.returncode == 2
    line = p.stderr.strip().splitlines()[-1]
    # each env instance turns NaN at its 700th step: global step 2 * 700 = 1400
    assert "non-finite observation from env 0 at global step 1400" in line, line
    rd = only_run(tmp_path / "runs")
    assert len(rows(rd / "metrics.csv")) == 5  # iterations 1..5 of 256 steps each
    assert (rd / "checkpoints" / "latest.pt").is_file()
    status = json.loads((rd / "status.json").read_text())
    assert status["status"] == "failed" and status["iteration"] == 5
    # resumable: it picks up at iteration 5 and meets the same NaN at the same step
    r = run(["train", "--resume", str(rd)], cli_env, tmp_path)
    assert r.returncode == 2 and "at global step 1400" in r.stderr
    assert len(rows(rd / "metrics.csv")) == 5


def test_killed_and_resumed_equals_uninterrupted(tmp_path, cli_env):
    # 48 iterations: the trainer appends its rows every LOG_FLUSH_SECS (0.25 s), so the run
    # must last a few of those for the kill to land in the middle
    args = ["--total-steps", "12288", "--seed", "5", *SMALL]
    full = run(["train", "--runs-dir", "full", *args], cli_env, tmp_path)
    assert full.returncode == 0, full.stderr

    proc = subprocess.Popen([sys.executable, "-m", "trustrl", "train", "--runs-dir", "cut",
                             *args], env=cli_env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    metrics = None
    while time.time() < deadline:
        found = list((tmp_path / "cut").glob("*/metrics.csv"))
        if found and len(found[0].read_text().splitlines()) >= 1 + 7:
            metrics = found[0]
            break
        time.sleep(0.02)
    assert metrics is not None, "training did not get going"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    cut = metrics.parent
    assert len(rows(cut / "metrics.csv")) < 48  # it really was stopped early
    r = run(["train", "--resume", str(cut)], cli_env, tmp_path)
    assert r.returncode == 0, r.stderr
    full_dir = only_run(tmp_path / "full")
    assert rows(cut / "metrics.csv") == rows(full_dir / "metrics.csv")
    assert rows(cut / "episodes.csv") == rows(full_dir / "episodes.csv")
    assert json.loads((cut / "eval.json").read_text())["returns"] == \
        json.loads((full_dir / "eval.json").read_text())["returns"]
