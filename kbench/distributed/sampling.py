"""Samples every process of a data-parallel run at once, from the parent.

One thread (the sampler's own, :class:`kbench.measure.sampler.SamplingThread`) reads,
every ``interval_s``, each process registered with :meth:`add` (a worker, a parameter
server, a scheduler; torchrun's workers as they announce themselves) and its children:
CPU percent and RSS per process, under ``<name>_process_cpu_percent`` and
``<name>_process_rss_bytes`` (``worker0_...``, ``server0_...``), their sums under the
single-process names (``process_cpu_percent``, ``process_rss_bytes``), and the
machine's CPU load and frequency. Where NVML answers, each GPU's series as
:mod:`kbench.measure.sampler` reads them (the run's device memory summed over its
processes) plus each process's own device memory as
``<name>_gpu<i>_process_memory_bytes`` (absent, never 0, where NVML lists none of its
PIDs or does not know their memory). A source that fails is marked failed with the
error and the others, the CPU series included, go on; the summary covers the GPUs the
run's processes used (:func:`kbench.measure.sampler.scoped_summary`). The result is a
:class:`~kbench.measure.sampler.SamplerResult`: one time axis, one column per series.
:func:`assess_quality` turns it into the run's ``quality`` section (other processes'
CPU share, throttling, battery, other processes on the run's GPUs).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Dict, List, Optional, Sequence

import psutil

from kbench.measure import quality
from kbench.measure.nvml import NvmlSource, visible_devices_of
from kbench.measure.sampler import (
    LABELS,
    SamplerResult,
    SamplingThread,
    close_sources,
    describe_sources,
    optional_sources,
    read_sources,
    scoped_summary,
    tree_usage,
)

log = logging.getLogger(__name__)

TREE_REFRESH_S = 1.0
ROLE_LABELS = {
    "process_cpu_percent": "CPU time of this process and its children, percent of one core",
    "process_rss_bytes": "resident memory of this process and its children (psutil)",
    "process_memory_bytes": "device memory of this process and its children (NVML)",
}


class JobSampler:
    """``sampler.start()``, ``sampler.add(name, pid)`` as processes appear, ``stop()``,
    then ``result(windows)``."""

    def __init__(self, interval_s: float = 0.2, nvml: Any = None) -> None:
        self.interval_s = interval_s
        self._roots: Dict[str, psutil.Process] = {}
        self._trees: Dict[str, List[psutil.Process]] = {}
        self._tree_at: Dict[str, float] = {}
        self._known: Dict[int, psutil.Process] = {}
        self._rows: List[Dict[str, Any]] = []
        self._lock = threading.Lock()
        self._thread = SamplingThread(self._sample, interval_s, "kbench-job-sampler")
        self.sources, self.unavailable = optional_sources(nvml)
        psutil.cpu_percent(None)  # the first call only starts the interval
        self.pids: Dict[str, int] = {}
        self.visible: Dict[str, Dict[str, Any]] = {}  # name -> its CUDA_VISIBLE_DEVICES
        self.failed: Dict[str, str] = {}

    def add(self, name: str, pid: int) -> None:
        try:
            process = psutil.Process(pid)
        except psutil.Error as err:
            log.debug("sampler: %s (pid %d) not added: %s", name, pid, err)
            return
        visible = visible_devices_of(process)
        with self._lock:
            self._roots[name] = process
            self.pids[name] = pid
            self.visible[name] = visible

    def start(self) -> JobSampler:
        """The first reading one interval from now (no reading before any process is
        added), then one every interval, on :mod:`kbench.measure.sampler`'s thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        self._thread.stop()
        close_sources(self.sources)

    def _tree(self, name: str) -> List[psutil.Process]:
        now = time.monotonic()
        if now - self._tree_at.get(name, float("-inf")) >= TREE_REFRESH_S:
            root = self._roots[name]
            try:
                self._trees[name] = [root, *root.children(recursive=True)]
            except psutil.Error:
                self._trees[name] = []
            self._tree_at[name] = now
        return self._trees[name]

    def _sample(self) -> None:
        with self._lock:
            names = list(self._roots)
        row: Dict[str, Any] = {"t": time.time()}
        for name in names:  # one read during its exec: read again
            if not self.visible[name].get("known"):
                self.visible[name] = visible_devices_of(self._roots[name])
        total_cpu, total_rss, alive_any = 0.0, 0, False
        trees = {}
        for name in names:
            tree = self._tree(name)
            trees[name] = tree
            usage = tree_usage(tree, self._known)
            if usage:
                cpu, rss = usage
                row[f"{name}_process_cpu_percent"] = cpu
                row[f"{name}_process_rss_bytes"] = rss
                total_cpu += cpu
                total_rss += rss
                alive_any = True
        if alive_any:
            row.update(process_cpu_percent=total_cpu, process_rss_bytes=total_rss)
        row["system_cpu_percent"] = psutil.cpu_percent(None)
        try:
            frequency = psutil.cpu_freq()
        except (OSError, NotImplementedError):
            frequency = None
        if frequency:
            row["cpu_freq_mhz"] = frequency.current
        union = [p for tree in trees.values() for p in tree]
        read_sources(self.sources, union, row, self.failed)
        for source in self.sources:
            if isinstance(source, NvmlSource) and source.name not in self.failed:
                row.update(self._gpu_per_process(source, trees))
        self._rows.append(row)

    @staticmethod
    def _gpu_per_process(source: NvmlSource, trees: Dict[str, List[psutil.Process]]) -> Dict:
        """Each process's own device memory, from the listing the source just read; only
        where NVML lists its PIDs and knows their memory (unknown is absent, not 0)."""
        out = {}
        for gpu in source.gpus:
            if gpu.processes is None or gpu.failed:
                continue
            for name, tree in trees.items():
                pids = {p.pid for p in tree}
                mine = [used for pid, used in gpu.processes if pid in pids]
                if mine and all(used is not None for used in mine):
                    out[f"{name}_gpu{gpu.index}_process_memory_bytes"] = sum(map(int, mine))
        return out

    def result(self, windows: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """The series, their per-window summary, and which process each prefix names."""
        names = sorted({key for row in self._rows for key in row} - {"t"})
        series = {"t": [row["t"] for row in self._rows]}
        for name in names:
            series[name] = [row.get(name) for row in self._rows]
        sources: Dict[str, Any] = {"cpu": {"available": True}}
        sources.update(describe_sources(self.sources, self.failed, self.unavailable))
        visible = list(self.visible.values())
        summary = scoped_summary(series, windows or {}, self.sources, visible, sources)
        data = SamplerResult(
            interval_s=self.interval_s, sources=sources, series=series, summary=summary
        ).to_dict()
        data["labels"] = {name: label_of(name, list(self.pids)) for name in series if name != "t"}
        data["processes"] = dict(self.pids)
        data["note"] = (
            "one column per process of the run (<process>_...), their sums under the "
            "single-process names; processes: the pid each prefix names"
        )
        return data


def assess_quality(
    sampled: Dict[str, Any],
    window: Optional[Sequence[Optional[float]]],
    cores_given: int,
    busy_threshold: float = quality.BUSY_THRESHOLD,
) -> Optional[Dict[str, Any]]:
    """The run's ``quality`` section (:func:`kbench.measure.quality.assess`) from
    :meth:`JobSampler.result`: the run's own processes are every one it sampled
    (workers, servers, schedulers: ``process_cpu_percent`` is their sum), so "other"
    is everything else on the machine; ``cores_given`` is what its training processes
    were given together (threads per worker x local workers). None without a window."""
    assessed = quality.assess(
        sampled["series"],
        window,
        cores_given,
        busy_threshold,
        worker_gpus=(sampled.get("sources") or {}).get("gpu", {}).get("worker_gpus"),
    )
    return None if assessed is None else assessed.to_dict()


def label_of(name: str, prefixes: List[str]) -> str:
    for prefix in prefixes:
        if name.startswith(prefix + "_"):
            rest = name[len(prefix) + 1 :]
            metric = rest.split("_", 1)[1] if rest.startswith("gpu") else rest
            return f"{prefix}: " + ROLE_LABELS.get(metric, LABELS.get(metric, ""))
    if name in ("process_cpu_percent", "process_rss_bytes"):
        return "sum over the run's processes on this host: " + LABELS[name]
    base = name.split("_", 1)[1] if name.startswith("gpu") else name
    return LABELS.get(base, "")
