"""Typed run configurations, one docstring per field, presets, and validation.

Precedence when a run is configured: dataclass defaults < preset for (algo, env) < --config
file < --set key=value < explicit flags (--env, --seed, --total-steps).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import textwrap
import types
import typing
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from trustrl.errors import ConfigError


@dataclass
class RunConfig:
    """Settings every algorithm shares: env, rollout, networks, normalisation, bookkeeping."""

    env_id: str = "CartPole-v1"
    """Gymnasium env id (Box or Discrete actions); 'module:Env-v0' imports module first."""
    seed: int = 1
    """Seeds torch, NumPy, Python and the envs; same seed on the same machine, same numbers."""
    total_steps: int = 100_000
    """Environment steps to train for, summed over envs; rounded down to whole iterations."""
    num_envs: int = 4
    """Parallel environments in the vector env (usually 1 to 64)."""
    num_steps: int = 128
    """Steps per env per rollout; the batch is num_envs * num_steps (T in the chapter)."""
    vector: str = "sync"
    """Vector env kind: 'sync' (one process, exact resume), 'async' (a process per env) or
    'torch' (batched torch envs, the whole iteration on `device`: classic control; PPO,
    PPO without the clip, TRPO, NPG)."""
    jit: str = "none"
    """With vector 'torch': 'none' (eager), 'compile' (torch.compile the step and loss; about a
    minute to compile on CPU) or 'cuda-graph' (replay each iteration as one CUDA graph)."""

    gamma: float = 0.99
    """Discount factor (0.9 to 0.999)."""
    gae_lambda: float = 0.95
    """GAE lambda: 0 is one-step TD, 1 is Monte-Carlo (usually 0.9 to 0.99)."""
    norm_adv: bool = True
    """Normalise advantages to mean 0, std 1 (per minibatch for SGD methods, per batch else)."""

    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the actor and of the critic MLPs, e.g. 64,64."""
    activation: str = "tanh"
    """Hidden activation: 'tanh' (the PPO default) or 'relu'."""
    shared_trunk: bool = False
    """Share the hidden layers between actor and critic (then vf_coef balances the two)."""
    log_std_init: float = 0.0
    """Initial log standard deviation of the Gaussian policy (Box actions only; -1 to 0.5)."""
    ortho_init: bool = True
    """Orthogonal init (gains sqrt(2), 0.01 policy head, 1 value head); false keeps PyTorch's
    default init, as rl-baselines3-zoo's tuned MuJoCo settings do (ordinary runs only)."""

    normalize_obs: bool = False
    """Running mean/std observation normalisation, saved with the agent, frozen at evaluation."""
    normalize_reward: bool = False
    """Scale rewards by the running std of the discounted return (logged returns stay raw)."""
    obs_clip: float = 10.0
    """Clip normalised observations to +-obs_clip."""
    reward_clip: float = 10.0
    """Clip scaled rewards to +-reward_clip."""

    stop_return: float | None = None
    """Stop early once a greedy evaluation's mean return reaches this (e.g. 500 on CartPole)."""
    eval_every: int = 10
    """Greedy evaluation every this many iterations (0: only at the end)."""
    eval_episodes: int = 10
    """Episodes per greedy evaluation (each from its own fixed seed)."""
    checkpoint_every: int = 1
    """Write the resumable checkpoint every this many iterations (atomically)."""
    runs_dir: str = "runs"
    """Folder that holds run folders <env>__<algo>__<seed>__<time>."""
    device: str = "cpu"
    """Torch device for the networks: 'cpu' or 'cuda'."""
    torch_threads: int = 1
    """Torch intra-op threads; 1 is fastest for 64x64 networks and keeps runs bit-exact."""
    tensorboard: bool = True
    """Also write TensorBoard events when the tensorboard package is installed."""

    algo = "base"

    # ----- derived values (not settable) -----------------------------------------------------
    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def num_iterations(self) -> int:
        return self.total_steps // self.batch_size

    def _positive(self, *names: str) -> None:
        for name in names:
            value = getattr(self, name)
            if not value > 0:
                raise ConfigError(f"{name} must be positive, got {value}")

    def validate(self) -> None:
        """Raise ConfigError with one line for the first value that cannot work."""
        self._positive("total_steps", "num_envs", "num_steps", "eval_episodes",
                       "checkpoint_every", "torch_threads", "obs_clip", "reward_clip")
        if not 0.0 <= self.gamma <= 1.0:
            raise ConfigError(f"gamma must be in [0, 1], got {self.gamma}")
        if not 0.0 <= self.gae_lambda <= 1.0:
            raise ConfigError(f"gae_lambda must be in [0, 1], got {self.gae_lambda}")
        if self.eval_every < 0:
            raise ConfigError(f"eval_every must be >= 0, got {self.eval_every}")
        if self.total_steps < self.batch_size:
            raise ConfigError(
                f"total_steps {self.total_steps} is less than one batch ({self.batch_size} steps)"
            )
        if self.vector not in ("sync", "async", "torch"):
            raise ConfigError(f"vector must be 'sync', 'async' or 'torch', got {self.vector!r}")
        if self.jit not in ("none", "compile", "cuda-graph"):
            raise ConfigError(f"jit must be 'none', 'compile' or 'cuda-graph', got {self.jit!r}")
        if self.jit != "none" and self.vector != "torch":
            raise ConfigError("jit applies to vector 'torch' only")
        if self.jit == "cuda-graph" and not self.device.startswith("cuda"):
            raise ConfigError("jit 'cuda-graph' needs device 'cuda'")
        if self.vector == "torch":
            from trustrl.envs.torch_classic import SUPPORTED

            if self.env_id not in SUPPORTED:
                raise ConfigError(f"vector 'torch' has no version of {self.env_id}; "
                                  f"available: {', '.join(SUPPORTED)}")
            if self.algo not in ("ppo", "ppo-noclip", "trpo", "npg"):
                raise ConfigError(f"vector 'torch' runs ppo, ppo-noclip, trpo and npg, not "
                                  f"{self.algo}; use vector 'sync'")
            if self.shared_trunk:
                raise ConfigError("vector 'torch' needs separate actor and critic "
                                  "(shared_trunk false)")
            if not self.ortho_init:
                raise ConfigError("vector 'torch' builds orthogonally initialised networks "
                                  "(ortho_init true); use vector 'sync'")
        if self.activation not in ("tanh", "relu"):
            raise ConfigError(f"activation must be 'tanh' or 'relu', got {self.activation!r}")
        if not self.hidden_sizes or any(h <= 0 for h in self.hidden_sizes):
            raise ConfigError(f"hidden_sizes must be positive widths, got {self.hidden_sizes}")
        if self.device != "cpu" and not self.device.startswith("cuda"):
            raise ConfigError(f"device must be 'cpu' or 'cuda[:i]', got {self.device!r}")
        if self.device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                raise ConfigError(f"device {self.device!r}: torch sees no CUDA device here "
                                  f"(torch {torch.__version__}); use device 'cpu'")
            index = self.device.partition(":")[2]
            if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
                raise ConfigError(f"device {self.device!r}: there are "
                                  f"{torch.cuda.device_count()} CUDA devices")

    def _check_minibatch(self, name: str) -> None:
        if getattr(self, name) > self.batch_size:
            raise ConfigError(
                f"{name} {getattr(self, name)} is larger than the batch "
                f"num_envs*num_steps = {self.batch_size}"
            )


@dataclass
class PPOConfig(RunConfig):
    """PPO-clip (Schulman et al., 2017) with the implementation details of the chapter."""

    lr: float = 3e-4
    """Adam learning rate (1e-4 to 3e-3)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over training."""
    adam_eps: float = 1e-5
    """Adam epsilon (1e-5 as in OpenAI's baselines; PyTorch's default is 1e-8)."""
    update_epochs: int = 10
    """K: passes over each batch (3 to 10; more makes the clip work harder)."""
    minibatch_size: int = 64
    """Samples per gradient step; must not exceed the batch (usually 32 to 4096)."""
    clip_eps: float = 0.2
    """Clip range epsilon of the ratio (0.1 to 0.3); also the band of the reported clip fraction."""
    vf_coef: float = 0.5
    """c1: weight of the value loss 0.5*(V - R)^2 (0.5 to 1)."""
    ent_coef: float = 0.0
    """c2: weight of the entropy bonus (0 to 0.01)."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip (0.5 is common); 0 or less turns it off."""
    target_kl: float | None = None
    """Stop the epochs once the full-batch approx KL (k3) exceeds this (0.01 to 0.05); None: off."""
    clip_value_loss: bool = False
    """Clip the value loss around V_old with clip_eps (OpenAI baselines; studies found no gain)."""

    algo = "ppo"

    def validate(self) -> None:
        super().validate()
        self._positive("update_epochs", "minibatch_size", "lr", "clip_eps", "adam_eps")
        if self.target_kl is not None and not self.target_kl > 0:
            raise ConfigError(f"target_kl must be positive or None, got {self.target_kl}")
        if self.vf_coef < 0 or self.ent_coef < 0:
            raise ConfigError("vf_coef and ent_coef must be >= 0")
        self._check_minibatch("minibatch_size")


@dataclass
class PPONoClipConfig(PPOConfig):
    """PPO without the clip: the plain surrogate mean(rho*A) optimised for K epochs (the
    chapter's and the blog's ablation). clip_eps only sets the band of the reported clip
    fraction."""

    algo = "ppo-noclip"


@dataclass
class PGConfig(RunConfig):
    """Vanilla actor-critic policy gradient: one gradient step per batch (PPO with K = 1 and
    one minibatch, where every ratio is 1 and the clip never acts)."""

    lr: float = 3e-4
    """Adam learning rate (1e-4 to 3e-3)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over training."""
    adam_eps: float = 1e-5
    """Adam epsilon."""
    vf_coef: float = 0.5
    """c1: weight of the value loss 0.5*(V - R)^2."""
    ent_coef: float = 0.0
    """c2: weight of the entropy bonus (0 to 0.01)."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip; 0 or less turns it off."""
    clip_eps: float = 0.2
    """Only for reporting: the band of the clip fraction (pg never clips)."""

    algo = "pg"

    def validate(self) -> None:
        super().validate()
        self._positive("lr", "clip_eps", "adam_eps")
        if self.vf_coef < 0 or self.ent_coef < 0:
            raise ConfigError("vf_coef and ent_coef must be >= 0")


@dataclass
class PPOPenaltyConfig(RunConfig):
    """PPO-penalty: maximise mean(rho*A - beta*KL(pi_old||pi)) with the exact per-state KL and
    an adaptive beta (halved below d_targ/1.5, doubled above 1.5*d_targ)."""

    lr: float = 3e-4
    """Adam learning rate (1e-4 to 3e-3)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over training."""
    adam_eps: float = 1e-5
    """Adam epsilon."""
    update_epochs: int = 10
    """K: passes over each batch."""
    minibatch_size: int = 64
    """Samples per gradient step; must not exceed the batch."""
    kl_target: float = 0.01
    """d_targ: the mean KL per update the adaptive beta aims at (0.003 to 0.03 in the paper)."""
    beta_init: float = 1.0
    """Initial KL coefficient beta (the paper: 1; it adapts within a few updates)."""
    vf_coef: float = 0.5
    """c1: weight of the value loss 0.5*(V - R)^2."""
    ent_coef: float = 0.0
    """c2: weight of the entropy bonus (0 to 0.01)."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip; 0 or less turns it off."""
    clip_eps: float = 0.2
    """Only for reporting: the band of the clip fraction (ppo-penalty never clips)."""

    algo = "ppo-penalty"

    def validate(self) -> None:
        super().validate()
        self._positive("update_epochs", "minibatch_size", "lr", "clip_eps", "adam_eps")
        if not self.kl_target > 0:
            raise ConfigError(f"kl_target (d_targ) must be positive, got {self.kl_target}")
        if not self.beta_init > 0:
            raise ConfigError(f"beta_init must be positive, got {self.beta_init}")
        if self.vf_coef < 0 or self.ent_coef < 0:
            raise ConfigError("vf_coef and ent_coef must be >= 0")
        self._check_minibatch("minibatch_size")


@dataclass
class TRPOConfig(RunConfig):
    """TRPO (Schulman et al., 2015): natural-gradient step by conjugate gradient on Fisher-vector
    products, scaled to the KL budget, then a backtracking line search; critic by regression."""

    max_kl: float = 0.01
    """delta: the trust region, the largest mean KL(pi_old||pi) a step may cause (0.001-0.05)."""
    cg_iters: int = 10
    """Conjugate-gradient iterations for x = F^-1 g (usually 10 to 20)."""
    cg_residual_tol: float = 1e-10
    """Stop CG early once the squared residual falls below this."""
    damping: float = 0.1
    """Added to F as F + damping*I: keeps CG stable where F is nearly singular (0.01 to 0.1)."""
    backtrack_ratio: float = 0.5
    """Line search shrink factor: candidates theta_old + ratio^j * step (in (0, 1))."""
    backtrack_iters: int = 10
    """Line-search candidates before the step is rejected."""
    vf_lr: float = 1e-3
    """Adam learning rate of the critic regression."""
    vf_epochs: int = 5
    """Epochs of critic regression on each batch."""
    vf_minibatch_size: int = 64
    """Minibatch size of the critic regression."""
    adam_eps: float = 1e-5
    """Adam epsilon of the critic optimizer."""
    clip_eps: float = 0.2
    """Only for reporting: the band of the clip fraction (TRPO never clips)."""

    algo = "trpo"

    def validate(self) -> None:
        super().validate()
        if not self.max_kl > 0:
            raise ConfigError(f"max_kl (delta) must be positive, got {self.max_kl}")
        if self.cg_iters < 1:
            raise ConfigError(f"cg_iters must be at least 1, got {self.cg_iters}")
        if self.damping < 0:
            raise ConfigError(f"damping must be >= 0, got {self.damping}")
        if not 0.0 < self.backtrack_ratio < 1.0:
            raise ConfigError(f"backtrack_ratio must be in (0, 1), got {self.backtrack_ratio}")
        self._positive("backtrack_iters", "vf_lr", "vf_epochs", "vf_minibatch_size",
                       "clip_eps", "adam_eps")
        if self.shared_trunk:
            raise ConfigError(f"{self.algo} needs separate actor and critic networks "
                              "(shared_trunk=false): the trust region constrains the actor only")
        self._check_minibatch("vf_minibatch_size")


@dataclass
class NPGConfig(TRPOConfig):
    """Natural policy gradient: TRPO's step sqrt(2 delta / x^T F x) * x taken as it is, with no
    line search (backtrack_* are unused)."""

    algo = "npg"


CONFIGS: dict[str, type] = {
    c.algo: c for c in (PPOConfig, PPOPenaltyConfig, TRPOConfig, NPGConfig, PPONoClipConfig,
                        PGConfig)
}

_CARTPOLE_ROLLOUT = dict(total_steps=100_000, num_envs=4, num_steps=128, gamma=0.99,
                         gae_lambda=0.95, eval_every=10)
_PENDULUM_ROLLOUT = dict(total_steps=122_880, num_envs=4, num_steps=512, gamma=0.9,
                         gae_lambda=0.95, normalize_reward=True, eval_every=5)

# Presets per (algo, env). CartPole PPO: the chapter's lab settings (T = 512 = 4 envs x 128
# steps, K = 10, minibatch 64, lr 1e-3 annealed to 0, gamma 0.99, lambda 0.95, eps 0.2,
# c1 0.5, c2 0). The ablations (ppo-noclip, pg) keep PPO's settings so that one thing changes.
PRESETS: dict[tuple[str, str], dict[str, Any]] = {
    ("ppo", "CartPole-v1"): dict(_CARTPOLE_ROLLOUT, update_epochs=10, minibatch_size=64,
                                 lr=1e-3, anneal_lr=True, clip_eps=0.2, vf_coef=0.5,
                                 ent_coef=0.0),
    ("ppo", "Pendulum-v1"): dict(_PENDULUM_ROLLOUT, update_epochs=10, minibatch_size=64,
                                 lr=1e-3, anneal_lr=True, clip_eps=0.2, vf_coef=0.5,
                                 ent_coef=0.0),
}
for _env in ("CartPole-v1", "Pendulum-v1"):
    PRESETS[("ppo-noclip", _env)] = dict(PRESETS[("ppo", _env)])
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


# ----- field documentation --------------------------------------------------------------------
def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each dataclass field, read from the source (like tyro does)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body  # type: ignore[attr-defined]
        for node, nxt in zip(body, body[1:], strict=False):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def describe(cls: type, skip: type | None = None) -> str:
    """A help text listing every field (except those of `skip`): name, type, default, doc."""
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    skipped = {f.name for f in fields(skip)} if skip is not None else set()
    lines = []
    for f in fields(cls):
        if f.name in skipped:
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        tname = _type_name(hints[f.name])
        lines.append(f"  {f.name} ({tname}, default {_fmt(default)})\n      {docs.get(f.name, '')}")
    return "\n".join(lines)


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _fmt(v: Any) -> str:
    if isinstance(v, tuple):
        return ",".join(str(x) for x in v)
    return str(v)


# ----- building a config ----------------------------------------------------------------------
def _parse_value(name: str, tp: Any, raw: Any) -> Any:
    """Convert a string (from --set) or a file value to the field's type, or raise ConfigError."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        non_none = [a for a in args if a is not type(None)]
        if raw is None or (isinstance(raw, str) and raw.strip().lower() in ("none", "null", "")):
            return None
        return _parse_value(name, non_none[0], raw)
    try:
        if tp is bool:
            if isinstance(raw, bool):
                return raw
            s = str(raw).strip().lower()
            if s in ("1", "true", "yes", "on"):
                return True
            if s in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if tp is int:
            if isinstance(raw, float) and not raw.is_integer():
                raise ValueError
            if isinstance(raw, str):
                f = float(raw.replace("_", ""))
                if not f.is_integer():
                    raise ValueError
                return int(f)
            return int(raw)
        if tp is float:
            return float(raw)
        if tp is str:
            return str(raw)
        if origin is tuple:
            items = raw if isinstance(raw, (list, tuple)) else str(raw).replace(" ", "").split(",")
            return tuple(int(x) for x in items if str(x) != "")
    except (TypeError, ValueError):
        pass
    raise ConfigError(f"bad value for {name}: {raw!r} is not a valid {_type_name(tp)}")


def _check_keys(cls: type, keys: Any, where: str) -> None:
    import difflib

    names = [f.name for f in fields(cls)]
    for key in keys:
        if key not in names:
            close = difflib.get_close_matches(key, names, n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise ConfigError(f"unknown config key {key!r} in {where}{hint}")


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a TOML or JSON file of flat key = value pairs."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}")
    text = p.read_text()
    try:
        if p.suffix == ".json":
            data = json.loads(text)
        else:
            try:
                import tomllib
            except ModuleNotFoundError:  # Python 3.10
                import tomli as tomllib  # type: ignore[no-redef]
            data = tomllib.loads(text)
    except Exception as e:  # noqa: BLE001 - any parse error becomes one line
        raise ConfigError(f"cannot parse config file {p}: {e}".splitlines()[0]) from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p} must hold key = value pairs")
    data.pop("algo", None)
    return data


def parse_sets(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"--set expects key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        out[key.strip()] = value
    return out


def make_config(
    algo: str = "ppo",
    env_id: str | None = None,
    file_values: dict[str, Any] | None = None,
    sets: dict[str, Any] | None = None,
    flags: dict[str, Any] | None = None,
) -> Any:
    """Resolve a config: defaults < preset < file < --set < flags. Validates it."""
    if algo not in CONFIGS:
        raise ConfigError(f"unknown algorithm {algo!r}; choose from {', '.join(CONFIGS)}")
    cls = CONFIGS[algo]
    file_values, sets, flags = file_values or {}, sets or {}, {
        k: v for k, v in (flags or {}).items() if v is not None
    }
    _check_keys(cls, file_values, "config file")
    _check_keys(cls, sets, "--set")
    env = (
        env_id
        or flags.get("env_id")
        or sets.get("env_id")
        or file_values.get("env_id")
        or cls().env_id
    )
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = dict(PRESETS.get((algo, env), {}))
    for layer in (file_values, sets, flags):
        for key, raw in layer.items():
            values[key] = _parse_value(key, hints[key], raw)
    values["env_id"] = env
    cfg = cls(**values)
    cfg.validate()
    return cfg


def config_to_dict(cfg: Any) -> dict[str, Any]:
    d = dataclasses.asdict(cfg)
    d["algo"] = cfg.algo
    d["hidden_sizes"] = list(cfg.hidden_sizes)
    return d


def config_from_dict(d: dict[str, Any]) -> Any:
    d = dict(d)
    algo = d.pop("algo", "ppo")
    cls = CONFIGS[algo]
    _check_keys(cls, d, "saved config")
    hints = typing.get_type_hints(cls)
    return cls(**{k: _parse_value(k, hints[k], v) for k, v in d.items()})


__all__ = [
    "RunConfig", "PPOConfig", "PPONoClipConfig", "PGConfig", "PPOPenaltyConfig", "TRPOConfig",
    "NPGConfig", "CONFIGS", "PRESETS", "field_docs", "describe", "make_config",
    "load_config_file", "parse_sets", "config_to_dict", "config_from_dict",
]
