"""Where a data-parallel step's time goes: data loading, forward, backward, communication.

Worker side, a :class:`StepLog` keeps, for every step (warmup included), when it
began and ended (wall clock) and how long its measured phases took: ``data``
(gathering the worker's batch from its shard and handing it to the framework),
``forward`` (forward pass and loss), ``backward`` (the local gradients) and, where
the engine runs it apart from the exchange, ``update`` (the optimizer step).
Communication and synchronization is what is left: ``comm = step - data - forward -
backward - update``, so the parts of a step always add up to the step; it holds the
gradient exchange, waiting for the slowest worker, and the parameter update where
the engine fuses it with the exchange. How each engine measures its phases is in its
``method`` string (kbench.distributed.engines).

Parent side, :func:`combine` merges the workers' summaries into one breakdown:
each phase's mean per step averaged over the workers, the slowest worker's own, and
every worker's. Standard library and numpy only: imported under every environment.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from kbench.measure.stats import percentiles

PHASES = ("data", "forward", "backward", "update", "comm")


def shard_digest(indices: np.ndarray) -> str:
    """A short fingerprint of the sample indices a worker trained on, in order."""
    return hashlib.sha1(np.ascontiguousarray(indices, dtype=np.int64).tobytes()).hexdigest()[:16]


@dataclass
class StepLog:
    """Every step of one worker: wall-clock begin and end, and its measured phases (s)."""

    warmup_steps: int
    begins: List[float] = field(default_factory=list)
    ends: List[float] = field(default_factory=list)
    data: List[float] = field(default_factory=list)
    forward: List[float] = field(default_factory=list)
    backward: List[float] = field(default_factory=list)
    update: List[Optional[float]] = field(default_factory=list)
    losses: List[float] = field(default_factory=list)
    hits: List[Optional[float]] = field(default_factory=list)
    # perf_counter -> wall clock, so steps line up with the parent's sampler series
    wall_offset: float = field(default_factory=lambda: time.time() - time.perf_counter())

    def wall(self, perf_time: float) -> float:
        return perf_time + self.wall_offset

    def add(
        self, begin: float, end: float, *, data: float, forward: float, backward: float,
        update: Optional[float] = None, loss: float = float("nan"), hits: Optional[float] = None,
    ) -> None:  # fmt: skip
        """One step; ``begin`` and ``end`` are wall-clock seconds since the epoch."""
        self.begins.append(float(begin))
        self.ends.append(float(end))
        self.data.append(float(data))
        self.forward.append(float(forward))
        self.backward.append(float(backward))
        self.update.append(None if update is None else float(update))
        self.losses.append(float(loss))
        self.hits.append(None if hits is None else float(hits))

    def __len__(self) -> int:
        return len(self.ends)


def worker_summary(
    log: StepLog, *, rank: int, batch_size: int, steps_per_epoch: int, method: str,
    extra: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:  # fmt: skip
    """One worker's measured window, throughput and per-step breakdown (JSON-ready)."""
    warmup = log.warmup_steps
    total = len(log)
    if warmup >= total:
        raise ValueError(
            f"warmup_steps: expected fewer than the {total} steps worker {rank} ran; received "
            f"{warmup}. Lower --warmup-steps or train longer."
        )
    step, parts = measured_phases(log)
    measured_start = log.ends[warmup - 1] if warmup else log.begins[0]
    measured_time = log.ends[-1] - measured_start
    measured_steps = total - warmup
    means = {name: (float(np.mean(v)) if v is not None else None) for name, v in parts.items()}
    means["step"] = float(np.mean(step))
    epochs = [
        (start, min(start + steps_per_epoch, total)) for start in range(0, total, steps_per_epoch)
    ]
    last_hits = [h for h in log.hits[epochs[-1][0] :] if h is not None]
    summary = {
        "rank": rank,
        "method": method,
        "batch_size": batch_size,
        "steps": total,
        "measured_steps": measured_steps,
        "measured_images": measured_steps * batch_size,
        "measured_time_s": measured_time,
        "images_per_sec": measured_steps * batch_size / measured_time
        if measured_time > 0
        else None,
        "step_time_s": percentiles(step),
        "step_times_s": step,
        "phase_mean_s": means,
        "phase_times_s": parts,
        "first_step_s": log.ends[0] - log.begins[0],
        "warmup_time_s": (log.ends[warmup - 1] - log.begins[0]) if warmup else 0.0,
        "epoch_time_s": [log.ends[stop - 1] - log.begins[start] for start, stop in epochs],
        "epoch_train_loss": [float(np.mean(log.losses[start:stop])) for start, stop in epochs],
        "final_train_loss": float(np.mean(log.losses[epochs[-1][0] :])),
        "final_train_accuracy": (
            float(sum(last_hits) / (len(last_hits) * batch_size)) if last_hits else None
        ),
        "markers": {
            "first_step_start": log.begins[0], "first_step_end": log.ends[0],
            "warmup_end": measured_start, "measured_start": measured_start,
            "measured_end": log.ends[-1],
        },
        "step_ends_s": [end - log.begins[0] for end in log.ends],
    }  # fmt: skip
    summary.update(extra or {})
    return summary


def measured_phases(log: StepLog) -> Tuple[List[float], Dict[str, Optional[List[float]]]]:
    """The measured steps' times, and each phase's times (``update`` None where the
    engine does not run it apart; ``comm`` the rest of each step)."""
    measured = slice(log.warmup_steps, len(log))
    step = [e - b for b, e in zip(log.begins[measured], log.ends[measured])]
    parts: Dict[str, Optional[List[float]]] = {
        "data": log.data[measured], "forward": log.forward[measured],
        "backward": log.backward[measured],
    }  # fmt: skip
    updates = log.update[measured]
    separate_update = all(u is not None for u in updates)
    parts["update"] = [float(u) for u in updates] if separate_update else None
    parts["comm"] = [
        s - d - f - b - (u if separate_update else 0.0)
        for s, d, f, b, u in zip(step, parts["data"], parts["forward"], parts["backward"], updates)
    ]
    return step, parts


def combine(workers: Sequence[Dict[str, Any]], global_batch: int) -> Dict[str, Any]:
    """The run's breakdown from every worker's summary. ``mean``: each phase's mean per
    step, averaged over the workers. ``slowest``: the worker that spends the most time per
    step on its own work (data + forward + backward + update), the one a synchronous step
    waits for, with its breakdown. ``fraction``: each averaged phase as a share of the
    averaged step."""
    names = PHASES + ("step",)
    per_worker = []
    for w in workers:
        means = w["phase_mean_s"]
        busy = sum(means[p] or 0.0 for p in PHASES if p != "comm")
        per_worker.append(dict(rank=w["rank"], busy_s=busy, **{f"{n}_s": means[n] for n in names}))
    mean: Dict[str, Optional[float]] = {}
    for name in names:
        values = [w[f"{name}_s"] for w in per_worker]
        mean[f"{name}_s"] = None if any(v is None for v in values) else float(np.mean(values))
    slowest = max(per_worker, key=lambda w: w["busy_s"])
    step = mean["step_s"] or 0.0
    return {
        "phases": list(PHASES), "mean": mean,
        "fraction": {
            name: (None if mean[f"{name}_s"] is None or step <= 0 else mean[f"{name}_s"] / step)
            for name in PHASES
        },
        "slowest": slowest, "per_worker": per_worker, "global_batch_size": global_batch,
        "note": "seconds per step, measured steps only; comm = step - data - forward - backward "
        "- update (update where the engine runs the optimizer apart from the exchange, else "
        "inside comm); mean: averaged over workers; slowest: the worker with the most time of "
        "its own per step (data + forward + backward + update)",
    }  # fmt: skip
