"""What reads the machine and the process, and starts and stops workers: the sampler
and its sources, process control (``processes``), system facts, statistics of step
times, the events of an instrumented Keras script; and :func:`sample`, the sampler
``kbench run`` puts on its workers, for your own code::

    import kbench.measure

    with kbench.measure.sample() as sampling:       # this process and its children
        model.fit(x, y, epochs=2)
    print(sampling.summary["run"]["process_rss_bytes"]["max"])
    sampling.series["process_cpu_percent"]           # one value per reading

``pid`` watches another process instead. The series and the summary are a result
document's ``sampler`` (:mod:`kbench.measure.sampler`). The sampler is imported only when
a block starts, so that importing this package stays free of psutil and NVML.

May import: nothing else in kbench.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Dict, Optional

if TYPE_CHECKING:  # pragma: no cover
    from kbench.measure.sampler import SamplerResult


class Sampling:
    """A sampler running over a ``with`` block; its result once the block ends."""

    def __init__(self, pid: Optional[int], interval_s: float, nvml: Any = None) -> None:
        from kbench.measure.sampler import Sampler

        self.pid = pid or os.getpid()
        self.sampler = Sampler(self.pid, interval_s, nvml=nvml)
        self.interval_s = interval_s
        self.started_at: Optional[float] = None
        self.ended_at: Optional[float] = None
        self._result: Optional[SamplerResult] = None

    def __enter__(self) -> Sampling:
        self.started_at = time.time()
        self.sampler.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.sampler.__exit__(*exc)
        self.ended_at = time.time()
        self._result = self.sampler.result({"run": (self.started_at, self.ended_at)})

    def result(self, windows: Optional[Dict[str, Any]] = None) -> SamplerResult:
        """The series and a summary per window (``{name: (start, end)}``; default: ``run``)."""
        if windows is None and self._result is not None:
            return self._result
        end = self.ended_at or time.time()
        return self.sampler.result(windows or {"run": (self.started_at, end)})

    @property
    def series(self) -> Dict[str, Any]:
        return self.result().series

    @property
    def summary(self) -> Dict[str, Any]:
        return self.result().summary


def sample(pid: Optional[int] = None, interval_s: float = 0.2, nvml: Any = None) -> Sampling:
    """Sample ``pid`` (default: this process) and its children over a ``with`` block."""
    return Sampling(pid, interval_s, nvml)
