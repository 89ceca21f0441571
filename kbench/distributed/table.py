"""The breakdown table of a store's data-parallel runs: ``python -m kbench.distributed.table``.

    python -m kbench.distributed.table --store results/distributed-reduced
    python -m kbench.distributed.table --store results --filter model=lenet5 --filter workers=2

One Markdown row per run (the newest of each rerun sweep run): mode, backend, workers,
global img/s, scaling efficiency against one worker, and the mean per-step time of
each phase (data, forward, backward, update, communication) with the slowest worker.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kbench.distributed.merge import breakdown_table
from kbench.store import Filter, ResultStore, StoreError


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kbench.distributed.table", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--store", type=Path, default=Path("results"), help="results store")
    parser.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="NAME=VALUE[,VALUE]",
        help="keep runs whose setting or status has one of the values",
    )
    args = parser.parse_args(argv)
    try:
        filters = [Filter.parse(text) for text in args.filter]
        results = ResultStore(args.store).results(filters, latest_only=True)
    except StoreError as err:
        print(f"kbench: {err}", file=sys.stderr)
        return 2
    results = [r for r in results if r.config.get("distributed", "none") != "none"]
    if not results:
        print(f"no data-parallel runs in {args.store}", file=sys.stderr)
        return 1
    results.sort(
        key=lambda r: (
            r.config["model"],
            r.config["distributed"],
            r.config["backend"],
            r.config["workers"],
            r.started_at,
        )
    )
    print(breakdown_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
