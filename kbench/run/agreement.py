"""Whether two backends computed the same thing: the tolerance and the figures that
``kbench parity`` (:mod:`kbench.studies.parity`) and a warm windows comparison's check at
warm-up (:mod:`kbench.run.windows`) share.

Both compare a backend with a reference that started from the same initial weights and
trained on the same mini-batches: the outputs on the same test rows before training (the
largest absolute difference of float32 probabilities) and each training step's loss (the
largest difference relative to the reference's). :func:`step_losses` turns the losses a
backend logged into each step's own, since Keras 3's ``fit`` logs the epoch's mean so far.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from kbench.backends import BACKENDS

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


def differences(
    reference_outputs: Any,
    outputs: Any,
    reference_losses: Sequence[float],
    losses: Sequence[float],
    tolerance: Tolerance,
    noise_floor: float = 0.0,
) -> Dict[str, Any]:
    """The largest differences of ``outputs`` and ``losses`` from the reference's, and
    whether they lie within ``tolerance`` (``passed``; a loss may drift by
    ``noise_factor`` x ``noise_floor`` where that is larger than ``loss_rtol``). A value
    that is not finite fails. Raises ValueError when the shapes differ."""
    ref_out = np.asarray(reference_outputs, dtype=np.float64)
    out = np.asarray(outputs, dtype=np.float64)
    ref_loss = np.asarray(reference_losses, dtype=np.float64)
    loss = np.asarray(losses, dtype=np.float64)
    if out.shape != ref_out.shape or loss.shape != ref_loss.shape:
        raise ValueError(
            f"outputs {out.shape} / losses {loss.shape} do not match the reference's "
            f"{ref_out.shape} / {ref_loss.shape}"
        )
    drift = np.abs(loss - ref_loss)
    finite = bool(np.all(np.isfinite(out)) and np.all(np.isfinite(loss)))
    inf = float("inf")
    output_max_abs = float(np.max(np.abs(out - ref_out), initial=0.0)) if finite else inf
    loss_max_abs = float(np.max(drift, initial=0.0)) if finite else inf
    relative = drift / np.maximum(np.abs(ref_loss), 1e-12)
    loss_max_rel = float(np.max(relative, initial=0.0)) if finite else inf
    loss_limit = max(tolerance.loss_rtol, tolerance.noise_factor * noise_floor)
    return {
        "output_max_abs": output_max_abs,
        "loss_max_abs": loss_max_abs,
        "loss_max_rel": loss_max_rel,
        "noise_floor": noise_floor,
        "passed": finite and output_max_abs <= tolerance.output_atol and loss_max_rel <= loss_limit,
    }


def what_differs(figures: Dict[str, Any], tolerance: Tolerance) -> Optional[str]:
    """In words, which of :func:`differences`' figures lies outside ``tolerance``; None
    when they passed."""
    if figures["passed"]:
        return None
    parts = []
    if not figures["output_max_abs"] <= tolerance.output_atol:
        parts.append(
            f"outputs before training differ by up to {figures['output_max_abs']:.2g} "
            f"(tolerance {tolerance.output_atol:g})"
        )
    loss_limit = max(tolerance.loss_rtol, tolerance.noise_factor * figures["noise_floor"])
    if not figures["loss_max_rel"] <= loss_limit:
        parts.append(
            f"a training step's loss differs by up to {figures['loss_max_rel']:.2%} of the "
            f"reference's (tolerance {loss_limit:.2%})"
        )
    return "; ".join(parts) or "a value is not finite"


def step_losses(losses: Sequence[float], running_mean: bool) -> List[float]:
    """Each step's own loss, from the losses a backend logged after each step:
    ``running_mean`` (Keras 3's ``fit``: the epoch's mean so far, m_k) gives step k's as
    k m_k - (k - 1) m_(k-1); otherwise they are each step's already."""
    values = [float(v) for v in losses]
    if not running_mean:
        return values
    return [k * m - (k - 1) * values[k - 2] if k > 1 else m for k, m in enumerate(values, 1)]


def known_differences(backend: str, layer_types: Sequence[str]) -> List[str]:
    """The :data:`KNOWN_DIFFERENCES` of ``backend`` that touch one of ``layer_types``."""
    return [
        text
        for (known_backend, layer), text in KNOWN_DIFFERENCES.items()
        if known_backend == backend and layer in layer_types
    ]


def unchecked(reference: str, why: str) -> Dict[str, Any]:
    """The parity record of a warm worker that was not checked, and why."""
    return {"checked": False, "reference": reference, "why": why}


def same_start(
    reference: str,
    reference_check: Optional[Dict[str, Any]],
    backend: str,
    check: Optional[Dict[str, Any]],
    tolerance: Tolerance = Tolerance(),
    layer_types: Sequence[str] = (),
) -> Dict[str, Any]:
    """The parity record of a warm worker of ``backend`` that started from the initial
    weights ``reference`` (a backend) started from: its ``check`` (the outputs on the same
    test rows before training, the losses of the warmup steps as ``fit`` logged them, or
    ``error``: why there is none) against the reference's, within ``tolerance`` (its
    noise floor is not measured here: losses within ``loss_rtol``)."""
    for whose, found in (("the reference's", reference_check), (f"{backend}'s", check)):
        if not found or found.get("error") or "outputs" not in found:
            why = (found or {}).get("error") or "its warm-up reported no outputs"
            return unchecked(reference, f"{whose} check at warm-up could not be made: {why}")
    losses = step_losses(check["losses"], BACKENDS[backend].logs_mean_loss)
    reference_losses = step_losses(reference_check["losses"], BACKENDS[reference].logs_mean_loss)
    record: Dict[str, Any] = {
        "checked": True,
        "reference": reference,
        "is_reference": backend == reference,
        "rows": len(check["outputs"]),
        "steps": len(losses),
        "tolerance": {"output_atol": tolerance.output_atol, "loss_rtol": tolerance.loss_rtol},
        "notes": known_differences(backend, layer_types),
    }
    try:
        figures = differences(
            reference_check["outputs"], check["outputs"], reference_losses, losses, tolerance
        )
    except ValueError as err:
        return record | {"same_computation": False, "differs": str(err)}
    return record | {
        "same_computation": figures["passed"],
        **{key: figures[key] for key in ("output_max_abs", "loss_max_abs", "loss_max_rel")},
        "differs": what_differs(figures, tolerance),
    }
