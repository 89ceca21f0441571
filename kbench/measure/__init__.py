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
:func:`sample` is called, so that importing this package stays free of psutil and NVML.

May import: nothing else in kbench.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # pragma: no cover
    from kbench.measure.sampler import Sampler


def sample(pid: Optional[int] = None, interval_s: float = 0.2, nvml: Any = None) -> Sampler:
    """Sample ``pid`` (default: this process) and its children over a ``with`` block: a
    :class:`~kbench.measure.sampler.Sampler`, whose ``series`` and ``summary`` (its
    ``run`` the block) are read once the block ends."""
    from kbench.measure.sampler import Sampler

    return Sampler(pid or os.getpid(), interval_s, nvml=nvml)
