"""Twin of :mod:`kbench_models.resnet56`: ResNet-56 v1 for CIFAR; see :mod:`.resnet_cifar`."""

from __future__ import annotations

from .resnet_cifar import ResNetV1


def build(input_shape=(3, 32, 32), num_classes=10) -> ResNetV1:
    return ResNetV1(56, input_shape, num_classes)
