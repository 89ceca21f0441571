"""ResNet-56 v1 for CIFAR (the Keras CIFAR-10 example, n=9); see :mod:`.resnet_cifar`.

861,770 parameters (with BatchNormalization moving statistics) for 32x32x3, 10 classes.
"""

from .resnet_cifar import resnet_v1


def build(input_shape=(32, 32, 3), num_classes=10):
    return resnet_v1(56, input_shape=input_shape, num_classes=num_classes, name="resnet56")
