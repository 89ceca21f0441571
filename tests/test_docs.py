"""The manual builds and nothing in it rots; the README stays a short front door.

``mkdocs build --strict`` (the keras3 environment's Python, into a temporary folder)
must pass: mkdocs.yml turns a link to a missing page or anchor and a page left out of
the nav into warnings, which strict mode makes errors. The CLI reference, written at
build time from kbench's parser, must list every ``kbench`` command. Every page under
docs/ must be in the nav (read from mkdocs.yml here too). README.md is at most 250
lines and each of its relative links points at a file, or a heading, that exists.

No framework process: mkdocs imports only kbench's parser. Each checker is first
proven on a planted mistake (a broken link, a page missing from the nav, a strict
build of a copy of the manual with a dead link), so a check that passes here can fail.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Iterator, List, Set

import pytest
import yaml

from kbench.cli import app
from kbench.run.environments import envs_dir
from kbench.setup.platforms import venv_python

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README_MAX_LINES = 250
FRAMEWORKS = ("tensorflow", "jax", "torch", "keras", "mxnet")
# [text](target) outside code; targets with a scheme (https:, mailto:) are not files
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def docs_python() -> Path:
    """The keras3 environment's Python, which has mkdocs-material; else skip (or fail
    under scripts/test.sh), naming the command that creates it."""
    python = venv_python(envs_dir() / "keras3")
    if not python.exists():
        message = f"no keras3 environment ({python}); create it with scripts/setup_envs.sh keras3"
        if os.environ.get("KBENCH_REQUIRE_ALL_BACKENDS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return python


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")  # Material's banner, not a warning
    command = [str(docs_python()), "-m", "mkdocs", "build", "--strict", "-f", str(config)]
    return subprocess.run(
        command + ["-d", str(site)], env=env, capture_output=True, text=True, timeout=300
    )


def subcommand_names() -> List[str]:
    parser = app.build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(action.choices)


def without_fences(markdown: str) -> str:
    return re.sub(r"^```.*?^```", "", markdown, flags=re.DOTALL | re.MULTILINE)


def outside_code(markdown: str) -> str:
    """The text with fenced code blocks and code spans removed (their brackets are code)."""
    return re.sub(r"`[^`\n]*`", "", without_fences(markdown))


def heading_anchors(markdown: str) -> Set[str]:
    """GitHub's anchors for the headings: lower case, punctuation dropped, spaces to -."""
    anchors = set()
    for heading in re.findall(r"^#+ +(.+?) *$", without_fences(markdown), flags=re.MULTILINE):
        anchors.add(re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-"))
    return anchors


def broken_links(markdown: str, base: Path) -> List[str]:
    """The relative links of ``markdown`` (a file in ``base``) whose file is missing, and
    the in-page anchors (``#name``) that name no heading."""
    broken = []
    for target in LINK.findall(outside_code(markdown)):
        if SCHEME.match(target):
            continue
        path, _, anchor = target.partition("#")
        if not path:
            if anchor not in heading_anchors(markdown):
                broken.append(target)
        elif not (base / path).exists():
            broken.append(target)
    return broken


def nav_pages(nav) -> Iterator[str]:
    """Every page a mkdocs ``nav`` names, however deep its sections."""
    if isinstance(nav, str):
        yield nav
    elif isinstance(nav, list):
        for item in nav:
            yield from nav_pages(item)
    elif isinstance(nav, dict):
        for value in nav.values():
            yield from nav_pages(value)


def pages_on_disk(docs: Path, excluded: Set[str]) -> Set[str]:
    return {
        path.relative_to(docs).as_posix()
        for path in docs.rglob("*.md")
        if path.relative_to(docs).parts[0] not in excluded
    }


def pages_not_in_nav(nav, pages: Set[str]) -> Set[str]:
    return pages - set(nav_pages(nav))


def config() -> dict:
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text())


def excluded_folders(settings: dict) -> Set[str]:
    """The top-level folders ``exclude_docs`` names (``hooks/``)."""
    lines = (settings.get("exclude_docs") or "").splitlines()
    return {line.strip().strip("/") for line in lines if line.strip()}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple:
    site = tmp_path_factory.mktemp("site")
    return mkdocs_build(ROOT / "mkdocs.yml", site), site


# --- the checkers, proven on planted mistakes ---


def test_broken_links_finds_a_missing_file_and_a_missing_anchor(tmp_path):
    (tmp_path / "here.md").write_text("x")
    text = (
        "# Title\n\n## A `code` section\n\n[ok](here.md) [ok](here.md#x) [ok](#a-code-section) "
        "[web](https://example.org/none.md) `[code](none.md)`\n"
        "[gone](docs/none.md) [nowhere](#no-such-heading)\n"
    )
    assert broken_links(text, tmp_path) == ["docs/none.md", "#no-such-heading"]


def test_pages_not_in_nav_finds_a_page_left_out():
    nav = [{"Home": "index.md"}, {"Guides": [{"A": "guides/a.md"}]}]
    pages = {"index.md", "guides/a.md", "guides/b.md"}
    assert pages_not_in_nav(nav, pages) == {"guides/b.md"}
    assert pages_not_in_nav(nav, pages - {"guides/b.md"}) == set()


def test_strict_build_fails_on_a_dead_link(tmp_path):
    """A copy of the manual with one link to a page that does not exist must not build,
    and the error must name that link."""
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(DOCS, tmp_path / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "sweeps", tmp_path / "sweeps")  # files the pages include
    index = tmp_path / "docs" / "index.md"
    index.write_text(index.read_text() + "\n[rotten](guides/no-such-page.md)\n")
    result = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-page.md" in result.stdout + result.stderr


# --- the manual and the README ---


def test_manual_builds_strict(built):
    result, site = built
    assert result.returncode == 0, result.stdout + result.stderr
    assert (site / "index.html").is_file()


def test_cli_reference_lists_every_command(built):
    result, site = built
    assert result.returncode == 0, result.stderr
    page = (site / "reference" / "cli" / "index.html").read_text()
    names = subcommand_names()
    assert {"run", "sweep", "compare", "report", "ops", "reproduce", "exec"} <= set(names)
    missing = [name for name in names if f"usage: kbench {name}" not in page]
    assert not missing, f"the CLI reference lacks the --help of: {missing}"


def test_every_page_is_in_the_nav():
    settings = config()
    pages = pages_on_disk(DOCS, excluded_folders(settings))
    assert "index.md" in pages and "reference/cli.md" in pages
    assert not pages_not_in_nav(settings["nav"], pages), "add these pages to nav: in mkdocs.yml"
    named = set(nav_pages(settings["nav"]))
    assert named <= pages, f"the nav names pages that do not exist: {named - pages}"


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines; at most {README_MAX_LINES}: move the detail "
        "into docs/ and link to it"
    )


def test_readme_links_exist():
    text = (ROOT / "README.md").read_text()
    assert LINK.search(outside_code(text)), "README.md links nowhere: it is the docs' index"
    assert broken_links(text, ROOT) == []


def test_cli_parser_imports_no_framework():
    """The reference is built by importing kbench's parser, and every command and test
    process of the CLI starts with it: it must stay light (matplotlib took 0.28 s of its
    0.87 s, pandas is heavier still: both are imported where they are used)."""
    heavy = (*FRAMEWORKS, "matplotlib", "pandas")
    code = f"import sys, kbench.cli.app; print(','.join(m for m in {heavy!r} if m in sys.modules))"
    result = subprocess.run(
        [str(docs_python()), "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""
