"""Run claims and write DIR/REPORT.md with their figures."""

from __future__ import annotations

import math
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from trustrl.experiments.registry import (
    DIFFERS,
    REPRODUCED,
    WITHIN_SPREAD,
    Claim,
    Context,
    Result,
    load_all,
    seed_offset_from_env,
)
from trustrl.util.errors import TrustrlError


@dataclass
class Outcome:
    claim: Claim
    result: Result
    seconds: float


def select(only: list[str] | None) -> list[Claim]:
    registry = load_all()
    if not only:
        return list(registry.values())
    chosen = []
    for key in only:
        matches = [c for cid, c in registry.items() if cid == key or cid.startswith(key + ".")]
        if not matches:
            raise TrustrlError(f"no claim with id {key!r}; `trustrl reproduce --list` shows them")
        chosen += [c for c in matches if c not in chosen]
    return chosen


def check_out(out: Path) -> None:
    """The output folder can be made and written: checked before any claim runs (a file, a
    path under a file or a read-only folder is a one-line error, not a crash at the end)."""
    from trustrl.settings.config import check_writable_dir

    check_writable_dir(out, "--out")
    figures = out / "figures"
    if figures.exists() and not figures.is_dir():
        raise TrustrlError(f"--out {out}: {figures} is a file, not a folder")
    report = out / "REPORT.md"
    if report.is_dir():
        raise TrustrlError(f"--out {out}: {report} is a folder")


def run_claims(claims: list[Claim], out: Path, quick: bool, echo=print,
               seed_offset: int | None = None) -> list[Outcome]:
    """Run the claims in order. seed_offset (default: TRUSTRL_REPRODUCE_SEED_OFFSET, else 0)
    shifts every seed: a check that no verdict hinges on particular trajectories."""
    check_out(out)
    if seed_offset is None:
        seed_offset = seed_offset_from_env()
    ctx = Context(out=out / "figures", quick=quick, seed_offset=seed_offset)
    outcomes = []
    for c in claims:
        t0 = time.perf_counter()
        try:
            result = c.fn(ctx)
        except Exception as e:  # a crash is a claim we could not reproduce: say so, go on
            result = Result(notes="The computation raised an error:\n\n```\n"
                            + traceback.format_exc(limit=3) + "```\n")
            result.boolean("ran", "—", False, f"{type(e).__name__}: {e}", "must run")
        dt = time.perf_counter() - t0
        outcomes.append(Outcome(c, result, dt))
        echo(f"{result.verdict:>13}  {c.id}  ({dt:.1f} s)")
    return outcomes


def _cell(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _num(x: float, fmt: str = ".3g") -> str:
    return "∞" if x == float("inf") else "-∞" if x == -float("inf") else format(x, fmt)


def robustness_lines(outcomes: list[Outcome]) -> list[str]:
    """The section that says, for each check over training seeds, how far it is from flipping."""
    rows = [(o, ch) for o in outcomes for ch in o.result.checks if ch.robustness is not None]
    if not rows:
        return []
    lines = [
        "## How robust the training verdicts are",
        "",
        "A training run is one trajectory: another seed, or another machine's floating-point "
        "kernels (which make the same seed diverge after a few hundred updates), gives "
        "another. So every figure that comes from training runs is judged over several seeds: "
        "the median over the seeds must lie within the stated range widened by twice the "
        "seeds' standard deviation (the text's own figure is one run's). The margin is how "
        "far that median would have to move to flip the verdict (negative: how far outside it "
        "is), in the figure's units and in units of the seeds' sd. "
        "`TRUSTRL_REPRODUCE_SEED_OFFSET=N trustrl reproduce ...` shifts every seed by N; "
        "docs/reproduction/ROBUSTNESS.md gives these margins over several offsets.",
        "",
        "| id | check | seeds | per-seed values | median | sd | accepted | margin | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for o, ch in rows:
        rb = ch.robustness
        assert rb is not None
        consecutive = list(rb.seeds) == list(range(rb.seeds[0], rb.seeds[0] + len(rb.seeds)))
        seeds = (f"{rb.seeds[0]}..{rb.seeds[-1]}" if consecutive and len(rb.seeds) > 2
                 else ", ".join(map(str, rb.seeds)))
        msd = "" if math.isnan(rb.margin_sd) else f" ({rb.margin_sd:+.1f} sd)"
        lines.append(
            f"| {o.claim.id} | {_cell(ch.name)} | {seeds} | "
            f"{', '.join(_num(v) for v in rb.values)} | {_num(rb.point)} | {rb.sd:.3g} | "
            f"[{_num(rb.lo)}, {_num(rb.hi)}] | {_num(rb.margin, '+.3g')}{msd} | "
            f"{ch.verdict}{' (explained)' if ch.explanation else ''} |")
    return lines + [""]


def write_report(outcomes: list[Outcome], out: Path, quick: bool, seconds: float,
                 seed_offset: int | None = None) -> Path:
    if seed_offset is None:
        seed_offset = seed_offset_from_env()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TrustrlError(f"cannot make the folder {out}: {e.strerror or e}") from None
    counts = {v: sum(o.result.verdict == v for o in outcomes)
              for v in (REPRODUCED, WITHIN_SPREAD, DIFFERS)}
    explained = sum(o.result.verdict == DIFFERS and not o.result.unexplained for o in outcomes)
    lines = [
        "# trustrl reproduce: the seeds' numbers, recomputed",
        "",
        f"Mode: {'quick (reduced seed counts)' if quick else 'full'}; {len(outcomes)} claims in "
        f"{seconds / 60:.1f} min. Generated by "
        f"`{f'TRUSTRL_REPRODUCE_SEED_OFFSET={seed_offset} ' if seed_offset else ''}"
        f"trustrl reproduce{' --quick' if quick else ''} --out {out}`"
        + (f" (every seed shifted by {seed_offset}: a robustness check)." if seed_offset
           else "."),
        "",
        f"**{counts[REPRODUCED]} reproduced, {counts[WITHIN_SPREAD]} within spread, "
        f"{counts[DIFFERS]} differ** ({explained} of them with every difference explained in "
        "its section; a check that differs is marked †). Sources: 000 = the chapter "
        "(Trust regions: TRPO and PPO), 002 = the blog post (PPO on Pendulum), 003 = the "
        "lesson. Training runs of the claims are kept under runs/ next to this file (not "
        "committed).",
        "",
        "| id | source | check | stated | ours | tolerance | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        for ch in o.result.checks:
            lines.append(f"| [{o.claim.id}](#{o.claim.id.replace('.', '')}) | "
                         f"{_cell(o.claim.source)} | {_cell(ch.name)} | {_cell(ch.stated)} | "
                         f"{_cell(ch.ours)} | {_cell(ch.tolerance)} | {ch.verdict}"
                         f"{' †' if ch.verdict == DIFFERS else ''} |")
    lines += [""] + robustness_lines(outcomes)
    for o in outcomes:
        lines += ["", f"## {o.claim.id}", "",
                  f"**{o.claim.title}** ({o.claim.source}). Verdict: **{o.result.verdict}** "
                  f"({o.seconds:.1f} s).", ""]
        if o.result.notes:
            lines += [o.result.notes.strip(), ""]
        diffs = [c for c in o.result.checks if c.verdict == DIFFERS]
        if diffs:
            lines += ["Where it differs:", ""]
            lines += [f"- **{c.name}**: stated {c.stated}, ours {c.ours}. "
                      + (c.explanation or "*No explanation yet: this is an open difference.*")
                      for c in diffs]
            lines.append("")
        for fig in o.result.figures:
            lines += [f"![{fig}](figures/{fig})", ""]
    path = out / "REPORT.md"
    path.write_text("\n".join(lines) + "\n")
    return path
