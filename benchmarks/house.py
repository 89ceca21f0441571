"""The size of the house: modules, lines and the longest functions of ``kbench/`` (and
``models/``), for closing notes that quote it before and after a change.

    python3 benchmarks/house.py            # this checkout
    python3 benchmarks/house.py --top 10   # more of the longest functions

A function's length is ``end_lineno - lineno + 1`` of its ``def`` (decorators and
docstring included), read with ``ast``; nothing is imported.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path
from typing import List, Tuple

ROOT = Path(__file__).resolve().parent.parent


def function_lengths(folder: Path) -> List[Tuple[int, str]]:
    """(lines, "path:line name") for every function and method under ``folder``."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                where = f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
                found.append((node.end_lineno - node.lineno + 1, where))
    return sorted(found, reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=5, help="longest functions listed (default: 5)")
    args = parser.parse_args()
    for folder in ("kbench", "models"):
        files = sorted((ROOT / folder).rglob("*.py"))
        lines = sum(len(p.read_text().splitlines()) for p in files)
        lengths = function_lengths(ROOT / folder)
        over_100 = sum(n > 100 for n, _ in lengths)
        over_60 = sum(n > 60 for n, _ in lengths)
        print(f"{folder}/: {len(files)} modules, {lines:,} lines, {len(lengths)} functions, "
              f"{over_100} over 100 lines, {over_60} over 60")  # fmt: skip
        for n, where in lengths[: args.top]:
            print(f"  {n:4d}  {where}")


if __name__ == "__main__":
    main()
