"""What a script's events measure: training where it called ``fit``, else inference
where it called ``predict`` or ``evaluate``, and whether the measurement is long
enough to mean anything.

- training: :func:`kbench.measure.keras_events.summarize` over the ``fit`` batches;
- inference only: the same figures over the ``predict`` batches made outside any fit
  (else ``evaluate``'s), each call a run of its own; under keras-mxnet, whose
  ``predict`` takes no callbacks, each call is one step;
- too short: fewer than :data:`MIN_MEASURED_STEPS` measured steps give one img/s with
  no spread worth the name: ``measurement_note`` says so.

Standard library only (with :mod:`kbench.measure`): the parent reads a child's events.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from kbench.measure.keras_events import summarize

MIN_MEASURED_STEPS = 5  # fewer: one figure, no spread; flagged as too short
INFERENCE_STAGES = ("predict", "evaluate")  # in order of preference


def observe(events: List[Dict[str, Any]], warmup_steps: int) -> Dict[str, Any]:
    """The figures of a script's events: training, else inference, else none (the
    note says which); ``measured_stage`` names what was measured."""
    observed = summarize(events, warmup_steps)
    if observed.get("training_observed"):
        observed["measured_stage"] = "fit"
    else:
        inference = inference_figures(events, warmup_steps)
        if inference is None:
            return observed
        observed = inference
    observed["warmup_steps_requested"] = warmup_steps
    note = short_note(observed, warmup_steps)
    if note:
        observed["measurement_note"] = note
    return observed


def inference_figures(events: List[Dict[str, Any]], warmup_steps: int) -> Optional[Dict[str, Any]]:
    """:func:`summarize`'s figures over the batches of ``predict`` (else ``evaluate``)
    calls made outside a fit; None where the script made none."""
    for stage in INFERENCE_STAGES:
        batches = [
            dict(e, stage="train", epoch=e.get("call", 0), call=0)
            for e in events
            if e["event"] == "batch" and e.get("stage") == stage and e.get("within") != "fit"
        ]
        if not batches:
            batches = _whole_calls(events, stage)
        if not batches:
            continue
        facts = [e for e in events if e["event"] in ("model", "error")]
        ends = [e for e in events if e["event"] in ("evaluate_end", "predict_end")]
        figures = summarize([*facts, *batches, *ends], warmup_steps)
        figures.update(
            training_observed=False, inference_observed=True, measured_stage=stage, fit_calls=0,
            epochs=0, epoch_time_s=[], epoch_train_loss=[], final_train_loss=None,
            final_train_accuracy=None,
            note=f"inference only: img/s over the {stage} batches (no fit ran)",
        )  # fmt: skip
        figures["markers"]["fit_start"] = batches[0]["t0"]
        return figures
    return None


def _whole_calls(events: List[Dict[str, Any]], stage: str) -> List[Dict[str, Any]]:
    """Each ``<stage>_begin``/``_end`` pair as one step of its samples (keras-mxnet's
    predict and evaluate take no callbacks, so kbench sees only the calls)."""
    calls, begin = [], None
    for event in events:
        if event["event"] == f"{stage}_begin":
            begin = event
        elif event["event"] == f"{stage}_end" and begin is not None:
            samples = begin.get("samples")
            calls.append(
                {"event": "batch", "stage": "train", "call": 0, "epoch": len(calls),
                 "batch": 0, "t0": begin["t"], "t1": event["t"],
                 "size": samples if isinstance(samples, int) else None}
            )  # fmt: skip
            begin = None
    return calls


def short_note(observed: Dict[str, Any], warmup_steps: int) -> Optional[str]:
    """What to read a measurement of too few steps with (None: enough steps)."""
    steps = observed.get("measured_steps") or 0
    if steps >= MIN_MEASURED_STEPS:
        return None
    warmup = observed.get("warmup_steps") or 0
    cut = f"; the warmup was cut from {warmup_steps} to {warmup} step(s) to leave any"
    cut = cut if warmup < warmup_steps else ""
    return (
        f"too short to mean much: img/s from {steps} measured step(s) (at least "
        f"{MIN_MEASURED_STEPS} give a figure with a spread){cut}. Give the script more "
        "batches (more samples, epochs or calls) or lower --warmup-steps"
    )
