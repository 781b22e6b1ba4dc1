"""How robust the training verdicts of `trustrl reproduce --quick` are.

Another machine's floating-point kernels turn a training run into another trajectory, as another
seed does. This runs the training claims at quick scale for several seed offsets (offset k:
CartPole seeds k+1..k+3, blog Pendulum seeds k..k+2, as TRUSTRL_REPRODUCE_SEED_OFFSET=k would),
sharing the runs between offsets (a seed is trained once), and writes per check its verdict and
margin at each offset:

    python -m trustrl.experiments.robustness --offsets 0 1 2 3 4 --out ROBUSTNESS.md
"""

from __future__ import annotations

import argparse
import math
import pickle
import time
from pathlib import Path

from trustrl.experiments.registry import DIFFERS, Context, Result, load_all

TRAINING = ("000.lab", "000.diagnostics-table", "000.ex9.8", "002.pendulum")


def sweep(offsets: list[int], out: Path, ids: tuple[str, ...] = TRAINING, echo=print,
          after=None, cache: Path | None = None
          ) -> tuple[dict[int, dict[str, Result]], dict[int, float]]:
    """The claims ids at quick scale for each offset, runs shared; results and seconds.
    after(results, seconds) is called after each offset (to write what is done so far).
    cache: a pickle of the runs, read if it exists and written after each offset, so that the
    checks can be judged again without training again."""
    registry = load_all()
    shared: dict[str, dict] = {"_cartpole_runs": {}, "_blog_runs": {}}
    if cache is not None and cache.is_file():
        with cache.open("rb") as f:
            shared = pickle.load(f)  # our own file, written below
    results: dict[int, dict[str, Result]] = {}
    seconds: dict[int, float] = {}
    for off in offsets:
        ctx = Context(out=out / f"offset{off}", quick=True, seed_offset=off)
        ctx.__dict__.update(shared)  # the same dicts: runs of earlier offsets are reused
        t0 = time.perf_counter()
        results[off] = {cid: registry[cid].fn(ctx) for cid in ids}
        seconds[off] = time.perf_counter() - t0
        echo(f"offset {off}: {seconds[off]:.0f} s, "
             + ", ".join(f"{cid} {r.verdict}" for cid, r in results[off].items()))
        if cache is not None:
            with cache.open("wb") as f:
                pickle.dump(shared, f)
        if after is not None:
            after(results, seconds)
    return results, seconds


def _mark(verdict: str, explained: bool) -> str:
    return "differs (explained)" if verdict == DIFFERS and explained else \
        "**differs**" if verdict == DIFFERS else "within"


def markdown(results: dict[int, dict[str, Result]], seconds: dict[int, float]) -> str:
    offsets = list(results)
    first = results[offsets[0]]
    lines = [
        "| claim | check | " + " | ".join(f"offset {o}" for o in offsets)
        + " | verdicts | smallest margin |",
        "|---|---|" + "---|" * len(offsets) + "---|---|",
    ]
    unexplained = 0
    for cid, res in first.items():
        for i, ch in enumerate(res.checks):
            cells, verdicts, margins = [], set(), []
            for o in offsets:
                c = results[o][cid].checks[i]
                rb = c.robustness
                verdicts.add(_mark(c.verdict, bool(c.explanation)))
                unexplained += c.verdict == DIFFERS and not c.explanation
                if rb is None:
                    cells.append(f"{c.ours} ({_mark(c.verdict, bool(c.explanation))})")
                    continue
                # signed so that positive means "within", negative "differs"
                m = rb.margin
                msd = "" if math.isnan(rb.margin_sd) else f" ({rb.margin_sd:+.1f} sd)"
                cells.append(f"{c.ours}: {m:+.3g}{msd}")
                # nearest to flipping: by the margin in sd where there is a spread
                near = abs(rb.margin_sd) if not math.isnan(rb.margin_sd) else abs(m) * 1e6
                margins.append((near, m, msd))
            low = min(margins) if margins else None
            lines.append(f"| {cid} | {ch.name.replace('|', '/')} | " + " | ".join(cells)
                         + f" | {' / '.join(sorted(verdicts))} | "
                         + (f"{low[1]:+.3g}{low[2]}" if low else "") + " |")
    head = [
        f"Offsets {offsets} at quick scale; seconds per offset (runs of earlier offsets "
        "reused, so only the first is a whole quick run): "
        + ", ".join(f"{o}: {s:.0f}" for o, s in seconds.items())
        + f". Unexplained differences: {unexplained}.",
        "",
        "Each cell: our figure (the median over the offset's seeds) and its margin, the "
        "distance to the nearest edge of the accepted range (positive: within, negative: "
        "outside by that much), in the figure's units and in the seeds' sd. 'Smallest "
        "margin' is the one nearest to flipping.",
        "",
    ]
    return "\n".join(head + lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--offsets", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--out", default="ROBUSTNESS.md", help="markdown file to write")
    ap.add_argument("--only", nargs="+", default=list(TRAINING), help="claim ids")
    ap.add_argument("--cache", help="pickle of the runs: read if present, written after each "
                    "offset (only ever read a file this command wrote; runs are keyed by their "
                    "runs folder, so keep the same --out)")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    out = Path(args.out)
    sweep(args.offsets, out.parent / (out.stem + "_runs"), tuple(args.only),
          echo=lambda s: print(s, flush=True),
          after=lambda results, seconds: out.write_text(markdown(results, seconds)),
          cache=Path(args.cache) if args.cache else None)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
