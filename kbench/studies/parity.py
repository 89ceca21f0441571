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
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np

from kbench.results.config import RunConfig, file_safe
from kbench.results.result import RunResult
from kbench.run.runner import Runner

log = logging.getLogger(__name__)


# Differences a backend is known to have, by the layer types they touch; shown beside
# the numbers, since a few training steps cannot always tell them from rounding.
KNOWN_DIFFERENCES = {
    ("mxnet", "BatchNormalization"): "keras-mxnet keeps BatchNorm's gamma at 1 (it calls "
    "mx.sym.BatchNorm without fix_gamma=False): equal at initialisation, apart as gamma trains",
}


@dataclass(frozen=True)
class Tolerance:
    """Defaults chosen from measurements on this project's 2-core CPU machine.

    Outputs: float32 probabilities agree to about 1e-6 or better between correct
    implementations; 1e-4 leaves room for other hardware. Losses: over 3 SGD steps at
    learning rate 1e-3 and batch 8, correct implementations drift apart by up to 5.2e-3:
    VGG-16 on MXNet Gluon against TensorFlow, whose gradients agree to 3e-14 in float64;
    in float32 the two libraries' convolutions round apart by about 2e-5, which flips
    the sign of a pre-ReLU value near zero below the 7th BatchNorm, and 13 BatchNorm
    layers amplify that. 1e-2 leaves room; keras-mxnet's VGG-16, which does not train
    BatchNorm's gamma, drifts by 2e-2.
    """

    output_atol: float = 1e-4  # largest |difference| of float32 probabilities
    loss_rtol: float = 1e-2  # largest |difference| of a step's loss, relative to it
    noise_factor: float = 10.0  # or this many times the model's measured noise floor

    def describe(self) -> str:
        return (
            f"outputs within {self.output_atol:g} absolute; losses within {self.loss_rtol:g} "
            f"relative at every step, or within {self.noise_factor:g}x the model's noise floor "
            "(the drift of the reference retrained from weights nudged by 1e-7) where larger"
        )


@dataclass(frozen=True)
class ParityRow:
    model: str
    backend: str
    reference: str
    status: str  # the run's status; "ok" when it ran
    reason: Optional[str]
    output_max_abs: Optional[float]
    loss_max_abs: Optional[float]
    loss_max_rel: Optional[float]
    noise_floor: Optional[float]  # relative loss drift from a 1e-7 nudge of the weights
    losses: List[float]
    passed: bool
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
    """Differences of ``result`` from ``reference``, and whether they are within tolerance."""
    ref_out = np.asarray(reference.metrics["outputs"], dtype=np.float64)
    out = np.asarray(result.metrics["outputs"], dtype=np.float64)
    ref_loss = np.asarray(reference.metrics["losses"], dtype=np.float64)
    loss = np.asarray(result.metrics["losses"], dtype=np.float64)
    if out.shape != ref_out.shape or loss.shape != ref_loss.shape:
        raise ValueError(
            f"{result.config['backend']}: outputs {out.shape} / losses {loss.shape} do not "
            f"match the reference's {ref_out.shape} / {ref_loss.shape}"
        )
    drift = np.abs(loss - ref_loss)
    finite = bool(np.all(np.isfinite(out)) and np.all(np.isfinite(loss)))
    output_max_abs = float(np.max(np.abs(out - ref_out))) if finite else float("inf")
    loss_max_abs = float(np.max(drift)) if finite else float("inf")
    loss_max_rel = (
        float(np.max(drift / np.maximum(np.abs(ref_loss), 1e-12))) if finite else (float("inf"))
    )
    floor = noise_floor(reference)
    loss_limit = max(tolerance.loss_rtol, tolerance.noise_factor * floor)
    return {
        "output_max_abs": output_max_abs,
        "loss_max_abs": loss_max_abs,
        "loss_max_rel": loss_max_rel,
        "noise_floor": floor,
        "passed": finite and output_max_abs <= tolerance.output_atol and loss_max_rel <= loss_limit,
    }


def check_model(
    runner: Runner,
    model: str,
    backends: Sequence[str],
    *,
    steps: int,
    batch_size: int,
    learning_rate: float,
    dataset: str,
    seed: int,
    tolerance: Tolerance,
    timeout_s: float,
    input_shape: Optional[Sequence[int]] = None,
) -> List[ParityRow]:
    configs = [
        RunConfig(
            backend=backend,
            model=model,
            dataset=dataset,
            steps=steps,
            warmup_steps=0,
            batch_size=batch_size,
            optimizer="sgd",
            learning_rate=learning_rate,
            train_samples=steps * batch_size if dataset == "synthetic" else None,
            test_samples=batch_size,
            seed=seed,
            timeout_s=timeout_s,
            input_shape=tuple(input_shape) if input_shape else None,
            sample_interval_s=0,
        )  # fmt: skip
        for backend in backends
    ]
    results: List[RunResult] = []
    with runner.session(configs) as session:
        weights = str(session.directory / f"{file_safe(model)}-initial-weights.npz")
        for index, config in enumerate(configs):
            if index and not results[0].ok:
                break
            log.info("parity %s: %s%s", model, config.backend, " (reference)" if not index else "")
            parity = {
                "steps": steps,
                "seed": seed,
                "weights_in" if index else "weights_out": weights,
            }
            results.append(session.run(config, parity=parity))
    reference = results[0]
    rows = []
    for config, result in zip(configs, results + [None] * (len(configs) - len(results))):
        row = dict(model=model, backend=config.backend, reference=reference.config["backend"])
        if result is None or not result.ok:
            reason = (result.reason if result else None) or (
                f"the reference {reference.config['backend']} failed: {reference.reason}"
            )
            rows.append(ParityRow(**row, status=result.status if result else "skipped",
                                  reason=reason, output_max_abs=None, loss_max_abs=None,
                                  loss_max_rel=None, noise_floor=None, losses=[],
                                  passed=False))  # fmt: skip
            continue
        if result is reference:
            diffs = {"output_max_abs": 0.0, "loss_max_abs": 0.0, "loss_max_rel": 0.0,
                     "noise_floor": noise_floor(reference), "passed": True}  # fmt: skip
        else:
            diffs = compare(reference, result, tolerance)
        notes = [
            text
            for (backend, layer), text in KNOWN_DIFFERENCES.items()
            if backend == config.backend and layer in result.metrics.get("layer_types", [])
        ]
        rows.append(ParityRow(**row, status="ok", reason=None, losses=result.metrics["losses"],
                              notes=notes, **diffs))  # fmt: skip
        metrics = dict(
            result.metrics,
            parity=dict(
                diffs,
                reference=row["reference"],
                notes=notes,
                tolerance=dataclasses.asdict(tolerance),
            ),
        )
        dataclasses.replace(result, metrics=metrics).save(runner.output_dir)
    return rows
