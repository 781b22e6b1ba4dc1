"""The run lifecycle of the one trainer: signals, runs stopped before their first checkpoint,
failures after the run folder exists, a callback that stops a run; and the columns and
learning-rate schedule every collector writes alike."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import trustrl
from trustrl.settings.config import make_config


def _messages(err: str) -> list[str]:
    """stderr's lines but the compiled backend's note that it is compiling (printed by the
    first run on a machine that has the `compiled` extra, whichever test that is)."""
    return [ln for ln in err.strip().splitlines()
            if not ln.startswith(("trustrl: compiling ", "trustrl: compiled in "))]


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path) as f:
        return [{k: v for k, v in r.items() if k not in ("wall_time", "sps")}
                for r in csv.DictReader(f)]


def _status(run: Path) -> dict:
    return json.loads((run / "status.json").read_text())


def tiny(tmp_path: Path, algo: str = "ppo", env: str = "CartPole-v1", **sets):
    base = dict(total_steps=3 * 64, num_envs=2, num_steps=32, eval_every=0, eval_episodes=1,
                tensorboard=False, runs_dir=str(tmp_path))
    if algo.startswith("ppo"):
        base.update(minibatch_size=32, update_epochs=2)
    base.update(sets)
    return make_config(algo, env, flags=base)


@pytest.mark.parametrize("ckpt", ["checkpoint_every=1", "checkpoint_secs=1e9"],
                         ids=["every-iteration", "by-time"])
def test_sigterm_stops_the_run_resumably_and_names_the_folder(tmp_path, cli_env, ckpt):
    """SIGTERM stops after the current iteration with a checkpoint of it: with checkpoints by
    time (none due for 1e9 s) the stop's own checkpoint holds every row written, so resume
    drops nothing and the run ends with iterations 1..60 exactly once."""
    cmd = [sys.executable, "-m", "trustrl", "train", "--env", "helper_envs:SlowCartPole-v0",
           "--total-steps", str(60 * 128), "--runs-dir", str(tmp_path), "--quiet",
           "--set", "num_envs=2", "--set", "num_steps=64", "--set", "eval_every=0",
           "--set", ckpt, "--set", "tensorboard=false"]
    p = subprocess.Popen(cmd, env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    deadline = time.time() + 120
    run = None
    while time.time() < deadline:
        runs = [d for d in tmp_path.iterdir() if d.is_dir()] if tmp_path.exists() else []
        if runs and (runs[0] / "metrics.csv").is_file() and len(_rows(
                runs[0] / "metrics.csv")) >= 2:
            run = runs[0]
            break
        time.sleep(0.05)
    assert run is not None, "the run never wrote two rows"
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 143, (p.returncode, err)
    assert f"--resume {run}" in err and len(_messages(err)) == 1, err
    st = _status(run)
    assert st["status"] == "stopped" and "SIGTERM" in st["message"], st
    from trustrl.util.safeio import load_safe

    written = len(_rows(run / "metrics.csv"))
    assert load_safe(run / "checkpoints" / "latest.pt")["iteration"] == written >= 2
    done = subprocess.run([sys.executable, "-m", "trustrl", "train", "--resume", str(run),
                           "--quiet"], env=cli_env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert _status(run)["status"] == "finished"
    its = [int(r["iteration"]) for r in _rows(run / "metrics.csv")]
    assert its == list(range(1, 61))


@pytest.mark.parametrize("vector", ["sync", "torch"])
def test_a_run_stopped_before_its_first_checkpoint_resumes_from_scratch(tmp_path, vector):
    full = trustrl.train(tiny(tmp_path / "full", vector=vector, checkpoint_every=5))

    def fail_at_2(row):
        if row["iteration"] == 2:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        trustrl.train(tiny(tmp_path / "cut", vector=vector, checkpoint_every=5),
                      callback=fail_at_2)
    (run,) = (tmp_path / "cut").iterdir()
    assert _status(run)["status"] == "failed" and _status(run)["message"] == "boom"
    assert not (run / "checkpoints" / "latest.pt").exists()
    again = trustrl.resume(run)
    assert _status(run)["status"] == "finished"
    assert _rows(run / "metrics.csv") == _rows(full.run_dir / "metrics.csv")
    assert again.final_eval["returns"] == full.final_eval["returns"]


def test_a_failure_after_the_folder_exists_is_marked_failed_with_its_reason(tmp_path):
    cfg = tiny(tmp_path, env="helper_envs:EvalRaisesCartPole-v0", eval_every=1)
    with pytest.raises(RuntimeError):
        trustrl.train(cfg)
    (run,) = tmp_path.iterdir()
    st = _status(run)
    assert st["status"] == "failed" and st["message"] == "this env cannot be evaluated"


def test_bad_env_leaves_no_folder(tmp_path):
    with pytest.raises(trustrl.TrustrlError):
        trustrl.train(tiny(tmp_path / "x", env="NoSuchEnv-v0"))
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("vector", ["sync", "torch"])
def test_a_callback_stops_a_run_cleanly(tmp_path, vector):
    res = trustrl.train(tiny(tmp_path, vector=vector, checkpoint_every=5),
                        callback=lambda row: row["iteration"] < 2)
    assert res.final_eval == {} and _status(res.run_dir)["status"] == "stopped"
    assert (res.run_dir / "checkpoints" / "latest.pt").is_file()
    assert len(_rows(res.run_dir / "metrics.csv")) == 2
    trustrl.resume(res.run_dir)
    assert _status(res.run_dir)["status"] == "finished"
    assert len(_rows(res.run_dir / "metrics.csv")) == 3


@pytest.mark.parametrize("algo", ["ppo", "ppo-noclip", "trpo", "npg"])
def test_metrics_header_is_the_same_on_every_collector(tmp_path, algo):
    heads = []
    for vector in ("sync", "torch"):
        res = trustrl.train(tiny(tmp_path / vector, algo, vector=vector))
        heads.append((res.run_dir / "metrics.csv").read_text().splitlines()[0])
    assert heads[0] == heads[1]
    cls = trustrl.algos.algorithm_class(algo)
    assert heads[0].split(",")[-len(cls.extra_columns):] == list(cls.extra_columns)


@pytest.mark.parametrize("vector", ["sync", "torch"])
def test_learning_rate_schedule_values(tmp_path, vector):
    """lr of iteration i (1-based) of n: lr0 (1 - (i - 1)/n) annealed, lr0 otherwise; with
    anneal_steps H, lr0 (1 - (i - 1) batch / H)."""
    res = trustrl.train(tiny(tmp_path / "a", vector=vector, lr=0.003, anneal_lr=True))
    lrs = [float(r["lr"]) for r in _rows(res.run_dir / "metrics.csv")]
    assert lrs == pytest.approx([0.003, 0.002, 0.001], rel=1e-6)
    res = trustrl.train(tiny(tmp_path / "b", vector=vector, lr=0.003, anneal_lr=False))
    lrs = [float(r["lr"]) for r in _rows(res.run_dir / "metrics.csv")]
    assert lrs == pytest.approx([0.003] * 3, rel=1e-6)
    # anneal_steps: the horizon of the decay, here twice the run's 3 x 64 steps
    res = trustrl.train(tiny(tmp_path / "c", vector=vector, lr=0.003, anneal_lr=True,
                             anneal_steps=6 * 64))
    lrs = [float(r["lr"]) for r in _rows(res.run_dir / "metrics.csv")]
    assert lrs == pytest.approx([0.003, 0.0025, 0.002], rel=1e-6)
    # anneal_clip: the clip range on the same horizon, logged as metrics.csv's clip_eps
    res = trustrl.train(tiny(tmp_path / "d", vector=vector, clip_eps=0.3, anneal_clip=True,
                             anneal_lr=False, anneal_steps=6 * 64))
    rows = _rows(res.run_dir / "metrics.csv")
    assert [float(r["clip_eps"]) for r in rows] == pytest.approx([0.3, 0.25, 0.2], rel=1e-6)
    assert [float(r["lr"]) for r in rows] == pytest.approx([float(rows[0]["lr"])] * 3, rel=1e-6)


def test_cli_run_that_fails_is_one_line_naming_the_kept_folder(tmp_path, cli_env):
    r = subprocess.run([sys.executable, "-m", "trustrl", "train", "--env",
                        "helper_envs:EvalRaisesCartPole-v0", "--runs-dir", str(tmp_path),
                        "--quiet"], env=cli_env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and len(_messages(r.stderr)) == 1, r.stderr
    (run,) = tmp_path.iterdir()
    assert "this env cannot be evaluated" in r.stderr and f"--resume {run}" in r.stderr
    assert _status(run)["status"] == "failed"


@pytest.mark.parametrize("algo", ["ppo", "trpo"])
@pytest.mark.parametrize("vector", ["torch", "sync"])
def test_gradient_backend_override_gives_the_same_run_to_rounding(tmp_path, vector, algo):
    """grad_backend 'autograd', 'closed-form' and 'compiled' (where Numba is installed: the
    default for the MLPs on a CPU, else the closed form) are backends of one update, on either
    collector: the same metrics to float rounding (TRPO: its policy gradient, Fisher products
    and critic regression on each backend)."""
    from trustrl.compute import compiled

    rows = {}
    names = ("closed-form", "autograd") + (("compiled",) if compiled.available() else ())
    for backend in names:
        res = trustrl.train(tiny(tmp_path / backend, algo, vector=vector, grad_backend=backend))
        rows[backend] = _rows(res.run_dir / "metrics.csv")
    keys = (("policy_loss", "value_loss", "approx_kl", "entropy", "grad_norm") if algo == "ppo"
            else ("value_loss", "approx_kl", "xFx", "step_size", "grad_norm", "kl_exact"))
    for other in names[1:]:
        for a, b in zip(rows["closed-form"], rows[other], strict=True):
            for k in keys:
                assert float(a[k]) == pytest.approx(float(b[k]), rel=1e-3, abs=1e-6), (other, k)
    from trustrl.learn.learners import make_learner

    auto = "compiled" if compiled.available() else "closed-form"
    for backend, expected in (("closed-form", "closed-form"), ("autograd", "autograd"),
                              ("auto", auto)) + ((("compiled", "compiled"),)
                                                 if compiled.available() else ()):
        cfg = tiny(tmp_path / "x", algo, vector=vector, grad_backend=backend)
        learner = make_learner(cfg, [1])
        assert learner.algo.backend.name == expected, backend
        learner.close()


def test_a_second_signal_stops_at_once():
    """The first SIGTERM / Ctrl-C asks for a stop at the end of the iteration; a second one
    raises at once (Terminated for SIGTERM, KeyboardInterrupt for Ctrl-C)."""
    from trustrl.training.train import Terminated, _Stop

    for sig, exc in ((signal.SIGTERM, Terminated), (signal.SIGINT, KeyboardInterrupt)):
        stop = _Stop()
        stop.handler(sig, None)
        assert stop.signal == sig
        with pytest.raises(exc):
            stop.handler(sig, None)
        with pytest.raises(exc):
            stop.raise_if_asked()
    stop = _Stop()
    stop.raise_if_asked()  # nothing asked: nothing raised


def test_torch_threads_auto_one_below_eight_seeds_else_the_cores(tmp_path, monkeypatch):
    import os

    from trustrl.learn.learners import CORES_ENV, torch_threads

    monkeypatch.delenv(CORES_ENV, raising=False)
    cfg = tiny(tmp_path)
    assert cfg.torch_threads is None
    cores = len(os.sched_getaffinity(0))
    assert [torch_threads(cfg, p) for p in (1, 7, 8, 16)] == [1, 1, cores, cores]
    assert torch_threads(tiny(tmp_path, torch_threads=3), 16) == 3
    assert torch_threads(tiny(tmp_path, torch_threads=2), 1) == 2


def test_trustrl_cores_bounds_the_automatic_thread_count(tmp_path, monkeypatch):
    """TRUSTRL_CORES caps what an automatic torch_threads takes (8+ seeds, a NatureCNN), a set
    torch_threads still wins, a bad value is a one-line ConfigError; a sweep's local workers
    set it to their share of the cores."""
    import torch

    from trustrl.learn.learners import CORES_ENV, torch_threads
    from trustrl.sweep.local import default_workers, worker_cores
    from trustrl.sweep.trial import worker_init
    from trustrl.util.errors import ConfigError

    cfg = tiny(tmp_path)
    monkeypatch.setenv(CORES_ENV, "3")
    assert [torch_threads(cfg, 1), torch_threads(cfg, 8), torch_threads(cfg, 1, cnn=True)] \
        == [1, 3, 3]
    assert torch_threads(tiny(tmp_path, torch_threads=2), 8) == 2
    for bad in ("0", "x", "-1", "1.5"):
        monkeypatch.setenv(CORES_ENV, bad)
        with pytest.raises(ConfigError, match=CORES_ENV) as e:
            torch_threads(cfg, 8)
        assert "\n" not in str(e.value)
    cores = default_workers()
    assert worker_cores(1) == cores and worker_cores(2) == max(1, cores // 2)
    assert worker_cores(4 * cores) == 1
    threads, handler = torch.get_num_threads(), signal.getsignal(signal.SIGINT)
    try:
        worker_init(1)  # what a pool worker of a sweep on every core runs first
        assert torch_threads(cfg, 8, cnn=True) == 1
    finally:
        torch.set_num_threads(threads)
        signal.signal(signal.SIGINT, handler)


def test_training_in_process_leaves_the_signal_handlers_as_it_found_them(tmp_path):
    """trustrl.train takes SIGINT and SIGTERM for the run only: after it (finished, or stopped
    by a callback) the caller's handlers and signal mask are back (a notebook's Ctrl-C works)."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    trustrl.train(tiny(tmp_path / "a"))
    trustrl.train(tiny(tmp_path / "b"), callback=lambda row: False)
    assert {s: signal.getsignal(s) for s in before} == before
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == mask


def test_log_rows_wait_in_memory_until_a_flush_and_every_checkpoint_has_its_rows(tmp_path):
    """The trainer keeps metrics and episode rows in memory between flushes (at most
    LOG_FLUSH_SECS apart); a checkpoint flushes first, so the rows on disk always reach the
    checkpoint's iteration (a resume keeps exactly those), and the end of a run writes all."""
    from trustrl.records.runs import RunDir

    run = tmp_path / "r"
    run.mkdir()
    (run / "config.json").write_text("{}")
    rd = RunDir(run)
    rd.buffer_logs(1e9)
    rd.log_metrics({"iteration": 1, "global_step": 8})
    rd.log_episodes([{"global_step": 8, "return": 1.0, "length": 8}])
    assert not (run / "metrics.csv").exists() and not (run / "episodes.csv").exists()
    rd.flush_logs()
    assert [r["iteration"] for r in _rows(run / "metrics.csv")] == ["1"]
    assert len(_rows(run / "episodes.csv")) == 1

    from trustrl.util.safeio import load_safe

    # the module (trustrl.train is the function)
    train_module = sys.modules["trustrl.training.train"]

    seen = []

    def on_disk(row):  # a checkpoint every 2 iterations: what it finds of the earlier ones
        path = next(tmp_path.glob("CartPole*")) / "metrics.csv"
        seen.append((row["iteration"], len(_rows(path)) if path.exists() else 0))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(train_module, "LOG_FLUSH_SECS", 1e9)  # only the checkpoints flush
        res = trustrl.train(tiny(tmp_path, total_steps=5 * 64, checkpoint_every=2),
                            callback=on_disk)
    assert seen == [(1, 0), (2, 2), (3, 2), (4, 4), (5, 5)]
    ck = load_safe(res.run_dir / "checkpoints" / "latest.pt")
    assert ck["iteration"] == 5 == len(_rows(res.run_dir / "metrics.csv"))
