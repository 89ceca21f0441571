"""Which CPU kernel library each framework runs, and why (worker side).

TensorFlow on oneDNN and on its own Eigen kernels are different programs (speeds,
rounding, layouts). TensorFlow turns oneDNN on by default only on x86 CPUs with the
features in :data:`ONEDNN_DEFAULT_FEATURES`; ``TF_ENABLE_ONEDNN_OPTS``, read once as it
starts, overrides that. Eigen cannot run NCHW convolutions on the CPU, so
:func:`plan_onednn` turns oneDNN on for a channels_first run unless ``--onednn off``, and
:func:`nchw_refusal` says why a run left on Eigen cannot start. The other frameworks'
choices are only recorded. Imports no framework: TensorFlow must not start before
:func:`plan_onednn` is applied.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from typing import Any, Dict, Mapping, Optional, Sequence

ONEDNN_VARIABLE = "TF_ENABLE_ONEDNN_OPTS"
# TensorFlow's rule (core/util/util.cc, IsMKLEnabled): on by default on Linux x86 with one
ONEDNN_DEFAULT_FEATURES = (
    "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16",
)  # fmt: skip
X86 = ("x86_64", "amd64", "i386", "i686")


def cpu_default(cpu: Mapping[str, Any], platform: str) -> Optional[bool]:
    """Whether TensorFlow turns oneDNN on by default on this CPU; None when unknown."""
    features = cpu.get("features")
    if features is None or str(cpu.get("architecture", "")).lower() not in X86:
        return None
    if not platform.startswith("linux"):
        return False
    return any(name in features for name in ONEDNN_DEFAULT_FEATURES)


@dataclass(frozen=True)
class OneDnnPlan:
    """What the worker sets before TensorFlow starts, and why."""

    requested: str  # the onednn switch: auto, on or off
    set_to: Optional[str]  # the value kbench gives TF_ENABLE_ONEDNN_OPTS; None: left alone
    environment: Optional[str]  # TF_ENABLE_ONEDNN_OPTS as the run found it
    cpu_default: Optional[bool]
    reason: str
    switched_for_layout: bool = False  # turned on because channels_first needs it

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def plan_onednn(
    requested: str, environment: Optional[str], cpu: Mapping[str, Any], platform: str,
    data_format: str, device: str = "auto",
) -> OneDnnPlan:  # fmt: skip
    """The value of TF_ENABLE_ONEDNN_OPTS for a run, before TensorFlow starts."""
    default = cpu_default(cpu, platform)
    plan = dict(requested=requested, environment=environment, cpu_default=default)
    if requested in ("on", "off"):
        value = "1" if requested == "on" else "0"
        return OneDnnPlan(set_to=value, reason=f"--onednn {requested}", **plan)
    # TF_ENABLE_ONEDNN_OPTS as TensorFlow reads it
    found = {"1": True, "true": True, "0": False, "false": False}.get(
        (environment or "").strip().lower()
    )
    if found is not None:
        without = f"{ONEDNN_VARIABLE}={environment} in the environment"
        expected = found
    else:
        none_of = ", ".join(ONEDNN_DEFAULT_FEATURES)
        without = {
            None: "TensorFlow's default for this CPU and build (not predicted by kbench)",
            True: "on by default on this CPU (it has AVX-512 VNNI/BF16, AVX-VNNI or AMX)",
            False: f"off by default on this CPU (it has none of {none_of})",
        }[default]
        expected = default
    if data_format == "channels_first" and expected is not True and device != "gpu":
        return OneDnnPlan(
            set_to="1",
            reason=(
                f"turned on for channels_first: oneDNN would be off ({without}), and "
                "TensorFlow's Eigen CPU kernels cannot run NCHW convolutions "
                "(--onednn off refuses such a run instead)"
            ),
            switched_for_layout=True,
            **plan,
        )
    return OneDnnPlan(set_to=None, reason=without, **plan)


def jit_decides_start(backend: str, data_format: Optional[str]) -> bool:
    """Whether ``jit_compile`` decides if a run can start at all (:func:`nchw_refusal`), so
    that it shares a warm worker only with runs of the same ``jit_compile``."""
    return backend == "tensorflow" and data_format == "channels_first"


def nchw_refusal(
    data_format: str, onednn: Optional[bool], gpus: int, jit_compile: str, why: str = ""
) -> str:
    """Why this TensorFlow run cannot start ("" when it can): channels_first on the CPU with
    neither oneDNN nor XLA."""
    if data_format != "channels_first" or onednn is not False or gpus or jit_compile == "on":
        return ""
    return (
        "TensorFlow with oneDNN off runs its Eigen CPU kernels, which cannot run NCHW "
        "(channels_first) convolutions (Conv2D and its gradients support only NHWC on the "
        f"CPU); expected oneDNN on, XLA (--jit-compile on) or a GPU, received oneDNN off "
        f"({why or 'as TensorFlow started'}) and no GPU. Fix: --onednn on (or auto), "
        "--jit-compile on, or --data-format channels_last"
    )


def torch_kernels(torch: Any) -> Dict[str, Any]:
    """PyTorch's CPU kernels: oneDNN on or off, the ISA dispatched for, its BLAS and LAPACK."""
    config = ""
    try:
        config = torch.__config__.show()
    except Exception:  # an unusual build: record what the rest says
        pass

    def built(key: str) -> Optional[str]:
        found = re.search(rf"{key}=([^,\n]+)", config)
        return found.group(1).strip() if found else None

    info: Dict[str, Any] = {
        "mkldnn_available": bool(torch.backends.mkldnn.is_available()),
        "mkldnn_enabled": bool(torch.backends.mkldnn.enabled),
        "mkl_available": bool(torch.backends.mkl.is_available()), "blas": built("BLAS_INFO"),
        "lapack": built("LAPACK_INFO"),
    }  # fmt: skip
    try:
        info["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except AttributeError:  # torch older than 2.0
        info["cpu_capability"] = None
    # "Intel(R) MKL-DNN v3.12.0 (Git Hash ...)" (oneDNN under its old name) or "oneDNN v..."
    found = re.search(r"(?:MKL-DNN|oneDNN) v[\d.]+", config)
    info["onednn_version"] = found.group(0).split(" v")[1] if found else None
    # ATEN_CPU_CAPABILITY=default (or avx2) runs the kernels an older CPU would get
    return {**info, **variables(("ATEN_CPU_CAPABILITY",))}


def numpy_blas() -> Dict[str, Any]:
    """numpy's BLAS and, with threadpoolctl, the thread pools loaded here and their sizes."""
    import numpy as np

    info: Dict[str, Any] = {"numpy": np.__version__, "blas": None}
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]  # numpy >= 1.25
        info["blas"] = {key: blas.get(key) for key in ("name", "version", "openblas configuration")}
    except Exception:  # numpy < 1.25 keeps its build facts as attributes instead
        config = getattr(np, "__config__", None)
        opt = getattr(config, "blas_opt_info", None) or getattr(config, "blas_ilp64_opt_info", None)
        if isinstance(opt, dict) and opt.get("libraries"):
            info["blas"] = {"name": ", ".join(dict.fromkeys(opt["libraries"])), "version": None}
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return info
    info["thread_pools"] = [
        {key: pool.get(key) for key in ("user_api", "internal_api", "num_threads", "version")}
        for pool in threadpool_info()
    ]
    return info


def variables(names: Sequence[str]) -> Dict[str, str]:
    """The given environment variables that are set, as the process sees them."""
    return {name: os.environ[name] for name in names if name in os.environ}
