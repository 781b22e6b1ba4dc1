"""The one trainer: a learner's iterations -> run folders, for one seed or a population.

`train(config)` does a whole run and `resume(path)` re-enters it. The learner
(trustrl.learn.learners) is the collector and the algorithm: the Gymnasium vector env (any env, one
seed) or the batched classic-control envs (one seed or a population of P seeds stepping
together). Everything else lives here, once: run folders, status, signals, checkpoints,
resume, the evaluation schedule, progress, TensorBoard and logging.

Lifecycle. A run folder is created only after the config, the env and the networks are built
(bad input leaves nothing on disk). Status is "running" from then on, "finished" at the end,
"stopped" after Ctrl-C, SIGTERM or a callback that returns False (resumable), and "failed"
with the one-line reason of any other error (resumable from the last checkpoint). A run with
no checkpoint yet resumes from scratch. On CPU a killed-and-resumed run writes the same metrics
as one that never stopped (the checkpoint holds everything that decides the future of the run:
networks, optimisers, normalisers, RNG states, mid-episode envs, trackers), except where the
envs cannot be saved mid-episode (async envs; sync sub-envs that cannot be pickled: the
checkpoint then holds the reason, and on resume the envs restart their episodes, said once on
stderr and kept as a note in status.json).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trustrl.envs.factory import env_factory
from trustrl.envs.make import check_env, check_memory
from trustrl.learn.learners import Learner, make_learner
from trustrl.learn.runners import RunnerLearner
from trustrl.records.agent import Agent
from trustrl.records.runs import (
    METRIC_COLUMNS,
    RunDir,
    atomic_write_text,
    check_env_code,
    check_tracker,
)
from trustrl.settings.config import (
    RunConfig,
    check_checkpoint_config,
    config_from_dict,
    config_to_dict,
)
from trustrl.training.callbacks import Callback, Info, as_callbacks, wants_rollouts
from trustrl.util.children import Terminated
from trustrl.util.errors import ConfigError, RunError
from trustrl.util.safeio import non_finite, warn_if_unsigned
from trustrl.util.seeding import seed_everything

__all__ = ["Terminated", "TrainResult", "Trainer", "parse_seeds", "resume", "seed_everything",
           "solved", "start", "train"]

CHECKPOINT_FORMAT = 3  # 3: the one algorithm core (population networks, PopAdam)
MAX_MEMBER_PLOTS = 8  # learning_curve.png per member folder up to this many seeds
LOG_FLUSH_SECS = 0.25  # metrics.csv / episodes.csv rows reach the disk at least this often
MAX_OVERLAY = 16  # one overlaid curve of every seed in a population folder up to this many


@dataclass
class TrainResult:
    """What `train`, `resume` and `Model.learn`'s run end with."""

    run_dir: Path
    """The run folder (a population's folder for a `seeds` run)."""
    agent: Agent
    """The final agent (of the first seed in a population)."""
    final_eval: dict[str, Any]
    """The final evaluation (eval.json's mean, std, returns); empty when a callback stopped the
    run."""
    metrics: list[dict[str, Any]] = field(default_factory=list)
    """The metrics.csv rows of a one-seed run."""
    member_dirs: list[Path] = field(default_factory=list)
    """One folder per seed of a population."""


class _Stop:
    """A stop asked by SIGTERM or Ctrl-C, taken at the end of the current iteration (after a
    checkpoint, so nothing is lost); a second signal stops at once (from the last checkpoint)."""

    def __init__(self) -> None:
        self.signal: int | None = None

    def handler(self, signum: int, frame: Any) -> None:
        if self.signal is not None:  # the second one: now
            raise self._exception(signum)
        self.signal = signum

    def raise_if_asked(self) -> None:
        if self.signal is not None:
            raise self._exception(self.signal)

    @staticmethod
    def _exception(signum: int) -> KeyboardInterrupt:
        return Terminated() if signum == getattr(signal, "SIGTERM", None) else KeyboardInterrupt()


def solved(cfg: RunConfig, eval_mean: float | None) -> bool:
    """True when cfg.stop_return is set and a greedy evaluation reached it."""
    return cfg.stop_return is not None and eval_mean is not None and eval_mean >= cfg.stop_return


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


def _nanmean(xs: list[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return float(np.mean(v)) if v else None


class Trainer:
    """Drives a learner through a run: `run()` iterates until total_steps (or a stop)."""

    def __init__(self, cfg: RunConfig, learner: Learner, root: RunDir, members: list[RunDir],
                 progress: bool = True):
        self.cfg, self.learner, self.root, self.members = cfg, learner, root, members
        self.show_progress = progress
        for m in members:
            m.metric_columns = METRIC_COLUMNS + list(learner.extra_columns)
            m.buffer_logs(LOG_FLUSH_SECS)  # flushed at each checkpoint and when the run ends
        self.elapsed = 0.0
        self.metrics: list[dict[str, Any]] = []
        self._last_checkpoint = time.monotonic()
        self._checkpointed = learner.iteration  # the iteration of the checkpoint on disk
        self._evaluated: tuple[int, np.ndarray] | None = None  # the last evaluation and when
        self._best = {p: _saved_best(m.path) for p, m in enumerate(members)}
        self._stop_asked = False  # by a callback at rollout end
        self.keep_open = False
        """Keep the learner (envs mid-episode, optimiser, normalisers) after `run` returns, so
        that `extend` can continue the same run in this process (trustrl.model)."""
        self.closed = False

    def extend(self, total_steps: int) -> None:
        """Continue a run that `run` finished or stopped with keep_open: the new total in
        config.json, the folder locked and "running" again (then call run(initial_eval=False)).
        The schedules follow the new total, as `resume(total_steps=...)` does."""
        if self.closed:
            raise RunError(f"{self.root.path}: this run's learner is closed (the run failed or "
                           "ended); continue it with trustrl.resume")
        dataclasses.replace(self.cfg, total_steps=total_steps).validate()  # before any change
        self.cfg.total_steps = total_steps
        for r in self._status_dirs:
            if r is self.root:
                r._take_lock()
            saved = r.read_config()
            saved["total_steps"] = total_steps
            atomic_write_text(r.path / "config.json", json.dumps(saved, indent=2) + "\n")
            r.set_status("running", self.learner.iteration)

    @property
    def population(self) -> bool:
        return len(self.members) > 1

    @property
    def _status_dirs(self) -> list[RunDir]:
        """The folders whose status.json follows the run: the root, and each member's."""
        return [self.root, *self.members] if self.population else [self.root]

    # --- checkpoint --------------------------------------------------------------------------
    def _checkpoint_due(self, it: int) -> bool:
        cfg = self.cfg
        if cfg.checkpoint_every is not None:
            return it % cfg.checkpoint_every == 0
        # the first iteration's always, so that a run that fails or is killed early still has
        # one to resume from; then by time
        return (self._checkpointed == 0
                or time.monotonic() - self._last_checkpoint >= cfg.checkpoint_secs)

    def flush_logs(self) -> None:
        for m in self.members:
            m.flush_logs()

    def checkpoint(self) -> None:
        # the logs first: a resume keeps the rows up to the checkpoint's iteration
        self.flush_logs()
        self._last_checkpoint = time.monotonic()
        self._checkpointed = self.learner.iteration
        lr = self.learner
        self.root.save_checkpoint({
            **lr.state_dict(), "format": CHECKPOINT_FORMAT, "learner": lr.kind,
            "iteration": lr.iteration, "global_step": lr.global_step, "elapsed": self.elapsed,
            "config": config_to_dict(self.cfg),
            "log_rows": [m.rows_logged for m in self.members]})
        if self.cfg.checkpoint_keep:
            _keep_history(self.root.checkpoint_path, lr.global_step, self.cfg.checkpoint_keep)

    def restore(self, ck: dict[str, Any]) -> None:
        if ck.get("format") != CHECKPOINT_FORMAT:
            raise RunError(f"{self.root.checkpoint_path}: checkpoint format {ck.get('format')!r} "
                           f"of another trustrl version (this one reads {CHECKPOINT_FORMAT}); "
                           "start a new run (its agent.pt files still load)")
        if ck.get("learner") != self.learner.kind:
            raise RunError(f"{self.root.checkpoint_path} was written by the {ck.get('learner')} "
                           f"collector, the run's config says vector {self.cfg.vector!r}")
        saved = ck.get("config")
        if isinstance(saved, dict):  # total_steps may differ: the run was extended
            saved = {**saved, "total_steps": self.cfg.total_steps}
        check_checkpoint_config(saved, self.cfg, str(self.root.path))
        bad = non_finite({"net": ck.get("net"), "agent": (ck.get("agent") or {}).get("policy")})
        if bad:
            raise RunError(f"{self.root.checkpoint_path} holds non-finite weights ({bad[:80]} "
                           "has NaN or inf): the run diverged before it, or the file is damaged")
        try:
            self.learner.load_state_dict(ck)
            self.elapsed = float(ck["elapsed"])
        except (KeyError, TypeError, ValueError, RuntimeError, IndexError, AttributeError) as e:
            msg = (str(e).splitlines() or [""])[0][:120]
            raise RunError(f"{self.root.checkpoint_path} does not fit this run's networks and "
                           f"envs ({type(e).__name__}: {msg})") from None
        for p, m in enumerate(self.members):  # a best written after the checkpoint: dropped
            if _saved_best(m.path, int(ck["global_step"])) == -np.inf:
                self._best[p] = -np.inf

    # --- evaluation ---------------------------------------------------------------------------
    def _eval_record(self, r: np.ndarray, **extra: Any) -> str:
        d = {**extra, "mean": float(r.mean()), "std": float(r.std()), "returns": r.tolist()}
        if self.learner.evaluator is not None:
            d["evaluator"] = self.learner.evaluator
        return json.dumps(d, indent=2) + "\n"

    def evaluate_initial(self) -> None:
        """Evaluation of the untrained policy (step 0), kept in eval_initial.json. Greedy
        actions draw no random numbers and sampled ones come from the evaluation's own
        generator, so this leaves the run's RNG streams alone."""
        if not self.cfg.eval_every:
            return
        returns = self.learner.evaluate(self.cfg.eval_episodes)
        for m, r in zip(self.members, returns, strict=True):
            atomic_write_text(m.path / "eval_initial.json", self._eval_record(r, global_step=0))

    def _keep_best(self, evals: np.ndarray) -> None:
        """Each member's agent whose evaluation beats its best so far: best/agent.pt, the
        evaluation in best/eval.json."""
        lr = self.learner
        for p, m in enumerate(self.members):
            mean = float(evals[p].mean())
            if not mean > self._best[p]:
                continue
            self._best[p] = mean
            (m.path / "best").mkdir(exist_ok=True)
            lr.agent(p).save(m.path / "best" / "agent.pt")
            atomic_write_text(m.path / "best" / "eval.json", self._eval_record(
                evals[p], global_step=lr.global_step, iteration=lr.iteration))

    # --- one iteration -----------------------------------------------------------------------
    def iterate(self) -> tuple[dict[str, Any], np.ndarray | None]:
        """One iteration of every member, logged; returns the progress row (the member's row
        for one seed, a summary over the seeds of a population) and the greedy returns
        [P, episodes] when this iteration evaluated."""
        cfg, lr = self.cfg, self.learner
        t0 = time.perf_counter()
        rows, episodes = lr.iterate()
        it = lr.iteration
        last = it == cfg.num_iterations
        evals = None
        if (cfg.eval_every and it % cfg.eval_every == 0) or last:
            evals = lr.evaluate(cfg.eval_episodes)
            self._evaluated = (it, evals)
            if cfg.save_best:
                self._keep_best(evals)
        dt = time.perf_counter() - t0
        self.elapsed += dt
        sps = cfg.batch_size * len(self.members) / dt
        for p, (m, row, eps) in enumerate(zip(self.members, rows, episodes, strict=True)):
            row.update(iteration=it, global_step=lr.global_step, wall_time=self.elapsed, sps=sps)
            if evals is not None:
                row["eval_return_mean"] = float(evals[p].mean())
                row["eval_return_std"] = float(evals[p].std())
            m.log_metrics(row)
            m.log_episodes(eps)
        if self._checkpoint_due(it) or last:
            self.checkpoint()
            self.root.set_status("running", it)
        if not self.population:
            self.metrics.append(rows[0])
            return rows[0], evals
        return {
            "global_step": lr.global_step, "iteration": it, "sps": sps,
            "ep_return_mean": _nanmean([r["ep_return_mean"] for r in rows]),
            "approx_kl": _nanmean([r["approx_kl"] for r in rows]),
            "clip_fraction": _nanmean([r["clip_fraction"] for r in rows]),
            "eval_return_mean": None if evals is None else float(evals.mean()),
            "members": rows,
        }, evals

    # --- whole run ---------------------------------------------------------------------------
    def _rollout_hook(self, callbacks: list[Callback], info: Info) -> Callable[[Any], None]:
        def after_collect(episodes: Any) -> None:
            if episodes and isinstance(episodes[0], list):  # the batched learner: per member
                keys = ("global_step", "env_index", "return", "length")
                info.episodes = [{**{k: e[k] for k in keys},
                                  **({"member": p} if self.population else {})}
                                 for p, member in enumerate(episodes) for e in member]
            else:
                info.episodes = [{"global_step": e.global_step, "env_index": e.env_index,
                                  "return": e.ret, "length": e.length} for e in episodes]
            info.metrics, info.evaluation = {}, None
            for cb in callbacks:
                if cb.on_rollout_end(info) is False:
                    self._stop_asked = True
        return after_collect

    def run(self, callback: Any = None, initial_eval: bool = True) -> TrainResult:
        """Iterate to the end. callback: a trustrl.training.callbacks.Callback, a function of the
        metrics row called after each iteration, or a list of them; returning False stops the
        run cleanly (checkpoint, status "stopped", resumable)."""
        cfg, lr = self.cfg, self.learner
        from trustrl.util.progress import TrainProgress

        callbacks = as_callbacks(callback)
        info = Info(self)
        rollouts = wants_rollouts(callbacks)
        self._stop_asked = False

        if cfg.tensorboard and not self.population:
            self.root.open_tensorboard(purge_step=lr.global_step or None)
        stop = _Stop()
        previous = _on_signals(stop)
        stopped = failing = False
        self._last_checkpoint = time.monotonic()
        try:
            if cfg.track != "none":  # a tracker that cannot start fails the run in one line
                self.root.open_tracker(cfg.track, config_to_dict(cfg))
            if initial_eval:
                self.evaluate_initial()
            if rollouts:
                lr.after_collect = self._rollout_hook(callbacks, info)
            for cb in callbacks:
                cb.on_training_start(info)
            with TrainProgress(cfg, lr.global_step, self.show_progress) as bar:
                while lr.iteration < cfg.num_iterations:
                    row, evals = self.iterate()
                    bar.update(row)
                    info.metrics, info.episodes = row, []
                    info.evaluation = None if evals is None else (
                        evals if self.population else evals[0])
                    stopped = self._stop_asked
                    for cb in callbacks:
                        stopped = (cb.on_iteration_end(info) is False) or stopped
                    reached = (cfg.stop_return is not None and evals is not None
                               and float(evals.mean(1).min()) >= cfg.stop_return)
                    asked = stop.signal is not None
                    if stopped or reached or asked:
                        if self._checkpointed != lr.iteration:  # not written by iterate()
                            self.checkpoint()
                        stop.raise_if_asked()
                        break
        except BaseException as e:
            failing = True
            if isinstance(e, KeyboardInterrupt):
                status = "stopped"
                msg = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
                e.run_dir = self.root.path  # type: ignore[attr-defined]  # for the CLI's hint
            else:
                status = "failed"
                msg = (str(e).splitlines() or [type(e).__name__])[0] or type(e).__name__
                try:  # the CLI prints one line naming the folder instead of a traceback
                    e.run_dir = self.root.path  # type: ignore[attr-defined]
                except AttributeError:
                    pass
            for r in self._status_dirs:
                try:
                    r.set_status(status, lr.iteration, msg)
                except OSError:  # a full disk: the run's own error is the one to report
                    r.release()
            raise
        finally:
            if rollouts:
                lr.after_collect = None
            _restore_signals(previous)
            try:
                self.flush_logs()
            except OSError:
                if not failing:  # else the run's own error is the one to report
                    raise
            self.root.close()
            if failing or not self.keep_open:
                lr.close()
                self.closed = True
        if stopped:
            for r in self._status_dirs:
                r.set_status("stopped", lr.iteration, "stopped by the callback")
            result = TrainResult(self.root.path, lr.agent(0), {}, self.metrics,
                                 [m.path for m in self.members])
        else:
            result = self.finish()
        for cb in callbacks:
            cb.on_training_end(info)
        return result

    def finish(self) -> TrainResult:
        """_finish, with an error there (a full disk) marking the run failed, as in run()."""
        try:
            return self._finish()
        except Exception as e:
            msg = (str(e).splitlines() or [type(e).__name__])[0] or type(e).__name__
            for r in self._status_dirs:
                try:
                    r.set_status("failed", self.learner.iteration, msg)
                except OSError:
                    r.release()
            try:
                e.run_dir = self.root.path  # type: ignore[attr-defined]
            except AttributeError:
                pass
            raise

    def _finish(self) -> TrainResult:
        """Save each member's agent, evaluate it (eval.json), plot, mark finished."""
        from trustrl.records.plotting import plot_runs

        lr = self.learner
        # an evaluation is a function of the policy (greedy, or sampled from its own seeded
        # generator): the last iteration's, if it was this policy's
        done = self._evaluated
        returns = (done[1] if done is not None and done[0] == lr.iteration
                   else lr.evaluate(self.cfg.eval_episodes))
        means = []
        for p, m in enumerate(self.members):
            lr.agent(p).save(m.path / "agent.pt")
            r = returns[p]
            means.append(float(r.mean()))
            atomic_write_text(m.path / "eval.json", self._eval_record(
                r, episodes=len(r), greedy=self.cfg.eval_deterministic,
                global_step=lr.global_step))
            if len(self.members) <= MAX_MEMBER_PLOTS:
                plot_runs([m.path], m.path / "learning_curve.png")
            m.set_status("finished", lr.iteration)
        if self.population:
            final = {"episodes": int(returns.shape[1]), "greedy": self.cfg.eval_deterministic,
                     "mean": float(np.mean(means)), "std": float(np.std(means)),
                     "min": float(np.min(means)), "max": float(np.max(means)),
                     "global_step": lr.global_step,
                     "per_seed": dict(zip(map(str, lr.seeds), means, strict=True))}
            if lr.evaluator is not None:
                final["evaluator"] = lr.evaluator
            atomic_write_text(self.root.path / "summary.json", json.dumps(final, indent=2) + "\n")
            if len(self.members) <= MAX_OVERLAY:
                plot_runs([m.path for m in self.members], self.root.path / "learning_curve.png")
            self.root.set_status("finished", lr.iteration)
        else:
            final = json.loads((self.members[0].path / "eval.json").read_text())
        return TrainResult(self.root.path, lr.agent(0), final, self.metrics,
                           [m.path for m in self.members])


def _saved_best(run: Path, before: int | None = None) -> float:
    """The mean of best/eval.json in a run folder (-inf: none, or one written after global
    step `before`)."""
    try:
        d = json.loads((run / "best" / "eval.json").read_text())
        if before is not None and int(d["global_step"]) > before:
            return -np.inf
        return float(d["mean"])
    except (OSError, ValueError, KeyError, TypeError):
        return -np.inf


def _keep_history(latest: Path, global_step: int, keep: int) -> None:
    """latest.pt also as step_<global_step>.pt (a hard link, else a copy); the oldest beyond
    `keep` removed."""
    import os
    import shutil

    history = latest.with_name(f"step_{global_step}.pt")
    history.unlink(missing_ok=True)
    try:
        os.link(latest, history)
    except OSError:
        shutil.copyfile(latest, history)
    steps = sorted((int(p.stem[5:]), p) for p in latest.parent.glob("step_*.pt")
                   if p.stem[5:].isdigit())
    for _, p in steps[:-keep]:
        p.unlink(missing_ok=True)


def _on_signals(stop: _Stop) -> Any:
    """SIGTERM and Ctrl-C (SIGINT) ask `stop` to stop the run after the current iteration
    (a second one stops at once); returns the previous handlers (None where signals cannot be
    set: another thread, another platform)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = {}
    for name in ("SIGTERM", "SIGINT"):
        sig = getattr(signal, name, None)
        if sig is None:
            continue
        try:
            previous[sig] = signal.signal(sig, stop.handler)
        except (ValueError, OSError):
            pass
    return previous


def _restore_signals(previous: Any) -> None:
    for sig, handler in (previous or {}).items():
        signal.signal(sig, handler)


def _env_name(recorded: str, learner: Any) -> str:
    """The env's name in the run folder's name: the last part of its id or import path; for
    an env that config.json cannot re-make (a lambda, an env object), the id of the env it
    made (its spec), else the env's class name."""
    from trustrl.envs.factory import NOT_IMPORTABLE
    from trustrl.envs.objects import ENV_OBJECT

    for prefix in (NOT_IMPORTABLE, ENV_OBJECT):
        if recorded.startswith(prefix):
            subs = getattr(getattr(learner, "envs", None), "envs", None)
            if subs:
                spec = getattr(subs[0], "spec", None)
                return spec.id if spec is not None and spec.id else \
                    type(subs[0].unwrapped).__name__
            return recorded[len(prefix):].split(":")[-1].split(".")[-1].strip("<>")
    return recorded.split(":")[-1]


def _create_folders(cfg: RunConfig, seeds: list[int], learner: Any = None
                    ) -> tuple[RunDir, list[RunDir]]:
    """One seed: one run folder. A population: a parent folder (config with "seeds",
    population.json, the one checkpoint, summary.json) holding one run folder per seed."""
    config = config_to_dict(cfg)  # an env class or function recorded by its import path
    env_name = _env_name(config["env_id"], learner)
    if len(seeds) == 1:
        root = RunDir.create(cfg.runs_dir, env_name, cfg.algo, cfg.seed, config)
        return root, [root]
    label = f"seeds{seeds[0]}-{seeds[-1]}" if seeds == list(
        range(seeds[0], seeds[-1] + 1)) else f"seeds{len(seeds)}"
    root = RunDir.create(cfg.runs_dir, env_name, cfg.algo, label,  # type: ignore[arg-type]
                         {**config, "seeds": seeds})
    try:
        members = [RunDir.create(root.path, env_name, cfg.algo, s, {**config, "seed": s})
                   for s in seeds]
        atomic_write_text(root.path / "population.json", json.dumps(
            {"seeds": seeds, "members": [m.path.name for m in members]}, indent=2) + "\n")
    except BaseException as e:
        root.set_status("failed", 0, (str(e).splitlines() or [type(e).__name__])[0])
        raise
    return root, members


def _make_learner(cfg: RunConfig, seeds: list[int], new: bool = False) -> Learner:
    """The learner of a config: on runners (trustrl.learn.runners) where it asks for them. `new`: a
    new run, which trains eagerly where compiling would cost more than it saves
    (learners.cold_start_eager; TRUSTRL_COMPILE=always turns that off: the test suite's
    setting, whose runs must not depend on what the machine's cache holds)."""
    if cfg.runners:
        if len(seeds) != 1:
            raise ConfigError("runners take one seed (a population runs on the batched "
                              "collector)")
        return RunnerLearner(cfg)
    return make_learner(cfg, seeds, cold_start=new and os.environ.get(
        "TRUSTRL_COMPILE", "auto") != "always")


def train(
    config: RunConfig,
    progress: bool = False,
    callback: Any = None,
    seeds: list[int] | None = None,
    init_from: str | Path | None = None,
) -> TrainResult:
    """Train from scratch; writes a run folder under config.runs_dir and returns the result.

    config.vector 'auto' picks the batched collector where it runs the config (classic
    control), else the Gymnasium sync vector env.

    Args:
        config: the run's settings (make_config or a config class: PPOConfig, ...).
        progress: show a progress bar on stderr.
        callback: a function of the metrics row called after each iteration, a
            trustrl.training.callbacks.Callback (which sees the agent, the env and the metrics at
            rollout end and iteration end), or a list of them; returning False stops the run
            cleanly (status "stopped", resumable).
        seeds: train a population, one member per seed, on the batched collector (each member
            equal to its seed's run alone).
        init_from: a run folder or agent file to start from (its weights and observation
            statistics; config.init_from, recorded in config.json); the optimiser starts
            afresh.

    Returns:
        The run folder, the final agent, its final evaluation and the metrics rows.
    """
    return start(config, progress, seeds, init_from).run(callback)


def start(
    config: RunConfig,
    progress: bool = False,
    seeds: list[int] | None = None,
    init_from: str | Path | None = None,
) -> Trainer:
    """`train`'s first half: the config checked, the learner built, the run folder made; the
    Trainer that `run` drives (trustrl.model keeps it between learn() calls)."""
    if init_from is not None:
        config.init_from = str(init_from)
    if config.init_from is not None:  # absolute: a resume from another folder finds it
        config.init_from = str(Path(config.init_from).expanduser().resolve())
    if seeds is not None and len(seeds) > 1:
        if config.vector not in ("auto", "torch"):
            raise ConfigError(f"a population of seeds runs on the batched collector: drop "
                              f"vector {config.vector!r} (or use a sweep for Gymnasium envs)")
        config.vector = "torch"
    config.resolve_vector()
    config.validate()
    seeds = list(seeds) if seeds else [config.seed]
    config.seed = seeds[0]
    # bad env id, kwargs, wrappers, return values, sizes: before a run folder exists
    check_memory(check_env(env_factory(config)), config.batch_size * len(seeds))
    check_tracker(config.track, len(seeds))
    warn_if_unsigned()
    source = _load_source(config)
    learner = _make_learner(config, seeds, new=True)  # envs, networks before any folder
    try:
        if source is not None:
            _init_from(learner, config, source)
        root, members = _create_folders(config, seeds, learner)
    except BaseException:
        learner.close()
        raise
    _note_unimportable(config, root)
    return Trainer(config, learner, root, members, progress)


def _note_unimportable(cfg: RunConfig, root: RunDir) -> None:
    """An env or wrapper given as a callable with no import path: config.json cannot re-make
    the env. Said once on stderr and kept as a note in status.json."""
    from trustrl.envs.factory import NOT_IMPORTABLE

    rec = config_to_dict(cfg)
    names = [str(x)[len(NOT_IMPORTABLE):] for x in [rec["env_id"], *(
        w["wrapper"] if isinstance(w, dict) else w for w in rec["wrappers"])]
        if str(x).startswith(NOT_IMPORTABLE)]
    from trustrl.envs.objects import ENV_OBJECT

    if str(rec["env_id"]).startswith(ENV_OBJECT):
        root.note = (f"config.json cannot re-make the env: it was an env object "
                     f"({rec['env_id'][len(ENV_OBJECT):]}); eval and resume of this folder "
                     "need the env passed again (trustrl.evaluate(agent, env), "
                     "trustrl.resume(run, env=env))")
        print(f"trustrl: {root.path}: {root.note}", file=sys.stderr)
        root.set_status("running", 0)
        return
    if not names:
        return
    root.note = (f"config.json cannot re-make the env: {', '.join(names)} has no import path "
                 "(eval and resume of this folder will refuse; define it at the top level of "
                 "a module)")
    print(f"trustrl: {root.path}: {root.note}", file=sys.stderr)
    root.set_status("running", 0)


def resume(
    run_path: str | Path,
    progress: bool = False,
    callback: Any = None,
    total_steps: int | None = None,
    env: Any = None,
) -> TrainResult:
    """Continue a run from its last checkpoint (logs after it are dropped first); a run with
    no checkpoint yet starts again from scratch in its own folder.

    Args:
        run_path: the run folder.
        progress: show a progress bar on stderr.
        callback: as `train`'s.
        total_steps: extend the run (finished or stopped) to this new total; config.json
            records it. The schedules are functions of (iteration, total): annealed linearly
            over the new total, so from the checkpoint on the run takes the rates of a run of
            that total (a run with anneal_steps keeps that horizon, and cannot be extended past
            it).
        env: the env class or function again, for a run whose env had no import path
            (config.json records its name only); it must record as config.json does.

    Returns:
        As `train`'s.
    """
    root = RunDir.open(run_path)
    d = root.read_config()
    if not isinstance(d, dict):
        raise RunError(f"{root.path}/config.json does not hold a config (a JSON object)")
    check_env_code(root.path, d, f"resume with `trustrl train --resume {root.path} "
                   "--trust-checkpoint`")
    seeds = d.pop("seeds", None)
    cfg = config_from_dict(d)
    if env is not None:
        recorded = config_to_dict(dataclasses.replace(cfg, env_id=env))["env_id"]
        if recorded != cfg.env_id:
            raise ConfigError(f"env {recorded} is not this run's env {cfg.env_id}")
        cfg.env_id = env
    if total_steps is not None:
        cfg.total_steps = total_steps
    cfg.resolve_vector()
    cfg.validate()
    check_tracker(cfg.track, len(seeds) if seeds else 1)
    if seeds is None:
        seeds, members = [cfg.seed], [root]
    else:
        try:
            pop = json.loads((root.path / "population.json").read_text())
            members = [RunDir.open(root.path / name) for name in pop["members"]]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise RunError(f"{root.path}: population.json unreadable ({e})") from None
        if len(members) != len(seeds):
            raise RunError(f"{root.path}: population.json lists {len(members)} members for "
                           f"{len(seeds)} seeds")
    # the env's return values and the batch's size against the memory, as at the start: the
    # env or the machine may have changed since (before anything of the run is touched)
    check_memory(check_env(env_factory(cfg)), cfg.batch_size * len(seeds))
    fresh = not root.checkpoint_path.is_file()
    ck = None if fresh else root.load_checkpoint()
    if ck is not None and total_steps is not None:
        done = int(ck.get("iteration", 0))
        if cfg.num_iterations < done:
            raise ConfigError(f"--total-steps {total_steps:,}: {root.path} has already trained "
                              f"{done * cfg.batch_size:,} steps ({done} iterations of "
                              f"{cfg.batch_size}); give more to train it further")
    source = _load_source(cfg) if fresh else None
    learner = _make_learner(cfg, list(seeds))
    trainer = Trainer(cfg, learner, root, members, progress)
    try:
        if ck is not None:
            trainer.restore(ck)
        if source is not None:
            _init_from(learner, cfg, source)
    except BaseException:
        learner.close()
        raise
    if total_steps is not None:  # the new total, in every config.json of the run
        for r in [root, *members] if len(members) > 1 else [root]:
            saved = r.read_config()
            saved["total_steps"] = cfg.total_steps
            atomic_write_text(r.path / "config.json", json.dumps(saved, indent=2) + "\n")
    try:
        counts = ck.get("log_rows") if ck is not None else None
        counts = counts if isinstance(counts, list) and len(counts) == len(members) and all(
            isinstance(c, int) and 0 <= c <= learner.iteration for c in counts) else None
        kept = [m.check_logs(learner.iteration, None if counts is None else counts[i])
                for i, m in enumerate(members)]
    except BaseException:
        learner.close()
        raise
    for m, present in zip(members, kept, strict=True):
        if not present and learner.iteration:
            print(f"trustrl: {m.path}/metrics.csv is absent: its log restarts at iteration "
                  f"{learner.iteration + 1}", file=sys.stderr)
        m.truncate_logs(learner.iteration)
    if learner.restart_note and learner.iteration < cfg.num_iterations:
        # sync sub-envs that could not be pickled: said once here, kept in status.json
        print(f"trustrl: {root.path}: the envs could not be saved mid-episode "
              f"({learner.restart_note}); they restart their episodes", file=sys.stderr)
        for r in trainer._status_dirs:
            r.note = (f"resumed at iteration {learner.iteration} with fresh episodes: the envs "
                      f"could not be saved mid-episode ({learner.restart_note})")
    for r in [root, *members] if len(members) > 1 else [root]:
        r.set_status("running", learner.iteration)
    if fresh:
        print(f"trustrl: {root.path} has no checkpoint yet: training it again from the start",
              file=sys.stderr)
    if learner.iteration >= cfg.num_iterations:
        learner.close()
        return trainer.finish()
    return trainer.run(callback, initial_eval=fresh)


# ----- fine-tuning: a new run from a trained agent ------------------------------------------------
def _load_source(cfg: RunConfig) -> Agent | None:
    """The agent cfg.init_from names (a run folder or an agent file), or None."""
    if cfg.init_from is None:
        return None
    path = Path(cfg.init_from)
    if not path.exists():
        raise ConfigError(f"init_from {cfg.init_from}: no such run folder or agent file")
    return Agent.load(path)


def _init_from(learner: Learner, cfg: RunConfig, source: Agent) -> None:
    """Every member starts from `source`'s weights and observation statistics; the spaces, the
    networks and the observation normalisation must match (ConfigError in one line)."""
    import torch

    from trustrl.nets.popnet import PopActorCritic

    where = f"init_from {cfg.init_from}"
    mine, theirs = learner.spec, source.spec
    if (mine.obs_dim, mine.obs_kind, mine.action) != (theirs.obs_dim, theirs.obs_kind,
                                                      theirs.action):
        raise ConfigError(f"{where}: that agent was trained on {theirs.env_id}, whose "
                          f"observation or action space differs from {mine.env_id}'s")
    template = learner.agent(0).policy  # the run's network (the live one on the Gymnasium path)
    kw_mine, kw_theirs = template.kwargs(), source.policy.kwargs()
    diff = sorted(k for k in set(kw_mine) | set(kw_theirs) if kw_mine.get(k) != kw_theirs.get(k))
    if diff:
        k = diff[0]
        raise ConfigError(f"{where}: the networks differ in {', '.join(diff[:4])} ({k}: "
                          f"{kw_theirs.get(k)!r:.40} in that agent, {kw_mine.get(k)!r:.40} in "
                          "this config)")
    if (source.obs_normalizer is not None) != bool(cfg.normalize_obs):
        raise ConfigError(f"{where}: that agent was trained with normalize_obs "
                          f"{source.obs_normalizer is not None}; set normalize_obs the same")
    try:
        template.load_state_dict(source.policy.state_dict())
    except RuntimeError as e:
        raise ConfigError(f"{where}: the weights do not fit this network "
                          f"({str(e).splitlines()[0][:120]})") from None
    net = learner.net  # type: ignore[attr-defined]
    if isinstance(net, PopActorCritic):
        row = PopActorCritic._flatten(template)
    else:
        row = torch.cat([p.detach().reshape(-1).float().cpu() for p in template.parameters()])
    with torch.no_grad():
        net.flat.copy_(row.to(net.flat.device).expand_as(net.flat))
    norm = source.obs_normalizer
    if norm is None:
        return
    if learner.kind in ("gym", "runners"):
        live = learner._agent.obs_normalizer  # type: ignore[attr-defined]
        live.load_state_dict(norm.state_dict())
        live.frozen = False
        return
    col = learner.collector  # type: ignore[attr-defined]
    with torch.no_grad():
        col.obs_mean.copy_(torch.as_tensor(norm.rms.mean).to(col.obs_mean))
        col.obs_var.copy_(torch.as_tensor(norm.rms.var).to(col.obs_var))
        col.obs_count.fill_(float(norm.rms.count))
