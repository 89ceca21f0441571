"""Summary statistics over raw measurements: percentiles (of values, and of per-step
rates: :func:`rate_percentiles`), and a distribution-free confidence interval on the
median (:class:`MedianInterval`, the one interval type kbench has).

**The median's interval, from order statistics.** With ``n`` values sorted,
``x_(1) <= ... <= x_(n)``, the pair ``(x_(j), x_(n+1-j))`` holds the true median with
probability ``1 - 2 * P(B < j)``, ``B ~ Binomial(n, 1/2)``, whatever the values'
distribution (each value falls below the median with probability 1/2, independently).
:func:`median_interval` takes the narrowest such pair (the largest ``j``) whose coverage
is at least the level asked for (95%); below 6 values no pair reaches 95%, and the whole
range (``j = 1``, coverage ``1 - 2 * 0.5**n``) is returned with its coverage. The
binomial tail is summed from its largest term down in floating point (terms from
``lgamma``), so thousands of values cost microseconds. Step times of one process are
not quite independent (a busy second slows several steps): read the interval as the
spread of this run's steps, not of the machine's weather.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional, Sequence

import numpy as np

LEVEL = 0.95


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
    """Percentiles (and the mean) of per-step rates: step i's ``amounts[i] / seconds[i]``
    (images per second of each step, whatever its batch), steps of no duration left out;
    {} for none. A slow step is a low rate: p10 is the slow end."""
    rates = [a / s for a, s in zip(amounts, seconds) if s > 0]
    return percentiles(rates, qs)


@dataclass(frozen=True)
class MedianInterval:
    """The median of ``n`` values and an interval ``[low, high]`` that holds the true
    median with probability ``coverage``."""

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
    """The largest ``j`` (1-based) with ``1 - 2 * P(B < j) >= level``; 1 where none reaches
    ``level`` (then the whole range is the interval)."""
    if n < 2:
        return 1
    # Start from the normal approximation, then step to the exact answer.
    z = 1.959963984540054 if level == LEVEL else _normal_quantile((1 + level) / 2)
    j = max(1, min(n // 2, int((n - z * math.sqrt(n)) / 2)))
    while j > 1 and 1 - 2 * binomial_below(j, n) < level:
        j -= 1
    while j + 1 <= n // 2 and 1 - 2 * binomial_below(j + 1, n) >= level:
        j += 1
    return j


def _normal_quantile(p: float) -> float:
    """The standard normal quantile (bisection on erf; only for levels other than 95%)."""
    low, high = -10.0, 10.0
    for _ in range(80):
        middle = (low + high) / 2
        if 0.5 * (1 + math.erf(middle / math.sqrt(2))) < p:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def rounds_needed(level: float = LEVEL) -> int:
    """The fewest values whose median interval reaches ``level``: the range of ``n``
    values covers the median with ``1 - 2 * 0.5**n`` (6 for 95%, 9 for 99.3%)."""
    return max(2, math.ceil(math.log2(2 / (1 - level)) - 1e-12))


def median_interval(values: Sequence[float], level: float = LEVEL) -> Optional[MedianInterval]:
    """The order-statistics interval on the median of ``values`` (see the module's
    docstring); None for no values. One value: the interval is the point, coverage 0."""
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
