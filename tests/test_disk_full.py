"""A full disk (issue 52, point 4): at the start or in the middle of a run, one line and a
non-zero exit; the run, where one was made, marked "failed"; nothing already on disk damaged
(the checkpoint loads, metrics.csv holds every row up to it, so the run resumes once there is
room). On a small tmpfs where this process may mount one (root on Linux), else with ENOSPC
simulated in the writer."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import trustrl
from trustrl.settings.config import make_config
from trustrl.util.errors import RunError

# --preset none: no line on stderr but the error (auto at 4,096 steps says its budget rule)
ARGS = ["train", "--env", "CartPole-v1", "--preset", "none", "--total-steps", "4096",
        "--set", "num_envs=1",
        "--set", "num_steps=64", "--set", "tensorboard=false", "--vector", "sync", "--quiet"]


@pytest.fixture
def small_disk(tmp_path):
    """A 300 KiB tmpfs (skipped where it cannot be mounted)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if not sys.platform.startswith("linux") or os.geteuid() != 0 or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(mnt)],
            capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root on Linux)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def cli(args, cwd):
    return subprocess.run([sys.executable, "-m", "trustrl", *args], cwd=cwd,
                          env=dict(os.environ), capture_output=True, text=True, timeout=600)


def one_line(proc, *needles):
    # on an empty Numba cache the first compile of a kernel is announced ("compiling ...",
    # "compiled in ...") before the run goes on: progress, not the error
    lines = [line for line in proc.stderr.strip().splitlines()
             if not line.startswith(("trustrl: compiling ", "trustrl: compiled in "))]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith("trustrl: error: ") and "Traceback" not in proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def _fill(path: Path) -> None:
    try:
        with open(path, "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    except OSError as e:
        assert e.errno == errno.ENOSPC


def test_a_full_disk_at_the_start_leaves_no_half_made_run(small_disk, tmp_path):
    _fill(small_disk / "fill")
    one_line(cli([*ARGS, "--runs-dir", str(small_disk / "runs")], tmp_path),
             "No space left on device")
    runs = small_disk / "runs"
    assert not runs.exists() or not any(runs.iterdir())


def test_a_full_disk_mid_run_fails_it_and_damages_nothing(small_disk, tmp_path):
    proc = cli([*ARGS, "--runs-dir", str(small_disk / "runs")], tmp_path)
    one_line(proc, "No space left on device", "status 'failed'")
    (run,) = list((small_disk / "runs").iterdir())
    assert json.loads((run / "status.json").read_text())["status"] == "failed"
    # with room again (the folder moved to a bigger disk), it resumes from its checkpoint
    moved = tmp_path / run.name
    shutil.copytree(run, moved, ignore=shutil.ignore_patterns(".trustrl.lock"))
    res = trustrl.resume(moved)
    assert res.final_eval and (moved / "agent.pt").is_file()


def test_enospc_in_the_writer_is_one_line_and_marks_the_run_failed(tmp_path, monkeypatch):
    """The same without a tmpfs: the checkpoint write of iteration 3 fails with ENOSPC."""
    from trustrl.records import runs

    real = runs.RunDir.save_checkpoint
    calls = []

    def full(self, state):
        calls.append(state["iteration"])
        if state["iteration"] == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(self, state)

    monkeypatch.setattr(runs.RunDir, "save_checkpoint", full)
    cfg = make_config("ppo", "CartPole-v1", flags=dict(
        total_steps=5 * 64, num_envs=1, num_steps=64, minibatch_size=32, update_epochs=1,
        eval_every=0, eval_episodes=1, tensorboard=False, checkpoint_every=1, vector="sync",
        runs_dir=str(tmp_path / "runs")))
    with pytest.raises(OSError) as e:
        trustrl.train(cfg)
    run = e.value.run_dir
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "failed" and "No space left" in status["message"]
    monkeypatch.setattr(runs.RunDir, "save_checkpoint", real)
    res = trustrl.resume(run)  # from iteration 2: nothing lost, nothing damaged
    with open(run / "metrics.csv") as f:
        assert [int(line.split(",")[0]) for line in f.readlines()[1:]] == [1, 2, 3, 4, 5]
    assert res.final_eval


def test_enospc_at_the_start_leaves_no_half_made_run(tmp_path, monkeypatch):
    from trustrl.records import runs

    def refuse(path, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(runs, "atomic_write_text", refuse)
    cfg = make_config("ppo", "CartPole-v1", flags=dict(
        total_steps=64, num_envs=1, num_steps=64, eval_every=0, tensorboard=False,
        vector="sync", runs_dir=str(tmp_path / "runs")))
    with pytest.raises(RunError, match="cannot write the run folder .*No space left"):
        trustrl.train(cfg)
    assert not any((tmp_path / "runs").iterdir())
