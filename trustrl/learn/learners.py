"""Learners: a collector and an algorithm for P members (seeds) composed into one iteration,
behind one small interface that the one trainer (trustrl.train) drives. The trainer owns
everything else: run folders, status, signals, checkpoints, resume, evaluation schedule,
progress and logging.

    collect (a collector) -> GAE (trustrl.maths.advantages) -> update (an algorithm of
    trustrl.algos) -> the shared metrics (episodes, critic fit before the update)

    GymLearner      the Gymnasium vector env (any env, sync or async;
                    trustrl.collect.rollout), P = 1.
    BatchedLearner  the batched classic-control envs (trustrl.collect.batched: NumPy on a CPU, torch
                    on any device), P members stepping together; its whole iteration can be
                    captured as one CUDA graph.

The algorithm, its population network (trustrl.nets.popnet) and its gradient backend
(trustrl.compute.backends) are the same objects on both, so for each algorithm the metrics.csv
columns are the same whatever the collector.
"""

from __future__ import annotations

import math
import os
import pickle
import sys
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from trustrl.algos import Algorithm, make_algorithm
from trustrl.algos.common import DIAGNOSTIC_COLUMNS, QUANTILES
from trustrl.collect.batched import BatchedCollector, batched_masks, metrics_rows
from trustrl.collect.evaluate import EVAL_SEED_OFFSET, evaluate
from trustrl.collect.rollout import Collector
from trustrl.compute import backends, compiled
from trustrl.envs import masks
from trustrl.envs.factory import env_factory
from trustrl.envs.make import EnvSpec, check_env, make_vec_env, pickle_drops_state, pixel_rows
from trustrl.maths import diagnostics as diag
from trustrl.maths import rng
from trustrl.maths.advantages import gae, gae_numpy
from trustrl.maths.normalize import ObsNormalizer, RewardScaler
from trustrl.nets.extractors import nature_cnn
from trustrl.nets.policies import Policy
from trustrl.nets.popnet import ModuleNet, PopActorCritic, PopNet
from trustrl.records.agent import Agent, make_policy
from trustrl.settings.config import RunConfig
from trustrl.util.errors import ConfigError, NotCompilable, RunError
from trustrl.util.seeding import rng_state, seed_everything, set_rng_state

BATCHED_EVALUATOR = ("greedy, batched classic-control env (NumPy on a CPU, torch on CUDA), "
                     "start states fixed by the seed")
RESTART_SEED_STRIDE = 10_007
"""Envs restarted on resume (they could not be saved mid-episode) reset with seeds
seed + RESTART_SEED_STRIDE * iteration (+ env index)."""
SHARED_COLUMNS = ("lr", "ep_return_mean", "ep_length_mean", "episodes", "value_loss_fresh",
                  "explained_variance")
"""The learner's own metrics, before the algorithm's."""


class Learner(Protocol):
    kind: str  # which learner wrote a checkpoint
    seeds: list[int]
    spec: EnvSpec
    extra_columns: tuple[str, ...]  # the algorithm's metrics.csv columns
    evaluator: str | None  # how evaluate() plays (None: Gymnasium, the ordinary evaluator)
    # after load_state_dict: why the envs restarted their episodes instead of resuming them
    # mid-episode, for the run to say so (None: resumed exactly, or nothing to say)
    restart_note: str | None
    # set by the trainer: its callbacks at rollout end, called with the rollout's episodes
    after_collect: Any

    @property
    def iteration(self) -> int: ...

    @property
    def global_step(self) -> int: ...

    def iterate(self) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
        """One iteration: (a metrics row per member, the episodes each member finished)."""
        ...

    def evaluate(self, episodes: int) -> np.ndarray:
        """Greedy returns [P, episodes], from start states fixed by each member's seed."""
        ...

    def agent(self, member: int) -> Agent: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


CORES_ENV = "TRUSTRL_CORES"
"""Environment variable: how many cores an automatic thread count may take (a sweep's local
workers set it to their share of the machine, so that trials with a CNN do not each take
every core)."""


def affinity_cores() -> int:
    """The cores this process may use (the affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS, Windows
        return os.cpu_count() or 1


def available_cores() -> int:
    """TRUSTRL_CORES where set, else the cores of the process's affinity mask."""
    value = os.environ.get(CORES_ENV, "").strip()
    if value:
        if not value.isdigit() or int(value) < 1:
            raise ConfigError(f"{CORES_ENV}={value!r}: expected a positive whole number of cores")
        return int(value)
    return affinity_cores()


def torch_threads(cfg: Any, members: int, cnn: bool = False) -> int:
    """cfg.torch_threads, or when None: the available cores (`available_cores`) from 8
    members on or for a network with a NatureCNN (`cnn`), else 1. (NatureCNN's minibatch
    passes are large enough to share: CleanRL's Breakout setting trained at 317 against 205
    steps a second with 2 threads on 2 cores, benchmarks/atari_cpu.py's medians; a 64x64
    MLP's products are not.)"""
    if cfg.torch_threads is not None:
        return int(cfg.torch_threads)
    if members < 8 and not cnn:
        return 1
    return available_cores()


def make_learner(cfg: RunConfig, seeds: list[int], cold_start: bool = False) -> Learner:
    """The learner for a config whose `vector` is resolved ('auto' already decided);
    `cold_start`: a new run, not a resume (`cold_start_eager`)."""
    if cfg.vector == "torch":
        return BatchedLearner(cfg, seeds, cold_start=cold_start)
    if len(seeds) != 1:
        raise RunError("a population of seeds runs on the batched collector (vector 'torch')")
    return GymLearner(cfg, cold_start=cold_start)


def init_policies(spec: EnvSpec, cfg: Any, seeds: list[int]) -> list[Policy]:
    """Each member's initial network exactly as a run of its seed alone builds it (on either
    collector: make_policy after seeding, as GymLearner does)."""
    out = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small QRs: threads only add overhead (20 ms vs 2 ms a network)
    try:
        for s in seeds:
            seed_everything(s)
            out.append(make_policy(spec, cfg))
    finally:
        torch.set_num_threads(threads)
    return out


def population_net(policies: list[Policy], spec: EnvSpec, device: str | torch.device
                   ) -> PopNet:
    """The MLP population network where it applies (closed-form backend available), else the
    module itself through torch.func (autograd only)."""
    if policies[0].closed_form_ok:
        return PopActorCritic.from_policies(policies, device)  # type: ignore[arg-type]
    return ModuleNet.from_policies(policies, spec.action, device)


MASKED_ALGOS = ("ppo", "ppo-noclip", "ppo-dualclip", "ppo-penalty", "spo", "pg", "trpo",
                "npg")
"""The algorithms that take action masks (their losses go through the backends'
value_and_grad; TRPO's and NPG's policy gradient, Fisher products and line search take the
batch's masks)."""


def _algorithm(cfg: Any, net: PopNet, seeds: list[int], masked: bool = False,
               prepare: bool = True) -> Algorithm:
    if masked and cfg.algo not in MASKED_ALGOS:
        raise ConfigError(f"the env gives action masks and {cfg.algo} does not use them yet "
                          f"(masked: {', '.join(MASKED_ALGOS)}); set action_mask off")
    if cfg.grad_backend in ("closed-form", "compiled") and not net.closed_form:
        raise ConfigError(f"grad_backend '{cfg.grad_backend}' needs the default MLPs with "
                          "Discrete or Box actions and no image (this network runs on "
                          "autograd); use 'auto' or 'autograd'")
    if cfg.algo in ("trpo", "npg") and bool(net.actor_mask.all()):  # type: ignore[attr-defined]
        raise ConfigError(f"{cfg.algo} needs separate actor and critic parameters: a policy "
                          "module gives them by actor_parameters() and critic_parameters() "
                          "(docs/custom_networks.md)")
    backend = compiled.pick(net, cfg.grad_backend, compile=cfg.jit == "compile")
    algo = make_algorithm(cfg, net, backend, rng.shuffle_keys(seeds, net.flat.device))
    if prepare:
        _prepare(algo, net)
    return algo


def _prepare(algo: Algorithm, net: PopNet) -> None:
    """Load (or compile) the compiled kernels the algorithm will call, before its first
    update."""
    prepare = getattr(algo.backend, "prepare", None)
    if prepare is not None:
        prepare(net, algo.kernels)


EAGER_SPS = 4_200
"""The env steps per second of compiled.ITERATION_COMPILE_SECONDS's run, trained eagerly (closed
form, NumPy rollout)."""
COMPILED_SPS = 25_000
"""That run's env steps per second trained compiled."""
COMPILE_PAYS_STEPS = int(round(
    compiled.ITERATION_COMPILE_SECONDS / (1 / EAGER_SPS - 1 / COMPILED_SPS), -4))
"""On a machine whose Numba cache lacks a run's kernels, `grad_backend` 'auto' compiles them
only for a run of at least this many env steps (all members together): from there compiling
and then training compiled ends no later than training eagerly (the compile's seconds at the
two speeds above); a shorter new run trains eagerly (closed form, NumPy rollout)."""


def cold_start_eager(cfg: Any, algo: Algorithm, members: int, gym: bool = False,
                     masked: bool | None = None) -> str | None:
    """Why a new run should train eagerly rather than compile first (a note for stderr), or
    None: only for `grad_backend` 'auto' on the compiled backend, when some kernel the run
    needs (on the batched collector, or the Gymnasium one with `gym`; `masked`: the run draws
    under action masks, by default as the batched collector would) has no compiled code on
    disk and the run is shorter than COMPILE_PAYS_STEPS."""
    if cfg.grad_backend != "auto" or algo.backend.name != "compiled":
        return None
    steps = cfg.total_steps * members
    masked = batched_masks(cfg) if masked is None else masked
    if steps >= COMPILE_PAYS_STEPS or compiled.run_cached(algo, cfg.env_id, masked, gym=gym):
        return None
    return (f"training eagerly: the compiled kernels of this run are not on this machine yet, "
            f"and compiling them (about {compiled.ITERATION_COMPILE_SECONDS / 60:.0f} minutes, "
            f"once) pays off from about {COMPILE_PAYS_STEPS:,} steps; "
            "--set grad_backend=compiled compiles them now, "
            "for this and every later run")


def _eager_if_cold(algo: Algorithm, net: PopNet, cfg: Any, why: str | None) -> None:
    """Where `why` (cold_start_eager's note): the closed-form backend in place of the
    compiled one, recorded in the config (a resume runs the same code), and the note on
    stderr."""
    if why is not None:
        algo.backend = backends.pick(net, "closed-form")
        cfg.grad_backend = "closed-form"
        print(f"trustrl: note: {why}", file=sys.stderr, flush=True)


def _rows(m: dict[str, Tensor], columns: tuple[str, ...], int_columns: tuple[str, ...]
          ) -> list[dict[str, Any]]:
    """Metrics [P] per column -> one row per member (one host transfer)."""
    with torch.no_grad():
        stacked = torch.stack([m[c].double() for c in columns], dim=1)
    return metrics_rows(stacked, columns, int_columns)


class GymLearner:
    """One seed on a Gymnasium vector env: rollout -> GAE -> the algorithm's update (P = 1)."""

    kind = "gym"
    evaluator = None
    restart_note = None
    after_collect: Any = None
    """Set by the trainer: called with the rollout's finished episodes before the update."""

    def __init__(self, cfg: RunConfig, cold_start: bool = False):
        """`cold_start`: a new run (not a resume), which trains eagerly where compiling would
        cost more than it saves (`cold_start_eager`), as BatchedLearner's."""
        self.cfg = cfg
        self._unpicklable: str | None = None  # why the sync sub-envs cannot be pickled
        self.seeds = [cfg.seed]
        seed_everything(cfg.seed)
        self.env = env_factory(cfg)  # the id, or a class/function with kwargs and wrappers
        self.spec = check_env(self.env)
        torch.set_num_threads(torch_threads(cfg, 1, nature_cnn(self.spec.layout())))
        policy = make_policy(self.spec, cfg).to(cfg.device)
        self.net = population_net([policy], self.spec, cfg.device)
        # where the env's action masks come from (None: unmasked), trustrl.envs.masks
        self.mask_source = masks.run_source(cfg.action_mask, self.env, self.spec.action,
                                            f"env {self.spec.env_id!r}")
        masked = self.mask_source is not None
        self.algo = _algorithm(cfg, self.net, self.seeds, masked, prepare=False)
        _eager_if_cold(self.algo, self.net, cfg,
                       cold_start_eager(cfg, self.algo, 1, gym=True, masked=masked)
                       if cold_start else None)
        _prepare(self.algo, self.net)
        self.extra_columns = tuple(self.algo.extra_columns)
        self.columns = SHARED_COLUMNS + self.algo.columns
        self.int_columns = ("episodes",) + self.algo.int_columns
        # images are never normalised: an observation of images only needs no normaliser
        # (and then travels as uint8 pixel rows, trustrl.collect.rollout.Collector)
        norm = ObsNormalizer((self.spec.obs_dim,), cfg.obs_clip) \
            if cfg.normalize_obs and not pixel_rows(self.spec) else None
        self._agent = Agent(policy, self.spec, norm, cfg.device)
        self.collector = self._make_collector()
        self._iteration = 0

    def _make_collector(self) -> Any:
        """The collector: the vector env of all num_envs envs in this process (a subclass
        puts them elsewhere: trustrl.learn.runners, on Ray actors)."""
        cfg = self.cfg
        self.envs = make_vec_env(self.env, cfg.num_envs, cfg.vector)
        scaler = (RewardScaler(cfg.num_envs, cfg.gamma, cfg.reward_clip)
                  if cfg.normalize_reward else None)
        state = Collector.start(self.envs, self._agent, cfg.seed, self.mask_source)
        return Collector(self.envs, self._agent, cfg.num_steps, scaler, state,
                         game_episodes=getattr(self.env, "atari", None) == "train",
                         acting=None if self.mask_source else compiled.acting(
                             self.net, self.algo.backend),
                         mask_source=self.mask_source)

    @property
    def iteration(self) -> int:
        return self._iteration

    @property
    def global_step(self) -> int:
        return self.collector.state.global_step

    def iterate(self) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
        cfg, policy = self.cfg, self._agent.policy
        it = self._iteration + 1
        # 1. rollout with pi_old; logp_old and V_old frozen inside
        rollout, episodes = self.collector.collect()
        if self.after_collect is not None:  # the trainer's callbacks at rollout end
            self.after_collect(episodes)
        # 2. advantages by GAE, targets R = A + V_old
        adv, ret = gae(rollout.rewards, rollout.values, rollout.next_values,
                       rollout.terminated, rollout.truncated, cfg.gamma, cfg.gae_lambda)
        b = rollout.flatten(adv, ret)
        batch = {k: getattr(b, k)[None] for k in ("obs", "actions", "logp_old", "values_old",
                                                   "advantages", "returns")}
        if b.old_out is not None:  # pi_old's outputs from the rollout's own forward passes
            batch["old_out"] = b.old_out[None]
        if b.action_mask is not None:  # the masks the actions were sampled under
            assert b.old_out is not None  # masked logits: pi_old as it sampled
            batch["action_mask"] = b.action_mask[None]
        if b.state0 is not None:  # recurrent: episode starts and the segment's start state
            batch["starts"], batch["state0"] = b.starts[None], b.state0[None]  # type: ignore[index]  # noqa: E501
        # 3. the algorithm's update (PPO's K epochs, TRPO's constrained step, ...), P = 1
        progress = cfg.schedule_progress(it - 1)
        self.algo.set_progress(progress)
        lr = self.algo.learning_rate(progress)
        m = self.algo.update(batch, self._iteration, lr)
        self.net.write_policy(0, policy)  # the rollout's and the agent's network
        nan = torch.tensor([math.nan])
        explained, value_loss_fresh = diag.critic_stats(
            b.values_old[None].double(), b.returns[None].double(), math.nan)
        m.update({
            "lr": torch.tensor([lr]),
            "explained_variance": explained,
            "value_loss_fresh": value_loss_fresh,
            "episodes": torch.tensor([len(episodes)]),
            "ep_return_mean": torch.tensor([float(np.mean([e.ret for e in episodes]))])
            if episodes else nan,
            "ep_length_mean": torch.tensor([float(np.mean([e.length for e in episodes]))])
            if episodes else nan,
        })
        rows = _rows({k: v.cpu() for k, v in m.items()}, self.columns, self.int_columns)
        eps = [{"global_step": e.global_step, "iteration": it, "env_index": e.env_index,
                "return": e.ret, "length": e.length} for e in episodes]
        self._iteration = it
        return rows, [eps]

    def evaluate(self, episodes: int) -> np.ndarray:
        cfg = self.cfg
        return evaluate(self._agent, self.env, episodes, deterministic=cfg.eval_deterministic,
                        seed=cfg.seed + EVAL_SEED_OFFSET, max_steps=cfg.eval_max_steps,
                        action_mask=cfg.action_mask)[None]

    def agent(self, member: int = 0) -> Agent:
        return self._agent.frozen()

    def _pickled_envs(self) -> bytes | None:
        """The mid-episode sync sub-envs pickled (for an exact resume), or None: async envs, or
        sub-envs that cannot be pickled (a lock, a socket, a local function...) or whose pickle
        leaves their state out (EzPickle: trustrl.envs.make.pickle_drops_state). A failure is
        remembered (self._unpicklable, its one-line reason) and not tried again."""
        if self.cfg.vector != "sync" or self._unpicklable is not None:
            return None
        dropped = next(filter(None, map(pickle_drops_state, self.envs.envs)), None)
        if dropped is not None:
            self._unpicklable = dropped
            return None
        try:
            return pickle.dumps(self.envs.envs)
        except Exception as e:  # PicklingError, TypeError, AttributeError, ValueError, ...
            msg = (str(e).splitlines() or [""])[0].strip()
            reason = f"{type(e).__name__}: {msg}" if msg else type(e).__name__
            self._unpicklable = reason if len(reason) <= 200 else reason[:197] + "..."
            return None

    def state_dict(self) -> dict[str, Any]:
        st = self.collector.state
        scaler = self.collector.reward_scaler
        envs = self._pickled_envs()
        return {
            "iteration": self._iteration,
            "global_step": st.global_step,
            **self._learner_state(),
            "reward_scaler": None if scaler is None else scaler.state_dict(),
            "collector": {"next_obs": st.next_obs, "ep_return": st.ep_return,
                          "ep_length": st.ep_length, "next_mask": st.next_mask,
                          "hidden": st.hidden, "next_start": st.next_start},
            # mid-episode sub-envs: the one pickle of a checkpoint (signed by RunDir); None for
            # async envs and for sub-envs that cannot be pickled (then the reason why)
            "envs": envs,
            "envs_unpicklable": self._unpicklable,
            "rng": rng_state(),
        }

    def _learner_state(self) -> dict[str, Any]:
        """The checkpoint's network, agent (its observation statistics) and algorithm state,
        whatever the collector."""
        return {"net": self.net.flat.detach().cpu().clone(), "agent": self._agent.state(),
                "algorithm": self.algo.state_dict()}

    def _load_learner_state(self, ck: dict[str, Any]) -> None:
        """What _learner_state saved, back in the network, the agent and the algorithm."""
        with torch.no_grad():
            self.net.flat.copy_(ck["net"])
        self.net.write_policy(0, self._agent.policy)
        if self._agent.obs_normalizer is not None:
            self._agent.obs_normalizer.load_state_dict(ck["agent"]["obs_normalizer"])
        self.algo.load_state_dict(ck["algorithm"])

    def load_state_dict(self, ck: dict[str, Any]) -> None:
        self._load_learner_state(ck)
        if self.collector.reward_scaler is not None:
            self.collector.reward_scaler.load_state_dict(ck["reward_scaler"])
        st = self.collector.state
        st.global_step = ck["global_step"]
        envs = None if ck["envs"] is None else pickle.loads(ck["envs"])  # verified by RunDir
        unpicklable = ck.get("envs_unpicklable")
        # a checkpoint written before EzPickle envs were left out holds them without their
        # state: restart their episodes rather than step envs that were never reset
        dropped = None if envs is None else next(filter(None, map(pickle_drops_state, envs)),
                                                 None)
        if dropped is not None:
            envs, unpicklable = None, dropped
        if envs is not None:  # exact: the sub-envs mid-episode and what they carry
            self.envs.envs = envs
            st.next_obs = ck["collector"]["next_obs"]
            st.ep_return = ck["collector"]["ep_return"]
            st.ep_length = ck["collector"]["ep_length"]
            st.next_mask = ck["collector"].get("next_mask")
            if st.hidden is not None:  # a recurrent policy's state mid-episode
                st.hidden = ck["collector"]["hidden"]
                st.next_start = ck["collector"]["next_start"]
        else:
            # async envs, or sync sub-envs that could not be pickled or whose pickle leaves
            # their state out: they restart from fresh episodes (not bit-exact), reset with
            # seeds of their own (the run's seed shifted by the iteration, so not iteration
            # 1's start states again): that reset's observation is the one carried, the
            # episode trackers start from zero
            fresh = Collector.start(self.envs, self._agent,
                                    self.cfg.seed + RESTART_SEED_STRIDE * int(ck["iteration"]),
                                    self.mask_source)
            st.next_obs, st.next_mask = fresh.next_obs, fresh.next_mask
            st.hidden, st.next_start = fresh.hidden, fresh.next_start
            st.ep_return[:] = 0.0
            st.ep_length[:] = 0
            if self.collector.reward_scaler is not None:
                self.collector.reward_scaler.returns[:] = 0.0
        self._unpicklable = unpicklable  # not tried again after a failure
        self.restart_note = self._unpicklable
        self._iteration = ck["iteration"]
        set_rng_state(ck["rng"])

    def close(self) -> None:
        self.envs.close()


class BatchedLearner:
    """P seeds on the batched classic-control envs, the whole iteration on one device.

    With jit 'cuda-graph' the iteration (rollout, GAE, update, metrics) is captured as one CUDA
    graph after two eager warm-up iterations, and replayed: the same kernels as the eager path,
    so the same numbers. With 'compile' the rollout step and the gradient are torch.compiled.
    """

    kind = "batched"
    evaluator = BATCHED_EVALUATOR
    restart_note = None  # the batched envs' state is tensors: always resumed exactly
    after_collect: Any = None
    """Set by the trainer: called with the rollout's finished episodes (a list per member),
    before the update; where the rollout is fused into the iteration (the compiled fused
    iteration, a CUDA graph's replay), after the update, once per iteration."""

    def __init__(self, cfg: RunConfig, seeds: list[int], numpy_rollout: bool | None = None,
                 cold_start: bool = False):
        """`cold_start`: a new run (not a resume) whose `grad_backend` 'auto' may train
        eagerly where compiling would cost more than it saves (`cold_start_eager`; the config
        then records 'closed-form', so its resume runs the same code)."""
        self.cfg, self.seeds = cfg, list(seeds)
        torch.set_num_threads(torch_threads(cfg, len(self.seeds)))
        dev = torch.device(cfg.device)
        self.graph = cfg.jit == "cuda-graph"
        if self.graph and dev.type != "cuda":
            raise ValueError("CUDA graphs need a CUDA device")
        self.spec = check_env(cfg.env_id)
        # the MLPs as batched products; a recurrent network through ModuleNet (autograd)
        net = population_net(init_policies(self.spec, cfg, self.seeds), self.spec, dev)
        self.net = net
        self.algo = _algorithm(cfg, net, self.seeds, prepare=False)
        _eager_if_cold(self.algo, net, cfg, cold_start_eager(cfg, self.algo, len(self.seeds))
                       if cold_start else None)
        _prepare(self.algo, net)
        self.algo.eager = not self.graph  # type: ignore[attr-defined]
        # the compiled backend compiles the rollout too, where the NumPy rollout runs
        self.collector = BatchedCollector(
            cfg, net, self.seeds, compile=cfg.jit == "compile", numpy_rollout=numpy_rollout,
            compiled_rollout=numpy_rollout is None and self.algo.backend.name == "compiled")
        self.extra_columns = tuple(self.algo.extra_columns)
        self.columns = SHARED_COLUMNS + self.algo.columns
        self.int_columns = ("episodes",) + self.algo.int_columns
        self.lr = torch.tensor(self.algo.learning_rate(0.0), dtype=torch.float32, device=dev)
        self.fused = self._fusable()
        """Whether an iteration is one compiled call (trustrl.compute.compiled.iteration): PPO on
        the compiled rollout with the compiled backend. Equal to the unfused path to float
        rounding; set False to run that path."""
        # where each metrics column sits in what _fused_body concatenates
        self._fused_perm = np.array([self._FUSED_COLUMNS.index(c) for c in self.columns]
                                    ) if self.fused else None
        self._iteration = 0
        self._graph: Any = None
        self._graph_out: tuple[Tensor, ...] | None = None
        self._warmup = 0
        self._in_rollout_hook = False  # global_step counts the rollout before its update
        self._hook_fired = False  # after_collect ran in this iteration's body

    @property
    def iteration(self) -> int:
        return self._iteration

    @property
    def global_step(self) -> int:
        """Env steps taken by each member."""
        return (self._iteration + self._in_rollout_hook) * self.cfg.num_steps * self.cfg.num_envs

    def _fusable(self) -> bool:
        from trustrl.algos.ppo import PPO

        a, net = self.algo, self.net
        return (not self.graph and self.collector.rollout_kind == "compiled"
                and isinstance(a, PPO) and a.backend.name == "compiled"
                and type(a).update is PPO.update  # pg's own metrics: the unfused path
                and a.compiled_objective() is not None
                and compiled._mlp_on_cpu(net) and net.flat.is_contiguous()  # type: ignore[attr-defined]  # noqa: E501
                and a.opt.param.data_ptr() == net.flat.data_ptr())  # type: ignore[attr-defined]  # noqa: E501

    _FUSED_COLUMNS = (("lr",) + compiled.STATS + ("policy_loss", "value_loss", "grad_norm",
                                                  "clip_fraction_mb", "entropy", "approx_kl",
                                                  "approx_kl_k1", "kl_exact", "clip_fraction",
                                                  "ratio_min", "ratio_max")
                      + tuple(c for c in DIAGNOSTIC_COLUMNS if c.startswith("ratio_q"))
                      + ("clip_eps", "epochs_run", "early_stopped"))
    """The columns of _fused_body's concatenation, in order (the diagnostics kernel's:
    its seven statistics, then the ratio's quantiles, QUANTILES' names)."""

    def _fused_body(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """`_iteration_body` as one compiled call (Compiled.ppo_iteration): the same numbers
        to float rounding, the metrics assembled here in the columns' order."""
        col, algo = self.collector, self.algo
        noise, resets = col._draws()
        n = col.T * col.N
        orders = algo.epoch_orders(int(col.it), n, algo.epochs)  # type: ignore[attr-defined]
        lr = float(self.lr)
        r = algo.backend.ppo_iteration(  # type: ignore[attr-defined]
            algo, col._compiled, col.rollout_state(), noise, resets, orders, lr,
            algo.objective(), QUANTILES)  # type: ignore[attr-defined]
        col.it += 1
        P = col.P
        diag = r["diag"]
        runs = r["epochs_run"]
        vals = np.concatenate((
            np.full((P, 1), lr), r["stats"], r["last"], diag[:, :7].astype(np.float32),
            diag[:, 7:], np.full((P, 1), np.float32(algo.clip_eps)), runs[:, None],
            (runs < algo.epochs)[:, None]), axis=1, dtype=np.float64)  # type: ignore[attr-defined]  # noqa: E501
        metrics = torch.from_numpy(vals[:, self._fused_perm])
        term, trunc = r["term"], r["trunc"]
        return (metrics, torch.from_numpy(term | trunc), torch.from_numpy(r["fin_ret"]),
                torch.from_numpy(r["fin_len"]))

    def _iteration_body(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        if self.fused:
            counter = int(self.collector.resets.counter)
            try:
                return self._fused_body()
            except NotCompilable:  # the objective's typing failed: nothing ran but the reset
                self.fused = False  # draws, taken back; the unfused epochs say so, eagerly
                self.collector.resets.counter.fill_(counter)
        cfg, col = self.cfg, self.collector
        P, N, T = col.P, col.N, col.T
        r = col.collect()
        term_b, trunc_b, fin_ret, fin_len = (r["terminated"], r["truncated"], r["fin_ret"],
                                             r["fin_len"])
        if self.after_collect is not None and not self.graph:  # the trainer's callbacks
            self._in_rollout_hook = self._hook_fired = True
            try:
                self.after_collect(self._episodes(term_b | trunc_b, fin_ret, fin_len))
            finally:
                self._in_rollout_hook = False
        with torch.no_grad():
            gae_fn = (compiled.gae if col.rollout_kind == "compiled"
                      else gae_numpy if col.numpy_rollout else gae)
            adv, ret = gae_fn(r["rewards"], r["values"], r["next_values"], term_b, trunc_b,
                              cfg.gamma, cfg.gae_lambda)

        def bflat(x: Tensor) -> Tensor:  # [T, P, N, ...] -> [P, T*N, ...]
            return x.transpose(0, 1).reshape(P, T * N, *x.shape[3:])

        batch = {"obs": bflat(r["obs"]), "actions": bflat(r["actions"]),
                 "logp_old": bflat(r["logp"]), "values_old": bflat(r["values"]),
                 "advantages": bflat(adv), "returns": bflat(ret)}
        if "old_out" in r:  # pi_old's outputs from the rollout's own forward passes
            batch["old_out"] = bflat(r["old_out"])
        if "state0" in r:  # recurrent: episode starts, each segment's start state [P, N, S]
            batch["starts"], batch["state0"] = bflat(r["starts"]), r["state0"]
        if "action_mask" in r:  # a masked run: the masks the actions were drawn under
            batch["action_mask"] = bflat(r["action_mask"])
        m = self.algo.update(batch, col.it, self.lr)
        with torch.no_grad():
            done = term_b | trunc_b
            # the compiled backend runs the same two functions compiled (as its fused
            # iteration does): one call each instead of some twenty torch operations
            stats = getattr(self.algo.backend, "learner_stats", None)
            got = None if stats is None or self.graph else stats(
                done, fin_ret, fin_len, batch["values_old"], batch["returns"])
            if got is None:
                got = (*diag.episode_stats(done, fin_ret.double(), fin_len.double(), math.nan),
                       *diag.critic_stats(batch["values_old"].double(),
                                          batch["returns"].double(), math.nan))
            (m["episodes"], m["ep_return_mean"], m["ep_length_mean"],
             m["explained_variance"], m["value_loss_fresh"]) = got
            m["lr"] = self.lr.expand(P)
            if self.graph or m["lr"].device.type != "cpu":
                metrics = torch.stack([m[c].double() for c in self.columns], dim=1)
            else:  # the same float64 values, in one NumPy conversion (no op per column)
                metrics = torch.from_numpy(np.stack([m[c].numpy() for c in self.columns],
                                                    axis=1, dtype=np.float64))
            col.it += 1
        return metrics, done, fin_ret, fin_len

    def _graph_iteration(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        if self._graph is None and self._warmup < 2:
            # warm-up on a side stream, as CUDA graph capture requires
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                out = self._iteration_body()
            torch.cuda.current_stream().wait_stream(s)
            self._warmup += 1
            return out
        if self._graph is None:
            self._graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self._graph):
                self._graph_out = self._iteration_body()
            # capture records the kernels without running them: replay once for real
        self._graph.replay()
        assert self._graph_out is not None
        return self._graph_out  # type: ignore[return-value]

    def step(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """One iteration for every member, on the device: (metrics [P, columns], and the
        episodes that ended: done mask, returns and lengths [T, P, N])."""
        progress = self.cfg.schedule_progress(self._iteration)
        self.algo.set_progress(progress)
        self.lr.fill_(self.algo.learning_rate(progress))
        self._hook_fired = False
        out = self._graph_iteration() if self.graph else self._iteration_body()
        self._iteration += 1
        return out

    def _episodes(self, done: Tensor, fin_ret: Tensor, fin_len: Tensor
                  ) -> list[list[dict[str, Any]]]:
        """The episodes the latest rollout finished, a list per member (done, returns and
        lengths [T, P, N]; global_step counting that rollout)."""
        cfg = self.cfg
        d = done.cpu().numpy()
        ret, length = fin_ret.cpu().numpy(), fin_len.cpu().numpy()
        step0 = self.global_step - cfg.num_steps * cfg.num_envs
        it = step0 // (cfg.num_steps * cfg.num_envs) + 1
        episodes = []
        for p in range(d.shape[1]):
            t_idx, n_idx = np.nonzero(d[:, p])
            episodes.append([
                {"global_step": step0 + (int(t) + 1) * cfg.num_envs, "iteration": it,
                 "env_index": int(n), "return": float(ret[t, p, n]),
                 "length": int(length[t, p, n])}
                for t, n in sorted(zip(t_idx, n_idx, strict=True))])
        return episodes

    def iterate(self) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
        metrics, done, fin_ret, fin_len = self.step()
        rows = metrics_rows(metrics, self.columns, self.int_columns)  # one host transfer
        episodes = self._episodes(done, fin_ret, fin_len)
        if self.after_collect is not None and not self._hook_fired:  # a fused rollout
            self.after_collect(episodes)
        return rows, episodes

    def evaluate(self, episodes: int) -> np.ndarray:
        return self.collector.evaluate(episodes).cpu().numpy()

    def policy(self, member: int) -> Policy:
        return self.net.to_policy(member)  # type: ignore[attr-defined,no-any-return]

    def agent(self, member: int) -> Agent:
        col = self.collector
        norm = None
        if self.cfg.normalize_obs:
            norm = ObsNormalizer((col.D,), self.cfg.obs_clip)
            norm.rms.mean = col.obs_mean[member].cpu().numpy().copy()
            norm.rms.var = col.obs_var[member].cpu().numpy().copy()
            norm.rms.count = float(col.obs_count)
            norm.frozen = True
        return Agent(self.policy(member), self.spec, norm, "cpu")

    def state_dict(self) -> dict[str, Any]:
        return {"algo": self.cfg.algo, "iteration": self._iteration,
                "net": self.net.flat.detach().cpu().clone(),
                "algorithm": self.algo.state_dict(), "collector": self.collector.state_dict()}

    def load_state_dict(self, ck: dict[str, Any]) -> None:
        if ck.get("algo", self.cfg.algo) != self.cfg.algo:
            raise RunError(f"checkpoint written by {ck['algo']}, the run's config says "
                           f"{self.cfg.algo}")
        with torch.no_grad():
            self.net.flat.copy_(ck["net"])
        self.algo.load_state_dict(ck["algorithm"])
        self.collector.load_state_dict(ck["collector"])
        self._iteration = int(ck["iteration"])

    def close(self) -> None:
        pass
