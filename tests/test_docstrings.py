"""Every public name documents itself and its arguments (issue 53, point 5).

Walks `trustrl.__all__` (and trustrl.training.callbacks.Info, which callbacks receive): each
function,
class and public method has a docstring, and each of its parameters is named in the
docstring's Google-style `Args:` section (griffe's parser, the one mkdocstrings renders
docs/api.md with). A config class's fields count as documented by the docstring under each
field (`trustrl.settings.config.field_docs`, what `trustrl train --help` prints).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

import trustrl
from trustrl.settings.config import field_docs

griffe = pytest.importorskip("griffe", reason="griffe comes with the docs tools (test extra)")


def _documented(doc: str) -> set[str]:
    """The parameter names an `Args:` section of `doc` documents (`*args` as `args`)."""
    parsed = griffe.Docstring(inspect.cleandoc(doc), parser="google").parse()
    return {p.name.lstrip("*") for section in parsed
            if section.kind in (griffe.DocstringSectionKind.parameters,
                                griffe.DocstringSectionKind.other_parameters)
            for p in section.value}


def _own_doc(obj: Any) -> str:
    """The docstring written on obj itself: not inherited, not the one dataclasses makes up."""
    doc = vars(obj).get("__doc__") if inspect.isclass(obj) else obj.__doc__
    if inspect.isclass(obj) and dataclasses.is_dataclass(obj) and doc \
            and doc.startswith(obj.__name__ + "("):
        return ""
    return (doc or "").strip()


def _parameters(fn: Any) -> list[str]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    return [p for p in sig.parameters if p not in ("self", "cls")]


def problems(name: str, obj: Any) -> list[str]:
    """What `name` (a public function or class) leaves undocumented, one line each."""
    out: list[str] = []
    doc = _own_doc(obj)
    if not doc:
        return [f"{name}: no docstring"]
    if not inspect.isclass(obj):
        missing = [p for p in _parameters(obj) if p not in _documented(doc)]
        return [f"{name}: argument {p!r} not in its Args section" for p in missing]
    if issubclass(obj, BaseException):
        return out  # errors take their one-line message
    if dataclasses.is_dataclass(obj):
        fields = field_docs(obj)
        out += [f"{name}: field {f.name!r} has no docstring under it"
                for f in dataclasses.fields(obj) if not fields.get(f.name)]
    elif "__init__" in vars(obj):
        init_doc = _documented(doc) | _documented(vars(obj)["__init__"].__doc__ or "")
        out += [f"{name}: argument {p!r} not in its Args section"
                for p in _parameters(obj.__init__) if p not in init_doc]
    for meth_name, meth in vars(obj).items():
        if meth_name.startswith("_"):
            continue
        fn = meth.__func__ if isinstance(meth, (classmethod, staticmethod)) else meth
        if isinstance(meth, property):
            fn = meth.fget
        elif not inspect.isfunction(fn):
            continue
        # an override is documented by the method it overrides (inspect.getdoc's rule)
        doc = inspect.getdoc(getattr(obj, meth_name)) if not isinstance(meth, property) \
            else fn.__doc__
        if not (doc or "").strip():
            out.append(f"{name}.{meth_name}: no docstring")
        elif not isinstance(meth, property):
            out += [f"{name}.{meth_name}: argument {p!r} not in its Args section"
                    for p in _parameters(fn) if p not in _documented(doc)]
    return out


def test_every_public_name_documents_itself_and_its_arguments() -> None:
    from trustrl.training.callbacks import Info  # not exported, but what every callback receives

    public = {**{name: getattr(trustrl, name) for name in trustrl.__all__}, "Info": Info}
    found = [line for name, obj in public.items() for line in problems(name, obj)]
    assert not found, "undocumented in trustrl.__all__:\n" + "\n".join(found)


def test_the_check_catches_a_missing_docstring_and_an_undocumented_argument() -> None:
    def bare(x: int) -> int:
        return x

    def half(x: int, y: int) -> int:
        """Add.

        Args:
            x: the first.
        """
        return x + y

    class Thing:
        """A thing.

        Args:
            a: the a.
        """

        def __init__(self, a: int, b: int):
            self.a = a

        def go(self, speed: float) -> None:
            """Go."""

    assert problems("bare", bare) == ["bare: no docstring"]
    assert problems("half", half) == ["half: argument 'y' not in its Args section"]
    assert problems("Thing", Thing) == ["Thing: argument 'b' not in its Args section",
                                        "Thing.go: argument 'speed' not in its Args section"]


@pytest.mark.parametrize("name", ["train", "Model", "EvalCallback"])
def test_the_documented_names_are_read_from_the_args_section(name: str) -> None:
    obj = getattr(trustrl, name)
    assert _documented(_own_doc(obj)), f"{name} has no Args section"
