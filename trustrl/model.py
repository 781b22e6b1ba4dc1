"""Models named as Stable-Baselines3 users expect: `trustrl.PPO(env, **settings)`,
`model.learn(total_timesteps)`, `model.predict(obs)`, `model.save(path)`, `PPO.load(path)`.

A model is a thin handle on the one trainer (trustrl.train): its first `learn` starts a run
folder under runs_dir as `trustrl.train` does, and each later `learn` continues that run in
this process (the same networks, optimiser state, normalisers, envs mid-episode and step
counter), so two learn(n) calls train as one learn(2n) where the schedules are constant. The
settings are the config keys of the algorithm's class (PPOConfig for PPO, ...), under the
same preset rule as every entry point (RunConfig.preset): PPO("CartPole-v1") trains with
the chapter's CartPole settings, as `trustrl train --env CartPole-v1` does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from trustrl.records.agent import Agent
from trustrl.settings.config import CONFIGS, config_from_dict, config_to_dict
from trustrl.util.errors import ConfigError, RunError

SB3_POLICIES = ("MlpPolicy", "CnnPolicy", "MultiInputPolicy")
"""SB3's policy names, taken (and ignored) as a first argument before the env: trustrl picks
the network from the observation space (MLPs, a CNN for images, both for a Dict)."""


class Model:
    """An algorithm on an env: train it with `learn`, act with `predict`, keep it with
    `save` and `load`.

    Args:
        *args: the env: a Gymnasium id, 'module:Name', an env class or function, a
            gymnasium.Env or a Gymnasium vector env (its num_envs is the model's); also
            accepted as the keyword `env`. SB3's policy name may come first:
            PPO("MlpPolicy", env).
        **settings: the algorithm's config keys (trustrl.PPOConfig's fields for PPO, ...);
            SB3's names are answered with trustrl's (learning_rate: did you mean lr?).
    """

    algo: ClassVar[str] = "ppo"

    def __init__(self, *args: Any, **settings: Any):
        if args and isinstance(args[0], str) and args[0] in SB3_POLICIES:
            args = args[1:]
        if len(args) > 1 or (not args and "env" not in settings):
            raise ConfigError(f"{type(self).__name__}(env, **settings) takes one env and "
                              "keyword settings")
        env = args[0] if args else settings.pop("env")
        if "env_id" in settings:
            raise ConfigError("give the env once: as the first argument")
        self.config = CONFIGS[self.algo](env_id=env, **settings)
        self._env = env
        self._trainer: Any = None
        self._agent: Agent | None = None
        self._vec_env: Any = None
        self._init_from: str | None = None

    # --- training ----------------------------------------------------------------------------
    def learn(self, total_timesteps: int, callback: Any = None,
              progress_bar: bool = False) -> Model:
        """Train for `total_timesteps` more env steps (summed over the envs, rounded down to
        whole iterations of num_envs * num_steps, as total_steps is).

        The first call makes the run folder (config.json, metrics.csv, checkpoints, agent.pt);
        a later call continues the same run: config.json's total_steps grows by
        total_timesteps, and the schedules (anneal_lr, anneal_clip) follow that new total from
        where the run is, as `trustrl.resume(total_steps=...)` does. Every call ends with an
        evaluation (eval.json) and agent.pt, as a finished run does.

        Args:
            total_timesteps: env steps to train for in this call.
            callback: as `trustrl.train`'s (a function of the metrics row, or callbacks of
                trustrl.training.callbacks; returning False stops the run, resumable by the next
                learn).
            progress_bar: show a progress bar on stderr.

        Returns:
            The model itself.
        """
        from trustrl.training.train import start

        cfg = self.config
        if isinstance(total_timesteps, bool) or not isinstance(total_timesteps, (int, np.integer)) \
                or total_timesteps < 1:
            raise ConfigError(f"total_timesteps must be a positive whole number, got "
                              f"{total_timesteps!r:.40}")
        if self._trainer is None:
            cfg.total_steps = int(total_timesteps)
            self._trainer = start(cfg, progress_bar, init_from=self._init_from)
            self._trainer.keep_open = True
            result = self._trainer.run(callback)
        else:
            self._trainer.show_progress = progress_bar
            self._trainer.extend(cfg.total_steps + int(total_timesteps))
            result = self._trainer.run(callback, initial_eval=False)
        self._agent = result.agent
        return self

    @property
    def num_timesteps(self) -> int:
        """Env steps trained so far (SB3's name; metrics.csv's global_step)."""
        return 0 if self._trainer is None else int(self._trainer.learner.global_step)

    @property
    def run_dir(self) -> Path | None:
        """The run folder of this model's training (None before the first learn)."""
        return None if self._trainer is None else self._trainer.root.path

    # --- acting ------------------------------------------------------------------------------
    @property
    def agent(self) -> Agent:
        """The policy and its observation normaliser (trustrl.Agent), as of the last learn
        (or load)."""
        if self._agent is None:
            raise RunError(f"this {type(self).__name__} has not learned yet: call "
                           "model.learn(total_timesteps) or load one")
        return self._agent

    @property
    def policy(self) -> Any:
        """The policy network (a torch.nn.Module)."""
        return self.agent.policy

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = False, action_masks: Any = None
                ) -> tuple[np.ndarray, np.ndarray | None]:
        """(action, state) for one observation, or (actions, state) for a batch [N, ...], as
        SB3's predict returns them: the state is a recurrent policy's (recurrent 'lstm' or
        'gru': give it back with the next observation, and episode_start where an episode
        starts), None for a memoryless one. deterministic=False samples, as SB3's default;
        True takes the mode (argmax, the Gaussian mean). Observations go in as the env
        returns them (the agent's normaliser is applied); the actions are ready for env.step.

        Args:
            observation: one observation or a batch.
            state: the recurrent state the previous call returned (None: episodes start).
            episode_start: [N] booleans, True where an episode starts (the state is reset).
            deterministic: the mode (True) or a sample (False).
            action_masks: the valid actions ([n] or [N, n] booleans, sb3-contrib's
                MaskablePPO.predict's argument); an invalid action is then never returned.
        """
        return self.agent.predict(observation, state, episode_start,
                                  deterministic=deterministic, action_masks=action_masks)

    def get_env(self) -> Any:
        """A Gymnasium vector env of the model's env (num_envs copies, same-step autoreset),
        for the model's own use; stepping it leaves the training run's envs alone."""
        if self._vec_env is None:
            from trustrl.envs.factory import env_factory
            from trustrl.envs.make import make_vec_env

            self._vec_env = make_vec_env(env_factory(self.config), self.config.num_envs, "sync")
        return self._vec_env

    # --- files -------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """The agent file (what trustrl.Agent.load and `trustrl eval` read), with the model's
        config beside it so that `load` makes the same model again.

        Args:
            path: the file to write.
        """
        from trustrl.util.safeio import save_safe

        state = self.agent.state()
        state["model"] = {"algo": self.algo, "config": config_to_dict(self.config),
                          "run_dir": None if self.run_dir is None else str(self.run_dir),
                          "num_timesteps": self.num_timesteps}
        save_safe(state, Path(path))

    @classmethod
    def load(cls, path: str | Path, env: Any = None, **settings: Any) -> Model:
        """A model from `save`'s file (or any agent file or run folder: Agent.load), on `env`
        (None: the env its config records; an env that config.json could not record must be
        given). `learn` then starts a new run from the loaded weights and observation
        statistics (init_from: the optimiser starts afresh); trustrl.resume continues the
        saved run itself.

        Args:
            path: `save`'s file, an agent file or a run folder.
            env: the env for the new model (None: the one its config records).
            **settings: config keys to change for that new run.
        """
        from trustrl.util.safeio import load_safe

        agent = Agent.load(path)
        p = Path(path)
        saved = load_safe(p, "agent file") if p.is_file() else None
        record = saved.get("model") if isinstance(saved, dict) else None
        if isinstance(record, dict) and isinstance(record.get("config"), dict):
            if record.get("algo") != cls.algo:
                raise ConfigError(f"{p} holds a {record.get('algo')} model; load it with that "
                                  f"algorithm's class, not {cls.__name__}")
            d = dict(record["config"])
            d.pop("algo", None)
            recorded = config_from_dict({**d, "algo": cls.algo})
            values = {k: getattr(recorded, k) for k in d if k != "env_id"}
            values["preset"] = recorded.preset  # a record: nothing applied again
            values.update(settings)
            model = cls(env if env is not None else recorded.env_id, **values)
        else:
            model = cls(env if env is not None else agent.spec.env_id, **settings)
        model._agent = agent
        model._init_from = str(Path(path).expanduser().resolve())
        return model

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config.env_id!r}, run_dir={self.run_dir})"


class PPO(Model):
    """PPO-clip (PPOConfig's settings)."""

    algo = "ppo"


class PPONoClip(Model):
    """PPO without the clip, the chapter's ablation (PPONoClipConfig's settings)."""

    algo = "ppo-noclip"


class PPODualClip(Model):
    """Dual-clip PPO (PPODualClipConfig's settings)."""

    algo = "ppo-dualclip"


class SPO(Model):
    """Simple Policy Optimization (SPOConfig's settings)."""

    algo = "spo"


class PPOPenalty(Model):
    """PPO with the adaptive KL penalty (PPOPenaltyConfig's settings)."""

    algo = "ppo-penalty"


class PG(Model):
    """Vanilla actor-critic policy gradient (PGConfig's settings)."""

    algo = "pg"


class TRPO(Model):
    """TRPO (TRPOConfig's settings)."""

    algo = "trpo"


class NPG(Model):
    """Natural policy gradient (NPGConfig's settings)."""

    algo = "npg"


MODELS: dict[str, type[Model]] = {m.algo: m for m in (PPO, PPONoClip, PPODualClip, PPOPenalty,
                                                      PG, TRPO, NPG, SPO)}
"""A model class per algorithm of trustrl.settings.config.CONFIGS."""

__all__ = ["MODELS", "NPG", "PG", "PPO", "PPODualClip", "PPONoClip", "PPOPenalty", "SPO", "TRPO",
           "Model", "SB3_POLICIES"]
