"""A user's Keras 3 serving benchmark in the style of Keras' layer benchmarks: build a
model (no training), call ``predict`` twice on the same batch set and print its own
throughput (samples/s of the second call, as those benchmarks do)."""

import time

import keras
import numpy as np

rng = np.random.RandomState(0)
x = rng.rand(4096, 64).astype("float32")
model = keras.Sequential(
    [keras.Input((64,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(10)]
)
model.predict(x, batch_size=128, verbose=0)  # warm up: tracing and compilation
start = time.perf_counter()
model.predict(x, batch_size=128, verbose=0)
seconds = time.perf_counter() - start
print(f"own timing: {len(x) / seconds:.1f} samples/s")
