"""``kbench parity``: prove that every backend computes the same thing.

For each model, the first backend (the reference, a Keras backend) builds it and
exports its initial weights; every other backend loads them. All feed the same
batch and report the outputs, then train the same number of plain SGD steps on the
same seeded mini-batches and report each step's loss. A backend passes when its
largest output difference and its loss drift stay within the tolerances.
"""

from __future__ import annotations

import dataclasses
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from kbench.measure.processes import usable_cores
from kbench.results.analysis import Tolerance, differences
from kbench.results.config import RunConfig, file_safe
from kbench.results.result import RunResult
from kbench.run.agreement import known_differences
from kbench.run.runner import Runner
from kbench.studies import rounds
from kbench.views.tables import model_label, render

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ParityRow:
    model: str
    backend: str
    reference: str
    status: str  # the run's status; "ok" when it ran
    reason: Optional[str]
    output_max_abs: Optional[float] = None  # None: not compared (the run failed)
    loss_max_abs: Optional[float] = None
    loss_max_rel: Optional[float] = None
    noise_floor: Optional[float] = None  # relative loss drift from a 1e-7 nudge of the weights
    losses: List[float] = dataclasses.field(default_factory=list)
    passed: bool = False
    notes: List[str] = dataclasses.field(default_factory=list)

    def to_dict(self) -> Dict:
        return dataclasses.asdict(self)


def relative_drift(losses: Sequence[float], reference: Sequence[float]) -> float:
    drift = np.abs(np.asarray(losses, np.float64) - np.asarray(reference, np.float64))
    return float(np.max(drift / np.maximum(np.abs(np.asarray(reference, np.float64)), 1e-12)))


def noise_floor(reference: RunResult) -> float:
    nudged = reference.metrics.get("noise_losses")
    if not nudged or not np.all(np.isfinite(nudged)):
        return 0.0
    return relative_drift(nudged, reference.metrics["losses"])


def compare(reference: RunResult, result: RunResult, tolerance: Tolerance) -> Dict[str, float]:
    """Differences of ``result`` from ``reference``, and whether they are within tolerance
    (:func:`kbench.results.analysis.differences`, with the reference's noise floor)."""
    try:
        return differences(
            reference.metrics["outputs"], result.metrics["outputs"],
            reference.metrics["losses"], result.metrics["losses"],
            tolerance, noise_floor(reference),
        )  # fmt: skip
    except ValueError as err:
        raise ValueError(f"{result.config['backend']}: {err}") from None


def check_models(
    runner: Runner,
    plan: Mapping[str, Sequence[str]],
    *,
    steps: int,
    batch_size: int,
    learning_rate: float,
    dataset: str,
    seed: int,
    tolerance: Tolerance,
    timeout_s: float,
    input_shapes: Optional[Dict[str, Optional[Sequence[int]]]] = None,
    parallel: int = 1,
) -> List[ParityRow]:
    """Each model of ``plan`` on its backends, the first of which (the reference, the
    same for every model) runs every model in one warm worker, exporting each model's
    initial weights; then each other backend runs, in one warm worker, the models that
    list it and whose reference ran, loading those weights. ``parallel``: how many of
    those other backends run side by side (a worker spends most of its start importing
    its framework on one core), each then with its share of the cores as threads (more
    threads than cores make the frameworks' thread pools spin against each other).
    Rows come model by model, in ``plan``'s order.
    """
    references = {backends[0] for backends in plan.values()}
    if len(references) != 1:
        raise ValueError(
            f"check_models: expected one reference backend (first of each model's list); "
            f"received {sorted(references)}. Check those models in separate calls."
        )
    (reference,) = references
    shapes = input_shapes or {}
    threads = max(1, usable_cores() // parallel) if parallel > 1 else None
    configs = {
        (model, backend): RunConfig(
            backend=backend, model=model, dataset=dataset, steps=steps, warmup_steps=0,
            batch_size=batch_size, optimizer="sgd", learning_rate=learning_rate,
            train_samples=steps * batch_size if dataset == "synthetic" else None,
            test_samples=batch_size, seed=seed, timeout_s=timeout_s, sample_interval_s=0,
            input_shape=tuple(shapes[model]) if shapes.get(model) else None, threads=threads,
        )
        for model in plan
        for backend in plan[model]
    }  # fmt: skip
    results = run_checks(runner, plan, configs, reference, steps, seed, parallel)
    return [
        _row(runner, model, backend, results, reference, tolerance)
        for model in plan
        for backend in plan[model]
    ]


def replay_plan(
    configs: Sequence[RunConfig], steps: int, seed: int, weights: Dict[str, str], key: str
) -> rounds.Plan:
    """``configs`` in one warm worker, each replaying ``steps`` seeded steps from or into
    (``key``: ``weights_in``, ``weights_out``) its model's initial ``weights``."""
    replays = tuple({"steps": steps, "seed": seed, key: weights[c.model]} for c in configs)
    measure = rounds.Measure(False, "kbench parity", "a parity check: one warm worker per backend")
    return rounds.Plan([list(configs)], measure, warm=True, replays=replays)


def run_checks(
    runner: Runner, plan: Mapping[str, Sequence[str]],
    configs: Dict[Tuple[str, str], RunConfig], reference: str, steps: int, seed: int,
    parallel: int,
) -> Dict[Tuple[str, str], RunResult]:  # fmt: skip
    """The runs of :func:`check_models`: the reference's warm worker over every model
    (exporting the initial weights), then each other backend's (``parallel`` side by
    side) over the models whose reference ran, loading them; by (model, backend)."""
    models = list(plan)
    others = list(dict.fromkeys(b for bs in plan.values() for b in bs[1:]))
    results: Dict[Tuple[str, str], RunResult] = {}
    with runner.session(list(configs.values())) as session:
        directory = session.directory
        weights = {m: str(directory / f"{file_safe(m)}-initial-weights.npz") for m in models}
        log.info("parity: %s (reference) on %d model(s)", reference, len(models))
        exports = [configs[(m, reference)] for m in models]
        ran, _ = rounds.run_plan(replay_plan(exports, steps, seed, weights, "weights_out"), session)
        results.update({(m, reference): r for m, r in zip(models, ran)})
        ready = [m for m in models if results[(m, reference)].ok]

        def check_backend(backend: str) -> List[Tuple[Tuple[str, str], RunResult]]:
            mine = [m for m in ready if backend in plan[m]]
            if not mine:
                return []
            log.info("parity: %s on %d model(s)", backend, len(mine))
            loads = [configs[(m, backend)] for m in mine]
            ran, _ = rounds.run_plan(
                replay_plan(loads, steps, seed, weights, "weights_in"), session
            )
            return [((m, backend), r) for m, r in zip(mine, ran)]

        for model in ready:  # every data set prepared now: the threads below only run
            for backend in plan[model][1:]:
                session.prepared.get(configs[(model, backend)])
        with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
            for found in pool.map(check_backend, others):
                results.update(found)
    return results


def _row(
    runner: Runner, model: str, backend: str, results: Dict[Tuple[str, str], RunResult],
    reference_backend: str, tolerance: Tolerance,
) -> ParityRow:  # fmt: skip
    """One backend's row for one model; a checked result is saved again with its verdict."""
    reference = results[(model, reference_backend)]
    result = results.get((model, backend))
    row = dict(model=model, backend=backend, reference=reference_backend)
    if result is None or not result.ok:
        reason = (result.reason if result else None) or (
            f"the reference {reference_backend} failed: {reference.reason}"
        )
        return ParityRow(**row, status=result.status if result else "skipped", reason=reason)
    if result is reference:
        diffs = {"output_max_abs": 0.0, "loss_max_abs": 0.0, "loss_max_rel": 0.0,
                 "noise_floor": noise_floor(reference), "passed": True}  # fmt: skip
    else:
        diffs = compare(reference, result, tolerance)
    notes = known_differences(backend, result.metrics.get("layer_types", []))
    verdict = dict(diffs, reference=reference_backend, notes=notes,
                   tolerance=dataclasses.asdict(tolerance))  # fmt: skip
    dataclasses.replace(result, metrics=dict(result.metrics, parity=verdict)).save(
        runner.output_dir
    )
    return ParityRow(**row, status="ok", reason=None, losses=result.metrics["losses"],
                     notes=notes, **diffs)  # fmt: skip


def verdict(row: ParityRow) -> str:
    """``pass``, ``unsupported (why)`` where the backend cannot run the model (not a
    mismatch: its reason says so), else ``FAIL`` with the run's status and reason."""
    if row.passed:
        return "pass"
    if row.status == "unsupported":
        return f"unsupported ({row.reason})"
    return f"FAIL ({row.status}: {row.reason})" if row.reason else "FAIL"


def rows_table(rows: Sequence[ParityRow]) -> str:
    """One row per backend and model: the largest differences from the reference, the
    noise floor and the verdict."""

    def number(value: Optional[float]) -> str:
        return "-" if value is None else f"{value:.2e}"

    return render(
        ["model", "backend", "vs", "max |d output|", "max |d loss|", "max rel d loss",
         "noise floor", "verdict"],
        [[model_label(r.model), r.backend, r.reference, number(r.output_max_abs),
          number(r.loss_max_abs), number(r.loss_max_rel), number(r.noise_floor),
          verdict(r)] for r in rows],
    )  # fmt: skip
