"""A user's Keras 3 script in the style of Keras'
``examples/demo_custom_layer_backend_agnostic.py``: a subclassed model built from a
custom layer written with ``keras.ops`` (weights made in ``build``), so the model has
no weights until its first batch. Trains on random arrays.
"""

import keras
import numpy as np
from keras import ops


class MyDense(keras.layers.Layer):
    def __init__(self, units, activation=None, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.activation = keras.activations.get(activation)

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], self.units), initializer="glorot_normal")
        self.b = self.add_weight(shape=(self.units,), initializer="zeros")

    def call(self, inputs):
        return self.activation(ops.matmul(inputs, self.w) + self.b)


class MyModel(keras.Model):
    def __init__(self, hidden, classes):
        super().__init__(name="my_model")
        self.dense1 = MyDense(hidden, activation="relu")
        self.dense2 = MyDense(hidden, activation="relu")
        self.out = MyDense(classes, activation="softmax")

    def call(self, x):
        return self.out(self.dense2(self.dense1(x)))


rng = np.random.RandomState(0)
x = rng.rand(1024, 32).astype("float32")
y = rng.randint(0, 4, size=1024)
model = MyModel(64, 4)
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(x, y, batch_size=32, epochs=1, verbose=0)
print("params:", model.count_params())  # 32*64+64 + 64*64+64 + 64*4+4 = 6,532
