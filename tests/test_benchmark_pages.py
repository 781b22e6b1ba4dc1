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
    """Every image a generated page, a results page or a docs page links under docs/figures/
    is one draw() makes (from the result files), and draw() makes no other."""
    linked = set()
    docs = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "docs").glob("*.md"))]
    for page in PAGES + MARKED + docs:
        text = (ROOT / page).read_text(encoding="utf-8")
        for target in re.findall(r"!\[[^]]*\]\(([^)]+)\)", text):
            path = ((ROOT / page).parent / target).resolve()
            assert path.is_file(), target
            if path.parent == make_pages.FIGURES:
                linked.add(path.name)
    drawn = make_pages.draw(out=tmp_path, beside_data=False)
    assert {p.name for p in drawn} == linked and linked
    assert all(p.stat().st_size > 10_000 and p.read_bytes()[:4] == b"\x89PNG" for p in drawn)


def test_figures_beside_their_data_are_found_and_drawn(make_pages, tmp_path: Path) -> None:
    """data_figures finds a sweep report's curves_<env>.json and zoo_curves' pair of CSVs
    anywhere under the results, and draw writes each figure beside its data; a zoo CSV
    without trustrl's (an older result, its runs' data not kept) is not a figure."""
    report = tmp_path / "sweep_x" / "report"
    report.mkdir(parents=True)
    (report / "curves_CartPole-v1.json").write_text(json.dumps({
        "format": "trustrl-curves/1", "env_id": "CartPole-v1", "stat": "mean",
        "threshold": None, "word": "greedy", "n_boot": 100,
        "variants": {"ppo": [{"seed": s, "steps": [0, 100], "returns": [10.0, 50.0 * s]}
                             for s in (1, 2)]}}))
    zoo = tmp_path / "zoo_x"
    zoo.mkdir()
    (zoo / "zoo_ppo_PongNoFrameskip-v4.csv").write_text("step,mean,std\n0,-21,0\n100,-5,1\n")
    (zoo / "trustrl_ppo_PongNoFrameskip-v4.csv").write_text(
        "seed,mode,step,return\n1,sampled,0,-21.0\n1,sampled,100,-10.0\n")
    old = tmp_path / "old_x"
    old.mkdir()
    (old / "zoo_ppo_PongNoFrameskip-v4.csv").write_text("step,mean,std\n0,-21,0\n")
    found = [p for p, _ in make_pages.data_figures(tmp_path)]
    assert found == [report / "curves_CartPole-v1.png", zoo / "curve_PongNoFrameskip-v4.png"]
    for png, drawer in make_pages.data_figures(tmp_path):
        drawer()
        assert png.stat().st_size > 10_000


def test_every_committed_figure_with_data_is_redrawn_from_it(make_pages, tmp_path: Path
                                                            ) -> None:
    """Each committed figure that sits beside its data is redrawn from that data alone (into a
    copy of its folder without the PNG): the same image size. Pixels are not compared: they
    follow the machine's matplotlib and fonts."""
    import matplotlib
    from PIL import Image

    matplotlib.use("Agg")
    committed = [p for p, _ in make_pages.data_figures()]
    assert committed, "no committed figure sits beside its data"
    for png in committed:
        rel = png.relative_to(make_pages.RESULTS)
        shutil.copytree(png.parent, tmp_path / rel.parent, dirs_exist_ok=True)
        (tmp_path / rel).unlink()
    for png, drawer in make_pages.data_figures(tmp_path):
        drawer()
        committed_png = make_pages.RESULTS / png.relative_to(tmp_path)
        with Image.open(png) as new, Image.open(committed_png) as old:
            assert new.size == old.size, png.relative_to(tmp_path)


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


# ----- links and images of the benchmark pages ----------------------------------------------
LINKED = ["benchmarks/RESULTS.md", "benchmarks/SUITE.md", "benchmarks/RESULTS_HISTORY.md",
          "benchmarks/SUITE_HISTORY.md", "benchmarks/README.md"]
MAIN = ["benchmarks/RESULTS.md", "benchmarks/SUITE.md"]
HISTORY = ["benchmarks/RESULTS_HISTORY.md", "benchmarks/SUITE_HISTORY.md"]

LEGACY_IMAGES = {
    *(f"benchmarks/results/presets_2026-12-05/{folder}/zoo_curve_{env}.png" for folder, env in [
        ("bwh_ppo", "BipedalWalkerHardcore-v3"), ("atari_pong", "PongNoFrameskip-v4"),
        ("atari_breakout", "BreakoutNoFrameskip-v4"),
        ("atari_beamrider", "BeamRiderNoFrameskip-v4"),
        ("atari_spaceinvaders", "SpaceInvadersNoFrameskip-v4"),
        ("atari_qbert", "QbertNoFrameskip-v4"), ("atari_mspacman", "MsPacmanNoFrameskip-v4"),
        ("atari_roadrunner", "RoadRunnerNoFrameskip-v4"),
        ("atari_asteroids", "AsteroidsNoFrameskip-v4"),
        ("atari_seaquest", "SeaquestNoFrameskip-v4"), ("atari_enduro", "EnduroNoFrameskip-v4")]),
    "benchmarks/results/peers_cartpole_curves.png",
    "benchmarks/results/peers_cartpole_curves_2026-12-01.png",
    "benchmarks/results/peers_pendulum_curves.png",
    *(f"benchmarks/results/presets_2026-12-03/{name}.png" for name in [
        "bwh_ppo/zoo_curve_BipedalWalkerHardcore-v3", "pong_ppo/curve_PongNoFrameskip-v4",
        *(f"{game.lower()}_ppo_zoo_schedule/curve_{game}NoFrameskip-v4" for game in (
            "Pong", "Breakout", "BeamRider", "SpaceInvaders", "Qbert", "MsPacman", "RoadRunner",
            "Asteroids", "Seaquest")),
        "enduro_ppo_zoo_schedule/vf_sb3/curve_EnduroNoFrameskip-v4"])}
"""Legacy images: drawn when their runs ran, whose data were not kept, so make_pages cannot
redraw them. Only the HISTORY pages may show them, each under LEGACY_LABEL."""

LEGACY_LABEL = ("*Drawn when the runs ran; the runs' data were not kept, so this image cannot "
                "be redrawn.*")

LINK = re.compile(r"(!?)\[[^\]\n]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```$", re.MULTILINE | re.DOTALL)


def _links(page: str) -> list[tuple[bool, str]]:
    """(is an image, target) of every Markdown link of a page outside its fenced code."""
    text = FENCE.sub("", (ROOT / page).read_text(encoding="utf-8"))
    return [(bang == "!", target) for bang, target in LINK.findall(text)]


def _anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file (a repeated one gets -1, -2)."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        if m := re.match(r"#{1,6} (.*)", line):
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


@pytest.mark.parametrize("page", LINKED)
def test_every_relative_link_and_image_of_a_benchmark_page_exists(page) -> None:
    """Each relative link or image points to a file of the repository, and an anchor into a
    Markdown file to one of its headings."""
    broken = []
    for _, target in _links(page):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        rel, _, anchor = target.partition("#")
        path = ((ROOT / page).parent / rel).resolve() if rel else ROOT / page
        if not path.exists():
            broken.append(target)
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(target)
    assert not broken, f"{page}: broken links {broken}"


@pytest.fixture(scope="module")
def drawn(tmp_path_factory) -> set[Path]:
    """The figures make_pages draws (into docs/figures/, or beside their data)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import make_pages
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return set(make_pages.figures())


def _images(page: str) -> list[Path]:
    return [((ROOT / page).parent / t).resolve() for image, t in _links(page) if image]


@pytest.mark.parametrize("page", MAIN)
def test_a_main_page_shows_only_figures_make_pages_draws(page, drawn) -> None:
    """RESULTS.md and SUITE.md show only images a committed result file redraws; legacy
    images are for the HISTORY pages."""
    images = _images(page)
    outside = [str(p.relative_to(ROOT)) for p in images if p not in drawn]
    assert not outside, f"{page} shows images make_pages does not draw: {outside}"


def test_every_legacy_image_is_on_a_history_page_under_its_label() -> None:
    """Each legacy image is shown on a HISTORY page, the line before it saying why it cannot
    be redrawn."""
    shown = set()
    for page in HISTORY:
        lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            for image, target in LINK.findall(line):
                rel = str(((ROOT / page).parent / target).resolve().relative_to(ROOT))
                if image and rel in LEGACY_IMAGES:
                    assert lines[i - 2] == LEGACY_LABEL and not lines[i - 1], (page, rel)
                    shown.add(rel)
    assert shown == LEGACY_IMAGES


@pytest.mark.parametrize("page", HISTORY)
def test_a_history_page_shows_drawn_or_labelled_legacy_images(page, drawn) -> None:
    """Every image of a HISTORY page is drawn by make_pages or a listed legacy image."""
    outside = [str(p.relative_to(ROOT)) for p in _images(page)
               if p not in drawn and str(p.relative_to(ROOT)) not in LEGACY_IMAGES]
    assert not outside, f"{page} shows images neither drawn nor listed as legacy: {outside}"
