"""trustrl: trust-region reinforcement learning (PPO, TRPO, natural policy gradient)."""

from trustrl.agent import Agent
from trustrl.config import (
    NPGConfig,
    PGConfig,
    PPOConfig,
    PPODualClipConfig,
    PPONoClipConfig,
    PPOPenaltyConfig,
    RunConfig,
    TRPOConfig,
    make_config,
)
from trustrl.errors import ConfigError, EnvError, RunError, TrustrlError
from trustrl.evaluate import evaluate
from trustrl.train import TrainResult, resume, train

__version__ = "0.1.0"
__all__ = [
    "train", "resume", "TrainResult", "Agent", "evaluate", "make_config",
    "RunConfig", "PPOConfig", "PPONoClipConfig", "PPODualClipConfig", "PPOPenaltyConfig",
    "PGConfig", "TRPOConfig", "NPGConfig",
    "TrustrlError", "ConfigError", "EnvError", "RunError",
]
