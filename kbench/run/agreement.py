"""Whether two backends computed the same thing: the parity records that ``kbench
parity`` and a windows comparison's check at warm-up share, over the tolerance and the
figures of :mod:`kbench.results.analysis`. Both compare a backend with a reference that
started from the same weights on the same batches: the outputs on the same test rows
before training and each step's loss (:func:`step_losses`: Keras 3 logs a running mean).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from kbench.backends import BACKENDS
from kbench.results.analysis import FLOAT32, Tolerance, differences, what_differs

# Differences a backend is known to have, by the layer types they touch; shown beside
# the numbers, since a few training steps cannot always tell them from rounding.
KNOWN_DIFFERENCES = {
    ("mxnet", "BatchNormalization"): "keras-mxnet keeps BatchNorm's gamma at 1 (it calls "
    "mx.sym.BatchNorm without fix_gamma=False): equal at initialisation, apart as gamma trains",
}


def step_losses(losses: Sequence[float], running_mean: bool) -> List[float]:
    """Each step's own loss from those logged: ``running_mean`` (Keras 3's ``fit``: the
    epoch's mean so far, m_k) gives step k's as k m_k - (k - 1) m_(k-1)."""
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
    reference: str, reference_check: Optional[Dict[str, Any]], backend: str,
    check: Optional[Dict[str, Any]], tolerance: Tolerance = FLOAT32,
    layer_types: Sequence[str] = (),
) -> Dict[str, Any]:  # fmt: skip
    """The parity record of a warm worker that started from ``reference``'s weights: its
    ``check`` against the reference's, within ``tolerance`` (losses within ``loss_rtol``)."""
    for whose, found in (("the reference's", reference_check), (f"{backend}'s", check)):
        if not found or found.get("error") or "outputs" not in found:
            why = (found or {}).get("error") or "its warm-up reported no outputs"
            return unchecked(reference, f"{whose} check at warm-up could not be made: {why}")
    losses = step_losses(check["losses"], BACKENDS[backend].logs_mean_loss)
    reference_losses = step_losses(reference_check["losses"], BACKENDS[reference].logs_mean_loss)
    record: Dict[str, Any] = {
        "checked": True, "reference": reference, "is_reference": backend == reference,
        "rows": len(check["outputs"]), "steps": len(losses),
        "tolerance": {"output_atol": tolerance.output_atol, "loss_rtol": tolerance.loss_rtol},
        "notes": known_differences(backend, layer_types),
    }  # fmt: skip
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
