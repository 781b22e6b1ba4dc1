"""The chapter's presets: the settings of the chapter's lab (CartPole-v1) and of the blog
(Pendulum-v1), tested and reproduced (docs/results.md, docs/reproduction/). They are the
presets `trustrl train` applies on these two envs unless `--preset zoo` is asked for.

CartPole PPO: the chapter's lab settings (T = 512 = 4 envs x 128 steps, K = 10, minibatch
64, lr 1e-3 annealed to 0, gamma 0.99, lambda 0.95, eps 0.2, c1 0.5, c2 0). The ablations and
variants (ppo-noclip, ppo-dualclip, pg) keep PPO's settings so that one thing changes.

Every setting the chapter fixes is written out, normalisation included: PPO's own defaults
(for envs without a preset) normalise observations and rewards, the chapter's CartPole does
neither and the blog's Pendulum scales rewards only.
"""

from __future__ import annotations

from typing import Any

_CARTPOLE_ROLLOUT = dict(total_steps=100_000, num_envs=4, num_steps=128, gamma=0.99,
                         gae_lambda=0.95, normalize_obs=False, normalize_reward=False,
                         eval_every=10)
_PENDULUM_ROLLOUT = dict(total_steps=122_880, num_envs=4, num_steps=512, gamma=0.9,
                         gae_lambda=0.95, normalize_obs=False, normalize_reward=True,
                         eval_every=5)

PRESETS: dict[tuple[str, str], dict[str, Any]] = {
    ("ppo", "CartPole-v1"): dict(_CARTPOLE_ROLLOUT, update_epochs=10, minibatch_size=64,
                                 lr=1e-3, anneal_lr=True, clip_eps=0.2, vf_coef=0.5,
                                 ent_coef=0.0),
    ("ppo", "Pendulum-v1"): dict(_PENDULUM_ROLLOUT, update_epochs=10, minibatch_size=64,
                                 lr=1e-3, anneal_lr=True, clip_eps=0.2, vf_coef=0.5,
                                 ent_coef=0.0),
}
"""Presets per (algo, env): the chapter's and the blog's settings."""
for _env in ("CartPole-v1", "Pendulum-v1"):
    PRESETS[("ppo-noclip", _env)] = dict(PRESETS[("ppo", _env)])
    PRESETS[("ppo-dualclip", _env)] = dict(PRESETS[("ppo", _env)])
    PRESETS[("spo", _env)] = dict(PRESETS[("ppo", _env)])
    PRESETS[("pg", _env)] = {k: v for k, v in PRESETS[("ppo", _env)].items()
                             if k not in ("update_epochs", "minibatch_size")}
PRESETS[("ppo-penalty", "CartPole-v1")] = dict(
    _CARTPOLE_ROLLOUT, update_epochs=10, minibatch_size=64, lr=1e-3, kl_target=0.01)
PRESETS[("ppo-penalty", "Pendulum-v1")] = dict(
    _PENDULUM_ROLLOUT, total_steps=150_000, update_epochs=10, minibatch_size=64, lr=1e-3,
    kl_target=0.01)
PRESETS[("trpo", "CartPole-v1")] = dict(_CARTPOLE_ROLLOUT, max_kl=0.01, vf_epochs=5)
PRESETS[("trpo", "Pendulum-v1")] = dict(_PENDULUM_ROLLOUT, total_steps=150_000, max_kl=0.01,
                                        vf_epochs=5)
PRESETS[("npg", "CartPole-v1")] = dict(PRESETS[("trpo", "CartPole-v1")])
PRESETS[("npg", "Pendulum-v1")] = dict(PRESETS[("trpo", "Pendulum-v1")])
