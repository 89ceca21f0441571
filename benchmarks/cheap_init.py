"""What a Keras 3 model build costs when its initial weights are never used.

Parity loads the reference's weights into every other backend, and a parameter census
reads only the model's size; yet building the model runs every initializer. On JAX each
initializer's random draw compiles an XLA computation per weight shape, so building the
zoo costs about a minute of compiling on 2 cores. Inside
``Backend.initial_values_unused()`` the draws come from NumPy instead.

Each round starts two fresh processes of the chosen backend, one after the other (their
order alternates): one builds every zoo model with the framework's draws, the other
with NumPy's, both cold (no persistent compilation cache); reported: each way's median
build time per model and in all, and their ratio.

    envs/keras3/bin/python benchmarks/cheap_init.py --backend jax --rounds 2
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# parity's small shapes (tests/test_parity.py), so the figure is the suite's own cost
SMALL_SHAPES = {"resnet50": (64, 64, 3), "lstm": (24, 8), "lstm_embedding": (24,)}


def child(backend_name: str, cheap: bool) -> None:
    """Build every zoo model; print {model: seconds} as one JSON line."""
    import kbench_models
    from kbench.backends import load_backend
    from kbench.measure.processes import usable_cores

    backend = load_backend(backend_name)(threads=usable_cores())
    backend.start("channels_last")
    seconds = {}
    for name, spec in kbench_models.MODELS.items():
        backend.seed(0)
        began = time.perf_counter()
        with backend.initial_values_unused() if cheap else contextlib.nullcontext():
            backend.build(name, SMALL_SHAPES.get(name, spec.input_shape), spec.num_classes)
        seconds[name] = time.perf_counter() - began
        backend.keras.backend.clear_session()
    print(json.dumps(seconds))


def one(python: str, backend: str, cheap: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env.update(KERAS_BACKEND=backend, KERAS_HOME=tempfile.mkdtemp(prefix="cheap-init-"))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "models")])
    mode = "numpy" if cheap else "framework"
    out = subprocess.run(
        [python, __file__, "--child", mode, "--backend", backend],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="jax", choices=("tensorflow", "jax", "torch"))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", choices=("framework", "numpy"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.backend, args.child == "numpy")
        return 0
    python = str(ROOT / "envs" / "keras3" / "bin" / "python")
    runs = {"framework": [], "numpy": []}
    for round_index in range(args.rounds):
        order = ("framework", "numpy") if round_index % 2 == 0 else ("numpy", "framework")
        for mode in order:
            runs[mode].append(one(python, args.backend, mode == "numpy"))
            print(f"round {round_index + 1} {mode}: {sum(runs[mode][-1].values()):.1f} s",
                  file=sys.stderr)  # fmt: skip
    models = list(runs["framework"][0])
    print(f"{args.backend}: build seconds, median of {args.rounds} cold processes each")
    print(f"{'model':16s} {'framework':>10s} {'numpy':>8s}")
    for model in models:
        framework = statistics.median(r[model] for r in runs["framework"])
        numpy_ = statistics.median(r[model] for r in runs["numpy"])
        print(f"{model:16s} {framework:10.2f} {numpy_:8.2f}")
    totals = {m: statistics.median(sum(r.values()) for r in runs[m]) for m in runs}
    share = totals["numpy"] / totals["framework"]
    print(f"{'all':16s} {totals['framework']:10.2f} {totals['numpy']:8.2f}  "
          f"(numpy x{share:.3f} of the framework's time)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
