"""What a results store's bookkeeping costs per run as a sweep grows.

``ResultStore.add`` saves a document and rewrites the index (one JSON line per run).
Before, each add parsed, checked and serialised every entry again (through
``dataclasses.asdict``, which deep-copies each config): the cost of an add grew with the
store, so a sweep's bookkeeping was quadratic in its runs. Now a store reuses the lines
it last read or wrote while the index file is still the one it saw.

Adds ``--runs`` realistic documents (a sweep run's config and metrics) to a fresh store
and reports the median time of an add in the first and the last ``--window`` adds, in
rounds (each round a new store), with their ratio: near x1 means the cost per add no
longer grows with the store; what is left is writing the index file itself.

    envs/keras3/bin/python benchmarks/store_adds.py --runs 500 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kbench.results.result import RunResult  # noqa: E402
from kbench.results.store import ResultStore  # noqa: E402


def document(index: int) -> RunResult:
    config = {
        "backend": ("tensorflow", "jax", "torch", "mxnet")[index % 4], "model": "resnet20",
        "dataset": "cifar10", "batch_size": 64, "repeat": index // 4, "mode": "train",
        "epochs": 2, "optimizer": "adam", "learning_rate": 0.001, "threads": 2, "seed": 0,
        "timeout_s": 1800.0, "data_format": "channels_last", "warmup_steps": 5,
    }  # fmt: skip
    return RunResult(
        run_id=f"20261127T000000Z-run-{index:06d}", status="ok", reason=None, config=config,
        started_at=f"2026-11-27T00:{index // 60 % 60:02d}:{index % 60:02d}", wall_time_s=10.0,
        environment={"machine": {"hostname": "bench"}}, data={"name": "cifar10"},
        metrics={"images_per_sec": 100.0 + index, "step_time_s": {"p50": 0.1, "p90": 0.12}},
        sweep={"name": "bench", "run_key": f"key-{index}"},
    )  # fmt: skip


def one_round(runs: int, window: int) -> tuple:
    with tempfile.TemporaryDirectory() as folder:
        store = ResultStore(Path(folder))
        seconds = []
        for index in range(runs):
            result = document(index)
            began = time.perf_counter()
            store.add(result)
            seconds.append(time.perf_counter() - began)
    return statistics.median(seconds[:window]), statistics.median(seconds[-window:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--window", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    firsts, lasts, ratios = [], [], []
    for _ in range(args.rounds):
        first, last = one_round(args.runs, args.window)
        firsts.append(first)
        lasts.append(last)
        ratios.append(last / first)
    first_ms, last_ms = statistics.median(firsts) * 1e3, statistics.median(lasts) * 1e3
    print(
        f"{args.runs} adds, {args.rounds} rounds: median add {first_ms:.2f} ms "
        f"in the first {args.window}, {last_ms:.2f} ms in the last "
        f"{args.window}; last / first x{statistics.median(ratios):.2f} "
        f"(rounds: {', '.join(f'x{r:.2f}' for r in ratios)})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
