"""A model kbench does not ship: ``path/to/file.py:build`` or ``package.module:build``.

The file is written like the zoo's modules: a function ``build(input_shape,
num_classes)`` that returns a Keras model, written against the ``keras`` API. It may
set, as plain literals at module level, the hooks the zoo's :class:`ModelSpec`
declares (every one optional)::

    INPUT_SHAPE = (28, 28, 1)   # default input (channels last) for synthetic data
    NUM_CLASSES = 10            # default class count for synthetic data
    INPUT_KIND = "image"        # "image", "sequence" or "tokens"
    LOSS = "sparse_categorical_crossentropy"
    VOCABULARY_SIZE = 20000     # "tokens" input only

The parent (which must never import Keras) only *reads* the file: its syntax tree
says whether the function exists and what the hooks hold, and its bytes give the
sha256 every result records. Only the worker imports it, by path
(:func:`importlib.util.spec_from_file_location`), with the file's folder first on
``sys.path`` as for a script. A ``package.module`` is found with
:func:`importlib.util.find_spec` in the parent and imported by its file's path too.

Nothing here imports kbench.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
import sys
import traceback
from typing import Any, Callable, Dict, Optional, Tuple

HOOKS: Dict[str, str] = {
    "INPUT_SHAPE": "input_shape",
    "NUM_CLASSES": "num_classes",
    "INPUT_KIND": "input_kind",
    "LOSS": "loss",
    "VOCABULARY_SIZE": "vocabulary_size",
}
DEFAULTS: Dict[str, Any] = {"input_shape": (28, 28, 1), "num_classes": 10}
FORMS = (
    "path/to/file.py:FUNCTION or package.module:FUNCTION (e.g. my_model.py:build), or a "
    "Keras 3 saved model path/to/model.keras"
)
SAVED_SUFFIX = ".keras"
SAVED_FORMAT = "Keras 3 saved model (.keras: architecture and weights)"


class UserModelError(ValueError):
    """A user model reference or file that kbench cannot use; the message says the fix."""


class NotAKerasModel(TypeError):
    """The build function returned something other than a Keras model."""


class UserModelImportError(RuntimeError):
    """The model file raised while it was imported; the message holds its last frames."""


def is_reference(model: str) -> bool:
    """Whether ``model`` names a user model rather than a zoo name."""
    return isinstance(model, str) and (
        ":" in model or model.endswith(".py") or is_saved_model(model)
    )


def is_saved_model(model: str) -> bool:
    """Whether ``model`` names a Keras 3 saved model (``path/to/model.keras``)."""
    return isinstance(model, str) and model.endswith(SAVED_SUFFIX)


def split_reference(model: str) -> Tuple[str, str]:
    """``file.py:build`` -> (``file.py``, ``build``); no function part means ``build``."""
    where, sep, function = model.rpartition(":")
    if not sep or not where:  # "file.py" alone, or ":build"
        where, function = model, "build"
    if not where.endswith(".py") and (":" in where or not function.isidentifier()):
        raise UserModelError(
            f"model {model!r}: expected {FORMS}; the part after the last ':' must be a "
            "function name."
        )
    if not function.isidentifier():
        raise UserModelError(
            f"model {model!r}: expected {FORMS}; received function name {function!r}, "
            "which is not a Python identifier."
        )
    return where, function


def locate(where: str) -> str:
    """The absolute path of a model file or an importable ``package.module``."""
    if where.endswith((".py", SAVED_SUFFIX)) or os.sep in where or "/" in where:
        path = os.path.abspath(os.path.expanduser(where))
        if not os.path.isfile(path):
            wanted = "Keras 3 saved model" if is_saved_model(where) else "Python file"
            raise UserModelError(
                f"model file {where!r}: expected an existing {wanted}; received a path "
                f"that {'is a directory' if os.path.isdir(path) else 'does not exist'} "
                f"({path}). Check the path (relative paths start at the current folder, "
                f"{os.getcwd()})."
            )
        return path
    try:
        found = importlib.util.find_spec(where)
    except (ImportError, ValueError) as err:
        found, reason = None, f"{type(err).__name__}: {err}"
    else:
        reason = "no such module on sys.path"
    if found is None or not found.origin or not found.origin.endswith(".py"):
        raise UserModelError(
            f"model module {where!r}: expected {FORMS}; received a module name that "
            f"cannot be found as a Python source file ({reason}). Give the file's path "
            "instead, or install the package."
        )
    return os.path.abspath(found.origin)


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_hooks(path: str, function: str) -> Dict[str, Any]:
    """The hook values in ``path`` (as ModelSpec field names), after checking that it
    parses and defines ``function`` at module level. Nothing is executed."""
    with open(path, "rb") as handle:
        source = handle.read()
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as err:
        raise UserModelError(
            f"model file {path}: expected valid Python; line {err.lineno}: {err.msg}. Fix "
            "the file (python -m py_compile FILE shows the same)."
        ) from None
    functions = set()
    hooks: Dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    functions.discard(target.id)
                    if target.id in HOOKS:
                        hooks[HOOKS[target.id]] = _literal(path, target.id, node.value)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                functions.add((alias.asname or alias.name).split(".")[0])
    if function not in functions:
        defined = sorted(n for n in functions if not n.startswith("_"))
        raise UserModelError(
            f"model file {path}: expected a function {function}(input_shape, num_classes) "
            f"that returns a Keras model; the file defines no {function!r} "
            f"(its functions: {', '.join(defined) or 'none'}). Name the function after "
            "the ':' (file.py:NAME), or add it."
        )
    if "input_shape" in hooks:
        shape = hooks["input_shape"]
        if not isinstance(shape, (list, tuple)) or not all(
            isinstance(d, int) and d > 0 for d in shape
        ):
            raise UserModelError(
                f"model file {path}: INPUT_SHAPE must be a tuple of positive integers "
                f"(channels last), e.g. (28, 28, 1); received {shape!r}."
            )
        hooks["input_shape"] = tuple(shape)
    return hooks


def _literal(path: str, name: str, node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise UserModelError(
            f"model file {path}: {name} must be a plain literal (kbench reads it without "
            f"running the file); received the expression {ast.unparse(node)!r}. Write the "
            "value itself, e.g. INPUT_SHAPE = (28, 28, 1)."
        ) from None


def load_module(path: str) -> Any:
    """Import ``path`` once (in the worker), with its folder first on ``sys.path`` so
    that sibling modules import as from a script."""
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = "kbench_user_model_" + hashlib.sha1(path.encode()).hexdigest()[:10]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UserModelError(f"model file {path}: Python cannot load it as a module.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as err:
        del sys.modules[name]
        frames = traceback.format_exception(type(err), err, err.__traceback__)
        last = "".join(frames[-4:]).rstrip()
        raise UserModelImportError(
            f"model file {path} raised {type(err).__name__} while being imported: {err}. "
            f"Fix the file; its last frames:\n{last}"
        ) from err
    return module


def load_builder(path: str, function: str) -> Callable[..., Any]:
    """Import ``path`` (in the worker) and return its ``function``."""
    builder = getattr(load_module(path), function, None)
    if not callable(builder):
        raise UserModelError(
            f"model file {path}: expected a function {function}(input_shape, num_classes); "
            f"after import, {function!r} is {type(builder).__name__}."
        )
    return builder


KERAS3_BACKENDS = ("tensorflow", "jax", "torch", "numpy")
TORCH_SUFFIX = "_torch"  # the twin of build is build_torch, of build_small build_small_torch


def load_torch_twin(path: str, function: str) -> Optional[Callable[..., Any]]:
    """The file's optional PyTorch twin of ``function``, ``<function>_torch(input_shape,
    num_classes)`` (``build_torch`` for ``build``), in a torch-native worker; None where
    the file defines none (a saved model never does). ``input_shape`` comes channels
    first for images. The module returned follows the zoo twins' contract: a
    ``kbench_models.pytorch.KerasTwin`` whose ``keras_layers()`` list the Keras model's
    weighted layers in ``model.layers`` order, so that Keras weights load into it."""
    if is_saved_model(path):
        return None
    # The file imports keras at its top, and the torch-native worker's KERAS_BACKEND
    # names no Keras backend: import it as Keras' torch backend for this import only
    # (the twin never touches Keras; this process already holds torch).
    previous = os.environ.get("KERAS_BACKEND")
    if previous not in KERAS3_BACKENDS:
        os.environ["KERAS_BACKEND"] = "torch"
    try:
        module = load_module(path)
    finally:
        if previous is None:
            os.environ.pop("KERAS_BACKEND", None)
        else:
            os.environ["KERAS_BACKEND"] = previous
    twin = getattr(module, function + TORCH_SUFFIX, None)
    return twin if callable(twin) else None


def check_keras_model(model: Any, path: str, function: str) -> Any:
    """``model`` if it is a Keras model of the Keras this process imported."""
    import keras

    model_class = getattr(keras, "Model", None) or keras.models.Model
    if not isinstance(model, model_class):
        raise NotAKerasModel(
            f"{os.path.basename(path)}:{function} must return a Keras model "
            f"(keras.Model, e.g. keras.Model(inputs, outputs) or keras.Sequential); it "
            f"returned {type(model).__module__}.{type(model).__qualname__}. Return the model "
            "itself, built with the `keras` package."
        )
    return model


def describe(path: str, function: str, sha256: Optional[str] = None) -> Dict[str, str]:
    """What a result records about the model's source: a file's path and sha256, and
    the function (a Python file) or the format (a saved model)."""
    if is_saved_model(path):
        return {"path": path, "format": SAVED_FORMAT, "sha256": sha256 or sha256_of(path)}
    return {"path": path, "function": function, "sha256": sha256 or sha256_of(path)}
