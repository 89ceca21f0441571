"""What a kbench process start costs without bytecode for kbench's modules.

Where ``PYTHONDONTWRITEBYTECODE`` is set (as on this project's CI machines), Python
never writes ``__pycache__``, so every process that imports kbench (the CLI, each
worker, pytest's own) compiles kbench's modules from source at each start; it still
reads bytecode that exists, which ``scripts/test.sh`` writes once (``compileall``).

Copies kbench and its models into a scratch folder, then times, in interleaved rounds,
fresh interpreters importing ``--module`` from the copy without and with its bytecode;
reported: each way's median wall and CPU seconds, and their ratio.

    envs/keras3/bin/python benchmarks/bytecode.py --rounds 10
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one_start(folder: Path, module: str) -> tuple:
    """(wall seconds, CPU seconds) of a fresh interpreter importing ``module``."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=str(folder))
    before = os.times()
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import {module}"], env=env, check=True, cwd=folder)
    wall = time.perf_counter() - began
    after = os.times()
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--module", default="kbench.cli.app")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kbench-bytecode-") as scratch:
        source = Path(scratch) / "source"
        compiled = Path(scratch) / "compiled"
        for folder in (source, compiled):
            for package in ("kbench", "models"):
                shutil.copytree(
                    ROOT / package, folder / package, ignore=shutil.ignore_patterns("__pycache__")
                )
            (folder / "models").rename(folder / "kbench_models")
        compileall.compile_dir(str(compiled), quiet=1)
        times = {"source": [], "bytecode": []}
        for round_index in range(args.rounds):
            ways = [("source", source), ("bytecode", compiled)]
            for name, folder in ways if round_index % 2 == 0 else ways[::-1]:
                times[name].append(one_start(folder, args.module))
    print(f"import {args.module}: median of {args.rounds} fresh interpreters each")
    for name, runs in times.items():
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        print(f"  {name:9s} wall {wall:.3f} s, CPU {cpu:.3f} s")
    ratio = statistics.median(c for _, c in times["bytecode"]) / statistics.median(
        c for _, c in times["source"]
    )
    print(f"  bytecode x{ratio:.3f} of the CPU from source")
    return 0


if __name__ == "__main__":
    sys.exit(main())
