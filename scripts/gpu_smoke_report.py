"""What scripts/gpu_smoke.sh prints from the result documents its stages wrote.

    python scripts/gpu_smoke_report.py smoke STORE    per run: each GPU the worker used
    python scripts/gpu_smoke_report.py memory STORE   per run: what the memory options did

Reads the result JSON files only (the format in docs/result-schema.md), so it runs
under any interpreter with the standard library.
"""

from __future__ import annotations

import glob
import json
import sys
from typing import Any, Dict, Iterator, Optional


def mib(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value / 2**20:,.0f} MiB"


def stat(summary: Dict[str, Any], name: str, key: str) -> Optional[float]:
    return (summary.get(name) or {}).get(key)


def num(value: Optional[float], fmt: str = ".1f") -> str:
    return "n/a" if value is None else format(value, fmt)


def results(store: str) -> Iterator[Dict[str, Any]]:
    for path in sorted(glob.glob(f"{store}/*.json")):
        document = json.load(open(path))
        if isinstance(document, dict) and "config" in document and "metrics" in document:
            yield document


def worker_gpu_lines(r: Dict[str, Any]) -> Iterator[str]:
    """Per GPU the worker used: kernel time, memory by kind, power and energy."""
    m = r.get("metrics", {})
    sampler = r.get("sampler") or {}
    summary = sampler.get("summary", {})
    measured, run = summary.get("measured", {}), summary.get("run", {})
    gpu = sampler.get("sources", {}).get("gpu", {})
    if not gpu.get("available"):
        yield f"  no GPU series: {gpu.get('reason') or 'sampler off'}"
    used = gpu.get("worker_gpus") or {}
    how = f"{used.get('method')}: {used.get('note')}"
    yield f"  GPUs the worker used: {used.get('indices')} ({how})"
    devices = {d.get("index"): d for d in gpu.get("devices", [])}
    energy = m.get("energy") or {}
    for index in used.get("indices") or []:
        p, d = f"gpu{index}_", devices.get(index, {})
        process = run.get(p + "process_memory_bytes") or {}
        joules = (energy.get("devices") or {}).get(f"gpu{index}") or {}
        yield f"  GPU {index} {d.get('name')} ({d.get('pci_bus_id')})" + (
            f" FAILED: {d['failed']}" if d.get("failed") else ""
        )
        yield (
            f"    kernel time % (measured, NVML): mean "
            f"{num(stat(measured, p + 'kernel_time_percent', 'mean'))}"
            f" / max {num(stat(measured, p + 'kernel_time_percent', 'max'))}"
        )
        yield (
            f"    memory, peak over the run: worker (NVML per process) {mib(process.get('max'))}"
            + (f" [{process['reason']}]" if process.get("reason") else "")
            + f"; device used {mib(stat(run, p + 'memory_used_bytes', 'max'))}"
            f" [{d.get('memory_used_method')}]"
        )
        yield (
            f"    power (measured): mean {num(stat(measured, p + 'power_w', 'mean'))} W; energy "
            + (
                f"{joules['joules']:.1f} J ({joules['method']})"
                if joules
                else f"n/a ({energy.get('reason') or 'the run gave no energy figure'})"
            )
        )
    if energy.get("available"):
        yield (
            f"  energy, measured window: {energy['measured_j']:.1f} J ({energy['method']}), "
            f"{num(energy.get('images_per_joule'), '.2f')} img/J"
        )
    if gpu.get("unsupported") or gpu.get("failed"):
        yield f"  unsupported: {gpu.get('unsupported')}; failed: {gpu.get('failed')}"


def smoke(store: str) -> None:
    for r in results(store):
        m = r.get("metrics", {})
        memory = {x["kind"]: x for x in m.get("memory", [])}
        peak = (memory.get("framework_peak") or {}).get("bytes")
        speed = m.get("images_per_sec") or 0
        print(
            f"\n{r['config']['backend']}: {r['status']}, {speed:,.0f} img/s, "
            f"framework peak {mib(peak)}"
        )
        if r["status"] != "ok":
            print(f"  {r['reason']}")
        for line in worker_gpu_lines(r):
            print(line)
        profile = m.get("profile") or {}
        if profile.get("status") == "ok":
            top = profile["top_ops"][0]
            phases = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in profile["phases_s"].items())
            print(
                f"  profile on {profile['device']}: {phases}; top: {top['op']} "
                f"({top['phase']}, {top['share']:.0%})"
            )
        elif profile:
            print(f"  profile: {profile.get('status')}: {profile.get('reason')}")


def memory_options(config: Dict[str, Any]) -> str:
    fraction, growth = config.get("gpu_memory_fraction"), config.get("gpu_memory_growth")
    if fraction:
        return f"fraction {fraction}"
    return "growth" if growth else "default"


def memory(store: str) -> None:
    """One line per run: the option, the framework's own peak, the worker's NVML figure
    and the whole device's, beside the GPU's total, so a preallocating default
    (JAX: 75% of the GPU) stands out from growth and a fraction."""
    print(
        f"{'backend':<14}{'option':<14}{'status':<8}{'framework peak':>16}"
        f"{'worker (NVML)':>16}{'device used':>16}{'GPU total':>12}"
    )
    for r in results(store):
        sampler = r.get("sampler") or {}
        run = sampler.get("summary", {}).get("run", {})
        gpu = sampler.get("sources", {}).get("gpu", {})
        indices = (gpu.get("worker_gpus") or {}).get("indices") or [0]
        devices = {d.get("index"): d for d in gpu.get("devices", [])}
        p = f"gpu{indices[0]}_"
        kinds = {x["kind"]: x for x in r.get("metrics", {}).get("memory", [])}
        total = devices.get(indices[0], {}).get("memory_total_bytes")
        print(
            f"{r['config']['backend']:<14}{memory_options(r['config']):<14}{r['status']:<8}"
            f"{mib((kinds.get('framework_peak') or {}).get('bytes')):>16}"
            f"{mib((run.get(p + 'process_memory_bytes') or {}).get('max')):>16}"
            f"{mib(stat(run, p + 'memory_used_bytes', 'max')):>16}{mib(total):>12}"
        )
        if r["status"] != "ok":
            print(f"  {r.get('reason')}")


if __name__ == "__main__":
    {"smoke": smoke, "memory": memory}[sys.argv[1]](sys.argv[2])
