"""A user's Keras 3 script in the style of Keras' ``examples/demo_functional.py``: a
functional model (two inputs merged) on random arrays, trained with ``fit``, with
its own timing printed beside (samples/s of its second epoch, from its own callback).

usage: python functional.py [--samples N] [--batch-size B] [--epochs E]
"""

import argparse
import time

import keras
import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--samples", type=int, default=2048)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()


class OwnTiming(keras.callbacks.Callback):
    """The script's own clock: the wall time of each epoch."""

    def on_epoch_begin(self, epoch, logs=None):
        self.started = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.perf_counter() - self.started
        print(f"own timing: epoch {epoch + 1}: {args.samples / seconds:.1f} samples/s")


rng = np.random.RandomState(0)
pixels = rng.rand(args.samples, 64).astype("float32")
extra = rng.rand(args.samples, 8).astype("float32")
labels = rng.randint(0, 10, size=args.samples)

image_input = keras.Input(shape=(64,), name="pixels")
extra_input = keras.Input(shape=(8,), name="extra")
x = keras.layers.Dense(128, activation="relu")(image_input)
x = keras.layers.Dropout(0.1)(x)
x = keras.layers.Concatenate()([x, extra_input])
x = keras.layers.Dense(64, activation="relu")(x)
outputs = keras.layers.Dense(10, activation="softmax")(x)
model = keras.Model([image_input, extra_input], outputs, name="functional_demo")
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(
    {"pixels": pixels, "extra": extra}, labels, batch_size=args.batch_size,
    epochs=args.epochs, verbose=2, callbacks=[OwnTiming()],
)  # fmt: skip
print("params:", model.count_params())
