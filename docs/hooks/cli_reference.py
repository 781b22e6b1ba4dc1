"""MkDocs hook: docs/cli.md's `<!-- trustrl-cli -->` becomes the `--help` of every trustrl
command and subcommand, taken from the parser itself (trustrl.cli.build_parser), so the page
cannot fall out of step with the options."""

from __future__ import annotations

import argparse
import os
from typing import Any

MARKER = "<!-- trustrl-cli -->"


def _commands(parser: argparse.ArgumentParser, name: str) -> list[tuple[str, str]]:
    """(command line, help text) for `parser` and each of its subcommands, depth first."""
    out = [(name, parser.format_help())]
    for action in parser._actions:  # argparse keeps its subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                out += _commands(sub, f"{name} {sub_name}")
    return out


def render() -> str:
    """The Markdown of every command's help, at a fixed width (80 columns)."""
    from trustrl.cli import build_parser

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "80"
    try:
        commands = _commands(build_parser(), "trustrl")
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    parts = []
    for name, text in commands:
        parts += [f"## {name}", "", "```text", text.rstrip(), "```", ""]
    return "\n".join(parts)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """MkDocs' event: fill in the marker where a page holds it."""
    return markdown.replace(MARKER, render()) if MARKER in markdown else markdown
