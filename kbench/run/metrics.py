"""Metrics the parent adds to a worker's own: what the sampler saw (memory the worker
could not see, energy, the machine's other work) and the achieved FLOP/s.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

from kbench.measure import quality, sysinfo
from kbench.measure.sampler import Sampler, SamplerResult, windows_from_markers
from kbench.results.config import RunConfig
from kbench.run.protocol import WorkerReply
from kbench_models import spec_for

NVML_KINDS = {  # series -> (memory kind, whose memory it is)
    "process_memory_bytes": ("process_nvml", "the worker and its children"),
    "memory_used_bytes": ("device_used", "every process on the device"),
}


def add_sampled(
    sampler: Sampler, metrics: Dict[str, Any], started_at: float, ended_at: float,
    cores_given: Optional[int], busy_threshold: float, measured: bool = True,
) -> SamplerResult:  # fmt: skip
    """The sampler's series over the run's windows; a ``measured`` run's ``metrics`` get
    the memory the worker could not see, energy, and its measured window's quality."""
    windows = windows_from_markers(metrics.get("markers", {}), started_at, ended_at)
    sampled = sampler.result(windows)
    if measured:
        metrics["memory"] = metrics["memory"] + sampled_memory(sampled.summary)
        metrics["energy"] = measured_energy(sampled.summary, metrics["measured_images"])
        assessed = quality.assess(
            sampled.series, windows["measured"], cores_given, busy_threshold,
            worker_gpus=sampled.sources.get("gpu", {}).get("worker_gpus"),
        )  # fmt: skip
        if assessed is not None:
            metrics["quality"] = assessed.to_dict()
    return sampled


def compute_rate(config: RunConfig, metrics: Dict[str, Any], reply: WorkerReply) -> Dict[str, Any]:
    """Achieved FLOP/s from the model's FLOPs per sample, and its share of the peak. Every
    run's rates pass here: a token model's ``metrics`` also get :func:`token_rate`'s."""
    metrics.update(token_rate(config, metrics, reply))
    flops = reply.model.get("flops", {})
    per_sample = flops.get("train_per_sample" if config.mode == "train" else
                           "forward_per_sample")  # fmt: skip
    if not per_sample:
        return {"available": False, "reason": "no FLOPs counted for this model"}
    if config.mode == "generate":  # a sequence: one forward pass of the whole window a token
        per_sample *= config.max_new_tokens
    achieved = metrics["images_per_sec"] * per_sample / 1e9
    rate: Dict[str, Any] = {
        "available": True, "flops_per_sample": per_sample, "achieved_gflops_per_sec": achieved,
        "method": flops.get("method"),
    }  # fmt: skip
    if reply.framework.get("memory_options", {}).get("gpus_visible"):
        return rate | {"peak_fraction": None, "peak_reason": "no peak figure is known for this GPU"}
    peak = sysinfo.cpu_matmul_peak(config.threads_in_force)
    if not peak["available"]:
        return rate | {"peak_fraction": None, "peak_reason": peak["reason"]}
    rate["peak_gflops_per_sec"] = best = peak["gflops_per_sec"]
    return rate | {"peak_fraction": achieved / best, "peak_method": peak["method"]}


def token_rate(config: RunConfig, metrics: Dict[str, Any], reply: WorkerReply) -> Dict[str, Any]:
    """``tokens_per_sec``: ``images_per_sec`` (samples/s, over the measured window) times the
    sequence length (the model's input steps), for a model that reads token ids (generate:
    sequences/s times the new tokens of each); {} else."""
    steps = reply.model.get("input_shape") or []
    rate = metrics.get("images_per_sec")
    if spec_for(config.model).input_kind != "tokens" or len(steps) != 1 or rate is None:
        return {}
    if config.mode == "generate":  # the new tokens, as the worker counted them
        return {"tokens_per_sec": rate * config.max_new_tokens}
    return {"tokens_per_sec": rate * steps[0]}


def sampled_memory(summary: Dict[str, Dict[str, Dict[str, Any]]]) -> List[Dict[str, Any]]:
    """The sampler's GPU memory peaks over the run, by kind. Where no GPU gave the worker's
    own, one ``process_nvml`` reading has ``bytes: None`` and why (never 0)."""
    readings, unknown = [], []
    for name, stats in sorted(summary.get("run", {}).items()):
        gpu, _, metric = name.partition("_")
        kind, whose = NVML_KINDS.get(metric, (None, None))
        if not (gpu.startswith("gpu") and kind):
            continue
        if stats.get("max") is None:
            if kind == "process_nvml" and stats.get("reason"):
                unknown.append((gpu, stats["reason"]))
            continue
        source = f"NVML, the largest sampled value over the run ({whose})"
        readings.append({"kind": kind, "bytes": int(stats["max"]), "device": gpu, "source": source})
    if unknown and not any(r["kind"] == "process_nvml" for r in readings):
        readings.append({
            "kind": "process_nvml", "bytes": None, "device": ",".join(gpu for gpu, _ in unknown),
            "source": "NVML per-process memory",
            "reason": "; ".join(f"{gpu}: {why}" for gpu, why in unknown),
        })  # fmt: skip
    return readings


def measured_energy(
    summary: Dict[str, Dict[str, Dict[str, Any]]], measured_images: int
) -> Dict[str, Any]:
    """Energy over the measured window, per device and in total, and images per joule. Per
    GPU the worker used: its counter's increase (``counter``), else its sampled power
    integrated (``power_integral``); a GPU with neither makes the energy unknown with the
    reason, never 0. Intel RAPL adds the CPU package where readable. A board measuring its
    own input power (a Jetson, ``board_energy_j``) gives the whole board's energy instead
    (``board_power_integral``): the GPU's share is not known apart."""
    measured = summary.get("measured", {})
    devices: Dict[str, Dict[str, Any]] = {}
    missing: Dict[str, str] = {}
    gpus = sorted({n.split("_", 1)[0] for n in measured if re.match(r"gpu\d+_", n)})
    for gpu in gpus:
        counter = measured.get(f"{gpu}_energy_j") or {}
        power = measured.get(f"{gpu}_power_w") or {}
        if counter.get("increase") is not None:
            devices[gpu] = {"joules": counter["increase"], "method": "counter",
                            "covered_fraction": counter.get("covered_fraction")}  # fmt: skip
        elif power.get("integral_j") is not None:
            devices[gpu] = {"joules": power["integral_j"], "method": "power_integral",
                            "covered_fraction": power.get("covered_fraction")}  # fmt: skip
        else:
            missing[gpu] = counter.get("reason") or (
                "neither an energy counter nor at least two power readings around the "
                "measured window"
            )
    board = measured.get("board_energy_j") or {}
    if board.get("increase") is not None:
        devices = {"board": {"joules": board["increase"], "method": "board_power_integral",
                             "covered_fraction": board.get("covered_fraction")}}  # fmt: skip
        missing = {}  # the board's energy holds its GPU's
    rapl = measured.get("rapl_energy_j") or {}
    if rapl.get("increase") is not None and "board" not in devices:
        devices["cpu_package"] = {"joules": rapl["increase"], "method": "counter (Intel RAPL)"}
    if missing:
        return {
            "available": False,
            "reason": "the energy of a GPU the worker used is unknown: "
            + "; ".join(f"{gpu}: {why}" for gpu, why in missing.items()),
            "devices": devices,
        }
    if not devices:
        return {
            "available": False,
            "reason": "no energy counter was readable (NVML energy on a GPU, Intel RAPL on "
            "the CPU) and no GPU power was sampled around the measured window",
        }
    joules = sum(d["joules"] for d in devices.values())
    methods = sorted({d["method"].split(" ")[0] for d in devices.values()})
    return {
        "available": True,
        "measured_j": joules,
        "method": methods[0] if len(methods) == 1 else "mixed",
        "devices": devices,
        "counters": {  # as before: the counters' increases
            (f"{name}_energy_j" if name.startswith("gpu") else "rapl_energy_j"): d["joules"]
            for name, d in devices.items()
            if d["method"].startswith("counter")
        },
        "images_per_joule": measured_images / joules if joules > 0 else None,
    }
