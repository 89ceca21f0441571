"""What each optimization switch does to throughput, backend by backend.

For every (backend, switch, model) the run with the switch off and the run with it
on alternate round by round, each in a fresh worker process; the table reports the
median img/s of each, the median of the per-round ratio on/off with its range, and
the first step (where compilation happens) of each. Only switches a backend has
are measured (see kbench.backends.switches).

    envs/keras3/bin/python benchmarks/switches.py --rounds 3
    envs/keras3/bin/python benchmarks/switches.py --backend jax --model mlp --rounds 5
    envs/keras3/bin/python benchmarks/switches.py --backend mxnet-gluon --threads 1
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Tuple

from kbench.results.config import RunConfig
from kbench.run import environments
from kbench.run.runner import Runner

# (backend, switch, value when off, value when on)
PAIRS: Tuple[Tuple[str, str, Any, Any], ...] = (
    ("tensorflow", "jit_compile", "off", "on"),
    ("tensorflow", "run_eagerly", False, True),
    ("tensorflow", "mixed_precision", "off", "bfloat16"),
    ("tensorflow", "onednn", "off", "on"),  # the CPU kernel library (issue 24)
    ("jax", "jit_compile", "off", "on"),
    ("jax", "mixed_precision", "off", "bfloat16"),
    ("torch", "jit_compile", "off", "on"),
    ("torch", "mixed_precision", "off", "bfloat16"),
    ("torch-native", "torch_compile", False, True),
    ("torch-native", "mixed_precision", "off", "bfloat16"),
    ("mxnet-gluon", "hybridize", False, True),
)


@dataclass
class Pair:
    backend: str
    switch: str
    model: str
    off: List[float] = field(default_factory=list)
    on: List[float] = field(default_factory=list)
    first_off: List[float] = field(default_factory=list)
    first_on: List[float] = field(default_factory=list)
    failure: str = ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", help="only this backend (default: every runnable one)")
    parser.add_argument("--switch", help="only this switch")
    parser.add_argument("--model", default="mlp,small_cnn", help="comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup-steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, help="threads per run (default: every core)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    runnable = {b for b, missing in environments.runnable_backends().items() if missing is None}
    pairs = [
        Pair(backend, switch, model)
        for backend, switch, _, _ in PAIRS
        for model in args.model.split(",")
        if backend in runnable and args.backend in (None, backend) and args.switch in (None, switch)
    ]
    values: Dict[Tuple[str, str], Tuple[Any, Any]] = {(b, s): (o, n) for b, s, o, n in PAIRS}
    with tempfile.TemporaryDirectory() as out:
        runner = Runner(output_dir=Path(out))
        for round_index in range(args.rounds):
            for pair in pairs:
                if pair.failure:
                    continue
                off, on = values[(pair.backend, pair.switch)]
                # Alternate which goes first, so that a drifting machine favours neither.
                order = [(off, "off"), (on, "on")][:: 1 if round_index % 2 == 0 else -1]
                for value, side in order:
                    config = RunConfig(
                        backend=pair.backend,
                        model=pair.model,
                        dataset="synthetic",
                        steps=args.steps,
                        warmup_steps=args.warmup_steps,
                        batch_size=args.batch_size,
                        train_samples=args.batch_size * 8,
                        test_samples=64,
                        sample_interval_s=0,
                        repeat=round_index,
                        threads=args.threads,
                        **{pair.switch: value},
                    )
                    (result,) = runner.run_all([config])
                    if not result.ok:
                        pair.failure = f"{side}: {result.status}: {result.reason}"
                        break
                    getattr(pair, side).append(result.metrics["images_per_sec"])
                    getattr(pair, f"first_{side}").append(result.metrics["first_step_s"])
    print(
        f"batch {args.batch_size}, {args.steps} measured steps after {args.warmup_steps} warmup, "
        f"{args.rounds} rounds, synthetic data, {args.threads or 'all'} thread(s); "
        "ratio = img/s on / img/s off, per round"
    )
    header = (
        f"{'backend':13s} {'switch':16s} {'model':10s} {'off img/s':>10s} {'on img/s':>10s} "
        f"{'on/off median (range)':>24s} {'first step s off/on':>20s}"
    )
    print(header)
    print("-" * len(header))
    for p in pairs:
        if p.failure:
            print(f"{p.backend:13s} {p.switch:16s} {p.model:10s} failed: {p.failure}")
            continue
        ratios = [b / a for a, b in zip(p.off, p.on)]
        ratio = (
            f"x{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
            if ratios
            else "-"
        )
        first = (
            f"{statistics.median(p.first_off):.2f}/{statistics.median(p.first_on):.2f}"
            if p.first_off and p.first_on
            else "-"
        )
        print(
            f"{p.backend:13s} {p.switch:16s} {p.model:10s} {statistics.median(p.off):10,.0f} "
            f"{statistics.median(p.on):10,.0f} {ratio:>24s} {first:>20s}"
        )


if __name__ == "__main__":
    main()
