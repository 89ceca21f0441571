"""Progress of the runs a command started, one log line per worker event.

An event is shown only when it carries the fields its line needs, as numbers; any
other (a model or script that prints a line looking like kbench's protocol, a line
cut short) is skipped, and said once per run at debug level: a progress line never
stops the reading of a worker's output.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Set

from kbench.results.config import RunConfig

log = logging.getLogger("kbench")

# the fields each event's line shows, in order
FIELDS = {
    "epoch": ("epoch", "epochs", "loss", "seconds"),
    "step": ("step", "steps"),
    "profile": ("steps",),
}
_skipped: Set[str] = set()  # the runs whose odd events were said once


def show_progress(config: RunConfig, event: Dict) -> None:
    kind = event.get("event") if isinstance(event, dict) else None
    names = FIELDS.get(kind) if isinstance(kind, str) else None
    values = [event.get(name) for name in names] if names else []
    if not names or not all(_number(value) for value in values):
        _skip(config, event)
        return
    if kind == "epoch":
        epoch, epochs, loss, seconds = values
        of = f"/{epochs:.0f}" if epochs else ""
        log.info(
            "    %s: epoch %.0f%s, loss %.4f, %.1f s", config.label(), epoch, of, loss, seconds
        )
    elif kind == "step":
        log.info("    %s: step %.0f/%.0f", config.label(), *values)
    else:
        log.info("    %s: profiling %.0f steps", config.label(), *values)


def _number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        float(value)  # an integer too large for a float cannot be shown either
    except OverflowError:
        return False
    return True


def _skip(config: RunConfig, event: Any) -> None:
    label = config.label()
    if label not in _skipped:
        _skipped.add(label)
        log.debug("    %s: a progress line kbench cannot show, skipped: %.200r", label, event)
