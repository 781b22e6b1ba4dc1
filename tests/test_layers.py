"""The layers of docs/architecture.md hold: no module imports one of a higher layer (imports
inside functions included), and no two modules import each other, directly or around a cycle.
A new module must be given a layer here (and in the doc) for this test to pass."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import trustrl

ROOT = Path(trustrl.__file__).parent

LAYERS: dict[int, tuple[str, ...]] = {
    0: ("util",),
    1: ("maths",),
    2: ("envs",),
    3: ("nets",),
    4: ("compute",),
    5: ("settings",),
    6: ("collect", "records"),
    7: ("algos",),
    8: ("learn",),
    9: ("training",),
    10: ("cli", "__main__", "", "model", "experiments", "lab", "demo", "sweep", "rlhf"),
}
"""Module prefixes (relative to trustrl) of each layer, bottom to top. The longest matching
prefix decides; "" is the package itself (trustrl/__init__.py)."""


def _modules() -> dict[str, Path]:
    mods = {}
    for p in ROOT.rglob("*.py"):
        rel = p.relative_to(ROOT)
        if "template" in rel.parts:  # the lab's exercise files, copied out for learners
            continue
        name = ".".join(rel.with_suffix("").parts)
        mods[name.removesuffix("__init__").rstrip(".")] = p
    return mods


def _layer(name: str) -> int:
    best, layer = -1, None
    for k, prefixes in LAYERS.items():
        for pre in prefixes:
            if (name == pre or name.startswith(pre + ".") or pre == "") and len(pre) > best:
                best, layer = len(pre), k
    assert layer is not None, f"trustrl.{name} has no layer in tests/test_layers.py"
    return layer


def _graph() -> dict[str, set[str]]:
    mods = _modules()

    def resolve(dotted: str) -> str | None:
        name = dotted.removeprefix("trustrl").lstrip(".")
        while name not in mods:
            if not name:
                return ""
            name = name.rpartition(".")[0]
        return name

    g: dict[str, set[str]] = defaultdict(set)
    for m, p in mods.items():
        for node in ast.walk(ast.parse(p.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
                    node.module == "trustrl" or node.module.startswith("trustrl.")):
                targets = [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("trustrl")]
            for t in targets:
                r = resolve(t)
                if r is not None and r != m:
                    g[m].add(r)
    return g


def test_no_module_imports_a_higher_layer():
    bad = [f"trustrl.{m} (layer {_layer(m)}) imports trustrl.{t} (layer {_layer(t)})"
           for m, ts in _graph().items() for t in ts if _layer(t) > _layer(m)]
    assert not bad, "\n".join(bad)


def test_no_import_cycles():
    g = _graph()
    state: dict[str, int] = {}
    cycles = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in sorted(g.get(m, ())):
            if t == "":  # the package's own __init__ re-exports; importing it is not a cycle
                continue
            if state.get(t) == 1:
                cycles.append(" -> ".join(path[path.index(t):] + [t]))
            elif t not in state:
                visit(t, path + [t])
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m, [m])
    assert not cycles, "\n".join(cycles)


def test_every_module_has_a_layer():
    for m in _modules():
        _layer(m)


def test_the_folders_are_the_layers():
    """The package's folders show the layers: each folder of trustrl/ lies in one layer, and
    the only modules at the top are the entry points (the CLI, the SB3-style models)."""
    prefixes = {pre for layer in LAYERS.values() for pre in layer}
    top = sorted(p.stem for p in ROOT.glob("*.py"))
    assert top == ["__init__", "__main__", "cli", "model"], top
    folders = sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").exists())
    assert folders and all(f in prefixes for f in folders), folders


def test_no_function_takes_more_than_twelve_parameters():
    """Readable kernels (issue 51, point 6): a function takes its arguments in groups (the
    named tuples of trustrl.compute.compiled.records, dataclasses) once they pass a dozen;
    self and *args / **kwargs are not counted."""
    long = []
    for name, p in _modules().items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                params = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
                if params and params[0] in ("self", "cls"):
                    params = params[1:]
                if len(params) > 12:
                    long.append(f"trustrl.{name}.{node.name}: {len(params)} parameters")
    assert not long, "\n".join(long)
