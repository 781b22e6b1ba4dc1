"""Env return values and sizes are checked before a run folder exists (issue 52, point 4):
reset and the first step return what Gymnasium 1.x promises (types, shapes, finite), an
observation space with no elements is refused, a batch of huge observations is checked
against the memory available, and `--env module:Class` with no env_kwargs makes the class
(it went to gym.make before). Each a one-line EnvError naming the env, nothing on disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import trustrl
from trustrl.settings.config import make_config
from trustrl.util.errors import EnvError


class Base(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def obs(self):
        return np.zeros(3, np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return self.obs(), {}

    def step(self, action):
        return self.obs(), 1.0, False, False, {}


class ObsOnlyReset(Base):
    def reset(self, seed=None, options=None):
        return self.obs()


class StringReward(Base):
    def step(self, action):
        return self.obs(), "1.0", False, False, {}


class NaNReward(Base):
    def step(self, action):
        return self.obs(), float("nan"), False, False, {}


class TextTerminated(Base):
    def step(self, action):
        return self.obs(), 1.0, "no", False, {}


class FourTuple(Base):
    def step(self, action):
        return self.obs(), 1.0, False, {}


class EmptyBox(Base):
    observation_space = gym.spaces.Box(-1.0, 1.0, (0,), np.float32)

    def obs(self):
        return np.zeros(0, np.float32)


class WrongShape(Base):
    def obs(self):
        return np.zeros(5, np.float32)


class NaNObs(Base):
    def obs(self):
        return np.full(3, np.nan, np.float32)


class Huge(Base):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2_000_000,), np.float32)

    def obs(self):
        return np.zeros(2_000_000, np.float32)


def cfg(env, runs: Path):
    c = make_config("ppo", "CartPole-v1", flags=dict(
        total_steps=64, num_envs=1, num_steps=64, minibatch_size=32, eval_every=0,
        eval_episodes=1, tensorboard=False, vector="sync", runs_dir=str(runs)))
    c.env_id = env
    return c


@pytest.mark.parametrize("env, needle", [
    (ObsOnlyReset, "reset returned"), (StringReward, "reward '1.0'"),
    (NaNReward, "non-finite reward"), (TextTerminated, "terminated 'no'"),
    (FourTuple, "step returned"), (EmptyBox, "no elements"),
    (WrongShape, "shape (5,)"), (NaNObs, "non-finite observation"),
])
def test_bad_return_values_are_one_line_naming_the_env(env, needle, tmp_path):
    with pytest.raises(EnvError, match=env.__name__) as e:
        trustrl.train(cfg(env, tmp_path / "runs"))
    assert needle in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_huge_observations_are_checked_against_the_memory(tmp_path, monkeypatch):
    from trustrl.envs import make

    monkeypatch.setattr(make, "available_memory", lambda: 2**30)
    with pytest.raises(EnvError, match=r"2,000,000 numbers need about 1\.9 GiB"):
        trustrl.train(cfg(Huge, tmp_path / "runs"))
    assert not (tmp_path / "runs").exists()


def test_env_module_class_without_kwargs_from_the_cli(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), env.get("PYTHONPATH", "")])

    def run(target):
        return subprocess.run(
            [sys.executable, "-m", "trustrl", "train", "--env", target, "--total-steps", "64",
             "--set", "num_steps=64", "--set", "num_envs=1", "--set", "eval_every=0",
             "--vector", "sync", "--runs-dir", "runs", "--quiet"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    proc = run("test_env_checks:ObsOnlyReset")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "reset returned" in lines[0], proc.stderr
    proc = run("test_env_checks:Base")  # the README's form: a class, no env_kwargs
    assert proc.returncode == 0, proc.stderr[-1500:]


class Changing(Base):
    """An env whose code changed between a run and its resume (`broken` set by the test)."""

    broken = False

    def step(self, action):
        return self.obs(), float("nan") if Changing.broken else 1.0, False, False, {}


def _stopped_run(tmp_path: Path, env) -> Path:
    c = cfg(env, tmp_path / "runs")
    c.total_steps, c.checkpoint_every = 128, 1
    trustrl.train(c, callback=lambda row: row["iteration"] < 1)  # stopped after iteration 1
    (run,) = (tmp_path / "runs").iterdir()
    return run


def _files(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*"))
            if p.is_file() and p.name != ".trustrl.lock"}  # the lock: who holds the run now


def test_a_resume_checks_the_memory_and_the_env_first(tmp_path, monkeypatch):
    """The batch checked against the memory available now, and the env's first return values,
    before a resume touches the run: one line, the folder unchanged (status "stopped")."""
    from trustrl.envs import make

    run = _stopped_run(tmp_path / "a", Base)
    before = _files(run)
    monkeypatch.setattr(make, "available_memory", lambda: 1000)
    with pytest.raises(EnvError, match=r"need about .* GiB for a batch of 64") as e:
        trustrl.resume(run)
    assert "\n" not in str(e.value) and _files(run) == before
    monkeypatch.undo()

    run = _stopped_run(tmp_path / "b", Changing)
    before = _files(run)
    monkeypatch.setattr(Changing, "broken", True)
    with pytest.raises(EnvError, match=r"Changing.*non-finite reward"):
        trustrl.resume(run)
    assert _files(run) == before
    monkeypatch.setattr(Changing, "broken", False)
    trustrl.resume(run)
    assert json.loads((run / "status.json").read_text())["status"] == "finished"
