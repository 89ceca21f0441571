"""What a framework process's start costs with and without Keras 3's unused imports.

Keras 3 imports scikit-learn, matplotlib, pandas and (on every backend) JAX when it is
imported, for features no kbench run uses, and ``keras.utils.set_random_seed`` imports
TensorFlow to seed it whatever the backend. kbench's workers keep them out while Keras
loads and seeds (``kbench.backends.keras3.OPTIONAL_IMPORTS``; TensorFlow is seeded when
something first imports it): the zoo's since issue 25's first stops, a user's model's
too since stop 45, whose workers imported everything until then. "every import" starts a
backend as such a worker did (those modules imported first, then the start and the
seeding); "as workers start" as every worker now does. Also measured: the CLI's start,
which imported matplotlib until it was imported only where a figure is drawn (the
difference is matplotlib's import in a process that has imported numpy).

Fresh interpreters, interleaved rounds (each way first in every other round), each
backend started as a worker starts it (its environment, threads, keras.json); reported:
each way's median wall and CPU seconds, and the CPU ratio.

    envs/keras3/bin/python benchmarks/process_starts.py --backend tensorflow,jax,torch --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

from kbench.run import environments

START = """
import importlib, sys
from kbench.backends import load_backend
if sys.argv[2] == "all":
    for name in ("sklearn", "matplotlib.pyplot", "pandas", "jax", "tensorflow"):
        importlib.import_module(name)
backend = load_backend(sys.argv[1])(threads=1)
backend.start(sys.argv[3])
backend.seed(0)
"""


def one_process(command: List[str], env: Dict[str, str], cwd: str) -> Tuple[float, float]:
    """(wall seconds, CPU seconds) of one fresh process."""
    before = os.times()
    began = time.perf_counter()
    subprocess.run(command, env=env, cwd=cwd, check=True, capture_output=True)
    wall = time.perf_counter() - began
    after = os.times()
    cpu = after.children_user - before.children_user
    cpu += after.children_system - before.children_system
    return wall, cpu


def compare(ways: Dict[str, Tuple[List[str], Dict[str, str]]], rounds: int, cwd: str) -> str:
    """Interleaved rounds of each way; one line per way and the CPU ratio of each later
    way to the first."""
    times: Dict[str, List[Tuple[float, float]]] = {name: [] for name in ways}
    names = list(ways)
    for index in range(rounds):
        for name in names if index % 2 == 0 else names[::-1]:
            times[name].append(one_process(*ways[name], cwd))
    lines = []
    for name, runs in times.items():
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        lines.append(f"  {name:34s} wall {wall:6.2f} s, CPU {cpu:6.2f} s")
    first = statistics.median(c for _, c in times[names[0]])
    for name in names[1:]:
        later = statistics.median(c for _, c in times[name])
        lines.append(f"  {name} x{later / first:.3f} of the CPU of {names[0]}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="tensorflow,jax,torch")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"medians of {args.rounds} fresh processes each way, interleaved")
    with tempfile.TemporaryDirectory(prefix="kbench-starts-") as scratch:
        python_path = environments.import_root(Path(scratch) / "pythonpath")
        for backend in args.backend.split(","):
            env, config = environments.process_environment(
                backend, Path(scratch) / backend, python_path, 1, None
            )
            data_format = config["image_data_format"]
            python = str(environments.interpreter_for(backend))
            ways = {
                f"{backend}, every import": (
                    [python, "-c", START, backend, "all", data_format],
                    env,
                ),
                f"{backend}, as workers start": (
                    [python, "-c", START, backend, "kept out", data_format],
                    env,
                ),
            }
            print(f"{backend}: the backend started (Keras imported and checked) and seeded")
            print(compare(ways, args.rounds, scratch))
        env = dict(os.environ, PYTHONPATH=str(python_path))
        with_matplotlib = "import numpy, matplotlib.colors, kbench.cli.app"
        ways = {
            "CLI, with matplotlib": ([sys.executable, "-c", with_matplotlib], env),
            "CLI, as it starts": ([sys.executable, "-c", "import kbench.cli.app"], env),
        }
        print("the CLI's import (kbench.cli.app)")
        print(compare(ways, args.rounds, scratch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
