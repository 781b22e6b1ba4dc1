"""Runners on Ray (trustrl/learn/runners.py, issue 55 point 4): env steps per second of one run
against the number of runners, the per-step cost split, and a cost model fitted to them.

    python benchmarks/ray_runners.py [--envs ALE/Breakout-v5 HalfCheetah-v5] [--iterations 4]
        [--num-cpus 2] [--out benchmarks/results/ray_runners_DATE]

Per env, in one invocation on one local Ray (`ray.init(num_cpus=...)`), one learner after the
other, each warmed up by one iteration and then timed over `--iterations` iterations (medians
per iteration):

    single   the Gymnasium collector in the learner's process (runners 0)
    split    the same with the env's step and the policy's sample_step timed (the timers
             cost a few per cent: `single` is the baseline of the speed-ups)
    inline1  one runner in the learner's process (ray_address 'inline': no transport)
    ray1     one runner on a Ray actor
    ray2     two runners on Ray actors

The per-step cost split comes from the same runs: `env` (the vector env's step) and
`inference` (the policy's sample_step) timed inside the single-process collector (`split`), `update`
(GAE, the algorithm's update and the metrics: the iteration less its collection) from the
single-process learner, `transfer` (the weights put in the object store, a call, a segment of
the whole batch back from an actor that only returns it: Ray's transport and scheduling),
per env step. The cost model (`model`) predicts the iteration time
per env step with N runners as (env + inference) / N + transfer + update: the collection
shared by N runners with a core each, the transport and the update serial in the learner, the
batch fixed. Its assumptions are printed beside it; it is checked against the measured N = 1
and N = 2 here. Writes RESULT.json and RESULT.md in --out. Not run by the test suite.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

SETTINGS: dict[str, dict[str, Any]] = {
    # CleanRL's ppo_atari.py's 8 envs and 256-sample minibatches, with 32 steps and one epoch
    # (its 128 steps and 4 epochs: a NatureCNN update of about 80 s here), one torch thread
    # in every process (a runner's default)
    "ALE/Breakout-v5": dict(num_envs=8, num_steps=32, minibatch_size=256, update_epochs=1,
                            normalize_obs=False, normalize_reward=False,
                            grad_backend="autograd", torch_threads=1),
    # 8 envs x 256 steps, 4 epochs of 512-sample minibatches, the 64x64 MLPs
    "HalfCheetah-v5": dict(num_envs=8, num_steps=256, minibatch_size=512, update_epochs=4,
                           normalize_obs=True, normalize_reward=True,
                           grad_backend="closed-form", torch_threads=1),
}
"""The setting per env (the module policy on every path, so that inference is the same code in
each process: grad_backend 'closed-form' keeps the compiled per-step policy out)."""
MODEL_N = (1, 2, 8, 16, 64)


def _timed(obj: Any, name: str, acc: list[float]) -> None:
    """Wrap obj.name (an instance attribute over the method) to add its seconds to acc."""
    f = getattr(obj, name)

    def wrapper(*a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            acc.append(time.perf_counter() - t0)

    setattr(obj, name, wrapper)


def measure(env_id: str, mode: str, iterations: int, tmp: Path) -> dict[str, Any]:
    from trustrl.learn.learners import GymLearner
    from trustrl.learn.runners import RunnerLearner
    from trustrl.settings.config import make_config

    sets = dict(SETTINGS[env_id], vector="sync", preset="none", tensorboard=False,
                runs_dir=str(tmp), eval_every=0)
    if mode not in ("single", "split"):
        sets["runners"] = int(mode[-1])
        if mode.startswith("inline"):
            sets["ray_address"] = "inline"
    cfg = make_config("ppo", env_id, flags=sets)
    sets_total = cfg.num_envs * cfg.num_steps
    cfg.total_steps = sets_total * (iterations + 1)
    cfg.validate()
    t0 = time.perf_counter()
    learner = RunnerLearner(cfg) if "runners" in sets else GymLearner(cfg)
    build = time.perf_counter() - t0
    collect: list[float] = []
    env_t: list[float] = []
    inf_t: list[float] = []
    _timed(learner.collector, "collect", collect)
    if mode == "split":
        _timed(learner.collector.envs, "step", env_t)
        _timed(learner._agent.policy, "sample_step", inf_t)
    iters = []
    try:
        for i in range(iterations + 1):
            n_env, n_inf = len(env_t), len(inf_t)
            t0 = time.perf_counter()
            learner.iterate()
            dt = time.perf_counter() - t0
            if i == 0:  # warm-up
                del collect[:], env_t[:], inf_t[:]
                continue
            iters.append({"iteration": dt, "collect": collect[-1],
                          "env": sum(env_t[n_env:]), "inference": sum(inf_t[n_inf:])})
    finally:
        learner.close()
    med = {k: statistics.median(r[k] for r in iters) for k in iters[0]}
    steps = cfg.num_envs * cfg.num_steps
    return {"mode": mode, "env": env_id, "batch": steps, "build_s": build,
            "median_s": med, "per_iteration": iters,
            "sps": steps / med["iteration"], "collect_sps": steps / med["collect"]}


class Echo:
    """A Ray actor that returns a stored segment: the transport of a runner's collect (the
    learner's weights in through the object store, a segment of the same size back) without
    its work."""

    def __init__(self, segment: Any):
        self.segment = segment

    def collect(self, params: Any) -> Any:
        return self.segment


def measure_transfer(env_id: str, reps: int, tmp: Path) -> dict[str, Any]:
    """Seconds of one runner's transport per iteration (median of reps): ray.put of the
    weights and statistics, the call, the segment of num_envs x num_steps back."""
    import ray

    from trustrl.learn.runners import RunnerLearner
    from trustrl.settings.config import make_config

    cfg = make_config("ppo", env_id, flags=dict(
        SETTINGS[env_id], vector="sync", preset="none", tensorboard=False, runs_dir=str(tmp),
        eval_every=0, runners=1, ray_address="inline"))
    learner = RunnerLearner(cfg)
    try:
        pool = learner.pool
        segment = pool._call(0, "collect", pool.params())
        echo = ray.remote(Echo).remote(segment)
        ray.get(echo.collect.remote(None))  # started
        times = []
        for _ in range(reps + 1):
            t0 = time.perf_counter()
            got = ray.get(echo.collect.remote(ray.put(pool.params())))
            times.append(time.perf_counter() - t0)
        assert got.rollout.obs.dtype == segment.rollout.obs.dtype
        ray.kill(echo)
    finally:
        learner.close()
    nbytes = sum(t.numel() * t.element_size() for t in vars(segment.rollout).values()
                 if t is not None)
    return {"median_s": statistics.median(times[1:]), "segment_bytes": nbytes,
            "obs_dtype": str(segment.rollout.obs.dtype)}


def merge_rounds(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """One mode's rounds as one: medians over every timed iteration of every round."""
    iters = [it for r in rs for it in r["per_iteration"]]
    med = {k: statistics.median(it[k] for it in iters) for k in iters[0]}
    b = rs[0]["batch"]
    return {**rs[0], "per_iteration": iters, "median_s": med,
            "build_s": statistics.median(r["build_s"] for r in rs),
            "sps": b / med["iteration"], "collect_sps": b / med["collect"]}


def cost_model(rows: dict[str, dict[str, Any]], transfer: dict[str, Any]) -> dict[str, Any]:
    """Per env step seconds of each part, and the predicted speed-up over `single`."""
    single, split, ray1 = rows["single"], rows["split"], rows["ray1"]
    b = single["batch"]
    c = {
        "env": split["median_s"]["env"] / b,
        "inference": split["median_s"]["inference"] / b,
        "transfer": transfer["median_s"] / b,
        "update": (single["median_s"]["iteration"] - single["median_s"]["collect"]) / b,
    }
    # the collector's own bookkeeping (runs in the runner), from the run that timed the parts
    other = split["median_s"]["collect"] / b - c["env"] - c["inference"]
    c["collector_other"] = other
    par = c["env"] + c["inference"] + other
    base = par + c["update"]
    predicted = {n: base / (par / n + c["transfer"] + c["update"]) for n in MODEL_N}
    measured = {1: ray1["sps"] / single["sps"]}
    if "ray2" in rows:
        measured[2] = rows["ray2"]["sps"] / single["sps"]
    return {"seconds_per_step": c, "predicted_speedup": predicted,
            "measured_speedup": measured,
            "limit": base / (c["transfer"] + c["update"])}


ASSUMPTIONS = [
    "the batch (num_envs x num_steps) is fixed and split evenly over N runners",
    "each runner has a core of its own, as fast as this machine's, and the learner its own",
    "env steps and inference scale perfectly across runners (no shared-core contention)",
    "transfer (weights out, segments in, scheduling) is paid serially in the learner, at the "
    "per-step cost measured between two processes of one machine (a network is slower)",
    "the update is serial in the learner, at the cost measured here (a GPU learner changes it)",
]


def markdown(results: dict[str, Any]) -> str:
    lines = [f"# Runners on Ray: measured {results['date']}", "",
             f"Command: `{results['command']}`. Machine: {results['machine']}; "
             "**shared with other jobs while measured**, so the timings are noisy; the "
             "runners and the learner share those CPUs (two runners and the learner: three "
             "busy processes), so the measured speed-ups are of this machine, not of a "
             "cluster.", ""]
    for env_id, res in results["envs"].items():
        lines += [f"## {env_id}", "", "| mode | env steps/s (iteration) | collection steps/s "
                  "| build s |", "| --- | --- | --- | --- |"]
        for mode, r in res["runs"].items():
            lines.append(f"| {mode} | {r['sps']:.0f} | {r['collect_sps']:.0f} | "
                         f"{r['build_s']:.1f} |")
        m = res["model"]
        c = m["seconds_per_step"]
        t = res["transfer"]
        lines += ["", f"A segment of the whole batch: {t['segment_bytes'] / 1e6:.1f} MB "
                  f"(observations {t['obs_dtype']}), its transport "
                  f"{t['median_s'] * 1e3:.1f} ms.",
                  "", "Per env step (microseconds): " + ", ".join(
            f"{k} {v * 1e6:.0f}" for k, v in c.items()) + " (medians over the timed "
            "iterations; collector_other is the collection's remainder, within noise of 0 "
            "where negative)", "",
            "| N runners | " + " | ".join(str(n) for n in MODEL_N) + " |",
            "| --- |" + " --- |" * len(MODEL_N),
            "| predicted speed-up | " + " | ".join(
                f"{m['predicted_speedup'][n]:.2f}" for n in MODEL_N) + " |",
            "| measured speed-up | " + " | ".join(
                f"{m['measured_speedup'][n]:.2f}" if n in m["measured_speedup"] else ""
                for n in MODEL_N) + " |",
            "", "Speed-ups over `single`, the same batch; measured with N runners and the "
            "learner sharing the machine's cores (above).",
            "", f"Limit as N grows (transfer + update serial): {m['limit']:.2f}x.", ""]
    lines += ["## Assumptions of the model", ""] + [f"- {a}" for a in ASSUMPTIONS] + [""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--envs", nargs="+", default=list(SETTINGS))
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--num-cpus", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--modes", nargs="+", default=["single", "split", "inline1", "ray1", "ray2"])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--report", type=Path, default=None,
                    help="a RESULT.json: recompute its model and rewrite its RESULT.md")
    args = ap.parse_args(argv)
    if args.report is not None:
        results = json.loads(args.report.read_text())
        for res in results["envs"].values():
            res["model"] = cost_model(res["runs"], res["transfer"])
        results["assumptions"] = ASSUMPTIONS
        args.report.write_text(json.dumps(results, indent=1) + "\n")
        args.report.with_suffix(".md").write_text(markdown(results))
        return
    import tempfile

    import ray

    ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False)
    date = time.strftime("%Y-%m-%d")
    results: dict[str, Any] = {
        "date": date, "command": "python benchmarks/ray_runners.py " + " ".join(
            sys.argv[1:] if argv is None else argv),
        "machine": f"{platform.machine()}, {args.num_cpus} CPUs given to Ray",
        "assumptions": ASSUMPTIONS, "envs": {}}
    try:
        for env_id in args.envs:
            rounds: dict[str, list[dict[str, Any]]] = {m: [] for m in args.modes}
            for k in range(args.rounds):  # alternate the order: the machine's load drifts
                for mode in args.modes if k % 2 == 0 else args.modes[::-1]:
                    with tempfile.TemporaryDirectory() as tmp:
                        r = measure(env_id, mode, args.iterations, Path(tmp))
                    rounds[mode].append(r)
                    print(f"{env_id} {mode} round {k}: {r['sps']:.0f} steps/s, collection "
                          f"{r['collect_sps']:.0f}/s", flush=True)
            runs = {m: merge_rounds(rs) for m, rs in rounds.items()}
            with tempfile.TemporaryDirectory() as tmp:
                transfer = measure_transfer(env_id, 5, Path(tmp))
            results["envs"][env_id] = {"settings": SETTINGS[env_id], "runs": runs,
                                       "transfer": transfer,
                                       "model": cost_model(runs, transfer)}
    finally:
        ray.shutdown()
    text = markdown(results)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "RESULT.json").write_text(json.dumps(results, indent=1) + "\n")
        (args.out / "RESULT.md").write_text(text)


if __name__ == "__main__":
    main()
