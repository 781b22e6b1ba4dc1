"""Checkpoints never crash a run: sync sub-envs that cannot be pickled (here one holding a
threading.Lock) leave the mid-episode envs out of the checkpoint, with the reason; a resume
restarts their episodes, says so once on stderr and keeps a note in status.json."""

from __future__ import annotations

import csv
import json
import pickle

import numpy as np
import pytest

import trustrl
import trustrl.learn.learners as learners
from trustrl.learn.learners import GymLearner
from trustrl.settings.config import make_config

ENV = "helper_envs:LockedCartPole-v0"
SAID = "the envs could not be saved mid-episode"
EZ = "helper_envs:EzCartPole-v0"


def tiny(tmp_path, env=ENV, **sets):
    flags = dict(total_steps=3 * 64, num_envs=2, num_steps=32, eval_every=0, eval_episodes=1,
                 tensorboard=False, checkpoint_every=1, vector="sync", minibatch_size=32,
                 update_epochs=2, runs_dir=str(tmp_path))
    flags.update(sets)
    cfg = make_config("ppo", env, flags=flags)
    cfg.resolve_vector()
    return cfg


def _iterations(run):
    with open(run / "metrics.csv") as f:
        return [int(r["iteration"]) for r in csv.DictReader(f)]


def _stopped(tmp_path, env, after, iterations):
    """A run of `iterations` batches on env, stopped after the `after`-th: its folder."""
    return trustrl.train(tiny(tmp_path, env=env, total_steps=iterations * 64),
                         callback=lambda row: row["iteration"] < after).run_dir


def test_a_run_on_unpicklable_envs_checkpoints_without_them_and_finishes(tmp_path, monkeypatch,
                                                                         capsys):
    tries = []
    dumps = pickle.dumps

    def counting(obj, *a, **k):
        if isinstance(obj, list):  # the sub-envs
            tries.append(1)
        return dumps(obj, *a, **k)

    monkeypatch.setattr(learners.pickle, "dumps", counting)
    res = trustrl.train(tiny(tmp_path))
    status = json.loads((res.run_dir / "status.json").read_text())
    assert status["status"] == "finished" and "note" not in status
    assert _iterations(res.run_dir) == [1, 2, 3]
    assert len(tries) == 1  # tried at the first checkpoint only, the failure remembered
    assert SAID not in capsys.readouterr().err  # nothing to say until a resume


def test_stopped_and_resumed_restarts_the_episodes_says_so_once_and_notes_it(tmp_path, capsys):
    res = trustrl.train(tiny(tmp_path, total_steps=5 * 64),
                        callback=lambda row: row["iteration"] < 2)
    assert json.loads((res.run_dir / "status.json").read_text())["status"] == "stopped"
    capsys.readouterr()
    again = trustrl.resume(res.run_dir)
    assert again.run_dir == res.run_dir
    assert _iterations(res.run_dir) == [1, 2, 3, 4, 5]
    status = json.loads((res.run_dir / "status.json").read_text())
    assert status["status"] == "finished"
    assert "could not be saved mid-episode" in status["note"]
    assert "cannot pickle" in status["note"] and "at iteration 2" in status["note"]
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if SAID in ln]
    assert len(lines) == 1 and err.count(SAID) == 1, err
    assert lines[0].startswith(f"trustrl: {res.run_dir}: ") and "restart their episodes" in lines[0]


def test_the_carried_observation_after_such_a_resume_is_the_fresh_reset(tmp_path):
    cfg = tiny(tmp_path)
    a = GymLearner(cfg)
    try:
        a.iterate()
        ck = a.state_dict()
    finally:
        a.close()
    assert ck["envs"] is None and "cannot pickle" in ck["envs_unpicklable"]
    b = GymLearner(cfg)
    try:
        first = np.array(b.collector.state.next_obs, copy=True)  # iteration 1's start
        b.load_state_dict(ck)
        st = b.collector.state
        # the envs were reset again, with seeds of their own: their observations are the
        # carried ones, neither the checkpoint's nor iteration 1's start states
        fresh = np.stack([e.unwrapped.state for e in b.envs.envs]).astype(np.float32)
        np.testing.assert_allclose(st.next_obs, fresh, rtol=1e-6)
        assert not np.array_equal(ck["collector"]["next_obs"], st.next_obs)
        assert not np.array_equal(first, st.next_obs)
        assert not st.ep_return.any() and not st.ep_length.any()
        assert st.global_step == ck["global_step"] and b.iteration == 1
        assert b.restart_note == ck["envs_unpicklable"]
    finally:
        b.close()


def test_an_ezpickle_env_resumes_with_fresh_episodes_instead_of_failing(tmp_path, capsys):
    """Gymnasium's Box2D, MuJoCo and Atari envs pickle as their constructor's arguments only
    (EzPickle): the pickle succeeds but comes back as an env never reset, whose step fails
    (BipedalWalker: `assert self.hull is not None`) or goes on from another state than the one
    carried. Such sub-envs are left out of the checkpoint like unpicklable ones."""
    run = _stopped(tmp_path, EZ, after=2, iterations=4)
    capsys.readouterr()
    again = trustrl.resume(run)
    assert _iterations(again.run_dir) == [1, 2, 3, 4]
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "finished"
    assert "EzCartPole pickles as its constructor's arguments only" in status["note"]
    assert capsys.readouterr().err.count(SAID) == 1


def test_box2d_and_mujoco_envs_resume(tmp_path):
    """The real envs of that kind, end to end (each where its extra is installed)."""
    import gymnasium as gym

    from trustrl.envs.make import pickle_drops_state

    ran = 0
    for env_id, module in (("BipedalWalker-v3", "Box2D"), ("InvertedPendulum-v5", "mujoco")):
        try:
            __import__(module)
        except ImportError:
            continue
        assert "EzPickle" in pickle_drops_state(gym.make(env_id))
        again = trustrl.resume(_stopped(tmp_path / env_id, env_id, after=1, iterations=3))
        assert _iterations(again.run_dir) == [1, 2, 3]
        ran += 1
    if not ran:
        pytest.skip("neither the box2d nor the mujoco extra is installed")


def test_a_checkpoint_that_holds_ezpickle_envs_from_before_still_resumes(tmp_path, monkeypatch):
    """Checkpoints written before such envs were left out hold them, stateless: a resume
    restarts their episodes instead of stepping envs that were never reset."""
    monkeypatch.setattr(learners, "pickle_drops_state", lambda env: None)  # the old writer
    run = _stopped(tmp_path, EZ, after=2, iterations=4)
    monkeypatch.undo()
    again = trustrl.resume(run)
    assert _iterations(again.run_dir) == [1, 2, 3, 4]
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "finished" and "EzCartPole pickles" in status["note"]
