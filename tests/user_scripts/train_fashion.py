"""A user's own training script, unchanged by kbench: Fashion-MNIST-shaped synthetic
arrays, a small model, its own callback, model.fit and model.evaluate. Runs under
Keras 3 (any backend) and keras-mxnet 2.2.4. Prints the backend Keras reports.

usage: python train_fashion.py [--samples N] [--batch-size B] [--epochs E]
"""

import argparse

import keras
import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--samples", type=int, default=256)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--epochs", type=int, default=1)
args = parser.parse_args()


class CountBatches(keras.callbacks.Callback):
    """The user's own callback: kbench's must leave it working."""

    def __init__(self):
        super().__init__()
        self.batches = 0

    def on_batch_end(self, batch, logs=None):
        self.batches += 1


rng = np.random.RandomState(0)
x = rng.rand(args.samples, 28, 28).astype("float32")
y = rng.randint(0, 10, size=args.samples)
model = keras.models.Sequential(
    [
        keras.layers.Flatten(input_shape=(28, 28)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ]
)
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
counter = CountBatches()
model.fit(x, y, batch_size=args.batch_size, epochs=args.epochs, verbose=0, callbacks=[counter])
loss, accuracy = model.evaluate(x[:64], y[:64], verbose=0)
print("keras backend:", keras.backend.backend())
print("user callback batches:", counter.batches)
print(f"evaluate accuracy: {accuracy:.3f}")
