"""One writer per run folder and per sweep folder: a second writer fails at once (exit 2, one
line naming the holder's pid), a killed holder's lock is taken over, a population's seeds share
their parent's lock, and `trustrl report` leaves out a trial whose metrics repeat iterations."""

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

import trustrl
from trustrl.cli import main
from trustrl.records.runs import METRIC_COLUMNS, RunDir
from trustrl.settings.config import make_config
from trustrl.util.locks import LOCK_NAME, FolderLockedError

TESTS = Path(__file__).parent


class Stop(Exception):
    pass


@pytest.fixture(autouse=True)
def own_key(tmp_path, monkeypatch):
    monkeypatch.setenv("TRUSTRL_KEY_FILE", str(tmp_path / "keys" / "checkpoint.key"))


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(TESTS), e.get("PYTHONPATH", "")])
    return e


def stopped_run(runs: Path, total_steps: int = 6 * 256) -> Path:
    cfg = make_config("ppo", "CartPole-v1", flags={
        "runs_dir": str(runs), "total_steps": total_steps, "num_envs": 2, "num_steps": 128,
        "minibatch_size": 64, "update_epochs": 2, "eval_every": 0, "eval_episodes": 2,
        "tensorboard": False, "checkpoint_every": 1})

    def stop(row):
        if row["iteration"] == 2:
            raise Stop

    with pytest.raises(Stop):
        trustrl.train(cfg, callback=stop)
    (run,) = [p for p in runs.iterdir() if p.is_dir()]
    return run


def holder(code: str, *args: str) -> subprocess.Popen:
    """A python process that takes a lock with `code`, prints 'locked' and sleeps."""
    p = subprocess.Popen([sys.executable, "-c", code + "\nprint('locked', flush=True)\n"
                          "import time\ntime.sleep(600)", *args], env=env(),
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "locked"
    return p


def recorded_pid(folder: Path) -> int | None:
    try:
        return int(json.loads((folder / LOCK_NAME).read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return None


def one_line_error(proc, *needles):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trustrl: error: "), proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def trustrl_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trustrl", *args], env=env(),
                          capture_output=True, text=True, timeout=timeout)


# ----- run folders ----------------------------------------------------------------------------
def test_two_train_resume_at_once_the_second_fails_fast_naming_the_first(tmp_path):
    run = stopped_run(tmp_path / "runs", total_steps=400 * 256)  # long enough to overlap
    first = subprocess.Popen([sys.executable, "-m", "trustrl", "train", "--resume", str(run),
                              "--quiet"], env=env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while recorded_pid(run) != first.pid:
            assert first.poll() is None, first.stderr.read() if first.stderr else ""
            assert time.monotonic() < deadline
            time.sleep(0.2)
        t0 = time.monotonic()
        second = trustrl_cli("train", "--resume", str(run), "--quiet")
        took = time.monotonic() - t0
        one_line_error(second, f"pid {first.pid}", str(run), "one writer at a time")
        assert first.poll() is None  # it did not wait for the first one to end
        assert took < 60
    finally:
        first.kill()
        first.wait()
    # the killed writer's lock is stale: the next writer takes it
    r = RunDir.open(run)
    assert recorded_pid(run) == os.getpid()
    r.release()
    iterations = [row["iteration"] for row in csv.DictReader(open(run / "metrics.csv"))]
    assert len(iterations) == len(set(iterations))


def test_a_stale_lock_of_a_killed_process_is_taken_over(tmp_path):
    run = stopped_run(tmp_path / "runs")
    p = holder("import sys\nfrom trustrl.records.runs import RunDir\nr = RunDir.open(sys.argv[1])",
               str(run))
    try:
        with pytest.raises(FolderLockedError, match=f"pid {p.pid} "):
            RunDir.open(run)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert recorded_pid(run) == p.pid  # the record outlives the process; the flock does not
    proc = trustrl_cli("train", "--resume", str(run), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((run / "status.json").read_text())["status"] == "finished"


def test_one_process_may_reopen_its_own_run_and_releases_it_when_done(tmp_path):
    run = stopped_run(tmp_path / "runs")  # stopped: released
    a = RunDir.open(run)
    b = RunDir.open(run)  # the same process: allowed
    code = "import sys\nfrom trustrl.records.runs import RunDir\nRunDir.open(sys.argv[1])"
    other = subprocess.run([sys.executable, "-c", code, str(run)], env=env(),
                           capture_output=True, text=True)
    assert other.returncode != 0 and f"pid {os.getpid()}" in other.stderr
    a.set_status("stopped", 2)
    b.release()
    other = subprocess.run([sys.executable, "-c", code, str(run)], env=env(),
                           capture_output=True, text=True)
    assert other.returncode == 0, other.stderr


def test_a_population_locks_its_folder_once(tmp_path):
    from trustrl.training.train import resume, train

    cfg = make_config("ppo", "CartPole-v1", flags={
        "runs_dir": str(tmp_path / "runs"), "total_steps": 2 * 256, "num_envs": 2,
        "num_steps": 128, "minibatch_size": 64, "update_epochs": 1, "eval_every": 0,
        "eval_episodes": 2, "tensorboard": False, "vector": "torch"})
    res = train(cfg, seeds=[1, 2])
    assert (res.run_dir / LOCK_NAME).is_file()
    assert not any((m / LOCK_NAME).exists() for m in res.member_dirs)  # shared with the root
    p = holder("import sys\nfrom trustrl.records.runs import RunDir\nr = RunDir.open(sys.argv[1])",
               str(res.run_dir))
    try:
        with pytest.raises(FolderLockedError, match=f"pid {p.pid} "):
            resume(res.run_dir)
    finally:
        p.kill()
        p.wait()
    resume(res.run_dir)  # finished: writes the final files again, lock free


# ----- sweep folders --------------------------------------------------------------------------
def _sweep(tmp_path: Path) -> Path:
    from trustrl.sweep import runner

    spec = tmp_path / "spec.yaml"
    spec.write_text("seeds: [1]\ntotal_steps: 512\nalgos: [ppo]\nenvs: [CartPole-v1]\n"
                    "common: {num_envs: 2, num_steps: 128, eval_every: 0, eval_episodes: 2, "
                    "tensorboard: false}\n")
    folder = runner.start(spec, tmp_path / "sw")
    folder.unlock()
    return folder.path


def test_two_sweeps_at_once_the_second_fails_fast_naming_the_first(tmp_path):
    sw = _sweep(tmp_path)
    p = holder("import sys\nfrom trustrl.sweep.folder import SweepFolder\n"
               "f = SweepFolder.open(sys.argv[1]); f.lock()", str(sw))
    try:
        proc = trustrl_cli("sweep", "--resume", str(sw), "--workers", "1")
        one_line_error(proc, f"pid {p.pid} ", "sweep folder", str(sw))
        assert not list(sw.glob("trials/*/*/metrics.csv"))  # nothing ran
        assert trustrl_cli("sweep", "--resume", str(sw), "--dry-run").returncode == 0  # reads
    finally:
        p.kill()
        p.wait()
    from trustrl.sweep.folder import SweepFolder

    f = SweepFolder.open(sw)
    f.lock()  # the dead holder's lock is taken over
    assert recorded_pid(sw) == os.getpid()
    f.unlock()


def test_the_sweep_writer_removes_leftover_temp_files(tmp_path):
    from trustrl.sweep.folder import SweepFolder

    sw = _sweep(tmp_path)
    f = SweepFolder.open(sw)
    d = f.trial_dir(f.trials[0])
    d.mkdir(parents=True, exist_ok=True)
    stale = [sw / ".sweep.json.a1b2.tmp", d / ".result.json.x9.tmp"]
    for s in stale:
        s.write_text("half")
    (d / "keep.tmp").write_text("not ours")
    f.lock()
    f.unlock()
    assert not any(s.exists() for s in stale)
    assert (d / "keep.tmp").exists()


def test_a_trial_refuses_to_delete_a_run_folder_someone_writes(tmp_path):
    from trustrl.sweep.folder import SweepFolder
    from trustrl.sweep.trial import execute_trial

    sw = _sweep(tmp_path)
    f = SweepFolder.open(sw)
    t = f.trials[0]
    live = f.trial_dir(t) / "CartPole-v1__ppo__1__x"
    live.mkdir(parents=True)  # no checkpoint yet: a trial would remove it and start over
    (live / "config.json").write_text("{}")
    p = holder("import sys\nfrom trustrl.util.locks import FolderLock\n"
               "FolderLock(sys.argv[1]).acquire()", str(live))
    try:
        res = execute_trial(t.as_dict(), f.trial_dir(t))
    finally:
        p.kill()
        p.wait()
    assert res["status"] == "failed" and f"pid {p.pid}" in res["error"]
    assert live.is_dir()


# ----- report ---------------------------------------------------------------------------------
def test_report_leaves_out_a_trial_whose_metrics_repeat_iterations(tmp_path):
    from trustrl.sweep.folder import SweepFolder
    from trustrl.sweep.spec import parse_spec

    spec = parse_spec({"name": "dup", "seeds": [1, 2], "total_steps": 512, "algos": ["ppo"],
                       "envs": ["CartPole-v1"],
                       "common": {"num_envs": 2, "num_steps": 128, "eval_every": 1}},
                      check_envs=False)
    folder = SweepFolder.create(tmp_path / "sw", spec, "dup\n")
    folder.unlock()
    for t in folder.trials:
        run = folder.trial_dir(t) / "run"
        run.mkdir(parents=True)
        its = [1, 2] if t.seed == 1 else [1, 2, 1, 2]  # seed 2: two writers' rows
        with open(run / "metrics.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=METRIC_COLUMNS)
            w.writeheader()
            for i in its:
                w.writerow({"iteration": i, "global_step": 256 * i, "eval_return_mean": 10 * i})
        (run / "eval.json").write_text(json.dumps({"mean": 20.0 * t.seed}))
        (folder.trial_dir(t) / "result.json").write_text(json.dumps(
            {"status": "finished", "run": "run", "wall_s": 1.0}))
    assert main(["report", str(folder.path), "--boot", "200"]) == 0
    text = (folder.path / "report" / "REPORT.md").read_text()
    assert "1 finished, 0 failed, 1 invalid" in text
    bad = next(t for t in folder.trials if t.seed == 2)
    assert f"| {bad.id} | metrics.csv repeats iterations 1, 2 (written twice) |" in text
    assert "| ppo | 1 | 20.0" in text  # only seed 1's final return in the table
