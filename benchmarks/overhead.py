"""What kbench's measuring costs: sampler on vs off, and kbench vs a bare training loop.

Each round runs, in fresh processes, the same model on the same synthetic data with
the same batch size, threads, KERAS_HOME and interpreter (the order rotates from round
to round, so that whatever favours the first or last run of a round cancels out):

  1. kbench with the sampler on (default 200 ms interval)
  2. kbench with the sampler off (--sample-interval 0)
  3. a bare loop: the same Keras model and data, ``model.fit`` over the measured
     batches after a warmup fit, timed by the wall clock around ``fit`` (no callbacks,
     no per-step host read of the loss)

and reports, per backend and model, the median over rounds of the per-round ratios
sampler-on / sampler-off (budget: at least 0.98) and kbench / bare (at least 0.95),
with their ranges.

    envs/keras3/bin/python benchmarks/overhead.py --backend torch,jax --model small_cnn --rounds 5
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from kbench.results.config import RunConfig
from kbench.run import environments
from kbench.run.runner import Runner

BARE_LOOP = r"""
import json, sys, time
import numpy as np
import kbench_models
import keras

model_name, batch, warmup, steps, seed = sys.argv[1], *map(int, sys.argv[2:6])
spec = kbench_models.MODELS[model_name]
shape = spec.input_shape
if keras.backend.image_data_format() == "channels_first":
    shape = (shape[-1],) + tuple(shape[:-1])
rng = np.random.default_rng(seed)
x = rng.random(((warmup + steps) * batch,) + tuple(shape), dtype=np.float32)
y = rng.integers(0, spec.num_classes, size=len(x))
model = kbench_models.build(model_name, shape, spec.num_classes)
model.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-3),
              loss="sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(x[: warmup * batch], y[: warmup * batch], batch_size=batch, shuffle=False, verbose=0)
start = time.perf_counter()
history = model.fit(x[warmup * batch :], y[warmup * batch :], batch_size=batch, shuffle=False,
                    verbose=0)
float(history.history["loss"][-1])
elapsed = time.perf_counter() - start
print(json.dumps({"images_per_sec": steps * batch / elapsed}))
"""


def bare_loop(backend: str, model: str, batch: int, warmup: int, steps: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        python_path = environments.import_root(Path(tmp) / "pythonpath")
        env, _ = environments.process_environment(
            backend, Path(tmp), python_path, os.cpu_count() or 1, None
        )
        done = subprocess.run(
            [str(environments.interpreter_for(backend)), "-c", BARE_LOOP, model, str(batch),
             str(warmup), str(steps), "0"],
            env=env, cwd=tmp, capture_output=True, text=True, check=True,
        )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])["images_per_sec"]


def spread(values):
    return f"x{statistics.median(values):.3f} (x{min(values):.3f}-x{max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="torch,jax,tensorflow")
    parser.add_argument("--model", default="small_cnn")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup-steps", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    speeds: dict = {}
    with tempfile.TemporaryDirectory() as out:
        runner = Runner(output_dir=Path(out))
        for round_index in range(args.rounds):
            for backend in args.backend.split(","):
                entry = speeds.setdefault(
                    backend, {"sampler_on": [], "sampler_off": [], "bare": []}
                )
                variants = [("sampler_on", 0.2), ("sampler_off", 0.0), ("bare", None)]
                shift = round_index % len(variants)  # rotate, so order effects cancel
                for label, interval in variants[shift:] + variants[:shift]:
                    if interval is None:
                        entry["bare"].append(bare_loop(
                            backend, args.model, args.batch_size, args.warmup_steps, args.steps
                        ))  # fmt: skip
                        continue
                    config = RunConfig(
                        backend=backend, model=args.model, dataset="synthetic",
                        steps=args.steps, warmup_steps=args.warmup_steps,
                        batch_size=args.batch_size, test_samples=64,
                        sample_interval_s=interval,
                    )  # fmt: skip
                    (result,) = runner.run_all([config])
                    if not result.ok:
                        sys.exit(f"{backend}: {result.status}: {result.reason}")
                    entry[label].append(result.metrics["images_per_sec"])
                print(
                    f"round {round_index + 1} {backend}: "
                    + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in entry.items()),
                    flush=True,
                )

    print(
        f"\n{args.model}, batch {args.batch_size}, {args.steps} measured steps, "
        f"{args.rounds} interleaved rounds; medians of per-round ratios (range)"
    )
    for backend, entry in speeds.items():
        on_off = [a / b for a, b in zip(entry["sampler_on"], entry["sampler_off"])]
        vs_bare = [a / b for a, b in zip(entry["sampler_on"], entry["bare"])]
        print(
            f"  {backend:10s} img/s median: kbench {statistics.median(entry['sampler_on']):,.0f}"
            f", no sampler {statistics.median(entry['sampler_off']):,.0f}"
            f", bare {statistics.median(entry['bare']):,.0f}"
        )
        print(f"  {'':10s} sampler on/off {spread(on_off)}   kbench/bare {spread(vs_bare)}")


if __name__ == "__main__":
    main()
