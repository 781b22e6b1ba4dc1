"""`trustrl lab init | check | solution`: write the exercise folder, grade it, show the answers.

The grader runs the folder's pytest suite in a fresh Python process (so the learner's ppo.py is
imported anew every time) with a small plugin that records each test's outcome, its task
markers and the first line of its failure message; the parent turns that into a scoreboard.
Only the standard library is imported at module level: `trustrl --help` stays fast.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from trustrl.lab import TASKS
from trustrl.util.errors import TrustrlError

TEMPLATE_FILES = ("README.md", "ppo.py", "test_ppo.py", "run.py", "pytest.ini")
"""What `lab init` writes, in this order, from trustrl/lab/template/."""

DEFAULT_DIR = "ppo-lab"
CHECK_TIMEOUT_S = 900
TASK_MARK = re.compile(r"task([1-4])")


class LabError(TrustrlError):
    """A lab folder, task number or test run that the lab commands cannot use."""


# --- task numbers ---------------------------------------------------------------------------
def parse_task(value: str | int) -> int:
    """'1'..'4' -> 1..4, anything else -> LabError (one line)."""
    text = str(value).strip()
    if text.isdigit() and int(text) in TASKS:
        return int(text)
    raise LabError(f"no task {text!r}: the lab's tasks are numbered 1 to {len(TASKS)}")


# --- lab init -------------------------------------------------------------------------------
def template_text(name: str) -> str:
    """The text of one template file shipped in trustrl/lab/template/."""
    try:
        return _template(name).read_text(encoding="utf-8")
    except OSError:
        raise LabError(f"this trustrl install lacks the lab's template file {name}; "
                       "reinstall trustrl") from None


def _template(name: str) -> Any:
    return resources.files("trustrl.lab").joinpath("template").joinpath(name)


def init_lab(directory: str | Path, force: bool = False) -> list[Path]:
    """Write the lab's files into `directory` (created if needed) and return their paths.

    Refuses a folder that already holds anything unless force is True; with force only the
    lab's own files are rewritten, anything else in the folder is left alone.
    """
    target = Path(directory)
    if target.exists() and not target.is_dir():
        raise LabError(f"{target} exists and is not a folder")
    if target.is_dir() and not force:
        present = sorted(p.name for p in target.iterdir())
        if present:
            shown = ", ".join(present[:4]) + (", ..." if len(present) > 4 else "")
            raise LabError(f"{target} already holds files ({shown}); nothing was written. "
                           "Use another folder, or --force to overwrite the lab's files there")
    texts = {name: template_text(name) for name in TEMPLATE_FILES}  # all read before writing
    try:
        target.mkdir(parents=True, exist_ok=True)
        written = []
        for name, text in texts.items():
            path = target / name
            path.write_text(text, encoding="utf-8")
            written.append(path)
    except OSError as e:
        raise LabError(f"cannot write the lab into {target}: {e.strerror or e}") from None
    return written


def is_lab_folder(directory: Path) -> bool:
    return (directory / "test_ppo.py").is_file() and (directory / "ppo.py").is_file()


# --- lab check ------------------------------------------------------------------------------
@dataclass
class TestOutcome:
    """One graded test as the pytest subprocess saw it."""

    name: str
    tasks: list[int]
    outcome: str  # "passed", "failed" or "skipped"
    message: str = ""


@dataclass
class LabReport:
    """Everything `lab check` prints comes from here."""

    directory: Path
    tasks: list[int]
    tests: list[TestOutcome] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # collection errors (e.g. test_ppo.py)
    seconds: float = 0.0

    def of_task(self, task: int) -> list[TestOutcome]:
        return [t for t in self.tests if task in t.tasks]

    def task_passes(self, task: int) -> bool:
        tests = self.of_task(task)
        return bool(tests) and all(t.outcome == "passed" for t in tests)

    @property
    def all_pass(self) -> bool:
        return not self.errors and all(self.task_passes(t) for t in self.tasks)


def _first_line(report: Any) -> str:
    """The message of a failed or skipped pytest report, without pytest's prefixes."""
    lr = report.longrepr
    crash = getattr(lr, "reprcrash", None)
    if crash is not None:
        msg = str(crash.message)
    elif isinstance(lr, tuple) and len(lr) == 3:  # a skip: (path, line, reason)
        msg = str(lr[2])
    else:
        lines = [ln for ln in str(lr).strip().splitlines() if ln.strip()]
        msg = lines[-1] if lines else "failed"
    msg = " ".join(msg.split())
    for prefix in ("Failed: ", "Skipped: ", "E   "):
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
    return msg


class Recorder:
    """pytest plugin (used inside the subprocess): each test's outcome, task markers and
    failure message, and collection errors."""

    def __init__(self) -> None:
        self.tests: dict[str, dict[str, Any]] = {}
        self.errors: list[str] = []

    def pytest_runtest_logreport(self, report: Any) -> None:
        entry = self.tests.setdefault(report.nodeid, {
            "name": report.nodeid.split("::")[-1],
            "tasks": sorted(int(m.group(1)) for k in report.keywords
                            if (m := TASK_MARK.fullmatch(k))),
            "outcome": "passed", "message": "",
        })
        if report.failed and entry["outcome"] != "failed":
            entry["outcome"], entry["message"] = "failed", _first_line(report)
        elif report.skipped and entry["outcome"] == "passed":
            entry["outcome"], entry["message"] = "skipped", _first_line(report)

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            where = report.nodeid or "test_ppo.py"
            self.errors.append(f"{where}: {_first_line(report)}")

    def dump(self, path: str, exit_code: int) -> None:
        data = {"exit": exit_code, "tests": list(self.tests.values()), "errors": self.errors}
        Path(path).write_text(json.dumps(data), encoding="utf-8")


_RUNNER = """\
import sys
import pytest
from trustrl.lab.commands import Recorder
recorder = Recorder()
code = pytest.main(sys.argv[2:], plugins=[recorder])
recorder.dump(sys.argv[1], int(code))
"""


def run_tests(directory: str | Path, tasks: Iterable[int] | None = None,
              markexpr: str | None = None, timeout: float = CHECK_TIMEOUT_S) -> LabReport:
    """Run the lab folder's graded tests in a fresh Python process and collect the outcomes.

    tasks: which tasks' tests to run (default all); markexpr: an extra pytest -m expression
    that is and-ed with the task selection (trustrl's own tests use "not train").
    """
    lab_dir = Path(directory).resolve()
    if not lab_dir.is_dir():
        raise LabError(f"no such folder: {directory}")
    if not is_lab_folder(lab_dir):
        raise LabError(f"{directory} is not a PPO lab folder (it has no ppo.py and "
                       f"test_ppo.py); make one with `trustrl lab init {directory}`")
    try:
        import pytest  # noqa: F401  (only to fail early with a clear message)
    except ImportError:
        raise LabError("lab check needs pytest: pip install pytest") from None
    selected = sorted(set(tasks)) if tasks else sorted(TASKS)
    expr = " or ".join(f"task{t}" for t in selected)
    if markexpr:
        expr = f"({expr}) and ({markexpr})"
    ini = lab_dir / "pytest.ini"
    if not ini.is_file():  # the folder's own settings were deleted: use the shipped ones
        ini = Path(str(_template("pytest.ini")))
    with tempfile.TemporaryDirectory(prefix="trustrl-lab-") as tmp:
        out = Path(tmp) / "report.json"
        cmd = [sys.executable, "-c", _RUNNER, str(out), str(lab_dir / "test_ppo.py"),
               "-c", str(ini), "--rootdir", str(lab_dir), "-p", "no:cacheprovider",
               "-q", "--no-header", "-m", expr]
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        env.pop("PYTEST_ADDOPTS", None)  # the lab's own settings only
        t0 = time.perf_counter()
        try:
            from trustrl.util.children import die_with_parent

            proc = subprocess.run(cmd, cwd=lab_dir, env=env, capture_output=True, text=True,
                                  timeout=timeout,  # the tests die with trustrl (kill -9 too)
                                  preexec_fn=die_with_parent if os.name == "posix" else None)
        except subprocess.TimeoutExpired:
            raise LabError(f"the tests did not finish within {timeout:.0f} s (an endless loop "
                           "in ppo.py?)") from None
        seconds = time.perf_counter() - t0
        if not out.is_file():
            tail = (proc.stderr or proc.stdout).strip().splitlines()
            raise LabError("the tests could not run: "
                           + (tail[-1] if tail else f"exit status {proc.returncode}"))
        data = json.loads(out.read_text(encoding="utf-8"))
    report = LabReport(lab_dir, selected, errors=list(data["errors"]), seconds=seconds)
    report.tests = [TestOutcome(t["name"], t["tasks"], t["outcome"], t["message"])
                    for t in data["tests"]]
    return report


def format_scoreboard(report: LabReport, width: int = 100) -> str:
    """The table `lab check` prints: per task passed/total and the first failure message."""
    lines = [f"PPO lab check of {report.directory} ({len(report.tests)} graded tests, "
             f"{report.seconds:.1f} s)", ""]
    for err in report.errors:
        lines += textwrap.wrap(f"could not collect the tests: {err}", width,
                               subsequent_indent="  ")
    indent = " " * 10
    for task in report.tasks:
        tests = report.of_task(task)
        passed = sum(t.outcome == "passed" for t in tests)
        score = f"{passed}/{len(tests)}"
        head = f"  task {task}  {TASKS[task]:<32}{score:>6}  "
        if not tests:
            lines.append(head + "no graded tests found")
            continue
        failure = next((t for t in tests if t.outcome != "passed"), None)
        if failure is None:
            lines.append(head + "ok")
            continue
        lines.append(head + f"first failure, {failure.name}:")
        lines += textwrap.wrap(failure.message or failure.outcome, width,
                               initial_indent=indent, subsequent_indent=indent)
    total = sum(len(report.of_task(t)) for t in report.tasks)
    passed = sum(sum(x.outcome == "passed" for x in report.of_task(t)) for t in report.tasks)
    if report.all_pass:
        which = ("all tasks" if report.tasks == sorted(TASKS) else
                 ("task " if len(report.tasks) == 1 else "tasks ")
                 + ", ".join(map(str, report.tasks)))
        summary = (f"{passed}/{total} graded tests pass ({which}). Next: `python run.py` in the "
                   "lab folder (about two minutes) and its questions in README.md; "
                   "`trustrl lab solution N` shows the reference for task N.")
    else:
        todo = next((t for t in report.tasks if not report.task_passes(t)), report.tasks[0])
        summary = (f"{passed}/{total} graded tests pass. Next: task {todo} ({TASKS[todo]}) in "
                   "ppo.py, then run the check again.")
    lines += [""] + textwrap.wrap(summary, width)
    return "\n".join(lines)


# --- lab solution ---------------------------------------------------------------------------
def _is_library_function(obj: Any) -> bool:
    """A trustrl function outside trustrl.lab, or an algorithm's class (trustrl.algos)."""
    mod = getattr(obj, "__module__", "") or ""
    if isinstance(obj, type):
        return mod.startswith("trustrl.algos.")
    return (isinstance(obj, types.FunctionType) and mod.startswith("trustrl.")
            and not mod.startswith("trustrl.lab"))


def _code_names(code: types.CodeType) -> list[str]:
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):  # comprehensions, lambdas, nested functions
            names += [n for n in _code_names(const) if n not in names]
    return names


def library_callees(fn: Callable[..., Any]) -> list[Callable[..., Any]]:
    """The trustrl functions and classes (outside trustrl.lab) that `fn` calls by name or as
    module.attr; for a class, those its methods call."""
    if isinstance(fn, type):
        found: list[Callable[..., Any]] = []
        for m in vars(fn).values():
            if isinstance(m, types.FunctionType):
                found += [c for c in library_callees(m) if c not in found and c is not fn]
        return found
    fn = inspect.unwrap(fn)
    names = _code_names(fn.__code__)
    found = []
    for name in names:
        obj = fn.__globals__.get(name)
        candidates: list[Any] = [obj]
        if isinstance(obj, types.ModuleType) and obj.__name__.startswith("trustrl"):
            candidates = [getattr(obj, n, None) for n in names]
        for c in candidates:
            if _is_library_function(c) and c not in found:
                found.append(c)
    return found


def _where(fn: Callable[..., Any]) -> str:
    import trustrl

    fn = inspect.unwrap(fn)
    path = Path(inspect.getsourcefile(fn) or "?")
    root = Path(trustrl.__file__).resolve().parent.parent
    try:
        path = path.resolve().relative_to(root)
    except ValueError:
        pass
    _, line = inspect.getsourcelines(fn)
    return f"{path}:{line}"


def _names_torch_as_o(f: Any) -> bool:
    """Whether a function reads torch under the global name `o` (trustrl.maths.losses' way)."""
    g = inspect.unwrap(f)
    code = getattr(g, "__code__", None)
    o = getattr(g, "__globals__", {}).get("o")
    return code is not None and "o" in code.co_names and getattr(o, "__name__", "") == "torch"


def solution_text(task: int, depth: int = 2) -> str:
    """The reference of one task: the trustrl.lab.solutions functions, then the trustrl
    functions they call, down to `depth` calls deep."""
    from trustrl.lab import solutions

    wrappers = list(solutions.SOLUTIONS[task])
    seen: list[Callable[..., Any]] = []
    frontier = wrappers
    for _ in range(depth):
        nxt = []
        for f in frontier:
            for c in library_callees(f):
                if c not in seen:
                    seen.append(c)
                    nxt.append(c)
        frontier = nxt
    rule = "# " + "-" * 78
    parts = [rule, f"# Task {task} ({TASKS[task]}): the reference solution", "#",
             "# The lab's signatures, as thin wrappers around trustrl's own code:", rule, ""]
    for f in wrappers:
        parts += [f"# {f.__module__}.{f.__qualname__}  ({_where(f)})",
                  inspect.getsource(f).rstrip(), ""]
    if seen:
        parts += [rule, "# ... and the trustrl functions they call:", rule, ""]
        if any(_names_torch_as_o(f) for f in seen):
            parts += ["# (`o` below is torch: read o.minimum as torch.minimum. The compiled",
                      "# backend runs these same functions on NumPy arrays under Numba by",
                      "# giving them another `o`; see the module's docstring.)", ""]
        for f in seen:
            parts += [f"# {f.__module__}.{f.__qualname__}  ({_where(f)})",
                      inspect.getsource(inspect.unwrap(f)).rstrip(), ""]
    return "\n".join(parts).rstrip() + "\n"


# --- command line ---------------------------------------------------------------------------
def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `trustrl lab ...` on the CLI's subparsers; returns the `lab` parser."""
    lab = subparsers.add_parser(
        "lab", help="the PPO lab: graded exercises (init | check | solution)",
        description="The PPO lab: write the exercise folder, grade it, show the reference.")
    sub = lab.add_subparsers(dest="lab_command", required=True)
    i = sub.add_parser("init", help="write the exercise folder (default ./ppo-lab)")
    i.add_argument("dir", nargs="?", default=DEFAULT_DIR, help="folder to create")
    i.add_argument("--force", action="store_true",
                   help="overwrite the lab's files in a folder that already holds files")
    c = sub.add_parser("check", help="run the graded tests and print a scoreboard")
    c.add_argument("dir", nargs="?", default=None,
                   help=f"the lab folder (default: the current folder if it is one, "
                        f"else ./{DEFAULT_DIR})")
    c.add_argument("--task", dest="tasks", action="append", default=[], metavar="N",
                   help="only task N (1-4); repeatable")
    s = sub.add_parser("solution", help="print the reference implementation of a task")
    s.add_argument("task", help="task number, 1-4")
    return lab


def cmd_lab(args: argparse.Namespace) -> int:
    """Run `trustrl lab <init|check|solution>`; returns the exit status."""
    if args.lab_command == "init":
        written = init_lab(args.dir, force=args.force)
        print(f"wrote {Path(args.dir)}/: " + ", ".join(p.name for p in written))
        print(f"next: read {Path(args.dir) / 'README.md'}, write Task 1 in ppo.py, then run "
              f"`trustrl lab check {args.dir}`")
        return 0
    if args.lab_command == "check":
        tasks = [parse_task(t) for t in args.tasks] or None
        directory = args.dir or ("." if is_lab_folder(Path(".")) else DEFAULT_DIR)
        report = run_tests(directory, tasks)
        width = max(60, min(120, shutil.get_terminal_size((100, 24)).columns - 2))
        print(format_scoreboard(report, width))
        return 0 if report.all_pass else 1
    if args.lab_command == "solution":
        print(solution_text(parse_task(args.task)), end="")
        return 0
    raise LabError(f"unknown lab command {args.lab_command!r}")
