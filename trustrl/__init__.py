"""trustrl: trust-region reinforcement learning (PPO, TRPO, natural policy gradient)."""

from trustrl.collect.evaluate import evaluate
from trustrl.envs.factory import EnvFactory
from trustrl.model import NPG, PG, PPO, SPO, TRPO, Model, PPODualClip, PPONoClip, PPOPenalty
from trustrl.records.agent import Agent
from trustrl.settings.config import (
    NPGConfig,
    PGConfig,
    PPOConfig,
    PPODualClipConfig,
    PPONoClipConfig,
    PPOPenaltyConfig,
    RunConfig,
    SPOConfig,
    TRPOConfig,
    make_config,
)
from trustrl.training.callbacks import (
    Callback,
    CheckpointCallback,
    EvalCallback,
    StopOnNoImprovement,
    StopOnReward,
)
from trustrl.training.train import TrainResult, resume, train
from trustrl.util.errors import ConfigError, EnvError, ObservationError, RunError, TrustrlError

__version__ = "0.1.0"
__all__ = [
    "train", "resume", "TrainResult", "Agent", "evaluate", "make_config",
    "RunConfig", "PPOConfig", "PPONoClipConfig", "PPODualClipConfig", "PPOPenaltyConfig",
    "PGConfig", "TRPOConfig", "NPGConfig", "SPOConfig",
    "TrustrlError", "ConfigError", "EnvError", "RunError", "EnvFactory",
    "Model", "PPO", "PPONoClip", "PPODualClip", "PPOPenalty", "SPO", "PG", "TRPO", "NPG",
    "Callback", "EvalCallback", "StopOnReward", "StopOnNoImprovement", "CheckpointCallback",
    "ObservationError",
]
