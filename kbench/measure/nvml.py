"""NVML, read through the ``nvidia-ml-py`` binding (``pynvml``): every GPU's state,
which calls its driver lacks, and which GPUs a worker used.

A GPU whose handle or name cannot be read, or that is lost mid-run, is marked failed
and not read again; the others go on. A call a driver lacks is marked unsupported on
that GPU with the reason, and the older call used where there is one (the _v2 process
list, memory info v1 with driver-reserved memory, the deprecated throttle reasons). A
value that could not be read is absent, never 0: the worker's own device memory only
where NVML lists one of its PIDs with a known size. :class:`SourceUnavailable` is how
every sampler source says it cannot be read on this machine.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import psutil

log = logging.getLogger(__name__)


class SourceUnavailable(RuntimeError):
    """A sampler source cannot be read on this machine; the message says why."""


def error_text(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


def text_of(value: Any) -> Optional[str]:
    """An NVML string: bytes from older bindings, str from newer ones."""
    return value.decode() if isinstance(value, bytes) else value


# NVML errors after which a GPU answers nothing more until it is reset: the GPU is
# marked failed from then on. Errors that say a call cannot work on this driver or
# board mark that metric unsupported on that GPU; any other error loses one reading.
LOST_ERRORS = ("GpuIsLost", "ResetRequired", "DriverNotLoaded", "Uninitialized")
UNSUPPORTED_ERRORS = ("NotSupported", "FunctionNotFound", "NoPermission", "LibraryMismatch")
NOT_AVAILABLE_REASON = (
    "NVML_VALUE_NOT_AVAILABLE: the driver does not know the worker's memory on this GPU "
    "(Windows WDDM, some laptop GPUs)"
)
NO_MATCH_REASON = (
    "no NVML process matches the worker's PIDs (the worker did not use this GPU, or a "
    "container's PID namespace hides its host PIDs)"
)


def _is(err: BaseException, names: Tuple[str, ...]) -> bool:
    kind = type(err).__name__
    return any(name in kind for name in names)


@dataclass
class GpuState:
    """What one GPU answered so far: its facts, which calls it lacks, and failure."""

    index: int
    handle: Any = None
    name: Optional[str] = None
    pci_bus_id: Optional[str] = None
    uuid: Optional[str] = None
    memory_total_bytes: Optional[int] = None
    failed: Optional[str] = None  # set once: the GPU is not read again
    unsupported: Dict[str, str] = field(default_factory=dict)  # metric -> why
    errors: Dict[str, str] = field(default_factory=dict)  # metric -> last transient error
    memory_call: Optional[str] = None  # "v2" or "v1"
    reasons_call: Optional[str] = None  # "event_reasons" or "throttle_reasons"
    processes_call: Optional[str] = None  # "v3" or "v2"
    worker_seen: bool = False  # a process of the worker was listed on this GPU
    worker_memory_unknown: bool = False  # ... with NVML_VALUE_NOT_AVAILABLE
    processes: Optional[List[Tuple[int, Optional[int]]]] = None  # the last listing

    def describe(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {
            "index": self.index, "name": self.name, "memory_total_bytes": self.memory_total_bytes,
            "pci_bus_id": self.pci_bus_id, "uuid": self.uuid,
            "memory_used_method": {
                "v2": "nvmlDeviceGetMemoryInfo_v2: excludes driver-reserved memory",
                "v1": "nvmlDeviceGetMemoryInfo (v1): includes driver-reserved memory",
            }.get(self.memory_call or ""),
            "clock_reasons_call": self.reasons_call, "processes_call": self.processes_call,
        }  # fmt: skip
        found = {
            "failed": self.failed,
            "unsupported": dict(self.unsupported),
            "errors": dict(self.errors),
            "process_memory_reason": self.process_memory_reason(),
        }
        return out | {key: value for key, value in found.items() if value}

    def process_memory_reason(self) -> Optional[str]:
        """Why the worker's own memory on this GPU is unknown, or None if it was read."""
        if "process_memory_bytes" in self.unsupported:
            return self.unsupported["process_memory_bytes"]
        if self.worker_memory_unknown:
            return NOT_AVAILABLE_REASON
        if not self.worker_seen:
            return self.failed or NO_MATCH_REASON
        return None


class NvmlSource:
    """Every GPU NVML sees; ``nvml``: the pynvml module (tests: against a stand-in)."""

    name = "gpu"

    def __init__(self, nvml: Any = None) -> None:
        if nvml is None:
            try:
                import pynvml as nvml
            except ImportError as err:
                raise SourceUnavailable("nvidia-ml-py (pynvml) is not installed") from err
        self.nvml = nvml
        # Processes of the same measurement, idle meanwhile (kbench.measure.sampler)
        self.companion_pids: Set[int] = set()
        try:
            nvml.nvmlInit()
        except Exception as err:  # NVMLError, or anything a broken binding raises
            raise SourceUnavailable(f"NVML: {error_text(err)}") from err
        try:
            count = nvml.nvmlDeviceGetCount()
        except Exception as err:
            self.close()
            raise SourceUnavailable(f"NVML: nvmlDeviceGetCount: {error_text(err)}") from err
        if count == 0:
            self.close()
            raise SourceUnavailable("NVML sees no GPU")
        self.gpus = [self._open(index) for index in range(count)]
        if all(gpu.failed for gpu in self.gpus):
            self.close()
            raise SourceUnavailable(
                "NVML: no GPU could be read: "
                + "; ".join(f"gpu{g.index}: {g.failed}" for g in self.gpus)
            )

    def _open(self, index: int) -> GpuState:
        nvml, gpu = self.nvml, GpuState(index)
        try:
            gpu.handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = nvml.nvmlDeviceGetName(gpu.handle)
        except Exception as err:
            gpu.failed = f"opening the GPU: {error_text(err)}"
            log.warning("sampler: NVML GPU %d cannot be read: %s", index, gpu.failed)
            return gpu
        gpu.name = text_of(name)
        memory = self._try(gpu, "memory_total_bytes", lambda: self._memory(gpu))
        gpu.memory_total_bytes = None if memory is None else int(memory.total)
        gpu.pci_bus_id = text_of(
            self._try(gpu, "pci_bus_id", lambda: nvml.nvmlDeviceGetPciInfo(gpu.handle).busId)
        )
        gpu.uuid = text_of(self._try(gpu, "uuid", lambda: nvml.nvmlDeviceGetUUID(gpu.handle)))
        return gpu

    def _try(self, gpu: GpuState, metric: str, read: Callable[[], Any]) -> Any:
        if gpu.failed or metric in gpu.unsupported:
            return None
        try:
            return read()
        except Exception as err:
            if _is(err, LOST_ERRORS):
                gpu.failed = f"{metric}: {error_text(err)}"
                log.warning("sampler: GPU %d failed, not read again: %s", gpu.index, gpu.failed)
            elif _is(err, UNSUPPORTED_ERRORS) or isinstance(err, (AttributeError, TypeError)):
                gpu.unsupported[metric] = error_text(err)
            else:
                gpu.errors[metric] = error_text(err)
            return None

    def _memory(self, gpu: GpuState) -> Any:
        """Memory info: v2 (used excludes driver-reserved memory) where the driver has it."""
        nvml = self.nvml
        if gpu.memory_call != "v1" and hasattr(nvml, "nvmlMemory_v2"):
            try:
                memory = nvml.nvmlDeviceGetMemoryInfo(gpu.handle, version=nvml.nvmlMemory_v2)
                gpu.memory_call = "v2"
                return memory
            except Exception as err:
                if not (_is(err, UNSUPPORTED_ERRORS) or "VersionMismatch" in type(err).__name__
                        or isinstance(err, TypeError)):  # fmt: skip
                    raise
        gpu.memory_call = "v1"
        return nvml.nvmlDeviceGetMemoryInfo(gpu.handle)

    def _clock_reasons(self, gpu: GpuState) -> int:
        """Clock event reasons; the older, deprecated throttle-reasons call where absent."""
        nvml = self.nvml
        if gpu.reasons_call != "throttle_reasons" and hasattr(
            nvml, "nvmlDeviceGetCurrentClocksEventReasons"
        ):
            try:
                value = int(nvml.nvmlDeviceGetCurrentClocksEventReasons(gpu.handle))
                gpu.reasons_call = "event_reasons"
                return value
            except Exception as err:
                if not _is(err, ("FunctionNotFound",)):
                    raise
        gpu.reasons_call = "throttle_reasons"
        return int(nvml.nvmlDeviceGetCurrentClocksThrottleReasons(gpu.handle))

    def _processes(self, gpu: GpuState) -> List[Tuple[int, Optional[int]]]:
        """(pid, bytes or None) of the compute processes; the _v2 call on drivers that lack
        _v3 (the binding raises NVMLLibraryMismatchError for those)."""
        nvml = self.nvml
        if gpu.processes_call != "v2":
            try:
                running = nvml.nvmlDeviceGetComputeRunningProcesses(gpu.handle)
                gpu.processes_call = "v3"
                return [(int(p.pid), p.usedGpuMemory) for p in running]
            except Exception as err:
                if not (_is(err, ("LibraryMismatch", "FunctionNotFound"))):
                    raise
                if not hasattr(nvml, "nvmlDeviceGetComputeRunningProcesses_v2"):
                    raise
                log.debug("sampler: GPU %d: %s; using the _v2 call", gpu.index, error_text(err))
        running = nvml.nvmlDeviceGetComputeRunningProcesses_v2(gpu.handle)
        gpu.processes_call = "v2"
        return [(int(p.pid), p.usedGpuMemory) for p in running]

    def read(self, tree: List[psutil.Process]) -> Dict[str, Any]:
        nvml, pids = self.nvml, {p.pid for p in tree}
        reading: Dict[str, Any] = {}
        for gpu in self.gpus:
            if gpu.failed:
                continue
            handle, prefix = gpu.handle, f"gpu{gpu.index}_"
            rates = self._try(
                gpu, "utilization", lambda h=handle: nvml.nvmlDeviceGetUtilizationRates(h)
            )
            if rates is not None:
                reading[prefix + "kernel_time_percent"] = rates.gpu
                reading[prefix + "memory_busy_percent"] = rates.memory
            memory = self._try(gpu, "memory_used_bytes", lambda g=gpu: self._memory(g))
            if memory is not None:
                reading[prefix + "memory_used_bytes"] = int(memory.used)
                reading[prefix + "memory_total_bytes"] = int(memory.total)
            gpu.processes = self._try(gpu, "process_memory_bytes", lambda g=gpu: self._processes(g))
            if gpu.processes is not None:
                mine = [used for pid, used in gpu.processes if pid in pids]
                if mine:
                    gpu.worker_seen = True
                if mine and any(used is None for used in mine):
                    gpu.worker_memory_unknown = True
                elif mine:  # nothing matched or unknown: no value, never 0
                    reading[prefix + "process_memory_bytes"] = sum(int(used) for used in mine)
                # the other processes on this GPU (kbench.measure.quality: "shared GPU"),
                # and apart from them, the idle workers of the same comparison
                mates = self.companion_pids
                for kind, used in (
                    ("companion", [u for pid, u in gpu.processes if pid in mates]),
                    ("other", [u for pid, u in gpu.processes if pid not in pids | mates]),
                ):
                    if used or kind == "other":
                        reading[f"{prefix}{kind}_processes"] = len(used)
                    known = [int(u) for u in used if u is not None]
                    if known:  # NVML_VALUE_NOT_AVAILABLE everywhere: unknown, not 0
                        reading[f"{prefix}{kind}_memory_bytes"] = sum(known)
            scalars = (
                ("power_w", lambda h: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0),
                ("energy_j", lambda h: nvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0),
                ("sm_clock_mhz", lambda h: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)),
                (
                    "temperature_c",
                    lambda h: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU),
                ),
                ("throttle_reasons", lambda h, g=gpu: self._clock_reasons(g)),
            )
            for metric, read in scalars:
                value = self._try(gpu, metric, lambda read=read, h=handle: read(h))
                if value is not None:
                    reading[prefix + metric] = value
        return reading

    def worker_gpus(self, visible: Dict[str, Any]) -> Dict[str, Any]:
        """The GPUs the worker used, and how that was found: NVML's process lists (its
        PIDs), else its CUDA_VISIBLE_DEVICES (``visible``) mapped to NVML by PCI bus id."""
        seen = [gpu.index for gpu in self.gpus if gpu.worker_seen]
        if seen:
            return {"indices": seen, "method": "nvml_pids",
                    "note": "GPUs on which NVML listed a process of the worker"}  # fmt: skip
        readable = [gpu.index for gpu in self.gpus if not gpu.failed]
        if not visible.get("known"):
            return {"indices": readable, "method": "all",
                    "note": "no NVML process matched the worker's PIDs and its environment "
                    f"could not be read ({visible.get('reason')}): every GPU counted"}  # fmt: skip
        value = visible.get("CUDA_VISIBLE_DEVICES")
        if value is None:
            return {"indices": readable, "method": "cuda_visible_devices",
                    "note": "no NVML process matched the worker's PIDs (container PID "
                    "namespace?) and CUDA_VISIBLE_DEVICES is unset: every GPU is visible to "
                    "the worker and counted"}  # fmt: skip
        by_bus = sorted(self.gpus, key=lambda g: (g.pci_bus_id or "").upper())
        indices: List[int] = []
        for token in (t.strip() for t in value.split(",")):
            if token.startswith(("GPU-", "MIG-")):
                match = [g.index for g in self.gpus if g.uuid and g.uuid.startswith(token)]
            elif token.isdigit() and int(token) < len(by_bus):
                match = [by_bus[int(token)].index]
            else:
                match = []
            if not match:  # CUDA stops at the first entry it cannot use
                break
            indices.append(match[0])
        indices = [i for i in dict.fromkeys(indices) if i in readable]
        if not value.strip():
            return {"indices": [], "method": "cuda_visible_devices",
                    "note": "CUDA_VISIBLE_DEVICES='' hides every GPU from the worker and no "
                    "NVML process matched its PIDs: no GPU counted"}  # fmt: skip
        return {"indices": indices, "method": "cuda_visible_devices",
                "note": f"no NVML process matched the worker's PIDs; CUDA_VISIBLE_DEVICES="
                f"{value!r} mapped to NVML by PCI bus id order"
                + ("" if visible.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID"
                   else " (assumed: CUDA_DEVICE_ORDER is not PCI_BUS_ID)")}  # fmt: skip

    def describe(self) -> Dict[str, Any]:
        return {
            "available": True, "devices": [gpu.describe() for gpu in self.gpus],
            "unsupported": {
                f"gpu{g.index}": dict(g.unsupported) for g in self.gpus if g.unsupported
            },
            "failed": {f"gpu{g.index}": g.failed for g in self.gpus if g.failed},
        }  # fmt: skip

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception as err:
            log.debug("sampler: nvmlShutdown: %s", err)


def visible_devices_of(process: psutil.Process) -> Dict[str, Any]:
    """The worker's CUDA_VISIBLE_DEVICES (None when unset), from its environment. Not known
    while that reads empty: just after ``Popen`` the kernel may still be loading the new
    program (112 of 300 reads here beside busy loops); the samplers read again until known."""
    try:
        environ = process.environ()
    except (psutil.Error, OSError) as err:
        return {"known": False, "reason": error_text(err)}
    if not environ:
        return {"known": False, "reason": "its environment read empty (still starting?)"}
    return {
        "known": True, "CUDA_VISIBLE_DEVICES": environ.get("CUDA_VISIBLE_DEVICES"),
        "CUDA_DEVICE_ORDER": environ.get("CUDA_DEVICE_ORDER"),
    }  # fmt: skip
