"""Running sweeps: local and Ray backends give the same numbers bit for bit on CPU; a sweep
killed mid-way (Ctrl-C, SIGKILL of everything, SIGKILL of one worker) loses no finished trial,
repeats none, and its resumed trials equal never-interrupted ones; a failing trial is recorded
and the others go on."""

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
from trustrl.settings.config import config_from_dict
from trustrl.sweep import runner
from trustrl.sweep.folder import SweepFolder
from trustrl.sweep.report import write_report
from trustrl.training.train import train
from trustrl.util.safeio import load_safe

TINY = ("common: {num_envs: 2, num_steps: 128, eval_every: 2, eval_episodes: 3, "
        "tensorboard: false}\n")


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return [{k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in csv.DictReader(f)]


def _numbers(run: Path) -> dict[str, object]:
    """Everything a run computed, without the timing columns."""
    agent = load_safe(run / "agent.pt")
    return {"metrics": _rows(run / "metrics.csv"), "episodes": _rows(run / "episodes.csv"),
            "eval": json.loads((run / "eval.json").read_text()),
            "eval_initial": json.loads((run / "eval_initial.json").read_text()),
            "weights": {k: v.tolist() for k, v in agent["policy"].items()}}


def _trial_numbers(folder: SweepFolder) -> dict[str, dict[str, object]]:
    out = {}
    for t in folder.trials:
        res = folder.result(t)
        assert res is not None and res["status"] == "finished", (t.id, res)
        out[t.id] = _numbers(folder.trial_dir(t) / res["run"])
    return out


def _spec(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(text)
    return p


EQUALITY_SPEC = ("seeds: [1, 2]\ntotal_steps: 1024\n"
                 "algos: {ppo: {update_epochs: 4}, trpo: {vf_epochs: 2}}\n"
                 "envs: [CartPole-v1]\n" + TINY)


def _local_sweep(tmp_path: Path) -> tuple[SweepFolder, dict[str, dict[str, object]]]:
    local = runner.start(_spec(tmp_path, EQUALITY_SPEC), tmp_path / "local")
    out = runner.run(local, "local", workers=2)
    assert (out.finished, out.failed) == (4, 0)
    return local, _trial_numbers(local)


def test_local_backend_equals_training_in_process(tmp_path):
    local, numbers = _local_sweep(tmp_path)
    t = local.trials[-1]  # a TRPO trial; the pool (spawned workers) changes nothing
    direct = train(config_from_dict(dict(t.config, runs_dir=str(tmp_path / "direct"))))
    assert _numbers(direct.run_dir) == numbers[t.id]


@pytest.mark.slow  # 13 to 22 s measured: a local Ray instance starts in several seconds
def test_local_and_ray_backends_give_identical_results(tmp_path):
    ray = pytest.importorskip("ray")
    _, numbers = _local_sweep(tmp_path)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        remote = runner.start(tmp_path / "spec.yaml", tmp_path / "ray")
        out = runner.run(remote, "ray")
    finally:
        ray.shutdown()
    assert (out.finished, out.failed) == (4, 0)
    assert _trial_numbers(remote) == numbers


def _start_cli(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "trustrl", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _wait_for(cond, proc: subprocess.Popen[str], timeout: float = 240.0) -> None:
    t0 = time.monotonic()
    while not cond():
        if proc.poll() is not None:
            raise AssertionError(f"sweep ended early: {proc.communicate()}")
        if time.monotonic() - t0 > timeout:
            proc.kill()
            raise AssertionError("timed out waiting for the sweep")
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _checkpoint_iteration(folder: SweepFolder, trial) -> int:
    for status in folder.trial_dir(trial).glob("*/status.json"):
        try:
            return int(json.loads(status.read_text())["iteration"])
        except (ValueError, KeyError, OSError):
            return 0
    return 0


def _attempts(folder: SweepFolder, trial) -> list[dict[str, object]]:
    f = folder.trial_dir(trial) / "attempts.jsonl"
    return [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []


# a checkpoint (and status.json's iteration) every iteration: by time (every 10 s) the first
# after the first iteration can be the last one's on a fast machine, and the kill then finds
# the second trial finished
KILL_SPEC = ("seeds: [1, 2]\ntotal_steps: 10240\n"
             "algos: {ppo: {update_epochs: 4, checkpoint_every: 1}}\n"
             "envs: [CartPole-v1]\n" + TINY)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm-driver", "sigkill-all"])
def test_killed_sweep_resumes_without_losing_or_repeating_trials(tmp_path, cli_env, how):
    """Ctrl-C to the process group, SIGTERM to the driver alone (its workers must not outlive
    it) or SIGKILL of everything."""
    spec = _spec(tmp_path, KILL_SPEC)
    proc = _start_cli(["sweep", str(spec), "--out", "sw", "--workers", "1"], tmp_path, cli_env)
    folder_path = tmp_path / "sw"
    _wait_for(lambda: (folder_path / "sweep.json").exists(), proc)
    folder = SweepFolder.open(folder_path)
    first, second = folder.trials
    _wait_for(lambda: folder.status(first) == "finished"
              and _checkpoint_iteration(folder, second) >= 3, proc)
    if how == "sigterm-driver":
        os.kill(proc.pid, signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGINT if how == "ctrl-c" else signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    if how == "ctrl-c":
        assert proc.returncode == 130 and "--resume" in err, err
    if how == "sigterm-driver":
        assert proc.returncode == 143 and "SIGTERM" in err and "--resume" in err, err
        worker = int(_attempts(folder, second)[0]["pid"])
        assert not _alive(worker), "the sweep's worker outlived its driver"
    assert folder.status(second) == "pending"
    finished_result = (folder.trial_dir(first) / "result.json").read_text()

    p = subprocess.run([sys.executable, "-m", "trustrl", "sweep", "--resume", "sw",
                        "--workers", "1"], cwd=tmp_path, env=cli_env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "1 of 2 trials to run" in p.stdout
    assert (folder.trial_dir(first) / "result.json").read_text() == finished_result
    assert [a["mode"] for a in _attempts(folder, first)] == ["fresh"]
    modes = _attempts(folder, second)
    assert [a["mode"] for a in modes] == ["fresh", "resume"]
    assert int(modes[1]["from_iteration"]) >= 3
    assert len([d for d in folder.trial_dir(second).iterdir() if d.is_dir()]) == 1
    direct = train(config_from_dict(dict(second.config, runs_dir=str(tmp_path / "direct"))))
    assert _trial_numbers(folder)[second.id] == _numbers(direct.run_dir)


@pytest.mark.slow
def test_a_killed_worker_is_replaced_and_its_trial_continues(tmp_path, cli_env):
    spec = _spec(tmp_path, KILL_SPEC)
    proc = _start_cli(["sweep", str(spec), "--out", "sw", "--workers", "1"], tmp_path, cli_env)
    _wait_for(lambda: (tmp_path / "sw" / "sweep.json").exists(), proc)
    folder = SweepFolder.open(tmp_path / "sw")
    first = folder.trials[0]
    _wait_for(lambda: _checkpoint_iteration(folder, first) >= 3, proc)
    os.kill(int(_attempts(folder, first)[0]["pid"]), signal.SIGKILL)  # the worker only
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "2 finished, 0 failed" in out
    assert [a["mode"] for a in _attempts(folder, first)] == ["fresh", "resume"]
    assert [a["mode"] for a in _attempts(folder, folder.trials[1])] == ["fresh"]
    direct = train(config_from_dict(dict(first.config, runs_dir=str(tmp_path / "direct"))))
    assert _trial_numbers(folder)[first.id] == _numbers(direct.run_dir)


def test_a_failing_trial_is_recorded_and_the_others_finish(tmp_path):
    spec = _spec(tmp_path, "seeds: [1]\ntotal_steps: 2048\nalgos: [ppo]\n"
                 "envs: ['helper_envs:NaNCartPole-v0', CartPole-v1]\n" + TINY)
    folder = runner.start(spec, tmp_path / "sw")
    out = runner.run(folder, "local", workers=2)
    assert (out.finished, out.failed) == (1, 1)
    bad, good = folder.trials
    res = folder.result(bad)
    assert res["status"] == "failed" and res["error"].startswith("NonFiniteError: non-finite")
    assert "Traceback" in res["traceback"]
    assert folder.status(good) == "finished"
    (log,) = [json.loads(x) for x in (folder.path / "invocations.jsonl").read_text().splitlines()]
    assert (log["ended"], log["finished"], log["failed"], log["to_run"]) == ("completed", 1, 1, 2)
    assert folder.pending() == []
    assert [t.id for t in folder.pending(retry_failed=True)] == [bad.id]
    text = write_report(folder.path, folder.path / "report", n_boot=200).read_text()
    assert "1 finished, 1 failed" in text and "NonFiniteError" in text
