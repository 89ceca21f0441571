"""A user's Keras 3 script that picks its own backend (``KERAS_BACKEND`` set before
Keras is imported), whatever it was started with."""

import os

os.environ["KERAS_BACKEND"] = "torch"

import keras  # noqa: E402
import numpy as np  # noqa: E402

generator = np.random.default_rng(1)
features = generator.random((512, 8), dtype=np.float32)
targets = (features.mean(axis=1) > 0.5).astype("int64")
inputs = keras.Input((8,))
model = keras.Model(inputs, keras.layers.Dense(2, activation="softmax")(inputs))
model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
model.fit(features, targets, batch_size=32, epochs=1, verbose=0)
print("backend:", keras.backend.backend())
