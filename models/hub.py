"""KerasHub models by name: ``hub:ClassName`` built from its configuration, random weights;
``hub:ClassName/PRESET`` from a preset already in the user's KerasHub cache (or a folder).

Three kinds of keras_hub class train here, told apart by the name keras_hub gives them:
a text classifier (``BertTextClassifier``: its backbone built from ``--model-args``, then
the task with ``num_classes`` and ``preprocessor=None``; logits out), a causal language
model (``GPT2CausalLM``: trained on next-token targets, as ``decoder_lm``) and a backbone
alone (``BertBackbone``: kbench adds a ``Dense(num_classes)`` head on its pooled output,
else on the mean of its sequence output). Every one is wrapped in a ``keras.Model`` that
takes token ids only, ``(batch, steps)`` int32, and makes what else the backbone asks for
from them: ``padding_mask`` is ``token_ids != 0`` (id 0 pads, as BERT's vocabulary has
it), ``segment_ids`` zeros. The wrapper adds no weights: its parameter count is keras_hub's.

The parent never imports keras_hub (it imports Keras, which fixes the backend): it reads
keras_hub's source, as :mod:`kbench_models.user` reads a model file, to check the class
name (``keras_hub/models/__init__.py``), the keyword arguments against the backbone's and
task's ``__init__``, and to find a preset's handle (``src/models/*/*_presets.py``). A
preset is taken from the KerasHub cache (kagglehub's, ``$KAGGLEHUB_CACHE`` or
``~/.cache/kagglehub``) and passed to keras_hub as a local folder, so no run ever waits on
a download; a preset the cache lacks is refused at once, saying whether this machine can
reach kaggle.com (a 3-second probe) and how to fetch it. Where the parent's Python has no
keras_hub the checks are left to the worker. Nothing here imports kbench.
"""

from __future__ import annotations

import ast
import difflib
import functools
import hashlib
import importlib.util
import json
import os
import socket
import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from kbench_models.user import UserModelError

PREFIX = "hub:"
FORM = (
    "hub:ClassName with --model-args key=value,... (e.g. hub:BertTextClassifier "
    "--model-args num_layers=2,hidden_dim=64,num_heads=2,intermediate_dim=128,"
    "vocabulary_size=1000), or hub:ClassName/PRESET for a preset in the KerasHub cache "
    "(or a preset's folder)"
)
# what the end of a keras_hub class name says it is
KINDS = (("TextClassifier", "classifier"), ("CausalLM", "causal_lm"), ("Backbone", "backbone"))
# a preset's files that a model without a preprocessor needs
PRESET_FILES = ("config.json", "model.weights.h5")
# what a classifier's and a causal LM's __init__ take from kbench, not from --model-args
SET_BY_KBENCH = ("self", "backbone", "num_classes", "preprocessor", "kwargs")
NETWORK_HOST = "www.kaggle.com"
NETWORK_TIMEOUT_S = 3.0
DEFAULT_STEPS = 128  # the input length where neither the args nor the backbone say one


class HubModelError(UserModelError):
    """A ``hub:`` model or ``--model-args`` kbench cannot use; the message says the fix."""


class PresetUnavailable(HubModelError):
    """A preset that is neither in the KerasHub cache nor a folder."""


@dataclass(frozen=True)
class HubModel:
    """One ``hub:`` model as a run builds it."""

    name: str  # the keras_hub class: "BertTextClassifier"
    kind: str  # "classifier", "causal_lm" or "backbone"
    args: str  # the --model-args, canonical ("hidden_dim=64,num_layers=2"), preset= left out
    preset: Optional[str] = None  # as given: a preset name or a folder
    preset_dir: Optional[str] = None  # where its files are
    handle: Optional[str] = None  # its kaggle handle, where keras_hub names one

    @property
    def reference(self) -> str:
        return PREFIX + self.name + (f"/{self.preset}" if self.preset else "")


def is_hub(model: Any) -> bool:
    return isinstance(model, str) and model.startswith(PREFIX)


# --model-args -------------------------------------------------------------------------


def _value(text: str) -> Any:
    """``2`` -> 2, ``0.1`` -> 0.1, ``true``/``false`` -> bool, anything else the text."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_args(text: Any) -> Dict[str, Any]:
    """``k=v,k=v`` (or a sweep file's mapping) as a dict of ints, floats, bools and text."""
    if isinstance(text, dict):
        pairs = [(str(k), v) for k, v in text.items()]
    elif isinstance(text, str):
        pairs = []
        for piece in (p.strip() for p in text.split(",")):
            if not piece:
                continue
            key, sep, value = piece.partition("=")
            if not sep or not key.strip() or not value.strip():
                raise HubModelError(
                    f"--model-args: expected key=value pairs separated by commas, e.g. "
                    f"num_layers=2,hidden_dim=64; received {piece!r} in {text!r}."
                )
            pairs.append((key.strip(), _value(value.strip())))
    else:
        raise HubModelError(
            f"--model-args: expected key=value,... (a mapping in a sweep file); received "
            f"{type(text).__name__} {text!r}."
        )
    args: Dict[str, Any] = {}
    for key, value in pairs:
        if not key.isidentifier():
            raise HubModelError(
                f"--model-args: {key!r} is not a keyword argument name (a Python identifier, "
                "e.g. num_layers)."
            )
        if key in args:
            raise HubModelError(
                f"--model-args: {key} is given twice ({args[key]!r} and {value!r}); give it once."
            )
        if isinstance(value, str) and ("," in value or "=" in value):
            raise HubModelError(
                f"--model-args: {key}={value!r}: a value cannot hold ',' or '=' (they "
                "separate the pairs)."
            )
        if not isinstance(value, (bool, int, float, str)):
            raise HubModelError(
                f"--model-args: {key} must be a number, true/false or text; received "
                f"{type(value).__name__} {value!r}."
            )
        args[key] = value
    return args


def _text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def canonical_args(args: Any) -> Optional[str]:
    """The --model-args as one sorted ``k=v,...`` text (None for none): what a config keeps."""
    if args is None:
        return None
    parsed = parse_args(args)
    preset = parsed.get("preset")
    if isinstance(preset, str) and is_folder(preset):  # absolute: the worker runs elsewhere
        parsed["preset"] = os.path.abspath(os.path.expanduser(preset))
    return ",".join(f"{k}={_text(v)}" for k, v in sorted(parsed.items())) or None


# what keras_hub's source says, read without importing it -------------------------------


@functools.cache
def source_root() -> Optional[str]:
    """keras_hub's package folder where this Python can import it (found, not imported)."""
    try:
        found = importlib.util.find_spec("keras_hub")
    except (ImportError, ValueError):
        return None
    return os.path.dirname(found.origin) if found and found.origin else None


def _parse(path: str) -> ast.Module:
    with open(path, "rb") as handle:
        return ast.parse(handle.read(), filename=path)


@functools.cache
def exported(root: str) -> Dict[str, str]:
    """keras_hub.models' names -> the module each comes from."""
    tree = _parse(os.path.join(root, "models", "__init__.py"))
    return {
        alias.asname or alias.name: node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }


def _module_file(root: str, module: str) -> str:
    return os.path.join(os.path.dirname(root), *module.split(".")) + ".py"


@functools.cache
def _class_def(root: str, name: str) -> Optional[ast.ClassDef]:
    module = exported(root).get(name)
    path = _module_file(root, module) if module else ""
    if not os.path.isfile(path):
        return None
    return next(
        (n for n in _parse(path).body if isinstance(n, ast.ClassDef) and n.name == name), None
    )


def init_params(root: str, name: str) -> Optional[Tuple[Tuple[str, ...], Dict[str, Any]]]:
    """A class's ``__init__`` keyword arguments: (required, {optional: default}); None
    where the source does not say."""
    node = _class_def(root, name)
    init = next(
        (n for n in (node.body if node else []) if isinstance(n, ast.FunctionDef)
         and n.name == "__init__"), None,
    )  # fmt: skip
    if init is None:
        return None
    positional = init.args.posonlyargs + init.args.args
    defaults = [None] * (len(positional) - len(init.args.defaults)) + list(init.args.defaults)
    required: List[str] = []
    optional: Dict[str, Any] = {}
    pairs = list(zip(positional, defaults)) + list(zip(init.args.kwonlyargs, init.args.kw_defaults))
    for arg, default in pairs:
        if default is None:
            required.append(arg.arg)
            continue
        try:
            optional[arg.arg] = ast.literal_eval(default)
        except ValueError:
            optional[arg.arg] = None
    return tuple(required), optional


def backbone_of(root: str, name: str) -> Optional[str]:
    """A task's ``backbone_cls`` as its class body sets it."""
    node = _class_def(root, name)
    for item in node.body if node else []:
        if isinstance(item, ast.Assign) and isinstance(item.value, ast.Name):
            if any(isinstance(t, ast.Name) and t.id == "backbone_cls" for t in item.targets):
                return item.value.id
    return None


@functools.cache
def preset_handles(root: str) -> Dict[str, str]:
    """Every preset keras_hub's source names (literal tables only) -> its handle."""
    handles: Dict[str, str] = {}
    models = os.path.join(root, "src", "models")
    for family in sorted(os.listdir(models)) if os.path.isdir(models) else []:
        folder = os.path.join(models, family)
        for file in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            if not file.endswith("_presets.py"):
                continue
            for node in _parse(os.path.join(folder, file)).body:
                try:
                    table = ast.literal_eval(node.value) if isinstance(node, ast.Assign) else None
                except ValueError:
                    continue
                for preset, about in table.items() if isinstance(table, dict) else ():
                    if isinstance(about, dict) and isinstance(about.get("kaggle_handle"), str):
                        handles[preset] = about["kaggle_handle"]
    return handles


def version() -> Optional[str]:
    """keras-hub's installed version (read from its metadata, not imported)."""
    from importlib import metadata

    try:
        return metadata.version("keras-hub")
    except metadata.PackageNotFoundError:
        return None


# the model a reference names ------------------------------------------------------------


def kind_of(name: str) -> str:
    for suffix, kind in KINDS:
        if name.endswith(suffix):
            return kind
    raise HubModelError(
        f"hub:{name}: kbench trains keras_hub's text classifiers (*TextClassifier), causal "
        f"language models (*CausalLM) and backbones (*Backbone, under a Dense head); {name} "
        "is none of them by its name. Try hub:BertTextClassifier or hub:GPT2CausalLM."
    )


def split(model: str) -> Tuple[str, Optional[str]]:
    """``hub:Name/preset`` -> (``Name``, ``preset``); the class name checked."""
    name, _, preset = model[len(PREFIX) :].partition("/")
    if not name.isidentifier():
        raise HubModelError(f"model {model!r}: expected {FORM}; {name!r} is no class name.")
    root = source_root()
    if root is not None and name not in exported(root):
        hint = difflib.get_close_matches(name, list(exported(root)), n=1)
        raise HubModelError(
            f"model {model!r}: keras_hub {version() or ''} has no model {name!r}"
            f"{f'; did you mean {hint[0]!r}?' if hint else '.'} Names are keras_hub.models' "
            "classes, e.g. BertTextClassifier, GPT2CausalLM, BertBackbone."
        )
    kind_of(name)
    return name, preset or None


def is_folder(preset: str) -> bool:
    """Whether a preset names a folder (a path) rather than one of keras_hub's presets."""
    return os.sep in preset or "/" in preset or os.path.isdir(os.path.expanduser(preset))


def check_reference(model: str) -> str:
    """``model`` (``hub:Name[/preset]``) with its form and class checked; a preset folder
    made absolute (the worker runs elsewhere)."""
    name, preset = split(model)
    if preset is not None and is_folder(preset):
        return f"{PREFIX}{name}/{os.path.abspath(os.path.expanduser(preset))}"
    return model


def _allowed(root: str, name: str, kind: str) -> Optional[Dict[str, Tuple[str, ...]]]:
    """The backbone's and the task's keyword arguments: {"backbone": .., "task": ..,
    "required": ..}; None where keras_hub's source does not say."""
    backbone = name if kind == "backbone" else backbone_of(root, name)
    backbone_params = init_params(root, backbone) if backbone else None
    task_params = init_params(root, name) if kind != "backbone" else ((), {})
    if backbone_params is None or task_params is None:
        return None
    required, optional = backbone_params
    task_names = [n for n in (*task_params[0], *task_params[1]) if n not in SET_BY_KBENCH]
    return {
        "backbone": tuple(n for n in (*required, *optional) if n not in ("self", "kwargs")),
        "task": tuple(task_names),
        "required": tuple(n for n in required if n != "self"),
        "defaults": optional,
        "backbone_name": backbone,
    }


def _check_args(name: str, kind: str, args: Dict[str, Any], preset: Optional[str]) -> Dict:
    """Refuse keyword arguments the classes do not take, or missing ones; the backbone's
    defaults (for the input length) where the source says them."""
    root = source_root()
    allowed = _allowed(root, name, kind) if root else None
    if allowed is None:
        return {}
    # a keyword both take (dropout) goes to the backbone
    both = tuple(dict.fromkeys(allowed["backbone"] + allowed["task"]))
    takes = allowed["task"] if preset else both
    for key in args:
        if key not in takes:
            hint = difflib.get_close_matches(key, takes, n=1)
            fixed = " (a preset fixes the backbone's configuration)" if preset else ""
            raise HubModelError(
                f"--model-args: {name} takes no {key!r}{fixed}"
                f"{f'; did you mean {hint[0]!r}?' if hint else '.'} It takes: "
                f"{', '.join(takes) or 'none'}."
            )
    missing = [k for k in allowed["required"] if k not in args]
    if missing and not preset:
        raise HubModelError(
            f"--model-args: {allowed['backbone_name']} (the backbone of hub:{name}) needs "
            f"{', '.join(missing)}; received {', '.join(args) or 'none'}. Give them, e.g. "
            "--model-args num_layers=2,hidden_dim=64,num_heads=2,intermediate_dim=128,"
            "vocabulary_size=1000, or load a preset: hub:NAME/PRESET."
        )
    return allowed


@functools.lru_cache(maxsize=256)
def resolve(model: str, args_text: Optional[str]) -> Tuple[HubModel, Dict[str, Any]]:
    """The model a ``hub:`` reference and its --model-args name, and its input's facts
    (``vocabulary_size``, ``steps``); refuses what cannot be built."""
    name, preset = split(model)
    kind = kind_of(name)
    args = parse_args(args_text or "")
    given = args.pop("preset", None)
    if given is not None and preset is not None and str(given) != preset:
        raise HubModelError(
            f"model {model!r} names preset {preset!r} and --model-args preset={given}; give one."
        )
    preset = preset or (None if given is None else str(given))
    allowed = _check_args(name, kind, args, preset)
    config: Dict[str, Any] = dict(args)
    preset_dir = handle = None
    if preset is not None:
        preset_dir, handle = find_preset(name, preset)
        saved, config = preset_config(preset_dir)
        wanted = allowed.get("backbone_name") if allowed else None
        if wanted and saved and saved != wanted:
            raise PresetUnavailable(
                f"hub:{name}/{preset}: the preset holds a {saved}; {name} is built on a "
                f"{wanted}. Choose a preset of its family (keras_hub.models.{name}.presets)."
            )
        config = {**config, **args}
    defaults = allowed.get("defaults", {}) if allowed else {}
    vocabulary = config.get("vocabulary_size")
    if isinstance(vocabulary, bool) or not isinstance(vocabulary, int) or vocabulary < 2:
        raise HubModelError(
            f"hub:{name}: expected vocabulary_size, a whole number from 2, in --model-args "
            f"(the token ids' range, for the data); received {vocabulary!r}."
        )
    steps = config.get("max_sequence_length", defaults.get("max_sequence_length"))
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        steps = DEFAULT_STEPS
    hub = HubModel(name, kind, canonical_args(args) or "", preset, preset_dir, handle)
    return hub, {"vocabulary_size": vocabulary, "steps": steps}


def spec_fields(model: str, args_text: Optional[str]) -> Dict[str, Any]:
    """What :class:`kbench_models.ModelSpec` holds of a ``hub:`` model."""
    hub, facts = resolve(model, args_text)
    vocabulary = facts["vocabulary_size"]
    causal = hub.kind == "causal_lm"
    what = {"classifier": "text classifier", "causal_lm": "causal LM", "backbone": "backbone"}
    return dict(
        name=model,
        module="",
        description=f"keras_hub {hub.name} ({what[hub.kind]}"
        + (f", preset {hub.preset})" if hub.preset else ", from its configuration)"),
        input_shape=(facts["steps"],),
        num_classes=vocabulary if causal else 2,
        input_kind="tokens",
        vocabulary_size=vocabulary,
        target="next_token" if causal else "label",
        from_logits=True,
        hub=hub,
    )


# presets ----------------------------------------------------------------------------------


def cache_dir() -> str:
    """kagglehub's cache, where keras_hub's presets land: $KAGGLEHUB_CACHE or ~/.cache/kagglehub."""
    return os.environ.get("KAGGLEHUB_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "kagglehub"
    )


def cached_path(handle: str) -> str:
    """Where kagglehub keeps ``kaggle://owner/model/framework/variation[/version]``; no
    version: the newest version the cache holds."""
    parts = handle.removeprefix("kaggle://").split("/")
    base = os.path.join(cache_dir(), "models", *parts[:4])
    if len(parts) >= 5:
        return os.path.join(base, parts[4])
    versions = [v for v in (os.listdir(base) if os.path.isdir(base) else []) if v.isdigit()]
    return os.path.join(base, max(versions, key=int) if versions else "<version>")


def unreachable(host: str = NETWORK_HOST, timeout_s: float = NETWORK_TIMEOUT_S) -> Optional[str]:
    """Why ``host``:443 cannot be reached within ``timeout_s`` (name look-up included, which
    has no timeout of its own: it runs in a thread), or None when it answers."""
    outcome: List[Optional[str]] = []

    def connect() -> None:
        try:
            socket.create_connection((host, 443), timeout=timeout_s).close()
            outcome.append(None)
        except OSError as err:
            outcome.append(f"{type(err).__name__}: {err}")

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(timeout_s + 0.5)
    if not outcome:
        return f"no answer from {host}:443 within {timeout_s:g} s"
    return outcome[0]


def find_preset(name: str, preset: str) -> Tuple[str, Optional[str]]:
    """(the preset's folder, its kaggle handle): a folder given, or the cache's copy."""
    folder = os.path.abspath(os.path.expanduser(preset))
    if is_folder(preset):
        if not os.path.isfile(os.path.join(folder, "config.json")):
            raise PresetUnavailable(
                f"hub:{name}/{preset}: expected a preset folder holding config.json (as "
                f"keras_hub's save_to_preset writes it); {folder} "
                f"{'has none' if os.path.isdir(folder) else 'does not exist'}."
            )
        return folder, None
    root = source_root()
    if root is None:
        raise PresetUnavailable(
            f"hub:{name}/{preset}: kbench finds presets with keras_hub's own table, and this "
            "Python has no keras_hub; install keras-hub here, or give the preset's folder."
        )
    handles = preset_handles(root)
    if preset not in handles:
        hint = difflib.get_close_matches(preset, list(handles), n=1)
        raise PresetUnavailable(
            f"hub:{name}/{preset}: keras_hub {version() or ''} names no preset {preset!r}"
            f"{f'; did you mean {hint[0]!r}?' if hint else '.'} Give a preset name (see "
            f"keras_hub.models.{name}.presets) or a preset's folder."
        )
    handle = handles[preset]
    if not handle.startswith("kaggle://"):
        raise PresetUnavailable(
            f"hub:{name}/{preset}: its handle {handle} is not on Kaggle, and kbench reads "
            "presets from kagglehub's cache only; download it and give its folder."
        )
    path = cached_path(handle)
    lacking = [f for f in PRESET_FILES if not os.path.isfile(os.path.join(path, f))]
    if not lacking:
        return path, handle
    why = unreachable()
    fetch = f"python -c \"import keras_hub; keras_hub.models.{name}.from_preset('{preset}')\""
    network = (
        f"and this machine cannot download it ({NETWORK_HOST}: {why}). On a machine with "
        f"network run {fetch}, then copy its cache folder to {path}, or give the folder: "
        f"hub:{name}/PATH"
        if why
        else f"and kbench never downloads inside a run (a download is not the model's speed). "
        f"Fetch it once with {fetch} (it fills the cache), then run again"
    )
    raise PresetUnavailable(
        f"hub:{name}/{preset}: preset {handle} is not in the KerasHub cache ({path} lacks "
        f"{', '.join(lacking)}; the cache is $KAGGLEHUB_CACHE or ~/.cache/kagglehub) {network}."
    )


def preset_config(folder: str) -> Tuple[Optional[str], Dict[str, Any]]:
    """The backbone class and configuration a preset's config.json holds."""
    path = os.path.join(folder, "config.json")
    try:
        with open(path, encoding="utf-8") as handle:
            saved = json.load(handle)
    except (OSError, ValueError) as err:
        raise PresetUnavailable(f"preset {folder}: cannot read config.json: {err}") from None
    config = saved.get("config") if isinstance(saved, dict) else None
    if not isinstance(config, dict):
        raise PresetUnavailable(f"preset {folder}: config.json holds no backbone 'config'.")
    return saved.get("class_name"), config


def describe(hub: HubModel) -> Dict[str, Any]:
    """What a result records of the model's source: class, arguments, preset, keras-hub's
    version, and a sha256 of them (with the preset's config.json) that tells models apart."""
    facts: Dict[str, Any] = {
        "hub": hub.name, "kind": hub.kind, "args": hub.args, "keras_hub": version(),
    }  # fmt: skip
    digest = hashlib.sha256(json.dumps(facts, sort_keys=True).encode())
    if hub.preset_dir:
        facts.update(preset=hub.preset, preset_dir=hub.preset_dir, handle=hub.handle)
        with open(os.path.join(hub.preset_dir, "config.json"), "rb") as handle:
            digest.update(handle.read())
    return facts | {"sha256": digest.hexdigest()}


# in the worker ------------------------------------------------------------------------------


def _keywords(cls: Any) -> Tuple[str, ...]:
    import inspect

    return tuple(inspect.signature(cls.__init__).parameters)


def build_core(hub: HubModel, num_classes: int) -> Any:
    """The keras_hub model itself (task or backbone), as keras_hub builds it."""
    import keras_hub

    cls = getattr(keras_hub.models, hub.name)
    args = parse_args(hub.args)
    task_args = dict(num_classes=num_classes) if hub.kind == "classifier" else {}
    if hub.preset_dir:  # a local folder: keras_hub reads it, never the network
        if hub.kind == "backbone":
            return cls.from_preset(hub.preset_dir)
        return cls.from_preset(hub.preset_dir, preprocessor=None, **task_args, **args)
    backbone_cls = cls if hub.kind == "backbone" else cls.backbone_cls
    takes = _keywords(backbone_cls)
    backbone = backbone_cls(**{k: v for k, v in args.items() if k in takes})
    if hub.kind == "backbone":
        return backbone
    rest = {k: v for k, v in args.items() if k not in takes}
    return cls(backbone=backbone, preprocessor=None, **task_args, **rest)


def build(hub: HubModel, input_shape: Tuple[int, ...], num_classes: int) -> Any:
    """A ``keras.Model`` over token ids ``(batch, steps)`` around the keras_hub model."""
    import keras

    core = build_core(hub, num_classes)
    backbone = core if hub.kind == "backbone" else core.backbone
    token_ids = keras.Input(tuple(input_shape), dtype="int32", name="token_ids")
    inputs = {}
    for key in backbone.input if isinstance(backbone.input, dict) else ():
        if key == "token_ids":
            inputs[key] = token_ids
        elif key == "padding_mask":
            inputs[key] = keras.ops.cast(keras.ops.not_equal(token_ids, 0), "int32")
        elif key == "segment_ids":
            inputs[key] = keras.ops.zeros_like(token_ids)
        else:
            raise HubModelError(
                f"hub:{hub.name}: its backbone takes {key!r}, which kbench cannot make from "
                "token ids (it makes token_ids, padding_mask and segment_ids)."
            )
    if not inputs:
        raise HubModelError(f"hub:{hub.name}: its backbone takes no dict of token_ids.")
    outputs = core(inputs)
    if hub.kind == "backbone":
        if isinstance(outputs, dict):
            pooled = outputs.get("pooled_output")
            outputs = pooled if pooled is not None else outputs["sequence_output"]
        if len(outputs.shape) == 3:
            outputs = keras.layers.GlobalAveragePooling1D()(outputs)
        outputs = keras.layers.Dense(num_classes, name="kbench_head")(outputs)
    return keras.Model(token_ids, outputs, name=f"hub_{hub.name}")
