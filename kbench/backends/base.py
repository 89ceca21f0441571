"""The worker-side contract every backend fulfils.

A backend is created inside the worker process before Keras is imported. It sets
the thread counts the run asked for, imports Keras (which then fixes the backend
from ``KERAS_BACKEND`` and the per-run ``KERAS_HOME``), checks that Keras reports
the backend and image data format the runner asked for, and answers the few
framework-specific questions the trainer has. Everything else (model, data,
training loop) is shared.
"""

from __future__ import annotations

import abc
import os
import resource
from typing import Any, ClassVar, Dict, List


class BackendMismatch(RuntimeError):
    """Keras came up with another backend or data format than the run asked for."""


class Backend(abc.ABC):
    name: ClassVar[str]

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.keras: Any = None

    def start(self, data_format: str) -> Any:
        """Apply thread settings, import Keras, check it; returns the keras module."""
        self.thread_settings = self._limit_cores()
        self.thread_settings.update(self.configure_threads())
        self.keras = self.import_keras()
        got_backend = self.keras.backend.backend()
        got_format = self.keras.backend.image_data_format()
        if got_backend != self.name or got_format != data_format:
            raise BackendMismatch(
                f"Keras reports backend {got_backend!r} with {got_format!r}; the run asked for "
                f"{self.name!r} with {data_format!r}. Check KERAS_BACKEND and "
                f"{os.environ.get('KERAS_HOME', '$KERAS_HOME')}/keras.json."
            )
        return self.keras

    def _limit_cores(self) -> Dict[str, Any]:
        """Pin the process to ``threads`` cores when fewer than all were asked for."""
        settings: Dict[str, Any] = {
            "requested": self.threads,
            "env": {
                key: os.environ[key]
                for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
                if key in os.environ
            },
        }
        if hasattr(os, "sched_getaffinity"):
            cores = sorted(os.sched_getaffinity(0))
            if self.threads < len(cores):
                cores = cores[: self.threads]
                os.sched_setaffinity(0, cores)
            settings["cpu_affinity"] = cores
        return settings

    @abc.abstractmethod
    def configure_threads(self) -> Dict[str, Any]:
        """Set the framework's own thread pools; return what was set (or why not)."""

    @abc.abstractmethod
    def import_keras(self) -> Any:
        """Import and return the keras module."""

    @abc.abstractmethod
    def framework_info(self) -> Dict[str, Any]:
        """Name, version and visible devices of the framework under Keras."""

    @abc.abstractmethod
    def make_optimizer(self, name: str, learning_rate: float) -> Any:
        """A Keras optimizer instance; the Keras generations spell the arguments apart."""

    def sync(self) -> None:
        """Wait until the device has finished queued work (no-op where reads already sync)."""

    def memory_readings(self) -> List[Dict[str, Any]]:
        """Memory figures, each labelled with its kind and where it was read."""
        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
        return [
            {
                "kind": "process_peak_rss",
                "bytes": int(peak_kib) * 1024,
                "source": "getrusage(RUSAGE_SELF).ru_maxrss of the worker",
            }
        ]
