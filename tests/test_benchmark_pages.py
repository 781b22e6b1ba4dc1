"""The results pages are generated from the committed result files (issue 53, point 5).

benchmarks/make_pages.py renders each page of its PAGES (docs/benchmarks.md, docs/results.md)
from benchmarks/results/**, and draws their figures; each committed page must be its output,
so a table cannot be edited by hand out of step with the files, and a changed result file
changes the page.
"""

from __future__ import annotations

import json
import re
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


PAGES = ["docs/benchmarks.md", "docs/results.md"]
MARKED = ["benchmarks/RESULTS.md", "benchmarks/RESULTS_HISTORY.md", "benchmarks/SUITE.md",
          "benchmarks/SUITE_HISTORY.md"]


def test_every_generated_page_is_listed(make_pages) -> None:
    assert sorted(make_pages.PAGES) == sorted(PAGES)


@pytest.mark.parametrize("page", PAGES)
def test_committed_page_is_the_scripts_output(make_pages, page) -> None:
    committed = (ROOT / page).read_text(encoding="utf-8")
    render, _ = make_pages.PAGES[page]
    assert render(make_pages.RESULTS) == committed, (
        f"{page} is out of date: run `python benchmarks/make_pages.py`")


def _copy_named_files(make_pages, sections, to: Path) -> None:
    for _, name, files, _ in sections:
        (to / name).mkdir(parents=True, exist_ok=True)  # a folder of a folder too
        for f in files:
            shutil.copy(make_pages.RESULTS / name / f, to / name / f)


@pytest.mark.parametrize("page", PAGES)
def test_a_page_reads_only_the_files_its_sections_name(make_pages, page, tmp_path) -> None:
    render, sections = make_pages.PAGES[page]
    _copy_named_files(make_pages, sections, tmp_path)
    assert render(tmp_path) == render(make_pages.RESULTS)


def test_a_transcribed_table_follows_its_data_file(make_pages, tmp_path: Path) -> None:
    """docs/results.md's numbers come from the data files they were moved to: a per-seed
    value changed there changes the row and the median computed from it."""
    _copy_named_files(make_pages, make_pages.RESULTS_SECTIONS, tmp_path)
    path = tmp_path / make_pages.CORE / "acceptance.json"
    d = json.loads(path.read_text())
    assert "Transcribed" in d["source"] and "command" in d and "machine" in d
    d["cartpole"]["stays_500_step"] = [1024, 2048, 3072, 4096, 5120]
    path.write_text(json.dumps(d))
    page = make_pages.render_results(tmp_path)
    assert "1,024 / 2,048 / 3,072 / 4,096 / 5,120: median 3,072, range 1,024-5,120" in page
    assert page != make_pages.render_results()


def test_every_transcribed_data_file_keeps_its_provenance() -> None:
    folder = ROOT / "benchmarks" / "results" / "core_cpu_2026-11-29"
    files = sorted(folder.glob("*.json"))
    assert files
    for f in files:
        d = json.loads(f.read_text(encoding="utf-8"))
        assert d["source"].startswith("Transcribed, numbers unchanged, from docs/results.md")
        assert d["command"] and d["machine"], f.name


def test_the_figures_the_pages_show_are_drawn_from_the_result_files(make_pages,
                                                                      tmp_path) -> None:
    """Every image a generated page links is one draw() makes (from the result files), and
    is committed under docs/."""
    linked = set()
    for page in PAGES + MARKED:
        text = (ROOT / page).read_text(encoding="utf-8")
        for target in re.findall(r"!\[[^]]*\]\(([^)]+)\)", text):
            path = ((ROOT / page).parent / target).resolve()
            assert path.is_file(), target
            if path.parent == make_pages.FIGURES:
                linked.add(path.name)
    drawn = make_pages.draw(out=tmp_path)
    assert {p.name for p in drawn} == linked and linked
    assert all(p.stat().st_size > 10_000 and p.read_bytes()[:4] == b"\x89PNG" for p in drawn)


def test_the_page_follows_the_result_files(make_pages, tmp_path: Path) -> None:
    """A value changed in a result file shows on the page."""
    _copy_named_files(make_pages, make_pages.SECTIONS, tmp_path)
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



def test_every_marked_page_is_listed(make_pages) -> None:
    assert sorted(make_pages.MARKED) == sorted(MARKED)


@pytest.mark.parametrize("page", MARKED)
def test_each_block_of_a_hand_written_page_is_the_scripts_output(make_pages, page) -> None:
    committed = (ROOT / page).read_text(encoding="utf-8")
    assert make_pages.blocks(committed)
    assert make_pages.render_blocks(committed) == committed, (
        f"a generated block of {page} is out of date: run `python benchmarks/make_pages.py`")


@pytest.mark.parametrize("page", MARKED)
def test_no_table_of_a_hand_written_page_is_outside_a_block(make_pages, page) -> None:
    text = make_pages.BLOCK.sub("", (ROOT / page).read_text(encoding="utf-8"))
    assert not [line for line in text.splitlines() if line.startswith("|")]


def test_every_transcribed_table_is_shown_once_and_keeps_its_provenance(make_pages) -> None:
    shown = [target for page in MARKED for kind, target in
             make_pages.blocks((ROOT / page).read_text(encoding="utf-8"))
             if kind == "transcribed"]
    assert len(shown) == len(set(shown))
    files = sorted(str(p.relative_to(make_pages.RESULTS)) for p in
                   make_pages.RESULTS.glob("transcribed_*_md/*.json"))
    assert sorted(shown) == files
    for f in files:
        d = json.loads((make_pages.RESULTS / f).read_text(encoding="utf-8"))
        assert d["source"].startswith("Transcribed, cells unchanged, from " + d["page"])
        assert d["section"] and len(d["header"]) == len(d["align"])
        assert all(len(r) == len(d["header"]) for r in d["rows"]), f


def test_a_block_follows_its_data_file(make_pages, tmp_path: Path) -> None:
    page = (ROOT / "benchmarks" / "SUITE.md").read_text(encoding="utf-8")
    text = make_pages.BLOCK.search(page).group(0)  # the first block alone
    kind, target = make_pages.blocks(text)[0]
    (tmp_path / target).parent.mkdir(parents=True)
    d = json.loads((make_pages.RESULTS / target).read_text(encoding="utf-8"))
    d["rows"][0][-1] = "changed in the data file"
    (tmp_path / target).write_text(json.dumps(d))
    fresh = make_pages.render_blocks(text, tmp_path)
    assert "| changed in the data file |" in fresh and fresh != text


def test_the_gpu_block_follows_the_sessions_json_lines(make_pages, tmp_path: Path) -> None:
    folder = tmp_path / "gpu"
    shutil.copytree(make_pages.RESULTS / "gpu_2026-12-04", folder)
    before = make_pages.gpu_session(folder)
    assert "| 85,500 | 2,765 | 34,352 (34,330) | 0.40 |" in before[2]
    path = folder / "call1_gpu_fast.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for r in rows:
        if (r.get("setting"), r.get("algo"), r.get("mode")) == ("single", "ppo", "graph"):
            r["sps"] = 171_000
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert "| 85,500 | 2,765 | 171,000 (34,330) | 2.00 |" in make_pages.gpu_session(folder)[2]
