"""Strict parsing of request parameters: every bad value becomes a one-line HTTP 400 message.

Pure functions, standard library only. A parameter spec names the type and the closed range;
unknown, repeated or malformed parameters are refused rather than ignored, so a typo in a URL
never silently falls back to a default.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl


class BadRequest(Exception):
    """A request parameter that cannot be used (HTTP 400). The message is one line."""


class NotFound(Exception):
    """A path that does not name something we serve (HTTP 404)."""


class Busy(Exception):
    """The server is at its bound on concurrent work (HTTP 503, try again). One line."""


_INT = re.compile(r"[+-]?[0-9]{1,12}")
_FLOAT = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]{1,3})?")


@dataclass(frozen=True)
class Param:
    """One numeric parameter: kind 'int' or 'float', accepted range [lo, hi], default (None:
    required)."""

    kind: str
    lo: float
    hi: float
    default: float | None = None

    def describe(self) -> str:
        what = "an integer" if self.kind == "int" else "a number"
        return f"{what} from {_num(self.lo)} to {_num(self.hi)}"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _short(raw: str) -> str:
    return repr(raw if len(raw) <= 40 else raw[:37] + "...")


def parse_value(name: str, raw: str, p: Param) -> int | float:
    """The value of one parameter, or BadRequest naming it, the accepted range and what came."""
    raw_s = raw.strip()
    pattern = _INT if p.kind == "int" else _FLOAT
    if not pattern.fullmatch(raw_s):
        raise BadRequest(f"{name} must be {p.describe()}, got {_short(raw)}")
    value: int | float = int(raw_s) if p.kind == "int" else float(raw_s)
    if not math.isfinite(value) or not (p.lo <= value <= p.hi):
        raise BadRequest(f"{name} must be {p.describe()}, got {_short(raw)}")
    return value


def parse_query(query: str, spec: dict[str, Param]) -> dict[str, int | float]:
    """Parse a URL query string against spec: every key known, none repeated, all in range."""
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise BadRequest(f"malformed query string {_short(query)}") from None
    seen: dict[str, str] = {}
    for key, raw in pairs:
        if key not in spec:
            known = ", ".join(spec) or "none"
            raise BadRequest(f"unknown parameter {_short(key)} (accepted: {known})")
        if key in seen:
            raise BadRequest(f"parameter {key!r} given more than once")
        seen[key] = raw
    out: dict[str, int | float] = {}
    for key, p in spec.items():
        if key in seen:
            out[key] = parse_value(key, seen[key], p)
        elif p.default is None:
            raise BadRequest(f"missing parameter {key!r} ({p.describe()})")
        else:
            out[key] = int(p.default) if p.kind == "int" else float(p.default)
    return out
