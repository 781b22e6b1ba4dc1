"""Render the generated results pages and their figures from the committed result files.

    python benchmarks/make_pages.py            # write every page of PAGES and every figure
    python benchmarks/make_pages.py --check    # exit 1 when a page is not what this writes

Every table of the pages is computed here from the files under benchmarks/results/ (the JSON
the benchmark scripts wrote, or, for measurements older than this script, the numbers moved
unchanged from the hand-written pages into data files that say so), and every figure drawn
from them (matplotlib, Agg); so is every figure committed beside the data it is drawn from (a
sweep report's curves_<env>.json, benchmarks/zoo_curves.py's CSVs: `data_figures`).
tests/test_benchmark_pages.py checks that each committed page is this script's output, so a
page cannot be edited out of step with the files. A new measurement is a new result
folder and a line in a page's sections, not an edit of a table.

benchmarks/RESULTS.md and benchmarks/SUITE.md (MARKED) keep a hand-written narrative, and
each of their tables is a generated block between `<!-- make_pages: KIND PATH -->` and
`<!-- /make_pages -->`, rendered afresh here from PATH (under benchmarks/results/) by the
renderer BLOCKS names for KIND.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "benchmarks.md"
FIGURES = ROOT / "docs" / "figures"
"""Where the drawn figures go (inside docs/, so that the site holds them)."""


# ----- formatting ----------------------------------------------------------------------------
def med(xs: Sequence[float]) -> float:
    """The median (of the repeats or seeds)."""
    return float(statistics.median(xs))


def num(x: float, digits: int = 0) -> str:
    """x with thousands separators and `digits` decimals."""
    return f"{x:,.{digits}f}"


def listed(xs: Sequence[float | None], digits: int = 0) -> str:
    """The values in their order, as `a, b, c` (None as -)."""
    return ", ".join("-" if x is None else num(x, digits) for x in xs)


def ratios(top: Sequence[float], bottom: Sequence[float]) -> list[float]:
    """The ratio of each pair (the tools alternated, so repeat i of one is paired with repeat
    i of the other)."""
    return [a / b for a, b in zip(top, bottom, strict=True)]


def ratio_cell(top: Sequence[float], bottom: Sequence[float]) -> str:
    """`**r**x (pairs a, b, c; median m)`: r the ratio of the two medians, then each
    alternating pair's ratio and their median (the two summaries differ when the repeats
    scatter; both are given so that neither is picked after the fact)."""
    pairs = ratios(top, bottom)
    return (f"**{med(top) / med(bottom):.2f}x** (pairs {listed(pairs, 2)}; "
            f"median {med(pairs):.2f})")


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(r) + " |" for r in rows)]


def train_sps(run: dict[str, Any]) -> float:
    """A run's train steps per second (peers_cpu's Result: steps / train_seconds)."""
    return run["steps"] / run["train_seconds"]


def source(folder: Path, *files: str) -> str:
    """The line naming where a table's numbers come from."""
    return f"From {', '.join(f'`{f}`' for f in files)} in `benchmarks/results/{folder.name}/`."


# ----- sections ------------------------------------------------------------------------------
def purejaxrl_cpu(folder: Path) -> list[str]:
    """trustrl against PureJaxRL (and CleanRL, SB3) on one CPU core: benchmarks/purejaxrl_cpu.py
    --json."""
    d = json.loads((folder / "full_run.json").read_text())
    names = {"one": "1 seed x 4 envs", "seeds": "16 seeds x 4 envs", "wide": "1 seed x 64 envs"}
    rows = []
    for key, label in names.items():
        r = d[key]
        tr, pj = r["trustrl_sps"], r["purejaxrl_sps"]
        rows.append([label, f"{num(med(tr))} ({listed(tr)})", f"{num(med(pj))} ({listed(pj)})",
                     ratio_cell(tr, pj),
                     f"{num(med(r['trustrl_whole_loop_sps']))}",
                     f"{med(r['trustrl_return']):.1f} / {med(r['purejaxrl_return']):.1f}"])
    out = table(["row", "trustrl train SPS, median (per repeat)", "PureJaxRL SPS, median",
                 "trustrl / PureJaxRL", "trustrl whole-loop SPS",
                 "return, trustrl / PureJaxRL"], rows)
    e = d["end_to_end"]
    out += ["", "End to end (`one`, process wall seconds, medians of 3): "
            f"trustrl {med(e['trustrl_warm']):.1f} s with Numba's cache warm "
            f"({med(e['trustrl_cold']):.1f} s cold), PureJaxRL {med(e['purejaxrl_cold']):.1f} s "
            f"with a cold compile and {med(e['purejaxrl_warm']):.1f} s with JAX's cache warm: "
            f"{ratio_cell(e['purejaxrl_cold'], e['trustrl_warm'])} and "
            f"{ratio_cell(e['purejaxrl_warm'], e['trustrl_warm'])}."]
    one = d["one"]
    for peer in ("CleanRL", "SB3"):
        sps = d[peer]["sps"]
        out += ["", f"{peer} (`one`, its own train-time measure): {num(med(sps))} train SPS "
                f"({listed(sps)}); trustrl **{med(one['trustrl_sps']) / med(sps):.1f}x** "
                f"steady and **{med(one['trustrl_whole_loop_sps']) / med(sps):.1f}x** whole "
                "loop (ratios of the medians)."]
    return out


def _peer_rows(runs: dict[str, list[dict[str, Any]]], peer: str) -> list[str]:
    peer_sps = [train_sps(r) for r in runs[peer]]
    tr_sps = [train_sps(r) for r in runs["trustrl"]]
    return [f"{num(med(peer_sps))} ({listed(peer_sps)})", f"{num(med(tr_sps))} ({listed(tr_sps)})",
            ratio_cell(tr_sps, peer_sps)]


def mujoco_cpu(folder: Path) -> list[str]:
    """trustrl's Gymnasium collector against SB3 in the zoo's PPO setting, and its training
    curves (drawn by draw_mujoco): benchmarks/mujoco_cpu.py --json mujoco.json."""
    d = json.loads((folder / "mujoco.json").read_text())
    return mujoco_table(folder) + [
        "", *(f"![{env_id}: training return, mean over seeds with the min-max band]"
              f"(figures/{mujoco_figure(folder, env_id)})" for env_id in d)]


def mujoco_table(folder: Path) -> list[str]:
    """mujoco_cpu's table alone."""
    d = json.loads((folder / "mujoco.json").read_text())
    rows = []
    for env_id, runs in d.items():
        greedy = {tool: [r["extra"].get("greedy_return") for r in runs[tool]]
                  for tool in ("sb3", "trustrl")}
        rows.append([env_id, *_peer_rows(runs, "sb3"), " / ".join(
            f"{num(med([g for g in greedy[t] if g is not None]), 1)} ({listed(greedy[t], 1)})"
            for t in ("sb3", "trustrl"))])
    return table(["env (zoo setting)", "SB3 train SPS, median (per seed)",
                  "trustrl train SPS, median (per seed)", "trustrl / SB3",
                  "greedy return, median (per seed): SB3 / trustrl"], rows)


def mujoco_figure(folder: Path, env_id: str) -> str:
    """The file name of a MuJoCo result's curve figure, under FIGURES."""
    return f"{folder.name}_{env_id}.png"


def draw_mujoco(folder: Path, out: Path) -> list[Path]:
    """The training curves of each env of a mujoco.json, drawn by the plot of
    benchmarks/peers_cpu.py (the one the benchmark itself draws) into `out`."""
    peers_cpu = _bench_module("peers_cpu")
    Result, plot_curves = peers_cpu.Result, peers_cpu.plot_curves
    d = json.loads((folder / "mujoco.json").read_text())
    paths = []
    for env_id, runs in d.items():
        path = out / mujoco_figure(folder, env_id)
        plot_curves(f"{env_id}: rl-baselines3-zoo PPO setting",
                    {tool: [Result(**r) for r in rs] for tool, rs in runs.items()}, str(path))
        paths.append(path)
    return paths


def _atari_row(runs: dict[str, list[dict[str, Any]]], label: str) -> list[str]:
    floor = runs["floor"][0]["extra"]
    steps = runs["floor"][0]["steps"]
    ceiling = steps / floor["total"]
    peer = med([train_sps(r) for r in runs["cleanrl"]])
    env_part = "preprocessed" if "preprocessed" in floor else "emulator"  # older files
    parts = " + ".join(f"{floor[k]:.2f}" for k in ("update", "rollout_forward", env_part))
    return [label, *_peer_rows(runs, "cleanrl"),
            f"{parts} = {floor['total']:.2f} s", f"{num(ceiling)} SPS = **{ceiling / peer:.2f}x**"]


ATARI_HEADER = ["threads per tool", "CleanRL ppo_atari.py train SPS, median (per repeat)",
                "trustrl `--preset cleanrl`", "trustrl / CleanRL",
                "the floor per iteration", "ceiling for any tool (/ CleanRL)"]


FLOOR_NOTE = ("The floor: seconds per iteration of 1,024 steps for the update, the rollout's "
              "forward passes and the env steps (`--floor`); the ceiling is what a tool that "
              "spent nothing else would reach.")


def atari_threads(folder: Path) -> list[str]:
    """trustrl against CleanRL's ppo_atari.py on Breakout, with 1 and 2 threads:
    benchmarks/atari_cpu.py --floor --threads N --json threadsN.json."""
    rows = [_atari_row(json.loads((folder / f"threads{n}.json").read_text()), str(n))
            for n in (1, 2)]
    return table(ATARI_HEADER, rows) + [
        "", FLOOR_NOTE]


def atari_cpu(folder: Path) -> list[str]:
    """The same, before the thread count was a setting (one run of the command)."""
    d = json.loads((folder / "sps_and_floor.json").read_text())
    return table(ATARI_HEADER, [_atari_row(d, "default")]) + [
        "", FLOOR_NOTE + " Here the env part is the emulator alone, without the preprocessing."]


def rlhf_hf_vs_trl(folder: Path) -> list[str]:
    """trustrl's and TRL's GRPO on the sort model: benchmarks/rlhf_hf_vs_trl.py."""
    d = json.loads((folder / "results.json").read_text())
    s = d["settings"]
    rows = []
    for tool in ("trustrl", "trl"):
        runs = d[tool]
        rows.append([tool, num(med([r["seconds"] for r in runs]), 1),
                     num(med([r["completions_per_s"] for r in runs]), 1),
                     listed([statistics.fmean(r["reward"][-5:]) for r in runs], 3),
                     listed([statistics.fmean(r["kl"][-5:]) for r in runs], 3)])
    out = [f"{s['steps']} steps, seeds {listed(s['seeds'])}, G = {s['G']}, {s['prompts']} "
           f"prompts, lr {s['lr']}, beta {s['beta']}; torch {d['versions']['torch']}, TRL "
           f"{d['versions']['trl']}.", "",
           *table(["tool", "seconds, median", "completions/s, median",
                   "reward, mean of the last 5 steps (per seed)",
                   "k3 KL to pi_ref, mean of the last 5 steps (per seed)"], rows)]
    if "rounds" in d:  # the rounds alternated trustrl and TRL
        r = [x["ratio"] for x in d["rounds"]]
        out += ["", f"trustrl / TRL completions per second, round by round: {listed(r, 2)} "
                f"(median {num(med(r), 2)}, range {num(min(r), 2)} to {num(max(r), 2)}); load "
                f"average before each round {listed([x['load_before'] for x in d['rounds']], 1)}."]
    return out


def onehot_norm(folder: Path) -> list[str]:
    """PPO with and without observation normalisation on a one-hot toy:
    benchmarks/onehot_norm.py (one JSON per budget and toy)."""
    rows = []
    for path in sorted(folder.glob("onehot_norm_*.json"),
                       key=lambda f: (json.loads(f.read_text())["total_steps"], f.name)):
        d = json.loads(path.read_text())
        for variant, xs in d["results"].items():
            rows.append([f"{d['total_steps']:,}", "skewed" if d.get("skew") else "uniform",
                         variant, f"{med(xs):.1f}", listed(xs, 1)])
    return table(["steps", "targets", "variant", "median return", "per seed (1, 2, 3)"],
                 rows) + ["", "Final greedy mean return of 10 episodes; best 0, a uniform "
                          "policy about -16.7."]


def script_markdown(script: str, results: dict[str, Any]) -> list[str]:
    """benchmarks/<script>.py's own markdown(results), its title (and the blank line under it:
    the section's title) dropped and its headings moved two levels down."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        markdown = importlib.import_module(script).markdown
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    lines = markdown(results).splitlines()[2:]
    return [("#" + line) if line.startswith("#") else line for line in lines]


def ray_runners(folder: Path) -> list[str]:
    """One run's rollout on Ray runners: benchmarks/ray_runners.py's own Markdown."""
    results = json.loads((folder / "RESULT.json").read_text())
    for res in results["envs"].values():  # JSON made the runner counts strings
        for key in ("predicted_speedup", "measured_speedup"):
            res["model"][key] = {int(n): v for n, v in res["model"][key].items()}
    return script_markdown("ray_runners", results)


def rllib_beside(folder: Path) -> list[str]:
    """trustrl's runners beside RLlib's PPO: benchmarks/rllib_beside.py's own Markdown."""
    return script_markdown("rllib_beside", json.loads((folder / "RESULT.json").read_text()))


Section = tuple[str, str, tuple[str, ...], Callable[[Path], list[str]]]
"""(title, result folder, its files read, renderer)."""

SECTIONS: list[Section] = [
    ("trustrl's runners beside RLlib's PPO, ALE/Breakout-v5, N = 1 and 2, train SPS only, "
     "2026-12-06", "rllib_2026-12-06b/atari", ("RESULT.json",), rllib_beside),
    ("trustrl's runners beside RLlib's PPO, HalfCheetah-v5, N = 2, with and without RLlib's "
     "initialisation, 2026-12-06", "rllib_2026-12-06b/halfcheetah_164k_n2", ("RESULT.json",),
     rllib_beside),
    ("trustrl's runners beside RLlib's PPO, HalfCheetah-v5, N = 1, with and without RLlib's "
     "initialisation, 2026-12-06", "rllib_2026-12-06b/halfcheetah_164k", ("RESULT.json",),
     rllib_beside),
    ("trustrl's runners beside RLlib's PPO, CartPole-v1, with and without RLlib's "
     "initialisation, 2026-12-06", "rllib_2026-12-06b/cartpole", ("RESULT.json",),
     rllib_beside),
    ("trustrl's runners on Ray beside RLlib's PPO, 2026-12-06", "rllib_2026-12-06",
     ("RESULT.json",), rllib_beside),
    ("trustrl against PureJaxRL, CleanRL and SB3 on one CPU core, 2026-12-06 (evening)",
     "purejaxrl_cpu_2026-12-06b", ("full_run.json",), purejaxrl_cpu),
    ("trustrl against PureJaxRL, CleanRL and SB3 on one CPU core, 2026-12-06",
     "purejaxrl_cpu_2026-12-06", ("full_run.json",), purejaxrl_cpu),
    ("trustrl against PureJaxRL, CleanRL and SB3 on one CPU core, 2026-12-03",
     "purejaxrl_cpu_2026-12-03", ("full_run.json",), purejaxrl_cpu),
    ("Atari Breakout against CleanRL, CPU, one and two threads, 2026-12-03",
     "atari_cpu_threads_2026-12-03", ("threads1.json", "threads2.json"), atari_threads),
    ("Atari Breakout against CleanRL, CPU, 2026-12-03 (before the threads setting)",
     "atari_cpu_2026-12-03", ("sps_and_floor.json",), atari_cpu),
    ("MuJoCo against SB3 in the zoo's PPO setting, CPU, 2026-12-02 (third run: the compiled "
     "policy step)", "mujoco_cpu_2026-12-02c", ("mujoco.json",), mujoco_cpu),
    ("MuJoCo against SB3, CPU, 2026-12-02 (second run: PPO's compiled update)",
     "mujoco_cpu_2026-12-02b", ("mujoco.json",), mujoco_cpu),
    ("MuJoCo against SB3, CPU, 2026-12-02 (first run)",
     "mujoco_cpu_2026-12-02", ("mujoco.json",), mujoco_cpu),
    ("GRPO on a Hugging Face model: trustrl against TRL, 2026-12-06 (one policy pass per "
     "batch, fused Adam)", "rlhf_hf_vs_trl_2026-12-06", ("results.json",), rlhf_hf_vs_trl),
    ("GRPO on a Hugging Face model: trustrl against TRL (before 2026-12-06)", "rlhf_hf_vs_trl",
     ("results.json",), rlhf_hf_vs_trl),
    ("Observation normalisation on one-hot observations (PPO, no preset), 2026-12-06",
     "onehot_norm_2026-12-06", ("onehot_norm_4096.json", "onehot_norm_4096_skew.json",
                                "onehot_norm_20000.json", "onehot_norm_20000_skew.json"),
     onehot_norm),
    ("One run's rollout on Ray runners, 2026-12-06", "ray_runners_2026-12-06",
     ("RESULT.json",), ray_runners),
]
"""(title, result folder, its files read, renderer), newest first within a kind."""

HEADER = """# Benchmark tables

Generated by `python benchmarks/make_pages.py` from the result files committed under
`benchmarks/results/` (a test checks this page is the script's output: edit the script or the
results, never the page). Train SPS is env steps per second of training; the tools alternated
run by run, so ratios are taken pair by pair and their median is given, with the pairs.
Compare ratios, not SPS, across sections: they were measured on different machines. The
narrative of each measurement (the command, the commit, the machine) is in its folder's
README.md or RESULT.md, in `benchmarks/RESULTS.md`, and for GRPO against TRL in
[the Hugging Face RLHF page](rlhf_hf.md); the sweeps' reports are in `benchmarks/SUITE.md`."""


# ----- docs/results.md: the core's measurements, transcribed from the earlier page -------------
def _data(folder: Path, name: str) -> dict[str, Any]:
    return json.loads((folder / name).read_text(encoding="utf-8"))


def _provenance(d: dict[str, Any]) -> str:
    """What a transcribed table's data file says of it: the command (or the steps, in order),
    its wall time, the machine."""
    steps = [d["command"]] if isinstance(d["command"], str) else d["command"]
    cmd = ", then ".join(s if "`" in s else f"`{s}`" for s in steps)
    wall = f" {d['wall'][0].upper()}{d['wall'][1:]}." if "wall" in d else ""
    return f"Command: {cmd}.{wall} Machine: {d['machine']}."


def _steps(xs: Sequence[int]) -> str:
    """Per-seed step counts, then their median and range."""
    return (f"{' / '.join(num(x) for x in xs)}: median {num(med(xs))}, range "
            f"{num(min(xs))}-{num(max(xs))}")


def acceptance(folder: Path) -> list[str]:
    """The core's acceptance run: benchmarks/acceptance.py (acceptance.json)."""
    d = _data(folder, "acceptance.json")
    c, pd, sp = d["cartpole"], d["pendulum"], d["speed"]
    seeds = f"seeds {c['seeds'][0]}-{c['seeds'][-1]}"
    finals = sorted(set(c["final_return"]))
    rows = [
        [f"CartPole-v1 preset, steps to the first greedy mean of 500 ({c['eval_episodes']} "
         f"episodes, evaluated every iteration = {c['eval_every_steps']} steps), {seeds}",
         _steps(c["first_500_step"])],
        ["same, steps from which every later greedy evaluation is 500",
         _steps(c["stays_500_step"])],
        [f"CartPole-v1 preset, final greedy return at {num(c['final_steps'])} steps, {seeds}",
         f"{finals[0]:.1f} for all {len(c['final_return'])}" if len(finals) == 1
         else listed(c["final_return"], 1)],
        [f"Pendulum-v1 preset at {num(pd['steps'])} steps ({pd['iterations']} x {pd['batch']}), "
         f"final greedy return over 10 episodes, seeds {pd['seeds'][0]}-{pd['seeds'][-1]}",
         f"{' / '.join(f'{x:.1f}' for x in pd['final_return'])}: median "
         f"**{med(pd['final_return']):.1f}** (the blog: {pd['blog_return']}; target "
         f"{pd['target']} or better)"],
        [f"{sp['what']}, {num(sp['steps'])} steps",
         f"{sp['wall_seconds']} s wall: {num(sp['end_to_end_sps'])} steps/s end to end; median "
         f"iteration {num(sp['median_iteration_sps'])} SPS"],
        ["peak resident memory of that training process", f"{sp['peak_rss_mib']} MiB"]]
    r = d["rerun"]
    return [_provenance(d), "", *table(["what", "result"], rows), "", d["caveat"], "",
            f"Re-run {r['when']}: {r['learning']}, {num(r['end_to_end_sps'])} steps/s, "
            f"{r['peak_rss_mib']} MiB."]


def learning_tests(folder: Path) -> list[str]:
    """The thresholds of tests/test_learning.py and what was measured when they were set."""
    d = _data(folder, "learning_tests.json")
    return [_provenance(d), "", *table(["test", "threshold", "measured when set"],
                                       [[t["test"], t["threshold"], t["measured"]]
                                        for t in d["tests"]])]


def _g(x: float) -> str:
    """A KL as the earlier page printed it (Python's general format, 3 significant digits)."""
    return f"{x:.3g}"


def algorithms(folder: Path) -> list[str]:
    """TRPO, NPG, PPO-penalty and the ablations side by side: benchmarks/algorithms.py."""
    d = _data(folder, "algorithms.json")
    out = [_provenance(d), "", d["columns"] + "."]
    for e in d["envs"]:
        rows = []
        for r in e["rows"]:
            rows.append([r["algo"], f"{r['mean']:.1f} ± {r['std']:.1f}",
                         " / ".join(f"{x:.1f}" for x in r["per_seed"]), _g(r["kl_exact"]),
                         _g(r["approx_kl_k3"]), num(r["sps"])])
            if r["algo"] == "trpo":
                rows.append(["", f"largest KL of an accepted TRPO step: {e['trpo_largest_kl']} "
                             f"(delta {e['max_kl']})", "", "", "", ""])
        out += ["", f"{e['env']}, {num(e['steps'])} steps, seeds {e['seeds']}", "",
                *([e["caveat"], ""] if "caveat" in e else []),
                *table(["algo", "greedy return (mean ± std)", "per seed",
                        "mean KL/update (exact)", "mean approx KL (k3)", "SPS"], rows)]
    return out + ["", d["caveat"]]


def lab(folder: Path) -> list[str]:
    """The PPO lab's reference run (lab.json)."""
    d = _data(folder, "lab.json")
    rows = [[r["variant"], f"{r['final_return']:.1f}", f"{r['approx_kl']:.4f}",
             f"{r['clip_fraction']:.3f}", str(r["epochs"]), f"{r['seconds']} s"]
            for r in d["rows"]]
    return [_provenance(d), "", *table(["variant", "final return", "median approx KL",
                                        "median clip fraction", "median epochs", "time"], rows),
            "", d["caveat"]]


def reproduce(folder: Path) -> list[str]:
    """`trustrl reproduce`'s verdict counts (reproduce.json)."""
    d = _data(folder, "reproduce.json")
    v = ", ".join(f"{n} {k}" for k, n in d["verdicts"].items())
    return [f"`{d['command']}`: {d['minutes']} min on the 2 cores; {d['claims']} claims, "
            f"{d['checks']} checks: {v}, each difference explained in the report "
            "([reproduction/REPORT.md](reproduction/REPORT.md)). " + d["quick"] + "."]


CORE = "core_cpu_2026-11-29"
RESULTS_SECTIONS: list[Section] = [
    ("Acceptance of the core (PPO-clip)", CORE, ("acceptance.json",), acceptance),
    ("Learning tests (tests/test_learning.py), with their margins", CORE,
     ("learning_tests.json",), learning_tests),
    ("The algorithms side by side (TRPO, NPG, PPO-penalty and the ablations)", CORE,
     ("algorithms.json",), algorithms),
    ("The PPO lab (trustrl lab)", CORE, ("lab.json",), lab),
    ("trustrl reproduce", CORE, ("reproduce.json",), reproduce),
]

RESULTS_HEADER = """# Measured results

The core's first measurements (2026-11-29 to 12-01), generated by
`python benchmarks/make_pages.py` from the data files in `benchmarks/results/core_cpu_2026-11-29/`
(moved there unchanged from the hand-written page this one replaces; a test checks the page is
the script's output). `$OUT` in a command is a folder of your choice. Later measurements:
[benchmark tables](benchmarks.md), the sweeps in `benchmarks/SUITE.md`, the batched collector
in [fast.md](fast.md), RLHF in [rlhf.md](rlhf.md), the demos in [demo.md](demo.md)."""


def purejaxrl_pairs(folder: Path) -> list[str]:
    """trustrl against PureJaxRL pair by pair: full_run.json's three rows and the five more
    pairs of seeds_one_5_repeats.json (`--rows seeds one --repeats 5 --no-e2e`), each row's
    ratio the median of its pairs, the goal >= 1.0x counted over every pair."""
    full = json.loads((folder / "full_run.json").read_text())
    more = json.loads((folder / "seeds_one_5_repeats.json").read_text())
    names = {"one": "1 seed x 4 envs", "seeds": "16 seeds x 4 envs", "wide": "1 seed x 64 envs"}

    def spread(xs: Sequence[float]) -> str:
        return f"{num(med(xs))} ({num(min(xs))}-{num(max(xs))})"

    def pairs_cell(r: dict[str, Any]) -> tuple[str, list[float]]:
        pairs = ratios(r["trustrl_sps"], r["purejaxrl_sps"])
        return f"**{med(pairs):.2f}x** ({listed(pairs, 2)})", pairs

    rows = []
    for key, label in names.items():
        r = full[key]
        cell, pairs = pairs_cell(r)
        extra = "-"
        if key in more:
            extra, more_pairs = pairs_cell(more[key])
            pairs = pairs + more_pairs
        met = sum(x >= 1.0 for x in pairs)
        verdict = ("**met** in all" if met == len(pairs) else f"**met** in {met} of") + \
            f" {len(pairs)} pairs"
        rows.append([label, f"{spread(r['trustrl_sps'])} / {spread(r['purejaxrl_sps'])}",
                     cell, extra, f">= 1.0x: {verdict}"])
    return table(["row", "trustrl / PureJaxRL SPS, medians of 3 (range)", "ratio (pairs)",
                  "5 more pairs (`--rows seeds one --repeats 5 --no-e2e`)", "goal"],
                 rows)


def purejaxrl_ab(folder: Path) -> list[str]:
    """trustrl against PureJaxRL at two commits, row by row: full_run_A.json (every row) and
    rows_one_seeds_B.json (`--rows one seeds --no-e2e`), A and B the commits in the names; each
    cell the median of the pairs' ratios, the pairs, and trustrl's SPS (median, range)."""
    (full,) = sorted(folder.glob("full_run_*.json"))
    (rows,) = sorted(folder.glob("rows_one_seeds_*.json"))
    runs = {f.stem.rsplit("_", 1)[1]: json.loads(f.read_text()) for f in (full, rows)}
    names = {"one": "1 seed x 4 envs", "seeds": "16 seeds x 4 envs", "wide": "1 seed x 64 envs"}

    def cell(r: dict[str, Any] | None) -> tuple[str, list[float]]:
        if r is None:
            return "not run", []
        pairs = ratios(r["trustrl_sps"], r["purejaxrl_sps"])
        xs = r["trustrl_sps"]
        return (f"**{med(pairs):.2f}x** ({listed(pairs, 2)}); trustrl {num(med(xs))} SPS "
                f"({num(min(xs))}-{num(max(xs))})"), pairs

    out = []
    for key, label in names.items():
        cells = [cell(run.get(key)) for run in runs.values()]
        pairs = [x for _, ps in cells for x in ps]
        met = sum(x >= 1.0 for x in pairs)
        out.append([label, *(c for c, _ in cells),
                    f">= 1.0x: met in {met} of {len(pairs)} pairs"])
    return table(["row", *(f"{c}: trustrl / PureJaxRL (pairs)" for c in runs), "goal"], out)


GPU_SETTINGS = {"single": ("single: 4 envs x 128 steps, 4 minibatches", "default"),
                "envs2048": ("2048 envs x 128 steps, 8 minibatches", "wide"),
                "seeds1024": ("1024 seeds, 4 envs x 128 steps each", "seeds"),
                "envs65536": ("65,536 envs x 128 steps, 8 minibatches", None)}
"""gpu_fast.py's settings: their label and PureJaxRL's run of the same setting."""
GPU_GOAL_SPS = 30_000_000
"""The goal at 65,536 envs, where PureJaxRL was not run."""


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def gpu_session(folder: Path) -> list[str]:
    """trustrl's PPO eager and under a CUDA graph against PureJaxRL on one GPU: the JSON
    lines of gpu_fast.py and purejaxrl_gpu.py of the session's calls 1, 2 and 4 (call 4's
    second sample in brackets)."""
    ours = [r for f in ("call1_gpu_fast.jsonl", "call2_gpu_fast_envs65536.jsonl")
            for r in _jsonl(folder / f) if r.get("algo") == "ppo"]
    again = [r for r in _jsonl(folder / "call4_gpu_fast.jsonl") if r.get("algo") == "ppo"]
    peer = {r["run"]: r["sps"] for r in _jsonl(folder / "call1_purejaxrl.jsonl")}
    peer_again = {r["run"]: r["sps"] for r in _jsonl(folder / "call4_purejaxrl.jsonl")}

    def sps(rows: list[dict[str, Any]], setting: str, mode: str) -> float | None:
        return next((r["sps"] for r in rows if r["setting"] == setting and r["mode"] == mode),
                    None)

    def with_second(a: float | None, b: float | None, fmt: Callable[[float], str]) -> str:
        return "not run" if a is None else fmt(a) + ("" if b is None else f" ({fmt(b)})")

    rows = []
    for setting, (label, run) in GPU_SETTINGS.items():
        graph, graph2 = sps(ours, setting, "graph"), sps(again, setting, "graph")
        pj, pj2 = (peer.get(run), peer_again.get(run)) if run else (None, None)
        assert graph is not None
        if pj is not None:
            ratio = with_second(graph / pj, graph2 / pj2 if graph2 and pj2 else None,
                                lambda x: f"{x:.2f}")
        else:
            ratio = f"goal {GPU_GOAL_SPS / 1e6:.0f}M: {graph / GPU_GOAL_SPS:.2f}"
        rows.append([label, with_second(pj, pj2, num), num(sps(ours, setting, "eager") or 0),
                     with_second(graph, graph2, num), ratio])
    return table(["setting", "PureJaxRL", "trustrl eager", "trustrl CUDA graph",
                  "graph / PureJaxRL"], rows)


PENDULUM_GAMMA = [("gamma 0.9 (the preset)", "base", "basetrpo"), ("gamma 0.95", "g95", None),
                  ("gamma 0.95, num_steps 1024", "g95n1024", None),
                  ("gamma 0.98", "g98", "g98trpo"), ("gamma 0.99", "g99", "g99trpo"),
                  ("max_kl 0.02 (TRPO, gamma 0.9)", None, "kl02trpo"),
                  ("max_kl 0.005 (TRPO, gamma 0.9)", None, "kl005trpo")]
"""The Pendulum tuning round's candidates: (label, PPO run, TRPO run), each run's
<name>.summary.json."""


def pendulum_gamma(folder: Path) -> list[str]:
    """The Pendulum tuning round on the discount (SUITE.md's tuning record): each run's final
    greedy return per seed from its summary.json, the best median of each algorithm in bold."""
    def seeds(run: str | None) -> list[float]:
        if run is None:
            return []
        d = json.loads((folder / f"{run}.summary.json").read_text())
        return list(d["per_seed"].values())

    cols = [[seeds(run) for _, run, _ in PENDULUM_GAMMA],
            [seeds(run) for _, _, run in PENDULUM_GAMMA]]
    best = [max(med(xs) for xs in col if xs) for col in cols]
    rows = []
    for k, (label, _, _) in enumerate(PENDULUM_GAMMA):
        row = [label]
        for col, top in zip(cols, best, strict=True):
            xs = col[k]
            m = f"{med(xs):.1f}" if xs else ""
            row += [listed(xs, 1) if xs else "", f"**{m}**" if xs and med(xs) == top else m]
        rows.append(row)
    return table(["candidate", "PPO per seed (101..105)", "PPO median",
                  "TRPO per seed (101..105)", "TRPO median"], rows)


# ----- hand-written pages with generated blocks (benchmarks/RESULTS.md, SUITE.md) -----------
def transcribed(path: Path) -> list[str]:
    """A table moved, cells unchanged, from a hand-written page into a data file (its header,
    alignment row and rows; the file also keeps the section, the text before the table and
    the commands the page gave)."""
    d = json.loads(path.read_text(encoding="utf-8"))
    row = ["| " + " | ".join(r) + " |" for r in (d["header"], *d["rows"])]
    return [row[0], "|" + "|".join(d["align"]) + "|", *row[1:]]


BLOCKS: dict[str, Callable[[Path], list[str]]] = {
    "transcribed": transcribed, "mujoco_table": mujoco_table, "atari_threads": atari_threads,
    "purejaxrl_pairs": purejaxrl_pairs, "purejaxrl_ab": purejaxrl_ab, "gpu_session": gpu_session,
    "pendulum_gamma": pendulum_gamma}
"""What a block of a marked page may be: its kind -> the renderer of its file or folder."""

BLOCK = re.compile(r"^<!-- make_pages: (\S+) (\S+) -->\n.*?^<!-- /make_pages -->$",
                   re.MULTILINE | re.DOTALL)
"""A generated block: `<!-- make_pages: KIND PATH -->`, the block, `<!-- /make_pages -->`,
PATH relative to benchmarks/results/."""


def render_blocks(text: str, results: Path = RESULTS) -> str:
    """A hand-written page with every generated block rendered afresh from its file.

    Args:
        text: the page.
        results: the folder the blocks' paths are relative to.
    """
    def fresh(m: re.Match[str]) -> str:
        kind, target = m.group(1), m.group(2)
        return "\n".join([f"<!-- make_pages: {kind} {target} -->",
                          *BLOCKS[kind](results / target), "<!-- /make_pages -->"])

    return BLOCK.sub(fresh, text)


def blocks(text: str) -> list[tuple[str, str]]:
    """The (kind, path) of each generated block of a page."""
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(text)]


MARKED = ["benchmarks/RESULTS.md", "benchmarks/RESULTS_HISTORY.md", "benchmarks/SUITE.md",
          "benchmarks/SUITE_HISTORY.md"]
"""The hand-written pages whose tables are generated blocks (the narrative around them is
hand-written; the blocks are not)."""


def render_page(header: str, sections: Sequence[Section], results: Path) -> str:
    """A page as text: its header, then each section's title, body and source line."""
    out = [header]
    for title, name, files, fn in sections:
        out += ["", f"## {title}", "", *fn(results / name), "", source(results / name, *files)]
    return "\n".join(out) + "\n"


def render(results: Path = RESULTS) -> str:
    """docs/benchmarks.md as text, from the result files under `results`.

    Args:
        results: the folder holding the result folders (benchmarks/results).
    """
    return render_page(HEADER, SECTIONS, results)


def render_results(results: Path = RESULTS) -> str:
    """docs/results.md as text, from the result files under `results`.

    Args:
        results: the folder holding the result folders (benchmarks/results).
    """
    return render_page(RESULTS_HEADER, RESULTS_SECTIONS, results)


PAGES: dict[str, tuple[Callable[[Path], str], Sequence[Section]]] = {
    "docs/benchmarks.md": (render, SECTIONS),
    "docs/results.md": (render_results, RESULTS_SECTIONS),
}
"""Each generated page (its path under the repository): its renderer and its sections."""

DRAWERS: dict[Callable[[Path], list[str]], Callable[[Path, Path], list[Path]]] = {
    mujoco_cpu: draw_mujoco}
"""A section renderer that links figures -> the function drawing them into a folder."""

def _feature_drawer(script: str) -> Callable[[Path, Path], list[Path]]:
    """A drawer of one figure, out/<folder>.png, from the folder's results.json by `script`'s
    draw(results, path) (a benchmark beside sb3-contrib; its page under docs/ shows it)."""
    def drawer(folder: Path, out: Path) -> list[Path]:
        path = out / f"{folder.name}.png"
        _bench_module(script).draw(json.loads((folder / "results.json").read_text()), path)
        return [path]
    return drawer


FEATURE_FIGURES = [("masking", "masking_vs_sb3"), ("recurrent_2026-12-06", "recurrent_vs_sb3"),
                   ("recurrent_2026-12-07", "recurrent_vs_sb3")]
"""The figures of the feature pages (docs/masking.md, docs/recurrent.md): (result folder, the
benchmark script whose draw() draws it)."""

DRAWN = [(name, DRAWERS[fn]) for _, (_, sections) in PAGES.items()
         for _, name, _, fn in sections if fn in DRAWERS] + [
    (name, _feature_drawer(script)) for name, script in FEATURE_FIGURES]
"""The figures: (result folder, the function drawing its figures into a folder)."""


def _bench_module(name: str) -> Any:
    """A module of benchmarks/ (a script of this folder), imported by name."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def data_figures(results: Path = RESULTS) -> list[tuple[Path, Callable[[], None]]]:
    """The figures that sit beside the data they are drawn from, under `results`: each
    (PNG path, a function drawing it there). A sweep report's curves_<env>.json
    (trustrl.sweep.report.draw_curves), benchmarks/zoo_curves.py's pair of CSVs,
    trustrl_<algo>_<env>.csv beside zoo_<algo>_<env>.csv (zoo_curves.draw), and the
    curves.png of benchmarks/rllib_beside.py's RESULT.json (rllib_beside.plot).

    Args:
        results: the folder holding the result folders.
    """
    from trustrl.sweep.report import draw_curves

    found: list[tuple[Path, Callable[[], None]]] = []
    for data in sorted(results.rglob("curves_*.json")):
        png = data.with_suffix(".png")
        found.append((png, lambda d=data, p=png: draw_curves(d, p)))
    for data in sorted(results.rglob("trustrl_*.csv")):
        algo, _, env = data.stem.removeprefix("trustrl_").partition("_")
        if (data.parent / f"zoo_{algo}_{env}.csv").is_file():
            found.append((data.parent / f"curve_{env}.png",
                          lambda f=data.parent, a=algo, e=env: _bench_module("zoo_curves").draw(
                              f, a, e) and None))
    for folder in sorted(results.glob("rllib_*")):
        for data in sorted(folder.rglob("RESULT.json")):
            png = data.parent / "curves.png"
            found.append((png, lambda d=data, p=png: _bench_module("rllib_beside").plot(
                json.loads(d.read_text()), p)))
    return found


def figures(results: Path = RESULTS, out: Path = FIGURES) -> list[Path]:
    """Every figure `draw` writes: DRAWN's (into `out`) and data_figures' (beside their data).

    Args:
        results: the folder holding the result folders.
        out: the folder DRAWN's PNGs go to.
    """
    drawn = [out / mujoco_figure(results / name, env_id) for name, fn in DRAWN
             if fn is draw_mujoco
             for env_id in json.loads((results / name / "mujoco.json").read_text())]
    drawn += [out / f"{name}.png" for name, _ in FEATURE_FIGURES]
    return drawn + [p for p, _ in data_figures(results)]


def draw(results: Path = RESULTS, out: Path = FIGURES, beside_data: bool = True) -> list[Path]:
    """Draw every figure: DRAWN's into `out`, and each of data_figures beside its data;
    returns their paths.

    Args:
        results: the folder holding the result folders.
        out: the folder DRAWN's PNGs go to.
        beside_data: also draw data_figures (into `results`).
    """
    import matplotlib

    matplotlib.use("Agg")
    out.mkdir(parents=True, exist_ok=True)
    paths = [p for name, fn in DRAWN for p in fn(results / name, out)]
    for png, drawer in data_figures(results) if beside_data else []:
        drawer()
        paths.append(png)
    return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true",
                   help="exit 1 if a page is not what this script writes (draws nothing)")
    a = p.parse_args(argv)
    stale = []
    pages = {rel: fn(RESULTS) for rel, (fn, _) in PAGES.items()}
    pages |= {rel: render_blocks((ROOT / rel).read_text(encoding="utf-8")) for rel in MARKED}
    for rel, text in pages.items():
        page = ROOT / rel
        if a.check:
            if not (page.is_file() and page.read_text(encoding="utf-8") == text):
                stale.append(rel)
            continue
        page.write_text(text, encoding="utf-8")
        print(f"wrote {rel}")
    if a.check:
        print(f"out of date: {', '.join(stale)}: run python benchmarks/make_pages.py" if stale
              else "the generated pages are up to date")
        return 1 if stale else 0
    for path in draw():
        print(f"drew {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
