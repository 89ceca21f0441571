"""NVIDIA Jetson boards (no NVML before their newest releases), read from sysfs and
procfs as tegrastats and jtop do, under a root directory (tests point it at a fake tree):

- **GPU load and frequency**: the integrated GPU's devfreq node (found as jtop finds it),
  ``load`` in per mille of the governor's last window, ``cur_freq`` in Hz.
- **Power**: the INA3221 monitors (hwmon files on JetPack 5 and 6, iio on JetPack 4), each
  rail ``rail_<name>_power_w``; the input rail (``*_IN``) is ``board_power_w``, else the
  sum of every rail, said so; a rail feeding the GPU alone is also ``gpu0_power_w``.
- **Energy**: the board power integrated over the samples, ``board_energy_j``.
- **GPU memory**: ``NvMapMemUsed`` (``proc/meminfo``), what the GPU driver allocated from
  the memory it shares with the CPU, every process.

A Jetson: ``proc/device-tree/model`` names one, or ``etc/nv_tegra_release`` exists.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from kbench.measure.nvml import SourceUnavailable

GPU_NODE_NAMES = ("gpu", "gp10b", "gv11b", "ga10b")  # Nano/TX2, TX2, Xavier, Orin
METHOD = "Jetson sysfs: devfreq load and cur_freq, INA3221 rails, NvMapMemUsed"


def is_jetson(root: Path = Path("/")) -> bool:
    """Whether ``root`` is (the file tree of) an NVIDIA Jetson."""
    model = board_model(root) or ""
    return "jetson" in model.lower() or (root / "etc/nv_tegra_release").is_file()


def board_model(root: Path) -> Optional[str]:
    """The board's name in ``proc/device-tree/model``; None where there is none."""
    try:
        text = (root / "proc/device-tree/model").read_bytes().decode(errors="replace")
    except OSError:
        return None
    return text.rstrip("\x00\n ") or None


@dataclass(frozen=True)
class Rail:
    """One INA3221 channel: its name and how to read its power in watts."""

    name: str
    files: List[Path]
    read_w: Callable[[], float]


def _number(path: Path) -> float:
    return float(path.read_text().strip())


# (what, label files, the channel's files, what their product is in watts): JetPack 5
# and 6's hwmon files (mV x mA), else JetPack 4's iio files (mW)
RAIL_FILES = (
    ("hwmon (ina3221)", "ina3221/*/hwmon/hwmon*/in*_label", ("in{}_input", "curr{}_input"), 1e6),
    ("iio (ina3221x)", "ina3221x/*/iio:device*/rail_name_*", ("in_power{}_input",), 1e3),
)


def find_rails(root: Path) -> Tuple[List[Rail], str]:
    """The connected INA3221 channels (not ``NC``, with every file), and which files."""
    for kind, pattern, names, per_watt in RAIL_FILES:
        rails = []
        for label in sorted(root.glob("sys/bus/i2c/drivers/" + pattern)):
            channel = re.sub(r"^(in|rail_name_)|_label$", "", label.name)
            files = [label.with_name(name.format(channel)) for name in names]
            name = label.read_text().strip()
            if name.upper() != "NC" and all(f.is_file() for f in files):
                read = functools.partial(_watts, files, per_watt)
                rails.append(Rail(name, files, read))
        if rails:
            return rails, kind
    return [], RAIL_FILES[-1][0]


def _watts(files: List[Path], per_watt: float) -> float:
    return math.prod(_number(f) for f in files) / per_watt


@dataclass(frozen=True)
class GpuNode:
    """The integrated GPU's files: ``load`` (per mille) and ``cur_freq`` (Hz, or None)."""

    name: str
    load: Path
    freq: Optional[Path]


def find_gpu(root: Path) -> Optional[GpuNode]:
    """The integrated GPU's devfreq ``cur_freq`` and ``load`` (as jtop finds them), or None."""
    devfreq = root / "sys/class/devfreq"
    if devfreq.is_dir():
        for entry in sorted(devfreq.iterdir()):
            name_file = entry / "device/of_node/name"
            try:
                name = name_file.read_bytes().decode(errors="replace").rstrip("\x00\n ")
            except OSError:
                continue
            if name in GPU_NODE_NAMES:
                device = Path(os.path.realpath(entry / "device"))
                return GpuNode(name, load=device / "load", freq=entry / "cur_freq")
    legacy = root / "sys/devices/gpu.0/load"  # Nano, TX1, TX2 without a devfreq of_node
    if legacy.is_file():
        return GpuNode("gpu.0", load=legacy, freq=None)
    return None


def meminfo_kib(root: Path, key: str) -> Optional[int]:
    try:
        text = (root / "proc/meminfo").read_text()
    except OSError:
        return None
    match = re.search(rf"^{key}:\s+(\d+)\s*kB", text, re.M)
    return int(match.group(1)) if match else None


class JetsonSource:
    """A Jetson's integrated GPU and board power, as the ``gpu`` source."""

    name = "gpu"

    def __init__(self, root: Path = Path("/"), clock: Callable[[], float] = time.monotonic):
        self.root, self.clock = Path(root), clock
        if not is_jetson(self.root):
            raise SourceUnavailable(
                f"not a Jetson: {self.root / 'proc/device-tree/model'} names no Jetson and "
                f"{self.root / 'etc/nv_tegra_release'} is absent"
            )
        self.gpu = find_gpu(self.root)
        self.rails, self.power_files = find_rails(self.root)
        inputs = [r for r in self.rails if re.search(r"(^|_)IN$", r.name.upper())]
        self.board_rails = inputs or self.rails
        self.board_method = (
            f"input rail {'+'.join(r.name for r in inputs)}"
            if inputs
            else "sum of every rail (no input rail named *_IN: it may miss or double-count "
            "parts of the board)"
        )
        tokens = {r.name: set(r.name.upper().split("_")) for r in self.rails}
        self.gpu_rail = next(
            (r for r in self.rails if "GPU" in tokens[r.name] and "CPU" not in tokens[r.name]), None
        )
        self.has_nvmap = meminfo_kib(self.root, "NvMapMemUsed") is not None
        if self.gpu is None and not self.rails:
            raise SourceUnavailable(
                f"a Jetson, but neither a GPU devfreq node under {self.root / 'sys/class/devfreq'}"
                " nor INA3221 power monitors under "
                f"{self.root / 'sys/bus/i2c/drivers'} could be found"
            )
        self.energy_j = 0.0
        self._last: Optional[tuple] = None  # (time, board watts)

    def read(self, tree: List[Any]) -> Dict[str, Any]:
        reading: Dict[str, Any] = {}
        if self.gpu is not None:
            with contextlib.suppress(OSError, ValueError):
                reading["gpu0_load_percent"] = _number(self.gpu.load) / 10.0  # per mille
            if self.gpu.freq is not None:
                with contextlib.suppress(OSError, ValueError):
                    reading["gpu0_freq_mhz"] = _number(self.gpu.freq) / 1e6  # Hz
        watts: Dict[str, float] = {}
        for rail in self.rails:
            try:
                watts[rail.name] = rail.read_w()
            except (OSError, ValueError):
                continue
            reading[f"rail_{rail.name}_power_w"] = watts[rail.name]
        if self.gpu_rail is not None and self.gpu_rail.name in watts:
            reading["gpu0_power_w"] = watts[self.gpu_rail.name]
        if self.board_rails and all(r.name in watts for r in self.board_rails):
            board = sum(watts[r.name] for r in self.board_rails)
            now = self.clock()
            if self._last is not None:
                self.energy_j += (now - self._last[0]) * (board + self._last[1]) / 2
            self._last = (now, board)
            reading["board_power_w"] = board
            reading["board_energy_j"] = self.energy_j
        shared = meminfo_kib(self.root, "NvMapMemUsed")
        if shared is not None:
            reading["gpu0_shared_memory_bytes"] = shared * 1024
        return reading

    def describe(self) -> Dict[str, Any]:
        unavailable = {}
        if self.gpu is None:
            unavailable["gpu0_load_percent"] = "no GPU devfreq node or sys/devices/gpu.0/load"
        if not self.rails:
            unavailable["board_power_w"] = (
                "no INA3221 monitor (hwmon ina3221 or iio ina3221x); the Jetson Nano 2GB has none"
            )
        if self.gpu_rail is None and self.rails:
            unavailable["gpu0_power_w"] = (
                "no rail feeds the GPU alone (rails: "
                + ", ".join(r.name for r in self.rails)
                + "): GPU energy is part of the board's"
            )
        if not self.has_nvmap:
            unavailable["gpu0_shared_memory_bytes"] = "no NvMapMemUsed in /proc/meminfo"
        return {
            "available": True,
            "method": METHOD,
            "board": board_model(self.root),
            "gpu_node": None
            if self.gpu is None
            else {
                "name": self.gpu.name,
                "load": str(self.gpu.load),
                "cur_freq": None if self.gpu.freq is None else str(self.gpu.freq),
            },  # fmt: skip
            "power_files": self.power_files if self.rails else None,
            "rails": {r.name: [str(f) for f in r.files] for r in self.rails},
            "board_power": self.board_method if self.rails else None,
            "gpu_power_rail": None if self.gpu_rail is None else self.gpu_rail.name,
            "energy": "board power integrated over the samples (trapezoids)",
            "load": "per mille of time the GPU was busy over the devfreq governor's window, "
            "as percent (the Jetson's own figure, as tegrastats' GR3D_FREQ; not NVML's)",
            "shared_memory": "NvMapMemUsed: memory the GPU driver (nvmap) allocated from the "
            "memory the GPU shares with the CPU, every process",
            "unavailable": unavailable,
        }

    def close(self) -> None:
        pass
