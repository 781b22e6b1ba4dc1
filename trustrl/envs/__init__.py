"""Environment construction and checks (Gymnasium vector envs)."""

from trustrl.envs.make import EnvSpec, check_env, make_vec_env, obs_to_array

__all__ = ["EnvSpec", "check_env", "make_vec_env", "obs_to_array"]
