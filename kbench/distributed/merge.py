"""The workers' replies merged into one run's metrics, scaling against one worker, and a
run as table cells and a log sentence (the tables and figures of compare and report are
:mod:`kbench.views.distributed`'s).

Global throughput is every worker's measured images over the union of their measured
windows (earliest start to latest end), so a worker that finishes early (asynchronous
modes) does not inflate it. Step-time percentiles pool every worker's measured
steps; ``images_per_sec_per_step`` is the global batch over them. The result keeps
each worker's own summary under ``per_worker`` and the breakdown (:func:`combine`)
under ``distributed``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from kbench.distributed.worker import PHASES, shard_digest
from kbench.measure.stats import percentiles, rate_percentiles
from kbench.results.config import RunConfig
from kbench.results.result import RunResult

ENGINES = {
    "torch-ddp": "PyTorch DistributedDataParallel (torch.distributed, gloo on CPU / NCCL on "
    "GPU), launched by torchrun",
    "tf-multiworker": "TensorFlow MultiWorkerMirroredStrategy (TF_CONFIG), custom loop: "
    "strategy.run with a GradientTape over the Keras 3 model",
    "tf-mirrored": "TensorFlow MirroredStrategy over one host's GPUs, custom loop",
    "tf-ps": "TensorFlow ParameterServerStrategy, asynchronous: a ClusterCoordinator schedules "
    "steps on the workers; variables on one parameter server",
    "jax": "keras.distribution.DataParallel over jax.distributed (gloo CPU collectives), Keras fit",
    "mxnet-sync": "MXNet KVStore dist_sync: scheduler, one server, workers (ps-lite); "
    "gradients summed and applied on the server",
    "mxnet-async": "MXNet KVStore dist_async: each worker's gradients applied on the server as "
    "they arrive",
}
ASYNCHRONOUS = ("tf-ps", "mxnet-async")
# settings that do not change what is measured when looking for a one-worker baseline
NOT_COMPARED = ("workers", "repeat", "timeout_s", "sample_interval_s")
SLOWEST = ("warmup_time_s", "first_step_s", "time_to_first_step_s", "import_time_s",
           "build_time_s", "setup_time_s")  # fmt: skip


def shard_check(shards: np.ndarray, pass_length: int, workers: Sequence[Dict]) -> Dict:
    """Whether no sample of a pass over the data went to two workers, and whether each
    worker trained on the shard the runner cut for it.

    ``pass_length``: positions of the global order per pass (one permutation of the
    training set): an epoch's steps x the global batch, or the training set's size for
    a ``--steps`` run, whose order runs through permutations one after another."""
    count, steps, batch = shards.shape
    positions = shards.transpose(1, 0, 2).reshape(-1)  # the global order, step by step
    passes = [positions[i : i + pass_length] for i in range(0, len(positions), pass_length)]
    disjoint = all(len(np.unique(p)) == len(p) for p in passes)
    owner = np.broadcast_to(np.arange(count)[None, :, None], (steps, count, batch)).reshape(-1)
    expected = {rank: shard_digest(shards[rank]) for rank in range(count)}
    reported = {w["rank"]: w.get("shard", {}).get("digest") for w in workers}
    return {
        "per_worker_samples": [int(shards[r].size) for r in range(count)],
        "disjoint": bool(disjoint), "workers_per_pass_checked": len(passes),
        "owner_counts": [int((owner == r).sum()) for r in range(count)],
        "verified_by_workers": all(
            reported.get(r) == d for r, d in expected.items() if r in reported
        ),
        "note": "the runner's seeded order at the global batch, each global step cut into "
        "one slice per worker; disjoint: within every pass over the training set no sample "
        "went to two workers; verified_by_workers: each worker's fingerprint of the indices "
        "it trained on matches its slice",
    }  # fmt: skip


def metrics(
    config: RunConfig, replies: Dict[str, Dict[str, Any]], shards: np.ndarray, pass_length: int,
) -> Dict[str, Any]:  # fmt: skip
    """The run's metrics from every worker's summary, in the names and units of a
    single-process run's, with the data-parallel facts under ``distributed``."""
    workers = sorted(
        (w for r in replies.values() for w in r.get("workers") or []), key=lambda w: w["rank"]
    )
    leader = next((w for w in workers if w["rank"] == 0), workers[0])
    evaluation = next((r["evaluation"] for r in replies.values() if r.get("evaluation")), {})
    global_batch = config.batch_size * config.workers
    rate, window, scope = throughput(config, workers, leader)
    step_times = [t for w in workers for t in w["step_times_s"]]
    step = percentiles(step_times)
    accuracies = [
        w["final_train_accuracy"] for w in workers if w["final_train_accuracy"] is not None
    ]
    breakdown = combine(workers, global_batch)
    return {
        "images_per_sec": rate,
        "measured_images": sum(w["measured_images"] for w in workers),
        "measured_steps": leader["measured_steps"],
        "measured_time_s": window,
        "step_time_s": step,
        "images_per_sec_per_step": rate_percentiles([global_batch] * len(step_times), step_times),
        "step_times_s": leader["step_times_s"],
        "step_ends_s": leader["step_ends_s"],
        "warmup_steps": config.warmup_steps,
        # start-up times: the slowest worker's, which the run waited for
        **{name: max(w.get(name, 0.0) for w in workers) for name in SLOWEST},
        "epoch_time_s": leader["epoch_time_s"],
        "epoch_train_loss": [
            float(np.mean(values)) for values in zip(*(w["epoch_train_loss"] for w in workers))
        ],
        "epoch_train_accuracy": [None] * len(leader["epoch_train_loss"]),
        "data_loading": {
            "per_step_s": breakdown["mean"]["data_s"],
            "note": "mean per step over the workers: gathering the worker's batch from its "
            "shard and handing it to the framework (see distributed.breakdown)",
        },
        "final_train_loss": float(np.mean([w["final_train_loss"] for w in workers])),
        "final_train_accuracy": float(np.mean(accuracies)) if accuracies else None,
        "test_loss": evaluation.get("test_loss"),
        "test_accuracy": evaluation.get("test_accuracy"),
        "eval_time_s": evaluation.get("eval_time_s"),
        "evaluation": evaluation,
        "memory": [dict(m, worker=w["rank"]) for w in workers for m in w.get("memory", [])],
        "markers": markers(workers),
        "global_batch_size": global_batch,
        "per_worker_batch_size": config.batch_size,
        "distributed": {
            "mode": config.distributed, "engine": ENGINES[config.distributed],
            "workers": config.workers, "workers_reporting": len(workers), "scope": scope,
            "per_worker_batch_size": config.batch_size, "global_batch_size": global_batch,
            "images_per_sec_per_worker": {str(w["rank"]): w["images_per_sec"] for w in workers},
            "breakdown": breakdown, "method": leader["method"],
            "shards": shard_check(shards, pass_length, workers),
        },
        "per_worker": workers,
    }  # fmt: skip


def throughput(
    config: RunConfig, workers: Sequence[Dict[str, Any]], leader: Dict[str, Any]
) -> Tuple[float, float, str]:
    """(global img/s, the measured window in s, what the figure covers): every worker's
    measured images over the union of their measured windows."""
    starts = [w["markers"]["measured_start"] for w in workers]
    ends = [w["markers"]["measured_end"] for w in workers]
    window = max(ends) - min(starts)
    rate = sum(w["measured_images"] for w in workers) / window
    scope = "every worker"
    if len(workers) < config.workers:  # across hosts: this host's workers only
        scope = f"this host's {len(workers)} of {config.workers} workers"
        if config.distributed not in ASYNCHRONOUS:
            # every synchronous step trains the global batch
            rate = leader["measured_steps"] * config.batch_size * config.workers / window
            scope += "; images_per_sec: this host's steps x the global batch (synchronous)"
    return rate, window, scope


def markers(workers: Sequence[Dict[str, Any]]) -> Dict[str, float]:
    """The run's stage markers: the first worker's start to the last worker's end."""
    starts = [w["markers"]["measured_start"] for w in workers]
    return {
        "fit_start": min(w["markers"]["first_step_start"] for w in workers),
        "first_step_start": min(w["markers"]["first_step_start"] for w in workers),
        "first_step_end": max(w["markers"]["first_step_end"] for w in workers),
        "warmup_end": min(starts), "measured_start": min(starts),
        "measured_end": max(w["markers"]["measured_end"] for w in workers),
    }  # fmt: skip


def comparable(config: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in config.items() if k not in NOT_COMPARED}


def scaling(config: RunConfig, images_per_sec: float, store: Any, host: str) -> Dict[str, Any]:
    """Speed-up and efficiency against the same run with one worker. The baseline is the
    newest successful one-worker run of the same mode and settings (everything but
    ``workers``, the repeat index and timeouts) on the same host in the output store: a
    sweep's ``workers: [1, 2, 3]`` runs it first in the same command."""
    if config.workers == 1:
        return {"speedup": 1.0, "efficiency": 1.0, "baseline": "this run (one worker)"}
    wanted = comparable(config.to_dict())
    candidates = [
        e
        for e in store.entries()
        if e.status == "ok"
        and e.kind == "train"
        and e.config.get("workers") == 1
        and e.host == host
        and e.images_per_sec
        and comparable(e.config) == wanted
    ]
    if not candidates:
        return {
            "speedup": None, "efficiency": None, "baseline": None,
            "reason": "no one-worker run of the same mode and settings on this host in the "
            "output store; run --workers 1 first (a sweep with workers: [1, 2, ...] does)",
        }  # fmt: skip
    base = max(candidates, key=lambda e: e.started_at)
    speedup = images_per_sec / base.images_per_sec
    scaling = {
        "speedup": speedup, "efficiency": speedup / config.workers,
        "baseline": {
            "run_id": base.run_id, "images_per_sec": base.images_per_sec,
            "started_at": base.started_at,
        },
        "note": "efficiency = images_per_sec / (workers x images_per_sec of one worker)",
    }  # fmt: skip
    if config.threads is None:
        scaling["caveat"] = (
            "threads per worker were not fixed (--threads): the one-worker run had this "
            "host's cores, each of these workers a share of them, so the efficiency mixes "
            "thread scaling in; set --threads for a fixed per-worker size"
        )
    return scaling


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


HEADERS = [
    "mode", "backend", "workers", "img/s (global)", "efficiency", "step ms", "data ms",
    "forward ms", "backward ms", "update ms", "comm ms", "slowest worker (step ms)",
]  # fmt: skip
PHASE_HEADERS = HEADERS[5:11]  # step, then each phase
NUMERIC = tuple(range(2, 11))  # columns of HEADERS that hold numbers


def distributed_results(results: Sequence[RunResult]) -> List[RunResult]:
    """The data-parallel training runs among ``results``."""
    return [
        r for r in results if r.kind == "train" and r.config.get("distributed", "none") != "none"
    ]


def fmt_ms(seconds: Optional[float]) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


def breakdown_cells(result: RunResult) -> List[str]:
    """The :data:`HEADERS` cells of one run."""
    c = result.config
    head = [c["distributed"], c["backend"], str(c["workers"])]
    if not result.ok:
        return head + [result.status.upper()] + ["-"] * (len(HEADERS) - 4)
    m = result.metrics
    d = m["distributed"]
    mean = d["breakdown"]["mean"]
    slowest = d["breakdown"]["slowest"]
    eff = (d.get("scaling") or {}).get("efficiency")
    return head + [
        f"{m['images_per_sec']:,.0f}", "-" if eff is None else f"{eff:.2f}",
        fmt_ms(mean["step_s"]), *(fmt_ms(mean[f"{p}_s"]) for p in PHASES),
        f"{slowest['rank']} ({fmt_ms(slowest['step_s'])})",
    ]  # fmt: skip


def breakdown_line(result: RunResult) -> str:
    """One run in a sentence, for the log."""
    row = dict(zip(HEADERS, breakdown_cells(result)))
    parts = ", ".join(f"{k} {row[k]}" for k in PHASE_HEADERS)
    return (
        f"{row['mode']} {row['backend']}/{result.config['model']} x{row['workers']}: "
        f"{row['img/s (global)']} img/s global, efficiency {row['efficiency']}; per step: "
        f"{parts}; slowest worker {row['slowest worker (step ms)']}"
    )
