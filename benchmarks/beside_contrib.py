"""What the benchmarks beside sb3-contrib share (masking_vs_sb3.py, recurrent_vs_sb3.py): the
interleaved run loop, the results file, the spread cell, the table between a page's markers and
the figure drawn from results.json (benchmarks/make_pages.py redraws it into docs/figures/)."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def spread(xs: Sequence[float], fmt: str) -> str:
    """'mean [min, max]' of xs, each formatted with fmt."""
    mean = statistics.fmean(xs)
    return f"{mean:{fmt}} [{min(xs):{fmt}}, {max(xs):{fmt}}]"


def versions() -> dict[str, str]:
    """The versions a result depends on."""
    import gymnasium
    import sb3_contrib
    import stable_baselines3
    import torch

    import trustrl

    return {"python": platform.python_version(), "torch": torch.__version__,
            "gymnasium": gymnasium.__version__, "stable_baselines3": stable_baselines3.__version__,
            "sb3_contrib": sb3_contrib.__version__, "trustrl": trustrl.__version__}


def run_interleaved(tools: Sequence[str], seeds: list[int], total: int, warm_steps: int,
                    run_one: Callable[[str, int, int], dict[str, Any]], out: Path, command: str,
                    settings: dict[str, Any], digits: int, resume: bool = False,
                    extra: dict[str, Any] | None = None) -> None:
    """One untimed warm-up run per tool (imports, compiled kernels), then every tool per seed,
    interleaved so that a change of load hits them alike; results.json in `out` is rewritten
    after each run, so an interrupted benchmark keeps what it measured. Each run records when
    it ended (`ended`, UTC) and the load average then.

    resume: keep the runs of an existing results.json in `out` measured with the same settings
    and budget, and run only the (tool, seed) pairs it lacks (a benchmark longer than one
    sitting, spread over several); a results.json of other settings is refused. extra: more
    entries of results.json (e.g. the env), checked likewise on resume."""
    extra = extra or {}
    runs: list[dict[str, Any]] = []
    path = out / "results.json"
    if resume and path.is_file():
        old = json.loads(path.read_text())
        if old.get("settings") != json.loads(json.dumps(settings)) or any(
                r["total_steps"] != total for r in old["runs"]) or any(
                old.get(k) not in (None, v) for k, v in extra.items()):
            raise SystemExit(f"--resume: {path} holds runs of other settings or budget")
        runs = [r for r in old["runs"] if r["seed"] in seeds]
    done = {(r["tool"], r["seed"]) for r in runs}
    todo = [(seed, tool) for seed in seeds for tool in tools if (tool, seed) not in done]
    for tool in dict.fromkeys(tool for _, tool in todo):
        run_one(tool, 99, warm_steps)
    width = max(map(len, tools)) + 1
    for seed, tool in todo:
        r = run_one(tool, seed, total)
        r.update(ended=time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                 load_average=round(os.getloadavg()[0], 1))
        ret = r["final_return"]  # None: not evaluated (a speed-only benchmark)
        print(f"{tool:{width}s} seed {seed}: return "
              f"{'-' if ret is None else f'{ret:.{digits}f}'}  sps {r['sps']:,.0f}", flush=True)
        runs.append(r)
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()} CPU, "
            "2 cores shared with other jobs, one torch thread per run",
            "command": command, "seeds": seeds, **extra, "settings": settings,
            "versions": versions(), "runs": runs}, indent=1))


def write_between_markers(doc: Path, begin: str, end: str, text: str) -> None:
    """Replace what lies between the markers `begin` and `end` of `doc` with `text`."""
    if not doc.is_file():
        return
    page = doc.read_text()
    if begin in page and end in page:
        head, rest = page.split(begin, 1)
        doc.write_text(head + begin + "\n" + text + "\n" + end + rest.split(end, 1)[1])


def plot(results: dict[str, Any], tools: Sequence[str], peer: str, title: str,
         path: Path) -> None:
    """Each seed's final greedy return and train SPS per tool (dots, the mean a bar), from a
    results.json of run_interleaved; the peer's mean SPS a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = results["runs"]
    shown = [t for t in tools if any(r["tool"] == t for r in runs)]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, key, label in ((axes[0], "final_return", "final greedy return"),
                           (axes[1], "sps", "train SPS (steps / s of learn())")):
        for i, tool in enumerate(shown):
            ys = [r[key] for r in runs if r["tool"] == tool]
            ax.bar(i, statistics.fmean(ys), color=f"C{i}", alpha=0.35, width=0.6)
            ax.plot([i] * len(ys), ys, "o", color=f"C{i}", ms=5)
        if key == "sps":
            ax.axhline(statistics.fmean(r["sps"] for r in runs if r["tool"] == peer),
                       color="0.3", ls="--", lw=0.8, label=f"{peer}, mean")
            ax.legend(fontsize=8)
        ax.set_xticks(range(len(shown)), shown, rotation=15, fontsize=8)
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
    total = runs[0]["total_steps"]
    fig.suptitle(f"{title}, {total:,} steps, seeds {results['seeds']} (dots: seeds; bars: "
                 f"means), {results['date']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
