"""Children die with their parent (issue 52, point 3): pool workers of a sweep and of
trustrl.util.children.child_pool (reproduce, the RLHF study), and multiprocessing's resource
tracker, are gone soon after their parent is killed with kill -9, and the parent's stdout
reaches its end (a pipe to `tee` does not hang); SIGTERM stops a command like Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="parent-death signals are Linux's")


def descendants(pid: int) -> set[int]:
    """Every live process below pid (by the parent pids of /proc)."""
    parents: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents[int(d.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {c for c, p in parents.items() if p in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(cond, timeout: float, step: float = 0.25) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return cond()


def cleanup(pids) -> None:
    for p in pids:  # only processes this test started
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


POOL_SCRIPT = """
import os, sys, time
from pathlib import Path
from trustrl.util.children import child_pool, terminate_like_ctrl_c


def task(i):
    Path(f"started{i}").write_text(str(os.getpid()))
    time.sleep(120)


if __name__ == "__main__":
    terminate_like_ctrl_c()
    with child_pool(2) as pool:
        futures = [pool.submit(task, i) for i in range(2)]
        while not all(Path(f"started{i}").is_file() for i in range(2)):
            time.sleep(0.05)  # both workers inside their task
        try:  # the pids are printed inside the try: a SIGTERM sent on reading them lands here
            print(" ".join(str(p) for p in pool._processes), flush=True)
            for f in futures:
                f.result()
        except KeyboardInterrupt:
            print("stopped", flush=True)
            raise
"""


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_pool_workers_and_the_resource_tracker_die_with_their_parent(how, tmp_path):
    (tmp_path / "pool_script.py").write_text(POOL_SCRIPT)
    proc = subprocess.Popen([sys.executable, "pool_script.py"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    kids: set[int] = set()
    try:
        workers = [int(p) for p in proc.stdout.readline().split()]
        assert len(workers) == 2, proc.stderr.read()
        kids = descendants(proc.pid)
        assert set(workers) <= kids
        os.kill(proc.pid, getattr(signal, how))
        out, err = proc.communicate(timeout=60)  # stdout ends: no worker holds it open
        assert wait_for(lambda: not any(alive(p) for p in kids), 30), \
            [p for p in kids if alive(p)]
        if how == "SIGTERM":
            assert "stopped" in out and proc.returncode != 0, (out, err, proc.returncode)
    finally:
        cleanup(kids | {proc.pid})


SPEC = """
name: long
seeds: [0, 1]
total_steps: 2000000
algos:
  ppo: {vector: sync, num_envs: 1, num_steps: 64, eval_every: 0, tensorboard: false}
envs: [CartPole-v1]
"""


@pytest.mark.slow
def test_a_sweep_driver_killed_with_sigkill_leaves_no_worker(tmp_path):
    (tmp_path / "spec.yaml").write_text(SPEC)
    proc = subprocess.Popen([sys.executable, "-m", "trustrl", "sweep", "spec.yaml", "--out",
                             "sw", "--workers", "2"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    kids: set[int] = set()
    try:
        trials = tmp_path / "sw" / "trials"
        started = wait_for(lambda: trials.is_dir() and len(
            list(trials.glob("*/*/checkpoints/latest.pt"))) == 2, 240, 0.5)
        assert started, proc.stdout.read() if proc.poll() is not None else "not started"
        kids = descendants(proc.pid)
        assert len(kids) >= 3  # two workers and the resource tracker
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
        assert wait_for(lambda: not any(alive(p) for p in kids), 60), \
            [p for p in kids if alive(p)]
        # each run keeps its checkpoint, from which `sweep --resume` continues it
        assert len(list(trials.glob("*/*/checkpoints/latest.pt"))) == 2
    finally:
        cleanup(kids | {proc.pid})


@pytest.mark.parametrize("command", [["demo", "--port", "0"],
                                     ["reproduce", "--only", "nonexistent-claim-id", "--list"]])
def test_sigterm_stops_a_command_like_ctrl_c(command, tmp_path):
    """Every command takes SIGTERM as Ctrl-C (trustrl.cli.main): its own stop message or
    `trustrl: terminated`, never a silent death by the signal (exit status -15)."""
    if command[0] == "reproduce":  # a command that is busy when the signal comes
        script = ("import os, signal, sys, time\n"
                  "from trustrl import cli\n"
                  "cli.cmd_reproduce = lambda args: (os.kill(os.getpid(), signal.SIGTERM),"
                  " time.sleep(60))\n"
                  f"sys.exit(cli.main({command!r}))\n")
        proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 143 and proc.stderr.strip() == "trustrl: terminated", proc
        return
    proc = subprocess.Popen([sys.executable, "-m", "trustrl", *command], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "serving on" in proc.stdout.readline()
        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "stopped" in out and "Traceback" not in err, (out, err)
    finally:
        cleanup({proc.pid})


def _rows(csv_path: Path) -> list[str]:
    return csv_path.read_text().splitlines()[1:] if csv_path.is_file() else []


def _first_run(root: Path) -> Path | None:
    runs = sorted(p.parent for p in root.glob("**/status.json")) if root.is_dir() else []
    return runs[0] if runs else None


def _sigterm_when(proc: subprocess.Popen, ready, timeout: float = 240) -> tuple[str, str]:
    """SIGTERM to proc once ready() holds; (stdout, stderr) after it exits."""
    if not wait_for(lambda: ready() or proc.poll() is not None, timeout, 0.2) or \
            proc.poll() is not None:
        out, err = proc.communicate(timeout=60)
        raise AssertionError(f"never ready (exit {proc.returncode}): {err[-2000:]}")
    os.kill(proc.pid, signal.SIGTERM)
    return proc.communicate(timeout=120)


def _start(args: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "trustrl", *args], cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _one_line(proc: subprocess.Popen, err: str, needle: str) -> str:
    lines = err.strip().splitlines()
    assert proc.returncode == 143 and len(lines) == 1, (proc.returncode, err[-3000:])
    assert lines[0].startswith("trustrl: terminated; ") and needle in lines[0], lines
    return lines[0]


@pytest.mark.parametrize("stage", ["sft", pytest.param("grpo", marks=pytest.mark.slow)])
def test_sigterm_stops_an_rlhf_run_marked_stopped_and_says_where(stage, tmp_path):
    """`trustrl rlhf sft | grpo` (ppo, rloo and a Hugging Face model's run share grpo's loop):
    SIGTERM ends in one line naming the folder; its status.json says "stopped" at the
    iteration reached, never "running"."""
    args = ["--runs-dir", "runs", "--quiet"]
    if stage == "grpo":
        sft = subprocess.run([sys.executable, "-m", "trustrl", "rlhf", "sft", "--steps", "2",
                              "--runs-dir", "sft", "--quiet", "--set", "eval_every=1"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert sft.returncode == 0, sft.stderr
        args += ["--sft", str(_first_run(tmp_path / "sft")), "--iterations", "100000"]
    else:
        args += ["--steps", "1000000", "--set", "eval_every=2"]
    proc = _start(["rlhf", stage, *args], tmp_path)
    try:
        out, err = _sigterm_when(proc, lambda: (r := _first_run(tmp_path / "runs")) is not None
                                 and len(_rows(r / "metrics.csv")) >= 2)
    finally:
        cleanup({proc.pid})
    run = _first_run(tmp_path / "runs")
    line = _one_line(proc, err, f"{run.relative_to(tmp_path)} is kept with status 'stopped'")
    assert "do not resume" in line
    st = json.loads((run / "status.json").read_text())
    last = int(_rows(run / "metrics.csv")[-1].split(",")[1 if stage == "sft" else 0])
    assert st["status"] == "stopped" and "SIGTERM" in st["message"], st
    # the iterations done (SFT steps: a row each) and not more
    assert last <= st["iteration"] < last + 2 and f"at iteration {st['iteration']}:" in line, \
        (st, line)


@pytest.mark.parametrize("command", [pytest.param("rlhf-study", marks=pytest.mark.slow),
                                     "reproduce",
                                     pytest.param("lab-check", marks=pytest.mark.slow)])
def test_sigterm_stops_a_command_with_children_in_one_line(command, tmp_path):
    """The commands that work in child processes: SIGTERM to the parent alone ends in one line
    saying what is left, and no child outlives it; the study's runs cut short say "stopped"."""
    if command == "lab-check":
        init = subprocess.run([sys.executable, "-m", "trustrl", "lab", "init", "lab"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert init.returncode == 0, init.stderr
        args, needle = ["lab", "check", "lab"], "trustrl: terminated"
    elif command == "reproduce":
        args, needle = ["reproduce", "--only", "000.lab", "--quick", "--out", "rep"], \
            "no report written"
    else:
        args, needle = ["rlhf", "study", "--out", "st", "--seeds", "1", "--workers", "2",
                        "--set", "sft_steps=1000000"], "a study does not resume"
    proc = _start(args, tmp_path)
    kids: set[int] = set()

    def busy() -> bool:
        kids.update(descendants(proc.pid))
        if command == "rlhf-study" and not any(
                len(_rows(p)) for p in (tmp_path / "st").glob("runs/*/metrics.csv")):
            return False  # until a worker's run has logged a row
        return len(kids) >= (1 if command == "lab-check" else 2)

    try:
        out, err = _sigterm_when(proc, busy)
        lines = err.strip().splitlines()
        assert proc.returncode == 143 and len(lines) == 1 and needle in lines[0], err[-3000:]
        assert wait_for(lambda: not any(alive(p) for p in kids), 30), \
            [p for p in kids if alive(p)]
        if command == "rlhf-study":  # the runs the workers were training say so
            states = [json.loads(p.read_text())["status"]
                      for p in (tmp_path / "st").glob("runs/*/status.json")]
            assert states and set(states) == {"stopped"}, states
    finally:
        cleanup(kids | {proc.pid})


def test_async_env_workers_in_a_step_that_never_returns_die_with_a_killed_parent(tmp_path):
    """`train --vector async`: Gymnasium's workers are forked with a parent-death signal
    (trustrl.util.lifeline), so kill -9 of trustrl ends them even inside a step that never
    returns (their pipe would tell them only at their next wait)."""
    env = dict(os.environ, TRUSTRL_TEST_STUCK=str(tmp_path / "stuck"))
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), env.get("PYTHONPATH", "")])
    proc = subprocess.Popen(
        [sys.executable, "-m", "trustrl", "train", "--env", "helper_envs:StuckCartPole-v0",
         "--vector", "async", "--set", "num_envs=2", "--total-steps", "100000000",
         "--runs-dir", "runs", "--quiet", "--set", "tensorboard=false"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kids: set[int] = set()
    try:
        running = tmp_path / "runs"
        assert wait_for(lambda: proc.poll() is not None or (running.is_dir() and any(
            running.glob("*/metrics.csv"))), 240, 0.2), "never started"
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        kids = descendants(proc.pid)
        assert len(kids) >= 2, kids  # the two env workers
        (tmp_path / "stuck").touch()
        time.sleep(1.0)  # the workers are now inside a step that sleeps 10 minutes
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
        assert wait_for(lambda: not any(alive(p) for p in kids), 30), \
            [p for p in kids if alive(p)]
    finally:
        cleanup(kids | {proc.pid})


TUNE_SPEC = """\
name: long
algo: ppo
env: CartPole-v1
total_steps: 100000000
trials: 2
common: {eval_every: 2, eval_episodes: 1, num_envs: 1, num_steps: 64, checkpoint_every: 1,
         vector: sync, tensorboard: false}
space:
  lr: {log-float: [1.0e-4, 1.0e-3]}
"""


@pytest.mark.slow
def test_sigterm_stops_a_tune_study_in_one_line_with_its_trial_kept(tmp_path):
    """`trustrl tune`: SIGTERM to the driver alone ends in one line naming `tune --resume`, no
    worker outlives it, and the cut trial keeps its checkpoint in a study folder that opens."""
    pytest.importorskip("optuna")
    from trustrl.sweep.folder import SweepFolder

    (tmp_path / "spec.yaml").write_text(TUNE_SPEC)
    proc = _start(["tune", "spec.yaml", "--out", "study", "--workers", "1"], tmp_path)
    kids: set[int] = set()

    def running() -> bool:
        kids.update(descendants(proc.pid))
        return any((tmp_path / "study").glob("trials/*/*/checkpoints/latest.pt"))

    try:
        out, err = _sigterm_when(proc, running)
        lines = err.strip().splitlines()
        assert proc.returncode == 143 and len(lines) == 1, err[-3000:]
        assert "SIGTERM" in lines[0] and "trustrl tune --resume" in lines[0], lines
        assert wait_for(lambda: not any(alive(p) for p in kids), 30), \
            [p for p in kids if alive(p)]
        folder = SweepFolder.open(tmp_path / "study")
        assert folder.trials and any((tmp_path / "study").glob(
            "trials/*/*/checkpoints/latest.pt"))
    finally:
        cleanup(kids | {proc.pid})


@pytest.mark.slow
def test_a_local_ray_instance_dies_with_a_killed_runners_driver(tmp_path):
    """`train --set runners=2` starts a local Ray instance; after kill -9 of trustrl, every
    process of it is gone: Ray's fate-sharing ends its GCS server and raylet, and
    trustrl.util.lifeline's reaper the agents the raylet started (they outlived the driver for
    minutes before it)."""
    pytest.importorskip("ray")
    proc = subprocess.Popen([sys.executable, "-m", "trustrl", "train", "--total-steps",
                             "2000000", "--runs-dir", "runs", "--quiet", "--set", "runners=2",
                             "--set", "tensorboard=false"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kids: set[int] = set()

    def names() -> set[str]:
        out = set()
        for p in descendants(proc.pid):
            try:
                out.add((Path("/proc") / str(p) / "cmdline").read_bytes().decode(
                    errors="replace"))
            except OSError:
                pass
        return out

    try:
        started = wait_for(lambda: sum("Runner" in n for n in names()) >= 2
                           and any("RuntimeEnvAgent" in n for n in names()), 240, 0.5)
        assert started, "Ray's runners did not start"
        kids = descendants(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        assert wait_for(lambda: not any(alive(p) for p in kids), 30), \
            [p for p in kids if alive(p)]
    finally:
        cleanup(kids | {proc.pid})
