"""The built package (issue 53, point 5 in part): py.typed ships in the wheel (PEP 561: mypy
then reads trustrl's type hints), and the classifiers name each Python version from
requires-python's lower bound on."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]


def test_classifiers_name_the_python_versions():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    low = int(project["requires-python"].removeprefix(">=3."))
    named = {c.rsplit(":: ", 1)[1] for c in project["classifiers"]
             if c.startswith("Programming Language :: Python :: 3.")}
    assert {f"3.{m}" for m in range(low, 14)} <= named
    assert f"3.{sys.version_info.minor}" in named  # the one this suite runs on
    assert "Typing :: Typed" in project["classifiers"]


def test_the_wheel_holds_py_typed(tmp_path):
    assert (ROOT / "trustrl" / "py.typed").is_file()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True)
    wheel = next(tmp_path.glob("trustrl-*.whl"))
    assert "trustrl/py.typed" in zipfile.ZipFile(wheel).namelist()
