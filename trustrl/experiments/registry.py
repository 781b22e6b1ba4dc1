"""Claims of the seed texts, each recomputed by trustrl and compared with the number stated.

A claim is a function registered with @claim; it returns the checks it made (stated figure,
our figure, the tolerance and why it was chosen, a verdict), notes and figures. Tolerances are
fixed in the code before a result is looked at, and justified by their kind:

- exact: arithmetic that the text rounds; equal to the printed precision -> "reproduced";
- approx: a deterministic computation the text itself calls approximate ("about 107") ->
  "reproduced" when within the stated looseness;
- spread: a stochastic figure (Monte-Carlo or run-to-run), compared with a tolerance derived
  from the standard error or the seed spread -> "within spread";
- over_seeds: a figure of training runs, one value per seed. The text's figure comes from one
  run, so the run-to-run spread is the tolerance: the median over our seeds must lie within
  the stated range widened by 2 sd of the seeds' values -> "within spread". Such a verdict does
  not hinge on one seed's trajectory (another machine's float kernels give other trajectories,
  as another seed does); each such check records its seeds, their values and its margin, and
  the report prints them.

Anything outside its tolerance is "differs", reported with our explanation, never tuned away.
An explanation (Result.explain) does not change the verdict; it records why we think the text
and our number disagree (a rounding slip in the text, a setting the text does not give, two
seed texts that disagree). `trustrl reproduce` exits non-zero for any unexplained difference.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from trustrl.util.errors import TrustrlError

SEED_OFFSET_ENV = "TRUSTRL_REPRODUCE_SEED_OFFSET"
REPRODUCED, WITHIN_SPREAD, DIFFERS = "reproduced", "within spread", "differs"


@dataclass
class Check:
    name: str
    stated: str  # the figure as the text states it
    ours: str  # our figure, formatted
    tolerance: str  # the tolerance and its justification
    verdict: str
    explanation: str = ""  # why it differs, when it does and we know why
    robustness: Robustness | None = None  # for a check over seeds: values, spread, margin


@dataclass(frozen=True)
class Robustness:
    """How far a verdict over seeds is from flipping.

    values: the per-seed figures (in the order of seeds); point: the figure judged (their
    median); sd: their standard deviation (0 with one seed); lo, hi: the accepted range, the
    stated one widened by 2 sd. margin = min(point - lo, hi - point): positive inside the range,
    negative outside; |margin| is how far the median would have to move to flip the verdict.
    """

    seeds: tuple[int, ...]
    values: tuple[float, ...]
    point: float
    sd: float
    lo: float
    hi: float

    @property
    def margin(self) -> float:
        return min(self.point - self.lo, self.hi - self.point)

    @property
    def margin_sd(self) -> float:
        """The margin in units of the seeds' sd (nan with one seed or no spread)."""
        return self.margin / self.sd if self.sd > 0 and math.isfinite(self.sd) else math.nan


def seed_offset_from_env() -> int:
    """TRUSTRL_REPRODUCE_SEED_OFFSET: shift every seed of every claim by this much (default 0).

    A robustness check: another machine's floating-point kernels turn a training run into a
    different trajectory, as another seed does, so a verdict that survives other seeds survives
    other machines."""
    raw = os.environ.get(SEED_OFFSET_ENV, "").strip()
    if not raw:
        return 0
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0 or value > 100_000:
        raise TrustrlError(f"{SEED_OFFSET_ENV} must be an integer from 0 to 100000, got {raw!r}")
    return value


@dataclass
class Context:
    """What a claim may use: quick mode, where figures go, and a seed helper.

    seed_offset shifts every seed that seeds() hands out (TRUSTRL_REPRODUCE_SEED_OFFSET)."""

    out: Path
    quick: bool = False
    seed_offset: int = 0

    def seeds(self, full: int, quick: int) -> list[int]:
        n = quick if self.quick else full
        return list(range(self.seed_offset, self.seed_offset + n))

    def figure(self, name: str) -> Path:
        self.out.mkdir(parents=True, exist_ok=True)
        return self.out / name


@dataclass
class Result:
    checks: list[Check] = field(default_factory=list)
    notes: str = ""
    figures: list[str] = field(default_factory=list)  # file names under Context.out

    # --- check builders ----------------------------------------------------------------------
    def exact(self, name: str, stated: float, ours: float, decimals: int,
              why: str = "printed precision") -> bool:
        """Equal to the text's rounding: |ours - stated| <= half a unit of the last digit."""
        tol = 0.5 * 10 ** (-decimals) + 1e-12
        ok = math.isfinite(ours) and abs(ours - stated) <= tol
        self.checks.append(Check(name, f"{stated:.{decimals}f}", f"{ours:.{decimals + 2}f}",
                                 f"±{0.5 * 10 ** (-decimals):g} ({why})",
                                 REPRODUCED if ok else DIFFERS))
        return ok

    def approx(self, name: str, stated: float | str, ours: float, lo: float, hi: float,
               why: str, fmt: str = ".3g") -> bool:
        """A deterministic figure the text gives loosely; accepted range [lo, hi]."""
        ok = lo <= ours <= hi
        self.checks.append(Check(name, str(stated), format(ours, fmt),
                                 f"[{lo:g}, {hi:g}] ({why})", REPRODUCED if ok else DIFFERS))
        return ok

    def spread(self, name: str, stated: float | str, ours: float, lo: float, hi: float,
               why: str, fmt: str = ".3g") -> bool:
        """A stochastic figure; accepted range [lo, hi] from its standard error or spread."""
        ok = lo <= ours <= hi
        self.checks.append(Check(name, str(stated), format(ours, fmt),
                                 f"[{lo:g}, {hi:g}] ({why})", WITHIN_SPREAD if ok else DIFFERS))
        return ok

    def over_seeds(self, name: str, stated: float | str, values: Sequence[float],
                   seeds: Sequence[int], lo: float, hi: float, why: str, fmt: str = ".3g"
                   ) -> bool:
        """A figure of training runs, one value per seed (the text's came from one run).

        The median over seeds must lie in [lo - 2 sd, hi + 2 sd], sd being the seeds' run-to-run
        standard deviation (infinite values, e.g. "never reached", count in the median but not
        in the sd); with one seed, in [lo, hi]. Records the values, spread and margin."""
        vals = [float(v) for v in values]
        if len(vals) != len(seeds) or not vals:
            raise ValueError("over_seeds needs one value per seed")
        point = float(statistics.median(vals))
        finite = [v for v in vals if math.isfinite(v)]
        sd = float(statistics.stdev(finite)) if len(finite) > 1 else 0.0
        rb = Robustness(tuple(seeds), tuple(vals), point, sd, lo - 2 * sd, hi + 2 * sd)
        ok = rb.lo <= point <= rb.hi
        n = len(vals)
        spread = (f"median of {n} seeds; stated range ± 2 sd of the seeds (sd {sd:{fmt}})"
                  if n > 1 else "one seed: the stated range only")
        self.checks.append(Check(name, str(stated), format(point, fmt),
                                 f"[{rb.lo:{fmt}}, {rb.hi:{fmt}}] ({why}; {spread})",
                                 WITHIN_SPREAD if ok else DIFFERS, robustness=rb))
        return ok

    def boolean(self, name: str, stated: str, ours: bool, ours_text: str, why: str,
                stochastic: bool = False) -> bool:
        """A qualitative statement ("the curves are identical") checked as true or false."""
        good = WITHIN_SPREAD if stochastic else REPRODUCED
        self.checks.append(Check(name, stated, ours_text, why, good if ours else DIFFERS))
        return ours

    def explain(self, reason: str) -> None:
        """Attach our explanation to the last check, if it differs (a no-op otherwise)."""
        if self.checks and self.checks[-1].verdict == DIFFERS:
            self.checks[-1].explanation = reason

    @property
    def unexplained(self) -> list[Check]:
        return [c for c in self.checks if c.verdict == DIFFERS and not c.explanation]

    @property
    def verdict(self) -> str:
        verdicts = {c.verdict for c in self.checks}
        if DIFFERS in verdicts:
            return DIFFERS
        return WITHIN_SPREAD if WITHIN_SPREAD in verdicts else REPRODUCED


@dataclass
class Claim:
    id: str
    source: str  # seed file and section, e.g. "000 · Why one big step can ruin everything"
    title: str
    cost: str  # "cheap" (deterministic, seconds), "sim" (Monte-Carlo), "train" (RL runs)
    fn: Callable[[Context], Result]


REGISTRY: dict[str, Claim] = {}


def claim(id: str, source: str, title: str, cost: str = "cheap"
          ) -> Callable[[Callable[[Context], Result]], Callable[[Context], Result]]:
    def register(fn: Callable[[Context], Result]) -> Callable[[Context], Result]:
        if id in REGISTRY:
            raise ValueError(f"duplicate claim id {id}")
        REGISTRY[id] = Claim(id, source, title, cost, fn)
        return fn

    return register


def load_all() -> dict[str, Claim]:
    """Import every claims module (registration happens at import)."""
    import importlib
    import pkgutil

    import trustrl.experiments as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        if mod.name.startswith("claims_"):
            importlib.import_module(f"trustrl.experiments.{mod.name}")
    return REGISTRY
