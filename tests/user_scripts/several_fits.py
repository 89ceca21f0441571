"""A user's Keras 3 script with the usual life of a model: train, evaluate, predict,
train again (a second ``fit`` with a lower learning rate), evaluate again. Its
regression head reports a metric the user named ``acc`` (a mean absolute error)."""

import keras
import numpy as np

rng = np.random.RandomState(0)
x = rng.rand(768, 16).astype("float32")
y = x.sum(axis=1, keepdims=True).astype("float32")
model = keras.Sequential(
    [keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)]
)
model.compile(optimizer="adam", loss="mse", metrics=[keras.metrics.MeanAbsoluteError(name="acc")])
model.fit(x[:640], y[:640], batch_size=32, epochs=1, verbose=0, validation_split=0.1)
print("first evaluate:", model.evaluate(x[640:], y[640:], verbose=0))
predictions = model.predict(x[640:], verbose=0)
model.optimizer.learning_rate = 1e-4
model.fit(x[:640], y[:640], batch_size=32, epochs=1, verbose=0)
print("second evaluate:", model.evaluate(x[640:], y[640:], verbose=0))
print("predicted", len(predictions))
