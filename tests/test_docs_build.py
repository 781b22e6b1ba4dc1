"""The documentation site builds with warnings as errors, and its reference pages follow the
code (issue 53, point 5).

`mkdocs build --strict` (mkdocs.yml): mkdocstrings renders docs/api.md from the docstrings of
`trustrl.__all__`, docs/hooks/cli_reference.py renders docs/cli.md from the argparse parser; a
broken link, a docstring argument that is not in the signature or a page left out of the nav
fails the build. The built pages must hold every exported name, every config field and every
command.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import trustrl
from trustrl.settings.config import CONFIGS

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip("mkdocs", reason="the docs tools are in the test and docs extras")
pytest.importorskip("mkdocstrings_handlers.python", reason="mkdocstrings[python] is needed")


def build(site: Path, config: Path = ROOT / "mkdocs.yml") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    # no -q: with it mkdocs 1.6 counts no warnings and --strict passes anything
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "-f", str(config), "-d", str(site)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    p = build(out)
    assert p.returncode == 0, f"mkdocs build --strict failed:\n{p.stdout}\n{p.stderr}"
    return out


def _ids(page: Path) -> set[str]:
    return set(re.findall(r'id="([^"]+)"', page.read_text(encoding="utf-8")))


def test_api_page_documents_every_export_and_config_field(site: Path) -> None:
    ids = _ids(site / "api" / "index.html")
    for name in trustrl.__all__:
        obj = getattr(trustrl, name)
        assert f"{obj.__module__}.{obj.__qualname__}" in ids, f"{name} is not in docs/api.md"
    for cls in {trustrl.RunConfig, *CONFIGS.values()}:
        own = set(vars(cls).get("__annotations__", {}))  # the fields its body (re)defines
        assert own <= {f.name for f in dataclasses.fields(cls)}
        for field in own:
            assert f"{cls.__module__}.{cls.__qualname__}.{field}" in ids, (cls.__name__, field)


def test_cli_page_holds_every_command(site: Path) -> None:
    from trustrl.cli import build_parser

    text = (site / "cli" / "index.html").read_text(encoding="utf-8")
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for command in sub.choices:
        assert f"usage: trustrl {command}" in text, command
    assert "<!-- trustrl-cli -->" not in text


def test_strict_build_fails_on_a_broken_link(tmp_path: Path) -> None:
    """The build the CI runs really is strict: one dead link fails it."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# x\n\n[gone](nowhere.md)\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text("site_name: x\ndocs_dir: docs\n")
    p = build(tmp_path / "site", config)
    assert p.returncode != 0 and "nowhere.md" in p.stdout + p.stderr
