"""Summary statistics over raw measurements."""

from __future__ import annotations

from typing import Dict, Sequence

import numpy as np


def percentiles(values: Sequence[float], qs=(10, 50, 90)) -> Dict[str, float]:
    """The given percentiles (keys p10, p50, ...) and the mean; empty input gives {}."""
    if not values:
        return {}
    array = np.asarray(values, dtype=np.float64)
    out = {f"p{q}": float(np.percentile(array, q)) for q in qs}
    out["mean"] = float(array.mean())
    return out
