"""What a JAX process of the suite costs with XLA's default flags and with LLVM's
optimizations skipped (``XLA_FLAGS=--xla_backend_optimization_level=0``, which
tests/suite_plugin.py sets for the suite's processes).

Each process starts the JAX backend as a worker does (zoo imports only), builds a zoo
model with Keras' own initializers, and takes two training steps and one prediction on a
batch of 4 (the suite's parity and its runs do little more), with no compilation cache.
Fresh interpreters, interleaved rounds (each way first in every other round); reported:
each way's median wall and CPU seconds, and the CPU ratio (process_starts.compare).

    envs/keras3/bin/python benchmarks/xla_compile.py --model small_cnn,resnet20 --rounds 3
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from process_starts import compare

from kbench.run import environments

STEPS = """
import sys
import numpy as np
from kbench.backends import load_backend
backend = load_backend("jax")(threads=1)
backend.skip_unused_imports = True
backend.start(sys.argv[2])
shape = (32, 32, 3)
model = backend.build(sys.argv[1], shape, 10)
backend.compile(model, "sgd", 1e-3, "sparse_categorical_crossentropy")
x = np.random.default_rng(0).random((4, *shape), dtype=np.float32)
y = np.arange(4)
for _ in range(2):
    backend.train_step(model, x, y)
backend.predict(model, x)
"""
QUICK = "--xla_backend_optimization_level=0"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="small_cnn,resnet20")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"medians of {args.rounds} fresh processes each way, interleaved")
    with tempfile.TemporaryDirectory(prefix="kbench-xla-") as scratch:
        python_path = environments.import_root(Path(scratch) / "pythonpath")
        env, config = environments.process_environment(
            "jax", Path(scratch) / "jax", python_path, 1, None
        )
        for name in [k for k in env if k.startswith(("JAX_COMPILATION", "JAX_PERSISTENT"))]:
            del env[name]  # every compile counted, none read from an earlier process
        env.pop("XLA_FLAGS", None)
        python = str(environments.interpreter_for("jax"))
        for model in args.model.split(","):
            command = [python, "-c", STEPS, model, config["image_data_format"]]
            ways = {
                f"{model}, XLA's defaults": (command, env),
                f"{model}, {QUICK}": (command, dict(env, XLA_FLAGS=QUICK)),
            }
            print(f"jax, {model}: started, built, 2 training steps and a prediction")
            print(compare(ways, args.rounds, scratch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
