"""Atari preprocessing: the standard chain around an ALE env (pip install "trustrl[atari]").

For training (`atari_env(env_id, train=True)`), in order from the emulator outwards:

    gym.make(id, frameskip=1, repeat_action_probability=0.0)   ALE v5 ids; *NoFrameskip-v4 ids
                                   already have both (CleanRL's ppo_atari.py trains
                                   BreakoutNoFrameskip-v4: no sticky actions)
    EmulatorState                  the emulator's state (and RNG) pickled with the env: a
                                   checkpoint's envs go on with the same game on resume
    gymnasium AtariPreprocessing   no-op reset (1 to 30 NOOPs), frame skip 4 with the max of the
                                   last two frames, 84x84 greyscale (ALE's grey, INTER_AREA)
    RecordEpisodeStatistics        (training) the whole game's raw score and length in steps,
                                   info["episode"] when the game ends: what the collector logs
                                   as an episode (episodes.csv, ep_return_mean), not the lives
    EpisodicLife                   a lost life ends the training episode; the next reset goes on
                                   with the same game (a no-op step) until the game is over.
                                   Left out with `atari_episodic_life` false (episodic_life=
                                   False): a training episode is then the whole game, as with
                                   SB3's AtariWrapper(terminal_on_life_loss=False)
    FireReset                      presses FIRE (then action 2) after every reset, in games that
                                   have FIRE (Breakout, Pong...); where there is no EpisodicLife
                                   (evaluation, or training with `atari_episodic_life` false)
                                   also after a lost life (NOOP, FIRE, 2: what training with
                                   EpisodicLife plays there), or Breakout would stall
    SignReward                     rewards clipped to their sign (-1, 0, +1)
    gymnasium FrameStackObservation  the last 4 frames: uint8 observations (4, 84, 84)

This is the chain of CleanRL's ppo_atari.py and Stable-Baselines3's AtariWrapper plus frame
stacking, built from Gymnasium's own wrappers and the three small ones below. For evaluation
(`train=False`: `trustrl eval` and a run's greedy evaluations) EpisodicLife and SignReward are
left out: an episode is the whole game and its return the game's raw score. Frames: 4 per
step; ALE ends a game after 108,000 frames (27,000 steps; the presets' eval_max_steps).

A run applies it to every Atari id (`ALE/...`, `...NoFrameskip-v4`: `is_atari_id`) unless the
config key `atari_wrappers` is false; config.json records that key and `atari_episodic_life`,
so `trustrl eval` and `--resume` rebuild the same env. `env_kwargs` go to gym.make (and may override
repeat_action_probability, e.g. 0.25 for Machado et al.'s sticky actions), but not frameskip:
the chain skips frames itself.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from trustrl.util.errors import EnvError

NOOP_MAX = 30
FRAME_SKIP = 4
SCREEN_SIZE = 84
FRAME_STACK = 4
REPEAT_ACTION_PROBABILITY = 0.0
"""ALE v5's default is 0.25 (sticky actions); CleanRL's ppo_atari.py (NoFrameskip-v4 ids) and
rl-baselines3-zoo train without them."""


def _lives(env: gym.Env) -> int:
    return int(env.unwrapped.ale.lives())  # type: ignore[attr-defined]


class EpisodicLife(gym.Wrapper):
    """A life lost ends the episode (terminated) for the learner, the game goes on: reset()
    after such an end takes one NOOP step instead of restarting the game; after the game's own
    end (no lives left, or truncation) it resets the game."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = bool(terminated or truncated)
        lives = _lives(self.env)
        if 0 < lives < self.lives:
            terminated = True  # a life lost: the end of this training episode
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[Any, dict[str, Any]]:
        if self.game_over or seed is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:  # the same game, the next life
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(options=options)
        self.game_over = False
        self.lives = _lives(self.env)
        return obs, info


class FireReset(gym.Wrapper):
    """Games that wait for FIRE to start (Breakout, Pong...): after each reset press FIRE and
    then action 2, as DeepMind's and CleanRL's chains do. With on_life_loss (the evaluation
    chain, which has no EpisodicLife) a lost life is followed within the episode by what
    training plays at the reset after one: NOOP, FIRE, action 2 (their rewards added to the
    step's). The agent then meets the states it met in training and cannot stall a game by
    never pressing FIRE; CleanRL's evaluation does the same by keeping its training wrappers
    and reading the whole game's score."""

    def __init__(self, env: gym.Env, on_life_loss: bool = False):
        super().__init__(env)
        meanings = env.unwrapped.get_action_meanings()  # type: ignore[attr-defined]
        if len(meanings) < 3 or meanings[1] != "FIRE":
            raise ValueError(f"FireReset needs FIRE as action 1, got {meanings[:3]}")
        self.on_life_loss = on_life_loss
        self.lives = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        for action in (1, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset(options=options)
        self.lives = _lives(self.env)
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = _lives(self.env)
        if self.on_life_loss and 0 < lives < self.lives:
            for a in (0, 1, 2):
                if terminated or truncated:
                    break
                obs, r, terminated, truncated, info = self.env.step(a)
                reward += r
            lives = _lives(self.env)
        self.lives = lives
        return obs, reward, terminated, truncated, info


class EmulatorState(gym.Wrapper):
    """Carries the emulator's state through pickle (a checkpoint's mid-episode envs): ale-py's
    AtariEnv pickles as its constructor arguments (EzPickle), so unpickled alone it is a fresh
    emulator at frame 0 while the wrappers above it keep the old game's frames, lives and
    episode counters. This wrapper, the chain's innermost, adds the emulator's state with its
    RNG (`clone_state(include_rng=True)`, itself picklable) and the env's numpy generator (the
    no-op resets' draws), and restores both on unpickling: the game goes on from the same frame
    and the next reset is the one the original would make. Transparent otherwise."""

    carries_env_state = True  # trustrl.envs.make.pickle_drops_state: the pickle is whole

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        ale = self.env.unwrapped
        state["_emulator"] = ale.clone_state(include_rng=True)  # type: ignore[attr-defined]
        state["_np_random"] = ale.np_random  # the no-op resets draw from it
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        emulator, np_random = state.pop("_emulator"), state.pop("_np_random")
        self.__dict__.update(state)
        self.env.unwrapped.restore_state(emulator)  # type: ignore[attr-defined]
        self.env.unwrapped.np_random = np_random


class SignReward(gym.RewardWrapper):
    """Rewards clipped to their sign: -1, 0 or +1 (training only; scores stay raw in
    evaluation)."""

    def reward(self, reward: Any) -> float:
        return float(np.sign(reward))


def _base_id(env_id: str) -> str:
    return env_id.split(":")[-1]


def is_atari_id(env_id: Any) -> bool:
    """Whether an env id is an Atari game of ale-py: an `ALE/...` id, or an id that ale-py
    registers (`BreakoutNoFrameskip-v4`...; ale_py is imported to know, when installed)."""
    if not isinstance(env_id, str) or not env_id.strip():
        return False
    base = _base_id(env_id)
    if base.startswith("ALE/"):
        return True
    try:
        spec = gym.spec(base)
    except Exception:  # noqa: BLE001 - not registered (yet): ale_py may register it
        try:
            import ale_py

            gym.register_envs(ale_py)
            spec = gym.spec(base)
        except Exception:  # noqa: BLE001 - no ale_py, or not one of its ids
            return False
    entry = spec.entry_point if isinstance(spec.entry_point, str) else ""
    return entry.startswith("ale_py")


def atari_env(env_id: str, kwargs: dict[str, Any] | None = None, train: bool = True,
              episodic_life: bool = True) -> gym.Env:
    """The Atari env of `env_id` behind the preprocessing chain (module docstring): training
    (episodic life unless `episodic_life` is false, rewards clipped to their sign) or
    evaluation (whole games, raw scores; `episodic_life` has no effect there). EnvError in one
    line for kwargs the chain cannot take."""
    kwargs = dict(kwargs or {})
    if "frameskip" in kwargs and kwargs["frameskip"] != 1:
        raise EnvError(f"env_kwargs frameskip={kwargs['frameskip']!r}: the Atari preprocessing "
                       f"skips {FRAME_SKIP} frames itself; leave frameskip out, or set "
                       "atari_wrappers false for an env of your own making")
    kwargs["frameskip"] = 1
    import ale_py

    if not any(k.startswith("ALE/") for k in gym.registry):  # Gymnasium 1.x: on import ale_py
        gym.register_envs(ale_py)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner per env
    if _base_id(env_id).startswith("ALE/"):
        kwargs.setdefault("repeat_action_probability", REPEAT_ACTION_PROBABILITY)
    env = EmulatorState(gym.make(env_id, **kwargs))
    env = gym.wrappers.AtariPreprocessing(env, noop_max=NOOP_MAX, frame_skip=FRAME_SKIP,
                                          screen_size=SCREEN_SIZE, terminal_on_life_loss=False,
                                          grayscale_obs=True, scale_obs=False)
    lives_end_episodes = train and episodic_life
    if train:  # the whole game's raw score, as info["episode"] at its end (GAME_SCORES)
        env = gym.wrappers.RecordEpisodeStatistics(env)
    if lives_end_episodes:
        env = EpisodicLife(env)
    if "FIRE" in env.unwrapped.get_action_meanings():  # type: ignore[attr-defined]
        env = FireReset(env, on_life_loss=not lives_end_episodes)
    if train:
        env = SignReward(env)
    return gym.wrappers.FrameStackObservation(env, FRAME_STACK)


__all__ = ["EmulatorState", "EpisodicLife", "FireReset", "SignReward", "atari_env",
           "is_atari_id"]
