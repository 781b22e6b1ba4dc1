"""A new run on a machine whose Numba cache lacks its kernels (issue "One source, compiled",
point 4): with grad_backend 'auto', a run shorter than COMPILE_PAYS_STEPS trains eagerly
instead of compiling first, says so in one line, and records 'closed-form' so that its resume
runs the same code; a long run, an explicit 'compiled', a resume and a warm cache compile (or
load) as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trustrl.compute import compiled
from trustrl.learn import learners
from trustrl.settings.config import make_config

needs_numba = pytest.mark.skipif(not compiled.available(), reason="needs trustrl[compiled]")


def _learner(monkeypatch, cached: bool, cold_start: bool = True, **sets):
    monkeypatch.setattr(compiled, "run_cached",
                        lambda algo, env_id, masked=False, gym=False: cached)
    cfg = make_config("ppo", env_id="CartPole-v1",
                      sets={"num_envs": 2, "num_steps": 32, "eval_every": 0, **sets})
    return learners.BatchedLearner(cfg, [0], cold_start=cold_start)


@needs_numba
def test_a_short_new_run_on_a_cold_cache_trains_eagerly_and_says_so(monkeypatch, capsys):
    lr = _learner(monkeypatch, cached=False, total_steps=4096)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "training eagerly" in err[0], err
    assert lr.algo.backend.name == "closed-form" and not lr.fused
    assert lr.collector.rollout_kind == "numpy"
    assert lr.cfg.grad_backend == "closed-form"  # what config.json records
    lr.step()


@needs_numba
@pytest.mark.parametrize("case", ["warm", "long", "explicit", "resume"])
def test_otherwise_the_compiled_backend_runs(monkeypatch, capsys, case):
    sets = {"total_steps": learners.COMPILE_PAYS_STEPS if case == "long" else 4096}
    if case == "explicit":
        sets["grad_backend"] = "compiled"
    lr = _learner(monkeypatch, cached=case == "warm", cold_start=case != "resume", **sets)
    assert "training eagerly" not in capsys.readouterr().err
    assert lr.algo.backend.name == "compiled" and lr.fused
    assert lr.cfg.grad_backend == sets.get("grad_backend", "auto")


@needs_numba
def test_a_population_counts_every_members_steps(monkeypatch):
    steps = learners.COMPILE_PAYS_STEPS // 4
    assert _learner(monkeypatch, cached=False, total_steps=steps).algo.backend.name \
        == "closed-form"
    monkeypatch.setattr(compiled, "run_cached",
                        lambda algo, env_id, masked=False, gym=False: False)
    cfg = make_config("ppo", env_id="CartPole-v1",
                      sets={"num_envs": 2, "num_steps": 32, "eval_every": 0,
                            "total_steps": steps})
    assert learners.BatchedLearner(cfg, [0, 1, 2, 3], cold_start=True).algo.backend.name \
        == "compiled"


@needs_numba
@pytest.mark.parametrize("vector", ["auto", "sync"])
def test_the_cli_on_an_empty_numba_cache_trains_eagerly_and_records_it(tmp_path, vector):
    """Through the CLI, as a new user's first run: an empty NUMBA_CACHE_DIR, the default
    grad_backend, on either collector (auto: the batched one for CartPole; sync: the
    Gymnasium one, whose policy step the compiled backend would compile too); one note, no
    compiling, and config.json says closed-form."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    env.pop("TRUSTRL_COMPILE", None)
    p = subprocess.run([sys.executable, "-m", "trustrl", "train", "--total-steps", "2048",
                        "--vector", vector, "--runs-dir", str(tmp_path / "runs"), "--quiet",
                        "--set", "tensorboard=false", "--set", "eval_episodes=1"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    # the other line a first run at 2,048 steps says: auto's budget rule took the defaults
    notes = [ln for ln in p.stderr.splitlines() if ln.startswith("trustrl:")
             and "auto took trustrl's defaults" not in ln]
    assert len(notes) == 1 and "training eagerly" in notes[0], p.stderr
    run = Path(next(ln for ln in p.stdout.splitlines() if ln.startswith("run: "))[5:])
    assert json.loads((run / "config.json").read_text())["grad_backend"] == "closed-form"


def _gym_learner(monkeypatch, cached: bool, cold_start: bool = True, **sets):
    monkeypatch.setattr(compiled, "run_cached",
                        lambda algo, env_id, masked=False, gym=False: cached and gym)
    cfg = make_config("ppo", env_id="CartPole-v1",
                      sets={"num_envs": 2, "num_steps": 32, "eval_every": 0,
                            "vector": "sync", **sets})
    return learners.make_learner(cfg, [0], cold_start=cold_start)


@needs_numba
def test_the_gymnasium_collector_trains_eagerly_on_a_cold_cache_too(monkeypatch, capsys):
    """A short new run on the Gymnasium collector: the closed form and the module's own
    per-step policy (no compiled step), one note; warm, long or a resume: compiled as
    before (the stand-in says 'cached' only when asked about the Gymnasium path's kernels)."""
    lr = _gym_learner(monkeypatch, cached=False, total_steps=4096)
    assert isinstance(lr, learners.GymLearner)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "training eagerly" in err[0], err
    assert lr.algo.backend.name == "closed-form" and lr.cfg.grad_backend == "closed-form"
    assert lr.collector.acting is None
    lr.iterate()
    for cached, sets, cold in ((True, {}, True),
                               (False, {"total_steps": learners.COMPILE_PAYS_STEPS}, True),
                               (False, {}, False)):
        lr = _gym_learner(monkeypatch, cached=cached, cold_start=cold,
                          **{"total_steps": 4096, **sets})
        assert "training eagerly" not in capsys.readouterr().err
        assert lr.algo.backend.name == "compiled" and lr.collector.acting is not None


@needs_numba
def test_run_cached_asks_for_the_kernels_of_the_collector_the_run_uses(monkeypatch):
    """The Gymnasium path's per-step policy kernel counts for a Gymnasium run (unmasked: a
    masked run steps the module), and the batched rollout for a batched one."""
    from trustrl.compute.compiled import rollout

    cfg = make_config("ppo", env_id="CartPole-v1",
                      sets={"num_envs": 2, "num_steps": 32, "grad_backend": "compiled"})
    spec = learners.check_env("CartPole-v1")
    net = learners.population_net(learners.init_policies(spec, cfg, [0]), spec, "cpu")
    algo = learners._algorithm(cfg, net, [0], prepare=False)
    step = rollout.categorical_step
    monkeypatch.setattr(compiled, "_cached", lambda k: k is not step)
    assert not compiled.run_cached(algo, "CartPole-v1", gym=True)
    assert compiled.run_cached(algo, "CartPole-v1", masked=True, gym=True)
    assert compiled.run_cached(algo, "CartPole-v1")
    batched = compiled.compiled_rollout("CartPole-v1")._run
    monkeypatch.setattr(compiled, "_cached", lambda k: k is not batched)
    assert compiled.run_cached(algo, "CartPole-v1", gym=True)
    assert not compiled.run_cached(algo, "CartPole-v1")
