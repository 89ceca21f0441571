"""A Keras 3 saved model: ``--model path/to/model.keras`` (architecture and weights).

A ``.keras`` file is a zip archive holding ``config.json`` (the architecture),
``metadata.json`` and ``model.weights.h5``. The parent, which never imports Keras,
reads only ``config.json`` (:func:`read_facts`): the input shape and dtype of the one
input layer, the class count from the output layer's ``units``, and from those the
zoo's hooks (input kind, loss, vocabulary). The worker loads the whole file with
``keras.saving.load_model(path, compile=False)`` (:func:`loader`), so every Keras 3
backend starts from the saved weights, not from a fresh initialisation: the first
step's loss is the same on tensorflow, jax and torch. keras-mxnet (Keras 2.2.4)
cannot read the format; its backend reports the run ``unsupported``.

The saved layers keep the ``data_format`` and dtype policy they were saved with, so a
run's ``--data-format`` and ``--mixed-precision`` do not change them; the worker
refuses data whose shape is not the saved input shape.

Nothing here imports kbench.
"""

from __future__ import annotations

import json
import zipfile
from typing import Any, Callable, Dict, List, Optional, Tuple

from kbench_models.user import MAX_INPUT_VALUES, UserModelError

SAVE_HINT = "Save it with model.save('model.keras') under Keras 3."


def read_config(path: str) -> Dict[str, Any]:
    """``config.json`` of the archive at ``path``, or a :class:`UserModelError` saying why not."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            if "config.json" not in names:
                raise UserModelError(
                    f"model file {path}: expected a Keras 3 saved model, a zip archive holding "
                    f"config.json and model.weights.h5; the archive holds "
                    f"{', '.join(names[:6]) or 'nothing'}. {SAVE_HINT}"
                )
            if archive.getinfo("config.json").file_size > MAX_CONFIG_BYTES:
                raise UserModelError(
                    f"model file {path}: its config.json is "
                    f"{archive.getinfo('config.json').file_size:,} bytes; a Keras 3 model's "
                    f"architecture takes far less (kbench reads up to {MAX_CONFIG_BYTES:,}). "
                    f"{SAVE_HINT}"
                )
            config = json.loads(archive.read("config.json"))
    except (zipfile.BadZipFile, OSError, ValueError, RecursionError) as err:
        if isinstance(err, UserModelError):
            raise
        raise UserModelError(
            f"model file {path}: expected a Keras 3 saved model (a zip archive); it cannot "
            f"be read as one ({type(err).__name__}: {err}). A Keras 2 .h5 file or a "
            f"SavedModel folder is another format. {SAVE_HINT}"
        ) from None
    return _object(path, config, "config.json")


MAX_CONFIG_BYTES = 64 * 2**20


def _unlike(path: str, where: str, expected: str, value: Any) -> UserModelError:
    """The error for a config.json that Keras 3 did not write as it stands."""
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    return UserModelError(
        f"model file {path}: its config.json is not one Keras 3 writes: expected {where} to "
        f"be {expected}; received {type(value).__name__} {shown}. {SAVE_HINT}"
    )


def _object(path: str, value: Any, where: str) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise _unlike(path, where, "an object ({...})", value)
    return value


def _layers(path: str, config: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The model's layers, each an object whose ``config`` is an object."""
    inner = _object(path, config.get("config") or {}, "its config")
    layers = inner.get("layers") or []
    if not isinstance(layers, list):
        raise _unlike(path, "config.layers", "a list of layers", layers)
    for i, layer in enumerate(layers):
        _object(path, layer, f"layer {i}")
        _object(path, layer.get("config"), f"layer {i}'s config")
    return layers


def _input(path: str, config: Dict[str, Any]) -> Tuple[Tuple[Any, ...], str]:
    """The one input's shape (without the batch axis) and dtype."""
    inputs = [layer for layer in _layers(path, config) if layer.get("class_name") == "InputLayer"]
    if len(inputs) > 1:
        raise UserModelError(
            f"model file {path}: kbench feeds a model one input; this model has "
            f"{len(inputs)} ({', '.join(str(i['config'].get('name', '?')) for i in inputs)}). "
            "Save a model with a single input."
        )
    if inputs:
        layer = inputs[0]["config"]
        shape = layer.get("batch_shape") or layer.get("batch_input_shape")
        dtype = layer.get("dtype") or "float32"
        if isinstance(dtype, dict):  # a dtype policy
            dtype = (dtype.get("config") or {}).get("name") or "float32"
    else:
        built = config.get("build_config") or {}
        shape = built.get("input_shape") if isinstance(built, dict) else None
        dtype = "float32"
    if not shape:
        raise UserModelError(
            f"model file {path}: its config.json names no input shape (a model saved before "
            "it was built). Build or call the model once, or start it with "
            f"keras.Input(shape=...), then save it again. {SAVE_HINT}"
        )
    if not isinstance(shape, list):
        raise _unlike(path, "the input's batch_shape", "a list such as [null, 28, 28, 1]", shape)
    return tuple(shape[1:]), str(dtype)


def _output(path: str, config: Dict[str, Any]) -> Tuple[Optional[Dict[str, Any]], Any]:
    """The config of the output layer, or of the last layer before it with ``units``; and
    the activation the output ends with (a later ``Activation`` layer's, if any)."""
    layers = _layers(path, config)
    names = (config.get("config") or {}).get("output_layers") or []
    if isinstance(names, list) and names and isinstance(names[0], str):
        names = [names]
    order = [layer.get("name") or layer["config"].get("name") for layer in layers]
    last = names[-1][0] if isinstance(names, list) and names and names[-1] else None
    end = order.index(last) if isinstance(last, str) and last in order else len(layers) - 1
    activation = None
    for layer in reversed(layers[: end + 1]):
        if activation is None and "activation" in layer["config"]:
            activation = layer["config"]["activation"]
        if "units" in layer["config"]:
            return layer["config"], activation
    return None, activation


def activation_name(activation: Any) -> str:
    """``"sigmoid"`` from ``"sigmoid"`` or from Keras 3's serialized function."""
    if isinstance(activation, dict):
        activation = activation.get("config")
    return activation if isinstance(activation, str) else "linear"


def read_facts(path: str) -> Dict[str, Any]:
    """The ModelSpec fields of the saved model at ``path``, read from its config.json;
    :class:`UserModelError` for a config.json that no run could use, whatever it holds."""
    config = read_config(path)
    try:
        return _facts(path, config)
    except UserModelError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as err:
        raise UserModelError(
            f"model file {path}: its config.json is not one Keras 3 writes: reading the input "
            f"and output layers failed ({type(err).__name__}: {err}). {SAVE_HINT}"
        ) from None


def _facts(path: str, config: Dict[str, Any]) -> Dict[str, Any]:
    shape, dtype = _input(path, config)
    if not shape or not all(
        isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape
    ):
        raise UserModelError(
            f"model file {path}: kbench needs a fixed input shape; the saved input is "
            f"{tuple(shape)!r} (None is a free axis). Save the model with "
            "keras.Input(shape=(...)) of fixed sizes."
        )
    values = 1
    for d in shape:
        values *= d
    if values > MAX_INPUT_VALUES:
        raise UserModelError(
            f"model file {path}: the saved input {tuple(shape)!r} makes samples of {values:,} "
            f"values; kbench makes samples of at most {MAX_INPUT_VALUES:,}."
        )
    facts = _head(path, config)
    if "int" in dtype:
        embeddings = [
            layer["config"]
            for layer in _layers(path, config)
            if layer.get("class_name") == "Embedding"
        ]
        if not embeddings:
            raise UserModelError(
                f"model file {path}: an integer input ({dtype}) is read as word ids, which "
                "needs an Embedding layer to give the vocabulary size; the model has none."
            )
        vocabulary = _units(path, embeddings[0].get("input_dim"), "the Embedding's input_dim")
        facts.update(input_kind="tokens", vocabulary_size=vocabulary, input_shape=shape)
    elif len(shape) == 3:
        facts.update(input_kind="image", input_shape=shape)
    elif len(shape) == 2:
        facts.update(input_kind="sequence", input_shape=shape)
    else:
        raise UserModelError(
            f"model file {path}: kbench feeds images (H, W, C), sequences (steps, features) "
            f"or tokens (steps,) of integers; the saved input is {shape} of {dtype}."
        )
    return facts


def _units(path: str, value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _unlike(path, what, "a positive whole number", value)
    return value


def _head(path: str, config: Dict[str, Any]) -> Dict[str, Any]:
    """The class count and loss the output layer is made for; a head that is no
    classifier's (one linear or softmax unit: a regression) is refused."""
    output, activation = _output(path, config)
    if output is None:
        raise UserModelError(
            f"model file {path}: expected a classifier whose output layer (or the last layer "
            "before it) has `units`, the class count; found no such layer. End the model "
            "with Dense(num_classes, activation='softmax')."
        )
    units = _units(path, output["units"], f"the output layer's units ({output.get('name')})")
    activation = activation_name(activation)
    if units == 1 and activation != "sigmoid":
        raise UserModelError(
            f"model file {path}: expected a classifier; its output is one unit with "
            f"activation {activation!r}, a regression (or a single score): its loss and "
            "accuracy as a classifier would mean nothing (accuracy 1.000). kbench trains "
            "classifiers: end the model with Dense(num_classes, activation='softmax'), or "
            "Dense(1, activation='sigmoid') for two classes."
        )
    binary = units == 1
    return {
        "num_classes": 2 if binary else units,
        "loss": "binary_crossentropy" if binary else "sparse_categorical_crossentropy",
    }


def loader(path: str) -> Callable[..., Any]:
    """A ``build(input_shape, num_classes)`` that loads the saved model (in the worker)."""

    def build(input_shape: Tuple[int, ...], num_classes: int) -> Any:
        import keras

        if int(keras.__version__.split(".")[0]) < 3:
            raise UserModelError(
                f"model file {path}: a .keras file needs Keras 3; this process has Keras "
                f"{keras.__version__}."
            )
        model = keras.saving.load_model(path, compile=False)
        takes = tuple(int(d) for d in model.inputs[0].shape[1:])
        if takes != tuple(input_shape):
            raise UserModelError(
                f"model file {path}: the saved model takes input {takes}; the data gives "
                f"samples of shape {tuple(input_shape)}. Give data of that shape (images "
                "channels last; --image-size resizes real images; drop --data-format "
                "channels_first, as the saved layers keep their format)."
            )
        outputs = int(model.outputs[0].shape[-1])
        if num_classes > max(outputs, 2):
            raise UserModelError(
                f"model file {path}: the saved model has {outputs} outputs; the data has "
                f"{num_classes} classes (labels up to {num_classes - 1}). Give labels below "
                f"{outputs}, or save a model with {num_classes} outputs."
            )
        return model

    return build
