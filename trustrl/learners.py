"""Learners: a collector and an algorithm for P members (seeds), behind one small interface
that the one trainer (trustrl.train) drives. The trainer owns everything else: run folders,
status, signals, checkpoints, resume, evaluation schedule, progress and logging.

    GymLearner      the Gymnasium vector env (any env, sync or async) with the algorithms of
                    trustrl.algos; one member (P = 1).
    BatchedLearner  the batched classic-control envs (NumPy on a CPU, torch on any device)
                    with the population engines of trustrl.fast; P members stepping together.

Both give, per iteration, one metrics row per member (the same columns for the same
algorithm, whatever the collector) and each member's finished episodes.
"""

from __future__ import annotations

import pickle
from typing import Any, Protocol

import numpy as np
import torch

from trustrl import diagnostics as diag
from trustrl.advantages import gae
from trustrl.agent import Agent
from trustrl.algos import algorithm_class, make_algorithm
from trustrl.config import RunConfig
from trustrl.envs.make import EnvSpec, check_env, make_vec_env
from trustrl.errors import RunError
from trustrl.evaluate import EVAL_SEED_OFFSET, evaluate
from trustrl.normalize import ObsNormalizer, RewardScaler
from trustrl.policies import ActorCritic
from trustrl.rollout import Collector
from trustrl.seeding import rng_state, seed_everything, set_rng_state

BATCHED_EVALUATOR = ("greedy, batched classic-control env (NumPy on a CPU, torch on CUDA), "
                     "start states fixed by the seed")


class Learner(Protocol):
    kind: str  # which learner wrote a checkpoint
    seeds: list[int]
    spec: EnvSpec
    extra_columns: tuple[str, ...]  # the algorithm's metrics.csv columns
    evaluator: str | None  # how evaluate() plays (None: Gymnasium, the ordinary evaluator)

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


def make_learner(cfg: RunConfig, seeds: list[int]) -> Learner:
    """The learner for a config whose `vector` is resolved ('auto' already decided)."""
    if cfg.vector == "torch":
        return BatchedLearner(cfg, seeds)
    if len(seeds) != 1:
        raise RunError("a population of seeds runs on the batched collector (vector 'torch')")
    return GymLearner(cfg)


class GymLearner:
    """One seed on a Gymnasium vector env: rollout -> GAE -> the algorithm's update."""

    kind = "gym"
    evaluator = None

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        self.seeds = [cfg.seed]
        torch.set_num_threads(cfg.torch_threads)
        seed_everything(cfg.seed)
        self.spec = check_env(cfg.env_id)
        policy = ActorCritic(
            self.spec.obs_dim, self.spec.action, cfg.hidden_sizes, cfg.activation,
            cfg.shared_trunk, cfg.log_std_init, cfg.ortho_init,
        ).to(cfg.device)
        norm = ObsNormalizer((self.spec.obs_dim,), cfg.obs_clip) if cfg.normalize_obs else None
        self._agent = Agent(policy, self.spec, norm, cfg.device)
        self.algo = make_algorithm(cfg, policy)
        self.extra_columns = tuple(self.algo.extra_columns)
        self.envs = make_vec_env(cfg.env_id, cfg.num_envs, cfg.vector)
        scaler = (RewardScaler(cfg.num_envs, cfg.gamma, cfg.reward_clip)
                  if cfg.normalize_reward else None)
        state = Collector.start(self.envs, self._agent, cfg.seed)
        self.collector = Collector(self.envs, self._agent, cfg.num_steps, scaler, state)
        self._iteration = 0

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
        policy.eval()
        rollout, episodes = self.collector.collect()
        # 2. advantages by GAE, targets R = A + V_old
        adv, ret = gae(rollout.rewards, rollout.values, rollout.next_values,
                       rollout.terminated, rollout.truncated, cfg.gamma, cfg.gae_lambda)
        batch = rollout.flatten(adv, ret)
        # 3. the algorithm's update (PPO's K epochs, TRPO's constrained step, ...)
        policy.train()
        m = self.algo.update(batch, progress=(it - 1) / cfg.num_iterations)
        policy.eval()
        row: dict[str, Any] = {
            "explained_variance": diag.explained_variance(batch.values_old, batch.returns),
            # the critic on data it has not been trained on yet (rises when it overfits)
            "value_loss_fresh": float(0.5 * ((batch.values_old - batch.returns) ** 2).mean()),
            "episodes": len(episodes),
            "ep_return_mean": float(np.mean([e.ret for e in episodes])) if episodes else None,
            "ep_length_mean": float(np.mean([e.length for e in episodes])) if episodes else None,
            **m,
        }
        eps = [{"global_step": e.global_step, "iteration": it, "env_index": e.env_index,
                "return": e.ret, "length": e.length} for e in episodes]
        self._iteration = it
        return [row], [eps]

    def evaluate(self, episodes: int) -> np.ndarray:
        cfg = self.cfg
        return evaluate(self._agent, cfg.env_id, episodes, seed=cfg.seed + EVAL_SEED_OFFSET,
                        max_steps=cfg.eval_max_steps)[None]

    def agent(self, member: int = 0) -> Agent:
        return self._agent.frozen()

    def state_dict(self) -> dict[str, Any]:
        st = self.collector.state
        scaler = self.collector.reward_scaler
        return {
            "iteration": self._iteration,
            "global_step": st.global_step,
            "agent": self._agent.state(),
            "algorithm": self.algo.state_dict(),
            "reward_scaler": None if scaler is None else scaler.state_dict(),
            "collector": {"next_obs": st.next_obs, "ep_return": st.ep_return,
                          "ep_length": st.ep_length},
            # mid-episode sub-envs: the one pickle of a checkpoint (signed by RunDir)
            "envs": pickle.dumps(self.envs.envs) if self.cfg.vector == "sync" else None,
            "rng": rng_state(),
        }

    def load_state_dict(self, ck: dict[str, Any]) -> None:
        self._agent.policy.load_state_dict(ck["agent"]["policy"])
        if self._agent.obs_normalizer is not None:
            self._agent.obs_normalizer.load_state_dict(ck["agent"]["obs_normalizer"])
        self.algo.load_state_dict(ck["algorithm"])
        if self.collector.reward_scaler is not None:
            self.collector.reward_scaler.load_state_dict(ck["reward_scaler"])
        st = self.collector.state
        st.next_obs = ck["collector"]["next_obs"]
        st.ep_return = ck["collector"]["ep_return"]
        st.ep_length = ck["collector"]["ep_length"]
        st.global_step = ck["global_step"]
        if ck["envs"] is not None:
            self.envs.envs = pickle.loads(ck["envs"])  # verified by RunDir.load_checkpoint
        # async envs cannot be pickled: they restart from fresh episodes (not bit-exact).
        self._iteration = ck["iteration"]
        set_rng_state(ck["rng"])

    def close(self) -> None:
        self.envs.close()


class BatchedLearner:
    """P seeds on the batched classic-control envs, the whole iteration on one device."""

    kind = "batched"
    evaluator = BATCHED_EVALUATOR

    def __init__(self, cfg: RunConfig, seeds: list[int]):
        from trustrl.fast.engine import PopulationPPO

        self.cfg, self.seeds = cfg, list(seeds)
        torch.set_num_threads(cfg.torch_threads)
        jit: dict[str, Any] = dict(compile=cfg.jit == "compile", graph=cfg.jit == "cuda-graph")
        if cfg.grad_backend == "autograd" and cfg.algo not in ("trpo", "npg"):
            jit["autograd"] = True  # else the closed form where the loss has one
        self.engine: PopulationPPO
        if cfg.algo == "ppo-penalty":
            from trustrl.fast.ppo_penalty import PopulationPPOPenalty

            self.engine = PopulationPPOPenalty(cfg, self.seeds, **jit)  # type: ignore[arg-type]
        elif cfg.algo == "pg":
            from trustrl.fast.pg import PopulationPG

            self.engine = PopulationPG(cfg, self.seeds, **jit)  # type: ignore[arg-type]
        elif cfg.algo in ("trpo", "npg"):
            from trustrl.fast.trpo import PopulationTRPO

            self.engine = PopulationTRPO(cfg, self.seeds,  # type: ignore[arg-type]
                                         line_search=cfg.algo == "trpo", **jit)
        else:
            self.engine = PopulationPPO(cfg, self.seeds,  # type: ignore[arg-type]
                                        clip=cfg.algo == "ppo", **jit)
        self.spec = self.engine.spec
        self.extra_columns = tuple(algorithm_class(cfg.algo).extra_columns)

    @property
    def label(self) -> str:
        """PPO's and TRPO's engine states have the same layout but not the same meaning
        (TRPO's Adam is the critic's alone)."""
        return {"trpo": "population-trpo", "npg": "population-trpo", "pg": "population-pg",
                "ppo-penalty": "population-ppo-penalty"}.get(self.cfg.algo, "population-ppo")

    @property
    def iteration(self) -> int:
        return self.engine.iteration

    @property
    def global_step(self) -> int:
        return self.engine.global_step

    def iterate(self) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
        from trustrl.fast.engine import metrics_rows

        cfg, eng = self.cfg, self.engine
        metrics, done, fin_ret, fin_len = eng.iterate()
        it = eng.iteration
        rows = metrics_rows(metrics, eng.columns, eng.int_columns)  # one host transfer
        d = done.cpu().numpy()
        ret, length = fin_ret.cpu().numpy(), fin_len.cpu().numpy()
        step0 = eng.global_step - cfg.num_steps * cfg.num_envs
        episodes = []
        for p, row in enumerate(rows):
            row["clip_eps"] = cfg.clip_eps
            t_idx, n_idx = np.nonzero(d[:, p])
            episodes.append([
                {"global_step": step0 + (int(t) + 1) * cfg.num_envs, "iteration": it,
                 "env_index": int(n), "return": float(ret[t, p, n]),
                 "length": int(length[t, p, n])}
                for t, n in sorted(zip(t_idx, n_idx, strict=True))])
        return rows, episodes

    def evaluate(self, episodes: int) -> np.ndarray:
        return self.engine.evaluate(episodes).cpu().numpy()

    def agent(self, member: int) -> Agent:
        eng = self.engine
        norm = None
        if self.cfg.normalize_obs:
            norm = ObsNormalizer((eng.D,), self.cfg.obs_clip)
            norm.rms.mean = eng.obs_mean[member].cpu().numpy().copy()
            norm.rms.var = eng.obs_var[member].cpu().numpy().copy()
            norm.rms.count = float(eng.obs_count)
            norm.frozen = True
        return Agent(eng.policy(member), eng.spec, norm, "cpu")

    def state_dict(self) -> dict[str, Any]:
        return {"engine": self.label, "algo": self.cfg.algo, "state": self.engine.state_dict()}

    def load_state_dict(self, ck: dict[str, Any]) -> None:
        if ck.get("engine") != self.label:
            raise RunError(f"checkpoint not written by the batched {self.cfg.algo} engine of "
                           "this trustrl version")
        if ck.get("algo", self.cfg.algo) != self.cfg.algo:
            raise RunError(f"checkpoint written by {ck['algo']}, the run's config says "
                           f"{self.cfg.algo}")
        self.engine.load_state_dict(ck["state"])

    def close(self) -> None:
        pass
