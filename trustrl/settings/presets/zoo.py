"""rl-baselines3-zoo's tuned settings as trustrl presets: the numbers, their sources, and the
one mapping from the zoo's keys onto trustrl's config keys.

Sources (every number below comes from one of these; nothing else is copied):

- PPO: `hyperparams/ppo.yml` of DLR-RM/rl-baselines3-zoo at commit 22e3ff2450fd (2026-04-23,
  rl_zoo3 2.9.0a2), the `atari` block for the Atari games.
- TRPO: `hyperparams/trpo.yml` of the same commit (sb3-contrib's TRPO, tuned by the zoo).
- What a zoo entry leaves out is the algorithm's default: Stable-Baselines3 2.9.2's `PPO`
  (learning_rate 3e-4, n_steps 2048, batch_size 64, n_epochs 10, gamma 0.99, gae_lambda 0.95,
  clip_range 0.2, ent_coef 0, vf_coef 0.5, max_grad_norm 0.5; Adam eps 1e-5; separate 64x64
  tanh MLPs, orthogonal init, log std 0), sb3-contrib 2.x's `TRPO` (learning_rate 1e-3 for the
  critic, n_steps 2048, batch_size 128, gamma 0.99, gae_lambda 0.95, cg_max_steps 15,
  cg_damping 0.1, line_search_shrinking_factor 0.8, line_search_max_iter 10,
  n_critic_updates 10, target_kl 0.01, sub_sampling_factor 1) and the zoo's own (n_envs 1,
  n_timesteps 1e6 from the `default` block; VecNormalize clips at 10 and discounts with the
  algorithm's gamma).

The mapping (`to_config`), the same for every env:

    n_envs -> num_envs            n_steps -> num_steps          n_timesteps -> total_steps
    batch_size -> minibatch_size (PPO) or vf_minibatch_size (TRPO), at most the batch
                  n_envs * n_steps (SB3 then takes the whole batch as one minibatch)
    n_epochs -> update_epochs     gamma, gae_lambda, ent_coef, max_grad_norm: same
    vf_coef X -> vf_coef 2X       SB3's value loss is X * mean((V - R)^2), trustrl's
                                  vf_coef * 0.5 * mean((V - R)^2): 2X is the same objective
                                  (the same gradient in a shared CNN and in the global norm
                                  that max_grad_norm clips)
    learning_rate X -> lr X, anneal_lr false; lin_X -> lr X, anneal_lr true (linear to 0)
                  (TRPO: the critic's Adam, vf_lr; TRPO's actor step is the trust region)
    clip_range X -> clip_eps X, anneal_clip false; lin_X -> clip_eps X, anneal_clip true
                  (linear to 0 on the learning rate's horizon, as SB3's schedules)
    normalize true -> normalize_obs and normalize_reward, obs_clip 10, reward_clip 10
    policy_kwargs: net_arch pi/vf [w, w] -> hidden_sizes (w, w), shared_trunk false;
                  activation_fn ReLU -> activation relu; log_std_init; ortho_init
    policy CnnPolicy -> hidden_sizes () and shared_trunk true (SB3's CNN policy: one
                  NatureCNN shared by the two heads, no hidden layers after it); trustrl
                  puts its NatureCNN in front of image observations itself
    env_wrapper AtariWrapper with frame_stack 4 -> atari_wrappers and atari_episodic_life
                  true (trustrl.envs.atari: the same no-op reset, frame skip 4 with
                  max-pooling, episodic life, fire reset, 84x84 grey frames, reward sign;
                  then 4 stacked frames) and
                  eval_deterministic false: the zoo evaluates Atari agents with sampled
                  actions (rl_zoo3/exp_manager.py, deterministic_eval = not is_atari).
                  ppo.yml names the wrapper with no keywords: SB3's terminal_on_life_loss
                  True, which is atari_episodic_life true (hyperparams/ppo_lstm.yml's
                  terminal_on_life_loss False would be atari_episodic_life false; no
                  preset here comes from that file, and an env_wrapper with keywords
                  has no mapping)
    TRPO: target_kl -> max_kl, cg_max_steps -> cg_iters, cg_damping -> damping,
          line_search_shrinking_factor -> backtrack_ratio, line_search_max_iter ->
          backtrack_iters, n_critic_updates -> vf_epochs, sub_sampling_factor ->
          fisher_subsample (1 unless given)

Every preset also sets the keys whose trustrl default could differ from SB3's (Adam eps,
network, normalisation off, advantage normalisation), so that it keeps meaning the zoo's
setting if trustrl's generic defaults change; and eval_every, the one bookkeeping key: an
evaluation about every 25,000 steps, the zoo's `--eval-freq` default (trustrl's choice, not
a tuned number).

Zoo settings with no trustrl key, left out (each env's `notes` says which):

- use_sde / sde_sample_freq (Pendulum-v1 and MountainCarContinuous-v0 for PPO and TRPO):
  generalised state-dependent exploration; trustrl samples independent Gaussian noise.
  MountainCarContinuous's PPO setting (20k steps, log std -3.29) leans on it, so expect the
  sweep to say it does not reach the zoo's score without it.
- Atari (`atari` block: SB3's AtariWrapper, frame_stack 4, CnnPolicy): mapped as above onto
  trustrl's Atari chain, which differs from SB3's in small ways named in each game's notes:
  the grey frame is ALE's own (SB3 converts the RGB frame with OpenCV), the frame stack
  starts filled with the first frame (SB3's VecFrameStack with zeros), and evaluation plays
  whole games with raw scores (trustrl.envs.atari). `unusable` (a preset written out but
  refused with its reason) is kept for settings trustrl cannot run; none is at present.

Envs the zoo tunes PPO for that are not here: CarRacing-v3 (its setting rests on the zoo's
own frame-skip and resize wrappers, 2 stacked frames, gSDE and GELU activations, none of
which trustrl has as keys), the PyBullet envs (*BulletEnv-v0: PyBullet
is not a Gymnasium 1.x env package), MiniGrid (needs the minigrid package and its
FlatObsWrapper). The zoo's MuJoCo settings are for v4 ids (v2 for HumanoidStandup,
InvertedDoublePendulum, InvertedPendulum and Reacher, which need mujoco-py): each is applied
unchanged to the v4 and v5 ids that run on Gymnasium 1.x's `mujoco` bindings, and its notes
say so. LunarLander and BipedalWalker entries are the zoo's v3 ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ZOO_REPO = "DLR-RM/rl-baselines3-zoo"
ZOO_COMMIT = "22e3ff2450fd92033f7f032915e1f64894a09584"
SOURCES = {
    "ppo": f"{ZOO_REPO} hyperparams/ppo.yml @ {ZOO_COMMIT[:12]} (rl_zoo3 2.9.0a2)",
    "trpo": f"{ZOO_REPO} hyperparams/trpo.yml @ {ZOO_COMMIT[:12]} (rl_zoo3 2.9.0a2)",
}
"""Where each algorithm's numbers come from."""
DEFAULTS_SOURCE = {"ppo": "stable-baselines3 2.9.2 PPO's defaults and the zoo's",
                   "trpo": "sb3-contrib 2.x TRPO's defaults and the zoo's"}

EVAL_EVERY_STEPS = 25_000
"""The zoo's default evaluation interval (rl_zoo3/train.py --eval-freq) in env steps."""

_ZOO_DEFAULTS: dict[str, dict[str, Any]] = {
    "ppo": dict(n_envs=1, n_timesteps=1e6, learning_rate=3e-4, n_steps=2048, batch_size=64,
                n_epochs=10, gamma=0.99, gae_lambda=0.95, clip_range=0.2, ent_coef=0.0,
                vf_coef=0.5, max_grad_norm=0.5, normalize=False),
    "trpo": dict(n_envs=1, n_timesteps=1e6, learning_rate=1e-3, n_steps=2048, batch_size=128,
                 gamma=0.99, gae_lambda=0.95, cg_max_steps=15, cg_damping=0.1,
                 line_search_shrinking_factor=0.8, line_search_max_iter=10,
                 n_critic_updates=10, target_kl=0.01, normalize=False),
}
"""What a zoo entry leaves out (see the module's docstring for the sources)."""

_LEFT_OUT = {
    "use_sde": "use_sde (gSDE exploration; trustrl samples independent Gaussian noise)",
    "sde_sample_freq": None,  # goes with use_sde
}
"""Zoo keys with no trustrl key: how the env's notes name them."""

# policy_kwargs of the zoo's tuned MuJoCo settings, as data
_RELU_256 = dict(log_std_init=-2, ortho_init=False, activation_fn="relu", net_arch=(256, 256))


@dataclass(frozen=True)
class ZooEntry:
    """One env's zoo setting for one algorithm: the zoo's numbers under the zoo's keys."""

    algo: str
    env_id: str
    zoo: dict[str, Any]
    zoo_id: str = ""
    """The zoo's env id where it differs from env_id (a v4 setting applied to v5, ...)."""
    unusable: str | None = None
    """Why the preset cannot run in trustrl yet (None: it can)."""
    notes: tuple[str, ...] = field(default=())

    @property
    def source(self) -> str:
        where = self.zoo_id or self.env_id
        block = "the `atari` block" if where == "atari" else f"entry {where}"
        return (f"{SOURCES[self.algo]}, {block}; the keys it leaves out: "
                f"{DEFAULTS_SOURCE[self.algo]}")


def _lin(v: Any) -> tuple[float, bool]:
    """A zoo learning rate or clip range: X -> (X, False), 'lin_X' -> (X, True)."""
    if isinstance(v, str):
        if not v.startswith("lin_"):
            raise ValueError(f"unknown zoo schedule {v!r}")
        return float(v[4:]), True
    return float(v), False


def to_config(algo: str, zoo: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The trustrl config keys for a zoo setting (the zoo's defaults filled in), and the zoo
    keys left out (no trustrl key). Raises ValueError on a zoo key it does not know."""
    z = dict(_ZOO_DEFAULTS[algo], **zoo)
    left_out = []
    for key in list(z):
        if key in _LEFT_OUT:
            v = z.pop(key)
            if _LEFT_OUT[key] and (key != "use_sde" or v):
                left_out.append(_LEFT_OUT[key].format(v=v))
    n_envs, n_steps, total = int(z.pop("n_envs")), int(z.pop("n_steps")), z.pop("n_timesteps")
    if not float(total).is_integer():
        raise ValueError(f"n_timesteps {total} is not a whole number")
    batch = n_envs * n_steps
    out: dict[str, Any] = dict(num_envs=n_envs, num_steps=n_steps, total_steps=int(total),
                               gamma=float(z.pop("gamma")), gae_lambda=float(z.pop("gae_lambda")),
                               norm_adv=True, adam_eps=1e-5)
    normalize = bool(z.pop("normalize"))
    out.update(normalize_obs=normalize, normalize_reward=normalize)
    if normalize:
        out.update(obs_clip=10.0, reward_clip=10.0)
    policy = z.pop("policy", "MlpPolicy")
    wrapper, stack = z.pop("env_wrapper", None), z.pop("frame_stack", None)
    if (wrapper, stack) == ("AtariWrapper", 4):
        out.update(atari_wrappers=True, atari_episodic_life=True, eval_deterministic=False)
    elif (wrapper, stack) != (None, None):
        raise ValueError(f"env_wrapper {wrapper} with frame_stack {stack} has no mapping")
    pk = dict(z.pop("policy_kwargs", {}))
    out.update(hidden_sizes=tuple(pk.pop("net_arch", (64, 64))),
               activation=pk.pop("activation_fn", "tanh"),
               log_std_init=float(pk.pop("log_std_init", 0.0)),
               ortho_init=bool(pk.pop("ortho_init", True)), shared_trunk=False)
    if pk:
        raise ValueError(f"unknown policy_kwargs {sorted(pk)}")
    if policy == "CnnPolicy":
        out.update(hidden_sizes=(), shared_trunk=True)
    elif policy != "MlpPolicy":
        raise ValueError(f"unknown zoo policy {policy!r}")
    lr, anneal = _lin(z.pop("learning_rate"))
    minibatch = min(int(z.pop("batch_size")), batch)
    if algo == "ppo":
        clip, clip_lin = _lin(z.pop("clip_range"))
        out.update(lr=lr, anneal_lr=anneal, anneal_clip=clip_lin, minibatch_size=minibatch,
                   update_epochs=int(z.pop("n_epochs")), clip_eps=clip,
                   ent_coef=float(z.pop("ent_coef")), vf_coef=2.0 * float(z.pop("vf_coef")),
                   max_grad_norm=float(z.pop("max_grad_norm")), target_kl=None,
                   clip_value_loss=False)
    elif algo == "trpo":
        if anneal:
            raise ValueError("a TRPO critic learning-rate schedule has no trustrl key")
        out.update(fisher_subsample=int(z.pop("sub_sampling_factor", 1)), vf_lr=lr,
                   vf_minibatch_size=minibatch,
                   vf_epochs=int(z.pop("n_critic_updates")),
                   max_kl=float(z.pop("target_kl")), cg_iters=int(z.pop("cg_max_steps")),
                   damping=float(z.pop("cg_damping")),
                   backtrack_ratio=float(z.pop("line_search_shrinking_factor")),
                   backtrack_iters=int(z.pop("line_search_max_iter")))
    else:
        raise ValueError(f"the zoo has no {algo} settings")
    if z:
        raise ValueError(f"zoo keys with no mapping: {sorted(z)}")
    out["eval_every"] = max(1, round(EVAL_EVERY_STEPS / batch))
    return out, left_out


# ----- PPO: hyperparams/ppo.yml -----------------------------------------------------------
_PPO: dict[str, dict[str, Any]] = {
    "CartPole-v1": dict(n_envs=8, n_timesteps=1e5, n_steps=32, batch_size=256, gae_lambda=0.8,
                        gamma=0.98, n_epochs=20, ent_coef=0.0, learning_rate="lin_0.001",
                        clip_range="lin_0.2"),
    "Pendulum-v1": dict(n_envs=4, n_timesteps=1e5, n_steps=1024, gae_lambda=0.95, gamma=0.9,
                        n_epochs=10, ent_coef=0.0, learning_rate=1e-3, clip_range=0.2,
                        use_sde=True, sde_sample_freq=4),
    "MountainCar-v0": dict(normalize=True, n_envs=16, n_timesteps=1e6, n_steps=16,
                           gae_lambda=0.98, gamma=0.99, n_epochs=4, ent_coef=0.0),
    "MountainCarContinuous-v0": dict(
        normalize=True, n_envs=1, n_timesteps=20_000, batch_size=256, n_steps=8, gamma=0.9999,
        learning_rate=7.77e-05, ent_coef=0.00429, clip_range=0.1, n_epochs=10, gae_lambda=0.9,
        max_grad_norm=5, vf_coef=0.19, use_sde=True,
        policy_kwargs=dict(log_std_init=-3.29, ortho_init=False)),
    "Acrobot-v1": dict(normalize=True, n_envs=16, n_timesteps=1e6, n_steps=256,
                       gae_lambda=0.94, gamma=0.99, n_epochs=4, ent_coef=0.0),
    "BipedalWalker-v3": dict(normalize=True, n_envs=32, n_timesteps=5e6, n_steps=2048,
                             batch_size=64, gae_lambda=0.95, gamma=0.999, n_epochs=10,
                             ent_coef=0.0, learning_rate=3e-4, clip_range=0.18),
    "BipedalWalkerHardcore-v3": dict(normalize=True, n_envs=16, n_timesteps=10e7, n_steps=2048,
                                     batch_size=64, gae_lambda=0.95, gamma=0.99, n_epochs=10,
                                     ent_coef=0.001, learning_rate="lin_2.5e-4",
                                     clip_range="lin_0.2"),
    "LunarLander-v3": dict(n_envs=16, n_timesteps=1e6, n_steps=1024, batch_size=64,
                           gae_lambda=0.98, gamma=0.999, n_epochs=4, ent_coef=0.01),
    "LunarLanderContinuous-v3": dict(n_envs=16, n_timesteps=1e6, n_steps=1024, batch_size=64,
                                     gae_lambda=0.98, gamma=0.999, n_epochs=4, ent_coef=0.01),
}
"""The zoo's PPO entries for the classic-control and Box2D envs, by env id."""

_PPO_MUJOCO: dict[str, dict[str, Any]] = {
    # `mujoco-defaults`: normalize, 1e6 steps, everything else SB3's default
    "Ant-v4": dict(normalize=True, n_timesteps=1e6),
    "Swimmer-v4": dict(normalize=True, n_timesteps=1e6, gamma=0.9999, n_envs=4, n_steps=1024,
                       batch_size=256, learning_rate=6e-4, gae_lambda=0.98),
    "HalfCheetah-v4": dict(normalize=True, n_envs=1, n_timesteps=1e6, batch_size=64,
                           n_steps=512, gamma=0.98, learning_rate=2.0633e-05,
                           ent_coef=0.000401762, clip_range=0.1, n_epochs=20, gae_lambda=0.92,
                           max_grad_norm=0.8, vf_coef=0.58096, policy_kwargs=_RELU_256),
    "Hopper-v4": dict(normalize=True, n_envs=1, n_timesteps=1e6, batch_size=32, n_steps=512,
                      gamma=0.999, learning_rate=9.80828e-05, ent_coef=0.00229519,
                      clip_range=0.2, n_epochs=5, gae_lambda=0.99, max_grad_norm=0.7,
                      vf_coef=0.835671, policy_kwargs=_RELU_256),
    "HumanoidStandup-v2": dict(normalize=True, n_envs=1, n_timesteps=1e7, batch_size=32,
                               n_steps=512, gamma=0.99, learning_rate=2.55673e-05,
                               ent_coef=3.62109e-06, clip_range=0.3, n_epochs=20,
                               gae_lambda=0.9, max_grad_norm=0.7, vf_coef=0.430793,
                               policy_kwargs=_RELU_256),
    "Humanoid-v4": dict(normalize=True, n_envs=1, n_timesteps=1e7, batch_size=256,
                        n_steps=512, gamma=0.95, learning_rate=3.56987e-05,
                        ent_coef=0.00238306, clip_range=0.3, n_epochs=5, gae_lambda=0.9,
                        max_grad_norm=2, vf_coef=0.431892, policy_kwargs=_RELU_256),
    "InvertedDoublePendulum-v2": dict(normalize=True, n_envs=1, n_timesteps=1e6,
                                      batch_size=512, n_steps=128, gamma=0.98,
                                      learning_rate=0.000155454, ent_coef=1.05057e-06,
                                      clip_range=0.4, n_epochs=10, gae_lambda=0.8,
                                      max_grad_norm=0.5, vf_coef=0.695929),
    "InvertedPendulum-v2": dict(normalize=True, n_envs=1, n_timesteps=1e6, batch_size=64,
                                n_steps=32, gamma=0.999, learning_rate=0.000222425,
                                ent_coef=1.37976e-07, clip_range=0.4, n_epochs=5,
                                gae_lambda=0.9, max_grad_norm=0.3, vf_coef=0.19816),
    "Reacher-v2": dict(normalize=True, n_envs=1, n_timesteps=1e6, batch_size=32, n_steps=512,
                       gamma=0.9, learning_rate=0.000104019, ent_coef=7.52585e-08,
                       clip_range=0.3, n_epochs=5, gae_lambda=1.0, max_grad_norm=0.9,
                       vf_coef=0.950368),
    "Walker2d-v4": dict(normalize=True, n_envs=1, n_timesteps=1e6, batch_size=32, n_steps=512,
                        gamma=0.99, learning_rate=5.05041e-05, ent_coef=0.000585045,
                        clip_range=0.1, n_epochs=20, gae_lambda=0.95, max_grad_norm=1,
                        vf_coef=0.871923),
}
"""The zoo's PPO entries for MuJoCo, under the zoo's ids (applied to the v4 and v5 ids)."""

_PPO_ATARI = dict(env_wrapper="AtariWrapper", frame_stack=4, policy="CnnPolicy", n_envs=8,
                  n_steps=128, n_epochs=4, batch_size=256, n_timesteps=1e7,
                  learning_rate="lin_2.5e-4", clip_range="lin_0.1", vf_coef=0.5,
                  ent_coef=0.01)
"""The zoo's `atari` block (every ALE game without an entry of its own)."""

ATARI_GAMES = ("Asteroids", "BeamRider", "Breakout", "Enduro", "MsPacman", "Pong", "Qbert",
               "RoadRunner", "Seaquest", "SpaceInvaders")
"""The games of the zoo's published PPO benchmark (benchmark.md), as NoFrameskip-v4 ids."""

ATARI_NOTES = ("Atari preprocessing: trustrl's chain (trustrl.envs.atari) for SB3's "
               "AtariWrapper and VecFrameStack(4): ALE's grey frame (SB3: OpenCV's of the RGB "
               "frame), the first stack filled with the first frame (SB3: zeros); evaluation "
               "plays whole games with raw scores",)

# ----- TRPO: hyperparams/trpo.yml ---------------------------------------------------------
_TRPO_MUJOCO_DEFAULTS = dict(normalize=True, n_envs=2, n_timesteps=2e6, batch_size=128,
                             n_steps=1024, gamma=0.99, gae_lambda=0.95, sub_sampling_factor=1,
                             cg_max_steps=25, cg_damping=0.1, n_critic_updates=20,
                             learning_rate=1e-3)
"""trpo.yml's `pybullet-defaults`, which its MuJoCo and BipedalWalker entries extend."""

_TRPO: dict[str, dict[str, Any]] = {
    "CartPole-v1": dict(n_envs=2, n_timesteps=1e5, n_steps=512, batch_size=512,
                        cg_damping=1e-3, gae_lambda=0.98, gamma=0.99, learning_rate=1e-3,
                        n_critic_updates=20),
    "Pendulum-v1": dict(n_envs=2, n_timesteps=1e5, n_steps=1024, gamma=0.9,
                        n_critic_updates=15, use_sde=True, sde_sample_freq=4),
    "LunarLander-v3": dict(n_envs=2, n_timesteps=2e5, n_steps=512, cg_damping=0.01,
                           gae_lambda=0.98, gamma=0.99, learning_rate=1e-3,
                           n_critic_updates=15),
    "LunarLanderContinuous-v3": dict(normalize=True, n_envs=2, n_timesteps=1e5, n_steps=1024,
                                     n_critic_updates=20),
    "Acrobot-v1": dict(normalize=True, n_envs=2, n_timesteps=1e5, n_steps=1024),
    "MountainCar-v0": dict(normalize=True, n_envs=2, n_timesteps=1e5, n_steps=1024,
                           n_critic_updates=20),
    "MountainCarContinuous-v0": dict(normalize=True, n_envs=2, n_timesteps=50_000,
                                     use_sde=True, sde_sample_freq=4),
    "Ant-v4": dict(_TRPO_MUJOCO_DEFAULTS, n_timesteps=1e6),
    "HalfCheetah-v4": dict(_TRPO_MUJOCO_DEFAULTS, n_timesteps=1e6, target_kl=0.04),
    "Hopper-v4": dict(_TRPO_MUJOCO_DEFAULTS, n_timesteps=1e6),
    "Walker2d-v4": dict(_TRPO_MUJOCO_DEFAULTS, n_timesteps=1e6),
    "Humanoid-v4": dict(_TRPO_MUJOCO_DEFAULTS, n_timesteps=2e6),
    "Swimmer-v4": dict(_TRPO_MUJOCO_DEFAULTS, n_timesteps=1e6, gamma=0.9999),
    "BipedalWalker-v3": dict(_TRPO_MUJOCO_DEFAULTS, n_timesteps=1e6),
    "BipedalWalkerHardcore-v3": dict(_TRPO_MUJOCO_DEFAULTS, n_timesteps=1e7),
}
"""The zoo's TRPO entries, under the zoo's ids (MuJoCo v4 ids applied to v4 and v5)."""


def _entries() -> list[ZooEntry]:
    out: list[ZooEntry] = []

    def add(algo: str, env_id: str, zoo: dict[str, Any], zoo_id: str = "",
            unusable: str | None = None, extra_notes: tuple[str, ...] = ()) -> None:
        _, left_out = to_config(algo, zoo)
        notes = [f"left out: {x}" for x in left_out] + list(extra_notes)
        if zoo_id not in ("", "atari", env_id):
            notes.append(f"the zoo tuned this on {zoo_id}; applied unchanged to {env_id}")
        out.append(ZooEntry(algo, env_id, dict(zoo), "" if zoo_id == env_id else zoo_id,
                            unusable, tuple(notes)))

    for table, algo in ((_PPO, "ppo"), (_PPO_MUJOCO, "ppo"), (_TRPO, "trpo")):
        for zoo_id, zoo in table.items():
            name, _, version = zoo_id.rpartition("-")
            if version in ("v2", "v4") and table is not _PPO and not name.startswith("Bipedal"):
                for v in ("v4", "v5"):
                    add(algo, f"{name}-{v}", zoo, zoo_id)
            else:
                add(algo, zoo_id, zoo)
    for game in ATARI_GAMES:
        add("ppo", f"{game}NoFrameskip-v4", _PPO_ATARI, "atari", extra_notes=ATARI_NOTES)
    return out


ENTRIES: dict[tuple[str, str], ZooEntry] = {(e.algo, e.env_id): e for e in _entries()}
"""Every zoo preset by (algo, env id)."""

ZOO_PRESETS: dict[tuple[str, str], dict[str, Any]] = {
    key: to_config(e.algo, e.zoo)[0] for key, e in ENTRIES.items()}
"""The trustrl config values of every zoo preset by (algo, env id)."""
