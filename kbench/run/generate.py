"""Generation (``--mode generate``): greedy decoding from a fixed prompt, timed per token.

Parent side, :func:`task_for`: where a generate run's worker finds the session's shared
weights. Worker side, :func:`generate`: the model takes those weights, then decodes.

Weights: every backend of one ``kbench run`` decodes with the same weights, so that
their greedy tokens can agree. The first run of the session on a Keras backend (the
reference: the first such backend of ``-b``) writes its seeded initial weights to the
session folder (:mod:`kbench.run.weightfile`, as ``kbench parity`` moves them); each
later run of the same model, data shape and seed loads them (the native twin converts
them as in parity). The result names whose weights they were and their digest.

Prompt and length: each of the batch's rows is the first :data:`PROMPT_TOKENS` tokens
of a test sequence (synthetic data unless ``--dataset text:PATH``); the model's window
is the sequence length (``--input-shape``), which the prompt and ``--max-new-tokens``
must fit. Each new token is the argmax of the logits at the last real position of the
whole window, run again from scratch (:func:`kbench_models.generation.greedy_generate`):
no key/value cache, so the first token (the prefill) costs what every later one does.

Stages: one warmup generation (tracing, compilation; its first pass is
``first_step_s``), then whole generations for ``--duration`` seconds (at least one).
``backend.predict`` returns host arrays, so every token's clock reads a finished device.
Time to first token: the prompt to the first token's logits, median over the measured
generations. Per-token latency: from one token's logits to the next's, the later tokens
of every measured generation pooled (p50/p90/p99). tokens/s: the batch's new tokens of
every measured generation over their time. The last generation's tokens are recorded,
with the gap between the two largest logits at each (how near a tie the argmax was).
"""

from __future__ import annotations

import hashlib
import os
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import numpy as np

from kbench.backends import BACKENDS
from kbench.measure.stats import percentiles
from kbench.results.config import PROMPT_TOKENS
from kbench.run import weightfile
from kbench_models.generation import greedy_generate

NO_KV_CACHE = (
    "no key/value cache: every new token reruns the model on its whole window (the "
    "sequence length), so the first token costs what each later one does"
)


def weights_name(model: str, data: Dict[str, Any], seed: int) -> str:
    """The session's weights file for ``model`` on data of this shape and seed."""
    about = f"{model}|{data.get('input_shape')}|{data.get('num_classes')}|{seed}"
    return f"generate-weights-{hashlib.sha256(about.encode()).hexdigest()[:16]}.npz"


def task_for(config: Dict[str, Any], data: Dict[str, Any], session_dir: Path) -> Dict[str, Any]:
    """What a generate run's task carries: its session's weights file for the model."""
    return {"weights": str(session_dir / weights_name(config["model"], data, config["seed"]))}


def weights_digest(weights: weightfile.Weights) -> str:
    """sha256 over every array's dtype, shape and bytes, in order: the same for the same
    weights whoever wrote them."""
    digest = hashlib.sha256()
    for kind, arrays in weights:
        digest.update(kind.encode())
        for array in arrays:
            array = np.ascontiguousarray(array)
            digest.update(f"{array.dtype}{array.shape}".encode())
            digest.update(array.tobytes())
    return digest.hexdigest()


def shared_weights(backend: Any, model: Any, path: Path, data_format: str) -> Dict[str, Any]:
    """``model`` with the session's weights at ``path``: loaded where a reference wrote
    them, else written (a Keras backend) or kept as built (no reference ran before it)."""
    if path.is_file():
        weights, source = weightfile.load(path)
        backend.set_weights(model, weights, source["data_format"], source["kernel_layout"])
        return {"from": source.get("backend"), "loaded": True, "sha256": weights_digest(weights)}
    weights = backend.get_weights(model)
    digest = weights_digest(weights)
    if not BACKENDS[backend.name].exports_weights:
        return {
            "from": backend.name, "loaded": False, "sha256": digest,
            "note": "its own seeded weights: no Keras backend ran before it in this "
            "session to give the reference's (put a Keras backend first in -b)",
        }  # fmt: skip
    partial = path.with_name(f".{path.stem}-{os.getpid()}.npz")  # np.savez keeps .npz
    try:
        weightfile.save(
            partial, weights, data_format=data_format, kernel_layout=backend.kernel_layout(),
            backend=backend.name,
        )  # fmt: skip
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return {"from": backend.name, "loaded": False, "sha256": digest}


def timed_generation(
    predict: Callable[[np.ndarray], np.ndarray], prompt: np.ndarray, new_tokens: int, steps: int
) -> Tuple[np.ndarray, List[float], List[np.ndarray]]:
    """One greedy generation: its tokens, the clock at the start and after each token's
    logits (``new_tokens + 1`` readings), and the logits each token was read from."""
    clock: List[float] = []
    read: List[np.ndarray] = []
    position = prompt.shape[1] - 1  # the last real position, one further each token

    def timed(window: np.ndarray) -> np.ndarray:
        nonlocal position
        logits = predict(window)
        clock.append(time.perf_counter())
        read.append(np.array(logits[:, position], copy=True))
        position += 1
        return logits

    clock.append(time.perf_counter())
    tokens = greedy_generate(timed, prompt, new_tokens, steps)
    return tokens, clock, read


def logit_gaps(read: List[np.ndarray]) -> List[List[float]]:
    """Per row, per token: the largest logit minus the second largest."""
    gaps = []
    for logits in read:
        top = np.sort(np.asarray(logits, dtype=np.float64), axis=-1)[:, -2:]
        gaps.append(top[:, 1] - top[:, 0])
    return np.round(np.stack(gaps, axis=1), 6).tolist()


def generate(
    backend: Any, model: Any, arrays: Dict[str, np.ndarray], task: Dict[str, Any], *,
    batch_size: int, max_new_tokens: int, duration_s: float, data_format: str,
    process_start: float, import_time_s: float, build_time_s: float, warmup_steps: int = 1,
) -> Dict[str, Any]:  # fmt: skip
    """Greedy generation of ``max_new_tokens`` after a fixed prompt, measured as the module
    docstring says; the metrics of a ``generate`` result."""
    del warmup_steps  # one warmup generation, whatever the training's warmup
    weights = shared_weights(backend, model, Path(task["weights"]), data_format)
    source = arrays["x_test"] if len(arrays["x_test"]) >= batch_size else arrays["x_train"]
    steps = int(source.shape[1])
    prompt = np.ascontiguousarray(np.resize(source, (batch_size, steps))[:, :PROMPT_TOKENS])

    def predict(window: np.ndarray) -> np.ndarray:
        return backend.predict(model, window)  # a host array: the device is done

    start_wall = time.time()
    _, clock, _ = timed_generation(predict, prompt, max_new_tokens, steps)
    first_step = clock[1] - clock[0]
    measured_start_wall = time.time()
    first_tokens, per_token, spent, generations = [], [], 0.0, 0
    begun = time.perf_counter()
    while True:
        tokens, clock, read = timed_generation(predict, prompt, max_new_tokens, steps)
        generations += 1
        first_tokens.append(clock[1] - clock[0])
        per_token += [b - a for a, b in zip(clock[1:], clock[2:])]
        spent += clock[-1] - clock[0]
        if time.perf_counter() - begun >= duration_s:
            break
    measured_end_wall = time.time()
    backend.sync()
    made = generations * batch_size * max_new_tokens
    latency = percentiles(per_token or first_tokens, qs=(50, 90, 99))
    return {
        "images_per_sec": generations * batch_size / spent,  # sequences completed per second
        "tokens_per_sec": made / spent,
        "measured_images": generations * batch_size, "measured_batches": generations,
        "measured_time_s": spent, "warmup_steps": 1,
        "warmup_time_s": measured_start_wall - start_wall, "first_step_s": first_step,
        "time_to_first_step_s": start_wall + first_step - process_start,
        "import_time_s": import_time_s, "build_time_s": build_time_s,
        "latency_ms": {key: value * 1000.0 for key, value in latency.items()},
        "memory": backend.memory_readings(),
        "markers": {
            "fit_start": start_wall, "first_step_end": start_wall + first_step,
            "warmup_end": measured_start_wall, "measured_start": measured_start_wall,
            "measured_end": measured_end_wall,
        },
        "generation": {
            "prompt_tokens": PROMPT_TOKENS, "new_tokens": max_new_tokens, "window": steps,
            "batch": batch_size, "generations": generations,
            "time_to_first_token_ms": statistics.median(first_tokens) * 1000.0,
            "time_to_first_token_s": first_tokens,
            "per_token_ms": {key: value * 1000.0 for key, value in latency.items()},
            "per_token_s": per_token, "tokens_per_sec": made / spent,
            "prompt": prompt.tolist(), "tokens": tokens.tolist(),
            "logit_gaps": logit_gaps(read), "weights": weights, "method": NO_KV_CACHE,
        },
    }  # fmt: skip
