"""The benchmark docs can be rerun by anyone (issue 17, point 5).

No absolute path of a development machine in benchmarks/ or docs/ Markdown (places are
variables such as $PEERS, $SWEEPS, $OUT or --out arguments), every script a doc names exists,
and the scripts that build the peers and time the processes start and refuse bad input with one
line.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"

# An absolute path under a folder that only exists on some machine. Not matched: a variable
# ($TMPDIR/x, ${PEERS}/x), a relative path (.bench/x), a path inside a URL or another path
# (github.com/a/home/b), and ~/ (each reader's own home).
MACHINE_PATH = re.compile(r"(?<![\w$.}~/-])/(?:work|home|root|opt|tmp|Users|mnt|scratch)(?![\w-])")


def _docs() -> list[Path]:
    files = sorted(BENCH.rglob("*.md")) + sorted((ROOT / "docs").rglob("*.md"))
    return [f for f in files + [ROOT / "README.md"] if "runs" not in f.relative_to(ROOT).parts]


def _machine_paths(text: str) -> list[str]:
    return [f"line {i}: {line.strip()}" for i, line in enumerate(text.splitlines(), 1)
            if MACHINE_PATH.search(line)]


def test_pattern_catches_machine_paths_and_spares_variables() -> None:
    bad = ["cd /tmp && python x.py", "--target /tmp/site .whl/*.whl", "--out /work/x",
           "`/home/me/peers/sb3-venv/bin/python`", "PYTHONPATH=/tmp/site:x", "/opt/wheels"]
    good = ["--target \"$SITE\" .bench/whl/*.whl", "--out $SWEEPS/classic", "$TMPDIR/acc",
            "${PEERS}/cleanrl", "https://example.org/home/page", "e.g. ~/peers",
            "--out sweeps/classic", "benchmarks/tmp/x", "a /tmpfs mount"]
    assert all(_machine_paths(b) for b in bad), [b for b in bad if not _machine_paths(b)]
    assert not any(_machine_paths(g) for g in good), [g for g in good if _machine_paths(g)]


@pytest.mark.parametrize("doc", _docs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_hold_no_machine_path(doc: Path) -> None:
    found = _machine_paths(doc.read_text(encoding="utf-8"))
    assert not found, (f"{doc.relative_to(ROOT)} names a machine-specific path; use a variable "
                       "($PEERS, $SWEEPS, $OUT, ...) or an --out argument:\n" + "\n".join(found))


def test_no_tracked_file_names_a_machine_path() -> None:
    """Code, configs and scripts too (a docstring's example command is copied as often as a
    doc's): every text file git tracks, but this test's own examples."""
    files = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=ROOT,
                           check=True).stdout.split()
    found = []
    for name in files:
        path = ROOT / name
        if path == Path(__file__).resolve() or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # binary: figures, checkpoints
            continue
        found += [f"{name} {hit}" for hit in _machine_paths(text)]
    assert not found, "machine-specific paths (use a variable or an argument):\n" + "\n".join(found)


def test_benchmark_docs_name_only_existing_scripts() -> None:
    missing = []
    for doc in sorted(BENCH.glob("*.md")):
        for name in set(re.findall(r"benchmarks/[\w/]+\.(?:py|sh)", doc.read_text())):
            if not (ROOT / name).is_file():
                missing.append(f"{doc.name}: {name}")
    assert not missing, missing


# A Markdown link or image: [text](target) or ![alt](target); the target up to the first space.
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation but - and _ dropped, each
    space a hyphen (so "000.bandit-surrogate" -> "000bandit-surrogate")."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _prose(doc: Path):
    """(line number, line) of a Markdown file outside its fenced code blocks."""
    fenced = False
    for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            yield number, line


def _anchors(doc: Path) -> set[str]:
    """The anchors of a Markdown file's headings, outside code fences; a repeated heading gets
    -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    for _, line in _prose(doc):
        heading = re.match(r"#{1,6} (.+)", line)
        if heading:
            slug = _slug(heading.group(1))
            seen[slug] = seen.get(slug, 0) + 1
    return {s if i == 0 else f"{s}-{i}" for s, n in seen.items() for i in range(n)}


def _broken_links(doc: Path) -> list[str]:
    """Links outside code: a fenced block or an inline `code` span is text, not a link."""
    broken = []
    for number, line in _prose(doc):
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            linked = (doc.parent / path) if path else doc
            if not linked.exists():
                broken.append(f"line {number}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"line {number}: {target} (no heading has that anchor)")
    return broken


def test_slug_and_link_check_catch_what_github_would_not_open(tmp_path: Path) -> None:
    assert _slug("## 000.bandit-surrogate"[3:]) == "000bandit-surrogate"
    assert _slug("Defaults without a preset (issue 19, point 2: at 100k)") == \
        "defaults-without-a-preset-issue-19-point-2-at-100k"
    doc = tmp_path / "a.md"
    doc.write_text("# Top\n## Part\n## Part\n```\n# not a heading\nx = y[0](z)\n```\n"
                   "[ok](#part-1) [ok](a.md#top) [bad](#part-2) [bad](#not-a-heading) "
                   "![bad](missing.png) [web](https://example.org/x#y) `code[0](a)`\n",
                   encoding="utf-8")
    assert [b.split(" ", 2)[2] for b in _broken_links(doc)] == [
        "#part-2 (no heading has that anchor)", "#not-a-heading (no heading has that anchor)",
        "missing.png (no such file)"]


@pytest.mark.parametrize("doc", _docs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_links_open(doc: Path) -> None:
    """Every relative link and image of the docs names a file that exists and, with #anchor, a
    heading of that file (a renamed heading breaks the links to it silently otherwise)."""
    broken = _broken_links(doc)
    assert not broken, f"{doc.relative_to(ROOT)}:\n" + "\n".join(broken)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)


def test_setup_peers_help_runs() -> None:
    r = _run("benchmarks/setup_peers.py", "--help")
    assert r.returncode == 0, r.stderr
    for flag in ("--dest", "--cleanrl-git", "--purejaxrl-git", "--only", "--torch-index"):
        assert flag in r.stdout


@pytest.mark.parametrize("args, says", [
    (["--only", "sb3,nope"], "unknown peer nope"),
    (["--only", "cleanrl"], "cleanrl needs --cleanrl-git"),
    (["--only", "cleanrl-atari"], "cleanrl-atari needs --cleanrl-git"),
    (["--only", "purejaxrl", "--purejaxrl-git", "."], "not a git clone holding commit"),
    (["--only", "sb3", "--python", "no-such-python-here"], "--python no-such-python-here"),
])
def test_setup_peers_bad_arguments_are_one_line(tmp_path: Path, args: list[str],
                                                says: str) -> None:
    r = _run("benchmarks/setup_peers.py", "--dest", str(tmp_path / "peers"), *args)
    assert r.returncode == 2
    assert says in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "peers").exists()  # nothing built before the arguments are checked


def test_setup_peers_extracts_files_byte_for_byte(tmp_path: Path) -> None:
    """The scripts come out of the clone unmodified, at the commit asked for."""
    sys.path.insert(0, str(BENCH))
    try:
        import setup_peers
    finally:
        sys.path.remove(str(BENCH))
    clone = tmp_path / "clone"
    (clone / "purejaxrl").mkdir(parents=True)
    body = b"# peer script\r\nprint('\xc3\xa9')\n\tno newline at the end"
    (clone / "purejaxrl" / "ppo.py").write_bytes(body)
    (clone / "LICENSE").write_bytes(b"license text\n")
    git = ["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@t",
           "-c", "core.autocrlf=false"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "one"], check=True)
    commit = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    (clone / "purejaxrl" / "ppo.py").write_bytes(b"changed after the commit\n")
    builder = setup_peers.Builder(setup_peers.parse(["--dest", str(tmp_path / "d"),
                                                     "--only", "sb3"]))
    out = tmp_path / "d" / "purejaxrl"
    builder.extract("t", clone, commit, ["purejaxrl/ppo.py", "LICENSE"], out)
    assert (out / "ppo.py").read_bytes() == body
    assert (out / "LICENSE").read_bytes() == b"license text\n"
    with pytest.raises(setup_peers.Failed, match="no-such-file"):
        builder.extract("t", clone, commit, ["no-such-file.py"], out)


def test_paired_time_alternates_and_reports_ratio() -> None:
    r = _run("benchmarks/paired_time.py", "-n", "2", "--warmup", "0", "--vs",
             f"{sys.executable} -c pass", "--", sys.executable, "-c", "pass")
    assert r.returncode == 0, r.stderr
    runs = [ln.split(":")[0] for ln in r.stdout.splitlines() if ln.startswith("run ")]
    assert runs == ["run 1 A", "run 1 B", "run 2 A", "run 2 B"]
    assert "A/B wall:" in r.stdout
    bad = _run("benchmarks/paired_time.py", "-n", "1", "--", "no-such-command-here")
    assert bad.returncode == 2 and "cannot start" in bad.stderr and "Traceback" not in bad.stderr
