"""One data-parallel run as table cells and as a sentence for the log: what the
launcher logs when a run ends, and the rows :mod:`kbench.views.distributed` shows.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from kbench.distributed.breakdown import PHASES
from kbench.results.result import RunResult

HEADERS = [
    "mode",
    "backend",
    "workers",
    "img/s (global)",
    "efficiency",
    "step ms",
    "data ms",
    "forward ms",
    "backward ms",
    "update ms",
    "comm ms",
    "slowest worker (step ms)",
]
PHASE_HEADERS = HEADERS[5:11]  # step, then each phase
NUMERIC = tuple(range(2, 11))  # columns of HEADERS that hold numbers


def distributed_results(results: Sequence[RunResult]) -> List[RunResult]:
    """The data-parallel training runs among ``results``."""
    return [
        r for r in results if r.kind == "train" and r.config.get("distributed", "none") != "none"
    ]


def fmt_ms(seconds: Optional[float]) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


def breakdown_cells(result: RunResult) -> List[str]:
    """The :data:`HEADERS` cells of one run."""
    c = result.config
    head = [c["distributed"], c["backend"], str(c["workers"])]
    if not result.ok:
        return head + [result.status.upper()] + ["-"] * (len(HEADERS) - 4)
    m = result.metrics
    d = m["distributed"]
    mean = d["breakdown"]["mean"]
    slowest = d["breakdown"]["slowest"]
    eff = (d.get("scaling") or {}).get("efficiency")
    return head + [
        f"{m['images_per_sec']:,.0f}",
        "-" if eff is None else f"{eff:.2f}",
        fmt_ms(mean["step_s"]),
        *(fmt_ms(mean[f"{p}_s"]) for p in PHASES),
        f"{slowest['rank']} ({fmt_ms(slowest['step_s'])})",
    ]


def breakdown_line(result: RunResult) -> str:
    """One run in a sentence, for the log."""
    row = dict(zip(HEADERS, breakdown_cells(result)))
    parts = ", ".join(f"{k} {row[k]}" for k in PHASE_HEADERS)
    return (
        f"{row['mode']} {row['backend']}/{result.config['model']} x{row['workers']}: "
        f"{row['img/s (global)']} img/s global, efficiency {row['efficiency']}; per step: "
        f"{parts}; slowest worker {row['slowest worker (step ms)']}"
    )
