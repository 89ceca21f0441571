"""Summary statistics over raw measurements: percentiles (of values, and of per-step
rates), a distribution-free confidence interval on the median (:class:`MedianInterval`,
the one interval type kbench has), and when to stop measuring (:class:`PrecisionTracker`).

**The median's interval, from order statistics.** With ``n`` values sorted, the pair
``(x_(j), x_(n+1-j))`` holds the true median with probability ``1 - 2 * P(B < j)``,
``B ~ Binomial(n, 1/2)``, whatever the values' distribution. :func:`median_interval`
takes the narrowest pair whose coverage reaches the level (95%); below 6 values none
does, and the whole range is returned with its coverage (``1 - 2 * 0.5**n``). The tail is
summed in floating point from ``lgamma`` terms: thousands of values cost microseconds.
Step times of one process are not quite independent (a busy second slows several
steps): the interval is the spread of this run's steps, not of the machine's weather.

**When to stop measuring** (``--target-precision P``, ``--time-budget S``). A
:class:`PrecisionTracker` is fed each measured step's begin and end and stops at the
first of: *precision reached*, the interval on the median throughput (items over the
step's time: the slowest bound step gives the low throughput) within ``±P`` of the
median; *budget spent*, ``S`` seconds since the first measured step began; *steps
exhausted*, the caller ran out of steps first. The interval is checked after
``MIN_STEPS`` steps, then every ``CHECK_EVERY`` steps or tenth of the steps so far,
whichever is more; the budget at every step.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

LEVEL = 0.95
PRECISION_REACHED = "precision reached"
BUDGET_SPENT = "budget spent"
STEPS_EXHAUSTED = "steps exhausted"
MIN_STEPS = 6  # the fewest values whose order-statistics interval reaches 95%
CHECK_EVERY = 5
METHOD = (
    "order statistics: (x_(j), x_(n+1-j)) of the sorted step times, the largest j with "
    "1 - 2 P(Binomial(n, 1/2) < j) >= 95%, as throughput"
)


def measured_seconds(
    begins: Sequence[float], ends: Sequence[float], parts: Sequence[int], warmup: int
) -> float:
    """The measured window's time from the steps' ``begins`` and ``ends``, part by part
    (``parts``: the index of each epoch's or ``fit`` call's first step), time between parts
    left out. Within the part where warmup ends, the window opens as the last warmup step
    ends; in later parts, as their first step begins."""
    total = 0.0
    bounds = list(parts) + [len(ends)]
    for part_start, stop in zip(bounds[:-1], bounds[1:]):
        first = max(part_start, warmup)
        if first < stop:
            start = ends[first - 1] if first > part_start else begins[first]
            total += ends[stop - 1] - start
    return total


def percentiles(values: Sequence[float], qs=(10, 50, 90)) -> Dict[str, float]:
    """The given percentiles (keys p10, p50, ...) and the mean; empty input gives {}."""
    if not values:
        return {}
    array = np.asarray(values, dtype=np.float64)
    out = {f"p{q}": float(np.percentile(array, q)) for q in qs}
    out["mean"] = float(array.mean())
    return out


def rate_percentiles(
    amounts: Sequence[float], seconds: Sequence[float], qs=(10, 50, 90)
) -> Dict[str, float]:
    """Percentiles (and the mean) of per-step rates ``amounts[i] / seconds[i]``, steps of
    no duration left out. A slow step is a low rate: p10 is the slow end."""
    rates = [a / s for a, s in zip(amounts, seconds) if s > 0]
    return percentiles(rates, qs)


@dataclass(frozen=True)
class MedianInterval:
    """The median of ``n`` values and ``[low, high]``, holding it with ``coverage``."""

    median: float
    low: float
    high: float
    coverage: float
    n: int

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def binomial_below(j: int, n: int) -> float:
    """P(Binomial(n, 1/2) < j), summed from the term k = j - 1 downwards."""
    if j <= 0:
        return 0.0
    if j > n:
        return 1.0
    log_half = n * math.log(0.5)
    k = j - 1
    term = math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + log_half)
    total = 0.0
    while k >= 0 and term > 0.0:
        total += term
        if term < total * 1e-17:
            break
        term *= k / (n - k + 1)  # C(n, k-1) / C(n, k)
        k -= 1
    return min(total, 1.0)


def order_statistic_rank(n: int, level: float = LEVEL) -> int:
    """The largest ``j`` (1-based) with ``1 - 2 * P(B < j) >= level``; 1 where none does."""
    if n < 2:
        return 1
    # Start from the normal approximation, then step to the exact answer.
    z = statistics.NormalDist().inv_cdf((1 + level) / 2)
    j = max(1, min(n // 2, int((n - z * math.sqrt(n)) / 2)))
    while j > 1 and 1 - 2 * binomial_below(j, n) < level:
        j -= 1
    while j + 1 <= n // 2 and 1 - 2 * binomial_below(j + 1, n) >= level:
        j += 1
    return j


def rounds_needed(level: float = LEVEL) -> int:
    """The fewest values whose median interval reaches ``level`` (6 for 95%, 9 for 99.3%)."""
    return max(2, math.ceil(math.log2(2 / (1 - level)) - 1e-12))


def median_interval(values: Sequence[float], level: float = LEVEL) -> Optional[MedianInterval]:
    """The order-statistics interval on the median of ``values`` (None for none)."""
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    n = len(ordered)
    if not n:
        return None
    middle = float((ordered[(n - 1) // 2] + ordered[n // 2]) / 2)
    if n == 1:
        return MedianInterval(middle, middle, middle, 0.0, 1)
    j = order_statistic_rank(n, level)
    coverage = 1 - 2 * binomial_below(j, n)
    return MedianInterval(middle, float(ordered[j - 1]), float(ordered[n - j]), coverage, n)


@dataclass(frozen=True)
class PrecisionGoal:
    """What to measure until: ``target`` (relative half-width of the median throughput's
    interval, e.g. 0.02) and ``budget_s`` (seconds); None: no such limit."""

    target: Optional[float] = None
    budget_s: Optional[float] = None

    @property
    def active(self) -> bool:
        return self.target is not None or self.budget_s is not None

    @classmethod
    def from_config(cls, config: Dict[str, Any]) -> PrecisionGoal:
        """The goal in a run's or ``kbench ops``' config dict (absent in older configs)."""
        return cls(config.get("target_precision"), config.get("time_budget_s"))


class StopMeasuring(Exception):
    """Raised from inside a backend's step loop when the goal is met; ``reason``: which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class PrecisionTracker:
    """Feed :meth:`add` each measured step; it answers why to stop, or None."""

    def __init__(
        self, goal: PrecisionGoal, items_per_step: float = 1.0, min_steps: int = MIN_STEPS,
        check_every: int = CHECK_EVERY,
    ) -> None:  # fmt: skip
        self.goal = goal
        self.items_per_step = items_per_step
        self.min_steps = max(min_steps, 2)
        self.check_every = max(check_every, 1)
        self.times: List[float] = []
        self.started: Optional[float] = None
        self.elapsed_s = 0.0
        self.checks = 0
        self.stopped: Optional[str] = None
        self._next_check = self.min_steps

    def add(self, begin: float, end: float) -> Optional[str]:
        """Record one step (``perf_counter`` times); the reason to stop now, or None."""
        if self.started is None:
            self.started = begin
        self.times.append(end - begin)
        self.elapsed_s = end - self.started
        goal = self.goal
        n = len(self.times)
        if goal.target is not None and n >= self._next_check:
            self._next_check = n + max(self.check_every, n // 10)
            self.checks += 1
            if self.half_width() <= goal.target:
                self.stopped = PRECISION_REACHED
                return self.stopped
        if goal.budget_s is not None and self.elapsed_s >= goal.budget_s:
            self.stopped = BUDGET_SPENT
            return self.stopped
        return None

    def interval(self) -> Optional[MedianInterval]:
        """The interval on the median throughput (items per second) of the steps so far."""
        times = median_interval(self.times, LEVEL)
        if times is None or times.low <= 0:
            return None
        items = self.items_per_step
        return MedianInterval(
            median=items / times.median, low=items / times.high, high=items / times.low,
            coverage=times.coverage, n=times.n,
        )  # fmt: skip

    def half_width(self) -> float:
        """The interval's larger distance from the median, relative to it (inf if none)."""
        found = self.interval()
        if found is None or found.coverage < LEVEL:
            return math.inf
        return max(found.high / found.median - 1.0, 1.0 - found.low / found.median)

    def record(self) -> Dict[str, Any]:
        """What a result keeps: the goal, why measuring stopped, the interval reached."""
        found = self.interval()
        width = self.half_width()
        return {
            "target": self.goal.target, "time_budget_s": self.goal.budget_s,
            "stopped": self.stopped or STEPS_EXHAUSTED, "measured_steps": len(self.times),
            "measured_s": self.elapsed_s, "checks": self.checks,
            "interval": None if found is None else found.to_dict(),
            "half_width": None if math.isinf(width) else width, "level": LEVEL, "method": METHOD,
        }  # fmt: skip


def tracker_for(config: Dict[str, Any], items_per_step: float) -> Optional[PrecisionTracker]:
    """A tracker for a config that asks for a target or a budget; None otherwise."""
    goal = PrecisionGoal.from_config(config)
    return PrecisionTracker(goal, items_per_step) if goal.active else None
