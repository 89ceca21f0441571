"""A user's Keras 3 script that keeps Keras' own progress bar (``verbose=1``, the
default): the bar's last line of an epoch is unfinished when the epoch ends, where
kbench's epoch line once got glued on. Two epochs of a tiny model on random arrays.
"""

import keras
import numpy as np

rng = np.random.RandomState(0)
x = rng.rand(128, 8).astype("float32")
y = rng.randint(0, 2, size=128)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2, activation="softmax")])
model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(x, y, batch_size=16, epochs=2)
print("done")
