"""What a JAX process of the suite costs with XLA's default flags, with LLVM's
optimizations skipped (``--xla_backend_optimization_level=0``), and with XLA's older
CPU fusion emitters as well (``--xla_cpu_use_fusion_emitters=false``): the last is the
``XLA_FLAGS`` tests/suite_plugin.py sets for the suite's processes.

Each process starts the JAX backend as a worker does (zoo imports only), builds a zoo
model with Keras' own initializers, and takes two training steps and one prediction on a
batch of 4 (the suite's parity and its runs do little more), with no compilation cache.
Fresh interpreters, interleaved rounds (each way first in every other round); reported:
each way's median wall and CPU seconds, and each way's CPU ratio to XLA's defaults
(process_starts.compare).

    envs/keras3/bin/python benchmarks/xla_compile.py --model small_cnn,resnet20 --rounds 3
    envs/keras3/bin/python benchmarks/xla_compile.py --model resnet50 --shape 64x64x3
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
backend.start(sys.argv[2])
shape = tuple(int(side) for side in sys.argv[3].split("x"))
model = backend.build(sys.argv[1], shape, 10)
backend.compile(model, "sgd", 1e-3, "sparse_categorical_crossentropy")
x = np.random.default_rng(0).random((4, *shape), dtype=np.float32)
y = np.arange(4)
for _ in range(2):
    backend.train_step(model, x, y)
backend.predict(model, x)
"""
NO_LLVM_PASSES = "--xla_backend_optimization_level=0"
OLDER_EMITTERS = "--xla_cpu_use_fusion_emitters=false"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="small_cnn,resnet20")
    parser.add_argument("--shape", default="32x32x3", help="the input, HxWxC (default 32x32x3)")
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
        quick = f"{NO_LLVM_PASSES} {OLDER_EMITTERS}"
        for model in args.model.split(","):
            command = [python, "-c", STEPS, model, config["image_data_format"], args.shape]
            ways = {
                f"{model}, XLA's defaults": (command, env),
                f"{model}, LLVM's passes skipped": (command, dict(env, XLA_FLAGS=NO_LLVM_PASSES)),
                f"{model}, and older emitters": (command, dict(env, XLA_FLAGS=quick)),
            }
            print(f"jax, {model} ({args.shape}): started, built, 2 training steps, a prediction")
            print(compare(ways, args.rounds, scratch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
