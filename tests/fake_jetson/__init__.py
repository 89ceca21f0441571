"""Fake file trees laid out like a Jetson's ``/sys``, ``/proc`` and ``/etc``, for
:mod:`kbench.measure.jetson` to read with its real file readers.

The layouts follow the boards' documented files (NVIDIA's Jetson Linux "Power and
Performance" pages; jtop and tegrastats read the same ones): the devfreq entry is a
symlink into the platform device as on a board, ``device`` links back to the GPU's
device directory (where ``load`` lives) and ``of_node/name`` ends in a NUL as device
tree strings do. The figures are made up; none was captured on a board.

    orin = build_orin(tmp_path)           # JetPack 6: hwmon ina3221, ga10b devfreq
    nano = build_nano_jetpack4(tmp_path)  # JetPack 4: iio ina3221x, gpu.0
    set_value(orin, "hwmon_in1_input", 5000)   # change a reading between samples
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Tuple

MEMINFO = """MemTotal:        7802128 kB
MemFree:          912344 kB
MemAvailable:    4388120 kB
Buffers:           48716 kB
Cached:          3126572 kB
NvMapMemFree:      65536 kB
NvMapMemUsed:     {nvmap} kB
"""


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _link(link: Path, target: str) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, link)


def build_orin(root: Path, nvmap_kib: int = 524288) -> Dict[str, Path]:
    """An Orin Nano developer kit under JetPack 6: GPU ``17000000.ga10b``; one INA3221
    at i2c 1-0040 with VDD_IN, VDD_CPU_GPU_CV, VDD_SOC (no GPU-only rail)."""
    files: Dict[str, Path] = {}
    _write(root / "proc/device-tree/model", "NVIDIA Jetson Orin Nano Developer Kit\x00")
    _write(root / "etc/nv_tegra_release", "# R36 (release), REVISION: 3.0, GCID: 36923193\n")
    _write(root / "proc/meminfo", MEMINFO.format(nvmap=nvmap_kib))
    files["meminfo"] = root / "proc/meminfo"
    device = root / "sys/devices/platform/bus@0/17000000.gpu"
    files["load"] = _write(device / "load", "523\n")  # per mille
    _write(root / "sys/firmware/devicetree/base/bus@0/gpu@17000000/name", "ga10b\x00")
    _link(device / "of_node", "../../../../firmware/devicetree/base/bus@0/gpu@17000000")
    freq_dir = device / "devfreq/17000000.ga10b"
    files["cur_freq"] = _write(freq_dir / "cur_freq", "624750000\n")  # Hz
    _link(freq_dir / "device", "../../../17000000.gpu")
    _link(root / "sys/class/devfreq/17000000.ga10b",
          "../../devices/platform/bus@0/17000000.gpu/devfreq/17000000.ga10b")  # fmt: skip
    # another devfreq device that is not the GPU (the NVDLA engines have one too)
    other = root / "sys/devices/platform/bus@0/15880000.nvdla0"
    _write(other / "devfreq/15880000.nvdla0/cur_freq", "115200000\n")
    _write(root / "sys/firmware/devicetree/base/bus@0/nvdla0@15880000/name", "nvdla0\x00")
    _link(other / "of_node", "../../../../firmware/devicetree/base/bus@0/nvdla0@15880000")
    _link(other / "devfreq/15880000.nvdla0/device", "../../../15880000.nvdla0")
    _link(root / "sys/class/devfreq/15880000.nvdla0",
          "../../devices/platform/bus@0/15880000.nvdla0/devfreq/15880000.nvdla0")  # fmt: skip
    sensor = root / "sys/devices/platform/bus@0/c240000.i2c/i2c-1/1-0040"
    hwmon = sensor / "hwmon/hwmon1"
    rails: Tuple[Tuple[str, int, int], ...] = (
        ("VDD_IN", 5064, 1392),  # mV, mA: 7.049 W
        ("VDD_CPU_GPU_CV", 5056, 416),
        ("VDD_SOC", 5064, 312),
    )
    for channel, (label, mv, ma) in enumerate(rails, start=1):
        _write(hwmon / f"in{channel}_label", label + "\n")
        files[f"hwmon_in{channel}_input"] = _write(hwmon / f"in{channel}_input", f"{mv}\n")
        files[f"hwmon_curr{channel}_input"] = _write(hwmon / f"curr{channel}_input", f"{ma}\n")
        _write(hwmon / f"curr{channel}_crit", "32760\n")
    _write(hwmon / "in7_input", "5064\n")  # the sum channel: a voltage without label or current
    _write(hwmon / "name", "ina3221\n")
    _link(root / "sys/bus/i2c/drivers/ina3221/1-0040",
          "../../../../devices/platform/bus@0/c240000.i2c/i2c-1/1-0040")  # fmt: skip
    return files


def build_nano_jetpack4(root: Path, nvmap_kib: int = 262144) -> Dict[str, Path]:
    """A Jetson Nano under JetPack 4: GPU ``57000000.gpu`` (``/sys/devices/gpu.0``); one
    INA3221 at i2c 6-0040 on the iio driver with POM_5V_IN, POM_5V_GPU, POM_5V_CPU."""
    files: Dict[str, Path] = {}
    _write(root / "proc/device-tree/model", "NVIDIA Jetson Nano Developer Kit\x00")
    _write(root / "etc/nv_tegra_release", "# R32 (release), REVISION: 7.4, GCID: 33514132\n")
    _write(root / "proc/meminfo", MEMINFO.format(nvmap=nvmap_kib))
    device = root / "sys/devices/57000000.gpu"
    files["load"] = _write(device / "load", "998\n")
    _link(root / "sys/devices/gpu.0", "57000000.gpu")
    _write(root / "sys/firmware/devicetree/base/gpu@57000000/name", "gpu\x00")
    _link(device / "of_node", "../../firmware/devicetree/base/gpu@57000000")
    freq_dir = device / "devfreq/57000000.gpu"
    files["cur_freq"] = _write(freq_dir / "cur_freq", "921600000\n")
    _link(freq_dir / "device", "../../../57000000.gpu")
    _link(root / "sys/class/devfreq/57000000.gpu",
          "../../devices/57000000.gpu/devfreq/57000000.gpu")  # fmt: skip
    iio = root / "sys/devices/7000c400.i2c/i2c-6/6-0040/iio:device0"
    for channel, (label, mw) in enumerate((("POM_5V_IN", 4912), ("POM_5V_GPU", 1804),
                                           ("POM_5V_CPU", 1093))):  # fmt: skip
        _write(iio / f"rail_name_{channel}", label + "\n")
        files[f"iio_power{channel}"] = _write(iio / f"in_power{channel}_input", f"{mw}\n")
        _write(iio / f"in_current{channel}_input", f"{mw * 1000 // 5000}\n")
        _write(iio / f"in_voltage{channel}_input", "5000\n")
    _link(root / "sys/bus/i2c/drivers/ina3221x/6-0040",
          "../../../../devices/7000c400.i2c/i2c-6/6-0040")  # fmt: skip
    return files


def set_value(files: Dict[str, Path], key: str, value: float) -> None:
    files[key].write_text(f"{value}\n")
