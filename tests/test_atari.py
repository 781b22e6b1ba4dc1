"""Atari (issue 15, point 3): the preprocessing chain of trustrl/envs/atari.py (training and
evaluation), its choice by env id and config key, and a tiny training run through the CLI.
Skipped where ale-py (the [atari] extra) is not installed."""

from __future__ import annotations

import importlib
import json
from types import SimpleNamespace

import numpy as np
import pytest
from test_bad_inputs import assert_bad, run_cli

pytest.importorskip("ale_py", reason="the [atari] extra (ale-py) is not installed")
pytest.importorskip("cv2", reason="the [atari] extra (opencv-python-headless) is not installed")

from trustrl.collect.evaluate import evaluation_env  # noqa: E402
from trustrl.envs.atari import SignReward, atari_env, is_atari_id  # noqa: E402
from trustrl.envs.factory import EnvFactory, env_factory  # noqa: E402

BREAKOUT = "ALE/Breakout-v5"


def _wrappers(env) -> list[str]:
    names = []
    while hasattr(env, "env"):
        names.append(type(env).__name__)
        env = env.env
    return names


def _play(env, steps: int, seed: int = 0):
    """Random actions for `steps` steps (resetting at episode ends): per episode end
    (step, lives, terminated), the rewards seen, the observations' shapes and dtypes."""
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    ends, rewards, kinds = [], [], {(obs.shape, obs.dtype)}
    for t in range(steps):
        obs, r, term, trunc, info = env.step(int(rng.integers(env.action_space.n)))
        rewards.append(r)
        kinds.add((obs.shape, obs.dtype))
        if term or trunc:
            ends.append((t, info["lives"], term))
            obs, _ = env.reset()
            kinds.add((obs.shape, obs.dtype))
    return ends, rewards, kinds


def test_observations_are_four_stacked_84x84_grey_uint8_frames():
    for train in (True, False):
        env = atari_env(BREAKOUT, train=train)
        try:
            assert env.observation_space.shape == (4, 84, 84)
            assert env.observation_space.dtype == np.uint8
            ends, _, kinds = _play(env, 40)
            assert kinds == {((4, 84, 84), np.dtype(np.uint8))}
        finally:
            env.close()
    names = _wrappers(atari_env(BREAKOUT, train=True))
    assert names == ["FrameStackObservation", "SignReward", "FireReset", "EpisodicLife",
                     "RecordEpisodeStatistics", "AtariPreprocessing", "EmulatorState",
                     "OrderEnforcing", "PassiveEnvChecker"][:len(names)]
    env = atari_env(BREAKOUT, train=True)
    assert env.unwrapped._frameskip == 1  # the chain skips frames itself
    assert env.spec.kwargs["repeat_action_probability"] == 0.0  # as NoFrameskip-v4


def test_episodic_life_in_training_whole_games_in_evaluation():
    """Random play in Breakout loses a life every few dozen steps: in training each lost
    life ends the episode (terminated, lives left > 0) and the game goes on at the next
    reset; in evaluation an episode ends only when the game does (no lives left)."""
    env = atari_env(BREAKOUT, train=True)
    ends, _, _ = _play(env, 400)
    env.close()
    assert len(ends) >= 5 and all(term for _, _, term in ends)
    lives = [lv for _, lv, _ in ends]
    assert lives[:5] == [4, 3, 2, 1, 0]  # one episode per life, the same game continued
    env = atari_env(BREAKOUT, train=False)
    ends, _, _ = _play(env, 400)
    env.close()
    assert ends and all(lv == 0 for _, lv, _ in ends)  # only the game's own end
    assert ends[0][0] > 4 * 20  # the first game outlasted several lives


def test_rewards_clipped_to_sign_in_training_only(monkeypatch):
    """The same actions from the same seed in both chains: the game goes through the same
    frames (after a lost life training's reset plays NOOP, FIRE, 2, as evaluation does within
    the episode), so step by step training's reward is the sign of evaluation's raw one.
    Raw rewards are scaled by 7 under the chain (Breakout's lower bricks are worth 1), so that
    a missing clip shows."""
    import gymnasium as gym

    step = gym.wrappers.AtariPreprocessing.step

    def scaled(self, action):
        obs, r, term, trunc, info = step(self, action)
        return obs, 7.0 * r, term, trunc, info

    monkeypatch.setattr(gym.wrappers.AtariPreprocessing, "step", scaled)
    assert [SignReward.reward(None, r) for r in (7.0, 4.0, -3.0, 0.0)] == [1, 1, -1, 0]
    actions = np.random.default_rng(1).integers(4, size=1000)
    got = {}
    for train in (True, False):
        env = atari_env(BREAKOUT, train=train)
        env.reset(seed=1)
        out = []
        for a in actions:
            _, r, term, trunc, _ = env.step(int(a))
            out.append(r)
            if term or trunc:
                env.reset()
        env.close()
        got[train] = np.array(out)
    assert (got[False] == 7.0).sum() >= 5  # raw scores in evaluation
    assert np.array_equal(got[True], np.sign(got[False]))  # their signs in training


def test_training_logs_whole_games_with_raw_scores(monkeypatch):
    """The learner's episodes are lives with clipped rewards; what the collector logs
    (episodes.csv, ep_return_mean) is each whole game with its raw score, as CleanRL's and
    SB3's Atari logs are. Raw rewards are scaled by 7 under the chain, so a clipped score
    or a life logged as a game shows."""
    import gymnasium as gym
    import torch

    from trustrl.collect.rollout import Collector
    from trustrl.envs.make import check_env, make_vec_env
    from trustrl.records.agent import Agent

    step = gym.wrappers.AtariPreprocessing.step

    def scaled(self, action):
        obs, r, term, trunc, info = step(self, action)
        return obs, 7.0 * r, term, trunc, info

    monkeypatch.setattr(gym.wrappers.AtariPreprocessing, "step", scaled)
    factory = EnvFactory(BREAKOUT, atari="train")
    spec = check_env(factory)
    gen = torch.Generator().manual_seed(0)

    class Random:  # uniform actions: a game of 5 lives lasts a few hundred steps
        def sample_step(self, obs, with_out=False):
            n = obs.shape[0]
            a = torch.randint(spec.action.n, (n,), generator=gen)
            return a, torch.zeros(n), torch.zeros(n)

        def value(self, obs):
            return torch.zeros(obs.shape[0])

    envs = make_vec_env(factory, 2)
    agent = Agent(Random(), spec, None, "cpu")
    col = Collector(envs, agent, 1200, None, Collector.start(envs, agent, 0),
                    game_episodes=True)
    r, episodes = col.collect()
    envs.close()
    lives_lost = int(r.terminated.sum())
    assert len(episodes) >= 2 and lives_lost >= 5 * len(episodes)  # games, not lives
    scores = [e.ret for e in episodes]
    assert all(s % 7 == 0 for s in scores) and max(scores) >= 7  # raw, not clipped
    assert all(e.length > 40 for e in episodes)


def test_choice_by_id_and_config_key_and_the_evaluation_chain():
    assert is_atari_id(BREAKOUT) and is_atari_id("BreakoutNoFrameskip-v4")
    assert not is_atari_id("CartPole-v1") and not is_atari_id("NoSuchEnv-v0")

    class Cfg:
        env_id, env_kwargs, wrappers = BREAKOUT, {}, []

    assert env_factory(Cfg).atari == "train"
    Cfg.atari_wrappers = False
    assert env_factory(Cfg).atari is None and env_factory(Cfg).plain_id == BREAKOUT
    assert evaluation_env(EnvFactory(BREAKOUT, atari="train")).atari == "eval"
    assert evaluation_env(BREAKOUT).atari == "eval"  # a bare Atari id given to evaluate()
    assert evaluation_env(EnvFactory(BREAKOUT)).atari is None  # atari_wrappers false stays
    assert evaluation_env("CartPole-v1") == "CartPole-v1"
    names = _wrappers(EnvFactory(BREAKOUT, atari="eval").make())
    assert "EpisodicLife" not in names and "SignReward" not in names and "FireReset" in names


def test_evaluate_plays_the_evaluation_chain(monkeypatch):
    """evaluate() (trustrl eval, the run's evaluations) turns a run's training factory or a
    bare Atari id into the evaluation chain before it makes its envs."""
    # the module (trustrl.evaluate is a function)
    ev = importlib.import_module("trustrl.collect.evaluate")

    made = []

    def capture(env, n, vector):
        made.append(env)
        raise KeyboardInterrupt  # stop before any env or network is needed

    monkeypatch.setattr(ev, "make_vec_env", capture)
    for env in (EnvFactory(BREAKOUT, atari="train"), BREAKOUT):
        with pytest.raises(KeyboardInterrupt):
            ev.evaluate(SimpleNamespace(frozen=lambda: None), env, episodes=1)
    assert [e.atari for e in made] == ["eval", "eval"]


def test_a_pickled_env_goes_on_with_the_same_game():
    """A checkpoint pickles the mid-episode envs: unpickled, the training chain continues the
    same game (frame, lives, RNG, episode counters), step for step, as the original does."""
    import pickle

    from trustrl.envs.make import pickle_drops_state

    env = atari_env(BREAKOUT, train=True)
    # so a checkpoint keeps it (the bare AtariEnv, EzPickle alone, it would leave out)
    assert pickle_drops_state(env) is None
    assert "EzPickle" in pickle_drops_state(env.unwrapped)
    rng = np.random.default_rng(3)
    env.reset(seed=3)
    for _ in range(150):
        _, _, term, trunc, _ = env.step(int(rng.integers(4)))
        if term or trunc:
            env.reset()
    twin = pickle.loads(pickle.dumps(env))
    assert (twin.unwrapped.ale.getEpisodeFrameNumber()
            == env.unwrapped.ale.getEpisodeFrameNumber() > 0)
    for _ in range(400):
        a = int(rng.integers(4))
        out, out_twin = env.step(a), twin.step(a)
        assert np.array_equal(out[0], out_twin[0]) and out[1:4] == out_twin[1:4]
        assert out[4].get("episode", {}).get("l") == out_twin[4].get("episode", {}).get("l")
        if out[2] or out[3]:
            assert np.array_equal(env.reset()[0], twin.reset()[0])


def test_train_then_eval_through_the_cli(tmp_path):
    """2 iterations of 2 envs x 16 steps on Breakout with the CleanRL preset's network: a run
    folder, config.json recording atari_wrappers, its final evaluation, and `trustrl eval`."""
    rc, out, err = run_cli(
        ["train", "ppo", "--env", BREAKOUT, "--total-steps", "64", "--runs-dir", "runs",
         "--quiet", "--set", "num_envs=2", "--set", "num_steps=16",
         "--set", "minibatch_size=16", "--set", "eval_episodes=1",
         "--set", "eval_max_steps=200", "--set", "tensorboard=false"], tmp_path)
    assert rc == 0, err
    (run,) = (tmp_path / "runs").iterdir()
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["preset"] == f"cleanrl:{BREAKOUT}" and cfg["atari_wrappers"] is True
    assert (cfg["hidden_sizes"], cfg["shared_trunk"], cfg["num_envs"]) == ([], True, 2)
    assert (run / "agent.pt").is_file() and (run / "eval.json").is_file()
    assert json.loads((run / "status.json").read_text())["status"] == "finished"
    rc, out, err = run_cli(["eval", str(run), "--episodes", "1"], tmp_path)
    assert rc == 0 and f"{BREAKOUT} greedy over 1 episodes" in out, err


def test_bad_atari_input_is_one_line(tmp_path):
    assert_bad(["train", "--env", BREAKOUT, "--set", 'env_kwargs={"frameskip": 4}',
                "--total-steps", "2048", "--runs-dir", "runs"], tmp_path,
               "skips 4 frames itself")
    assert not (tmp_path / "runs").exists()


def test_missing_opencv_names_the_atari_extra(monkeypatch, tmp_path):
    """ale-py installed, OpenCV (AtariPreprocessing's resize) missing: one line naming the
    extra, before any folder."""
    import sys

    monkeypatch.setitem(sys.modules, "cv2", None)  # import cv2 raises ImportError
    assert_bad(["train", "--env", BREAKOUT, "--runs-dir", "runs"], tmp_path,
               'pip install "trustrl[atari]"', "OpenCV")
    assert not (tmp_path / "runs").exists()


def test_check_env_knows_the_legacy_atari_ids_in_a_fresh_process():
    """A NoFrameskip-v4 id (the zoo's Atari presets name them) is known to check_env before
    anything else imported ale_py: Gymnasium 1.x registers ale-py's ids only on request.
    A fresh interpreter, so that no earlier test registered them."""
    import subprocess
    import sys

    code = ("from trustrl.envs.make import check_env; "
            "s = check_env('PongNoFrameskip-v4'); print(s.obs_kind, s.action.n)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-500:]
    assert out.stdout.split() == ["image", "6"]


# ----- atari_episodic_life false: whole games in training (SB3's terminal_on_life_loss=False) --
def _noop_game(env, steps: int):
    """NOOPs only from a seeded reset: per step (lives, terminated). Only FIRE launches
    Breakout's ball, so the game moves on from a lost life only where the chain presses it."""
    env.reset(seed=2)
    out = []
    for _ in range(steps):
        _, _, term, trunc, info = env.step(0)
        out.append((info["lives"], term))
        if term or trunc:
            break
    return out


def test_without_episodic_life_a_training_episode_is_the_whole_game():
    """atari_env(..., episodic_life=False): no EpisodicLife, so lives run out inside one
    episode (terminated only at the game's end, lives 0); FIRE is pressed after each lost
    life (an agent that never presses it still plays the game to its end); rewards stay
    clipped."""
    env = atari_env(BREAKOUT, train=True, episodic_life=False)
    names = _wrappers(env)
    assert "EpisodicLife" not in names and "SignReward" in names and "FireReset" in names
    assert "RecordEpisodeStatistics" in names
    game = _noop_game(env, 3000)
    env.close()
    lives = [lv for lv, _ in game]
    assert game[-1] == (0, True)  # the game's own end, not a stall at 4 lives
    assert not any(term for _, term in game[:-1])  # no lost life ended the episode
    assert sorted(set(lives), reverse=True) == [5, 4, 3, 2, 1, 0] and lives == sorted(
        lives, reverse=True)  # the lives decreasing within the one episode
    for seed in range(3):  # random play: a game lasts about 100-250 steps, ~2 points in 100
        env = atari_env(BREAKOUT, train=True, episodic_life=False)
        ends, rewards, _ = _play(env, 1000, seed)
        env.close()
        assert ends and all(lv == 0 and term for _, lv, term in ends), seed
        assert set(rewards) <= {-1.0, 0.0, 1.0} and 1.0 in rewards, seed
    # the default: the first lost life ends the episode
    env = atari_env(BREAKOUT, train=True)
    game = _noop_game(env, 3000)
    env.close()
    assert game[-1] == (4, True)


def test_the_config_key_reaches_the_factory_and_survives_pickle():
    import pickle

    import trustrl
    from trustrl.settings.config import config_from_dict, config_to_dict

    class Cfg:
        env_id, env_kwargs, wrappers = BREAKOUT, {}, []

    assert env_factory(Cfg).episodic_life is True  # the default
    Cfg.atari_episodic_life = False
    factory = env_factory(Cfg)
    assert (factory.atari, factory.episodic_life) == ("train", False)
    twin = pickle.loads(pickle.dumps(factory))  # what Ray runners and async workers receive
    assert (twin.atari, twin.episodic_life) == ("train", False)
    assert "EpisodicLife" not in _wrappers(twin.make())
    assert "EpisodicLife" in _wrappers(EnvFactory(BREAKOUT, atari="train").make())
    evaluated = evaluation_env(factory)  # evaluation: the same chain either way
    assert _wrappers(evaluated.make()) == _wrappers(EnvFactory(BREAKOUT, atari="eval").make())
    Cfg.atari_wrappers = False  # no Atari chain: nothing to leave out (no error)
    assert env_factory(Cfg).plain_id == BREAKOUT
    model = trustrl.PPO(BREAKOUT, atari_episodic_life=False)  # the Python API
    assert env_factory(model.config).episodic_life is False
    saved = config_to_dict(model.config)
    assert saved["atari_episodic_life"] is False
    assert env_factory(config_from_dict(saved)).episodic_life is False  # resume's way
    with pytest.raises(trustrl.ConfigError, match="atari_episodic_life"):
        trustrl.PPO(BREAKOUT, atari_episodic_life="maybe").config.validate()


def test_cli_trains_resumes_and_evaluates_without_episodic_life(tmp_path, monkeypatch):
    """`--set atari_episodic_life=false` on the zoo's NoFrameskip-v4 id, kept tiny: config.json
    records it, the learner's envs are made without EpisodicLife, and `--resume` (extending
    the run) and `trustrl eval` rebuild the run from its folder."""
    learners = importlib.import_module("trustrl.learn.learners")
    made = []
    real = learners.env_factory

    def recording(cfg):
        made.append(real(cfg))
        return made[-1]

    monkeypatch.setattr(learners, "env_factory", recording)
    env_id = "BreakoutNoFrameskip-v4"
    rc, out, err = run_cli(
        ["train", "ppo", "--env", env_id, "--total-steps", "64", "--runs-dir", "runs",
         "--quiet", "--set", "atari_episodic_life=false", "--set", "num_envs=2",
         "--set", "num_steps=16", "--set", "minibatch_size=16", "--set", "eval_episodes=1",
         "--set", "eval_max_steps=200", "--set", "tensorboard=false"], tmp_path)
    assert rc == 0, err
    (run,) = (tmp_path / "runs").iterdir()
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["atari_episodic_life"] is False and cfg["atari_wrappers"] is True
    assert [(f.atari, f.episodic_life) for f in made] == [("train", False)]
    rc, out, err = run_cli(["train", "--resume", str(run), "--total-steps", "96", "--quiet"],
                           tmp_path)
    assert rc == 0, err
    assert [(f.atari, f.episodic_life) for f in made] == [("train", False)] * 2
    rc, out, err = run_cli(["eval", str(run), "--episodes", "1"], tmp_path)
    assert rc == 0 and f"{env_id} " in out, err


def test_bad_atari_episodic_life_is_one_line(tmp_path):
    assert_bad(["train", "--env", BREAKOUT, "--set", "atari_episodic_life=maybe",
                "--total-steps", "64", "--runs-dir", "runs"], tmp_path, "atari_episodic_life",
               "'maybe' is not true or false")
    assert not (tmp_path / "runs").exists()
