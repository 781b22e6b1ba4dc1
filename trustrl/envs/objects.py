"""Env objects (gym.Env, vector envs) as Stable-Baselines3 users pass them: written in
trustrl.envs.factory (one module, no import cycle); the names are kept here for imports."""

from trustrl.envs.factory import (  # noqa: F401
    ENV_OBJECT,
    EnvCopies,
    describe,
    is_env_object,
    take_env_object,
)
