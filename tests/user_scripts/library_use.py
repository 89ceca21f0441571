"""kbench as a library inside a plain training script (no kbench exec): the
Throughput callback beside the user's own fit, kbench.measure.sample() around it,
kbench.record() into the store named by the first argument.

usage: python library_use.py STORE
"""

import sys
import time

# Throughput first: importing it imports Keras, with keras-mxnet's collections.Iterable
# shim where Keras 2.2.4 on Python 3.10+ needs it (a plain `import keras` fails there).
from kbench.callbacks import Throughput

# isort: split
import keras
import numpy as np

import kbench
import kbench.measure

store = sys.argv[1]
rng = np.random.RandomState(0)
x = rng.rand(128, 28, 28).astype("float32")
y = rng.randint(0, 10, size=128)
model = keras.models.Sequential(
    [
        keras.layers.Flatten(input_shape=(28, 28)),
        keras.layers.Dense(16, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ]
)
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
speed = Throughput(warmup_steps=2, batch_size=16, samples=128)
with kbench.measure.sample(interval_s=0.05) as sampling:
    model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[speed])
    time.sleep(0.3)  # the script's own work after fit: the sampler keeps reading (every 0.05 s)
summary = speed.summary()
print("img/s", summary["images_per_sec"])
print("readings", len(sampling.series["t"]))
path = kbench.record(store, name="library_mlp", throughput=speed, sampling=sampling)
print("recorded", path)
