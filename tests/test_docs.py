"""The manual builds and nothing in it rots; the README stays a short front door.

``mkdocs build --strict`` (the keras3 environment's Python, into a temporary folder)
must pass: mkdocs.yml turns a link to a missing page or anchor and a page left out of
the nav into warnings, which strict mode makes errors. The CLI reference, written at
build time from kbench's parser, must list every ``kbench`` command. Every page under
docs/ must be in the nav (read from mkdocs.yml here too). README.md is at most 250
lines and each of its relative links points at a file, or a heading, that exists.

Every ``kbench`` command line in README.md and docs/ (in code blocks and in inline
code) goes through kbench's real parser: a command shown with arguments must parse as
written (a missing required flag or an unknown one fails here), a form with
placeholders (``kbench sweep FILE --windows``) must name a real command and real
flags, and the sweep and reproduce commands in code blocks run their ``--dry-run``.
The generated blocks (the CLI reference, the sweep keys, included files, the "what ran
where" grid of ``docs/hooks/ran_where.yaml``) must hold what ``docs/hooks/blocks.py``
writes, and the grid must be in every page that states what ran where.

No framework process: mkdocs imports only kbench's parser. Each checker is first
proven on a planted mistake (a broken link, a page missing from the nav, a strict
build of a copy of the manual with a dead link), so a check that passes here can fail.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional, Set

import pytest
import yaml

from kbench.cli import app
from kbench.run.environments import envs_dir
from kbench.setup.platforms import venv_python

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "docs" / "hooks"))
import blocks  # noqa: E402  (docs/hooks/blocks.py, not a package)

GRID_PAGES = (
    "README.md",
    "docs/index.md",
    "docs/guides/gpus.md",
    "docs/guides/laptops-and-edge.md",
)
DOCS = ROOT / "docs"
README_MAX_LINES = 250
FRAMEWORKS = ("tensorflow", "jax", "torch", "keras", "mxnet")
# [text](target) outside code; targets with a scheme (https:, mailto:) are not files
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)
# a kbench command as the docs show it: `kbench ...`, scripts/kbench, scripts\kbench,
# after VAR=value assignments
KBENCH_COMMAND = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:scripts[/\\])?kbench\s+(.+)$")
# FILE, STORE, A,B, [--flag F], ...: a form to fill in, not a command to run
PLACEHOLDER = re.compile(r"[A-Z][A-Z_,]*|\[.*|.*\]|\.\.\.")
DRY_RUN_COMMANDS = ("sweep", "reproduce")


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


@dataclass(frozen=True)
class DocCommand:
    """One kbench command line the docs show: where, whether in a code block, its words
    after ``kbench``."""

    where: str
    in_block: bool
    words: List[str]

    @property
    def is_form(self) -> bool:
        return any(PLACEHOLDER.fullmatch(word) for word in self.words)


def doc_commands(markdown: str, where: str) -> Iterator[DocCommand]:
    """Every kbench command in ``markdown``: code-block lines (``$ `` and trailing
    comments dropped, ``\\`` continuations joined) and inline code spans."""
    in_block, pending = False, ""
    for number, line in enumerate(markdown.splitlines(), 1):
        text = line.strip()
        if text.startswith("```"):
            in_block, pending = not in_block, ""
            continue
        if in_block:
            text = pending + re.sub(r"^\$\s+", "", text)
            pending = text[:-1] + " " if text.endswith("\\") else ""
            spans = [] if pending else [text]
        else:
            spans = re.findall(r"`([^`]+)`", line)
        for span in spans:
            found = KBENCH_COMMAND.match(span)
            if found:
                words = shlex.split(found.group(1), comments=True)
                yield DocCommand(f"{where}:{number}", in_block, words)


def option_problems(parser: argparse.ArgumentParser, words: List[str]) -> List[str]:
    """The options in ``words`` that ``parser`` does not have (values skipped)."""
    unknown, value_next = [], False
    for word in words:
        if word == "--":
            break
        if value_next or not word.startswith("-") or re.match(r"-\d", word):
            value_next = False
            continue
        action = parser._option_string_actions.get(word.split("=")[0])
        if action is None:
            unknown.append(word.split("=")[0])
        value_next = action is not None and action.nargs != 0 and "=" not in word
    return unknown


def command_problem(command: DocCommand) -> Optional[str]:
    """Why ``command`` would not run as the docs show it, or None."""
    parser = app.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    name = command.words[0]
    if PLACEHOLDER.fullmatch(name):
        return None
    if name not in commands.choices:
        return f"{command.where}: no command {name!r} (kbench {' '.join(command.words)})"
    unknown = option_problems(commands.choices[name], command.words[1:])
    if unknown:
        return f"{command.where}: kbench {name} has no {', '.join(unknown)}"
    if command.is_form or (len(command.words) == 1 and not command.in_block):
        return None  # a form to fill in, or the command's name in prose
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(command.words)
    except SystemExit as stopped:
        if stopped.code != 0:
            said = errors.getvalue().strip().splitlines()[-1]
            return f"{command.where}: kbench {' '.join(command.words)}: {said}"
    return None


def manual_commands() -> List[DocCommand]:
    """The commands of README.md and docs/, outside the generated blocks (the CLI
    reference's examples are the parser's own epilogs; included files are not docs)."""
    found = []
    for page in blocks.pages():
        written = blocks.BLOCK.sub(lambda m: "\n" * m.group(0).count("\n"), page.read_text())
        found += doc_commands(written, str(page.relative_to(ROOT)))
    return found


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


PLANTED_DOC = """
Run `kbench run --model my.py:build` and `kbench sweep --warm`; `kbench run` alone
and the form `kbench sweep FILE --windows` are fine, `kbench run -b A --nope X` is not.

```sh
$ scripts/kbench run -b torch -m mlp \\
    --steps 5            # joined, fine
scripts/kbench run -b torch --no-such-flag
scripts/kbench frobnicate
```
"""


def test_command_checker_finds_the_planted_mistakes():
    problems = [command_problem(c) for c in doc_commands(PLANTED_DOC, "planted")]
    found = [p for p in problems if p]
    assert len(problems) == 8
    assert [p.split(":")[1] for p in found] == ["2", "2", "3", "8", "9"], found
    assert "required: --backend/-b" in found[0] and "FILE.yaml" in found[1]
    assert "has no --nope" in found[2] and "has no --no-such-flag" in found[3]
    assert "no command 'frobnicate'" in found[4]


def test_every_command_in_the_docs_parses():
    commands = manual_commands()
    assert len(commands) > 100, "the extractor found too few commands: is it broken?"
    problems = [p for p in map(command_problem, commands) if p]
    assert not problems, "commands in the docs that would not run:\n" + "\n".join(problems)


def help_examples() -> List[DocCommand]:
    """The ``kbench ...`` example lines of every command's ``--help`` (its epilog), each
    cut at the two spaces before its description."""
    parser = app.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found = []
    for name, sub in [("kbench", parser), *commands.choices.items()]:
        for line in (sub.epilog or "").splitlines():
            shown = re.split(r"\s{2,}", line.strip())[0]
            match = KBENCH_COMMAND.match(shown)
            if match:
                words = shlex.split(match.group(1))
                found.append(DocCommand(f"kbench {name} --help", True, words))
    return found


def test_every_example_in_the_help_parses():
    examples = help_examples()
    assert len(examples) > 20, "the help's examples were not found: is the extractor broken?"
    problems = [p for p in map(command_problem, examples) if p]
    assert not problems, "examples in --help that would not run:\n" + "\n".join(problems)


def test_sweep_and_reproduce_commands_in_the_docs_dry_run(monkeypatch, capsys):
    """Each ``kbench sweep`` and ``kbench reproduce`` of a code block, with
    ``--dry-run``, from the checkout (their files are relative to it): it plans and
    writes nothing (the checkout's top level is unchanged)."""
    monkeypatch.chdir(ROOT)
    before = sorted(p.name for p in ROOT.iterdir())
    shown = [c for c in manual_commands() if c.in_block and c.words[0] in DRY_RUN_COMMANDS]
    runnable = [c for c in shown if "--list" not in c.words and not c.is_form]
    assert len(runnable) >= 5
    for command in runnable:
        words = [w for w in command.words if w != "--dry-run"] + ["--dry-run"]
        if "--executor" in words:
            continue  # needs sbatch; its dry run is test_slurm's
        assert app.main(words) == 0, f"{command.where}: kbench {' '.join(words)}"
    assert sorted(p.name for p in ROOT.iterdir()) == before


def test_blocks_checker_finds_a_stale_block():
    current = blocks.include("sweeps/lenet_epochs.yaml")
    name = "include sweeps/lenet_epochs.yaml"
    page = f"x\n<!-- begin: {name} -->\n{{}}<!-- end: {name} -->\n"
    assert blocks.rewritten(page.format(current)) == page.format(current)
    assert blocks.rewritten(page.format("old copy\n")) == page.format(current)
    with pytest.raises(KeyError, match="no generated block 'nope'"):
        blocks.rewritten("<!-- begin: nope -->\n<!-- end: nope -->\n")


def test_ran_where_refuses_a_status_it_does_not_define():
    data = yaml.safe_load(blocks.RAN_WHERE.read_text())
    assert "| ran |" in blocks.ran_where(data)
    data["platforms"][0]["backends"] = {b: "maybe" for b in data["backends"]}
    with pytest.raises(ValueError, match="Linux x86-64, CPU: expected one of"):
        blocks.ran_where(data)


def test_the_results_page_measures_again_what_its_documents_hold():
    """Issue 53: each results section's command, parsed by ``kbench run``'s own parser,
    gives the settings the section's runs shared (so it measures the same again)."""
    import results_page

    from kbench.cli.arguments import settings_of

    stores = re.findall(r"^<!-- begin: results (.+) -->$", (DOCS / "results.md").read_text(),
                        re.MULTILINE)  # fmt: skip
    assert {"tests/gpu_h100/smoke", "tests/stores/v3_windows"} <= set(stores)
    for store in stores:
        runs = results_page.load(store)
        words = results_page.command(runs)
        args = app.build_parser().parse_args(words[1:])
        assert args.backend == list(dict.fromkeys(r.config["backend"] for r in runs)), store
        given = settings_of(args)
        for name in set(given) - set(results_page.varying(runs)) - set(results_page.NOT_FLAGS):
            stored = runs[0].config.get(name)
            if stored is not None:  # None: left to kbench's own rule, as the parser leaves it
                assert given[name] == stored, (store, name, given[name], stored)
    assert "--window 1" in " ".join(results_page.command(results_page.load(stores[-1])))


def test_output_blocks_are_marked_and_their_columns_read():
    """Issue 53: the commands shown with their output carry the marker that
    ``docs/hooks/outputs.py`` re-runs them by (it runs frameworks: not in the suite), and
    its column reader finds a table the command no longer prints as it is shown."""
    import outputs

    found = [block for page in outputs.pages() for block in outputs.blocks_of(page)]
    assert {b.page.name for b in found} >= {"README.md", "own-model-and-data.md"}
    for block in found:
        assert command_problem(DocCommand(str(block.page), True, list(block.command))) is None
        assert outputs.columns(block.shown), f"{block.page}: no table in its output block"
        for name in block.files:
            assert (ROOT / name).is_file() or name in outputs.code_blocks(block.page), name
    shown = "mlp on synthetic\nbackend  img/s  vs tensorflow  first step s\n-------  -----\n"
    printed = shown.replace("vs tensorflow", "vs torch")  # the baseline's name is no column
    assert outputs.column_problems(shown, printed) == []
    printed = printed.replace("  first step s", "  test acc  first step s")
    assert outputs.column_problems(shown, printed) == [
        "the block shows ['backend', 'img/s', 'vs BASELINE', 'first step s']; it prints "
        "['backend', 'img/s', 'vs BASELINE', 'test acc', 'first step s']"
    ]


def test_generated_blocks_are_current():
    stale = [
        str(p.relative_to(ROOT))
        for p in blocks.pages()
        if blocks.rewritten(p.read_text()) != p.read_text()
    ]
    assert not stale, (
        f"stale generated blocks in {stale}: run envs/keras3/bin/python docs/hooks/blocks.py"
    )
    for page in GRID_PAGES:
        assert "<!-- begin: ran-where -->" in (ROOT / page).read_text(), f"{page} lacks the grid"


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
