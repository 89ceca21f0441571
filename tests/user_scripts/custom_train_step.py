"""A user's Keras 3 script after the keras-io guide "Customizing what happens in
fit() with PyTorch": a ``keras.Model`` subclass whose ``train_step`` computes the
gradients with ``loss.backward()`` and applies them itself. PyTorch backend only.
"""

import keras
import numpy as np
import torch


class CustomModel(keras.Model):
    def train_step(self, data):
        x, y = data
        self.zero_grad()
        y_pred = self(x, training=True)
        loss = self.compute_loss(y=y, y_pred=y_pred)
        loss.backward()
        trainable_weights = [v for v in self.trainable_weights]
        gradients = [v.value.grad for v in trainable_weights]
        with torch.no_grad():
            self.optimizer.apply(gradients, trainable_weights)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


inputs = keras.Input(shape=(32,))
outputs = keras.layers.Dense(1)(keras.layers.Dense(32, activation="relu")(inputs))
model = CustomModel(inputs, outputs)
model.compile(optimizer="adam", loss="mse", metrics=["mae"])
rng = np.random.RandomState(0)
x, y = rng.random((640, 32)).astype("float32"), rng.random((640, 1)).astype("float32")
model.fit(x, y, batch_size=32, epochs=2, verbose=0)
print("trained with a custom train_step")
