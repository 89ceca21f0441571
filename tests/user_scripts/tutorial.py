"""A user's script after TensorFlow's "basic classification" tutorial: Fashion-MNIST
from ``keras.datasets`` (the user's local cache, ``~/.keras/datasets``: no download),
a ``tf.data`` input pipeline, ``fit`` and ``evaluate``. TensorFlow backend only."""

import keras
import tensorflow as tf

(train_images, train_labels), (test_images, test_labels) = keras.datasets.fashion_mnist.load_data()
print("train images:", train_images.shape)
train = (
    tf.data.Dataset.from_tensor_slices((train_images / 255.0, train_labels))
    .shuffle(256)
    .batch(32)
    .prefetch(2)
)
model = keras.Sequential(
    [
        keras.Input((28, 28)),
        keras.layers.Flatten(),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(10),
    ]
)
model.compile(
    optimizer="adam",
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)
model.fit(train, epochs=2)  # Keras' progress bar (verbose=1)
loss, accuracy = model.evaluate(test_images / 255.0, test_labels, verbose=2)
print("test accuracy:", accuracy)
