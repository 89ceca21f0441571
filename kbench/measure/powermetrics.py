"""Apple GPUs on macOS, read from ``powermetrics``' plist output.

macOS gives no unprivileged reading of GPU utilization or power: ``powermetrics`` needs
root, so without it the ``gpu`` source is unavailable with that reason. As root,
:class:`PowermetricsSource` runs ``powermetrics --samplers gpu_power -f plist -i MS``
beside the worker; each NUL-separated plist document (:func:`parse_sample`) gives
``gpu0_active_percent = 100 * (1 - gpu.idle_ratio)`` and, from ``gpu.gpu_energy`` (mJ
over ``elapsed_ns``), ``gpu0_power_w`` and the running sum ``gpu0_energy_j``. Each
sample is returned once; until the first arrives a read returns nothing.
"""

from __future__ import annotations

import logging
import os
import plistlib
import subprocess
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

from kbench.measure import processes
from kbench.measure.nvml import SourceUnavailable

log = logging.getLogger(__name__)

NO_ROOT_REASON = (
    "macOS reads GPU utilization and power only through powermetrics, which needs root: "
    "run kbench with sudo to record them (CPU, the worker's RSS and battery are recorded "
    "without root)"
)
METHOD = "powermetrics --samplers gpu_power -f plist: gpu.idle_ratio, gpu.gpu_energy"


def command(interval_s: float) -> List[str]:
    return ["powermetrics", "--samplers", "gpu_power", "-f", "plist",
            "-i", str(max(int(interval_s * 1000), 1))]  # fmt: skip


def parse_sample(data: bytes) -> Dict[str, Any]:
    """One plist document's ``gpu0_active_percent``, ``gpu0_power_w``, ``gpu_energy_mj``."""
    doc = plistlib.loads(data)
    gpu = doc.get("gpu") or {}
    out: Dict[str, Any] = {}
    if "idle_ratio" in gpu:
        out["gpu0_active_percent"] = 100.0 * (1.0 - float(gpu["idle_ratio"]))
    energy = gpu.get("gpu_energy", (doc.get("processor") or {}).get("gpu_energy"))
    elapsed_ns = doc.get("elapsed_ns")
    if energy is not None:
        out["gpu_energy_mj"] = float(energy)
        if elapsed_ns:
            out["gpu0_power_w"] = float(energy) / 1e3 / (float(elapsed_ns) / 1e9)
    return out


def split_documents(buffer: bytes) -> Tuple[List[bytes], bytes]:
    """The complete NUL-separated documents in ``buffer`` and what is left after them."""
    *documents, rest = buffer.split(b"\x00")
    return [d for d in documents if d.strip()], rest


class PowermetricsSource:
    """The Apple GPU's active residency and power, from a ``powermetrics`` process; root
    only. ``argv`` and ``euid`` replace the real command and user (for tests)."""

    name = "gpu"

    def __init__(
        self, interval_s: float = 0.2, argv: Optional[Sequence[str]] = None,
        euid: Optional[int] = None,
    ) -> None:  # fmt: skip
        if processes.SYSTEM != "Darwin":
            raise SourceUnavailable(f"powermetrics is macOS only; this is {processes.SYSTEM}")
        euid = os.geteuid() if euid is None else euid
        if euid != 0:
            raise SourceUnavailable(NO_ROOT_REASON)
        self.argv = list(argv or command(interval_s))
        try:
            self.process = subprocess.Popen(
                self.argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
            )
        except OSError as err:
            raise SourceUnavailable(f"{self.argv[0]} could not be started: {err}") from err
        self._lock = threading.Lock()
        self._pending: List[Dict[str, Any]] = []
        self.energy_j = 0.0
        self.samples = 0
        self.parse_errors: List[str] = []
        self._reader = threading.Thread(target=self._read_stream, daemon=True)
        self._reader.start()

    def _read_stream(self) -> None:
        buffer = b""
        stream = self.process.stdout
        while True:
            chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
            if not chunk:
                break
            documents, buffer = split_documents(buffer + chunk)
            for document in documents:
                self._take(document)
        if buffer.strip():  # the last document needs no separator
            self._take(buffer)

    def _take(self, document: bytes) -> None:
        try:
            sample = parse_sample(document)
        except Exception as err:  # a document cut short or a format we do not know
            self.parse_errors.append(f"{type(err).__name__}: {err}"[:200])
            return
        with self._lock:
            self._pending.append(sample)

    def read(self, tree: List[Any]) -> Dict[str, Any]:
        with self._lock:
            pending, self._pending = self._pending, []
        if not pending:
            return {}
        reading: Dict[str, Any] = {}
        for sample in pending:  # each sample once; the last one's rates
            self.samples += 1
            self.energy_j += sample.pop("gpu_energy_mj", 0.0) / 1e3
            reading.update(sample)
        if "gpu0_power_w" in reading:
            reading["gpu0_energy_j"] = self.energy_j
        return reading

    def describe(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {
            "available": True, "method": METHOD, "command": " ".join(self.argv),
            "samples": self.samples,
            "active": "GPU active residency: 100 x (1 - gpu.idle_ratio) over each "
            "powermetrics interval (not NVML's kernel time)",
        }  # fmt: skip
        if self.parse_errors:
            out["parse_errors"] = self.parse_errors[:5]
        return out

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(timeout=5)
