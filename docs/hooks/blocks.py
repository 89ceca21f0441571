"""The generated blocks of the manual and the README, written from kbench's own
definitions so that they cannot go stale, and kept in the Markdown itself so that they
read the same on GitHub and on the built site.

A block is the text between ``<!-- begin: NAME -->`` and ``<!-- end: NAME -->`` (each a
line of its own); NAME says what it holds:

- ``cli-reference``: every command's ``--help``, from the parser ``kbench`` runs
  (:func:`kbench.cli.app.build_parser`), a section and a code block per subcommand,
  then the data-parallel table's parser; formatted 88 columns wide whatever the terminal;
- ``sweep-keys``: the run settings a sweep file takes (the fields of
  :class:`kbench.results.config.RunConfig`);
- ``include PATH``: the file PATH of the checkout in a code block;
- ``ran-where``: what kbench has run on, from ``docs/hooks/ran_where.yaml``;
- ``results STORE``: a store of the checkout as the results page shows it (its machine,
  software, runs, the command that measures it again, ``kbench compare``'s tables), from
  its result documents (``docs/hooks/results_page.py``).

``python docs/hooks/blocks.py`` rewrites every block in README.md and docs/ (with the
keras3 environment's Python, which has kbench's parser's packages);
``--check`` only lists the stale ones (exit 1). ``tests/test_docs.py`` fails while one is
stale. Only the parser and the config are imported (numpy, no framework).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Tuple

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^<!-- begin: (.+?) -->\n(.*?)^<!-- end: \1 -->$", re.DOTALL | re.MULTILINE)
LANGUAGES = {".yaml": "yaml", ".yml": "yaml", ".py": "python", ".sh": "sh"}
WIDTH = "88"
RAN_WHERE = Path(__file__).with_name("ran_where.yaml")


@contextmanager
def _help_width() -> Iterator[None]:
    """argparse sizes help to the terminal (``COLUMNS``): fix it for the docs."""
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


def _code_block(text: str, language: str = "text") -> str:
    return f"```{language}\n" + text.rstrip() + "\n```\n"


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


def include(relative: str) -> str:
    """A file of the checkout as a code block; a missing file is an error."""
    path = ROOT / relative
    if not path.is_file():
        raise FileNotFoundError(f"<!-- begin: include {relative} -->: no such file {path}")
    return _code_block(path.read_text(), LANGUAGES.get(path.suffix, "text"))


def _table(header: List[str], rows: List[List[str]]) -> List[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def ran_where(data: Dict) -> str:
    """The grid of ``ran_where.yaml``: backends by platform, the sampler's sources, and
    what each status means."""
    backends = data["backends"]
    rows = []
    for platform in data["platforms"]:
        cells = platform["backends"]
        cells = {b: cells for b in backends} if isinstance(cells, str) else cells
        if set(cells) != set(backends) or not set(cells.values()) <= set(data["statuses"]):
            raise ValueError(
                f"ran_where.yaml, {platform['name']}: expected one of "
                f"{sorted(data['statuses'])} for each of {backends}; received {cells}"
            )
        rows.append([platform["name"], *(cells[b] for b in backends), platform["note"]])
    lines = _table(["platform", *backends, "note"], rows) + [""]
    sources = [[s["name"], s["status"], s["note"]] for s in data["sources"]]
    lines += _table(["sampler source", "status", "note"], sources) + [""]
    lines += ["; ".join(f"*{name}*: {meaning}" for name, meaning in data["statuses"].items())]
    return "\n".join(lines) + ".\n"


def _ran_where_block() -> str:
    import yaml

    return ran_where(yaml.safe_load(RAN_WHERE.read_text()))


GENERATORS: Dict[str, Callable[[], str]] = {
    "cli-reference": cli_reference,
    "sweep-keys": sweep_keys,
    "ran-where": _ran_where_block,
}


def block_text(name: str) -> str:
    """What the block NAME holds."""
    if name.startswith("include "):
        return include(name[len("include ") :])
    if name.startswith("results "):
        _checkout_first()
        from results_page import results_block  # docs/hooks/, beside this file

        return results_block(name[len("results ") :])
    if name not in GENERATORS:
        known = ", ".join(sorted(GENERATORS))
        raise KeyError(
            f"no generated block {name!r}: expected one of {known}, include PATH, results STORE"
        )
    return GENERATORS[name]()


def rewritten(markdown: str) -> str:
    """``markdown`` with every block holding what it should."""

    def fill(match: re.Match) -> str:
        name = match.group(1)
        return f"<!-- begin: {name} -->\n{block_text(name)}<!-- end: {name} -->"

    return BLOCK.sub(fill, markdown)


def pages() -> List[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def main(argv: List[str]) -> int:
    stale = []
    for page in pages():
        text = page.read_text()
        new = rewritten(text)
        if new != text:
            stale.append(str(page.relative_to(ROOT)))
            if "--check" not in argv:
                page.write_text(new)
    verb = "stale" if "--check" in argv else "rewritten"
    print(f"{verb}: {', '.join(stale)}" if stale else "every generated block is current")
    return 1 if stale and "--check" in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
