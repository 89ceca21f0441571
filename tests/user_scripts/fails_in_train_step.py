"""A user's Keras 3 script that trains a first model, then fine-tunes with a custom
``train_step`` written for TensorFlow (``train_step(self, data)`` with a
``GradientTape``): under JAX, Keras calls ``train_step(state, data)`` and the script
dies with a TypeError, followed by JAX's note about its filtered traceback."""

import keras
import numpy as np

rng = np.random.RandomState(0)
x = rng.rand(640, 16).astype("float32")
y = rng.randint(0, 2, size=640)
base = keras.Sequential([keras.Input((16,)), keras.layers.Dense(2, activation="softmax")])
base.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
base.fit(x, y, batch_size=32, epochs=1, verbose=0)
print("first model trained")


class TensorFlowStyle(keras.Model):
    def train_step(self, data):  # TensorFlow's signature
        import tensorflow as tf

        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(y=y, y_pred=self(x, training=True))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply(grads, self.trainable_variables)
        return {"loss": loss}


inputs = keras.Input((16,))
model = TensorFlowStyle(inputs, keras.layers.Dense(2, activation="softmax")(inputs))
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
model.fit(x, y, batch_size=32, epochs=1, verbose=0)
