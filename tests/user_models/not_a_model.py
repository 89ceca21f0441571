"""A build function that returns something other than a Keras model (a bad-input test)."""


def build(input_shape, num_classes):
    return {"layers": [input_shape, num_classes]}
