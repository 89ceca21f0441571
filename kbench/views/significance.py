"""Whether a speed ratio differs from 1 beyond the noise between rounds.

The interval is on the median of the per-round ratios, from order statistics (no
resampling, nothing random): with n ratios sorted, the pair (r_j, r_{n+1-j}) covers
the true median with probability ``1 - 2 * P(Binomial(n, 1/2) < j)``, whatever the
ratios' distribution. The narrowest such pair with coverage of at least 95% is used;
below 6 rounds no pair reaches 95%, so the whole range (j = 1) is used and its
coverage (``1 - 2 * 0.5**n``: 50% for 2 rounds, 94% for 5) is given with it. A ratio
whose interval holds 1 reads "no clear difference"; one run has no spread at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from kbench.measure import stats

LEVEL = 0.95


@dataclass(frozen=True)
class RatioInterval:
    median: float
    low: float
    high: float
    coverage: float  # probability that [low, high] holds the true median ratio
    n: int

    @property
    def clear(self) -> bool:
        """The interval lies wholly above or below 1 (and there is more than one round)."""
        return self.n > 1 and not self.low <= 1.0 <= self.high

    def text(self, spec: str = ".2f") -> str:
        """``x0.51 (0.50-0.52, 75%, n=3)``, ``no clear difference (x0.97, 0.91-1.04, ...)``
        or ``x0.97 (1 run: no spread)``."""
        ratio = "x" + format(self.median, spec)
        if self.n < 2:
            return f"{ratio} (1 run: no spread)"
        detail = (
            f"{format(self.low, spec)}-{format(self.high, spec)}, "
            f"{self.coverage:.0%} interval, n={self.n}"
        )
        return f"{ratio} ({detail})" if self.clear else f"no clear difference ({ratio}, {detail})"


def median_interval(values: Sequence[float], level: float = LEVEL) -> Optional[RatioInterval]:
    """The order-statistics interval on the median of ``values`` (the one
    :func:`kbench.measure.stats.median_interval` computes for step times); None for no
    values."""
    interval = stats.median_interval(values, level)
    if interval is None:
        return None
    return RatioInterval(
        interval.median, interval.low, interval.high, interval.coverage, interval.n
    )
