"""Functions written over free global names, given values for those names.

`envs/classic.py` writes the classic-control dynamics, and `losses.py` PPO's loss terms, over a
free global array namespace `o`; the same source then runs over NumPy, torch, or NumPy under
Numba (trustrl.compute.compiled.xp). `rebound` makes the copies: each function's code with a new
globals dict, the source module's globals plus the names given, held by a module registered in
sys.modules under a stable, dot-free name (Numba's disk cache records the name and imports it
when it loads compiled code; torch.compile's guards reach a function's globals through its
module).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def rebound(name: str, doc: str, source: Mapping[str, Any], functions: Iterable[Any],
            names: Mapping[str, Any], wrap: Callable[[Any], Any] | None = None
            ) -> types.ModuleType:
    """A module `name` whose globals are `source`'s (a module's globals) with `names` set, and
    which holds a copy of each of `functions` over those globals (passed through `wrap`, e.g.
    numba.njit, when given), under the function's own name. Where a module `name` exists
    already, the copies join it (its globals kept, `names` set)."""
    module = sys.modules.get(name)
    if module is None:
        module = types.ModuleType(name, doc)
        ns = module.__dict__
        ns.update((k, v) for k, v in source.items() if not k.startswith("__"))
        ns["__builtins__"] = __builtins__
    ns = module.__dict__
    ns.update(names)
    for f in functions:
        g = types.FunctionType(f.__code__, ns, f.__name__, f.__defaults__, f.__closure__)
        g.__doc__, g.__qualname__ = f.__doc__, f.__qualname__
        ns[f.__name__] = g if wrap is None else wrap(g)
    sys.modules[name] = module
    return module


class Namespace(types.ModuleType):
    """An array namespace: `base`'s attributes (a module such as numpy), with `extra` on top
    (the torch names a source uses that `base` spells differently, e.g. ``clamp``)."""

    def __init__(self, name: str, base: Any, **extra: Any):
        super().__init__(name)
        self.__dict__.update(extra)
        self._base = base

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)
