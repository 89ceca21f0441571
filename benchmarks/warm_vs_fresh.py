"""Do warm windows measure what fresh processes measure? Interleaved, side by side.

For each backend one warm worker (kbench.run.windows) is started and warmed up; then,
round after round, every backend measures one warm window and one fresh-process run of
the same configuration, measuring as many steps as the warm window (the fresh run after
its own warmup steps). Reports, per backend, the median img/s of each with its 95%
interval (order statistics), the ratio of the medians (warm / fresh) and the median of
the per-round ratios; and each backend's ratio to the first one, warm and fresh.

    envs/keras3/bin/python benchmarks/warm_vs_fresh.py --backend tensorflow,jax,torch,mxnet \\
        --model small_cnn --rounds 6
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import Dict, List

from kbench.measure.stats import median_interval
from kbench.results.config import RunConfig
from kbench.run.runner import Runner
from kbench.run.windows import WindowWorker


def interval_text(values: List[float], spec: str = ",.0f") -> str:
    found = median_interval(values)
    if found is None:
        return "-"
    return (
        f"{format(found.median, spec)} ({format(found.low, spec)}-{format(found.high, spec)}, "
        f"{found.coverage:.0%}, n={found.n})"
    )


def measure(args: argparse.Namespace, out: Path) -> Dict[str, Dict[str, List[float]]]:
    """{backend: {"warm": [img/s per round], "fresh": [...]}}, interleaved round by round."""
    settings = dict(
        model=args.model, dataset="synthetic", batch_size=args.batch_size,
        warmup_steps=args.warmup_steps, train_samples=2048, test_samples=64,
    )  # fmt: skip
    configs = [RunConfig(backend=b, window_s=args.window, **settings) for b in args.backend]
    runner = Runner(output_dir=out)
    speeds = {b: {"warm": [], "fresh": []} for b in args.backend}
    with runner.session(configs) as session:
        workers = [WindowWorker.launch(runner, session, config) for config in configs]
        try:
            for worker in workers:
                worker.start()
                if worker.alive:
                    worker.warm_up()
                if not worker.alive:
                    gone = worker.worker.gone
                    raise SystemExit(f"{worker.label}: {gone.status}: {gone.reason}")
            for round_index in range(args.rounds):
                for position, worker in enumerate(workers):
                    warm = worker.window(round_index, position)  # the window's record
                    if warm["status"] != "ok":
                        raise SystemExit(f"warm {worker.label}: {warm['reason']}")
                    fresh_config = dataclasses.replace(
                        worker.config, window_s=None, epochs=None,
                        steps=worker.ready["window_steps"], repeat=round_index,
                    )  # fmt: skip
                    data = session.prepared.get(fresh_config)
                    fresh = runner.run_one(fresh_config, data, session.directory,
                                           session.python_path)  # fmt: skip
                    if not fresh.ok:
                        raise SystemExit(f"fresh {worker.label}: {fresh.reason}")
                    speeds[worker.config.backend]["warm"].append(warm["images_per_sec"])
                    speeds[worker.config.backend]["fresh"].append(fresh.metrics["images_per_sec"])
                print(f"round {round_index + 1} of {args.rounds} done", flush=True)
        finally:
            for worker in workers:
                worker.close()
    return speeds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", type=lambda text: text.split(","), default=["torch", "jax"])
    parser.add_argument("--model", default="small_cnn")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--window", type=float, default=1.0, help="seconds a window measures")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--warmup-steps", type=int, default=5)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as out:
        speeds = measure(args, Path(out))
    print(
        f"\n{args.model}, batch {args.batch_size}, synthetic data, {args.rounds} rounds "
        f"(each: a warm window then a fresh process, backend after backend), "
        f"{time.monotonic() - started:.0f} s"
    )
    print("img/s: median (95% interval, its coverage, n)")
    for backend, kinds in speeds.items():
        warm, fresh = kinds["warm"], kinds["fresh"]
        paired = [w / f for w, f in zip(warm, fresh)]
        of_medians = statistics.median(warm) / statistics.median(fresh)
        print(
            f"  {backend:12s} warm {interval_text(warm)}\n"
            f"  {'':12s} fresh {interval_text(fresh)}\n"
            f"  {'':12s} warm/fresh: ratio of medians x{of_medians:.3f}, "
            f"per-round x{interval_text(paired, '.3f')}"
        )
    base = args.backend[0]
    print(f"ratio to {base} (per round), warm vs fresh:")
    for backend in args.backend[1:]:
        for kind in ("warm", "fresh"):
            ratios = [b / a for a, b in zip(speeds[base][kind], speeds[backend][kind])]
            print(f"  {backend:12s} {kind:5s} x{interval_text(ratios, '.3f')}")


if __name__ == "__main__":
    main()
