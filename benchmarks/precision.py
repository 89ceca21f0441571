"""Does ``--target-precision`` reach its interval? One small training run, measured
until its median img/s is known to +-P (95%), on the machine as it is and, with
``--load``, beside as many spinning processes as the machine has cores.

For each run it prints why measuring stopped (``precision reached``, ``budget spent``,
``steps exhausted``), the steps it took, the interval reached and the seconds spent,
and the quality flags of the window (a busy machine is flagged, and its interval is
usually wider, so it takes longer or spends the budget). The "quiet" run is only as
quiet as the machine is: other work running meanwhile shows in its flags.

    envs/keras3/bin/python benchmarks/precision.py --backend torch --target 0.02 --budget 120
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List

from kbench.results.store import ResultStore

ROOT = Path(__file__).resolve().parent.parent


def measure(store: Path, args: argparse.Namespace) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kbench", "run", "-b", args.backend, "-m", "mlp",
         "--dataset", "synthetic", "--train-samples", str(args.batch_size * args.max_steps),
         "--test-samples", "64", "--batch-size", str(args.batch_size), "--epochs", "1",
         "--warmup-steps", "5", "--threads", str(args.threads), "--sample-interval", "0.2",
         "--target-precision", str(args.target), "--time-budget", str(args.budget),
         "--store", str(store)],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"kbench run failed (exit {done.returncode}):\n{done.stderr[-3000:]}")


def describe(store: Path) -> List[str]:
    lines = []
    for result in ResultStore(store).results():
        m = result.metrics
        p = m["precision"]
        interval = p["interval"] or {}
        width = p["half_width"]
        flags = (m.get("quality") or {}).get("flags") or ["none"]
        lines.append(
            f"  {result.config['backend']}: {p['stopped']} after {p['measured_steps']} steps "
            f"in {p['measured_s']:.1f} s ({p['checks']} checks); median "
            f"{interval.get('median', float('nan')):,.0f} img/s, 95% interval "
            f"{interval.get('low', float('nan')):,.0f}-{interval.get('high', float('nan')):,.0f}"
            f" (+-{'?' if width is None else f'{width:.1%}'}, target +-{p['target']:.1%}); "
            f"whole window {m['images_per_sec']:,.0f} img/s; flags: {'; '.join(flags)}"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="torch", help="default: torch")
    parser.add_argument("--target", type=float, default=0.02, help="default: 0.02 (+-2%%)")
    parser.add_argument("--budget", type=float, default=120.0, help="seconds (default: 120)")
    parser.add_argument("--max-steps", type=int, default=20000, help="default: 20000")
    parser.add_argument("--batch-size", type=int, default=64, help="default: 64")
    parser.add_argument("--threads", type=int, default=1, help="default: 1")
    parser.add_argument("--load", action="store_true", help="also run beside spinners")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kbench-precision-") as tmp:
        runs = [("as the machine is", Path(tmp) / "quiet", 0)]
        if args.load:
            runs.append((f"beside {os.cpu_count()} spinners", Path(tmp) / "loaded", os.cpu_count()))
        for name, store, spinners in runs:
            load = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                    for _ in range(spinners or 0)]  # fmt: skip
            try:
                measure(store, args)
            finally:
                for process in load:
                    process.kill()
                    process.wait()
            print(f"== {name}")
            print("\n".join(describe(store)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
