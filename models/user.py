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
says whether the function exists and what the hooks hold (values no run could use
are refused there: :func:`check_hooks`), and its bytes give the sha256 every result
records. What only the built model can tell, that its output gives one score per
class of the data, the worker checks the same way on every backend
(:func:`check_output`). Only the worker imports it, by path
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
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

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
    """The hook values in ``path`` (as ModelSpec field names), checked
    (:func:`check_hooks`), after checking that it parses and that module-level code
    defines ``function`` (:func:`defined_names`). Nothing is executed."""
    with open(path, "rb") as handle:
        source = handle.read()
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as err:
        raise UserModelError(
            f"model file {path}: expected valid Python; line {err.lineno}: {err.msg}. Fix "
            "the file (python -m py_compile FILE shows the same)."
        ) from None
    functions = defined_names(tree.body)
    hooks: Dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in HOOKS:
                    hooks[HOOKS[target.id]] = _literal(path, target.id, node.value)
    if function not in functions:
        defined = sorted(n for n in functions if not n.startswith("_"))
        raise UserModelError(
            f"model file {path}: expected a function {function}(input_shape, num_classes) "
            f"that returns a Keras model; the file defines no {function!r} "
            f"(its functions: {', '.join(defined) or 'none'}). Name the function after "
            "the ':' (file.py:NAME), or add it."
        )
    check_hooks(path, hooks)
    return hooks


# the statements whose bodies run at import when the module's own code does
COMPOUND = (ast.If, ast.Try, ast.With, ast.For, ast.While) + (
    (ast.TryStar,) if hasattr(ast, "TryStar") else ()
)
# values that are never callable: ``build = None`` takes a name away
LITERALS = (ast.Constant, ast.JoinedStr, ast.List, ast.Tuple, ast.Dict, ast.Set,
            ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)  # fmt: skip


def defined_names(body: List[ast.stmt]) -> Set[str]:
    """The names that module-level code may bind to something callable: functions and
    classes, imports, assignments of expressions (``build = functools.partial(...)``),
    also inside ``if``/``try``/``with``/loops (``def build`` under ``if``); an assignment of
    a literal (``build = None``) at the top level takes the name away again."""
    names: Set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            if isinstance(node.value, LITERALS):
                names -= bound
            else:
                names |= bound
        elif isinstance(node, COMPOUND):
            for part in ("body", "orelse", "finalbody"):
                names |= defined_names(getattr(node, part, None) or [])
            for handler in getattr(node, "handlers", None) or []:
                names |= defined_names(handler.body)
    return names


KINDS = ("image", "sequence", "tokens")
RANKS = {"image": (2, 3), "sequence": (2,), "tokens": (1,)}  # axes, without the batch axis
SHAPE_EXAMPLES = {"image": "(28, 28, 1)", "sequence": "(250, 50)", "tokens": "(250,)"}
LOSSES = ("sparse_categorical_crossentropy", "binary_crossentropy")
MAX_INPUT_VALUES = 2**26  # one sample: 67,108,864 values, 256 MiB as float32
MAX_COUNT = 2**31 - 1  # classes, vocabulary


def check_hooks(path: str, hooks: Dict[str, Any]) -> None:
    """Refuse hook values no run could use, saying what each hook takes; make
    INPUT_SHAPE a tuple."""
    where = f"model file {path}"
    kind = hooks.get("input_kind", "image")
    if kind not in KINDS:
        raise UserModelError(
            f"{where}: INPUT_KIND must be one of {', '.join(map(repr, KINDS))}; received {kind!r}."
        )
    if "num_classes" in hooks:
        _count(where, "NUM_CLASSES", hooks["num_classes"], "e.g. NUM_CLASSES = 10", ONE_CLASS)
    if "vocabulary_size" in hooks:
        _count(
            where,
            "VOCABULARY_SIZE",
            hooks["vocabulary_size"],
            "the Embedding's input_dim",
            "Token ids run from 0 to VOCABULARY_SIZE - 1: give the Embedding's input_dim.",
        )
    if "loss" in hooks and hooks["loss"] not in LOSSES:
        raise UserModelError(
            f"{where}: LOSS must be one of {', '.join(map(repr, LOSSES))} (kbench trains "
            f"classifiers and reports their accuracy); received {hooks['loss']!r}."
        )
    if "input_shape" in hooks:
        hooks["input_shape"] = _shape(where, hooks["input_shape"], kind)


ONE_CLASS = (
    "kbench trains classifiers, and with one class every prediction is right (accuracy "
    "1.000 would mean nothing). A yes/no model with one sigmoid output: NUM_CLASSES = 2 "
    "and LOSS = 'binary_crossentropy'. kbench does not train regression models."
)


def _count(where: str, name: str, value: Any, example: str, too_few: str) -> None:
    """A count hook: a whole number from 2 to :data:`MAX_COUNT`."""
    if isinstance(value, bool) or not isinstance(value, int) or value > MAX_COUNT:
        raise UserModelError(
            f"{where}: {name} must be a whole number from 2 to {MAX_COUNT:,} ({example}); "
            f"received {type(value).__name__} {value!r}."
        )
    if value < 2:
        raise UserModelError(f"{where}: {name} must be 2 or more; received {value}. {too_few}")


def _shape(where: str, shape: Any, kind: str) -> Tuple[int, ...]:
    """INPUT_SHAPE checked: positive integers (no booleans), as many as ``kind`` has
    axes, and a sample small enough to make."""
    example = SHAPE_EXAMPLES[kind]
    if (
        not isinstance(shape, (list, tuple))
        or not shape
        or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape)
    ):
        raise UserModelError(
            f"{where}: INPUT_SHAPE must be a tuple of positive integers (channels last), "
            f"e.g. {example}; received {shape!r}."
        )
    if len(shape) not in RANKS[kind]:
        raise UserModelError(
            f"{where}: INPUT_KIND {kind!r} takes an INPUT_SHAPE of "
            f"{' or '.join(map(str, RANKS[kind]))} axes, e.g. "
            f"{example}; received {tuple(shape)!r}. Fix INPUT_SHAPE or INPUT_KIND."
        )
    values = 1
    for d in shape:
        values *= d
    if values > MAX_INPUT_VALUES:
        raise UserModelError(
            f"{where}: INPUT_SHAPE {tuple(shape)!r} makes samples of {values:,} values "
            f"({values * 4 / 2**30:,.1f} GiB each as float32); kbench makes samples of at most "
            f"{MAX_INPUT_VALUES:,} values. Give a smaller INPUT_SHAPE."
        )
    return tuple(shape)


def _literal(path: str, name: str, node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
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
    """Import ``path`` (in the worker) and return its ``function``, wrapped so that the
    model it builds is checked (:func:`check_keras_model`, :func:`check_output`)."""
    builder = getattr(load_module(path), function, None)
    if not callable(builder):
        raise UserModelError(
            f"model file {path}: expected a function {function}(input_shape, num_classes); "
            f"after import, {function!r} is {type(builder).__name__}."
        )
    loss = read_hooks(path, function).get("loss", LOSSES[0])

    def build(input_shape: Tuple[int, ...], num_classes: int) -> Any:
        model = builder(input_shape=input_shape, num_classes=num_classes)
        check_keras_model(model, path, function)
        binary = loss == "binary_crossentropy" and num_classes == 2
        check_output(model, f"{os.path.basename(path)}:{function}", num_classes, binary)
        return model

    return build


class WrongOutput(UserModelError):
    """The model's output does not give one score per class of the data (raised in the
    worker, the same on every backend)."""


def output_shapes(model: Any) -> List[Tuple[Any, ...]]:
    """The shapes (batch axis first) of a Keras 3 or Keras 2.2 model's outputs."""
    try:
        shapes = model.output_shape  # Keras 2.2: a tuple, or a list of them
    except AttributeError:  # Keras 3
        return [tuple(t.shape) for t in model.outputs]
    return list(shapes) if isinstance(shapes, list) else [tuple(shapes)]


def check_output(model: Any, name: str, num_classes: int, binary: bool) -> None:
    """Refuse a model whose one output is not ``(batch, num_classes)`` (or ``(batch, 1)``
    where ``binary``: one sigmoid output for two classes). Labels past the output's width
    fail on tensorflow and torch but train without a word on jax, so the check is ours."""
    shapes = output_shapes(model)
    fix = (
        "End the model with Dense(num_classes, activation='softmax'), using the "
        "num_classes that kbench passes to the function"
    )
    if len(shapes) != 1 or len(shapes[0]) != 2:
        raise WrongOutput(
            f"{name}: expected a model with one output of shape (batch, classes); it returns "
            f"{len(shapes)} output(s) of shape {', '.join(map(str, shapes))}. {fix}."
        )
    width = shapes[0][-1]
    if width == num_classes or (binary and width == 1):
        return
    if width == 1:
        fix = (
            "A yes/no model with one sigmoid output trains on two classes with "
            "LOSS = 'binary_crossentropy' in the model file; else " + fix[0].lower() + fix[1:]
        )
    raise WrongOutput(
        f"{name}: expected an output of {num_classes} units, one per class of the data "
        f"(labels 0 to {num_classes - 1}); the model's output has {width}. {fix}."
    )


def split_references(text: str) -> List[str]:
    """``--model``'s comma-separated list, where a comma inside the path of an existing
    model file does not split it (``runs,2024/net.py:build`` is one model when that file
    exists); each piece is stripped, empty pieces dropped."""
    pieces = text.split(",")
    out: List[str] = []
    start = 0
    while start < len(pieces):
        end = next(
            (
                end
                for end in range(len(pieces), start + 1, -1)
                if _names_a_file(",".join(pieces[start:end]).strip())
            ),
            start + 1,
        )
        item = ",".join(pieces[start:end]).strip()
        if item:
            out.append(item)
        start = end
    return out


def _names_a_file(reference: str) -> bool:
    """Whether ``reference`` (``path``, ``path.py:function``) names an existing file."""
    where = reference
    if not is_saved_model(reference) and ":" in reference:
        where, _, function = reference.rpartition(":")
        if not function.isidentifier():
            return False
    return bool(where) and os.path.isfile(os.path.expanduser(where))


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
