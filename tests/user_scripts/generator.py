"""A user's Keras 3 script feeding ``fit`` from a Python generator (random batches
made on the fly), with ``steps_per_epoch``: the batches' sizes are not known to
callbacks."""

import keras
import numpy as np


def batches(batch_size=32):
    rng = np.random.RandomState(0)
    while True:
        x = rng.rand(batch_size, 20).astype("float32")
        yield x, (x.sum(axis=1) > 10).astype("int32")


model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(2, activation="softmax")])
model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(batches(), steps_per_epoch=20, epochs=2, verbose=0)
print("trained from a generator")
