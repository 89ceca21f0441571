"""Progress of the runs a command started, one log line per worker event."""

from __future__ import annotations

import logging
from typing import Dict

from kbench.results.config import RunConfig

log = logging.getLogger("kbench")


def show_progress(config: RunConfig, event: Dict) -> None:
    if event.get("event") == "epoch":
        log.info(
            "    %s: epoch %d/%d, loss %.4f, %.1f s",
            config.label(),
            event["epoch"],
            event["epochs"],
            event["loss"],
            event["seconds"],
        )
    elif event.get("event") == "step":
        log.info("    %s: step %d/%d", config.label(), event["step"], event["steps"])
    elif event.get("event") == "profile":
        log.info("    %s: profiling %d steps", config.label(), event["steps"])
