"""Per-run timelines: CPU or GPU use, memory and images per second over the run, with
the warmup and measured stages shaded."""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from kbench.results.analysis import in_column
from kbench.results.result import RunResult
from kbench.views.figures import MIB, Drawn, RunGroup, colour, new_figure, png_of

TIMELINES = "Per-run timelines"
TIMELINE_PREFIX = "Timeline: "
MAX_TIMELINES = 12
GPU_UTILIZATION = re.compile(r"^gpu(\d+)_(kernel_time_percent|utilization_percent)$")
GPU_PROCESS_MEMORY = re.compile(r"^gpu(\d+)_process_memory_bytes$")
GPU_USED_MEMORY = re.compile(r"^gpu(\d+)_memory_used_bytes$")


def pick_timeline_runs(
    groups: Sequence[RunGroup], backends: Sequence[str]
) -> Tuple[List[Tuple[RunGroup, RunResult]], List[str]]:
    """Per (group, backend) the repeat of median img/s (else one that did not finish), and
    notes on what was left out."""
    picked, notes, sampler_off = [], [], []
    for group in groups:
        for backend in backends:
            runs = group.runs_of(backend)
            sampled = [r for r in runs if r.sampler]
            sampler_off += [r for r in runs if not r.sampler]
            if not sampled:
                continue
            ok = sorted((r for r in sampled if r.ok), key=lambda r: r.metrics["images_per_sec"])
            picked.append((group, ok[(len(ok) - 1) // 2] if ok else sampled[0]))
    if sampler_off:
        names = ", ".join(r.run_id for r in sampler_off[:5])
        more = f" and {len(sampler_off) - 5} more" if len(sampler_off) > 5 else ""
        notes.append(
            f"{len(sampler_off)} run(s) had the sampler off (--sample-interval 0), so they "
            f"have no timeline: {names}{more}."
        )
    if len(picked) > MAX_TIMELINES:
        notes.append(
            f"Showing {MAX_TIMELINES} of {len(picked)} timelines (one per backend, model and "
            "setting); the rest are left out to keep the report short."
        )
        picked = picked[:MAX_TIMELINES]
    return picked, notes


def timeline(group: RunGroup, run: RunResult, backends: Sequence[str]) -> Drawn:
    series = run.sampler.get("series", {})
    labels = run.sampler.get("labels", {})
    times = np.asarray(series.get("t", []), dtype=float)
    t0 = times[0] if times.size else 0.0
    x = times - t0
    markers = run.metrics.get("markers", {})
    steps = run.metrics.get("step_ends_s")
    batch = run.config.get("batch_size")
    has_rate = bool(steps) and bool(batch) and "first_step_start" in markers
    panels = 3 if has_rate else 2
    figure = new_figure(0.5 + 1.9 * panels)
    axes = figure.subplots(panels, 1, squeeze=False)[:, 0]
    axes[1].sharex(axes[0])
    legend = dict(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)

    def curve(ax: Any, name: str, label: str, scale: float = 1.0, **kw) -> None:
        values = np.array([np.nan if v is None else v for v in series[name]], dtype=float)
        dots = "." if len(values) < 20 else None  # a short run: show where the samples are
        ax.plot(x, values * scale, label=label, linewidth=1.4, marker=dots, **kw)

    _shade_stages(axes[0], markers, t0, label=True)
    gpu = _usage_panel(axes[0], run, series, curve)
    _shade_stages(axes[1], markers, t0)
    drawn_memory = _memory_panel(axes[1], series, curve)
    if has_rate:
        _shade_stages(axes[2], markers, t0)
        _rate_panel(axes[2], run, markers, t0, backends)
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(**legend)
        ax.grid(alpha=0.25)
    row = next((b for b in backends if in_column(run, b)), run.config["backend"])  # @ host
    title = f"{TIMELINE_PREFIX}{row}, {group.label}"
    caption = _caption(group, run, row, has_rate, drawn_memory, [labels.get(n) for n in gpu])
    return Drawn(title, png_of(figure), caption)


def _usage_panel(usage: Any, run: RunResult, series: Dict, curve: Callable) -> List[str]:
    """GPU utilization where sampled, else the CPU use; returns the GPU series drawn."""
    gpu = sorted(n for n in series if GPU_UTILIZATION.match(n))
    if gpu:
        for name in gpu:
            index = GPU_UTILIZATION.match(name).group(1)
            curve(usage, name, f"GPU {index}: % of time a kernel ran\n(NVML; not SM occupancy)")
        usage.set_ylabel("GPU utilization, %")
        usage.set_title("GPU utilization (NVML: share of time a kernel ran)", fontsize=10)
        usage.set_ylim(0, 105)
        return gpu
    why = run.sampler.get("sources", {}).get("gpu", {}).get("reason", "no GPU series")
    if "process_cpu_percent" in series:
        curve(usage, "process_cpu_percent", "worker and children,\n% of one core", c="#444")
    if "system_cpu_percent" in series:
        curve(usage, "system_cpu_percent", "whole machine,\n% of all cores", c="#aaa")
    usage.set_ylabel("CPU, %")
    usage.set_ylim(bottom=0)
    usage.set_title(f"CPU use (no GPU utilization: {_clip(why, 80)})", fontsize=10)
    return gpu


def _memory_panel(memory: Any, series: Dict, curve: Callable) -> bool:
    drawn_memory = False
    for name in series:
        if name == "process_rss_bytes":
            text = "host RSS of the worker\nand children (psutil)"
        elif GPU_PROCESS_MEMORY.match(name):
            text = f"GPU {GPU_PROCESS_MEMORY.match(name).group(1)} memory of the\nworker (NVML)"
        elif GPU_USED_MEMORY.match(name):
            text = f"GPU {GPU_USED_MEMORY.match(name).group(1)} memory used,\nall processes (NVML)"
        else:
            continue
        curve(memory, name, text, scale=1 / MIB)
        drawn_memory = True
    memory.set_ylabel("memory, MiB")
    memory.set_ylim(bottom=0)
    memory.set_title("Memory (each line names its kind)", fontsize=10)
    memory.set_xlabel("seconds since the worker started")
    return drawn_memory


def _rate_panel(
    rate: Any, run: RunResult, markers: Dict, t0: float, backends: Sequence[str]
) -> None:
    steps, batch = run.metrics["step_ends_s"], run.config["batch_size"]
    start = markers["first_step_start"] - t0
    edges, rates, width = step_rate(np.asarray(steps, dtype=float), batch, markers)
    label = f"img/s in {_seconds(width)} bins\n(batch size × steps ended\nin the bin / bin width)"
    rate.stairs(rates, start + edges, color=colour(run.config["backend"], backends), linewidth=1.6,
                label=label)  # fmt: skip
    end = start + float(edges[-1])
    left, cut = start, False
    if markers.get("measured_start") and markers.get("measured_end"):
        # a warmup (compilation) far longer than the measured window would squeeze
        # the window into a sliver: show only its last part then
        opened = markers["measured_start"] - t0
        window = markers["measured_end"] - markers["measured_start"]
        if opened - start > window:
            left, cut = max(start, opened - window / 2), True
    margin = (end - left) * 0.03
    rate.set_xlim(left - margin, end + margin)
    rate.set_ylim(bottom=0)
    rate.set_ylabel("img/s")
    rate.set_xlabel(
        "seconds since the worker started (zoomed to the "
        + ("measured window; the start of the warmup is cut off)" if cut else "training steps)")
    )
    rate.set_title("Training throughput over time", fontsize=10)


def _caption(
    group: RunGroup, run: RunResult, row: str, has_rate: bool, drawn_memory: bool,
    gpu_labels: List[Optional[str]],
) -> str:  # fmt: skip
    parts = [f"Run {run.run_id}"]
    repeats = len(group.runs_of(row))
    if repeats > 1 and run.ok:
        parts.append(f"the repeat with the median img/s of {repeats}")
    if not run.ok:
        parts.append(f"it ended {run.status.upper()}: {run.reason}")
    if not has_rate and run.ok and run.kind == "train":
        parts.append("no img/s line: the document has no step_ends_s (written by an older kbench)")
    if not drawn_memory:
        parts.append("no memory series was sampled")
    labels_used = [label for label in gpu_labels if label]
    if labels_used:
        parts.append(f"the utilization series, as the sampler labels it: {labels_used[0]}")
    parts.append(
        f"sampled every {run.sampler.get('interval_s', '?')} s; shaded: warmup steps "
        "(compilation, tracing) and the measured window"
    )
    return "; ".join(parts) + "."


def step_rate(
    ends: np.ndarray, batch: int, markers: Dict[str, Any]
) -> Tuple[np.ndarray, np.ndarray, float]:
    """(bin edges, img/s per bin, bin width) from step end times (seconds after the first
    step began). Bins are sized so the measured window holds a few steps per bin, and an
    edge falls where the measured window opens."""
    span = max(float(ends[-1]), 1e-6)
    offset = 0.0
    if markers.get("measured_start") and markers.get("measured_end"):
        offset = min(max(markers["measured_start"] - markers["first_step_start"], 0.0), span)
        measured = markers["measured_end"] - markers["measured_start"]
        inside = int(np.sum(ends > offset))
    else:
        measured, inside = 0.0, 0
    if measured > 0 and inside > 0:
        width = measured / min(40, max(1, inside // 3))
    else:
        width = span / min(40, max(3, len(ends) // 4))
    width = max(width, span / 300)  # a long warmup next to a short window: at most 300 bins
    before = int(np.ceil(offset / width - 1e-9))
    after = int(np.ceil((span - offset) / width - 1e-9))
    edges = offset + width * np.arange(-before, after + 1)
    edges[0], edges[-1] = 0.0, span  # the end bins stop where the steps do
    if len(edges) > 2 and edges[1] - edges[0] < width / 2:  # too thin to read: merge
        edges = np.delete(edges, 1)
    if len(edges) > 2 and edges[-1] - edges[-2] < width / 2:
        edges = np.delete(edges, -2)
    counts, _ = np.histogram(ends, bins=edges)
    return edges, counts * batch / np.diff(edges), width


def _shade_stages(ax: Any, markers: Dict[str, Any], t0: float, label: bool = False) -> None:
    start, measured = markers.get("first_step_start"), markers.get("measured_start")
    end = markers.get("measured_end")
    if start is not None and measured is not None and measured > start:
        ax.axvspan(start - t0, measured - t0, color="#f6c85f", alpha=0.35, lw=0,
                   label="warmup steps" if label else None)  # fmt: skip
    if measured is not None and end is not None:
        ax.axvspan(measured - t0, end - t0, color="#9fd8a8", alpha=0.3, lw=0,
                   label="measured window" if label else None)  # fmt: skip


def _seconds(value: float) -> str:
    return f"{value * 1000:.3g} ms" if value < 1 else f"{value:.3g} s"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
