"""Side-by-side numbers for backends that ran the same thing.

Results are grouped by everything in their config except the backend and the
repeat index. Within a group, each backend's throughput is the median over its
repeats with the range; its speed against the baseline backend is the median of
the per-round ratios (round r of backend B over round r of the baseline), so a
machine that drifts during the command cannot pick the winner.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from kbench.results import RunResult

IGNORED_IN_GROUPING = ("backend", "repeat", "timeout_s", "sample_interval_s")


@dataclass(frozen=True)
class Spread:
    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Optional[Spread]:
        if not values:
            return None
        return cls(statistics.median(values), min(values), max(values), len(values))


@dataclass(frozen=True)
class BackendRow:
    backend: str
    runs: int
    statuses: Dict[str, int]  # status -> count
    images_per_sec: Optional[Spread]
    ratio: Optional[Spread]  # per-round images_per_sec / baseline's
    test_accuracy: Optional[Spread]
    epoch_time_s: Optional[Spread]
    first_step_s: Optional[Spread]
    latency_p50_ms: Optional[Spread]  # inference only

    @property
    def all_ok(self) -> bool:
        return set(self.statuses) == {"ok"}


@dataclass(frozen=True)
class ComparisonGroup:
    model: str
    dataset: str
    batch_size: int
    mode: str
    synthetic: bool
    baseline: str
    rows: List[BackendRow] = field(default_factory=list)

    @property
    def title(self) -> str:
        data = f"{self.dataset} (synthetic data)" if self.synthetic else self.dataset
        mode = ", inference" if self.mode == "inference" else ""
        return f"{self.model} on {data}, batch {self.batch_size}{mode}"


def group_key(result: RunResult) -> Tuple:
    return tuple(
        sorted((k, repr(v)) for k, v in result.config.items() if k not in IGNORED_IN_GROUPING)
    )


def compare(results: Sequence[RunResult], baseline: Optional[str] = None) -> List[ComparisonGroup]:
    """One group per distinct config; ``baseline`` defaults to the first backend run."""
    groups: Dict[Tuple, List[RunResult]] = {}
    for result in results:
        groups.setdefault(group_key(result), []).append(result)
    out = []
    for members in groups.values():
        backends = list(dict.fromkeys(r.config["backend"] for r in members))
        base = baseline if baseline in backends else backends[0]
        base_by_round = {
            r.config.get("repeat", 0): r.metrics["images_per_sec"]
            for r in members
            if r.config["backend"] == base and r.ok
        }
        rows = []
        for backend in backends:
            runs = [r for r in members if r.config["backend"] == backend]
            ok = [r for r in runs if r.ok]
            statuses: Dict[str, int] = {}
            for r in runs:
                statuses[r.status] = statuses.get(r.status, 0) + 1
            ratios = [
                r.metrics["images_per_sec"] / base_by_round[r.config.get("repeat", 0)]
                for r in ok
                if r.config.get("repeat", 0) in base_by_round
            ]

            def spread(values: List[Optional[float]]) -> Optional[Spread]:
                return Spread.of([v for v in values if v is not None])

            rows.append(
                BackendRow(
                    backend=backend,
                    runs=len(runs),
                    statuses=statuses,
                    images_per_sec=spread([r.metrics["images_per_sec"] for r in ok]),
                    ratio=Spread.of(ratios),
                    test_accuracy=spread([r.metrics.get("test_accuracy") for r in ok]),
                    epoch_time_s=spread([_mean(r.metrics.get("epoch_time_s")) for r in ok]),
                    first_step_s=spread([r.metrics.get("first_step_s") for r in ok]),
                    latency_p50_ms=spread([r.metrics.get("latency_ms", {}).get("p50") for r in ok]),
                )
            )
        first = members[0]
        out.append(
            ComparisonGroup(
                model=first.config["model"],
                dataset=first.config["dataset"],
                batch_size=first.config["batch_size"],
                mode=first.config.get("mode", "train"),
                synthetic=bool(first.data.get("synthetic")),
                baseline=base,
                rows=rows,
            )
        )
    return out


def _mean(values: Optional[Sequence[float]]) -> Optional[float]:
    return sum(values) / len(values) if values else None
