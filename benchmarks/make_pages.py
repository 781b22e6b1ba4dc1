"""Render docs/benchmarks.md from the committed result files under benchmarks/results/.

    python benchmarks/make_pages.py            # write docs/benchmarks.md
    python benchmarks/make_pages.py --check    # exit 1 when the page is not what this writes

Every table of the page is computed here from the JSON the benchmark scripts wrote (medians,
per-repeat values, ratios of the alternating pairs); tests/test_benchmark_pages.py checks that
the committed page is this script's output, so the page cannot be edited out of step with the
files. A new measurement is a new result folder and a line in SECTIONS, not an edit of a table.
The narrative (what was measured, on which commit and machine, what it means) stays in each
result folder's README.md and in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "benchmarks.md"


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
    """trustrl's Gymnasium collector against SB3 in the zoo's PPO setting:
    benchmarks/mujoco_cpu.py --json mujoco.json."""
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
    return [f"{s['steps']} steps, seeds {listed(s['seeds'])}, G = {s['G']}, {s['prompts']} "
            f"prompts, lr {s['lr']}, beta {s['beta']}; torch {d['versions']['torch']}, TRL "
            f"{d['versions']['trl']}.", "",
            *table(["tool", "seconds, median", "completions/s, median",
                    "reward, mean of the last 5 steps (per seed)",
                    "k3 KL to pi_ref, mean of the last 5 steps (per seed)"], rows)]


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


SECTIONS: list[tuple[str, str, tuple[str, ...], Callable[[Path], list[str]]]] = [
    ("trustrl's runners on Ray beside RLlib's PPO, 2026-12-06", "rllib_2026-12-06",
     ("RESULT.json",), rllib_beside),
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
    ("GRPO on a Hugging Face model: trustrl against TRL", "rlhf_hf_vs_trl", ("results.json",),
     rlhf_hf_vs_trl),
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


def render(results: Path = RESULTS) -> str:
    """docs/benchmarks.md as text, from the result files under `results`.

    Args:
        results: the folder holding the result folders (benchmarks/results).
    """
    out = [HEADER]
    for title, name, files, fn in SECTIONS:
        out += ["", f"## {title}", "", *fn(results / name), "", source(results / name, *files)]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true",
                   help="exit 1 if docs/benchmarks.md is not what this script writes")
    a = p.parse_args(argv)
    text = render()
    if a.check:
        same = PAGE.is_file() and PAGE.read_text(encoding="utf-8") == text
        print("docs/benchmarks.md is up to date" if same else
              "docs/benchmarks.md is out of date: run python benchmarks/make_pages.py")
        return 0 if same else 1
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
