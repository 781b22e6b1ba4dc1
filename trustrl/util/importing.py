"""Objects named by an import path 'module:attr[.attr]': a user's env, wrapper or network.

One resolver for every place a config, a flag or a saved file names code: the module is
imported with the current folder searched after the installed packages (as `python -m` would
find a module there, without letting a stray file shadow one trustrl needs), and anything that
goes wrong is one line of the caller's error class. The standard library is refused: a
config.json or agent file that names `os:system` is data, never a way to run it.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from typing import Any

from trustrl.util.errors import TrustrlError

IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
CODE_NAME = re.compile(r"^\s*[A-Za-z_][\w.]*\s*:")
"""A string that names a module before a colon: an import path 'module:Name', and an env id
'module:Env-v0' too (Gymnasium imports the module to find the id)."""
NOT_CODE_KEYS = frozenset({"device", "preset", "preset_reason"})
"""Keys whose values have a colon but never name a module ('cuda:0', 'chapter:CartPole-v1',
'auto: chapter:CartPole-v1, ...': the preset's record and the sentence saying why)."""


def named_code(data: Any, limit: int = 100) -> list[str]:
    """Every string in nested data (dicts, lists, tuples) that names a module ('module:...'):
    what a file from elsewhere would make trustrl or Gymnasium import. Dict keys listed in
    NOT_CODE_KEYS are skipped; tensors, arrays and bytes are data. At most `limit` names."""
    found: list[str] = []
    stack: list[Any] = [data]
    while stack and len(found) < limit:
        x = stack.pop()
        if isinstance(x, str):
            if CODE_NAME.match(x) and x not in found:
                found.append(x)
        elif isinstance(x, dict):
            stack.extend(v for k, v in x.items() if k not in NOT_CODE_KEYS)
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
    return found


def import_path(obj: Any) -> str | None:
    """'module:qualname' of a class or function that imports back to the same object, else
    None (a lambda, a local function, an object of the script run as __main__)."""
    module, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qual, str) or module == "__main__" \
            or "<" in qual:
        return None
    try:
        found: Any = importlib.import_module(module)
        for part in qual.split("."):
            found = getattr(found, part)
    except Exception:  # noqa: BLE001 - anything that does not import back
        return None
    return f"{module}:{qual}" if found is obj else None


def _first_line(e: BaseException) -> str:
    msg = (str(e).splitlines() or [""])[0].strip()
    return f"{type(e).__name__}: {msg[:160]}" if msg else type(e).__name__


def resolve(path: Any, what: str, error: type[TrustrlError]) -> Any:
    """The callable at `path`, or `error` with one line naming `what` and the path."""
    shown = repr(path) if len(repr(path)) <= 80 else repr(path)[:77] + "..."
    if not isinstance(path, str) or not IMPORT_PATH.match(path.strip()):
        raise error(f"{what} {shown} is not an import path 'module:Name'")
    module, _, attrs = path.strip().partition(":")
    if module.split(".")[0] in sys.stdlib_module_names:
        raise error(f"{what} {path!r} names the standard library, not code of yours")
    try:
        cwd = os.getcwd()
    except OSError:  # the folder was removed
        cwd = ""
    added = bool(cwd) and "" not in sys.path and cwd not in sys.path
    if added:
        sys.path.append(cwd)
    try:
        obj: Any = importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - ImportError, or an error inside the module
        raise error(f"{what} {path!r}: cannot import module {module!r} ({_first_line(e)})"
                    ) from None
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)
    for part in attrs.split("."):
        if not hasattr(obj, part):
            raise error(f"{what} {path!r}: module {module!r} has no attribute {part!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise error(f"{what} {path!r} is a {type(obj).__name__}, not a class or function")
    return obj
