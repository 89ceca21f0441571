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

from kbench_models.user import UserModelError

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
            return json.loads(archive.read("config.json"))
    except (zipfile.BadZipFile, OSError, ValueError) as err:
        if isinstance(err, UserModelError):
            raise
        raise UserModelError(
            f"model file {path}: expected a Keras 3 saved model (a zip archive); it cannot "
            f"be read as one ({type(err).__name__}: {err}). A Keras 2 .h5 file or a "
            f"SavedModel folder is another format. {SAVE_HINT}"
        ) from None


def _layers(config: Dict[str, Any]) -> List[Dict[str, Any]]:
    return list((config.get("config") or {}).get("layers") or [])


def _input(path: str, config: Dict[str, Any]) -> Tuple[Tuple[Any, ...], str]:
    """The one input's shape (without the batch axis) and dtype."""
    inputs = [layer for layer in _layers(config) if layer.get("class_name") == "InputLayer"]
    if len(inputs) > 1:
        raise UserModelError(
            f"model file {path}: kbench feeds a model one input; this model has "
            f"{len(inputs)} ({', '.join(i['config'].get('name', '?') for i in inputs)}). "
            "Save a model with a single input."
        )
    if inputs:
        layer = inputs[0]["config"]
        shape = layer.get("batch_shape") or layer.get("batch_input_shape")
        return tuple(shape[1:]), str(layer.get("dtype") or "float32")
    built = config.get("build_config") or {}
    if built.get("input_shape"):
        return tuple(built["input_shape"][1:]), "float32"
    raise UserModelError(
        f"model file {path}: its config.json names no input shape (a model saved before it "
        "was built). Build or call the model once, or start it with keras.Input(shape=...), "
        f"then save it again. {SAVE_HINT}"
    )


def _output(config: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The config of the output layer, or of the last layer before it with ``units``."""
    layers = _layers(config)
    names = (config.get("config") or {}).get("output_layers") or []
    if names and isinstance(names[0], str):
        names = [names]
    order = [layer.get("name") or layer["config"].get("name") for layer in layers]
    end = order.index(names[-1][0]) if names and names[-1][0] in order else len(layers) - 1
    for layer in reversed(layers[: end + 1]):
        if "units" in layer.get("config", {}):
            return layer["config"]
    return None


def read_facts(path: str) -> Dict[str, Any]:
    """The ModelSpec fields of the saved model at ``path``, read from its config.json."""
    config = read_config(path)
    shape, dtype = _input(path, config)
    if not shape or not all(isinstance(d, int) and d > 0 for d in shape):
        raise UserModelError(
            f"model file {path}: kbench needs a fixed input shape; the saved input is "
            f"{tuple(shape)!r} (None is a free axis). Save the model with "
            "keras.Input(shape=(...)) of fixed sizes."
        )
    output = _output(config)
    if output is None:
        raise UserModelError(
            f"model file {path}: expected a classifier whose output layer (or the last layer "
            "before it) has `units`, the class count; found no such layer. End the model "
            "with Dense(num_classes, activation='softmax')."
        )
    units = int(output["units"])
    binary = units == 1 and output.get("activation") == "sigmoid"
    facts: Dict[str, Any] = {
        "input_shape": shape,
        "num_classes": 2 if binary else units,
        "loss": "binary_crossentropy" if binary else "sparse_categorical_crossentropy",
    }
    if "int" in dtype:
        embeddings = [
            layer["config"] for layer in _layers(config) if layer.get("class_name") == "Embedding"
        ]
        if not embeddings:
            raise UserModelError(
                f"model file {path}: an integer input ({dtype}) is read as word ids, which "
                "needs an Embedding layer to give the vocabulary size; the model has none."
            )
        facts.update(input_kind="tokens", vocabulary_size=int(embeddings[0]["input_dim"]))
    elif len(shape) == 3:
        facts["input_kind"] = "image"
    elif len(shape) == 2:
        facts["input_kind"] = "sequence"
    else:
        raise UserModelError(
            f"model file {path}: kbench feeds images (H, W, C), sequences (steps, features) "
            f"or tokens (steps,) of integers; the saved input is {shape} of {dtype}."
        )
    return facts


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
