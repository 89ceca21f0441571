"""Does kbench notice a busy machine? The same small comparison, quiet and under load.

Runs one ``kbench run`` comparison (by default torch against jax, the MLP on
synthetic data) twice into two stores: once as the machine is, once beside as many
spinning processes (``while True: pass``) as the machine has cores, started before
and killed after. For each run it prints the other processes' share of the cores
and the flags (``metrics.quality``), then the throughput table ``kbench compare``
prints for each store. The flag should appear only under load. The "quiet" half is
only as quiet as the machine is: other work running meanwhile is flagged too, as it
should be.

    envs/keras3/bin/python benchmarks/interference.py --backend torch,jax
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List

from kbench.results.store import ResultStore

log = logging.getLogger("interference")
ROOT = Path(__file__).resolve().parent.parent


def kbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kbench", *args], cwd=ROOT, capture_output=True, text=True
    )


def measure(store: Path, backends: str, steps: int, repeats: int) -> str:
    done = kbench(
        "run", "-b", backends, "-m", "mlp", "--dataset", "synthetic", "--steps", str(steps),
        "--warmup-steps", "2", "--train-samples", "256", "--test-samples", "32",
        "--repeats", str(repeats), "--sample-interval", "0.1", "--store", str(store),
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"kbench run failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    warnings = [line for line in done.stderr.splitlines() if "busy" in line]
    return "\n".join(warnings)


def describe(store: Path) -> List[str]:
    lines = []
    for result in ResultStore(store).results():
        found = result.metrics.get("quality") or {}
        share = found.get("other_share")
        lines.append(
            f"  {result.config['backend']} #{result.config.get('repeat', 0) + 1}: "
            f"{result.metrics['images_per_sec']:,.0f} img/s, others used "
            f"{'?' if share is None else f'{share:.0%}'} of the cores given "
            f"({found.get('other_cores', 0) or 0:.2f} cores, {found.get('samples')} samples); "
            f"flags: {found.get('flags') or 'none'}"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="torch,jax", help="default: torch,jax")
    parser.add_argument("--steps", type=int, default=40, help="measured steps (default: 40)")
    parser.add_argument("--repeats", type=int, default=1, help="rounds (default: 1)")
    parser.add_argument(
        "--spinners", type=int, default=os.cpu_count() or 2, help="default: the cores"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kbench-interference-") as tmp:
        quiet, loaded = Path(tmp) / "quiet", Path(tmp) / "loaded"
        measure(quiet, args.backend, args.steps, args.repeats)
        load = [
            subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(args.spinners)
        ]
        try:
            said = measure(loaded, args.backend, args.steps, args.repeats)
        finally:
            for process in load:
                process.kill()
                process.wait()
        for name, store in (("quiet", quiet), (f"beside {args.spinners} spinners", loaded)):
            print(f"== {name}")
            print("\n".join(describe(store)))
            compared = kbench("compare", "--store", str(store))
            print(compared.stdout.split("\n\n")[0])  # the throughput table
            print(compared.stdout.split("\n\n")[1])  # the speed table
            print()
        print("kbench's own warnings under load:")
        print(said or "  (none)")
        flagged = {
            name: any((r.metrics.get("quality") or {}).get("flags") for r in
                      ResultStore(store).results())
            for name, store in (("quiet", quiet), ("loaded", loaded))
        }  # fmt: skip
        print(f"\nflag appears: quiet {flagged['quiet']}, loaded {flagged['loaded']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
