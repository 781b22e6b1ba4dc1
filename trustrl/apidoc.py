"""The API reference (docs/api.md), generated from the docstrings of `trustrl.__all__`.

    python -m trustrl.apidoc > docs/api.md

Functions and classes get their signature and the first paragraph of their docstring (classes
also their public methods); config classes list every field with its type, default and the
docstring under it (trustrl.config.field_docs). tests/test_apidoc.py checks that the committed
docs/api.md is what this writes, so the page stays true to the code.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from typing import Any

import trustrl
from trustrl.config import CONFIGS, field_docs

HEADER = """# API reference

Generated from the docstrings by `python -m trustrl.apidoc > docs/api.md` (a test checks that
this file is up to date): every name of `trustrl.__all__`, with its signature and the first
paragraph of its docstring. Config classes list every field with its type, default and meaning;
the same keys are the `--set key=value` and `--config` keys of `trustrl train` (`trustrl train
--help` prints them too).

```python
import trustrl

cfg = trustrl.make_config("ppo", env_id="CartPole-v1", sets={"total_steps": 50_000})
result = trustrl.train(cfg)
returns = trustrl.evaluate(result.agent, "CartPole-v1", episodes=10)
```
"""


def first_paragraph(doc: str | None) -> str:
    """The first paragraph of a docstring, joined into one line ("" when there is none)."""
    if not doc:
        return ""
    para = inspect.cleandoc(doc).split("\n\n")[0]
    return " ".join(para.split())


def _own_doc(obj: Any) -> str:
    doc = obj.__doc__ if "__doc__" in vars(obj) or not inspect.isclass(obj) else None
    if inspect.isclass(obj) and dataclasses.is_dataclass(obj) and doc and doc.startswith(
            obj.__name__ + "("):
        return ""  # the signature dataclasses writes when a class has no docstring
    return first_paragraph(doc)


def _default(value: Any) -> str:
    text = repr(value)
    return "..." if " at 0x" in text else text


def signature(obj: Any, name: str) -> str:
    """`name(param: type = default, ...) -> type` with the annotations as written in the source
    (no machine-dependent text: an object's address becomes ...)."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return name
    parts, star = [], False
    for p in sig.parameters.values():
        if p.kind is p.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        text = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "") + p.name
        star = star or p.kind is p.VAR_POSITIONAL
        if p.annotation is not p.empty:
            text += f": {_annotation(p.annotation)}"
        if p.default is not p.empty:
            text += f" = {_default(p.default)}"
        parts.append(text)
    ret = "" if sig.return_annotation is sig.empty else f" -> {_annotation(sig.return_annotation)}"
    return f"{name}({', '.join(parts)}){ret}"


def _annotation(a: Any) -> str:
    return a if isinstance(a, str) else inspect.formatannotation(a)


def _config_section(name: str, cls: type) -> list[str]:
    algos = [a for a, c in CONFIGS.items() if c is cls]
    lines = [f"### {name}", ""]
    if algos:
        lines += [f"Algorithm {', '.join(f'`{a}`' for a in algos)} "
                  f"(`trustrl train {algos[0]}`, `make_config({algos[0]!r})`).", ""]
    base = next((b for b in cls.__bases__ if dataclasses.is_dataclass(b)), None)
    doc = _own_doc(cls)
    if doc:
        lines += [doc, ""]
    docs = field_docs(cls)
    own = {f.name for f in dataclasses.fields(cls)} - (
        {f.name for f in dataclasses.fields(base)} if base else set())
    changed = [f for f in dataclasses.fields(cls) if f.name not in own and base is not None
               and _field_default(f) != _field_default(
                   next(g for g in dataclasses.fields(base) if g.name == f.name))]
    rows = [f for f in dataclasses.fields(cls) if f.name in own or f in changed]
    if base is not None:
        lines += [f"Every field of `{base.__name__}`" + (", and:" if rows else "."), ""]
    if not rows:
        return lines
    lines += ["| field | type | default | meaning |", "|---|---|---|---|"]
    for f in rows:
        meaning = docs.get(f.name, "")
        if f in changed and base is not None:
            meaning = f"(default changed from `{base.__name__}`) {meaning}"
        cells = [f"`{f.name}`", f"`{_annotation(f.type)}`", f"`{_field_default(f)}`", meaning]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return lines + [""]


def _field_default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return _default(f.default)
    if f.default_factory is not dataclasses.MISSING:
        return _default(f.default_factory())
    return "(required)"


def _section(name: str, obj: Any) -> list[str]:
    if inspect.isclass(obj) and issubclass(obj, trustrl.RunConfig):
        return _config_section(name, obj)
    if inspect.isclass(obj) and issubclass(obj, BaseException):
        doc = _own_doc(obj)
        return [f"### {name}", "", f"Subclass of `{obj.__mro__[1].__name__}`." + (
            f" {doc}" if doc else ""), ""]
    lines = [f"### {name}", "", "```python", signature(obj, name), "```", ""]
    doc = _own_doc(obj)
    if doc:
        lines += [doc, ""]
    if inspect.isclass(obj):
        for meth_name, meth in vars(obj).items():
            if meth_name.startswith("_") or not (
                    inspect.isfunction(meth) or isinstance(meth, (classmethod, staticmethod))):
                continue
            fn = meth.__func__ if isinstance(meth, (classmethod, staticmethod)) else meth
            sig = signature(fn, f"{name}.{meth_name}")
            if not isinstance(meth, staticmethod):
                sig = sig.replace("(self, ", "(", 1).replace("(self)", "()", 1)
                sig = sig.replace("(cls, ", "(", 1).replace("(cls)", "()", 1)
            text = first_paragraph(fn.__doc__)
            lines.append(f"- `{sig}`" + (f": {text}" if text else ""))
        if lines[-1] != "":
            lines.append("")
    return lines


def render() -> str:
    """docs/api.md as text: the header, then a section per name of trustrl.__all__ (functions,
    classes, config classes, errors), in that order."""
    groups: dict[str, list[str]] = {"Functions": [], "Classes": [], "Configs": [], "Errors": []}
    for name in trustrl.__all__:
        obj = getattr(trustrl, name)
        if not inspect.isclass(obj):
            groups["Functions"].append(name)
        elif issubclass(obj, BaseException):
            groups["Errors"].append(name)
        elif issubclass(obj, trustrl.RunConfig):
            groups["Configs"].append(name)
        else:
            groups["Classes"].append(name)
    out = [HEADER]
    for title, names in groups.items():
        if names:
            out += [f"## {title}", ""]
            for name in names:
                out += _section(name, getattr(trustrl, name))
    return "\n".join(out).rstrip("\n") + "\n"


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
