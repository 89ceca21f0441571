"""Keras model definitions shared by every backend.

Installed as ``kbench_models`` (never as a top-level ``models``). Nothing here
imports kbench, and nothing imports Keras at module level: the backend is fixed
when Keras is first imported, which only the worker process may do. Each model is
one ``build(input_shape, num_classes)`` function written against the layers that
Keras 3 and Keras 2.2.4 (keras-mxnet) share; layers follow the global
``image_data_format``, so the caller passes ``input_shape`` already laid out for it.
"""

from __future__ import annotations

import functools
import importlib
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple

# the suffix of a loss computed from logits ("sparse_categorical_crossentropy_from_logits")
FROM_LOGITS = "_from_logits"


@dataclass(frozen=True)
class ModelSpec:
    """What the harness needs to know about a model without building it."""

    name: str
    module: str
    description: str
    input_shape: Tuple[int, ...]  # images: channels last (height, width, channels)
    num_classes: int
    # "image": input laid out per image_data_format; "sequence": (steps, features)
    # floats; "tokens": (steps,) integer ids in [0, vocabulary_size)
    input_kind: str = "image"
    # the loss the model's output is made for (with its default num_classes)
    loss: str = "sparse_categorical_crossentropy"
    vocabulary_size: Optional[int] = None  # "tokens" input only
    # what the output is trained against: "label", one class per sample; "next_token",
    # the input shifted by one: output (steps, vocabulary) at every position, position
    # t's target the token at t + 1 (num_classes is then the vocabulary)
    target: str = "label"
    # the output is logits, not probabilities: the loss must be built from_logits=True
    from_logits: bool = False
    # a user model (kbench_models.user): its file's absolute path, function and sha256
    path: Optional[str] = None
    function: str = "build"
    sha256: Optional[str] = None
    # a keras_hub model (kbench_models.hub.HubModel): ``hub:ClassName`` and its --model-args
    hub: Any = None

    def __post_init__(self) -> None:
        kinds = ("image", "sequence", "tokens")
        if self.input_kind not in kinds:
            raise ValueError(
                f"ModelSpec {self.name!r}: input_kind must be one of {', '.join(kinds)}; "
                f"got {self.input_kind!r}"
            )
        if (self.input_kind == "tokens") != (self.vocabulary_size is not None):
            raise ValueError(
                f"ModelSpec {self.name!r}: vocabulary_size is required for input_kind "
                f"'tokens' and only for it; got input_kind={self.input_kind!r}, "
                f"vocabulary_size={self.vocabulary_size!r}"
            )

        targets = ("label", "next_token")
        if self.target not in targets:
            raise ValueError(
                f"ModelSpec {self.name!r}: target must be one of {', '.join(targets)}; "
                f"got {self.target!r}"
            )
        if self.target == "next_token" and not (
            self.input_kind == "tokens" and self.vocabulary_size == self.num_classes
        ):
            raise ValueError(
                f"ModelSpec {self.name!r}: target 'next_token' needs input_kind 'tokens' and "
                f"num_classes equal to vocabulary_size; got input_kind={self.input_kind!r}, "
                f"num_classes={self.num_classes!r}, vocabulary_size={self.vocabulary_size!r}"
            )

    def loss_for(self, num_classes: int) -> str:
        """The loss to train with: binary heads become softmax heads past 2 classes; a model
        whose output is logits gets the loss's :data:`FROM_LOGITS` name (each backend builds
        that loss from logits, or says it cannot)."""
        loss = self.loss
        if loss == "binary_crossentropy" and num_classes != 2:
            loss = "sparse_categorical_crossentropy"
        return loss + FROM_LOGITS if self.from_logits else loss

    @property
    def is_user(self) -> bool:
        return self.path is not None

    @property
    def is_hub(self) -> bool:
        return self.hub is not None

    def builder(self) -> Callable[..., Any]:
        if self.hub is not None:
            from kbench_models import hub

            return functools.partial(hub.build, self.hub)
        if self.path is not None:
            from kbench_models import saved, user

            if user.is_saved_model(self.path):
                return saved.loader(self.path)
            return user.load_builder(self.path, self.function)
        return importlib.import_module(f".{self.module}", __name__).build

    def source(self) -> Optional[Dict[str, str]]:
        """A user model's path, function and sha256; a keras_hub model's class, arguments,
        preset and version (:func:`kbench_models.hub.describe`); None for a zoo model."""
        if self.hub is not None:
            from kbench_models import hub

            return hub.describe(self.hub)
        if self.path is None:
            return None
        from kbench_models import user

        return user.describe(self.path, self.function, self.sha256)


MODELS: Dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="mlp",
            module="mlp",
            description="Flatten, Dense(128, relu), Dense(classes, softmax)",
            input_shape=(28, 28, 1),
            num_classes=10,
        ),
        ModelSpec(
            name="small_cnn",
            module="small_cnn",
            description="Conv2D(64, 3, relu), Conv2D(32, 3, relu), Flatten, Dense(classes)",
            input_shape=(28, 28, 1),
            num_classes=10,
        ),
        ModelSpec(
            name="mlp3",
            module="mlp3",
            description="Flatten, Dense(128, relu), Dense(64, relu), Dense(classes, softmax)",
            input_shape=(28, 28, 1),
            num_classes=10,
        ),
        ModelSpec(
            name="lenet5",
            module="lenet5",
            description="LeNet-5: Conv6(5, same)-AvgPool-Conv16(3)-AvgPool-Dense120-84-classes",
            input_shape=(28, 28, 1),
            num_classes=10,
        ),
        ModelSpec(
            name="resnet20",
            module="resnet20",
            description="ResNet-20 v1 for CIFAR (Keras cifar10_resnet example, n=3)",
            input_shape=(32, 32, 3),
            num_classes=10,
        ),
        ModelSpec(
            name="resnet56",
            module="resnet56",
            description="ResNet-56 v1 for CIFAR (Keras cifar10_resnet example, n=9)",
            input_shape=(32, 32, 3),
            num_classes=10,
        ),
        ModelSpec(
            name="resnet18",
            module="resnet18",
            description="ResNet-18 for CIFAR: 3x3 stem, no max-pool, BasicBlocks 64-512",
            input_shape=(32, 32, 3),
            num_classes=10,
        ),
        ModelSpec(
            name="resnet50",
            module="resnet50",
            description="ResNet-50 v1 for ImageNet, as keras.applications.ResNet50",
            input_shape=(224, 224, 3),
            num_classes=1000,
        ),
        ModelSpec(
            name="vgg16",
            module="vgg16",
            description="VGG-16 with BatchNorm for CIFAR: 13 conv, Dense(512), Dense(classes)",
            input_shape=(32, 32, 3),
            num_classes=10,
        ),
        ModelSpec(
            name="alexnet",
            module="alexnet",
            description="AlexNet for 64x64: 5 conv (64-192-384-256-256), Dense 4096-4096",
            input_shape=(64, 64, 3),
            num_classes=10,
        ),
        ModelSpec(
            name="lstm",
            module="lstm",
            description="LSTM(128) over 250 steps of 50 features, Dense(1, sigmoid)",
            input_shape=(250, 50),
            num_classes=2,
            input_kind="sequence",
            loss="binary_crossentropy",
        ),
        ModelSpec(
            name="lstm_embedding",
            module="lstm_embedding",
            description="Embedding(20000, 50), LSTM(128), Dense(1, sigmoid) on 250 tokens",
            input_shape=(250,),
            num_classes=2,
            input_kind="tokens",
            loss="binary_crossentropy",
            vocabulary_size=20_000,
        ),
        ModelSpec(
            name="vit_tiny",
            module="vit_tiny",
            description="ViT: 4x4 patches, 2 pre-norm blocks (dim 32, 2 heads, MLP 64), mean pool",
            input_shape=(32, 32, 3),
            num_classes=10,
        ),
        ModelSpec(
            name="text_encoder",
            module="text_encoder",
            description="BERT-style: Embedding(1,000, 32), 2 blocks, padding (id 0) masked",
            input_shape=(64,),
            num_classes=2,
            input_kind="tokens",
            vocabulary_size=1_000,
        ),
        ModelSpec(
            name="decoder_lm",
            module="decoder_lm",
            description="GPT-style causal decoder: 2 blocks (dim 32), next-token logits",
            input_shape=(64,),
            num_classes=1_000,
            input_kind="tokens",
            vocabulary_size=1_000,
            target="next_token",
            from_logits=True,
        ),
    )
}

# the models with attention (models/_attention.py); tests/test_attention_models.py
# holds their counts and twins
ATTENTION_MODELS = ("vit_tiny", "text_encoder", "decoder_lm")


def spec_for(model: str, model_args: Optional[str] = None) -> ModelSpec:
    """The spec of a zoo name, of a user model (``file.py:build``, ``pkg.mod:build``) or of
    a keras_hub model (``hub:ClassName[/preset]`` with its ``model_args``, ``k=v,...``:
    :mod:`kbench_models.hub`, which raises ``hub.HubModelError``, a UserModelError).

    A user model's file is read, never run (:mod:`kbench_models.user`); its spec's
    ``name`` is the canonical reference ``/absolute/path.py:function``. Raises
    ``user.UserModelError`` (a ValueError) for a reference that cannot be used, and
    KeyError for an unknown zoo name.
    """
    if model in MODELS:
        return MODELS[model]
    from kbench_models import hub, user

    if hub.is_hub(model):
        return ModelSpec(**hub.spec_fields(model, model_args))

    if not user.is_reference(model):
        raise KeyError(
            f"unknown model {model!r}; expected one of: {', '.join(MODELS)}, or {user.FORMS}"
        )
    if user.is_saved_model(model):
        from kbench_models import saved

        where, function = model, ""
        path = user.locate(where)
        hooks = saved.read_facts(path)
    else:
        where, function = user.split_reference(model)
        path = user.locate(where)
        hooks = {**user.DEFAULTS, **user.read_hooks(path, function)}
    try:
        return ModelSpec(
            name=f"{path}:{function}" if function else path,
            module="",
            description=f"user model {short_name(path + (':' + function if function else ''))}",
            path=path,
            function=function,
            sha256=user.sha256_of(path),
            **hooks,
        )
    except (TypeError, ValueError) as err:
        raise user.UserModelError(f"model file {path}: its hooks do not fit: {err}") from None


def short_name(model: str) -> str:
    """``file.py:build`` for a user model's canonical reference, ``model.keras`` for a
    saved model's; zoo names unchanged."""
    if model not in MODELS and model.endswith(".keras"):
        return os.path.basename(model)
    if model in MODELS or ":" not in model:
        return model
    where, _, function = model.rpartition(":")
    return f"{os.path.basename(where)}:{function}"


def build(
    name: str, input_shape: Tuple[int, ...], num_classes: int, model_args: Optional[str] = None
) -> Any:
    """Build model ``name`` (a zoo name, a user model or a ``hub:`` model with its
    ``model_args``) with the Keras that the current process imported; a user model must
    return a Keras model."""
    spec = spec_for(name, model_args)
    model = spec.builder()(input_shape=tuple(input_shape), num_classes=num_classes)
    if spec.path is not None:
        from kbench_models import user

        user.check_keras_model(model, spec.path, spec.function)
    return model
