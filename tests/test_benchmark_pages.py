"""docs/benchmarks.md is generated from the committed result files (issue 53, point 5).

benchmarks/make_pages.py renders the page's tables from benchmarks/results/**; the committed
page must be its output, so a table cannot be edited by hand out of step with the files, and
a changed result file changes the page.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def make_pages(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # sys.path restored after the test
    import make_pages

    return make_pages


def test_committed_page_is_the_scripts_output(make_pages) -> None:
    committed = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert make_pages.render() == committed, (
        "docs/benchmarks.md is out of date: run `python benchmarks/make_pages.py`")


def test_the_page_follows_the_result_files(make_pages, tmp_path: Path) -> None:
    """Only the files SECTIONS names are copied (so it names every file it reads); a value
    changed in one of them shows on the page."""
    for _, name, files, _ in make_pages.SECTIONS:
        (tmp_path / name).mkdir()
        for f in files:
            shutil.copy(make_pages.RESULTS / name / f, tmp_path / name / f)
    assert make_pages.render(tmp_path) == make_pages.render()
    path = tmp_path / "purejaxrl_cpu_2026-12-03" / "full_run.json"
    d = json.loads(path.read_text())
    d["one"]["purejaxrl_sps"] = [1.0, 1.0, 1.0]
    path.write_text(json.dumps(d))
    page = make_pages.render(tmp_path)
    assert page != make_pages.render() and "| 1 (1, 1, 1) |" in page


def test_ratio_cell_gives_the_ratio_of_medians_and_the_pairs(make_pages) -> None:
    assert make_pages.ratio_cell([2.0, 9.0, 3.0], [1.0, 3.0, 3.0]) == (
        "**1.00x** (pairs 2.00, 3.00, 1.00; median 2.00)")


def test_check_flag_exits_0_on_the_committed_page() -> None:
    p = subprocess.run([sys.executable, "benchmarks/make_pages.py", "--check"], cwd=ROOT,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
