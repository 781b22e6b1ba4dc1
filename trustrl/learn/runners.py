"""One run's rollout on N runners: Ray actors (or, inline, objects in the learner's process),
each stepping a Gymnasium vector env of num_envs / N envs with the ordinary collector
(trustrl.collect.rollout.Collector: the same rollout code, not a second one).

    learner (RunnerLearner: GymLearner's iteration)        runner r (Runner)
      weights + normaliser statistics, one ray.put   ->     Collector.collect() on its envs
      segments gathered, concatenated on the env axis <-   Rollout [T, N/N_r], episodes,
      GAE (trustrl.maths.advantages), the algorithm's update     its statistics of this segment

Runner r steps envs r*n .. r*n + n - 1 of the single-process run (n = num_envs / N), reset
with the same seeds (seed + env index). Runner 0 draws its actions from the run's own torch
stream, runner r > 0 from one seeded by (seed, r): with N = 1 a run is the single-process
run, bit for bit. The observation normaliser's and the reward scaler's statistics are merged
exactly (RunningMeanStd.merge, Chan et al.'s parallel update): the learner's statistics after
an iteration are runner 0's (the learner's statistics plus its rows, updated step by step)
merged with what each other runner saw in its segment, in runner order. So a run is a
function of (seed, N): on Ray, inline, on one machine or many (CPU, the same thread count).
A recurrent policy's hidden state stays in each runner's collector from one segment to the
next; a segment carries its episode starts and its start state, which the learner
concatenates on the env axis for its whole-sequence minibatches.

Faults: a runner that dies (its process killed, its node lost) is restarted as a fresh actor
and its segment redone; its envs restart their episodes (the dead runner's steps of that
segment are dropped, never counted), reset with seeds of (seed, runner, restart); the
iteration's `runner_restarts` column in metrics.csv counts the restarts. Losing the learner
is the ordinary resume: the checkpoint holds every runner's envs (when they pickle), episode
trackers, reward-scaler returns and RNG stream.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import pickle
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from trustrl.collect.rollout import Collector, Episode, Rollout
from trustrl.envs.factory import env_factory
from trustrl.envs.make import check_env, make_vec_env, pickle_drops_state, pixel_rows
from trustrl.learn.learners import RESTART_SEED_STRIDE, GymLearner
from trustrl.maths.normalize import ObsNormalizer, RewardScaler, RunningMeanStd
from trustrl.records.agent import Agent, make_policy
from trustrl.settings.config import RunConfig
from trustrl.util.errors import ConfigError, NonFiniteError, RunError, TrustrlError
from trustrl.util.lifeline import reap_descendants_when_gone

MAX_RESTARTS = 3
"""Restarts of one runner within one iteration before the run fails (a runner that dies
every time is a bug of the env, not bad luck)."""
INLINE = "inline"
"""ray_address for runners in the learner's process, one after the other (no Ray)."""


def runner_seed(seed: int, runner: int, restart: int = 0) -> int:
    """The seed of runner `runner`'s own streams (its torch RNG; after a restart, also its
    envs' resets), a function of the run's seed, the runner index and the restart count."""
    return int(np.random.SeedSequence([seed, runner, restart]).generate_state(1)[0])


def torch_state(seed: int) -> torch.Tensor:
    """The torch CPU generator's state after manual_seed(seed)."""
    return torch.Generator().manual_seed(seed).get_state()


class TrackedStats(RunningMeanStd):
    """A RunningMeanStd that also keeps `delta`: the statistics of the rows folded in since
    the learner last took them (what a runner reports after a segment)."""

    def __init__(self, shape: tuple[int, ...] = ()):
        super().__init__(shape)
        self.delta = RunningMeanStd(shape, epsilon=0.0)

    def update(self, batch: np.ndarray) -> None:
        super().update(batch)
        self.delta.update(batch)

    def merge(self, mean: np.ndarray, var: np.ndarray, count: float) -> None:
        super().merge(mean, var, count)
        self.delta.merge(mean, var, count)

    def begin(self, merged: dict[str, Any]) -> None:
        """Start a segment from the learner's statistics; rows not yet reported (a restarted
        runner's first reset) are folded in again, so they reach the learner once."""
        pending = self.delta
        self.delta = RunningMeanStd(self.mean.shape, epsilon=0.0)
        self.load_state_dict(merged)
        if pending.count:
            self.merge(pending.mean, pending.var, pending.count)

    def report(self) -> dict[str, Any]:
        """{'local': these statistics, 'delta': those of the rows since the last report}."""
        out = {"local": self.state_dict(), "delta": self.delta.state_dict()}
        self.delta = RunningMeanStd(self.mean.shape, epsilon=0.0)
        return out


def merge_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The learner's statistics after a segment: runner 0's own, then each other runner's
    delta merged in runner order (a delta with no rows changes nothing, not even rounding)."""
    rms = RunningMeanStd()
    rms.load_state_dict(reports[0]["local"])
    for rep in reports[1:]:
        d = rep["delta"]
        if d["count"]:
            rms.merge(np.asarray(d["mean"]), np.asarray(d["var"]), float(d["count"]))
    return rms.state_dict()


@dataclass
class Segment:
    """What a runner sends back after collecting: its rollout [T, n, ...] (uint8 pixel rows
    for observations of images only), the episodes it finished (its own env indices,
    global_step counted from 0 over its own envs) and its statistics' reports."""

    rollout: Rollout
    episodes: list[Episode]
    obs_stats: dict[str, Any] | None
    reward_stats: dict[str, Any] | None


class Runner:
    """One runner: its share of the envs and the ordinary collector over them.

    Plain Python: the body of a Ray actor, or an object in the learner's process (inline).
    Its streams are its own: the torch RNG state is swapped in around each collect, and so is
    its thread count (`threads`), so inline runners draw what actors draw."""

    def __init__(self, cfg: RunConfig, index: int, num_envs: int, env_seed: int,
                 rng: torch.Tensor, threads: int, mask_source: str | None = None,
                 cwd: str | None = None):
        if cwd is not None and os.path.isdir(cwd):
            # the learner's folder, searched after the installed packages (as
            # trustrl.util.importing does): users' env modules found as the learner finds them
            os.chdir(cwd)
            if cwd not in sys.path:
                sys.path.append(cwd)
        self.cfg, self.index, self.threads = cfg, index, threads
        self.env = env_factory(cfg)
        spec = check_env(self.env)
        norm = None
        if cfg.normalize_obs and not pixel_rows(spec):  # as GymLearner: never on images
            norm = ObsNormalizer((spec.obs_dim,), cfg.obs_clip)
            norm.rms = TrackedStats((spec.obs_dim,))
        # the weights come from the learner: no orthogonal init (QRs of a CNN's layers, seconds)
        policy = make_policy(spec, dataclasses.replace(cfg, ortho_init=False))
        self.agent = Agent(policy, spec, norm, "cpu")
        self.envs = make_vec_env(self.env, num_envs, cfg.vector)
        scaler = None
        if cfg.normalize_reward:
            scaler = RewardScaler(num_envs, cfg.gamma, cfg.reward_clip)
            scaler.rms = TrackedStats(())
        # the learner's mask source (trustrl.envs.masks; None: unmasked): the masks each
        # action was sampled under travel in the segment's rollout, the next observations'
        # (from info) in the runner's state
        self.mask_source = mask_source
        state = Collector.start(self.envs, self.agent, env_seed, mask_source)
        self.collector = Collector(self.envs, self.agent, cfg.num_steps, scaler, state,
                                   game_episodes=getattr(self.env, "atari", None) == "train",
                                   mask_source=mask_source)
        self.rng = rng
        self._unpicklable: str | None = None

    # GymLearner's: the sub-envs pickled for an exact resume, or None (and why not)
    _pickled_envs = GymLearner._pickled_envs

    def pid(self) -> int:
        return os.getpid()

    def _stats(self) -> tuple[TrackedStats | None, TrackedStats | None]:
        norm, scaler = self.agent.obs_normalizer, self.collector.reward_scaler
        return (None if norm is None else norm.rms,  # type: ignore[return-value]
                None if scaler is None else scaler.rms)

    def start_stats(self) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The reports of what the first reset fed the statistics."""
        return tuple(None if s is None else s.report() for s in self._stats())  # type: ignore

    def collect(self, params: tuple[dict[str, torch.Tensor], Any, Any]) -> Segment:
        """One segment with the learner's weights and statistics `params`."""
        weights, obs_stats, reward_stats = params
        self.agent.policy.load_state_dict(weights)
        for stats, merged in zip(self._stats(), (obs_stats, reward_stats), strict=True):
            if stats is not None:
                stats.begin(merged)
        self.collector.state.global_step = 0
        outer_rng, outer_threads = torch.get_rng_state(), torch.get_num_threads()
        torch.set_rng_state(self.rng)
        torch.set_num_threads(self.threads)
        try:
            rollout, episodes = self.collector.collect()
        except NonFiniteError as e:  # the run's env index, not this runner's
            n = self.collector.num_envs
            raise NonFiniteError(e.what, self.index * n + e.env_index, e.step) from None
        finally:
            self.rng = torch.get_rng_state()
            torch.set_rng_state(outer_rng)
            torch.set_num_threads(outer_threads)
        obs_rep, rew_rep = (None if s is None else s.report() for s in self._stats())
        return Segment(rollout, episodes, obs_rep, rew_rep)

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps of this runner (its envs pickled, or None and why not)."""
        st, scaler = self.collector.state, self.collector.reward_scaler
        obs, rew = self._stats()
        return {"envs": self._pickled_envs(), "envs_unpicklable": self._unpicklable,
                "next_obs": st.next_obs, "next_mask": st.next_mask,
                "hidden": st.hidden, "next_start": st.next_start,
                "ep_return": st.ep_return, "ep_length": st.ep_length,
                "reward_returns": None if scaler is None else scaler.returns.copy(),
                "obs_pending": None if obs is None else obs.delta.state_dict(),
                "reward_pending": None if rew is None else rew.delta.state_dict(),
                "rng": self.rng}

    def load_state(self, s: dict[str, Any], envs: bytes | None, restart_seed: int
                   ) -> str | None:
        """Continue from a checkpoint's state; the envs mid-episode from their pickle
        (verified by the learner's RunDir) or, without one, restarted from fresh episodes
        reset with seeds restart_seed + i. Returns why they restarted (None: exact)."""
        st, scaler = self.collector.state, self.collector.reward_scaler
        sub = None if envs is None else pickle.loads(envs)
        unpicklable = s["envs_unpicklable"]
        dropped = None if sub is None else next(filter(None, map(pickle_drops_state, sub)), None)
        if dropped is not None:
            sub, unpicklable = None, dropped
        for stats, pending in zip(self._stats(), (s["obs_pending"], s["reward_pending"]),
                                  strict=True):
            if stats is not None:
                stats.delta.load_state_dict(pending)
        if sub is not None:
            self.envs.envs = sub
            # copies: arrays from Ray's object store are read-only
            st.next_obs = copy.deepcopy(s["next_obs"])
            st.next_mask = copy.deepcopy(s.get("next_mask"))
            if st.hidden is not None:  # a recurrent policy's state mid-episode
                st.hidden, st.next_start = np.array(s["hidden"]), np.array(s["next_start"])
            st.ep_return, st.ep_length = np.array(s["ep_return"]), np.array(s["ep_length"])
            if scaler is not None:
                scaler.returns = np.array(s["reward_returns"], np.float64)
        else:  # as GymLearner: fresh episodes (their first observations are counted)
            fresh = Collector.start(self.envs, self.agent, restart_seed, self.mask_source)
            st.next_obs, st.next_mask = fresh.next_obs, fresh.next_mask
            st.hidden, st.next_start = fresh.hidden, fresh.next_start
            st.ep_return[:] = 0.0
            st.ep_length[:] = 0
        self.rng = s["rng"]
        self._unpicklable = unpicklable
        return unpicklable

    def close(self) -> None:
        self.envs.close()


@dataclass
class PoolState:
    """The collector's bookkeeping the learner reads (global_step), as RolloutState's."""

    global_step: int = 0
    restarts: int = 0
    """Runner restarts in the last iteration."""
    restarts_total: int = 0
    log: list[str] = field(default_factory=list)


def _first_line(e: BaseException) -> str:
    msg = (str(e).splitlines() or [""])[0].strip()
    return f"{type(e).__name__}: {msg[:200]}" if msg else type(e).__name__


def require_ray() -> Any:
    try:
        import ray
    except ModuleNotFoundError:
        raise ConfigError("runners on Ray need Ray: pip install 'trustrl[ray]' (or "
                          "ray_address 'inline')") from None
    return ray


class RunnerPool:
    """The collector of RunnerLearner: N runners behind Collector's collect() -> (Rollout,
    episodes), the rollout [T, num_envs] in the single-process run's env order."""

    def __init__(self, cfg: RunConfig, agent: Agent, rng0: torch.Tensor,
                 mask_source: str | None = None):
        self.cfg, self.agent, self.mask_source = cfg, agent, mask_source
        self.N = cfg.runners
        self.n = cfg.num_envs // self.N
        self.reward_scaler = None  # the learner's checkpoint takes the runners' (state_dict)
        self.state = PoolState()
        self.reward_stats = RunningMeanStd() if cfg.normalize_reward else None
        self.inline = cfg.ray_address == INLINE
        self.threads = int(cfg.torch_threads or 1)
        self.ray: Any = None
        self._started_ray = False
        if not self.inline:
            self._connect()
        rngs = [rng0] + [torch_state(runner_seed(cfg.seed, r)) for r in range(1, self.N)]
        self.runners = [self._spawn(r, cfg.seed + r * self.n, rngs[r]) for r in range(self.N)]
        starts = self._gather([self._call(r, "start_stats") for r in range(self.N)])
        obs_reps = [s[0] for s in starts]
        if agent.obs_normalizer is not None:
            agent.obs_normalizer.rms.load_state_dict(merge_reports(obs_reps))

    # --- Ray or inline --------------------------------------------------------------------
    def _connect(self) -> None:
        ray = self.ray = require_ray()
        if ray.is_initialized():
            return
        addr = self.cfg.ray_address or os.environ.get("RAY_ADDRESS")
        try:
            if addr:
                ray.init(address=addr, log_to_driver=False)
            else:  # one CPU a runner, even where the machine has fewer
                ray.init(num_cpus=max(self.N, os.cpu_count() or 1), include_dashboard=False,
                         log_to_driver=False)
                reap_descendants_when_gone()  # the instance's processes end with this one
        except Exception as e:  # noqa: BLE001 - connection errors become one line
            raise RunError(f"cannot start Ray ({addr or 'a local instance'}): "
                           f"{_first_line(e)}") from None
        self._started_ray = True

    def _spawn(self, r: int, env_seed: int, rng: torch.Tensor) -> Any:
        args = (self.cfg, r, self.n, env_seed, rng, self.threads, self.mask_source)
        if self.inline:
            return Runner(*args)
        try:
            cwd = os.getcwd()
        except OSError:
            cwd = None
        actor = self.ray.remote(Runner).options(num_cpus=1, max_restarts=0)
        return actor.remote(*args, cwd=cwd)

    def _call(self, r: int, method: str, *args: Any) -> Any:
        """Runner r's method: its result inline, an object ref on Ray."""
        if self.inline:
            return getattr(self.runners[r], method)(*args)
        return getattr(self.runners[r], method).remote(*args)

    def _lost(self, e: BaseException) -> bool:
        """Whether `e` says a runner's process or node is gone (not an error of its code)."""
        x = self.ray.exceptions
        return isinstance(e, (x.RayActorError, x.WorkerCrashedError, x.ObjectLostError))

    def _get(self, r: int, ref: Any, restartable: bool = False) -> Any:
        """The result of `ref`; one line of error for what the runner raised (its own
        TrustrlError as it is). With `restartable`, a lost runner raises Ray's error for
        the caller to restart it; otherwise that is one line too."""
        if self.inline:
            return ref
        try:
            return self.ray.get(ref)
        except Exception as e:  # noqa: BLE001 - Ray's errors become one line
            if restartable and self._lost(e):
                raise
            cause: BaseException = e
            while isinstance(getattr(cause, "cause", None), BaseException):  # Ray's wrappers
                cause = cause.cause  # type: ignore[attr-defined]
            if isinstance(cause, TrustrlError):
                raise cause from None
            raise RunError(f"runner {r}: {_first_line(cause)}") from None

    def _gather(self, refs: list[Any]) -> list[Any]:
        return [self._get(r, ref) for r, ref in enumerate(refs)]

    def _restart(self, r: int, why: str) -> None:
        """A fresh runner r in place of a dead one: new episodes from seeds of (seed, r,
        restart count), its own torch stream likewise."""
        st = self.state
        st.restarts += 1
        st.restarts_total += 1
        st.log.append(f"runner {r} restarted ({why}); its segment is redone")
        print(f"trustrl: {st.log[-1]}", file=sys.stderr)
        if not self.inline:
            try:
                self.ray.kill(self.runners[r])
            except Exception:  # noqa: BLE001 - already gone
                pass
        seed = runner_seed(self.cfg.seed, r, st.restarts_total)
        self.runners[r] = self._spawn(r, seed % 2**31, torch_state(seed))

    # --- the collector's interface ----------------------------------------------------------
    def params(self) -> tuple[dict[str, torch.Tensor], Any, Any]:
        norm = self.agent.obs_normalizer
        weights = {k: v.detach().cpu() for k, v in self.agent.policy.state_dict().items()}
        return (weights, None if norm is None else norm.rms.state_dict(),
                None if self.reward_stats is None else self.reward_stats.state_dict())

    def collect(self) -> tuple[Rollout, list[Episode]]:
        """Every runner's segment with the current weights (sent once), merged."""
        params: Any = self.params()
        if not self.inline:
            params = self.ray.put(params)  # once; each runner reads it from the object store
        self.state.restarts = 0
        refs = [self._call(r, "collect", params) for r in range(self.N)]
        segments: list[Segment] = []
        for r, ref in enumerate(refs):
            for attempt in range(MAX_RESTARTS + 1):
                try:
                    segments.append(self._get(r, ref, restartable=True))
                    break
                except Exception as e:  # noqa: BLE001 - a lost runner (Ray's errors vary)
                    if attempt == MAX_RESTARTS:
                        raise RunError(f"runner {r} died {attempt + 1} times in one iteration "
                                       f"({_first_line(e)})") from None
                    self._restart(r, type(e).__name__)
                    ref = self._call(r, "collect", params)
        return self._merge(segments)

    def _merge(self, segments: list[Segment]) -> tuple[Rollout, list[Episode]]:
        dev, n, N = self.agent.device, self.n, self.cfg.num_envs
        first = segments[0].rollout
        parts = {}
        for name in ("obs", "actions", "logp", "values", "rewards", "next_values",
                     "terminated", "truncated", "actor_out", "action_mask", "starts", "state0"):
            if getattr(first, name) is None:
                parts[name] = None
                continue
            # [T, n, ...] on the env axis; a recurrent segment's start states [n, S] on theirs
            axis = 0 if name == "state0" else 1
            parts[name] = torch.cat([getattr(s.rollout, name) for s in segments],
                                    dim=axis).to(dev)
        step0 = self.state.global_step
        episodes = [Episode(step0 + (e.global_step // n) * N, r * n + e.env_index, e.ret,
                            e.length)
                    for r, s in enumerate(segments) for e in s.episodes]
        episodes.sort(key=lambda e: (e.global_step, e.env_index))
        if self.agent.obs_normalizer is not None:
            self.agent.obs_normalizer.rms.load_state_dict(
                merge_reports([s.obs_stats for s in segments]))  # type: ignore[misc]
        if self.reward_stats is not None:
            self.reward_stats.load_state_dict(
                merge_reports([s.reward_stats for s in segments]))  # type: ignore[misc]
        self.state.global_step += self.cfg.num_steps * N
        return Rollout(**parts), episodes

    # --- checkpoints ------------------------------------------------------------------------
    def runner_states(self) -> list[dict[str, Any]]:
        return self._gather([self._call(r, "state") for r in range(self.N)])

    def load_runner_states(self, states: list[dict[str, Any]], envs: list[bytes | None],
                           iteration: int) -> str | None:
        seeds = [self.cfg.seed + RESTART_SEED_STRIDE * iteration + r * self.n
                 for r in range(self.N)]
        notes = self._gather([self._call(r, "load_state", states[r], envs[r], seeds[r])
                              for r in range(self.N)])
        return next(filter(None, notes), None)

    def pids(self) -> list[int]:
        return self._gather([self._call(r, "pid") for r in range(self.N)])

    def close(self) -> None:
        if self.inline:
            for runner in self.runners:
                runner.close()
            return
        for actor in self.runners:
            try:
                self.ray.kill(actor)
            except Exception:  # noqa: BLE001 - a dead actor
                pass
        if self._started_ray:
            self.ray.shutdown()


class RunnerLearner(GymLearner):
    """GymLearner's iteration (GAE, the algorithm's update, the shared metrics) over a
    RunnerPool: the rollout on `runners` runners. Its metrics.csv has one more column,
    runner_restarts (runners restarted in that iteration)."""

    kind = "runners"

    def __init__(self, cfg: RunConfig):
        super().__init__(cfg)
        self.extra_columns = self.extra_columns + ("runner_restarts",)

    def _make_collector(self) -> RunnerPool:
        if self.cfg.vector not in ("sync", "async"):
            raise ConfigError("runners step Gymnasium vector envs: vector 'sync' or 'async'")
        # runner 0 continues this process's torch stream from here, as the single-process
        # collector would
        return RunnerPool(self.cfg, self._agent, torch.get_rng_state(), self.mask_source)

    @property
    def pool(self) -> RunnerPool:
        return self.collector  # type: ignore[return-value]

    def iterate(self) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
        rows, eps = super().iterate()
        rows[0]["runner_restarts"] = self.pool.state.restarts
        return rows, eps

    def state_dict(self) -> dict[str, Any]:
        states = self.pool.runner_states()
        envs = [s.pop("envs") for s in states]
        reason = next((s["envs_unpicklable"] for s in states if s["envs_unpicklable"]), None)
        stats = self.pool.reward_stats
        return {
            "iteration": self._iteration,
            "global_step": self.global_step,
            **self._learner_state(),
            "reward_stats": None if stats is None else stats.state_dict(),
            "runners": states,
            # the runners' sub-envs, one signed pickle (RunDir signs "envs"): a list of each
            # runner's pickle, or None where none pickles
            "envs": pickle.dumps(envs) if any(e is not None for e in envs) else None,
            "envs_unpicklable": reason,
        }

    def load_state_dict(self, ck: dict[str, Any]) -> None:
        if len(ck["runners"]) != self.pool.N:
            raise RunError(f"the checkpoint has {len(ck['runners'])} runners, the run "
                           f"{self.pool.N}")
        self._load_learner_state(ck)
        if self.pool.reward_stats is not None:
            self.pool.reward_stats.load_state_dict(ck["reward_stats"])
        envs = [None] * self.pool.N if ck["envs"] is None else pickle.loads(ck["envs"])
        self._iteration = int(ck["iteration"])
        self.pool.state.global_step = int(ck["global_step"])
        self.restart_note = self.pool.load_runner_states(ck["runners"], envs, self._iteration)

    def close(self) -> None:
        self.pool.close()
