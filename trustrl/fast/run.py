"""Run folders for the fast path: `trustrl train --vector torch` and `trustrl train --seeds A-B`.

One seed writes the ordinary run folder (config.json, metrics.csv, episodes.csv, checkpoints,
agent.pt, eval.json, status.json, learning_curve.png), so `trustrl eval`, `plot`, `demo` and
sweeps read it like any other. A population writes one such folder per seed inside a parent:

    runs/<env>__<algo>__seeds<A>-<B>__<time>/
        config.json        the shared config, with "seeds"
        population.json    seed -> member folder
        checkpoints/latest.pt   the whole population (one file), written atomically
        status.json, summary.json (final greedy evaluation per seed), learning_curve.png
        <env>__<algo>__<seed>__<time>/   one ordinary run folder per seed

Evaluations are greedy, on the batched torch version of the env (same dynamics as Gymnasium's),
`eval_episodes` episodes per seed from start states fixed by the seed; eval.json says so.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trustrl.agent import Agent
from trustrl.config import PPOConfig, config_from_dict, config_to_dict
from trustrl.errors import ConfigError, RunError
from trustrl.fast.engine import PopulationPPO, metrics_rows
from trustrl.normalize import ObsNormalizer
from trustrl.runs import METRIC_COLUMNS, RunDir, atomic_write_text

CHECKPOINT_FORMAT = 1
EXTRA_COLUMNS = ["policy_loss", "epochs_run", "early_stopped", "clip_fraction_mb", "grad_norm"]
EVALUATOR = ("greedy, batched classic-control env (NumPy on a CPU, torch on CUDA), start states "
             "fixed by the seed")


def parse_seeds(spec: str) -> list[int]:
    """'0-255', '1,2,5' or '0-3,10' -> the list of seeds (distinct, in order)."""
    seeds: list[int] = []
    try:
        for part in spec.split(","):
            part = part.strip()
            if "-" in part[1:]:
                i = part.index("-", 1)
                a, b = int(part[:i]), int(part[i + 1:])
                if b < a:
                    raise ValueError
                seeds.extend(range(a, b + 1))
            else:
                seeds.append(int(part))
    except ValueError:
        raise ConfigError(f"--seeds takes a list like 0-255 or 1,2,5 or 0-3,10; got {spec!r}"
                          ) from None
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds lists a seed twice: {spec!r}")
    if not seeds:
        raise ConfigError("--seeds is empty")
    return seeds


@dataclass
class FastResult:
    run_dir: Path
    final_eval: dict[str, Any]  # over all members: mean of the members' means, min, max
    member_dirs: list[Path]


class FastTrainer:
    def __init__(self, cfg: PPOConfig, seeds: list[int], root: RunDir, members: list[RunDir],
                 progress: bool):
        self.cfg, self.seeds, self.root, self.members = cfg, seeds, root, members
        self.show_progress = progress
        torch.set_num_threads(cfg.torch_threads)
        jit = dict(compile=cfg.jit == "compile", graph=cfg.jit == "cuda-graph")
        self.engine: PopulationPPO
        if cfg.algo in ("trpo", "npg"):
            from trustrl.fast.trpo import TRPO_EXTRA, PopulationTRPO

            self.engine = PopulationTRPO(cfg, seeds, line_search=cfg.algo == "trpo",  # type: ignore[arg-type]
                                         **jit)
            extra = list(TRPO_EXTRA)
        else:
            self.engine = PopulationPPO(cfg, seeds, clip=cfg.algo == "ppo", **jit)
            extra = EXTRA_COLUMNS
        for m in members:
            m.metric_columns = METRIC_COLUMNS + extra
        self.elapsed = 0.0

    @property
    def population(self) -> bool:
        return len(self.seeds) > 1

    @property
    def engine_label(self) -> str:
        """Which engine wrote a checkpoint: PPO's and TRPO's states have the same layout but
        not the same meaning (TRPO's Adam is the critic's alone)."""
        return "population-trpo" if self.cfg.algo in ("trpo", "npg") else "population-ppo"

    def checkpoint(self) -> None:
        self.root.save_checkpoint({"format": CHECKPOINT_FORMAT, "engine": self.engine_label,
                                   "algo": self.cfg.algo, "elapsed": self.elapsed,
                                   "state": self.engine.state_dict()})

    def restore(self) -> None:
        ck = self.root.load_checkpoint()
        if ck.get("format") != CHECKPOINT_FORMAT or ck.get("engine") != self.engine_label:
            raise RunError("checkpoint not written by the fast path of this trustrl version "
                           f"for {self.cfg.algo}")
        if ck.get("algo", self.cfg.algo) != self.cfg.algo:
            raise RunError(f"checkpoint written by {ck['algo']}, the run's config says "
                           f"{self.cfg.algo}")
        self.engine.load_state_dict(ck["state"])
        self.elapsed = ck["elapsed"]

    def _evaluate(self) -> np.ndarray:
        return self.engine.evaluate(self.cfg.eval_episodes).cpu().numpy()

    def evaluate_initial(self) -> None:
        if not self.cfg.eval_every:
            return
        returns = self._evaluate()
        for m, r in zip(self.members, returns, strict=True):
            atomic_write_text(m.path / "eval_initial.json", json.dumps(
                {"global_step": 0, "mean": float(r.mean()), "std": float(r.std()),
                 "returns": r.tolist(), "evaluator": EVALUATOR}, indent=2) + "\n")

    def run(self) -> FastResult:
        from trustrl.progress import TrainProgress

        cfg, eng = self.cfg, self.engine
        T, N = cfg.num_steps, cfg.num_envs
        try:
            with TrainProgress(cfg, eng.global_step, self.show_progress) as bar:
                while eng.iteration < cfg.num_iterations:
                    t0 = time.perf_counter()
                    metrics, done, fin_ret, fin_len = eng.iterate()
                    it = eng.iteration
                    # the one host transfer of the iteration
                    rows = metrics_rows(metrics, eng.columns, eng.int_columns)
                    last = it == cfg.num_iterations
                    evals = None
                    if (cfg.eval_every and it % cfg.eval_every == 0) or last:
                        evals = self._evaluate()
                    dt = time.perf_counter() - t0
                    self.elapsed += dt
                    self._log(it, rows, evals, done, fin_ret, fin_len, dt)
                    if it % cfg.checkpoint_every == 0 or last:
                        self.checkpoint()
                        self.root.set_status("running", it)
                    summary = {
                        "global_step": eng.global_step, "iteration": it,
                        "sps": len(self.seeds) * T * N / dt,
                        "ep_return_mean": _nanmean([r["ep_return_mean"] for r in rows]),
                        "approx_kl": _nanmean([r["approx_kl"] for r in rows]),
                        "clip_fraction": _nanmean([r["clip_fraction"] for r in rows]),
                        "eval_return_mean": None if evals is None else float(evals.mean()),
                    }
                    bar.update(summary)
                    if (cfg.stop_return is not None and evals is not None
                            and float(evals.mean(1).min()) >= cfg.stop_return):
                        if it % cfg.checkpoint_every:  # not written above
                            self.checkpoint()
                        break
        except BaseException as e:
            msg = "interrupted" if isinstance(e, KeyboardInterrupt) else (
                str(e).splitlines() or [type(e).__name__])[0]
            status = "stopped" if isinstance(e, KeyboardInterrupt) else "failed"
            for r in [self.root, *self.members] if self.population else [self.root]:
                r.set_status(status, eng.iteration, msg)
            raise
        return self.finish()

    def _log(self, it: int, rows: list[dict[str, Any]], evals: np.ndarray | None,
             done: torch.Tensor, fin_ret: torch.Tensor, fin_len: torch.Tensor, dt: float) -> None:
        eng, cfg = self.engine, self.cfg
        d = done.cpu().numpy()
        ret, length = fin_ret.cpu().numpy(), fin_len.cpu().numpy()
        step0 = eng.global_step - cfg.num_steps * cfg.num_envs
        for p, (m, row) in enumerate(zip(self.members, rows, strict=True)):
            row.update(iteration=it, global_step=eng.global_step, clip_eps=cfg.clip_eps,
                       wall_time=self.elapsed, sps=cfg.batch_size * len(self.seeds) / dt)
            if evals is not None:
                row["eval_return_mean"] = float(evals[p].mean())
                row["eval_return_std"] = float(evals[p].std())
            m.log_metrics(row)
            t_idx, n_idx = np.nonzero(d[:, p])
            m.log_episodes([
                {"global_step": step0 + (int(t) + 1) * cfg.num_envs, "iteration": it,
                 "env_index": int(n), "return": float(ret[t, p, n]),
                 "length": int(length[t, p, n])}
                for t, n in sorted(zip(t_idx, n_idx, strict=True))])

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

    def finish(self) -> FastResult:
        from trustrl.plotting import plot_runs

        returns = self._evaluate()
        eng = self.engine
        means = []
        for p, m in enumerate(self.members):
            self.agent(p).save(m.path / "agent.pt")
            r = returns[p]
            means.append(float(r.mean()))
            atomic_write_text(m.path / "eval.json", json.dumps(
                {"episodes": len(r), "greedy": True, "mean": float(r.mean()),
                 "std": float(r.std()), "returns": r.tolist(), "global_step": eng.global_step,
                 "evaluator": EVALUATOR}, indent=2) + "\n")
            if len(self.members) <= 8:
                plot_runs([m.path], m.path / "learning_curve.png")
            m.set_status("finished", eng.iteration)
        final = {"episodes": int(returns.shape[1]), "greedy": True,
                 "mean": float(np.mean(means)), "std": float(np.std(means)),
                 "min": float(np.min(means)), "max": float(np.max(means)),
                 "global_step": eng.global_step, "evaluator": EVALUATOR}
        if self.population:
            final["per_seed"] = dict(zip(map(str, self.seeds), means, strict=True))
            atomic_write_text(self.root.path / "summary.json", json.dumps(final, indent=2) + "\n")
            if len(self.members) <= 16:
                plot_runs([m.path for m in self.members], self.root.path / "learning_curve.png")
            self.root.set_status("finished", eng.iteration)
        return FastResult(self.root.path, final, [m.path for m in self.members])


def _nanmean(xs: list[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return float(np.mean(v)) if v else None


def train_fast(cfg: PPOConfig, seeds: list[int] | None = None, progress: bool = False
               ) -> FastResult:
    """Train one seed (cfg.seed) or a population of seeds with the fast path."""
    cfg.validate()
    if cfg.vector != "torch":
        raise ConfigError("the fast path needs vector 'torch'")
    seeds = list(seeds) if seeds else [cfg.seed]
    if len(seeds) == 1:
        cfg.seed = seeds[0]
        root = RunDir.create(cfg.runs_dir, cfg.env_id, cfg.algo, cfg.seed, config_to_dict(cfg))
        members = [root]
    else:
        label = f"seeds{seeds[0]}-{seeds[-1]}" if seeds == list(
            range(seeds[0], seeds[-1] + 1)) else f"seeds{len(seeds)}"
        root = RunDir.create(cfg.runs_dir, cfg.env_id, cfg.algo, label,  # type: ignore[arg-type]
                             {**config_to_dict(cfg), "seeds": seeds})
        members = []
        for s in seeds:
            d = {**config_to_dict(cfg), "seed": s}
            members.append(RunDir.create(root.path, cfg.env_id, cfg.algo, s, d))
        atomic_write_text(root.path / "population.json", json.dumps(
            {"seeds": seeds, "members": [m.path.name for m in members]}, indent=2) + "\n")
    trainer = FastTrainer(cfg, seeds, root, members, progress)
    trainer.evaluate_initial()
    return trainer.run()


def is_fast_run(path: Path) -> bool:
    """Whether a run folder was written by the fast path (so `--resume` comes here)."""
    try:
        d = json.loads((path / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return d.get("vector") == "torch"


def resume_fast(path: str | Path, progress: bool = False) -> FastResult:
    root = RunDir.open(path)
    d = root.read_config()
    seeds = d.pop("seeds", None)
    cfg = config_from_dict(d)
    cfg.validate()
    if seeds is None:
        seeds, members = [cfg.seed], [root]
    else:
        pop = json.loads((root.path / "population.json").read_text())
        members = [RunDir.open(root.path / name) for name in pop["members"]]
    trainer = FastTrainer(cfg, seeds, root, members, progress)  # type: ignore[arg-type]
    trainer.restore()
    for m in members:  # FastTrainer set their metric columns
        m.truncate_logs(trainer.engine.iteration)
    if trainer.engine.iteration >= cfg.num_iterations:
        return trainer.finish()
    return trainer.run()
