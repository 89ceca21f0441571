"""A user's Keras 2 script (keras-mxnet 2.2.4): Fashion-MNIST from
``keras.datasets`` (the user's cache under ``~/.keras/datasets``), a small dense
network, ``fit`` with validation data and ``evaluate``, as Keras 2 scripts were
written (``metrics=['acc']``, ``keras.utils.to_categorical``)."""

import keras
from keras.datasets import fashion_mnist
from keras.layers import Dense, Flatten
from keras.models import Sequential

(x_train, y_train), (x_test, y_test) = fashion_mnist.load_data()
x_train, x_test = x_train.astype("float32") / 255, x_test.astype("float32") / 255
y_train = keras.utils.to_categorical(y_train, 10)
y_test = keras.utils.to_categorical(y_test, 10)

model = Sequential()
model.add(Flatten(input_shape=(28, 28)))
model.add(Dense(32, activation="relu"))
model.add(Dense(10, activation="softmax"))
model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["acc"])
model.fit(x_train, y_train, batch_size=32, epochs=2, verbose=2,
          validation_data=(x_test, y_test))  # fmt: skip
score = model.evaluate(x_test, y_test, verbose=0)
print("Test loss:", score[0])
print("Test accuracy:", score[1])
