"""trustrl's runners on Ray beside RLlib's PPO (issue 55 point 4): train env steps per second
and the learning curve, the same setting on the same machine, N = 1 and 2 runners.

    python benchmarks/rllib_beside.py [--envs HalfCheetah-v5 CartPole-v1 ALE/Breakout-v5]
        [--runners 1 2] [--rounds 2] [--steps-scale 1.0] [--variants "" ortho_init=false]
        [--out benchmarks/results/rllib_DATE]
    python benchmarks/rllib_beside.py --report benchmarks/results/rllib_DATE/RESULT.json

Needs `pip install "trustrl[rllib,mujoco,atari]"` (RLlib of the installed Ray; Breakout is a
train-SPS row only: its short run cannot move the learning curve). One process, one local
Ray (`ray.init(num_cpus=max(2, N))`), one run at a time, interleaved: per env and round, for
each N, trustrl then RLlib (the order reversed every other round: A B B A), round
k with seed k + 1 on both sides. Each side builds its learner (actors started), then trains
to the same total env steps; the first iteration is a warm-up, the train SPS is the env steps
of the other iterations over their seconds (collection and update, as each library runs them:
neither overlaps them here). Both sides run one torch thread per process (the learner in
this process, each runner in its actor).

trustrl: `trustrl train --set runners=N` as a learner object (trustrl.learn.runners.RunnerLearner
of the same config, make_config('ppo', env, preset 'none', the settings below)). RLlib: PPO
on its new API stack (PPOConfig: num_env_runners N, num_envs_per_env_runner num_envs / N,
one local learner in this process). MAPPING says how each setting maps; what cannot be
matched is said there (and in the result). The learning curve: the mean return of the last
100 finished episodes at the end of each iteration, against env steps, on both sides from
every episode's return (RLlib's: reported by a callback at each episode's end). Writes
RESULT.json, RESULT.md and curves.png in --out. Not run by the test suite.

--variants: the trustrl sides, each a comma-separated list of `--set` overrides of the
settings below ("" is trustrl as in COMMON, the default; "ortho_init=false" a second trustrl
side with PyTorch's default init, RLlib's): every round runs each variant and RLlib, in the
alternating order.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SETTINGS: dict[str, dict[str, Any]] = {
    # as benchmarks/ray_runners.py's HalfCheetah: 8 envs x 256 steps, 4 epochs of 512
    "HalfCheetah-v5": dict(num_envs=8, num_steps=256, minibatch_size=512, update_epochs=4,
                           lr=3e-4, total_steps=40_960),
    # 8 envs x 128 steps, 4 epochs of 256
    "CartPole-v1": dict(num_envs=8, num_steps=128, minibatch_size=256, update_epochs=4,
                        lr=3e-4, total_steps=30_720),
    # speed only: CleanRL's ppo_atari.py's batch (8 envs x 128 steps, minibatches of 256, lr,
    # clip, entropy; NatureCNN shared by actor and critic, no MLP layers, no observation
    # normalisation) with one epoch (four: a NatureCNN update of about 80 s on one CPU
    # thread) and 4 iterations: too short for the learning curve to move
    "ALE/Breakout-v5": dict(num_envs=8, num_steps=128, minibatch_size=256, update_epochs=1,
                            lr=2.5e-4, total_steps=4096, clip_eps=0.1, ent_coef=0.01,
                            hidden_sizes=(), shared_trunk=True, normalize_obs=False,
                            grad_backend="autograd"),
}
COMMON: dict[str, Any] = dict(
    gamma=0.99, gae_lambda=0.95, clip_eps=0.2, vf_coef=0.5, ent_coef=0.0, max_grad_norm=0.5,
    hidden_sizes=(64, 64), activation="tanh", shared_trunk=False, log_std_init=0.0,
    normalize_obs=True, obs_clip=10.0, normalize_reward=False, norm_adv=True,
    adam_eps=1e-8, target_kl=None, clip_value_loss=False, anneal_lr=False,
    torch_threads=1, vector="sync", grad_backend="closed-form",
)
"""Settings of both sides (trustrl's names). grad_backend 'closed-form': the policy module acts
in the learner and in the runners alike (the compiled per-step policy acts only in the
learner's process)."""

MAPPING: list[tuple[str, str, str]] = [
    ("num_envs / runners", "env_runners(num_env_runners=N, num_envs_per_env_runner=num_envs/N)",
     "same"),
    ("num_steps", "rollout_fragment_length = num_steps", "same"),
    ("num_envs * num_steps", "train_batch_size_per_learner", "same batch"),
    ("minibatch_size", "minibatch_size", "same"),
    ("update_epochs", "num_epochs", "same (both reshuffle every epoch)"),
    ("lr, anneal_lr false", "lr (constant)", "same"),
    ("adam_eps 1e-8", "torch.optim.Adam's default eps 1e-8", "trustrl's set to RLlib's (RLlib's "
     "learner has no eps setting; trustrl's default is 1e-5)"),
    ("gamma, gae_lambda", "gamma, lambda_", "same"),
    ("clip_eps", "clip_param", "same"),
    ("vf_coef * 0.5 * (V - R)^2", "vf_loss_coeff = vf_coef / 2 times (V - R)^2", "same loss"),
    ("clip_value_loss false", "vf_clip_param = inf", "same (RLlib clips the squared error at "
     "10 by default)"),
    ("ent_coef", "entropy_coeff", "same"),
    ("max_grad_norm", "grad_clip, grad_clip_by 'global_norm'", "same"),
    ("target_kl None (no KL term)", "use_kl_loss false", "same (RLlib adds an adaptive KL "
     "penalty by default)"),
    ("norm_adv true", "advantages standardised", "NOT the same: trustrl standardises per "
     "minibatch, RLlib once over the whole batch"),
    ("hidden_sizes (64, 64) tanh, separate actor and critic", "DefaultModelConfig(fcnet_hiddens"
     "=[64, 64], fcnet_activation='tanh', vf_share_layers=False)", "same"),
    ("log_std a free parameter, init 0", "free_log_std=True (Box actions)", "same (RLlib's "
     "default makes log_std an output of the network)"),
    ("ortho_init true", "RLlib's default initialisers", "NOT the same: trustrl's orthogonal "
     "(gain sqrt 2, heads 0.01 and 1), RLlib's torch defaults"),
    ("normalize_obs true, obs_clip 10", "MeanStdFilter(clip_by_value=10) env-to-module "
     "connector", "the same statistics (running mean/std); RLlib merges its runners' filters "
     "after each iteration, trustrl exactly per iteration (docs/ray_runners.md)"),
    ("normalize_reward false", "none", "trustrl's PPO default (on) is off on both: RLlib's new "
     "stack has no reward scaler"),
    ("actions: Gaussian, clipped to the bounds in the env", "normalize_actions (unsquash, then "
     "clip to the bounds)", "same where the bounds are [-1, 1] (HalfCheetah)"),
    ("truncation: bootstrapped with V(final observation)", "bootstrapped likewise", "same"),
    ("torch_threads 1", "torch.set_num_threads(1) in the learner; Ray's one thread per actor",
     "same"),
]
ATARI_MAPPING: list[tuple[str, str, str]] = [
    ("ALE/Breakout-v5, frameskip 1, repeat_action_probability 0 (trustrl.envs.atari)",
     "gym.make(the same id, frameskip=1, repeat_action_probability=0.0)", "same emulator"),
    ("atari_wrappers: no-op reset (up to 30), frame skip 4 (max of the last two frames), "
     "84x84 grey, episodic life, FIRE at reset, rewards clipped to their sign, 4 frames stacked",
     "wrap_atari_for_new_api_stack(dim=84, frameskip=4, framestack=4) and rewards clipped to "
     "their sign (gymnasium TransformReward np.sign: the new stack's clip_rewards is not "
     "applied)", "the same steps; NOT the same order and type: RLlib resizes each frame before "
     "the max over the skip, and its observations are float32 in [-1, 1] (84, 84, 4), "
     "trustrl's uint8 (4, 84, 84) scaled to [0, 1] in the network"),
    ("NatureCNN (conv 32 8x8/4, 64 4x4/2, 64 3x3/1, ReLU), linear 512 ReLU, shared_trunk, "
     "hidden_sizes empty: linear heads",
     "conv_filters [[32, 8, 4, 'valid'], [64, 4, 2, 'valid'], [64, 3, 1, 'valid']] ReLU, "
     "vf_share_layers, head_fcnet_hiddens [512] ReLU", "NOT the same: the convolutions are "
     "shared on both sides; the 512-unit layer is shared by actor and critic in trustrl, one "
     "per head in RLlib (its default CNN encoder ends at the convolutions): RLlib computes "
     "a second 3136 x 512 layer"),
    ("normalize_obs false", "no MeanStdFilter", "same"),
    ("grad_backend autograd", "RLlib's torch learner", "trustrl's shared trunk needs autograd"),
]
"""The rows that differ for an Atari env (ALE/ ids): its preprocessing and network."""


def is_atari(env_id: str) -> bool:
    return env_id.startswith("ALE/")


def mapping(envs: list[str]) -> list[tuple[str, str, str]]:
    """MAPPING, and the Atari rows where an Atari env is measured."""
    return MAPPING + (ATARI_MAPPING if any(is_atari(e) for e in envs) else [])


def _load() -> float:
    return os.getloadavg()[0]


def _window_mean(returns: list[float], k: int = 100) -> float:
    return float(statistics.fmean(returns[-k:])) if returns else math.nan


def parse_variant(spec: str) -> dict[str, str]:
    """'key=value,key=value' -> {key: value} (trustrl's --set values, as strings)."""
    pairs = [p.partition("=") for p in spec.split(",") if p.strip()]
    bad = [k for k, eq, _ in pairs if not eq]
    if bad:
        raise SystemExit(f"--variants: {bad[0]!r} is not key=value")
    return {k.strip(): v.strip() for k, _, v in pairs}


def side_name(spec: str) -> str:
    """The name of a trustrl side in the results: 'trustrl', or 'trustrl key=value,...'."""
    return "trustrl" + (f" {spec}" if spec else "")


def run_trustrl(env_id: str, n_runners: int, seed: int, total: int, variant: str = ""
                ) -> dict[str, Any]:
    from trustrl.learn.runners import RunnerLearner
    from trustrl.settings.config import make_config

    s = dict(SETTINGS[env_id])
    s.pop("total_steps")
    sets = parse_variant(variant)
    load0 = _load()
    with tempfile.TemporaryDirectory() as tmp:
        flags = dict(COMMON, **s, runners=n_runners, seed=seed, total_steps=total,
                     preset="none", tensorboard=False, runs_dir=tmp, eval_every=0)
        cfg = make_config("ppo", env_id, sets=sets,
                          flags={k: v for k, v in flags.items() if k not in sets})
        cfg.validate()
        t0 = time.perf_counter()
        learner = RunnerLearner(cfg)
        build = time.perf_counter() - t0
        collect: list[float] = []
        f = learner.collector.collect

        def timed() -> Any:
            t = time.perf_counter()
            try:
                return f()
            finally:
                collect.append(time.perf_counter() - t)

        learner.collector.collect = timed  # type: ignore[method-assign]
        returns: list[float] = []
        iters = []
        try:
            while learner.global_step < total:
                t = time.perf_counter()
                _, eps = learner.iterate()
                dt = time.perf_counter() - t
                returns += [e["return"] for e in eps[0]]
                iters.append({"s": dt, "steps": cfg.num_envs * cfg.num_steps,
                              "collect_s": collect[-1], "global_step": learner.global_step,
                              "return_window": _window_mean(returns)})
        finally:
            learner.close()
    return _summary(side_name(variant), env_id, n_runners, seed, build, iters, len(returns),
                    load0)


def _episode_returns() -> Any:
    """RLlib callbacks that report every finished episode's return (the learning curve from
    the same episodes on both sides, not RLlib's smoothed episode_return_mean)."""
    from ray.rllib.callbacks.callbacks import RLlibCallback

    class EpisodeReturns(RLlibCallback):
        def on_episode_end(self, *, episode: Any, prev_episode_chunks: Any = None,
                           metrics_logger: Any = None, **kw: Any) -> None:
            # the episode's last chunk and the chunks earlier samples returned (an episode
            # spanning iterations), as RLlib's own episode_return does
            ret = episode.get_return() + sum(c.get_return() for c in prev_episode_chunks or ())
            metrics_logger.log_value(EPISODE_KEY, float(ret), reduce="item_series")

    return EpisodeReturns


EPISODE_KEY = "bench_episode_returns"


def _rllib_atari(env_config: dict[str, Any]) -> Any:
    """RLlib's Atari env: the ALE id without frame skip or sticky actions behind RLlib's
    wrappers for its new API stack, rewards clipped to their sign."""
    import ale_py
    import gymnasium as gym
    import numpy as np
    from ray.rllib.env.wrappers.atari_wrappers import wrap_atari_for_new_api_stack

    gym.register_envs(ale_py)
    env = gym.make(env_config["id"], frameskip=1, repeat_action_probability=0.0)
    env = wrap_atari_for_new_api_stack(env, dim=84, frameskip=4, framestack=4)
    return gym.wrappers.TransformReward(env, np.sign)


def _rllib_model(c: dict[str, Any], atari: bool, continuous: bool) -> Any:
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    if atari:  # NatureCNN's convolutions, then a 512-unit layer per head
        return DefaultModelConfig(
            conv_filters=[[32, 8, 4, "valid"], [64, 4, 2, "valid"], [64, 3, 1, "valid"]],
            conv_activation="relu", head_fcnet_hiddens=[512], head_fcnet_activation="relu",
            vf_share_layers=True)
    return DefaultModelConfig(
        fcnet_hiddens=list(c["hidden_sizes"]), fcnet_activation=c["activation"],
        vf_share_layers=c["shared_trunk"], free_log_std=continuous)


def run_rllib(env_id: str, n_runners: int, seed: int, total: int) -> dict[str, Any]:
    import gymnasium as gym
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.connectors.env_to_module import MeanStdFilter

    s = SETTINGS[env_id]
    c = dict(COMMON, **s)
    atari = is_atari(env_id)
    if atari:
        from ray.tune.registry import register_env

        register_env("bench_atari", _rllib_atari)
        continuous = False
    else:
        probe = gym.make(env_id)
        continuous = isinstance(probe.action_space, gym.spaces.Box)
        probe.close()
    batch = s["num_envs"] * s["num_steps"]
    load0 = _load()
    connector = (None if not c["normalize_obs"] else lambda env, spaces, device: MeanStdFilter(
        clip_by_value=c["obs_clip"]))
    config = (
        PPOConfig()
        .environment("bench_atari" if atari else env_id,
                     env_config={"id": env_id} if atari else {})
        .env_runners(num_env_runners=n_runners,
                     num_envs_per_env_runner=s["num_envs"] // n_runners,
                     rollout_fragment_length=s["num_steps"],
                     env_to_module_connector=connector)
        .training(train_batch_size_per_learner=batch, minibatch_size=s["minibatch_size"],
                  num_epochs=s["update_epochs"], lr=s["lr"], gamma=c["gamma"],
                  lambda_=c["gae_lambda"], clip_param=c["clip_eps"],
                  vf_loss_coeff=c["vf_coef"] / 2, vf_clip_param=float("inf"),
                  entropy_coeff=c["ent_coef"], grad_clip=c["max_grad_norm"],
                  grad_clip_by="global_norm", use_kl_loss=False, kl_coeff=0.0)
        .rl_module(model_config=_rllib_model(c, atari, continuous))
        .learners(num_learners=0)
        .debugging(seed=seed, log_level="ERROR")
        .callbacks(_episode_returns())
    )
    t0 = time.perf_counter()
    algo = config.build_algo()
    build = time.perf_counter() - t0
    iters = []
    returns: list[float] = []
    try:
        sampled = 0
        while sampled < total:
            t = time.perf_counter()
            r = algo.train()
            dt = time.perf_counter() - t
            now = int(r["env_runners"]["num_env_steps_sampled_lifetime"])
            timers = r.get("timers", {})
            new = r["env_runners"].get(EPISODE_KEY, [])
            new = [float(x) for x in (new if isinstance(new, list | tuple) else [new])]
            returns += [x for x in new if not math.isnan(x)]  # one episode: its return alone
            iters.append({"s": dt, "steps": now - sampled, "global_step": now,
                          "collect_s": float(timers.get("env_runner_sampling_timer", math.nan)),
                          "return_window": _window_mean(returns),
                          "rllib_episode_return_mean": float(
                              r["env_runners"].get("episode_return_mean", math.nan)),
                          "episodes_new": len(new),
                          "episodes": int(r["env_runners"].get("num_episodes_lifetime", 0))})
            sampled = now
    finally:
        algo.stop()
    return _summary("rllib", env_id, n_runners, seed, build, iters, len(returns), load0)


def _summary(side: str, env_id: str, n: int, seed: int, build: float,
             iters: list[dict[str, Any]], episodes: int, load0: float) -> dict[str, Any]:
    timed = iters[1:]  # the first iteration warms up
    steps, secs = sum(i["steps"] for i in timed), sum(i["s"] for i in timed)
    collect = [i["collect_s"] for i in timed]
    return {"side": side, "env": env_id, "runners": n, "seed": seed, "build_s": build,
            "iterations": iters, "train_sps": steps / secs,
            "collect_share": sum(collect) / secs,
            "final_return": iters[-1]["return_window"], "episodes": episodes,
            "load": [load0, _load()]}


def _fmt_mean(xs: list[float], digits: int = 0) -> str:
    if len(xs) == 1:
        return f"{xs[0]:.{digits}f}"
    return f"{statistics.fmean(xs):.{digits}f} ({', '.join(f'{x:.{digits}f}' for x in xs)})"


def curve_mean(run: dict[str, Any]) -> float:
    """The learning curve's mean over the run's iterations (its area over the steps, per
    step: the iterations are of one batch each), iterations before the first episode left
    out."""
    ys = [i["return_window"] for i in run["iterations"] if not math.isnan(i["return_window"])]
    return statistics.fmean(ys) if ys else math.nan


def trustrl_sides(results: dict[str, Any]) -> list[str]:
    return [side_name(v) for v in results.get("variants", [""])]


def table(results: dict[str, Any]) -> list[str]:
    lines = ["| env | N | trustrl side | trustrl train SPS | RLlib train SPS | ratio (trustrl / "
             "RLlib) | trustrl final return | RLlib final return | trustrl curve mean | RLlib "
             "curve mean |", "| --- |" + " --- |" * 9]
    for env_id in results["envs"]:
        for n, side in ((n, side) for n in results["runners"] for side in trustrl_sides(results)):
            rs = [r for r in results["runs"] if r["env"] == env_id and r["runners"] == n]
            t = [r for r in rs if r["side"] == side]
            b = [r for r in rs if r["side"] == "rllib"]
            if not t or not b:
                continue
            ratios = [x["train_sps"] / y["train_sps"] for x, y in zip(t, b, strict=False)]
            lines.append(
                f"| {env_id} | {n} | {side} | {_fmt_mean([r['train_sps'] for r in t])} | "
                f"{_fmt_mean([r['train_sps'] for r in b])} | {_fmt_mean(ratios, 2)} | "
                f"{_fmt_mean([r['final_return'] for r in t], 1)} | "
                f"{_fmt_mean([r['final_return'] for r in b], 1)} | "
                f"{_fmt_mean([curve_mean(r) for r in t], 1)} | "
                f"{_fmt_mean([curve_mean(r) for r in b], 1)} |")
    return lines


def markdown(results: dict[str, Any]) -> str:
    loads = [x for r in results["runs"] for x in r["load"]]
    lines = [f"# trustrl's runners beside RLlib's PPO: measured {results['date']}", "",
             f"Command: `{results['command']}`", "",
             f"Machine: {results['machine']}, **shared with other jobs while measured**: "
             f"1-minute load average {min(loads):.1f} to {max(loads):.1f} over the runs (at "
             "each run's start and end); the learner and N runners share those cores.", "",
             "Versions: " + ", ".join(f"{k} {v}" for k, v in results["versions"].items()), "",
             "Per env and N, one run per round (seed = round + 1 on both sides); the values "
             "are means over the rounds, each round's in brackets. Train SPS: env steps over "
             "the seconds of the training iterations after the first (collection and update; "
             "the actors' start is not in it). Final return: the mean return of the last 100 "
             "episodes at the last iteration, on both sides from every finished episode's return "
             "(RLlib's own episode_return_mean, a merge of its runners' windows, is kept in "
             "RESULT.json: it is not that mean). Curve mean: that mean return at the end of "
             "each iteration, averaged over the iterations (the area under the learning "
             "curve per env step).", ""]
    variants = [v for v in results.get("variants", [""]) if v]
    if variants:
        lines += ["trustrl sides: `trustrl` with the settings mapped below; " + "; ".join(
            f"`{side_name(v)}` the same with `--set {v.replace(',', ' --set ')}`"
            for v in variants) + ".", ""]
    if any(is_atari(e) for e in results["envs"]):
        lines += ["Atari rows (" + ", ".join(e for e in results["envs"] if is_atari(e)) + "): "
                  "**train SPS only**. A few thousand steps cannot move an Atari learning "
                  "curve, and the returns are not comparable: trustrl's episode is the whole "
                  "game (its raw score), RLlib's a life (EpisodicLife ends it, clipped "
                  "rewards).", ""]
    lines += table(results)
    sides = [*trustrl_sides(results), "rllib"]
    lines += ["", "Share of an iteration spent collecting (trustrl: the runners' segments "
              "gathered; RLlib: its env_runner_sampling_timer, a smoothed value), mean over "
              "rounds:", "", "| env | N | " + " | ".join(sides) + " |",
              "| --- | --- |" + " --- |" * len(sides)]
    for env_id in results["envs"]:
        for n in results["runners"]:
            rs = [r for r in results["runs"] if r["env"] == env_id and r["runners"] == n]
            sh = {side: [r["collect_share"] for r in rs if r["side"] == side] for side in sides}
            if all(sh.values()):
                lines.append(f"| {env_id} | {n} | " + " | ".join(
                    f"{statistics.fmean(sh[side]):.2f}" for side in sides) + " |")
    lines += ["", "Learning curves (mean over rounds): `curves.png`.", "",
              "## Settings, mapped one to one", "", "| trustrl | RLlib | matched |",
              "| --- | --- | --- |"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in results["mapping"]]
    lines += ["", "Per env: " + "; ".join(
        f"{e}: " + ", ".join(f"{k} {v}" for k, v in s.items())
        for e, s in results["settings"].items()), ""]
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    """Per env: the learning curves (mean over seeds) above, each seed's curve mean below
    (the spread across seeds; a bar at their mean)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    envs = results["envs"]
    fig, axes = plt.subplots(2, len(envs), figsize=(6.5 * len(envs), 8.4), squeeze=False,
                             gridspec_kw={"height_ratios": [3, 2]})
    sides = [*trustrl_sides(results), "rllib"]
    styles = dict(zip(sides[:-1], ["-", ":", "-.", (0, (1, 4))], strict=False), rllib="--")
    colors = {1: "tab:blue", 2: "tab:orange", 4: "tab:green", 8: "tab:red"}
    for ax, spread, env_id in zip(axes[0], axes[1], envs, strict=True):
        labels = []
        for side in sides:
            for n in results["runners"]:
                rs = [r for r in results["runs"] if r["env"] == env_id and r["runners"] == n
                      and r["side"] == side]
                if not rs:
                    continue
                k = min(len(r["iterations"]) for r in rs)
                x = np.mean([[i["global_step"] for i in r["iterations"][:k]] for r in rs], 0)
                ys = np.array([[i["return_window"] for i in r["iterations"][:k]] for r in rs])
                seen = ~np.isnan(ys).all(0)  # from the first iteration with an episode
                x, y = x[seen], np.nanmean(ys[:, seen], 0)
                name = f"{'RLlib' if side == 'rllib' else side} N={n}"
                ax.plot(x, y, linestyle=styles.get(side, "-"), color=colors.get(n, "k"),
                        label=f"{name} ({len(rs)} seeds)")
                means = [curve_mean(r) for r in rs]
                j = len(labels)
                spread.plot([j] * len(means), means, "o", color=colors.get(n, "k"), alpha=0.7)
                spread.plot([j - 0.25, j + 0.25], [statistics.fmean(means)] * 2, "-",
                            color=colors.get(n, "k"), lw=2)
                labels.append(name.replace(" ", "\n"))
        ax.set_title(env_id)
        ax.set_xlabel("env steps")
        ax.set_ylabel("mean return, last 100 episodes")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        spread.set_xticks(range(len(labels)), labels, fontsize=7)
        spread.set_ylabel("curve mean per seed")
        spread.grid(alpha=0.3, axis="y")
    fig.suptitle(f"PPO, trustrl runners vs RLlib, {results['date']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def versions() -> dict[str, str]:
    import gymnasium
    import numpy
    import ray
    import torch

    import trustrl

    out = {"trustrl": getattr(trustrl, "__version__", "?"), "ray": ray.__version__,
           "torch": torch.__version__, "gymnasium": gymnasium.__version__,
           "numpy": numpy.__version__, "python": platform.python_version()}
    try:
        import mujoco

        out["mujoco"] = mujoco.__version__
    except ImportError:
        pass
    return out


def write(results: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "RESULT.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "RESULT.md").write_text(markdown(results))
    plot(results, out / "curves.png")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--envs", nargs="+", default=list(SETTINGS))
    ap.add_argument("--runners", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps-scale", type=float, default=1.0,
                    help="multiply each env's total_steps (a short check: 0.1)")
    ap.add_argument("--variants", nargs="+", default=[""],
                    help="trustrl sides: comma-separated --set overrides each ('' = as set "
                         "here), e.g. '' ortho_init=false")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--report", type=Path, default=None,
                    help="a RESULT.json: rewrite its RESULT.md and curves.png")
    args = ap.parse_args(argv)
    if args.report is not None:
        write(json.loads(args.report.read_text()), args.report.parent)
        return
    import ray
    import torch

    torch.set_num_threads(1)
    print("Settings mapped (trustrl | RLlib | matched):")
    for a, b, c in mapping(args.envs):
        print(f"  {a} | {b} | {c}")
    ray.init(num_cpus=max(2, *args.runners), include_dashboard=False, log_to_driver=False)
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "command": "python benchmarks/rllib_beside.py " + shlex.join(
            sys.argv[1:] if argv is None else argv),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "versions": versions(), "envs": args.envs, "runners": args.runners,
        "variants": args.variants,
        "settings": {e: dict(SETTINGS[e], total_steps=int(SETTINGS[e]["total_steps"]
                                                          * args.steps_scale))
                     for e in args.envs},
        "common": {k: list(v) if isinstance(v, tuple) else v for k, v in COMMON.items()},
        "mapping": mapping(args.envs), "runs": []}
    for v in args.variants:
        parse_variant(v)
    sides: list[tuple[str, Any]] = [(side_name(v), lambda e, n, s, t, v=v: run_trustrl(
        e, n, s, t, v)) for v in args.variants] + [("rllib", run_rllib)]
    try:
        for env_id in args.envs:
            total = results["settings"][env_id]["total_steps"]
            for k in range(args.rounds):
                for n in args.runners:
                    for name, run in sides if k % 2 == 0 else sides[::-1]:
                        r = run(env_id, n, k + 1, total)
                        results["runs"].append(r)
                        print(f"{env_id} N={n} round {k} {name}: train {r['train_sps']:.0f} "
                              f"steps/s, build {r['build_s']:.1f} s, final return "
                              f"{r['final_return']:.1f}, load {r['load'][0]:.1f}-"
                              f"{r['load'][1]:.1f}", flush=True)
                        if args.out is not None:  # a partial result survives an interruption
                            write(results, args.out)
    finally:
        ray.shutdown()
    print(markdown(results))
    if args.out is not None:
        write(results, args.out)


if __name__ == "__main__":
    main()
