"""Typed run configurations, one docstring per field, presets, and validation.

Precedence when a run is configured: dataclass defaults < preset for (algo, env) < --config
file < --set key=value < explicit flags (--env, --seed, --total-steps).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import json
import math
import textwrap
import types
import typing
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from trustrl.util.errors import ConfigError
from trustrl.util.importing import IMPORT_PATH

# ----- bounds: sizes that cannot fit are refused before any work -----------------------------
MAX_SEED = 2**31 - 1
"""Seeds are in [0, MAX_SEED] (NumPy's legacy seeding takes 32 bits; the evaluation adds
10,000 + the episode index to the seed)."""
MAX_TOTAL_STEPS = 10**12
MAX_ENVS = 4096
"""num_envs of Gymnasium's vector envs (vector 'sync' or 'async': one env object, or one
process, each)."""
MAX_BATCH = 2**22
"""num_envs * num_steps with Gymnasium's vector envs: the rollout is held in memory (about
4.2M samples)."""
MAX_POPULATION_ENVS = 2**20
"""Seeds x num_envs of a `--seeds` population (one device holds all of them)."""
MAX_TORCH_ENVS = MAX_POPULATION_ENVS
"""num_envs per seed of the batched torch envs (vector 'torch'): tensors, so a GPU runs far more
of them than a process holds Gymnasium envs (65,536 is a usual setting)."""
MAX_TORCH_BATCH = 2**24
"""num_envs * num_steps with vector 'torch' (classic-control observations: at most 6 floats)."""
MAX_WIDTH = 8192
MAX_DEPTH = 32
MAX_HIDDEN_PARAMS = 2**26
"""Weights between hidden layers of one MLP, sum of w_i * w_(i+1) (about 67M)."""
MAX_EVAL_EPISODES = 10_000
MAX_EVAL_MAX_STEPS = 10**7
MAX_EPOCHS = 10_000
MAX_TORCH_THREADS = 1024
MAX_CONFIG_BYTES = 1_000_000




@dataclass(frozen=True)
class Range:
    """Allowed values of a number: [lo, hi], an end excluded when lo_open / hi_open; None: no
    bound on that side (but always finite)."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def text(self) -> str:
        if self.lo is None and self.hi is None:
            return "a finite number"
        if self.hi is None:
            if self.lo == 0:
                return "positive" if self.lo_open else ">= 0"
            return f"{'>' if self.lo_open else '>='} {_num(self.lo)}"
        if self.lo is None:
            return f"{'<' if self.hi_open else '<='} {_num(self.hi)}"
        return (f"in {'(' if self.lo_open else '['}{_num(self.lo)}, {_num(self.hi)}"
                f"{')' if self.hi_open else ']'}")

    def holds(self, v: float) -> bool:
        if not math.isfinite(v):
            return False
        if self.lo is not None and (v <= self.lo if self.lo_open else v < self.lo):
            return False
        return not (self.hi is not None and (v >= self.hi if self.hi_open else v > self.hi))


def _num(v: float) -> str:
    if isinstance(v, int) or float(v).is_integer():
        iv = int(v)
        return f"{iv:,}" if abs(iv) >= 10_000 else str(iv)
    return repr(v)


POSITIVE = Range(0, None, lo_open=True)
NON_NEGATIVE = Range(0, None)
AT_LEAST_1 = Range(1, None)
UNIT = Range(0, 1)

RANGES: dict[str, Range] = {
    # RunConfig
    "seed": Range(0, MAX_SEED), "total_steps": Range(1, MAX_TOTAL_STEPS),
    "num_envs": Range(1, MAX_ENVS), "num_steps": Range(1, MAX_TORCH_BATCH),
    "gamma": UNIT, "gae_lambda": UNIT, "log_std_init": Range(-20, 5),
    "obs_clip": Range(0, 1e6, lo_open=True), "reward_clip": Range(0, 1e6, lo_open=True),
    "stop_return": Range(-1e30, 1e30),
    "eval_every": Range(0, 10**9), "eval_episodes": Range(1, MAX_EVAL_EPISODES),
    "eval_max_steps": Range(1, MAX_EVAL_MAX_STEPS), "checkpoint_every": Range(1, 10**9),
    "checkpoint_secs": Range(0, 1e9), "checkpoint_keep": Range(0, 10**6),
    "torch_threads": Range(1, MAX_TORCH_THREADS), "runners": Range(0, MAX_ENVS),
    "recurrent_hidden": Range(1, 4096), "sequence_length": Range(0, MAX_TORCH_BATCH),
    # SGD methods
    "lr": Range(0, 1, lo_open=True), "anneal_steps": Range(1, MAX_TOTAL_STEPS),
    "adam_eps": Range(0, 1, lo_open=True),
    "update_epochs": Range(1, MAX_EPOCHS), "minibatch_size": AT_LEAST_1,
    "clip_eps": Range(0, 10, lo_open=True), "vf_coef": Range(0, 1e6), "ent_coef": Range(0, 1e6),
    "max_grad_norm": Range(None, 1e6), "target_kl": Range(0, 100, lo_open=True),
    "kl_target": Range(0, 10, lo_open=True), "beta_init": Range(0, 1e6, lo_open=True),
    # TRPO / NPG
    "max_kl": Range(0, 10, lo_open=True), "cg_iters": Range(1, 1000),
    "cg_residual_tol": Range(0, 1), "damping": Range(0, 1e6), "fisher_subsample": AT_LEAST_1,
    "backtrack_ratio": Range(0, 1, lo_open=True, hi_open=True),
    "backtrack_iters": Range(1, 1000), "vf_lr": Range(0, 1, lo_open=True),
    "vf_epochs": Range(1, MAX_EPOCHS), "vf_minibatch_size": AT_LEAST_1,
}
"""The allowed range of every numeric config key (every one of them must also be finite).
Upper bounds keep sizes that cannot fit, and values that overflow float32 arithmetic (clip
ranges, tolerances), from starting a run."""

TORCH_RANGES: dict[str, Range] = {"num_envs": Range(1, MAX_TORCH_ENVS)}
"""Keys whose range is wider on the batched torch envs (vector 'torch'): tensors, not env
objects or processes; RANGES holds their range with Gymnasium's vector envs."""

CHOICES: dict[str, tuple[str, ...]] = {
    "vector": ("auto", "sync", "async", "torch"), "jit": ("none", "compile", "cuda-graph"),
    "activation": ("tanh", "relu"),
    "grad_backend": ("auto", "closed-form", "autograd", "compiled"),
    "track": ("none", "wandb", "mlflow"),
    "action_mask": ("auto", "on", "off"), "recurrent": ("none", "lstm", "gru"),
}


def _env_parsers() -> dict[str, Any]:
    from trustrl.envs.factory import parse_env_kwargs, parse_wrappers

    return {"env_kwargs": parse_env_kwargs, "wrappers": parse_wrappers}


_ENV_PARSERS: dict[str, Any] = _env_parsers()
"""Fields of plain data beyond numbers and strings: their parser (text from --set, a file's
value or a Python value -> the canonical value, or ConfigError)."""


def _short(v: Any, limit: int = 60) -> str:
    """repr(v) cut to `limit` characters, for error messages about values users typed."""
    import reprlib

    r = reprlib.Repr()
    r.maxstring = r.maxother = r.maxlong = limit
    r.maxlist = r.maxtuple = r.maxdict = 6
    text = r.repr(v)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def field_default(f: dataclasses.Field) -> Any:
    """A dataclass field's default value (its default_factory called)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    factory: Any = f.default_factory
    return factory()


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def check_type(name: str, tp: Any, v: Any) -> None:
    """ConfigError unless v is a value of the field type tp (bool is not an int; a float is
    finite)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if v is None and type(None) in args:
            return
        tp = next(a for a in args if a is not type(None))
    ok = {
        bool: lambda: isinstance(v, bool),
        int: lambda: _is_int(v),
        float: lambda: _is_number(v),
        str: lambda: isinstance(v, str),
    }.get(tp, lambda: isinstance(v, tuple) and all(_is_int(x) for x in v))()
    if not ok:
        raise ConfigError(f"{name} must be {_type_words(tp)}, got {_short(v)} "
                          f"({type(v).__name__})")
    if tp is float and not math.isfinite(v):
        raise ConfigError(f"{name} must be a finite number, got {v}")


def _type_words(tp: Any) -> str:
    return {bool: "true or false", int: "an integer", float: "a number",
            str: "a string"}.get(tp, "a list of integers")


@dataclass
class RunConfig:
    """Settings every algorithm shares: env, rollout, networks, normalisation, bookkeeping."""

    env_id: str = "CartPole-v1"
    """Gymnasium env id; 'module:Env-v0' imports module first (from the current folder too);
    'module:Name' names an env class or a function returning an env (called with env_kwargs).
    Through the Python API also the class or function itself (config.json records its import
    path)."""
    env_kwargs: dict = dataclasses.field(default_factory=dict)
    """Keyword arguments of the env (gym.make or the class/function), a JSON object:
    --set env_kwargs='{"continuous": true}', or a table in a config file."""
    wrappers: list = dataclasses.field(default_factory=list)
    """Wrappers applied in order, each 'module:Class' (a callable through the Python API):
    --set wrappers=gymnasium.wrappers:ClipReward,mymod:MyWrapper; with keyword arguments as
    a JSON list: '[{"wrapper": "module:Class", "kwargs": {"k": 1}}]'."""
    atari_wrappers: bool = True
    """Atari ids (ALE/..., ...NoFrameskip-v4; pip install "trustrl[atari]") run behind the
    standard preprocessing (trustrl.envs.atari: no-op reset, frame skip 4, 84x84 grey, 4 stacked
    frames; episodic life and rewards clipped to their sign in training only; evaluation plays
    whole games with raw scores); false: the env as gym.make gives it."""
    atari_episodic_life: bool = True
    """In that preprocessing's training chain, a lost life ends the training episode (the value
    bootstrap and a recurrent policy's state stop there; the game goes on at the next reset);
    false: a training episode is the whole game and FIRE is pressed after a lost life, as SB3's
    AtariWrapper(terminal_on_life_loss=False) and the evaluation chain do. Rewards stay clipped
    to their sign; evaluation is the same either way. No effect where there is no Atari chain
    (a non-Atari env, or atari_wrappers false)."""
    algo_class: str | None = None
    """Your own subclass of this algorithm's class (of trustrl.algos.ppo.PPO for ppo), as
    'module:Class', run in its place: --set algo_class=mymod:MyPPO (through the Python API also
    the class itself; config.json records its import path). A change to the objective written
    over the array namespace runs compiled (docs/architecture.md, "Adding an algorithm")."""
    init_from: str | None = None
    """Start from a trained agent's weights and observation statistics: a run folder or an
    agent file (fine-tuning; the networks and spaces must match). None: from scratch."""
    track: str = "none"
    """Experiment tracker besides TensorBoard: 'none', 'wandb' (pip install "trustrl[wandb]")
    or 'mlflow' (pip install "trustrl[mlflow]"); the same scalars and the config."""
    seed: int = 1
    """Seeds torch, NumPy, Python and the envs; same seed on the same machine, same numbers."""
    total_steps: int = 100_000
    """Environment steps to train for, summed over envs; rounded down to whole iterations."""
    num_envs: int = 4
    """Parallel environments in the vector env (usually 1 to 64; a GPU runs 65,536 batched torch
    envs at once)."""
    num_steps: int = 128
    """Steps per env per rollout; the batch is num_envs * num_steps (T in the chapter)."""
    vector: str = "auto"
    """Collector: 'auto' (the default: 'torch' where it runs, else 'sync'), 'sync' (Gymnasium
    vector env in one process, exact resume), 'async' (a process per env) or 'torch' (batched
    envs, the whole iteration on `device`: the five classic-control envs and CartPoleNoVel-v1
    and PendulumNoVel-v1; every algorithm; recurrent policies too, which 'auto' runs on
    'sync'). A run's config.json records the collector it used."""
    runners: int = 0
    """0 (the default): the rollout runs in the learner's process. N >= 1: on N runners
    (trustrl.learn.runners), Ray actors each with a vector env (vector 'sync' or 'async') of
    num_envs / N of the envs and the same collector; the learner sends the weights once per
    iteration, gathers their segments and updates (docs/ray_runners.md). num_envs must be a
    multiple of N."""
    ray_address: str | None = None
    """With runners: the Ray cluster, 'host:port' or 'auto'; None (the default): RAY_ADDRESS
    where set, else a local Ray started for the run. 'inline': no Ray, the runners step one
    after the other in the learner's process (the same numbers as on Ray; for debugging)."""
    jit: str = "none"
    """With vector 'torch': 'none' (eager), 'compile' (torch.compile the step and loss; about a
    minute to compile on CPU) or 'cuda-graph' (replay each iteration as one CUDA graph)."""
    grad_backend: str = "auto"
    """Gradient backend of every algorithm, on either collector: 'closed-form' (each loss
    term's derivative, the chain rule written out for the tanh/ReLU MLPs: fastest on a CPU),
    'autograd' (any network), 'compiled' (the closed form with PPO's epochs of minibatch
    steps, TRPO's and NPG's critic regression and Fisher products, and the batched
    collector's rollout, compiled by Numba, CPU: the `compiled` extra), or 'auto' (compiled
    where the
    closed form applies on a CPU and Numba is installed, else the closed form where it
    applies, else autograd)."""
    action_mask: str = "auto"
    """Invalid-action masks from the env (Discrete, MultiDiscrete; docs/masking.md): 'auto'
    uses them where the env gives them (an action_masks() method, as sb3-contrib's
    MaskablePPO reads it, or info["action_mask"]), 'on' requires them, 'off' ignores them.
    Masked runs take the Gymnasium collector (in one process or on runners), any algorithm."""
    preset: str | None = "auto"
    """The preset applied under your values, the same on every entry point (`trustrl train`,
    make_config, these classes, trustrl.PPO and the other models): 'auto' (the default: the
    chapter's preset for the algorithm and env where there is one, else rl-baselines3-zoo's,
    else CleanRL's, else none), 'chapter', 'zoo', 'cleanrl' or 'none' (also None). Asked of
    a config class, the preset is applied when it is made, under the values given to it:
    PPOConfig(env_id="CartPole-v1", lr=1e-3) is make_config("ppo", "CartPole-v1",
    sets={"lr": 1e-3}); assigning env_id later applies that env's preset instead (the values
    you gave or assigned stay). The field then holds the preset applied, as the run's
    config.json records it: 'SOURCE:ENV' (e.g. 'zoo:LunarLander-v3') or None; such a record
    given back to a class is taken as it is (nothing applied). For PPO on the envs measured
    auto follows its budget rule (trustrl/settings/presets/budget.py, measured in
    docs/presets.md): the preset or trustrl's defaults."""
    preset_reason: str | None = None
    """What the preset request resolved to and why (a record make_config writes; a value set
    by hand is replaced)."""

    gamma: float = 0.99
    """Discount factor (0.9 to 0.999)."""
    gae_lambda: float = 0.95
    """GAE lambda: 0 is one-step TD, 1 is Monte-Carlo (usually 0.9 to 0.99)."""
    norm_adv: bool = True
    """Normalise advantages to mean 0, std 1 (per minibatch for SGD methods, per batch else)."""

    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the actor and of the critic MLPs, e.g. 64,64; empty (--set
    hidden_sizes=) for none: the heads read the features (an image's CNN, as CleanRL's and
    SB3's Atari networks) or the observation itself."""
    activation: str = "tanh"
    """Hidden activation: 'tanh' (the PPO default) or 'relu'."""
    shared_trunk: bool = False
    """Share the hidden layers between actor and critic (then vf_coef balances the two)."""
    log_std_init: float = 0.0
    """Initial log standard deviation of the Gaussian policy (Box actions only; -1 to 0.5)."""
    ortho_init: bool = True
    """Orthogonal init (gains sqrt(2), 0.01 policy head, 1 value head); false keeps PyTorch's
    default init, as rl-baselines3-zoo's tuned MuJoCo settings do (ordinary runs only)."""
    policy: str = ""
    """A network of your own: 'module:factory', the import path of a callable returning a
    torch.nn.Module (imported from the current folder too; in Python also the callable
    itself, if defined at a module's top level): a feature extractor (with features_dim)
    in front of the MLP heads, or a whole actor-critic (docs/custom_networks.md). '' (the
    default): the MLPs, behind a CNN for image observations."""
    recurrent: str = "none"
    """A recurrent policy for partially observed envs (docs/recurrent.md): 'lstm' or 'gru'
    puts one LSTM or GRU of recurrent_hidden units between the observation (or an image's
    CNN) and the actor and critic MLPs, its state carried across steps and reset where an
    episode starts; minibatches are whole env sequences (minibatch_size a multiple of
    num_steps). 'none' (the default): memoryless. The PPO family on either collector
    (vector 'torch': populations too), autograd, jit 'none'."""
    recurrent_hidden: int = 64
    """Units of the recurrent cell (recurrent 'lstm' or 'gru')."""
    sequence_length: int = 0
    """Steps per training sequence of a recurrent policy. 0 (the default): whole env segments
    of num_steps steps, as CleanRL's ppo_atari_lstm. A divisor L of num_steps: each segment is
    cut into num_steps / L sequences of L steps, each starting from the state pi_old reached
    there (one unroll of the batch at pi_old's parameters per update), as sb3-contrib's
    RecurrentPPO and RLlib's max_seq_len train (shorter backpropagation through time, more
    minibatches per epoch); minibatch_size is then a multiple of L. Recurrent policies only."""

    normalize_obs: bool = False
    """Running mean/std observation normalisation, saved with the agent, frozen at evaluation;
    never applied to images (scaled to [0, 1]), one-hot (Discrete, MultiDiscrete) or
    MultiBinary parts, whose values are on a fixed scale already."""
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
    eval_deterministic: bool = True
    """Evaluations act at the policy's mode (argmax, the Gaussian mean): greedy. false samples
    the actions instead, from a generator seeded like the evaluation's episodes, so the same
    policy gets the same returns (rl-baselines3-zoo evaluates its Atari agents this way).
    Needs the Gymnasium evaluator (vector 'sync' or 'async'; 'auto' picks it)."""
    eval_max_steps: int = 10_000
    """Evaluation episodes of an env with no time limit of its own (no max_episode_steps in
    its spec, e.g. CliffWalking-v1) are cut after this many steps, so that a policy that never
    reaches a terminal state cannot hang the run; envs with a time limit keep theirs."""
    checkpoint_every: int | None = None
    """Write the resumable checkpoint every this many iterations; None (the default): after
    the first iteration, then when checkpoint_secs have passed since the last one. Always at
    the end and at a stop."""
    checkpoint_secs: float = 10.0
    """With checkpoint_every None: the most seconds of training a crash can lose (a stop by
    Ctrl-C, SIGTERM or a callback writes its checkpoint first and loses nothing)."""
    checkpoint_keep: int = 0
    """Besides checkpoints/latest.pt, keep the last k checkpoints as
    checkpoints/step_<global step>.pt (hard links where the file system has them); 0: the
    latest only. Copy one over latest.pt to resume the run from it."""
    save_best: bool = True
    """Keep the agent of the best evaluation so far as best/agent.pt, its evaluation in
    best/eval.json (every member's, in a population)."""
    runs_dir: str = "runs"
    """Folder that holds run folders <env>__<algo>__<seed>__<time>."""
    device: str = "cpu"
    """Torch device for the networks: 'cpu' or 'cuda'."""
    torch_threads: int | None = None
    """Torch intra-op threads. None (the default): 1 for fewer than 8 seeds (a 64x64
    network's products are too small for a second thread to pay; one thread also keeps
    reductions in a fixed order), the process's available cores from 8 seeds on (16 seeds
    in 71-86 ms an iteration with 2 threads against 102-138 ms with 1, on 2 cores) and for
    a network with a NatureCNN (image observations of sides >= 36: Atari's frames; 317
    against 205 steps a second on Breakout in CleanRL's setting with 2 threads on 2 cores,
    medians of benchmarks/atari_cpu.py). The available cores: the environment variable
    TRUSTRL_CORES where set (a sweep's local workers set it to their share of the machine),
    else the process's affinity mask."""
    tensorboard: bool = True
    """Also write TensorBoard events when the tensorboard package is installed."""

    algo = "base"

    # ----- the preset, applied when a config is made (the `preset` field's doc) --------------
    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """Notes which fields the caller gave (they stay over the preset); an unknown key is
        a ConfigError with the close matches, as in a config file."""
        _check_keys(cls, kwargs, f"{cls.__name__}(...)")
        self = super().__new__(cls)
        names = [f.name for f in fields(cls)]
        object.__setattr__(self, "_given", set(names[:len(args)]) | set(kwargs))
        return self

    def __post_init__(self) -> None:
        from trustrl.envs.objects import take_env_object

        # a gym.Env or vector env object: its id, or copies of it
        take_env_object(self, {f.name: field_default(f) for f in fields(self)})
        if isinstance(self.algo_class, type):  # the Python API's class: its import path
            from trustrl.util.importing import import_path

            path = import_path(self.algo_class)
            if path is None:
                raise ConfigError(f"algo_class {self.algo_class.__qualname__} does not import "
                                  "back by its name (define it at the top level of a module "
                                  "that is not the script run as __main__)")
            object.__setattr__(self, "algo_class", path)
        request = self.preset
        record = request is None or (isinstance(request, str) and ":" in request)
        object.__setattr__(self, "_request", None if record else request)
        self._apply_preset()
        object.__setattr__(self, "_ready", True)

    def _apply_preset(self) -> None:
        """Under the fields the caller gave, the preset `_request` asks for (none for a
        config made from a record: config.json, make_config)."""
        request = self.__dict__.get("_request")
        if request is None:
            return
        env = self.env_id
        given = self.__dict__["_given"]
        if isinstance(env, str):  # at the budget given, else the preset's (the budget rule)
            total = self.total_steps if "total_steps" in given else None
            choice = choose(self.algo, env, request, total, defaults_batch(self.algo))
        else:
            choice = choose(self.algo, "", "none")
        for k, v in choice.values.items():
            if k not in given:
                object.__setattr__(self, k, v)
        object.__setattr__(self, "preset", choice.label)
        if "preset_reason" not in given:
            object.__setattr__(self, "preset_reason", choice.reason)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if not self.__dict__.get("_ready") or name.startswith("_"):
            return  # the dataclass's __init__, or bookkeeping
        self.__dict__["_given"].add(name)
        if name == "preset" and value is not None and ":" not in str(value):
            object.__setattr__(self, "_request", value)  # another preset asked for
        elif name != "env_id":
            return
        from trustrl.envs.objects import take_env_object

        take_env_object(self, {f.name: field_default(f) for f in fields(self)})
        if self.__dict__.get("_request") is not None:
            # another env or preset: its values instead of the old ones, under those given
            given = self.__dict__["_given"]
            for f in fields(self):
                if f.name not in given and f.name != "preset":
                    object.__setattr__(self, f.name, field_default(f))
            self._apply_preset()

    # ----- derived values (not settable) -----------------------------------------------------
    @property
    def batch_size(self) -> int:
        """Samples per iteration: num_envs * num_steps."""
        return self.num_envs * self.num_steps

    @property
    def num_iterations(self) -> int:
        """Iterations of the run: total_steps // batch_size."""
        return self.total_steps // self.batch_size

    def schedule_progress(self, iterations_done: int) -> float:
        """The fraction of the schedule (anneal_lr's, anneal_clip's) done after
        `iterations_done` updates: of the run's iterations, or of anneal_steps where a config
        sets it (at most 1).

        Args:
            iterations_done: updates done so far.
        """
        horizon = getattr(self, "anneal_steps", None)
        if horizon is None:
            return iterations_done / self.num_iterations
        return min(1.0, iterations_done * self.batch_size / horizon)

    def check_fields(self) -> None:
        """Each field on its own: its type (bool is not an int, floats are finite), its range
        (RANGES), its choices (CHOICES), and the network's size."""
        if callable(self.policy):  # the Python API: a top-level factory, kept as its path
            from trustrl.nets.extractors import import_path

            self.policy = import_path(self.policy)
        hints = typing.get_type_hints(type(self))
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in _ENV_PARSERS:  # canonical form (callables kept: the Python API)
                setattr(self, f.name, _ENV_PARSERS[f.name](v))
                continue
            if f.name == "env_id" and callable(v):
                continue
            check_type(f.name, hints[f.name], v)
            if f.name in TORCH_RANGES:  # depends on the collector: below, once all are checked
                continue
            rng = RANGES.get(f.name)
            if rng is not None and v is not None and not rng.holds(v):
                raise ConfigError(f"{f.name} must be {rng.text()}, got {_num(v)}")
            if f.name in CHOICES and v not in CHOICES[f.name]:
                raise ConfigError(f"{f.name} must be one of {', '.join(CHOICES[f.name])}; "
                                  f"got {_short(v)}")
        if callable(self.env_id):  # an env class or function (the Python API)
            pass
        elif not self.env_id.strip():
            raise ConfigError("env_id is empty: give a Gymnasium env id such as CartPole-v1")
        elif not self.env_id.isprintable() or len(self.env_id) > 200:
            raise ConfigError(f"env_id {_short(self.env_id)} is not an env id")
        check_label(self.preset, self.env_id)
        if self.policy and not IMPORT_PATH.match(self.policy):
            raise ConfigError(f"policy must be 'module:factory' (an import path), got "
                              f"{_short(self.policy)}")
        h = self.hidden_sizes
        if len(h) > MAX_DEPTH or any(not 1 <= w <= MAX_WIDTH for w in h):
            raise ConfigError(f"hidden_sizes must be 0 to {MAX_DEPTH} widths, each in "
                              f"[1, {MAX_WIDTH}], got {_short(h)}")
        params = sum(a * b for a, b in zip(h, h[1:], strict=False))
        if params > MAX_HIDDEN_PARAMS:
            raise ConfigError(f"hidden_sizes {_fmt(h)} make {params:,} hidden weights per "
                              f"network; the bound is {MAX_HIDDEN_PARAMS:,}")
        torch_envs = self._torch_vector()
        for name, wide in TORCH_RANGES.items():
            v, rng = getattr(self, name), wide if torch_envs else RANGES[name]
            if not rng.holds(v):
                hint = (f" with Gymnasium's vector envs (up to {wide.hi:,} with vector 'torch')"
                        if not torch_envs and v > rng.hi else "")
                raise ConfigError(f"{name} must be {rng.text()}{hint}, got {_num(v)}")
        bound = MAX_TORCH_BATCH if torch_envs else MAX_BATCH
        if self.batch_size > bound:
            raise ConfigError(f"num_envs*num_steps = {self.batch_size:,} is more than the bound "
                              f"{bound:,} samples per batch")

    def batched_ok(self) -> bool:
        """Whether the batched collector ('torch') runs this config."""
        from trustrl.envs.classic import MASKED
        from trustrl.envs.torch_classic import SUPPORTED

        return (self.env_id in SUPPORTED and self.algo in CONFIGS and not self.runners
                and not self.shared_trunk and self.ortho_init
                and not self.env_kwargs and not self.wrappers and not self.policy
                and self.eval_deterministic
                and (self.action_mask != "on" or self.env_id in MASKED)
                and self.recurrent == "none")

    def _torch_vector(self) -> bool:
        """Whether this config runs on the batched torch envs (vector 'torch', or 'auto' that
        resolve_vector turns into 'torch')."""
        return self.vector == "torch" or (self.vector == "auto" and self.batched_ok())

    def resolve_vector(self) -> None:
        """'auto' -> 'torch' where the batched collector runs this config, else 'sync'."""
        if self.vector == "auto":
            self.vector = "torch" if self.batched_ok() else "sync"

    def validate(self) -> None:
        """Raise ConfigError with one line for the first value that cannot work."""
        self.check_fields()
        if self.total_steps < self.batch_size:
            raise ConfigError(
                f"total_steps {self.total_steps} is less than one batch ({self.batch_size} steps)"
            )
        horizon = getattr(self, "anneal_steps", None)
        if horizon is not None and not (getattr(self, "anneal_lr", False)
                                        or getattr(self, "anneal_clip", False)):
            raise ConfigError("anneal_steps sets the horizon of anneal_lr and anneal_clip, "
                              "and neither is on")
        if horizon is not None and horizon < self.total_steps:
            raise ConfigError(f"anneal_steps {horizon} is less than total_steps "
                              f"{self.total_steps}: the schedule would be at 0 for the rest")
        if getattr(self, "anneal_clip", False) and self.jit != "none":
            raise ConfigError(f"anneal_clip runs with jit 'none' (jit '{self.jit}' fixes the "
                              "clip range when it compiles)")
        if self.jit != "none" and (self.vector in ("sync", "async") or (
                self.vector == "auto" and not self.batched_ok())):
            raise ConfigError("jit applies to vector 'torch' only")
        if self.runners:
            if self.vector == "torch":
                raise ConfigError("runners step Gymnasium vector envs: vector 'sync' or "
                                  "'async', not 'torch'")
            if self.num_envs % self.runners:
                raise ConfigError(f"num_envs {self.num_envs} is not a multiple of runners "
                                  f"{self.runners} (each runner steps num_envs / runners envs)")
        if self.recurrent != "none":
            self._check_recurrent()
        elif self.sequence_length:
            raise ConfigError(f"sequence_length {self.sequence_length} is for recurrent "
                              "policies (--set recurrent=lstm or gru)")
        if self.jit == "cuda-graph" and not self.device.startswith("cuda"):
            raise ConfigError("jit 'cuda-graph' needs device 'cuda'")
        if self.grad_backend in ("closed-form", "compiled") and self.shared_trunk:
            raise ConfigError(f"grad_backend '{self.grad_backend}' needs separate actor and "
                              "critic MLPs (shared_trunk false); use 'auto' or 'autograd'")
        if self.grad_backend == "compiled":
            from trustrl.compute.compiled import available

            if not available():
                raise ConfigError("grad_backend 'compiled' needs Numba and scipy: pip install "
                                  "\"trustrl[compiled]\"")
            if not self.device.startswith("cpu"):
                raise ConfigError("grad_backend 'compiled' runs on the CPU (device 'cpu')")
        if self.vector == "torch":
            from trustrl.envs.torch_classic import SUPPORTED

            if self.env_id not in SUPPORTED:
                raise ConfigError(f"vector 'torch' has no version of {self.env_id}; "
                                  f"available: {', '.join(SUPPORTED)}")
            if self.env_kwargs or self.wrappers:
                raise ConfigError("vector 'torch' runs its own copy of the env: env_kwargs "
                                  "and wrappers need vector 'sync' or 'async'")
            from trustrl.envs.classic import MASKED

            if self.action_mask == "on" and self.env_id not in MASKED:
                raise ConfigError(f"action_mask 'on': the batched collector's {self.env_id} "
                                  "gives no masks (of its envs, "
                                  f"{', '.join(sorted(MASKED))} does); use vector 'sync' or "
                                  "'async' for an env of your own")
            if not self.eval_deterministic:
                raise ConfigError("vector 'torch' evaluates greedily: eval_deterministic false "
                                  "needs vector 'sync' or 'async'")
            if self.shared_trunk:
                raise ConfigError("vector 'torch' needs separate actor and critic "
                                  "(shared_trunk false)")
            if not self.ortho_init and self.recurrent == "none":
                raise ConfigError("vector 'torch' builds orthogonally initialised networks "
                                  "(ortho_init true); use vector 'sync'")
            if self.policy:
                raise ConfigError("vector 'torch' builds its own MLPs; a policy module runs "
                                  "on vector 'sync' or 'async'")
        if self.device != "cpu" and not self.device.startswith("cuda"):
            raise ConfigError(f"device must be 'cpu' or 'cuda[:i]', got {_short(self.device)}")
        if self.device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                raise ConfigError(f"device {self.device!r}: torch sees no CUDA device here "
                                  f"(torch {torch.__version__}); use device 'cpu'")
            index = self.device.partition(":")[2]
            if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
                raise ConfigError(f"device {self.device!r}: there are "
                                  f"{torch.cuda.device_count()} CUDA devices")

    def _check_recurrent(self) -> None:
        """One line for a combination a recurrent policy does not run (docs/recurrent.md)."""
        if self.jit != "none":
            raise ConfigError(f"recurrent policies run eagerly (jit 'none'), not jit "
                              f"'{self.jit}'")
        if self.algo in ("trpo", "npg"):
            raise ConfigError(f"recurrent policies train with the PPO family, not {self.algo} "
                              "(its critic regression and Fisher products take shuffled "
                              "samples, not sequences)")
        if self.grad_backend in ("closed-form", "compiled"):
            raise ConfigError(f"recurrent policies run on the autograd backend, not "
                              f"grad_backend '{self.grad_backend}' (use 'auto' or 'autograd')")
        if self.policy:
            raise ConfigError("recurrent builds trustrl's own networks; a policy module of "
                              "your own runs with recurrent none")
        L = self.sequence_length
        if L and self.num_steps % L:
            raise ConfigError(f"sequence_length {L} must divide num_steps {self.num_steps} "
                              "(each env's segment is cut into sequences of that many steps)")
        mb = getattr(self, "minibatch_size", None)
        if L and L < self.num_steps:
            if mb is not None and self.algo != "pg" and (mb % L or mb > self.batch_size):
                raise ConfigError(f"recurrent minibatches are whole sequences of "
                                  f"sequence_length {L} steps: minibatch_size {mb} must be a "
                                  f"multiple of {L} up to num_envs*num_steps = "
                                  f"{self.batch_size}")
        elif mb is not None and self.algo != "pg" and (mb % self.num_steps
                                                       or mb > self.batch_size):
            raise ConfigError(f"recurrent minibatches are whole env sequences of num_steps "
                              f"{self.num_steps} steps: minibatch_size {mb} must be a multiple "
                              f"of num_steps up to num_envs*num_steps = {self.batch_size} "
                              f"(e.g. --set minibatch_size={self.batch_size}, or a "
                              "sequence_length that divides num_steps)")

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
    anneal_lr: bool = False
    """Decay the learning rate linearly to 0 over training (PPO's default: constant, as SB3's;
    chosen by measurement, benchmarks/SUITE.md "Defaults without a preset")."""
    anneal_steps: int | None = None
    """With anneal_lr or anneal_clip: the steps over which they fall to 0 (None: total_steps,
    so a run cut short of a preset's budget anneals over its own steps). Set it to the
    preset's budget to keep the schedules of that run, as it had them at this step."""
    adam_eps: float = 1e-5
    """Adam epsilon (1e-5 as in OpenAI's baselines; PyTorch's default is 1e-8)."""
    update_epochs: int = 10
    """K: passes over each batch (3 to 10; more makes the clip work harder)."""
    minibatch_size: int = 64
    """Samples per gradient step; must not exceed the batch (usually 32 to 4096)."""
    clip_eps: float = 0.2
    """Clip range epsilon of the ratio (0.1 to 0.3); also the band of the reported clip fraction."""
    anneal_clip: bool = False
    """Decay clip_eps linearly to 0 on the learning rate's horizon (anneal_steps, else
    total_steps), as the zoo's lin_ clip ranges; metrics.csv's clip_eps is the current one."""
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

    # PPO's own defaults of shared settings, for envs without a preset: chosen by measurement
    # against SB3's default PPO on 9 standard envs (benchmarks/SUITE.md, "Defaults without a
    # preset"); the other algorithms keep RunConfig's
    num_steps: int = 512
    """Steps per env per rollout; the batch is num_envs * num_steps (T in the chapter). PPO's
    default 512 (x 4 envs): longer rollouts learned more on 9 standard envs at 100k steps."""
    normalize_obs: bool = True
    """Running mean/std observation normalisation, saved with the agent, frozen at evaluation
    (PPO's default: on; never applied to images, one-hot or MultiBinary parts)."""
    normalize_reward: bool = True
    """Scale rewards by the running std of the discounted return (logged returns stay raw;
    PPO's default: on)."""

    algo = "ppo"

    def validate(self) -> None:
        super().validate()
        self._check_minibatch("minibatch_size")


@dataclass
class PPONoClipConfig(PPOConfig):
    """PPO without the clip: the plain surrogate mean(rho*A) optimised for K epochs (the
    chapter's and the blog's ablation). clip_eps only sets the band of the reported clip
    fraction."""

    algo = "ppo-noclip"


@dataclass
class PPODualClipConfig(PPOConfig):
    """Dual-clip PPO (Ye et al., 2020): PPO-clip whose objective is floored at c*A where A < 0,
    so a sample whose ratio ran far above 1 + eps stops pulling (algos/ppo_dualclip.py)."""

    dual_clip: float = 3.0
    """c: the floor c*A of the objective where A < 0 (the paper: 3); must exceed 1 + clip_eps."""

    algo = "ppo-dualclip"

    def validate(self) -> None:
        super().validate()
        if not self.dual_clip > 1.0 + self.clip_eps:
            raise ConfigError(f"dual_clip must exceed 1 + clip_eps = {1.0 + self.clip_eps:g}, "
                              f"got {self.dual_clip:g}")


@dataclass
class SPOConfig(PPOConfig):
    """Simple Policy Optimization (Xie et al., ICML 2025): PPO's loop with the clip replaced
    by the penalty |A| / (2 clip_eps) (rho - 1)^2 on the objective rho A, whose top sits on
    the band's edge 1 + sign(A) clip_eps (algos/spo.py)."""

    algo = "spo"


@dataclass
class PGConfig(RunConfig):
    """Vanilla actor-critic policy gradient: one gradient step per batch (PPO with K = 1 and
    one minibatch, where every ratio is 1 and the clip never acts)."""

    lr: float = 3e-4
    """Adam learning rate (1e-4 to 3e-3)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over training."""
    anneal_steps: int | None = None
    """With anneal_lr: the steps over which the rate falls to 0 (None: total_steps, so a run
    cut short of a preset's budget anneals over its own steps). Set it to the preset's budget
    to keep the schedule of that run, as it had it at this step."""
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


@dataclass
class PPOPenaltyConfig(RunConfig):
    """PPO-penalty: maximise mean(rho*A - beta*KL(pi_old||pi)) with the exact per-state KL and
    an adaptive beta (halved below d_targ/1.5, doubled above 1.5*d_targ)."""

    lr: float = 3e-4
    """Adam learning rate (1e-4 to 3e-3)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over training."""
    anneal_steps: int | None = None
    """With anneal_lr: the steps over which the rate falls to 0 (None: total_steps, so a run
    cut short of a preset's budget anneals over its own steps). Set it to the preset's budget
    to keep the schedule of that run, as it had it at this step."""
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
    fisher_subsample: int = 1
    """Fisher-vector products on every k-th sample of the batch (1: all of them). F is only
    the metric of the step, so a subsample serves: Schulman's thesis uses 10% of the data,
    sb3-contrib's sub_sampling_factor is this k. CG's cost falls about k-fold; the gradient,
    the step's KL check and the line search still use the whole batch."""
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
        if self.shared_trunk:
            raise ConfigError(f"{self.algo} needs separate actor and critic networks "
                              "(shared_trunk=false): the trust region constrains the actor only")
        self._check_minibatch("vf_minibatch_size")
        self._check_minibatch("fisher_subsample")


@dataclass
class NPGConfig(TRPOConfig):
    """Natural policy gradient: TRPO's step sqrt(2 delta / x^T F x) * x taken as it is, with no
    line search (backtrack_* are unused)."""

    algo = "npg"


CONFIGS: dict[str, type] = {
    c.algo: c for c in (PPOConfig, PPOPenaltyConfig, TRPOConfig, NPGConfig, PPONoClipConfig,
                        PGConfig, PPODualClipConfig, SPOConfig)
}

# Presets per (algo, env): the chapter's (PRESETS) and rl-baselines3-zoo's (ZOO_PRESETS), with
# their sources, in trustrl/settings/presets/; make_config applies the one `preset` asks for.
from trustrl.settings.presets import PRESETS, ZOO_PRESETS, Choice, check_label, choose  # noqa: E402


# ----- field documentation --------------------------------------------------------------------
@functools.cache
def _class_bodies(module_name: str) -> dict[str, list[ast.stmt]]:
    """Top-level class bodies of a module, by class name, from one parse of its source
    (inspect.getsource per class re-parses the whole module each time: ~0.1 s a class)."""
    import sys

    try:
        tree = ast.parse(inspect.getsource(sys.modules[module_name]))
    except (OSError, TypeError, KeyError):
        return {}
    return {n.name: n.body for n in tree.body if isinstance(n, ast.ClassDef)}


def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each dataclass field, read from the source (like tyro does)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        body = _class_bodies(klass.__module__).get(klass.__name__)
        if body is None:
            try:
                body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body  # type: ignore[attr-defined]
            except (OSError, TypeError):
                continue
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
    """A help text listing every field (except those of `skip` with the same default): name,
    type, default, doc."""
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    # skip's fields are listed with skip, unless cls changes the default (PPO's num_steps)
    skipped = {f.name: field_default(f) for f in fields(skip)} if skip is not None else {}
    lines = []
    for f in fields(cls):
        default = field_default(f)
        if f.name in skipped and skipped[f.name] == default:
            continue
        tname = _type_name(hints[f.name])
        allowed = f", {RANGES[f.name].text()}" if f.name in RANGES else ""
        if f.name in TORCH_RANGES:
            allowed += f"; {TORCH_RANGES[f.name].text().removeprefix('in ')} with vector 'torch'"
        lines.append(f"  {f.name} ({tname}, default {_fmt(default)}{allowed})\n"
                     f"      {docs.get(f.name, '')}")
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
    """Convert a string (from --set or a flag) or a file value (TOML/JSON, already typed) to the
    field's type, or raise ConfigError. File values keep their type: `seed = true` or
    `env_id = 5` is refused rather than converted; a bool is never a number."""
    if name in _ENV_PARSERS:
        return _ENV_PARSERS[name](raw)
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
            if isinstance(raw, str):
                s = raw.strip().lower()
                if s in ("1", "true", "yes", "on"):
                    return True
                if s in ("0", "false", "no", "off"):
                    return False
            raise ValueError
        if tp is int:
            if isinstance(raw, bool):
                raise ValueError
            if isinstance(raw, int):
                return raw
            if isinstance(raw, float) and raw.is_integer():
                return int(raw)
            if isinstance(raw, str):
                text = raw.strip().replace("_", "")
                if len(text) > 40:
                    raise ValueError
                try:
                    return int(text)
                except ValueError:
                    f = float(text)  # 1e5
                    if not f.is_integer():
                        raise ValueError from None
                    return int(f)
            raise ValueError
        if tp is float:
            if isinstance(raw, bool):
                raise ValueError
            if isinstance(raw, (int, float)):
                return float(raw)
            if isinstance(raw, str) and len(raw) <= 60:
                return float(raw.strip().replace("_", ""))
            raise ValueError
        if tp is str:
            if isinstance(raw, str):
                return raw
            raise ValueError
        if origin is tuple:
            if isinstance(raw, str):
                items: list[Any] = [x for x in raw.replace(" ", "").split(",") if x != ""]
                return tuple(int(x) for x in items)
            if isinstance(raw, (list, tuple)):
                if not all(isinstance(x, int) and not isinstance(x, bool) for x in raw):
                    raise ValueError
                return tuple(raw)
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        pass
    raise ConfigError(f"bad value for {name}: {_short(raw)} is not {_type_words(tp)}")


SB3_NAMES: dict[str, str] = {
    "learning_rate": "lr", "n_steps": "num_steps", "batch_size": "minibatch_size",
    "n_epochs": "update_epochs", "clip_range": "clip_eps", "n_envs": "num_envs",
    "normalize_advantage": "norm_adv", "total_timesteps": "total_steps",
    "cg_max_steps": "cg_iters", "cg_damping": "damping", "n_critic_updates": "vf_epochs",
    "line_search_shrinking_factor": "backtrack_ratio", "line_search_max_iter": "backtrack_iters",
    "sub_sampling_factor": "fisher_subsample", "tensorboard_log": "runs_dir",
}
"""Stable-Baselines3's (and sb3-contrib's) names of settings trustrl has under another name:
an unknown key that is one of them is answered with trustrl's."""


def _check_keys(cls: type, keys: Any, where: str) -> None:
    import difflib

    names = [f.name for f in fields(cls)]
    for key in keys:
        if key not in names:
            close = difflib.get_close_matches(key, names, n=3)
            ours = SB3_NAMES.get(key)
            if ours in names:
                close = [ours] + [c for c in close if c != ours]
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            if key == "batch_size" and ours in names:
                hint = (" (did you mean minibatch_size? SB3's batch_size is the minibatch; "
                        "trustrl's batch is num_envs * num_steps)")
            raise ConfigError(f"unknown config key {key!r} in {where}{hint}")


def _load_yaml(text: str, p: Path) -> Any:
    """yaml.safe_load, which builds plain data only: a !!python/... tag is refused, never run.
    Aliases (*name) are refused too (a few lines of them expand to billions of values)."""
    import yaml

    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent):
                raise ConfigError(f"config file {p}: YAML aliases (*name) are not allowed; "
                                  "write the values out")
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"cannot parse config file {p}: "
                          + " ".join(str(e).split())[:300]) from None
    except RecursionError:
        raise ConfigError(f"cannot parse config file {p}: nested too deeply") from None


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a TOML, JSON or YAML (.yaml, .yml) file of flat key = value pairs."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"config file {p} is a folder")
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}")
    try:
        if p.stat().st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"config file {p} is larger than {MAX_CONFIG_BYTES:,} bytes; "
                              "it should hold a few key = value pairs")
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"config file {p} is not UTF-8 text (TOML, JSON or YAML)") from None
    except OSError as e:
        raise ConfigError(f"cannot read config file {p}: {e.strerror or e}") from None
    if "\x00" in text:
        raise ConfigError(f"config file {p} is not a text file (TOML, JSON or YAML)")
    try:
        if p.suffix == ".json":
            data = json.loads(text)
        elif p.suffix.lower() in (".yaml", ".yml"):
            data = _load_yaml(text, p)
        else:
            try:
                import tomllib
            except ModuleNotFoundError:  # Python 3.10
                import tomli as tomllib  # type: ignore[no-redef]
            data = tomllib.loads(text)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - any parse error becomes one line
        raise ConfigError(f"cannot parse config file {p}: {e}".splitlines()[0]) from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p} must hold key = value pairs")
    for key in data:
        if not isinstance(key, str):
            raise ConfigError(f"config file {p}: key {key!r:.40} is not a name; config keys are "
                              "names such as lr or num_envs")
    for key, value in data.items():
        if isinstance(value, dict) and key != "env_kwargs":
            raise ConfigError(f"config file {p}: {key!s:.40} is a table; config keys are flat "
                              "key = value pairs")
    data.pop("algo", None)
    return data


def parse_sets(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"--set expects key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        if not key.strip():
            raise ConfigError(f"--set expects key=value, got {_short(pair)}")
        out[key.strip()] = value
    return out


def preset_choice(algo: str, env: Any, file_values: dict[str, Any], sets: dict[str, Any],
                  flags: dict[str, Any]) -> Choice:
    """The preset the layers ask for (the top layer's `preset`, else auto) at the budget they
    give (the top layer's total_steps, else the preset's own): trustrl.settings.presets.choose."""
    request = next((layer["preset"] for layer in (flags, sets, file_values) if "preset" in layer),
                   "auto")
    raw = next((layer["total_steps"] for layer in (flags, sets, file_values)
                if layer.get("total_steps") is not None), None)
    total = None if raw is None else _parse_value("total_steps", int, raw)
    if total is not None and not RANGES["total_steps"].holds(total):
        total = None  # validate() names it
    return choose(algo, env, request, total, defaults_batch(algo))


def defaults_batch(algo: str) -> int:
    """The batch (num_envs x num_steps) of trustrl's defaults for `algo`, no preset applied."""
    f = {x.name: x for x in fields(CONFIGS[algo])}
    return int(field_default(f["num_envs"])) * int(field_default(f["num_steps"]))


def make_config(
    algo: str = "ppo",
    env_id: str | None = None,
    file_values: dict[str, Any] | None = None,
    sets: dict[str, Any] | None = None,
    flags: dict[str, Any] | None = None,
    *,
    cli: bool = False,
) -> Any:
    """Resolve a config: defaults < preset < file < --set < flags. Validates it.

    The same preset rule as the config classes (RunConfig.preset): the preset asked for by
    the key `preset` of the flags, sets or file ('auto' where none does) under the values of
    the layers.

    Args:
        algo: the algorithm (ppo, ppo-noclip, ppo-dualclip, ppo-penalty, pg, trpo, npg).
        env_id: the env (None: the config class's default, CartPole-v1).
        file_values: the keys of a config file (`--config`).
        sets: `--set key=value` overrides (values as strings or typed).
        flags: the highest layer (`--env`, `--seed`, `--total-steps`); None values are skipped.
        cli: errors name the command line's options (--set, config file) rather than this
            function's arguments.

    Returns:
        The validated config (an instance of the algorithm's config class).
    """
    if algo not in CONFIGS:
        raise ConfigError(f"unknown algorithm {algo!r}; choose from {', '.join(CONFIGS)}")
    cls = CONFIGS[algo]
    file_values, sets, flags = file_values or {}, sets or {}, {
        k: v for k, v in (flags or {}).items() if v is not None
    }
    _check_keys(cls, file_values, "config file" if cli else "file_values")
    _check_keys(cls, sets, "--set" if cli else "sets")
    hints = typing.get_type_hints(cls)
    # an empty --env "" is an error, not the default env: only a missing value falls through
    env = next((v for v in (env_id, flags.get("env_id"), sets.get("env_id"),
                            file_values.get("env_id")) if v is not None), RunConfig.env_id)
    if not callable(env):
        env = _parse_value("env_id", str, env)
    choice = preset_choice(algo, env, file_values, sets, flags)
    values = dict(choice.values)
    for layer in (file_values, sets, flags):
        for key, raw in layer.items():
            if key == "policy" and callable(raw):  # Python: the factory itself
                values[key] = raw
            elif key not in ("preset", "preset_reason"):
                values[key] = _parse_value(key, hints[key], raw)
    values["env_id"], values["preset"] = env, choice.label
    values["preset_reason"] = choice.reason
    cfg = cls(**values)
    cfg.validate()
    return cfg


MAX_POPULATION = 65_536
"""Seeds of one `--seeds` population."""


def check_seed_list(spec: str) -> int:
    """Count the seeds of a `--seeds` list ('0-255', '1,2,5') without expanding it and check
    each bound; returns the count (a malformed list is left to fast.run.parse_seeds' message)."""
    if len(spec) > 1_000_000:
        raise ConfigError("--seeds is longer than a million characters")
    count = 0
    for part in spec.split(","):
        part = part.strip()
        try:
            if "-" in part[1:]:
                i = part.index("-", 1)
                a, b = int(part[:i]), int(part[i + 1:])
            else:
                a = b = int(part)
        except ValueError:
            return count  # parse_seeds names the format
        for v in (a, b):
            if not 0 <= v <= MAX_SEED:
                raise ConfigError(f"--seeds: seed {_num(v)} is outside [0, {MAX_SEED:,}]")
        count += max(0, b - a + 1)
        if count > MAX_POPULATION:
            raise ConfigError(f"--seeds lists more than {MAX_POPULATION:,} seeds, the bound of "
                              "one population")
    return count


def check_population(cfg: Any, seeds: int) -> None:
    """Seeds x num_envs of a population must fit on one device."""
    if seeds * cfg.num_envs > MAX_POPULATION_ENVS:
        raise ConfigError(f"{seeds:,} seeds x num_envs {cfg.num_envs} = "
                          f"{seeds * cfg.num_envs:,} envs is more than the bound "
                          f"{MAX_POPULATION_ENVS:,}")


def check_writable_dir(path: str | Path, what: str) -> Path:
    """A folder trustrl will create or write into: ConfigError (one line) when the path is
    empty, is a file, lies under a file, or its nearest existing folder is not writable."""
    import os

    if not str(path).strip():
        raise ConfigError(f"{what} is empty: give a folder")
    if "\x00" in str(path) or len(str(path)) > 4096:
        raise ConfigError(f"{what} {_short(str(path))} is not a usable path")
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{what} {p} is a file, not a folder")
    probe = p
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise ConfigError(f"{what} {p} cannot be made: {probe} is a file")
    if probe.exists() and not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"{what} {p} is not writable ({probe} denies writing)")
    return p


def check_checkpoint_config(saved: Any, cfg: Any, where: str) -> None:
    """config.json (cfg) and the copy of the config inside the run's checkpoint (saved) must
    describe the same run (runs_dir aside: folders move); an edited config.json, e.g. another
    env or algorithm, is a ConfigError naming the first differing keys, not a shape error in
    load_state_dict. To be called by resume after the checkpoint is loaded."""
    if not isinstance(saved, dict):
        raise ConfigError(f"{where}: the checkpoint holds no config to compare with config.json")
    mine = {k: v for k, v in config_to_dict(cfg).items() if k != "runs_dir"}
    theirs = {k: v for k, v in saved.items() if k not in ("runs_dir", "seeds")}
    for f in fields(cfg):  # a key added after the checkpoint was written: its default then
        if f.name not in theirs and f.name != "runs_dir" and f.default is not dataclasses.MISSING:
            theirs[f.name] = f.default
        elif f.name not in theirs and f.default_factory is not dataclasses.MISSING:
            theirs[f.name] = f.default_factory()  # env_kwargs {}, wrappers []
    if isinstance(theirs.get("hidden_sizes"), tuple):
        theirs["hidden_sizes"] = list(theirs["hidden_sizes"])
    diff = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
    if diff:
        k = "algo" if "algo" in diff else "env_id" if "env_id" in diff else diff[0]
        raise ConfigError(f"{where}: config.json differs from the checkpoint's config in "
                          f"{', '.join(diff[:4])}{' ...' if len(diff) > 4 else ''} ({k}: "
                          f"{_short(mine.get(k), 40)} in config.json, {_short(theirs.get(k), 40)} "
                          "in the checkpoint); a run's config cannot change on resume")


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """The config as config.json holds it: plain data; an env class, factory or wrapper given
    as a callable recorded by its import path (trustrl.envs.factory.record_env)."""
    from trustrl.envs.factory import parse_wrappers, record_env

    env_id, wrappers = record_env(cfg.env_id, parse_wrappers(cfg.wrappers))
    d = dataclasses.asdict(dataclasses.replace(cfg, env_id=env_id, wrappers=wrappers))
    d["algo"] = cfg.algo
    d["hidden_sizes"] = list(cfg.hidden_sizes)
    return d


def config_from_dict(d: Any) -> Any:
    """The config a run folder's config.json (or a sweep trial) holds, checked field by field:
    a saved config that is not a mapping, names an unknown algorithm or key, or holds a value
    that cannot work is a ConfigError, not a traceback later."""
    if not isinstance(d, dict):
        raise ConfigError(f"a saved config must be a mapping of keys, got {type(d).__name__}")
    d = dict(d)
    algo = d.pop("algo", "ppo")
    if not isinstance(algo, str) or algo not in CONFIGS:
        raise ConfigError(f"saved config names an unknown algorithm {_short(algo)}")
    d.pop("seeds", None)  # a population's shared config lists its seeds
    cls = CONFIGS[algo]
    _check_keys(cls, d, "saved config")
    hints = typing.get_type_hints(cls)
    d.setdefault("preset", None)  # a record (from before presets: none): nothing applied
    check_label(d["preset"], "")  # a record, not a request
    cfg = cls(**{k: _parse_value(k, hints[k], v) for k, v in d.items()})
    cfg.check_fields()
    return cfg


__all__ = [
    "RunConfig", "PPOConfig", "PPONoClipConfig", "PGConfig", "PPOPenaltyConfig", "TRPOConfig",
    "NPGConfig", "SPOConfig", "CONFIGS", "PRESETS", "ZOO_PRESETS", "field_docs", "describe",
    "make_config", "preset_choice",
    "load_config_file", "parse_sets", "config_to_dict", "config_from_dict", "RANGES",
    "check_writable_dir", "check_type", "MAX_SEED", "MAX_POPULATION_ENVS",
    "MAX_POPULATION", "check_seed_list", "check_population", "check_checkpoint_config",
]
