"""CleanRL's Atari PPO setting as trustrl presets, for the ALE v5 ids.

Source: `cleanrl/ppo_atari.py` of github.com/vwxyzjn/cleanrl (its `Args` defaults; the same at
commit fe8d8a03c41a7ef5b523e2e354bd01c363e786bb, the CleanRL of benchmarks/PEERS_SETUP.md, and
at 09f7a7f2f803): 8 envs x 128 steps, 4 epochs of 4 minibatches (256 samples), Adam lr 2.5e-4
(eps 1e-5) annealed linearly to 0, gamma 0.99, GAE lambda 0.95, advantages normalised per
minibatch, clip 0.1 (constant), value loss clipped with the same 0.1, entropy 0.01, value
coefficient 0.5, gradient norm 0.5, no target KL, 10M steps (of the agent: 40M frames).
Network: Mnih et al.'s NatureCNN (32 8x8/4, 64 4x4/2, 64 3x3/1, linear 512, ReLU; orthogonal
init, sqrt(2)) shared by a policy head (gain 0.01) and a value head (gain 1), on the stacked
frames scaled by 1/255: trustrl's shared_trunk with no hidden layers behind its NatureCNN
extractor.

Env: ppo_atari.py trains BreakoutNoFrameskip-v4 behind SB3's Atari wrappers (at fe8d8a03
their copy, cleanrl_utils/atari_wrappers.py); trustrl's atari_wrappers chain
(trustrl.envs.atari) is the same preprocessing, on the v5 id with frameskip 1 and no sticky
actions (which is what NoFrameskip-v4 is).

trustrl's own choices, not CleanRL's: no greedy evaluation during training (eval_every 0:
CleanRL evaluates nothing while it trains; the final one stays), evaluation episodes up to
ALE's 108,000-frame cap (eval_max_steps 27,000).
"""

from __future__ import annotations

from typing import Any

CLEANRL_SOURCE = ("vwxyzjn/cleanrl cleanrl/ppo_atari.py (Args defaults; the same at "
                  "fe8d8a03c41a and 09f7a7f2f803)")
"""Where the numbers come from."""

PPO_ATARI: dict[str, Any] = dict(
    num_envs=8, num_steps=128, total_steps=10_000_000, lr=2.5e-4, anneal_lr=True,
    adam_eps=1e-5, update_epochs=4, minibatch_size=256, gamma=0.99, gae_lambda=0.95,
    norm_adv=True, clip_eps=0.1, clip_value_loss=True, ent_coef=0.01, vf_coef=0.5,
    max_grad_norm=0.5, target_kl=None, normalize_obs=False, normalize_reward=False,
    hidden_sizes=(), shared_trunk=True, ortho_init=True, atari_wrappers=True,
    atari_episodic_life=True,
    eval_every=0, eval_max_steps=27_000,
)
"""ppo_atari.py's setting in trustrl's keys."""

ATARI_GAMES = ("Breakout", "Pong", "BeamRider", "Asteroids", "Enduro", "MsPacman", "Qbert",
               "RoadRunner", "Seaquest", "SpaceInvaders")
"""ALE/<game>-v5 ids given the preset: CleanRL's published ppo_atari games (Breakout, Pong,
BeamRider) and the rest of rl-baselines3-zoo's Atari benchmark (the same setting for all)."""

CLEANRL_PRESETS: dict[tuple[str, str], dict[str, Any]] = {
    ("ppo", f"ALE/{game}-v5"): dict(PPO_ATARI) for game in ATARI_GAMES}
"""The CleanRL presets by (algo, env id)."""

__all__ = ["ATARI_GAMES", "CLEANRL_PRESETS", "CLEANRL_SOURCE", "PPO_ATARI"]
