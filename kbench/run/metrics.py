"""Metrics the parent adds to a worker's own: sampled memory peaks, measured energy,
and the achieved FLOP/s. Shared by the runner and the data-parallel launcher.
"""

from __future__ import annotations

from typing import Any, Dict, List

from kbench.measure import sysinfo
from kbench.results.config import RunConfig
from kbench.run.task import WorkerReply


def compute_rate(config: RunConfig, metrics: Dict[str, Any], reply: WorkerReply) -> Dict[str, Any]:
    """Achieved FLOP/s from the model's FLOPs per sample, and its share of the peak."""
    flops = reply.model.get("flops", {})
    per_sample = flops.get("forward_per_sample" if config.mode == "inference" else
                           "train_per_sample")  # fmt: skip
    if not per_sample:
        return {"available": False, "reason": "no FLOPs counted for this model"}
    achieved = metrics["images_per_sec"] * per_sample / 1e9
    rate: Dict[str, Any] = {
        "available": True,
        "flops_per_sample": per_sample,
        "achieved_gflops_per_sec": achieved,
        "method": flops.get("method"),
    }
    if reply.framework.get("memory_options", {}).get("gpus_visible"):
        rate["peak_fraction"] = None
        rate["peak_reason"] = "no peak figure is known for this GPU"
        return rate
    peak = sysinfo.cpu_matmul_peak(config.threads_in_force)
    if peak["available"]:
        rate["peak_gflops_per_sec"] = peak["gflops_per_sec"]
        rate["peak_fraction"] = achieved / peak["gflops_per_sec"]
        rate["peak_method"] = peak["method"]
    else:
        rate["peak_fraction"] = None
        rate["peak_reason"] = peak["reason"]
    return rate


def sampled_memory(summary: Dict[str, Dict[str, Dict[str, float]]]) -> List[Dict[str, Any]]:
    """The sampler's GPU memory peaks over the whole run, labelled with their kinds."""
    readings = []
    for name, stats in sorted(summary.get("run", {}).items()):
        gpu, _, metric = name.partition("_")
        kind = {"process_memory_bytes": "process_nvml", "memory_used_bytes": "device_used"}.get(
            metric
        )
        if gpu.startswith("gpu") and kind:
            readings.append(
                {
                    "kind": kind,
                    "bytes": int(stats["max"]),
                    "device": gpu,
                    "source": "NVML, the largest sampled value over the run"
                    + (
                        " (the worker and its children)"
                        if kind == "process_nvml"
                        else " (every process on the device)"
                    ),
                }
            )
    return readings


def measured_energy(
    summary: Dict[str, Dict[str, Dict[str, float]]], measured_images: int
) -> Dict[str, Any]:
    """Energy over the measured window from every readable counter, and images per joule."""
    counters = {
        name: stats["increase"]
        for name, stats in summary.get("measured", {}).items()
        if name.endswith("energy_j") and stats.get("samples", 0) >= 2
    }
    if not counters:
        return {
            "available": False,
            "reason": "no energy counter was readable (NVML energy on a GPU, Intel RAPL on "
            "the CPU) with at least two samples in the measured window",
        }
    joules = sum(counters.values())
    return {
        "available": True,
        "measured_j": joules,
        "counters": counters,
        "images_per_joule": measured_images / joules if joules > 0 else None,
    }
