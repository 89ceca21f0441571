"""The breakdown table of a store's data-parallel runs: ``python -m kbench.cli.distributed_table``.

    python -m kbench.cli.distributed_table --store results --filter model=lenet5 --filter workers=2

One row per run (the newest of each rerun sweep run), as :mod:`kbench.views.distributed`
draws it for ``kbench compare`` and ``report``; Markdown, or aligned text (``--text``).
"""

from __future__ import annotations

import argparse
import sys

from kbench.cli.arguments import add_filter_argument, add_store_argument
from kbench.results.store import Filter, ResultStore, StoreError
from kbench.views.distributed import breakdown_tables


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kbench.cli.distributed_table", description=__doc__.splitlines()[0]
    )
    add_store_argument(parser)
    add_filter_argument(parser)
    parser.add_argument("--text", action="store_true", help="aligned text instead of Markdown")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        filters = [Filter.parse(text) for text in args.filter]
        store = ResultStore(args.store)
        results = store.results(filters, latest_only=True)
    except StoreError as err:
        print(f"kbench: {err}", file=sys.stderr)
        return 2
    for name, why in store.unreadable:
        print(f"kbench: {args.store / name}: skipped: {why}", file=sys.stderr)
    tables = breakdown_tables(results)
    if not tables:
        print(f"no data-parallel runs in {args.store}", file=sys.stderr)
        return 1
    print("\n\n".join(t.text() if args.text else t.markdown() for t in tables))
    return 0


if __name__ == "__main__":
    sys.exit(main())
