"""The training loop: collect -> advantages -> update -> log -> checkpoint.

One function, `train(config)`, does a whole run; `--resume` re-enters the same loop from a
checkpoint that holds everything that decides the future of the run: network and optimizer,
normalisers, the torch/NumPy/Python RNG states, the sub-envs (pickled, mid-episode) and the
collector's trackers. So on CPU a killed-and-resumed run writes the same metrics as one that
never stopped.
"""

from __future__ import annotations

import json
import pickle
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trustrl import diagnostics as diag
from trustrl.advantages import gae
from trustrl.agent import Agent
from trustrl.algos import make_algorithm
from trustrl.config import RunConfig, config_from_dict, config_to_dict
from trustrl.envs.make import check_env, make_vec_env
from trustrl.errors import RunError
from trustrl.evaluate import EVAL_SEED_OFFSET, evaluate
from trustrl.normalize import ObsNormalizer, RewardScaler
from trustrl.policies import ActorCritic
from trustrl.rollout import Collector
from trustrl.runs import METRIC_COLUMNS, RunDir, atomic_write_text

CHECKPOINT_FORMAT = 1


@dataclass
class TrainResult:
    run_dir: Path
    agent: Agent
    final_eval: dict[str, Any]
    metrics: list[dict[str, Any]] = field(default_factory=list)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(),
            "torch": torch.get_rng_state()}


def _set_rng_state(s: dict[str, Any]) -> None:
    random.setstate(s["python"])
    np.random.set_state(s["numpy"])
    torch.set_rng_state(s["torch"])


def solved(cfg: RunConfig, eval_mean: float | None) -> bool:
    """True when cfg.stop_return is set and a greedy evaluation reached it."""
    return cfg.stop_return is not None and eval_mean is not None and eval_mean >= cfg.stop_return


class Trainer:
    """Holds the state of one run; `run()` iterates until total_steps."""

    def __init__(self, cfg: RunConfig, run: RunDir, progress: bool = True):
        self.cfg, self.run_dir, self.show_progress = cfg, run, progress
        torch.set_num_threads(cfg.torch_threads)
        seed_everything(cfg.seed)
        self.spec = check_env(cfg.env_id)
        policy = ActorCritic(
            self.spec.obs_dim, self.spec.action, cfg.hidden_sizes, cfg.activation,
            cfg.shared_trunk, cfg.log_std_init, cfg.ortho_init,
        ).to(cfg.device)
        norm = ObsNormalizer((self.spec.obs_dim,), cfg.obs_clip) if cfg.normalize_obs else None
        self.agent = Agent(policy, self.spec, norm, cfg.device)
        self.algo = make_algorithm(cfg, policy)
        run.metric_columns = METRIC_COLUMNS + list(self.algo.extra_columns)
        self.envs = make_vec_env(cfg.env_id, cfg.num_envs, cfg.vector)
        scaler = (RewardScaler(cfg.num_envs, cfg.gamma, cfg.reward_clip)
                  if cfg.normalize_reward else None)
        state = Collector.start(self.envs, self.agent, cfg.seed)
        self.collector = Collector(self.envs, self.agent, cfg.num_steps, scaler, state)
        self.iteration = 0
        self.elapsed = 0.0
        self.metrics: list[dict[str, Any]] = []

    # --- checkpoint --------------------------------------------------------------------------
    def checkpoint_state(self) -> dict[str, Any]:
        st = self.collector.state
        scaler = self.collector.reward_scaler
        return {
            "format": CHECKPOINT_FORMAT,
            "iteration": self.iteration,
            "global_step": st.global_step,
            "elapsed": self.elapsed,
            "config": config_to_dict(self.cfg),
            "agent": self.agent.state(),
            "algorithm": self.algo.state_dict(),
            "reward_scaler": None if scaler is None else scaler.state_dict(),
            "collector": {"next_obs": st.next_obs, "ep_return": st.ep_return,
                          "ep_length": st.ep_length},
            "envs": pickle.dumps(self.envs.envs) if self.cfg.vector == "sync" else None,
            "rng": _rng_state(),
        }

    def restore(self, ck: dict[str, Any]) -> None:
        if ck.get("format") != CHECKPOINT_FORMAT:
            raise RunError("checkpoint format not understood by this trustrl version")
        self.agent.policy.load_state_dict(ck["agent"]["policy"])
        if self.agent.obs_normalizer is not None:
            self.agent.obs_normalizer.load_state_dict(ck["agent"]["obs_normalizer"])
        self.algo.load_state_dict(ck["algorithm"])
        if self.collector.reward_scaler is not None:
            self.collector.reward_scaler.load_state_dict(ck["reward_scaler"])
        st = self.collector.state
        st.next_obs = ck["collector"]["next_obs"]
        st.ep_return = ck["collector"]["ep_return"]
        st.ep_length = ck["collector"]["ep_length"]
        st.global_step = ck["global_step"]
        if ck["envs"] is not None:
            self.envs.envs = pickle.loads(ck["envs"])
        # async envs cannot be pickled: they restart from fresh episodes (not bit-exact).
        self.iteration, self.elapsed = ck["iteration"], ck["elapsed"]
        _set_rng_state(ck["rng"])

    # --- one iteration -----------------------------------------------------------------------
    def iterate(self) -> dict[str, Any]:
        cfg = self.cfg
        t0 = time.perf_counter()
        it = self.iteration + 1  # self.iteration counts completed iterations only

        # 1. rollout with pi_old; logp_old and V_old frozen inside
        self.agent.policy.eval()
        rollout, episodes = self.collector.collect()
        # 2. advantages by GAE, targets R = A + V_old
        adv, ret = gae(rollout.rewards, rollout.values, rollout.next_values,
                       rollout.terminated, rollout.truncated, cfg.gamma, cfg.gae_lambda)
        batch = rollout.flatten(adv, ret)
        # 3. the algorithm's update (PPO's K epochs, TRPO's constrained step, ...)
        self.agent.policy.train()
        m = self.algo.update(batch, progress=(it - 1) / cfg.num_iterations)
        self.agent.policy.eval()
        step = self.collector.state.global_step
        row: dict[str, Any] = {
            "iteration": it, "global_step": step,
            "explained_variance": diag.explained_variance(batch.values_old, batch.returns),
            # the critic on data it has not been trained on yet (rises when it overfits)
            "value_loss_fresh": float(0.5 * ((batch.values_old - batch.returns) ** 2).mean()),
            "episodes": len(episodes),
            "ep_return_mean": float(np.mean([e.ret for e in episodes])) if episodes else None,
            "ep_length_mean": float(np.mean([e.length for e in episodes])) if episodes else None,
            **m,
        }
        last = it == cfg.num_iterations
        if (cfg.eval_every and it % cfg.eval_every == 0) or last:
            returns = evaluate(self.agent, cfg.env_id, cfg.eval_episodes,
                               seed=cfg.seed + EVAL_SEED_OFFSET, max_steps=cfg.eval_max_steps)
            row["eval_return_mean"] = float(returns.mean())
            row["eval_return_std"] = float(returns.std())
        dt = time.perf_counter() - t0
        self.elapsed += dt
        row["wall_time"] = self.elapsed
        row["sps"] = cfg.batch_size / dt
        self.run_dir.log_metrics(row)
        self.run_dir.log_episodes([
            {"global_step": e.global_step, "iteration": it,
             "env_index": e.env_index, "return": e.ret, "length": e.length}
            for e in episodes])
        self.metrics.append(row)
        self.iteration = it
        if it % cfg.checkpoint_every == 0 or last:
            self.run_dir.save_checkpoint(self.checkpoint_state())
            self.run_dir.set_status("running", self.iteration)
        return row

    # --- whole run ---------------------------------------------------------------------------
    def run(self, callback: Callable[[dict[str, Any]], None] | None = None) -> TrainResult:
        cfg = self.cfg
        from trustrl.progress import TrainProgress

        if cfg.tensorboard:
            self.run_dir.open_tensorboard(purge_step=self.collector.state.global_step or None)
        try:
            with TrainProgress(cfg, self.collector.state.global_step, self.show_progress) as bar:
                while self.iteration < cfg.num_iterations:
                    row = self.iterate()
                    bar.update(row)
                    if callback is not None:
                        callback(row)
                    if solved(cfg, row.get("eval_return_mean")):
                        if self.iteration % cfg.checkpoint_every:  # not written by iterate()
                            self.run_dir.save_checkpoint(self.checkpoint_state())
                        break
        except BaseException as e:
            msg = "interrupted" if isinstance(e, KeyboardInterrupt) else (
                str(e).splitlines() or [type(e).__name__])[0]
            self.run_dir.set_status("stopped" if isinstance(e, KeyboardInterrupt) else "failed",
                                    self.iteration, msg)
            raise
        finally:
            self.run_dir.close()
            self.envs.close()
        return self.finish()

    def evaluate_initial(self) -> None:
        """Greedy evaluation of the untrained policy (step 0), kept in eval_initial.json.
        Greedy actions draw no random numbers, so this leaves the run's RNG streams alone."""
        if not self.cfg.eval_every:
            return
        returns = evaluate(self.agent, self.cfg.env_id, self.cfg.eval_episodes,
                           seed=self.cfg.seed + EVAL_SEED_OFFSET,
                           max_steps=self.cfg.eval_max_steps)
        atomic_write_text(self.run_dir.path / "eval_initial.json", json.dumps(
            {"global_step": 0, "mean": float(returns.mean()), "std": float(returns.std()),
             "returns": returns.tolist()}, indent=2) + "\n")

    def finish(self) -> TrainResult:
        cfg = self.cfg
        final = self.agent.frozen()
        final.save(self.run_dir.path / "agent.pt")
        returns = evaluate(final, cfg.env_id, cfg.eval_episodes, seed=cfg.seed + EVAL_SEED_OFFSET,
                           max_steps=cfg.eval_max_steps)
        result = {"episodes": len(returns), "greedy": True, "mean": float(returns.mean()),
                  "std": float(returns.std()), "returns": returns.tolist(),
                  "global_step": self.collector.state.global_step}
        atomic_write_text(self.run_dir.path / "eval.json", json.dumps(result, indent=2) + "\n")
        from trustrl.plotting import plot_runs

        plot_runs([self.run_dir.path], self.run_dir.path / "learning_curve.png")
        self.run_dir.set_status("finished", self.iteration)
        return TrainResult(self.run_dir.path, final, result, self.metrics)


def train(
    config: RunConfig,
    progress: bool = False,
    callback: Callable[[dict[str, Any]], None] | None = None,
) -> TrainResult:
    """Train from scratch; writes a run folder under config.runs_dir and returns the result.
    With vector 'torch' the run goes through the fast path (trustrl.fast), one seed."""
    config.validate()
    if config.vector == "torch":
        from trustrl.fast.run import train_fast

        if callback is not None:
            raise RunError("callbacks are not supported with vector 'torch'")
        return _from_fast(train_fast(config, None, progress))
    check_env(config.env_id)  # bad env id: fail before a run folder exists
    run = RunDir.create(config.runs_dir, config.env_id, config.algo, config.seed,
                        config_to_dict(config))
    trainer = Trainer(config, run, progress)
    trainer.evaluate_initial()
    return trainer.run(callback)


def resume(
    run_path: str | Path,
    progress: bool = False,
    callback: Callable[[dict[str, Any]], None] | None = None,
) -> TrainResult:
    """Continue a stopped run from its last checkpoint; logs after it are dropped first."""
    from trustrl.fast.run import is_fast_run, resume_fast

    if is_fast_run(Path(run_path)):
        if callback is not None:
            raise RunError("callbacks are not supported with vector 'torch'")
        if (Path(run_path) / "population.json").is_file():
            raise RunError(f"{run_path} holds a population of seeds: resume it with "
                           "`trustrl train --resume` or trustrl.fast.run.resume_fast")
        return _from_fast(resume_fast(run_path, progress))
    run = RunDir.open(run_path)
    cfg = config_from_dict(run.read_config())
    cfg.validate()
    ck = run.load_checkpoint()
    trainer = Trainer(cfg, run, progress)
    trainer.restore(ck)
    run.truncate_logs(trainer.iteration)
    if trainer.iteration >= cfg.num_iterations:
        trainer.envs.close()
        return trainer.finish()
    return trainer.run(callback)


def _from_fast(result: Any) -> TrainResult:
    """A fast-path result of one seed as the ordinary trainer's TrainResult."""
    return TrainResult(result.run_dir, Agent.load(result.run_dir / "agent.pt"), result.final_eval)
