"""Time whole processes from outside, launch to exit, optionally paired A B A B against a baseline.

    python benchmarks/paired_time.py [-n 5] [--warmup 1] [--vs "COMMAND_B"] -- COMMAND [ARG ...]

Standard library only. COMMAND (A) runs RUNS times after WARMUP uncounted runs; with --vs, A and
B (one string, split as a shell splits words) alternate, warm-up included, and the ratio A/B is
taken pair by pair, so that a drift of the machine's speed moves both sides of a pair alike.
Per run: wall seconds (a monotonic clock around start and reap), CPU seconds (user + system of
the finished process and the children it waited for, the kernel's accounting) and peak RSS
(the largest process; it cannot read below the size of the forked launcher, about 15 MiB).
Every figure is printed as median (min-max); quote the median. The commands' output is
discarded (--show keeps it). Exit status 1 if a counted run failed, 2 if one cannot start.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time


def run_once(cmd: list[str], show: bool) -> dict[str, float]:
    out = None if show else subprocess.DEVNULL
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    rss_kib = ru.ru_maxrss if sys.platform != "darwin" else ru.ru_maxrss / 1024
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "peak_mib": rss_kib / 1024,
            "rc": proc.returncode}


def summary(xs: list[float], fmt: str = "{:.2f}") -> str:
    return (f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}-"
            f"{fmt.format(max(xs))})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="paired_time.py", description=__doc__.splitlines()[0])
    p.add_argument("-n", "--runs", type=int, default=5, help="counted runs (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="uncounted runs first (default 1)")
    p.add_argument("--vs", metavar="COMMAND_B", help="baseline command, run in turn with A")
    p.add_argument("--show", action="store_true", help="let the commands print")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG ...]")
    a = p.parse_args(argv)
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        p.error("give the command to time after --")
    if a.runs < 1 or a.warmup < 0:
        p.error("--runs must be >= 1 and --warmup >= 0")
    cmds = {"A": cmd}
    if a.vs is not None:
        cmds["B"] = shlex.split(a.vs)
        if not cmds["B"]:
            p.error("--vs: empty command")
    for name, c in cmds.items():
        print(f"{name}: {shlex.join(c)}")
    results: dict[str, list[dict[str, float]]] = {n: [] for n in cmds}
    failed = False
    for i in range(a.warmup + a.runs):
        for name, c in cmds.items():
            try:
                r = run_once(c, a.show)
            except OSError as e:
                print(f"paired_time.py: {name} cannot start: {e.strerror}", file=sys.stderr)
                return 2
            if i >= a.warmup:
                results[name].append(r)
                failed |= r["rc"] != 0
                print(f"run {i - a.warmup + 1} {name}: wall {r['wall']:.2f} s, cpu "
                      f"{r['cpu']:.2f} s, peak {r['peak_mib']:.0f} MiB, exit {r['rc']:.0f}",
                      flush=True)
    for name, rs in results.items():
        print(f"{name}: wall s {summary([r['wall'] for r in rs])}, cpu s "
              f"{summary([r['cpu'] for r in rs])}, peak MiB "
              f"{summary([r['peak_mib'] for r in rs], '{:.0f}')}  [{len(rs)} runs]")
    if "B" in results:
        for key in ("wall", "cpu"):
            ratios = [ra[key] / rb[key] for ra, rb in zip(results["A"], results["B"],
                                                          strict=True)
                      if rb[key] > 0]
            if ratios:
                print(f"A/B {key}: {summary(ratios)} (pair by pair)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
