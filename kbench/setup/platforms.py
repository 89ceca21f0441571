"""What each system can install: the requirements of kbench's two environments per
platform (``sys.platform`` with ``platform.machine()``) and build kind (``cpu``, ``gpu``:
CUDA builds) as an :class:`EnvironmentPlan`, or why the platform cannot have it
(``benchmarks/resolve_platforms.py`` checks the wheels against PyPI).

A GPU environment on Linux is built for one CUDA major version, every framework pinned
to a build for it: pip sees no conflict between ``nvidia-cudnn-cu12`` and ``-cu13``,
which overwrite each other's libraries (``tests/test_setup_cuda.py`` checks the pins).
keras3 gets CUDA 12; mxnet CUDA 11: ``mxnet-cu112`` links CUDA 11 libraries that it does
not ship and has no run path to where PyPI's CUDA 11 wheels put them, so the set-up
records those folders in ``.kbench-library-path`` and a worker's ``LD_LIBRARY_PATH``
starts with them (:func:`loader_environment`); nothing in site-packages changes.

Standard library only: this runs before any environment exists.
"""

from __future__ import annotations

import dataclasses
import os
import platform as _platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

ENVIRONMENTS = ("keras3", "mxnet")
KINDS = ("cpu", "gpu")
MXNET_VERSION = "1.9.1"
# MXNet 1.9.1's CUDA builds on PyPI (Linux x86-64 only), one per CUDA release
MXNET_CUDA_WHEELS = tuple(
    f"mxnet-cu{v}" for v in (101, 102, 110, 111, 112, 113, 114, 115, 116, 117)
)
DEFAULT_MXNET_CUDA_WHEEL = "mxnet-cu112"

# the harness and the tests: every keras3 environment has them
KERAS3_COMMON = (
    "keras", "tensorflow-datasets", "nvidia-ml-py", "psutil", "pyyaml", "pandas", "pyarrow",
    "matplotlib", "pillow", "scikit-learn", "pytest", "pytest-xdist", "ruff",
    "mkdocs-material", "nbclient", "nbformat", "ipykernel",
)  # fmt: skip
# The inference runtimes (kbench.backends.runtimes) and what Keras' model.export needs
# for them (tf2onnx: ONNX from TensorFlow; scipy: the OpenVINO export; nncf 3.4, NNCF's
# release for OpenVINO 2026.4: the int8 OpenVINO IR, kbench.run.exports)
KERAS3_RUNTIMES = (
    "onnxruntime==1.32.0", "openvino==2026.4.1", "nncf==3.4.0", "ai-edge-litert==2.3.0",
    "onnx==1.23.2", "tf2onnx==1.17.0", "scipy",
)  # fmt: skip
# a quantizer of one runtime only: left out (and said) wherever that runtime is (nncf is
# pure Python, a wheel for every platform, but quantizes for OpenVINO only)
QUANTIZER_OF = {"nncf==3.4.0": "openvino==2026.4.1"}
# KerasHub, for the hub: models (kbench_models.hub): keras-hub itself is installed without
# its dependencies (KERAS3_NO_DEPS), since its tensorflow-text asks for the `tensorflow`
# distribution, which pip would put beside tensorflow-cpu (and a newer one beside a CUDA
# pin); these are what it imports (kbench builds no tokenizer, so tensorflow-text is left
# out). kagglesdk is keras-hub's own pin; kagglehub 1.0.2 is the last that accepts it.
KERAS3_HUB = ("kagglehub==1.0.2", "kagglesdk==0.1.28", "regex", "tokenizers", "sentencepiece")
KERAS3_NO_DEPS = ("keras-hub==0.32.0",)
# where PyPI has no wheel of a runtime's pinned version (checked with pip's --platform):
# left out of the plan, and said
RUNTIMES_MISSING: Dict[Tuple[str, str], Tuple[str, ...]] = {
    ("darwin", "x86_64"): ("onnxruntime==1.32.0", "openvino==2026.4.1", "ai-edge-litert==2.3.0"),
    ("linux", "arm64"): ("ai-edge-litert==2.3.0",),
}  # fmt: skip
MXNET_COMMON = ("keras-mxnet==2.2.4.3", "numpy<1.24", "nvidia-ml-py", "psutil", "pillow")

# The frameworks of each environment: what `python3 -m kbench.setup --check` inspects
FRAMEWORKS = {"keras3": ("tensorflow", "jax", "torch"), "mxnet": ("mxnet",)}
# keras3's CUDA builds on Linux: CUDA 12 for all three (torch 2.10.0 is cu128, PyPI's last
# torch for CUDA 12; tensorflow 2.21's nvidia-nccl-cu12 range excludes torch 2.10.0's pin)
KERAS3_CUDA = "12"
KERAS3_CUDA_FRAMEWORKS = ("tensorflow[and-cuda]==2.20.0", "jax[cuda12]==0.10.2", "torch==2.10.0")
# keras3's CPU torch; on Linux from PyTorch's CPU wheel index, as PyTorch's own
# instructions for CPU-only machines give it: PyPI's Linux torch wheels are CUDA builds
# that pull several GB of nvidia-* libraries no CPU run uses
KERAS3_CPU_TORCH = "torch==2.13.0"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# MXNet's CUDA 11 builds link these CUDA 11 libraries but ship none of them: PyPI's CUDA
# 11 wheels (the last of each for CUDA 11) supply them, on the worker's library path
MXNET_CUDA = "11"
MXNET_CUDA_LIBRARIES = (
    "nvidia-cuda-runtime-cu11==11.8.89", "nvidia-cuda-nvrtc-cu11==11.8.89",
    "nvidia-cublas-cu11==11.11.3.6", "nvidia-cudnn-cu11==8.9.6.50",
    "nvidia-cufft-cu11==10.9.0.58", "nvidia-curand-cu11==10.3.0.86",
    "nvidia-cusolver-cu11==11.4.1.48",
    "nvidia-nvtx-cu11==11.8.86", "nvidia-nccl-cu11==2.21.5",
)  # fmt: skip
# the MXNet CUDA builds those libraries fit: CUDA 11.2 and newer (libnvrtc.so.11.2)
MXNET_PYPI_CUDA_WHEELS = tuple(f"mxnet-cu{v}" for v in (112, 113, 114, 115, 116, 117))

_MACHINES = {"x86_64": "x86_64", "amd64": "x86_64", "x64": "x86_64", "aarch64": "arm64",
             "arm64": "arm64"}  # fmt: skip
_SYSTEMS = {"linux": "Linux", "darwin": "macOS", "win32": "Windows"}


@dataclass(frozen=True)
class Platform:
    """A system and processor, as Python names them (``sys.platform``, ``platform.machine()``)."""

    system: str  # "linux", "darwin", "win32", or what sys.platform says elsewhere
    machine: str  # "x86_64", "aarch64", "arm64", "AMD64", ...

    @classmethod
    def current(cls) -> Platform:
        return cls(sys.platform, _platform.machine())

    @property
    def arch(self) -> str:
        """``x86_64`` or ``arm64`` (Linux's ``aarch64`` and Windows' ``AMD64`` folded in)."""
        return _MACHINES.get(self.machine.lower(), self.machine.lower())

    @property
    def family(self) -> str:
        """``linux``, ``darwin`` or ``win32`` (``linux2`` and ``cygwin`` folded in)."""
        if self.system.startswith("linux"):
            return "linux"
        if self.system in ("win32", "cygwin"):
            return "win32"
        return self.system

    @property
    def label(self) -> str:
        arch = {"x86_64": "x86-64", "arm64": "arm64"}.get(self.arch, self.machine)
        if self.family == "linux" and self.arch == "arm64":
            arch = "aarch64"
        return f"{_SYSTEMS.get(self.family, self.system)} {arch}"


def venv_python(env_dir: Path, system: Optional[str] = None) -> Path:
    """The interpreter of the venv ``env_dir`` on ``system`` (``sys.platform``, default this
    one): ``Scripts\\python.exe`` on Windows, ``bin/python`` elsewhere."""
    system = sys.platform if system is None else system
    if Platform(system, "").family == "win32":
        return Path(env_dir) / "Scripts" / "python.exe"
    return Path(env_dir) / "bin" / "python"


LIBRARY_PATH_FILE = ".kbench-library-path"


def record_library_folders(env_dir: Path) -> List[Path]:
    """Write ``.kbench-library-path`` listing the ``lib`` folders of the ``nvidia-*`` wheels
    installed in ``env_dir``; return them."""
    found = sorted(Path(env_dir).glob("lib/python3*/site-packages/nvidia/*/lib"))
    found += sorted(Path(env_dir).glob("Lib/site-packages/nvidia/*/lib"))  # Windows
    folders = [folder for folder in found if folder.is_dir()]
    lines = [str(folder.relative_to(env_dir)) for folder in folders]
    (Path(env_dir) / LIBRARY_PATH_FILE).write_text("".join(f"{line}\n" for line in lines))
    return folders


def loader_environment(env: Mapping[str, str], env_dir: Path) -> Dict[str, str]:
    """``env`` with ``env_dir``'s recorded library folders in front of ``LD_LIBRARY_PATH``
    (unchanged when it has none)."""
    result = dict(env)
    recorded = Path(env_dir) / LIBRARY_PATH_FILE
    lines = recorded.read_text().splitlines() if recorded.is_file() else []
    folders = [str(Path(env_dir) / line.strip()) for line in lines if line.strip()]
    if folders:
        kept = [part for part in result.get("LD_LIBRARY_PATH", "").split(os.pathsep) if part]
        result["LD_LIBRARY_PATH"] = os.pathsep.join(folders + kept)
    return result


@dataclass(frozen=True)
class EnvironmentPlan:
    """One environment of one kind for one platform: what pip installs, or why not."""

    name: str  # "keras3" or "mxnet"
    kind: str  # "cpu" or "gpu"
    platform: Platform
    requirements: Tuple[str, ...] = ()
    unavailable: Optional[str] = None  # why this platform cannot have it; None: it can
    notes: Tuple[str, ...] = ()  # what the user should know about what is installed
    # the CUDA major version every framework build in it is for ("12"); None: CPU builds
    cuda: Optional[str] = None
    # the nvidia-* libraries' folders go on the worker's LD_LIBRARY_PATH
    loader_path: bool = False
    # (requirement, index URL): requirements (also in ``requirements``, so the stamp is
    # unchanged) that pip installs first, alone, from that index (``--index-url``)
    from_index: Tuple[Tuple[str, str], ...] = ()
    # installed after the requirements with pip's --no-deps (their dependencies are listed
    # in the requirements: keras-hub's own would replace a framework)
    no_deps: Tuple[str, ...] = ()

    @property
    def stamped(self) -> Tuple[str, ...]:
        """What the environment's stamp lists: every requirement, --no-deps ones last."""
        return self.requirements + self.no_deps

    @property
    def available(self) -> bool:
        return self.unavailable is None


# Why a platform cannot have MXNet (any kind), keyed by (family, arch).
MXNET_UNAVAILABLE: Dict[Tuple[str, str], str] = {
    ("darwin", "arm64"): (
        "MXNet has no build for Apple Silicon (macOS arm64): mxnet 1.9.1's macOS wheel is "
        "Intel (x86-64) only and the project is retired, so the mxnet and mxnet-gluon "
        "backends cannot run here"
    ),
    ("win32", "x86_64"): (  # pip's answer (benchmarks/resolve_platforms.py)
        f"MXNet {MXNET_VERSION} has no Windows wheel, and the newest that has one, 1.7.0.post2 "
        "(CPU), needs numpy<1.17, which has no wheel for Python 3.8 or newer, while kbench's "
        "worker needs Python 3.9 or newer: the mxnet and mxnet-gluon backends do not run on "
        "Windows itself; under WSL2 the Linux set-up has them"
    ),
}


def plan(
    name: str, kind: str, where: Optional[Platform] = None, mxnet_wheel: Optional[str] = None
) -> EnvironmentPlan:
    """Environment ``name`` of ``kind`` on ``where`` (default: here), with MXNet's CUDA build
    ``mxnet_wheel``; ValueError for an unknown environment, kind or wheel."""
    where = where or Platform.current()
    if name not in ENVIRONMENTS:
        raise ValueError(
            f"environment {name!r}: expected one of {', '.join(ENVIRONMENTS)}; received {name!r}."
        )
    if kind not in KINDS:
        raise ValueError(
            f"kind {kind!r}: expected cpu (CPU builds) or gpu (CUDA builds); received {kind!r}."
        )
    wheel = mxnet_wheel or DEFAULT_MXNET_CUDA_WHEEL
    if name == "mxnet" and wheel not in MXNET_CUDA_WHEELS:
        raise ValueError(
            f"KBENCH_MXNET_WHEEL={wheel}: expected one of MXNet {MXNET_VERSION}'s CUDA builds "
            f"({', '.join(MXNET_CUDA_WHEELS)}); pick the one for your CUDA release."
        )
    if where.family not in ("linux", "darwin", "win32") or where.arch not in ("x86_64", "arm64"):
        unknown = (
            f"kbench has no environment spec for {where.system} on {where.machine}: expected "
            "Linux (x86-64, aarch64), macOS (x86-64, arm64) or Windows (AMD64); set "
            "KBENCH_PYTHON_<BACKEND> to an interpreter you installed the frameworks into"
        )
        return EnvironmentPlan(name, kind, where, unavailable=unknown)
    return _keras3(kind, where) if name == "keras3" else _mxnet(kind, where, wheel)


def unsupported_reason(name: str, where: Optional[Platform] = None) -> Optional[str]:
    """Why ``where`` can have environment ``name`` in no kind at all, or None."""
    where = where or Platform.current()
    reasons = [plan(name, kind, where).unavailable for kind in KINDS]
    return reasons[0] if all(reasons) else None


def _keras3(kind: str, where: Platform) -> EnvironmentPlan:
    plan = _keras3_frameworks(kind, where)
    if plan.unavailable:
        return plan
    missing = RUNTIMES_MISSING.get((where.family, where.arch), ())
    orphans = tuple(q for q, runtime in QUANTIZER_OF.items() if runtime in missing)
    runtimes = tuple(r for r in KERAS3_RUNTIMES if r not in missing + orphans)
    notes = tuple(
        f"{r.split('==')[0]} has no wheel for {where.label}: its backend does not run here"
        for r in missing
    ) + tuple(
        f"{q.split('==')[0]} is left out on {where.label}: it quantizes for "
        f"{QUANTIZER_OF[q].split('==')[0]}, which has no wheel here"
        for q in orphans
    )
    return dataclasses.replace(
        plan, requirements=plan.requirements + runtimes + KERAS3_HUB, notes=plan.notes + notes,
        no_deps=KERAS3_NO_DEPS,
    )  # fmt: skip


def _keras3_frameworks(kind: str, where: Platform) -> EnvironmentPlan:
    family, arch = where.family, where.arch
    notes: Tuple[str, ...] = ()
    if kind == "cpu":
        # tensorflow-cpu exists for Linux x86-64 and Windows; elsewhere tensorflow is CPU
        tensorflow = "tensorflow-cpu" if (family, arch) == ("linux", "x86_64") else "tensorflow"
        frameworks: Tuple[str, ...] = (tensorflow, "jax[cpu]", KERAS3_CPU_TORCH)
        from_index: Tuple[Tuple[str, str], ...] = ()
        if family == "linux":
            from_index = ((KERAS3_CPU_TORCH, TORCH_CPU_INDEX),)
        if family == "darwin" and arch == "arm64":
            notes = ("torch's macOS wheel runs on Apple GPUs through MPS: --device gpu uses it",)
        if family == "darwin" and arch == "x86_64":  # PyTorch stopped Intel macOS at 2.2
            frameworks = (tensorflow, "jax[cpu]", "torch")
            notes = (
                "torch 2.13.0 has no Intel macOS wheel (the last is 2.2.2), so the newest "
                "one there is installed; results record the version that ran",
            )
        return EnvironmentPlan("keras3", kind, where, frameworks + KERAS3_COMMON, notes=notes,
                               from_index=from_index)  # fmt: skip
    if family == "darwin":
        return EnvironmentPlan("keras3", kind, where, unavailable=(
            "macOS has no CUDA builds (KBENCH_GPU=1 asks for them); build the CPU environment "
            "(KBENCH_GPU=0): its torch runs on Apple GPUs through MPS"
        ))  # fmt: skip
    if family == "win32":
        notes = (
            "TensorFlow has no native Windows GPU build after 2.10: tensorflow runs on the "
            "CPU here (its GPU needs WSL2, where this is a Linux set-up)",
            "JAX has no CUDA build for Windows: jax runs on the CPU here",
            "PyPI's torch for Windows is the CPU build; for CUDA, install torch==2.13.0 from "
            "https://download.pytorch.org/whl/ into this environment",
        )
        frameworks = ("tensorflow", "jax[cpu]", "torch==2.13.0")
        return EnvironmentPlan("keras3", kind, where, frameworks + KERAS3_COMMON, notes=notes)
    return EnvironmentPlan(
        "keras3", kind, where, KERAS3_CUDA_FRAMEWORKS + KERAS3_COMMON, cuda=KERAS3_CUDA
    )


def _mxnet(kind: str, where: Platform, wheel: str) -> EnvironmentPlan:
    family, arch = where.family, where.arch
    if (family, arch) in MXNET_UNAVAILABLE:
        return EnvironmentPlan("mxnet", kind, where, unavailable=MXNET_UNAVAILABLE[family, arch])
    if kind == "gpu" and not (family, arch) == ("linux", "x86_64"):
        return EnvironmentPlan("mxnet", kind, where, unavailable=(
            f"MXNet's CUDA builds ({wheel} and its siblings) exist for Linux x86-64 only, not "
            f"for {where.label}; build the CPU environment (KBENCH_GPU=0)"
        ))  # fmt: skip
    if kind == "cpu":
        return EnvironmentPlan("mxnet", kind, where, (f"mxnet=={MXNET_VERSION}",) + MXNET_COMMON)
    framework = (f"{wheel}=={MXNET_VERSION}",)
    if wheel in MXNET_PYPI_CUDA_WHEELS:
        requirements = framework + MXNET_COMMON + MXNET_CUDA_LIBRARIES
        return EnvironmentPlan("mxnet", kind, where, requirements, cuda=MXNET_CUDA,
                               loader_path=True)  # fmt: skip
    cuda = wheel[len("mxnet-cu") :]
    note = (
        f"{wheel} is built for CUDA {cuda[:-1]}.{cuda[-1]}, for which PyPI has no CUDA "
        "libraries: install that CUDA toolkit and its cuDNN and put their lib folders on "
        "LD_LIBRARY_PATH before kbench starts (mxnet-cu112 to mxnet-cu117 get theirs from PyPI)"
    )
    return EnvironmentPlan("mxnet", kind, where, framework + MXNET_COMMON, notes=(note,),
                           cuda=cuda[:-1])  # fmt: skip
