"""Environment construction and checks (Gymnasium vector envs)."""

from trustrl.envs.make import EnvSpec, check_env, make_vec_env, obs_to_array
from trustrl.envs.masked_pick import register as _register_masked_pick
from trustrl.envs.no_vel import register as _register_no_vel
from trustrl.envs.torch_classic import SUPPORTED as TORCH_ENVS
from trustrl.envs.torch_classic import TorchVecEnv, make_torch_env

__all__ = ["EnvSpec", "TORCH_ENVS", "TorchVecEnv", "check_env", "make_torch_env",
           "make_vec_env", "obs_to_array"]

_register_masked_pick()  # MaskedPick-v0: trustrl's env with invalid moves (docs/masking.md)
_register_no_vel()  # CartPoleNoVel-v1, PendulumNoVel-v1: velocities removed (docs/recurrent.md)
