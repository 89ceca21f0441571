"""Runs listed one row each, as text tables: a sweep's plan before it runs (``--dry-run``)
and the index of a store (``kbench results``)."""

from __future__ import annotations

import collections
from typing import Sequence

from kbench.results.config import RunConfig
from kbench.results.store import IndexEntry
from kbench.views.tables import render, setting_cell

PLAN_LISTED = 50  # a dry run lists every run up to this many, else summarizes
PLAN_FIRST = 10  # the runs a summary shows


def plan_table(configs: Sequence[RunConfig], states: Sequence[str], varying: Sequence[str]) -> str:
    """One row per run: its number, backend, model, the other settings that vary, its
    state ("to run", "done (ok)")."""
    rest = [v for v in varying if v not in ("backend", "model")]
    return render(
        ["#", "backend", "model", *rest, "state"],
        [
            [str(i), c.backend, c.model, *[setting_cell(getattr(c, v)) for v in rest], state]
            for i, (c, state) in enumerate(zip(configs, states), start=1)
        ],
    )


def plan_text(configs: Sequence[RunConfig], states: Sequence[str], varying: Sequence[str]) -> str:
    """The plan table, or for more than :data:`PLAN_LISTED` runs how many take each value
    of each varying setting and the first few runs."""
    if len(configs) <= PLAN_LISTED:
        return plan_table(configs, states, varying)
    lines = []
    for name in varying:
        counts = collections.Counter(setting_cell(getattr(c, name)) for c in configs)
        shown = ", ".join(f"{value} ({count})" for value, count in counts.most_common(12))
        more = f", and {len(counts) - 12} more values" if len(counts) > 12 else ""
        lines.append(f"  {name}: {len(counts)} values: {shown}{more}")
    first = plan_table(configs[:PLAN_FIRST], states[:PLAN_FIRST], varying)
    return "\n".join(
        ["settings that vary (runs per value):", *lines, "",
         f"the first {min(PLAN_FIRST, len(configs))} runs:", first,
         f"... and {len(configs) - PLAN_FIRST} more (--filter NAME=VALUE lists a part)"]
    )  # fmt: skip


def store_index(entries: Sequence[IndexEntry]) -> str:
    """The store's index, one run a row."""
    return render(
        ["run", "status", "kind", "backend", "model", "dataset", "batch", "img/s", "host",
         "sweep"],
        [[e.run_id, e.status, e.kind, str(e.config.get("backend")), str(e.config.get("model")),
          str(e.config.get("dataset")), str(e.config.get("batch_size")),
          "-" if e.images_per_sec is None else f"{e.images_per_sec:,.0f}", e.host,
          e.sweep or "-"] for e in entries],
    )  # fmt: skip
