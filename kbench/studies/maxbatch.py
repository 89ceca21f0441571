"""The largest batch that trains without running out of memory.

Doubling from ``start`` until a batch does not fit (or ``limit`` is reached), then
bisection between the last batch that fit and the first that did not. Every probe
is a real training run of a few steps in a fresh worker process, recorded like any
other run; "does not fit" is status ``oom``, or a worker killed by SIGKILL (the
kernel's out-of-memory killer). Any other failure stops the search.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

from kbench.results.config import RunConfig
from kbench.results.result import RunResult
from kbench.run.runner import Runner
from kbench.studies import rounds
from kbench.views.tables import render

log = logging.getLogger(__name__)


class ProbeFailed(RuntimeError):
    """A probe failed for another reason than memory; the search cannot go on."""


@dataclass
class SearchResult:
    largest_fit: Optional[int]  # None: not even the first batch fit
    first_failure: Optional[int]  # None: everything up to the limit fit
    limit: int
    probes: List[Tuple[int, bool]] = field(default_factory=list)


def search(fits: Callable[[int], bool], start: int = 1, limit: int = 4096) -> SearchResult:
    result = SearchResult(largest_fit=None, first_failure=None, limit=limit)

    def probe(batch: int) -> bool:
        ok = fits(batch)
        result.probes.append((batch, ok))
        return ok

    batch = min(start, limit)
    while True:
        if not probe(batch):
            result.first_failure = batch
            break
        result.largest_fit = batch
        if batch >= limit:
            return result
        batch = min(batch * 2, limit)
    low, high = result.largest_fit, result.first_failure
    if low is None:
        return result
    while high - low > 1:
        middle = (low + high) // 2
        if probe(middle):
            low = middle
        else:
            high = middle
    result.largest_fit, result.first_failure = low, high
    return result


def did_not_fit(result: RunResult) -> bool:
    killed = result.error and f"signal {signal.Signals.SIGKILL.name}" in result.error.get(
        "message", ""
    )
    return result.status == "oom" or bool(killed)


def find_max_batch(
    runner: Runner, template: RunConfig, start: int = 1, limit: int = 4096
) -> Tuple[SearchResult, List[RunResult]]:
    """Search with real runs of ``template`` at each batch size."""
    runs: List[RunResult] = []

    def fits(batch: int) -> bool:
        config = dataclasses.replace(
            template, batch_size=batch, train_samples=batch * 2, test_samples=min(batch, 64)
        )
        (result,), _ = rounds.run_plan(rounds.fresh_plan([[config]]), runner)
        runs.append(result)
        if result.ok:
            log.info("max-batch: %d fits", batch)
            return True
        if did_not_fit(result):
            log.info("max-batch: %d does not fit (%s)", batch, result.reason)
            return False
        raise ProbeFailed(
            f"batch {batch}: the probe run failed for another reason than memory: "
            f"{result.status}: {result.reason} (see {runner.output_dir}/logs/{result.run_id}.log)"
        )

    return search(fits, start, limit), runs


def probes_table(runs: List[RunResult]) -> str:
    """One row per batch size tried: whether it fit, the run's status, its speed."""
    return render(
        ["batch", "fits", "status", "img/s"],
        [[str(r.config["batch_size"]), "yes" if r.ok else "no", r.status,
          f"{r.metrics['images_per_sec']:,.0f}" if r.ok else "-"] for r in runs],
    )  # fmt: skip
