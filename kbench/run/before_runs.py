"""What every command that starts model runs looks at first (``kbench run``, ``sweep``):
room for the results where they go, and whether the machine is already busy.

Both only warn: a low disk may still hold the runs' results, and a busy machine may
quieten; a result that cannot be written later stops the command with the way to
recover it (:mod:`kbench.results.store`), and a busy window is flagged in the result
(:mod:`kbench.measure.quality`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from kbench.measure import quality
from kbench.results import store as store_mod

log = logging.getLogger("kbench")


def look_before_runs(
    output_dir: Path, runs: int, busy_threshold: float, wait_quiet_s: float, command: str
) -> None:
    """Warn when ``output_dir`` has less room than ``runs`` runs may need, then take the
    one-second look at the machine (``--wait-quiet`` waits for it to quieten).
    ``command`` names what a result that cannot be written would stop."""
    low = store_mod.low_space_warning(output_dir, runs, command)
    if low:
        log.warning("%s", low)
    quality.preflight_unless_skipped(busy_threshold, wait_quiet_s)
