"""Which image_data_format is faster for a backend on this machine?

Runs ``kbench run`` for each format in turn, interleaved (A B A B ...), and reports
the median img/s of each and the median of the per-round ratio with its spread.
Used to choose keras_configs/<backend>.json defaults.

    envs/keras3/bin/python benchmarks/data_format.py --backend torch --model small_cnn --rounds 5
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
from pathlib import Path

from kbench.results.config import RunConfig
from kbench.run.runner import Runner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="torch")
    parser.add_argument("--model", default="small_cnn")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    formats = ("channels_last", "channels_first")
    speeds = {f: [] for f in formats}
    with tempfile.TemporaryDirectory() as out:
        runner = Runner(output_dir=Path(out))
        for _ in range(args.rounds):
            for data_format in formats:
                config = RunConfig(
                    backend=args.backend,
                    model=args.model,
                    dataset="synthetic",
                    steps=args.steps,
                    warmup_steps=10,
                    batch_size=args.batch_size,
                    data_format=data_format,
                    test_samples=64,
                )
                (result,) = runner.run_all([config])
                if not result.ok:
                    raise SystemExit(f"{data_format}: {result.status}: {result.reason}")
                speeds[data_format].append(result.metrics["images_per_sec"])
    ratios = [b / a for a, b in zip(speeds[formats[0]], speeds[formats[1]])]
    print(f"{args.backend}/{args.model}, batch {args.batch_size}, {args.rounds} interleaved rounds")
    for data_format in formats:
        values = speeds[data_format]
        print(
            f"  {data_format:15s} median {statistics.median(values):8,.0f} img/s "
            f"(min {min(values):,.0f}, max {max(values):,.0f})"
        )
    print(
        f"  channels_first / channels_last: median x{statistics.median(ratios):.2f} "
        f"(min x{min(ratios):.2f}, max x{max(ratios):.2f})"
    )


if __name__ == "__main__":
    main()
