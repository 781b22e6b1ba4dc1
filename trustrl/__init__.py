"""trustrl: trust-region reinforcement learning (PPO, TRPO, natural policy gradient)."""

from trustrl.agent import Agent
from trustrl.config import PPOConfig, make_config
from trustrl.errors import TrustrlError
from trustrl.train import TrainResult, resume, train

__version__ = "0.1.0"
__all__ = ["Agent", "PPOConfig", "TrainResult", "TrustrlError", "make_config", "resume", "train"]
