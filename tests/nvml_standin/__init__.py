"""A stand-in ``libnvidia-ml.so.1`` in C, so the real ``nvidia-ml-py`` binding can run.

``nvml_standin.c`` exports the NVML entry points the binding (pynvml) looks up for
the calls kbench makes. The binding opens it with ``ctypes.CDLL("libnvidia-ml.so.1")``,
a bare name the dynamic loader resolves through ``LD_LIBRARY_PATH``; so a test runs
the code under test in a subprocess whose environment comes from :func:`standin_env`,
and the binding's own ctypes structures, version checks and error classes run
against the stand-in. The loader reads ``LD_LIBRARY_PATH`` when a process starts,
which is why setting it inside the pytest process would not do.

Interface::

    lib_dir = build_standin(tmp_dir, variant="full")   # compiled once per (dir, variant)
    config = write_config(tmp_dir / "nvml.conf", [StandinDevice(...), ...])
    env = standin_env(lib_dir, config)                 # os.environ + LD_LIBRARY_PATH ...
    subprocess.run([sys.executable, "-c", code], env=env)

Variants (:data:`VARIANTS`): ``full`` (a current driver); ``no_v3`` (no
``nvmlDeviceGetComputeRunningProcesses_v3``: the binding raises
``NVMLLibraryMismatchError``); ``old_driver`` (no ``_v3``, no
``nvmlDeviceGetMemoryInfo_v2``, no ``nvmlDeviceGetCurrentClocksEventReasons``).

Behaviour per device (:class:`StandinDevice`): name, PCI bus id, UUID, memory total,
used (v1, including ``memory_reserved``; v2 reports used minus reserved), utilization,
power (``None``: NOT_SUPPORTED), the energy counter (``None``: NOT_SUPPORTED; it grows
by ``energy_step_mj`` per read), the compute processes (``(pid, bytes)``; bytes
``None`` is NVML_VALUE_NOT_AVAILABLE, pid ``"children"`` is every descendant of the
process that loaded the library, as the runner's worker is), and failures
(``{"nvmlDeviceGetName": (15, 0)}``: return NVML error 15, GPU_IS_LOST, from the
first call on; ``(4, 3)``: NO_PERMISSION after three successful calls). NVML error
codes are in :data:`ERRORS`. ``write_config(..., fails={...})`` sets failures of
device-less calls (``nvmlInitWithFlags``, ``nvmlSystemGetDriverVersion``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple, Union

SOURCE = Path(__file__).with_name("nvml_standin.c")
LIBRARY_NAME = "libnvidia-ml.so.1"
CONFIG_VARIABLE = "KBENCH_NVML_STANDIN"
VARIANTS: Dict[str, Tuple[str, ...]] = {
    "full": (),
    "no_v3": ("-DKB_NO_PROCESSES_V3",),
    "old_driver": ("-DKB_NO_PROCESSES_V3", "-DKB_NO_MEMORY_V2", "-DKB_NO_EVENT_REASONS"),
}
ERRORS = {"NOT_SUPPORTED": 3, "NO_PERMISSION": 4, "GPU_IS_LOST": 15, "UNKNOWN": 999}
GIB = 2**30


class CompilerMissing(RuntimeError):
    """No C compiler: the stand-in cannot be built."""


@dataclass
class StandinDevice:
    name: str = "Stand-in GPU"
    bus_id: Optional[str] = None  # default 00000000:0<index+1>:00.0
    uuid: Optional[str] = None
    memory_total: int = 16 * GIB
    memory_used: int = 4 * GIB  # v1 figure, includes memory_reserved
    memory_reserved: int = 256 * 2**20
    gpu_util: int = 57
    mem_util: int = 23
    power_mw: Optional[int] = 150_000
    energy_mj: Optional[int] = 1_000_000
    energy_step_mj: int = 1500
    processes: Sequence[Tuple[Union[int, str], Optional[int]]] = ()
    fails: Dict[str, Tuple[int, int]] = field(default_factory=dict)


def compiler() -> str:
    found = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if not found:
        # CI (scripts/test.sh) installs a compiler; there a missing one fails the tests.
        kind = (
            RuntimeError
            if os.environ.get("KBENCH_REQUIRE_ALL_BACKENDS") == "1"
            else CompilerMissing
        )
        raise kind(
            "no C compiler (gcc or cc on PATH, or CC) to build the NVML stand-in; "
            "install one (apt-get install gcc) or run scripts/setup_envs.sh"
        )
    return found


def build_standin(tmp_dir: Path, variant: str = "full") -> Path:
    """Compile the stand-in as ``<folder>/<variant>/libnvidia-ml.so.1``; return the folder.

    Under ``scripts/test.sh`` the folder is the session's (``KBENCH_TEST_LOCK_DIR``, which
    pytest's workers share and the session removes), so each variant is compiled once
    per run instead of once per test (13 compiles in a run before); elsewhere ``tmp_dir``.
    Tests write their configurations beside them, in folders of their own."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {sorted(VARIANTS)}, got {variant!r}")
    session = os.environ.get("KBENCH_TEST_LOCK_DIR")
    folder = (Path(session) / "nvml-standin" if session else Path(tmp_dir)) / variant
    library = folder / LIBRARY_NAME
    if library.exists() and library.stat().st_mtime >= SOURCE.stat().st_mtime:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{LIBRARY_NAME}.{os.getpid()}"  # the other worker may build it too
    command = [compiler(), "-shared", "-fPIC", "-O1", f"-Wl,-soname,{LIBRARY_NAME}",
               *VARIANTS[variant], "-o", str(partial), str(SOURCE)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"building the NVML stand-in failed: {done.stderr}")
    os.replace(partial, library)
    return folder


def write_config(
    path: Path, devices: Sequence[StandinDevice], fails: Optional[Dict[str, Tuple[int, int]]] = None
) -> Path:
    lines = [f"devices={len(devices)}"]
    for name, (code, after) in (fails or {}).items():
        lines.append(f"fail={name}:{code}:{after}")
    for i, d in enumerate(devices):
        values = {
            "name": d.name,
            "bus_id": d.bus_id,
            "uuid": d.uuid,
            "memory_total": d.memory_total,
            "memory_used": d.memory_used,
            "memory_reserved": d.memory_reserved,
            "gpu_util": d.gpu_util,
            "mem_util": d.mem_util,
            "power_mw": -1 if d.power_mw is None else d.power_mw,
            "energy_mj": -1 if d.energy_mj is None else d.energy_mj,
            "energy_step_mj": d.energy_step_mj,
        }
        lines += [f"{key}{i}={value}" for key, value in values.items() if value is not None]
        if d.processes:
            procs = ",".join(f"{pid}:{'na' if b is None else b}" for pid, b in d.processes)
            lines.append(f"procs{i}={procs}")
        for name, (code, after) in d.fails.items():
            lines.append(f"fail{i}={name}:{code}:{after}")
    Path(path).write_text("\n".join(lines) + "\n")
    return Path(path)


def standin_env(
    lib_dir: Path, config: Path, base: Optional[Dict[str, str]] = None
) -> Dict[str, str]:
    """An environment in which ``CDLL("libnvidia-ml.so.1")`` opens the stand-in."""
    env = dict(os.environ if base is None else base)
    previous = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = str(lib_dir) + (f":{previous}" if previous else "")
    env[CONFIG_VARIABLE] = str(config)
    return env
