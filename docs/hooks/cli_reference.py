"""MkDocs hook: pages written at build time from kbench's own definitions, so they
cannot go stale.

``<!-- cli-reference -->`` in a page becomes every command's ``--help`` text, taken
from the parser ``kbench`` itself runs (:func:`kbench.cli.app.build_parser`), one
section and one code block per subcommand, then the data-parallel table's parser.
``<!-- sweep-keys -->`` becomes the list of run settings a sweep file takes (the
fields of :class:`kbench.results.config.RunConfig`), and ``<!-- include: PATH -->`` the
file PATH of the checkout in a code block (each marker a line of its own). Only the
parser and the config are imported (numpy, no framework); the help is formatted 88
columns wide whatever the terminal.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Iterator, List, Tuple

ROOT = Path(__file__).resolve().parents[2]
CLI_MARKER = "<!-- cli-reference -->"
SWEEP_KEYS_MARKER = "<!-- sweep-keys -->"
INCLUDE = re.compile(r"^<!-- include: (\S+) -->$", re.MULTILINE)  # a line of its own
LANGUAGES = {".yaml": "yaml", ".yml": "yaml", ".py": "python", ".sh": "sh"}
WIDTH = "88"


@contextmanager
def _help_width() -> Iterator[None]:
    """argparse sizes help to the terminal (``COLUMNS``): fix it for the build."""
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        yield
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def _checkout_first() -> None:
    """Read the parser of the checkout being documented, not of another install."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


def subcommands(parser: argparse.ArgumentParser) -> List[Tuple[str, str, str]]:
    """(name, one-line summary, full --help) of each subcommand, in the parser's order."""
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    summaries = {choice.dest: choice.help or "" for choice in action._choices_actions}
    with _help_width():
        return [
            (name, summaries.get(name, ""), sub.format_help())
            for name, sub in action.choices.items()
        ]


def _code_block(text: str) -> str:
    return "```text\n" + text.rstrip() + "\n```\n"


def cli_reference() -> str:
    """The reference as Markdown: the top-level help, then a section per command."""
    _checkout_first()
    from kbench.cli import app, distributed_table

    parser = app.build_parser()
    with _help_width():
        parts = ["## kbench\n", _code_block(parser.format_help())]
    for name, summary, text in subcommands(parser):
        parts += [f"## kbench {name}\n", f"{summary[:1].upper()}{summary[1:]}.\n"]
        parts.append(_code_block(text))
    with _help_width():
        table_help = distributed_table.build_parser().format_help()
    parts += ["## python -m kbench.cli.distributed_table\n", _code_block(table_help)]
    return "\n".join(parts)


def sweep_keys() -> str:
    """The run settings a sweep file's ``settings`` and ``matrix`` take, as a list."""
    _checkout_first()
    from kbench.results.config import RunConfig

    names = [f.name for f in fields(RunConfig) if f.name != "repeat"]
    return ", ".join(f"`{name}`" for name in names) + "\n"


def include(match: re.Match[str]) -> str:
    """A file of the checkout as a code block; a missing file fails the build."""
    path = ROOT / match.group(1)
    if not path.is_file():
        raise FileNotFoundError(f"<!-- include: {match.group(1)} -->: no such file {path}")
    language = LANGUAGES.get(path.suffix, "text")
    return f"```{language}\n" + path.read_text().rstrip() + "\n```"


def on_page_markdown(markdown: str, page, config, files) -> str:
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    if SWEEP_KEYS_MARKER in markdown:
        markdown = markdown.replace(SWEEP_KEYS_MARKER, sweep_keys())
    return INCLUDE.sub(include, markdown)
