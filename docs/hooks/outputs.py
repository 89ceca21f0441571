"""The commands README.md and docs/ show with their output, re-run.

An output block is a code block right after a line
``<!-- output: kbench run ... | tiny: FLAGS | files: NAME ... -->``: the command as
the page gives it, the flags that make it tiny (appended), and the files it needs in
its working folder (a path of the checkout is copied; another name is the page's own
code block that starts with ``# NAME``, written, and run when it is a ``.py`` file).

    python docs/hooks/outputs.py            # re-run each at its tiny size (in a temporary
                                            # folder and store): exit 1 where a table's
                                            # columns are not those the block shows
    python docs/hooks/outputs.py --write    # re-run each as written, and rewrite its block
    python docs/hooks/outputs.py --list     # the blocks and their commands
    python docs/hooks/outputs.py README.md  # only the blocks of the pages named

Numbers are never checked (a tiny run's are not the page's); the columns of every table
are (:func:`columns`). Use the keras3 environment's Python, from the
checkout; the frameworks run, so this is not part of the suite (``tests/test_docs.py``
checks the markers and the column reader).
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- output: (.+?) -->\n```[a-z]*\n(.*?)^```$", re.DOTALL | re.MULTILINE)
HEADS = ("backend", "model", "run")  # the first column of the tables kbench prints


@dataclass(frozen=True)
class OutputBlock:
    page: Path
    command: Tuple[str, ...]  # the words after ``kbench``
    tiny: Tuple[str, ...]
    files: Tuple[str, ...]
    shown: str  # the block's text


def blocks_of(page: Path) -> List[OutputBlock]:
    found = []
    for match in MARKER.finditer(page.read_text()):
        parts = dict(_part(p) for p in match.group(1).split(" | "))
        words = shlex.split(parts.get("command", ""))
        if words[:1] != ["kbench"]:
            raise ValueError(f"{page}: an output marker's command starts with kbench: {words}")
        tiny = tuple(shlex.split(parts.get("tiny", "")))
        files = tuple(parts.get("files", "").split())
        found.append(OutputBlock(page, tuple(words[1:]), tiny, files, match.group(2)))
    return found


def _part(text: str) -> Tuple[str, str]:
    key, _, value = text.partition(": ")
    return (key, value) if key in ("tiny", "files") else ("command", text)


def pages() -> List[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def columns(text: str) -> List[Tuple[str, ...]]:
    """The column names of each table in ``text``, in order (split at 2+ spaces; ``vs
    tensorflow`` read as ``vs BASELINE``): a line followed by a ``---`` line, or whose
    first column is one kbench's tables start with."""
    lines = text.splitlines()
    found = []
    for number, line in enumerate(lines):
        names = tuple(re.split(r"\s{2,}", line.strip()))
        under = lines[number + 1].strip() if number + 1 < len(lines) else ""
        dashed = re.fullmatch(r"-+(\s+-+)*", under) is not None
        if line.strip() and (dashed or (names[0] in HEADS and len(names) > 2)):
            found.append(tuple(re.sub(r"^vs \S+$", "vs BASELINE", n) for n in names))
    return found


def column_problems(shown: str, printed: str) -> List[str]:
    """Each table the block shows whose columns the command no longer prints."""
    have = columns(printed)
    problems = []
    for table in columns(shown):
        same_head = [t for t in have if t[:2] == table[:2]]
        if table not in have:
            now = f"; it prints {list(same_head[0])}" if same_head else ""
            problems.append(f"the block shows {list(table)}{now}")
    return problems


def code_blocks(page: Path) -> Dict[str, str]:
    """The page's code blocks that start with ``# NAME``, by NAME (``make_data.py``)."""
    found = {}
    for match in re.finditer(r"^```[a-z]*\n# (\S+)[^\n]*\n(.*?)^```$", page.read_text(),
                             re.DOTALL | re.MULTILINE):  # fmt: skip
        found[match.group(1).rstrip(":")] = match.group(0).split("\n", 1)[1].rsplit("```", 1)[0]
    return found


def prepare(block: OutputBlock, folder: Path) -> None:
    written = code_blocks(block.page)
    for name in block.files:
        if (ROOT / name).is_file():
            shutil.copy(ROOT / name, folder / Path(name).name)
        elif name in written:
            (folder / name).write_text(written[name])
            if name.endswith(".py"):
                subprocess.run([sys.executable, name], cwd=folder, check=True, timeout=600)
        else:
            raise FileNotFoundError(f"{block.page}: {name} is no file of the checkout and no "
                                    "code block of the page")  # fmt: skip


def rerun(block: OutputBlock, tiny: bool) -> str:
    """The command's standard output, run in a temporary folder with a store of its own."""
    with tempfile.TemporaryDirectory(prefix="kbench-outputs-") as folder:
        prepare(block, Path(folder))
        words = [*block.command, *(block.tiny if tiny else ()), "--store", f"{folder}/store"]
        env = dict(__import__("os").environ, PYTHONPATH=str(ROOT))
        done = subprocess.run([sys.executable, "-m", "kbench", *words], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=1800)  # fmt: skip
        if done.returncode not in (0, 1):
            raise RuntimeError(f"kbench {' '.join(words)}: exit {done.returncode}\n{done.stderr}")
        return "\n".join(line for line in done.stdout.splitlines() if folder not in line)


def main(argv: Sequence[str]) -> int:
    only = [word for word in argv if not word.startswith("--")]  # pages, by path
    chosen = [page for page in pages() if not only or str(page.relative_to(ROOT)) in only]
    found = [block for page in chosen for block in blocks_of(page)]
    bad = 0
    for block in found:
        where = f"{block.page.relative_to(ROOT)}: kbench {' '.join(block.command)}"
        if "--list" in argv:
            print(where)
            continue
        printed = rerun(block, tiny="--write" not in argv)
        if "--write" in argv:
            text = block.page.read_text().replace(block.shown, printed.strip() + "\n", 1)
            block.page.write_text(text)
            print(f"rewritten: {where}")
            continue
        problems = column_problems(block.shown, printed)
        bad += bool(problems)
        print(f"{'STALE' if problems else 'ok'}: {where}")
        for problem in problems:
            print(f"  {problem}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
