"""What one run is: a frozen, validated description that travels to the worker as JSON.

Every check happens when the config is created, so a bad flag or sweep entry fails
before any process starts, with a message that names the setting, what was expected,
what was received and how to fix it. Each setting says once, in its field's metadata
(:class:`Setting`), its flag (:func:`flag_for`), help, parser, --help section and check:
the CLI builds every command's flags from these fields and copies them back by name.
"""

from __future__ import annotations

import difflib
import functools
import math
import os
import re
from dataclasses import Field, dataclass, field, fields
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Tuple

from kbench.backends import BACKENDS
from kbench.backends.switches import SWITCHES
from kbench.datasets import DATASETS as DATASET_SPECS
from kbench.datasets import TEXT_PREFIX, DataUnavailable, dataset_spec, target_refusal, user_dataset
from kbench.datasets.npz import NPZ_PREFIX, inspect_npz
from kbench.measure.processes import usable_cores
from kbench_models import MODELS, hub, short_name, spec_for
from kbench_models.user import FORMS as USER_MODEL_FORMS
from kbench_models.user import UserModelError, is_reference

DATASETS: Tuple[str, ...] = tuple(DATASET_SPECS)
INPUT_KINDS = {
    "image": "images",
    "sequence": "sequences of feature vectors",
    "tokens": "sequences of word ids",
}
DATA_FORMATS: Tuple[str, ...] = ("channels_last", "channels_first")
OPTIMIZERS: Tuple[str, ...] = ("adam", "sgd")
MODES: Tuple[str, ...] = ("train", "inference", "generate")
# --mode generate: the prompt's length (each test sequence's first tokens), and the
# backends that cannot decode (kbench.run.generate)
PROMPT_TOKENS = 8
NO_DECODER = {
    "mxnet": "decoder_lm does not build on keras-mxnet 2.2.4 (a run there is unsupported, "
    "naming the part Keras 2.2.4 lacks)",
}
PRECISIONS: Tuple[str, ...] = ("float32", "float16", "int8")  # --precision (inference)
DEVICES: Tuple[str, ...] = ("auto", "cpu", "gpu")
# Data-parallel modes, each on its framework's own engine (kbench.distributed), and the
# backends each can run.
DISTRIBUTED: Dict[str, Tuple[str, ...]] = {
    "none": tuple(BACKENDS),
    "torch-ddp": ("torch", "torch-native"),  # DistributedDataParallel, gloo/NCCL, torchrun
    "tf-multiworker": ("tensorflow",),  # MultiWorkerMirroredStrategy, TF_CONFIG
    "tf-mirrored": ("tensorflow",),  # MirroredStrategy over one host's GPUs
    "tf-ps": ("tensorflow",),  # ParameterServerStrategy, asynchronous
    "jax": ("jax",),  # keras.distribution.DataParallel over jax.distributed
    "mxnet-sync": ("mxnet", "mxnet-gluon"),  # KVStore dist_sync
    "mxnet-async": ("mxnet", "mxnet-gluon"),  # KVStore dist_async
}
# Settings a run cannot do without: every other one has a default.
REQUIRED: Tuple[str, ...] = ("backend", "model")
# Threads above the cores of any machine kbench runs on, and far inside the 32-bit
# counts the frameworks' thread settings take (2**31 overflows in the worker). A
# fixed bound, not this machine's cores: a sweep file is checked on one machine and
# may run on a larger one, and oversubscribing cores is a fair experiment.
MAX_THREADS = 4096
# The largest count a framework takes: their C ints are 32-bit.
MAX_INT = 2**31 - 1
# numpy's global seed (which every backend sets) takes 0 .. 2**32 - 1.
MAX_SEED = 2**32 - 1
# Longest timeout and inference duration: 30 days, far past any run, and far inside
# what the clocks that wait on them take (1e20 s overflows them).
MAX_SECONDS = 30 * 24 * 3600.0
# Sampling less often than once a minute sees nothing of most runs.
MAX_SAMPLE_INTERVAL_S = 60.0
# A warm interleaved window's length unless told otherwise (window_s): about a second.
WINDOW_S = 1.0


def file_safe(model: str) -> str:
    """A model name fit for a file name: ``/a/residual.py:build`` -> ``residual.py-build``."""
    return re.sub(r"[^A-Za-z0-9_.]+", "-", short_name(model)).strip("-")


class FileError(ValueError):
    """A sweep or study file kbench cannot use; ``where``: the place (``runs[2].model``)."""

    def __init__(self, file: str, where: str, message: str) -> None:
        super().__init__(f"{file}: {where}: {message}" if where else f"{file}: {message}")
        self.file = file
        self.where = where
        self.message = message


class ConfigError(ValueError):
    """A setting (the field name, shown as its flag) has a value kbench cannot run with."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"{setting}: {message}")
        self.setting = setting
        self.message = message


class TextError(ValueError):
    """A flag's text not of its setting's form (``32by32`` for a shape), as argparse shows it."""


def flag_for(setting: str) -> str:
    """The one rule for every command: ``timeout_s`` is ``--timeout`` (the unit left out)."""
    return "--" + setting.removesuffix("_s").replace("_", "-")


def did_you_mean(word: str, allowed: Iterable[str]) -> str:
    """ " Did you mean 'x'?" for the closest of ``allowed``, or ""."""
    close = difflib.get_close_matches(word, list(allowed), n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def check_choice(setting: str, value: Any, allowed: Iterable[str]) -> Any:
    allowed = tuple(allowed)
    if value in allowed:
        return value
    hint = did_you_mean(value, allowed) if isinstance(value, str) else ""
    raise ConfigError(setting, f"expected one of {', '.join(allowed)}; received {value!r}.{hint}")


# a setting's text, as a flag gives it ---------------------------------------------


def parse_number(text: str) -> float:
    """A float that is a number: Python's ``float`` takes nan and inf."""
    try:
        value = float(text)
    except ValueError:
        raise TextError(f"expected a number; received {text!r}") from None
    if not math.isfinite(value):
        raise TextError(f"expected a finite number; received {text!r}, which is not one")
    return value


def parse_shape(text: str) -> Tuple[int, ...]:
    """``32x32x3`` -> ``(32, 32, 3)``, checked later with the model's input."""
    try:
        return tuple(int(part) for part in text.lower().split("x"))
    except ValueError:
        raise TextError(
            f"expected HEIGHTxWIDTH or HEIGHTxWIDTHxCHANNELS, for example 32x32x3; "
            f"received {text!r}"
        ) from None


def parse_half_width(text: str) -> float:
    value = parse_number(text)
    if not 0 < value < 1:
        raise TextError(
            f"expected a relative half-width above 0 and below 1, for example 0.02 for "
            f"+-2%; received {text!r}"
        )
    return value


def parse_seconds(text: str) -> float:
    value = parse_number(text)
    if value <= 0:
        raise TextError(f"expected more than 0 seconds; received {text!r}")
    return value


# the checks of one setting's value --------------------------------------------------

Check = Callable[[str, Any], Any]  # (setting, value) -> the value, canonical; or ConfigError


def _positive_int(
    setting: str, value: Any, *, allow_zero: bool = False, most: Optional[int] = None
) -> Any:
    """``value``, an integer from 0 or 1 up to ``most`` (default: :data:`MAX_INT`)."""
    lowest = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
        kind = "a non-negative integer" if allow_zero else "a positive integer"
        raise ConfigError(setting, f"expected {kind}; received {value!r}.")
    if value > (MAX_INT if most is None else most):
        raise ConfigError(
            setting,
            f"expected an integer from {lowest} to {MAX_INT if most is None else most}; "
            f"received {value!r}.",
        )
    return value


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _not_number(value: Any) -> bool:
    return isinstance(value, bool) or not isinstance(value, (int, float))


def _not_finite(value: Any) -> bool:
    return _not_number(value) or not math.isfinite(value)


def _positive_number(setting: str, value: Any, unit: str = "", most: Optional[float] = None) -> Any:
    if _not_finite(value) or value <= 0 or (most is not None and value > most):
        what = f"a positive number of {unit}" if unit else "a positive number"
        bound = f" up to {most:,.0f}" if most is not None else ""
        raise ConfigError(setting, f"expected {what}{bound} (finite); received {value!r}.")
    return value


def _count(lowest: int = 1, most: Optional[int] = None) -> Check:
    return functools.partial(_positive_int, allow_zero=lowest == 0, most=most)


_seconds = functools.partial(_positive_number, unit="seconds", most=MAX_SECONDS)


def _one_of(allowed: Iterable[str]) -> Check:
    return functools.partial(check_choice, allowed=tuple(allowed))


def _optional(check: Check) -> Check:
    return lambda setting, value: value if value is None else check(setting, value)


def _true_or_false(setting: str, value: Any) -> Any:
    if not isinstance(value, bool):
        raise ConfigError(setting, f"expected true or false; received {value!r}.")
    return value


def _required(check: Check) -> Check:
    def required(setting: str, value: Any) -> Any:
        if value is None:
            raise ConfigError(setting, f"expected a {setting}; received none.")
        return check(setting, value)

    return required


def _check_model(setting: str, model: Any) -> Any:
    """A zoo name, or a user model as ``/absolute/file.py:function`` (the worker runs elsewhere)."""
    if hub.is_hub(model):
        try:
            return hub.check_reference(model)
        except UserModelError as err:
            raise ConfigError(setting, str(err)) from None
    if not (isinstance(model, str) and is_reference(model)):
        try:
            return check_choice(setting, model, MODELS)
        except ConfigError as err:
            raise ConfigError(
                setting, f"{err.message} Or your own model: {USER_MODEL_FORMS}."
            ) from None
    try:
        return spec_for(model).name
    except UserModelError as err:
        raise ConfigError(setting, str(err)) from None


def _check_model_args(setting: str, args: Any) -> Any:
    """``k=v,...`` (a mapping in a sweep file) as one sorted text; None: none."""
    try:
        return hub.canonical_args(args)
    except UserModelError as err:
        raise ConfigError(setting, str(err).removeprefix("--model-args: ")) from None


def _check_dataset(setting: str, dataset: Any) -> Any:
    """A built-in name, or ``npz:PATH`` made absolute and checked here."""
    if isinstance(dataset, str) and dataset.startswith(NPZ_PREFIX):
        try:
            return NPZ_PREFIX + inspect_npz(dataset[len(NPZ_PREFIX) :]).path
        except DataUnavailable as err:
            raise ConfigError(setting, str(err)) from None
    try:  # folder:PATH made absolute, tfds:NAME checked for its form
        own = user_dataset(dataset) if isinstance(dataset, str) else None
    except DataUnavailable as err:
        raise ConfigError(setting, str(err)) from None
    if own is not None:
        return own
    try:
        return check_choice(setting, dataset, DATASETS)
    except ConfigError as err:
        raise ConfigError(
            setting,
            f"{err.message} Or your own data: npz:path/to/data.npz, folder:path/to/images, "
            "tfds:NAME or text:path/to/file.txt.",
        ) from None


def _check_image_size(setting: str, size: Any) -> Any:
    if size is None:
        return size
    if not isinstance(size, (list, tuple)) or len(size) != 2 or not all(map(_positive, size)):
        raise ConfigError(
            setting,
            "expected HEIGHTxWIDTH of positive integers (a list in a sweep file: "
            f"[64, 64]); received {type(size).__name__} {size!r}.",
        )
    return tuple(size)


def _check_data_dir(setting: str, path: Any) -> Any:
    if path is not None and (not isinstance(path, str) or not os.path.isdir(path)):
        raise ConfigError(
            setting, f"expected an existing directory; received {path!r}, which is not one."
        )
    return path


def _check_sample_interval(setting: str, interval: Any) -> Any:
    if _not_finite(interval) or not 0 <= interval <= MAX_SAMPLE_INTERVAL_S:
        raise ConfigError(
            setting,
            f"expected a finite number of seconds up to {MAX_SAMPLE_INTERVAL_S:g}, 0 to "
            f"turn the sampler off; received {interval!r}.",
        )
    return interval


def _check_memory_fraction(setting: str, fraction: Any) -> Any:
    if fraction is None:
        return fraction
    if _not_number(fraction) or not 0 < fraction <= 1:
        raise ConfigError(
            setting,
            f"expected a fraction of GPU memory above 0 and at most 1; received {fraction!r}.",
        )
    return float(fraction)  # 1 in a sweep file: frameworks take a float only


def _check_target_precision(setting: str, target: Any) -> Any:
    if target is not None and (_not_finite(target) or not 0 < target < 1):
        raise ConfigError(
            setting,
            "expected a relative half-width above 0 and below 1 (0.02: the median's 95% "
            f"interval within +-2%); received {target!r}.",
        )
    return target


def _check_switch(setting: str, value: Any) -> Any:
    """A switch: on/off (YAML reads a bare on/off as true/false), true/false, a count, a choice."""
    switch = SWITCHES[setting]
    if isinstance(value, bool) and "on" in switch.choices:
        value = "on" if value else "off"
    if isinstance(switch.default, bool):
        return _true_or_false(setting, value)
    if switch.is_count:
        return _positive_int(setting, value, allow_zero=True)
    return check_choice(setting, value, switch.choices)


# what a setting is to its users -----------------------------------------------------

SETTING = "kbench.setting"  # the key of a field's metadata that holds its Setting
# The --help sections of settings that belong together.
GPU_MEMORY = "GPU memory options (recorded in every result)"
SWITCH_GROUP = (
    "optimization switches (recorded in every result; 'not applicable' where a backend "
    "has no such thing)"
)
PRECISION = "precision on request (the result records the interval reached and why it stopped)"
DATA_PARALLEL = "data-parallel training (each framework's own engine)"
PROFILER = "where the time goes (the framework's own profiler)"


@dataclass(frozen=True)
class Setting:
    """What one :class:`RunConfig` field is to its users: its flag and its check.

    ``help``: the flag's help (None: no flag of its own); a ``{word}`` in it each command
    says its own way (``words``: kbench run's); "(default: ...)" is ``default_text`` or the
    default. ``parse`` reads the flag's text (:class:`TextError`; None: as it is, or no
    value for a true/false setting). ``check`` refuses a value (:class:`ConfigError`) or
    makes it canonical. ``group``: the --help section; one ``exclusive`` name's flags
    exclude each other.
    """

    help: Optional[str]
    check: Check
    parse: Optional[Callable[[str], Any]] = None
    metavar: Optional[str] = None
    default_text: Optional[str] = None
    group: Optional[str] = None
    exclusive: Optional[str] = None
    words: Tuple[Tuple[str, str], ...] = ()


def setting(default: Any, help: Optional[str], check: Check, **flag: Any) -> Any:
    return field(default=default, metadata={SETTING: Setting(help, check, **flag)})


def switch_setting(name: str) -> Any:
    """The field of a switch (:data:`kbench.backends.switches.SWITCHES`), as it says."""
    switch = SWITCHES[name]
    if isinstance(switch.default, bool):
        return setting(switch.default, switch.help, _check_switch, group=SWITCH_GROUP)
    metavar = "N" if switch.is_count else "|".join(switch.choices)
    parse = int if switch.is_count else None
    return setting(
        switch.default, switch.help, _check_switch, parse=parse, metavar=metavar,
        group=SWITCH_GROUP,
    )  # fmt: skip


# The words of a flag's help each command may say its own way, and kbench run's.
PROCESS = (("process", "worker"),)
MEASURED = (
    ("unit", "training steps (inference passes with --mode inference)"),
    ("limit", "the end of the data and epochs (inference: of --duration, unless a budget "
              "is given)"),
)  # fmt: skip


@dataclass(frozen=True)
class RunConfig:
    """One run of one model on one backend: training or inference.

    Training length is either ``epochs`` (full passes over the training set, the
    first ``warmup_steps`` steps of epoch 1 excluded from throughput) or ``steps``
    (``warmup_steps`` + ``steps`` steps in one pass, all ``steps`` measured; in warm
    windows, the steps of each window).
    Inference runs ``warmup_steps`` forward passes of one fixed batch, then measures
    forward passes for ``duration_s`` seconds. Each field's metadata is its
    :class:`Setting`: the flag, its help and the check of its value.
    """

    backend: str = setting(None, None, _required(_one_of(BACKENDS)))
    model: str = setting(None, None, _required(_check_model))
    model_args: Optional[str] = setting(
        None,
        "a hub: model's configuration as key=value pairs, e.g. num_layers=2,hidden_dim=64,"
        "num_heads=2,intermediate_dim=128,vocabulary_size=1000 (the backbone's and the "
        "task's keyword arguments; numbers, true/false or text), or preset=NAME",
        _check_model_args, metavar="K=V,...", default_text="none",
    )  # fmt: skip
    dataset: str = setting(
        "fashion_mnist",
        f"one of: {', '.join(DATASETS)}; or your own arrays: "
        "npz:path/to/data.npz holding x_train, y_train, x_test, y_test (integer labels, "
        "images channels last, uint8 or floats in [0, 1]); folder:path/to/images, one "
        "folder of images per class (PATH/train/ and PATH/val/, else 10%% of each class held "
        "out; resized to --image-size or the model's input); tfds:NAME[/CONFIG][:VERSION], "
        "a tensorflow-datasets image set tfds has prepared. Real data is read "
        "from --data-dir, the Keras cache (~/.keras/datasets, read only), kbench's cache, "
        "Debian's dataset-fashion-mnist, prepared tensorflow-datasets, else downloaded; "
        "synthetic data is labelled so in every result",
        _check_dataset, metavar="DATASET",
    )  # fmt: skip
    batch_size: int = setting(64, "samples per step", _count(), parse=int, metavar="N")
    epochs: Optional[int] = setting(
        1, "passes over the training set", _optional(_count()), parse=int, metavar="N",
        exclusive="length",
    )  # fmt: skip
    steps: Optional[int] = setting(
        None,
        "measured steps instead of epochs (after the warmup steps); in warm interleaved "
        "windows (several backends, no --repeats) the length of each window instead: "
        "windows of N steps each, round after round, not N measured steps in all",
        _optional(_count()), parse=int, metavar="N",
        default_text="none: --epochs sets the length", exclusive="length",
    )  # fmt: skip
    warmup_steps: int = setting(
        5, "untimed warm-up steps before the timed ones ({steps})", _count(0), parse=int,
        metavar="N",
        words=(("steps", "training steps, or forward passes with --mode inference: tracing, "
                         "compilation"),),
    )  # fmt: skip
    data_format: Optional[str] = setting(
        None,
        f"override the backend's image_data_format: {' or '.join(DATA_FORMATS)}",
        _optional(_one_of(DATA_FORMATS)), metavar="FORMAT",
        default_text="keras_configs/<backend>.json",
    )  # fmt: skip
    optimizer: str = setting(
        "adam", "the training's optimizer", _one_of(OPTIMIZERS), metavar="|".join(OPTIMIZERS)
    )
    learning_rate: float = setting(
        1e-3, "the optimizer's learning rate", _positive_number, parse=parse_number,
        metavar="RATE",
    )  # fmt: skip
    train_samples: Optional[int] = setting(
        None, "use only the first N training samples", _optional(_count()), parse=int,
        metavar="N", default_text="the whole training set",
    )  # fmt: skip
    test_samples: Optional[int] = setting(
        None, "use only the first N test samples", _optional(_count()), parse=int,
        metavar="N", default_text="the whole test set",
    )  # fmt: skip
    input_shape: Optional[Tuple[int, ...]] = setting(
        None,
        "synthetic data only: HxWxC images (channels last), STEPSxFEATURES for lstm, "
        "STEPS (the sequence length) for token models, also for text: data",
        lambda name, shape: shape,  # checked against the model's kind of input
        parse=parse_shape, metavar="HxWxC", default_text="the model's own",
    )  # fmt: skip
    num_classes: Optional[int] = setting(
        None,
        "the classes of synthetic data (decoder_lm: its vocabulary), or of npz: data (there "
        "the default is the largest label + 1)",
        _optional(_count()), parse=int, metavar="N", default_text="the model's own",
    )  # fmt: skip
    image_size: Optional[Tuple[int, int]] = setting(
        None, "resize real images (bilinear), e.g. 64x64 for alexnet on CIFAR",
        _check_image_size, parse=parse_shape, metavar="HxW", default_text="the model's input",
    )  # fmt: skip
    data_dir: Optional[str] = setting(
        None,
        "a directory holding the data set's files as published (mnist.npz, "
        "cifar-10-python.tar.gz, the Fashion-MNIST idx files, imdb.npz, ...)",
        _check_data_dir, metavar="DIR", default_text="none: the caches, else a download",
    )  # fmt: skip
    threads: Optional[int] = setting(
        None,
        "CPU threads for every framework (intra/inter-op, OpenMP); fewer than the "
        "cores kbench may run on also pins the worker to that many cores",
        _optional(_count(most=MAX_THREADS)), parse=int, metavar="N",
        default_text="every core of kbench's CPU affinity, e.g. as taskset or a "
        "container's cpuset set it",
    )  # fmt: skip
    inter_op_threads: Optional[int] = setting(
        None,
        "the framework's inter-op pool apart from --threads (TensorFlow "
        "set_inter_op_parallelism_threads, torch set_num_interop_threads; refused for jax "
        "and mxnet, which have no such pool to set)",
        _optional(_count(most=MAX_THREADS)), parse=int, metavar="N", default_text="--threads",
    )  # fmt: skip
    seed: int = setting(
        0, "seed of the {seeds}", _count(0, MAX_SEED), parse=int, metavar="N",
        words=(("seeds", "data order and synthetic data"),),
    )  # fmt: skip
    timeout_s: float = setting(
        1800.0, "stop a run's {process} past this and record it as 'timeout'{keeps}",
        _seconds, parse=parse_number, metavar="SECONDS", words=PROCESS + (("keeps", ""),),
    )  # fmt: skip
    mode: str = setting(
        "train",
        "train; inference: forward passes of one batch for --duration seconds after "
        "the warmup passes, reports latency p50/p90/p99; generate (decoder_lm): greedy "
        "decoding of --max-new-tokens after a prompt of each test sequence's first "
        f"{PROMPT_TOKENS} tokens, the window the sequence length (--input-shape), on "
        "synthetic tokens unless --dataset text:PATH; one warmup generation, then "
        "generations for --duration seconds; reports time to first token, per-token "
        "latency, tokens/s and whether the greedy tokens agree across backends (the same "
        "weights: the first Keras backend's); no key/value cache, every token reruns "
        "the whole window",
        _one_of(MODES), metavar="|".join(MODES),
    )  # fmt: skip
    max_new_tokens: int = setting(
        32, "generate: the tokens each generation adds after the prompt", _count(),
        parse=int, metavar="N",
    )  # fmt: skip
    duration_s: float = setting(
        10.0, "inference: measured seconds of forward passes (generate: of generations)",
        _seconds, parse=parse_number, metavar="SECONDS",
    )  # fmt: skip
    precision: str = setting(
        "float32",
        "inference: the model's numbers as each backend or runtime quantizes them (the "
        "result names the method); one that cannot is recorded unsupported, with why",
        _one_of(PRECISIONS), metavar="|".join(PRECISIONS),
    )  # fmt: skip
    repeat: int = setting(0, None, _count(0))  # which repetition of one config (0-based)
    sample_interval_s: float = setting(
        0.2,
        "how often the sampler reads the {process}'s CPU, memory and GPUs (NVML); 0 turns "
        "it off",
        _check_sample_interval, parse=parse_number, metavar="SECONDS", words=PROCESS,
    )  # fmt: skip
    device: str = setting(
        "auto",
        "auto: whatever the framework picks; cpu: hide every GPU from the {process}; "
        "gpu: fail unless there is one",
        _one_of(DEVICES), metavar="|".join(DEVICES), words=PROCESS,
    )  # fmt: skip
    gpu_memory_fraction: Optional[float] = setting(
        None,
        "cap each framework at F of GPU memory: TensorFlow logical device limit, PyTorch "
        "set_per_process_memory_fraction, JAX XLA_PYTHON_CLIENT_MEM_FRACTION, MXNet "
        "MXNET_GPU_MEM_POOL_RESERVE (approximate)",
        _check_memory_fraction, parse=parse_number, metavar="F",
        default_text="none: the framework's own", group=GPU_MEMORY,
    )  # fmt: skip
    gpu_memory_growth: bool = setting(
        False, "allocate GPU memory on demand: TensorFlow memory growth, JAX no preallocation",
        _true_or_false, group=GPU_MEMORY,
    )  # fmt: skip
    # optimization switches (kbench.backends.switches): each backend applies what it has
    jit_compile: str = switch_setting("jit_compile")
    run_eagerly: bool = switch_setting("run_eagerly")
    torch_compile: bool = switch_setting("torch_compile")
    mixed_precision: str = switch_setting("mixed_precision")
    hybridize: bool = switch_setting("hybridize")
    tf32: str = switch_setting("tf32")
    onednn: str = switch_setting("onednn")
    mxnet_gpus: int = switch_setting("mxnet_gpus")
    distributed: str = setting(
        "none",
        f"one of: {', '.join(DISTRIBUTED)}. --batch-size is per worker; the global batch "
        "is batch size x workers",
        _one_of(DISTRIBUTED), metavar="MODE", group=DATA_PARALLEL,
    )  # fmt: skip
    workers: int = setting(
        1, "worker processes", _count(), parse=int, metavar="N", group=DATA_PARALLEL
    )
    profile: bool = setting(
        False,
        "after the measured run, run --profile-steps more steps under the framework's "
        "profiler (torch.profiler, TensorFlow's profiler, JAX's trace) and record time per "
        "phase (data, forward, backward, update) and the top operators, with the "
        "`kbench ops` name where one fits; throughput is measured without the profiler. "
        "MXNet's wheel has no profiler: recorded as unsupported",
        _true_or_false, group=PROFILER,
    )  # fmt: skip
    profile_steps: int = setting(
        10, "steps (forward passes with --mode inference) to profile", _count(), parse=int,
        metavar="N", group=PROFILER,
    )  # fmt: skip
    # measure until the median throughput's 95% interval is within +-target_precision
    # of it, or time_budget_s seconds of measuring are spent (kbench.measure.stats)
    target_precision: Optional[float] = setting(
        None,
        "keep measuring {unit} until the median throughput's 95%% confidence interval "
        "(order statistics, distribution-free) is within +-P of it, e.g. 0.02; stops "
        "earlier when --time-budget is spent or at {limit}",
        _check_target_precision, parse=parse_half_width, metavar="P", default_text="off",
        group=PRECISION, words=MEASURED,
    )  # fmt: skip
    time_budget_s: Optional[float] = setting(
        None, "stop measuring {unit} after this many seconds, precision reached or not",
        _optional(_seconds), parse=parse_seconds, metavar="SECONDS", default_text="none",
        group=PRECISION, words=MEASURED,
    )  # fmt: skip
    # a measuring window of this many seconds in a warm worker, interleaved with the other
    # backends' (kbench.run.windows); None: the run is a fresh process of its own
    window_s: Optional[float] = setting(
        None,
        "several backends, no --repeats, training: one warm worker per backend builds "
        "and compiles once, then the backends measure windows of about this many seconds "
        "in turn (A B C, B C A, ...), round after round, until every ratio to the baseline "
        "has its 95%% interval within --ratio-precision or --ratio-budget is spent; a round "
        "with a window flagged busy is dropped, and said. --steps N: windows of N steps "
        "each instead",
        _optional(_seconds), parse=parse_seconds, metavar="SECONDS",
        default_text=f"{WINDOW_S:g} s",
    )  # fmt: skip

    def __post_init__(self) -> None:
        for name, about in settings().items():
            object.__setattr__(self, name, about.check(name, getattr(self, name)))
        self._check_hub()
        self._check_length()
        self._check_generate()
        self._check_inference_only()
        self._check_data()
        self._check_warmup_fits()
        self._check_inter_op()
        self._check_distributed()
        self._check_profile()
        self._check_precision()
        if self.window_s is not None:
            self._check_window()
        self._check_mxnet_gpus()

    def _check_hub(self) -> None:
        """A ``hub:`` model's arguments and preset (kbench_models.hub); none for another."""
        if not hub.is_hub(self.model):
            if self.model_args is not None:
                raise ConfigError(
                    "model_args",
                    f"only hub: models take a configuration ({hub.FORM}); received "
                    f"{self.model_args!r} for model {short_name(self.model)!r}. Drop "
                    "--model-args, or run the hub: model in a command of its own.",
                )
            return
        try:
            spec_for(self.model, self.model_args)
        except UserModelError as err:
            message = str(err)
            if message.startswith("--model-args: "):
                raise ConfigError("model_args", message.removeprefix("--model-args: ")) from None
            raise ConfigError("model", message) from None
        if BACKENDS[self.backend].export_format:
            raise ConfigError(
                "backend",
                f"{self.backend} runs a model kbench exports; hub: models are not exported "
                "yet. Run them on tensorflow, jax or torch.",
            )

    def _check_length(self) -> None:
        """Steps, where given, replace the epochs (the default)."""
        if self.steps is not None:
            object.__setattr__(self, "epochs", None)
        elif self.epochs is None:
            raise ConfigError("epochs", "expected a number of epochs or steps; received neither.")

    def _check_inference_only(self) -> None:
        if self.precision != "float32" and self.mode != "inference":
            raise ConfigError(
                "precision",
                f"--precision {self.precision} quantizes a model for inference; received "
                f"--mode {self.mode}. Add --mode inference, or drop --precision.",
            )
        why = BACKENDS[self.backend].inference_only
        if why is not None and self.mode != "inference":
            trains = ", ".join(n for n, b in BACKENDS.items() if b.inference_only is None)
            raise ConfigError(
                "mode",
                f"backend {self.backend!r} runs inference only: {why}; received --mode "
                f"{self.mode}. Add --mode inference, or train on {trains}.",
            )

    def _check_generate(self) -> None:
        """--mode generate: a causal model, a backend that takes the reference's weights,
        and a prompt and --max-new-tokens that fit the window. Synthetic tokens by default."""
        if self.mode != "generate":
            if self.max_new_tokens != default_of("max_new_tokens"):
                raise ConfigError(
                    "max_new_tokens",
                    f"--max-new-tokens sets the length of --mode generate; received --mode "
                    f"{self.mode}. Add --mode generate, or drop --max-new-tokens.",
                )
            return
        spec = spec_for(self.model, self.model_args)
        if spec.target != "next_token":
            causal = ", ".join(n for n in MODELS if spec_for(n).target == "next_token")
            raise ConfigError(
                "mode",
                f"--mode generate decodes tokens with a causal language model ({causal}: its "
                f"output at each position predicts the next token); received model "
                f"{self.model!r}, which {'classifies ' + INPUT_KINDS[spec.input_kind]}. Use "
                f"-m {causal.split(', ')[0]}, or --mode inference for {self.model!r}.",
            )
        able = [n for n, b in BACKENDS.items() if b.inference_only is None and n not in NO_DECODER]
        if self.backend not in able:
            why = NO_DECODER.get(self.backend) or (
                "it runs an exported file, whose weights are its exporter's, not the "
                "reference's that every backend decodes with"
            )
            raise ConfigError(
                "backend",
                f"--mode generate runs on {', '.join(able)}; received {self.backend!r}: {why}. "
                "Drop it from -b.",
            )
        if self.target_precision is not None or self.time_budget_s is not None:
            raise ConfigError(
                "target_precision",
                "--mode generate measures whole generations for --duration seconds; received "
                "--target-precision/--time-budget too. Drop them and set --duration.",
            )
        if self.dataset == default_of("dataset"):  # images: the token models take none
            object.__setattr__(self, "dataset", "synthetic")
        window = (self.input_shape or spec.input_shape)[0]
        if PROMPT_TOKENS + self.max_new_tokens > window:
            raise ConfigError(
                "max_new_tokens",
                f"the prompt ({PROMPT_TOKENS} tokens) and the new tokens must fit the model's "
                f"window of {window} (the sequence length); received --max-new-tokens "
                f"{self.max_new_tokens}. Lower it to at most {window - PROMPT_TOKENS}, or "
                f"raise --input-shape to {PROMPT_TOKENS + self.max_new_tokens} or more.",
            )

    def _check_mxnet_gpus(self) -> None:
        if not self.mxnet_gpus:
            return
        if self.device == "cpu":
            raise ConfigError(
                "mxnet_gpus",
                f"expected GPUs the worker can see; received --mxnet-gpus {self.mxnet_gpus} "
                "with --device cpu, which hides every GPU. Drop --device cpu or --mxnet-gpus.",
            )
        if self.distributed != "none":
            raise ConfigError(
                "mxnet_gpus",
                f"--distributed {self.distributed} gives each worker process one device; "
                f"received --mxnet-gpus {self.mxnet_gpus} too. Drop one of the two.",
            )

    def _check_distributed(self) -> None:
        allowed = DISTRIBUTED[self.distributed]
        if self.backend not in allowed:
            raise ConfigError(
                "distributed",
                f"mode {self.distributed!r} runs {' or '.join(allowed)}; received backend "
                f"{self.backend!r}. Modes for it: "
                f"{', '.join(m for m, b in DISTRIBUTED.items() if self.backend in b)}.",
            )
        if self.distributed != "none" and self.mode != "train":
            raise ConfigError(
                "distributed",
                f"data-parallel modes train; received --mode {self.mode}. Drop --distributed "
                "for inference.",
            )
        if self.distributed == "none" and self.workers != 1:
            raise ConfigError(
                "workers",
                f"expected 1 without --distributed; received {self.workers}. Choose a mode "
                "with --distributed.",
            )

    def switches(self) -> Dict[str, Any]:
        return {name: getattr(self, name) for name in SWITCHES}

    def _check_data(self) -> None:
        """The data format, kinds of input and shapes against the backend and the model."""
        if self.data_format is not None:
            allowed = BACKENDS[self.backend].data_formats
            if self.data_format not in allowed:
                raise ConfigError(
                    "data_format",
                    f"backend {self.backend!r} runs {' or '.join(allowed)} only; received "
                    f"{self.data_format!r}. Drop --data-format for it.",
                )
        model_kind = spec_for(self.model, self.model_args).input_kind
        data_kind = dataset_spec(self.dataset).kind
        if self.dataset.startswith(NPZ_PREFIX):
            try:  # the arrays against the model's input and the class count asked for
                inspect_npz(self.dataset[len(NPZ_PREFIX) :]).check_fits(
                    model_kind, self.num_classes
                )
            except DataUnavailable as err:
                raise ConfigError("dataset", str(err)) from None
            data_kind = model_kind
        if data_kind not in ("any", model_kind):
            fitting = [n for n, d in DATASET_SPECS.items() if d.kind in ("any", model_kind)]
            raise ConfigError(
                "dataset",
                f"model {self.model!r} takes {INPUT_KINDS[model_kind]}; dataset "
                f"{self.dataset!r} holds {INPUT_KINDS[data_kind]}. Use one of: "
                f"{', '.join(fitting)}.",
            )
        spec = spec_for(self.model, self.model_args)
        refusal = target_refusal(self.dataset, self.model, spec.target)
        if refusal:
            raise ConfigError("dataset", refusal)
        self._check_synthetic_shape(model_kind)
        if self.image_size is not None and data_kind != "image":
            raise ConfigError(
                "image_size",
                f"only real image data sets are resized; {self.dataset!r} is not one "
                "(synthetic data takes --input-shape).",
            )

    def _check_synthetic_shape(self, model_kind: str) -> None:
        """``input_shape`` and ``num_classes``: synthetic data's (npz: data's class count)."""
        npz_classes = self.dataset.startswith(NPZ_PREFIX) and self.input_shape is None
        text_length = self.dataset.startswith(TEXT_PREFIX) and self.num_classes is None
        if (
            self.dataset != "synthetic"
            and not (npz_classes or text_length)
            and (self.input_shape is not None or self.num_classes is not None)
        ):
            raise ConfigError(
                "input_shape/num_classes",
                f"only synthetic data takes them (and npz: data --num-classes, the model's "
                f"output size; text: data --input-shape, its sequence length); dataset "
                f"{self.dataset!r} has its own. Drop the flags or use --dataset synthetic.",
            )
        if self.input_shape is not None:
            object.__setattr__(self, "input_shape", _input_shape(self.input_shape, model_kind))

    def _check_profile(self) -> None:
        if self.profile and self.distributed != "none":
            raise ConfigError(
                "profile",
                f"profiles one process; received --distributed {self.distributed} too. Profile "
                "the model without --distributed (the breakdown per operator is the same "
                "computation), or drop --profile.",
            )

    def _check_precision(self) -> None:
        asked = self.target_precision is not None or self.time_budget_s is not None
        if asked and self.distributed != "none":
            raise ConfigError(
                "target_precision",
                f"--distributed {self.distributed} trains a fixed number of steps on every "
                "worker; received --target-precision/--time-budget too. Drop them, or set the "
                "length with --steps or --epochs.",
            )

    def _check_window(self) -> None:
        other = needs_fresh_process(vars(self))
        if other is not None:
            raise ConfigError(
                "window_s",
                f"warm windows measure training steps in one process per backend; received "
                f"{other} too, which needs fresh processes. Add --repeats N (fresh-process "
                "rounds) or drop it.",
            )

    def _check_warmup_fits(self) -> None:
        """Where the length is known here, the warmup must leave steps to measure (the
        worker checks again on the real data)."""
        if self.mode != "train" or self.epochs is None or self.train_samples is None:
            return
        if self.distributed != "none":  # each worker trains a shard: the worker checks
            return
        total = self.train_samples // self.batch_size * self.epochs
        if self.warmup_steps >= total:
            raise ConfigError(
                "warmup_steps",
                f"expected fewer than the run's at most {total} steps ({self.epochs} epoch(s) "
                f"of {self.train_samples} samples in batches of {self.batch_size}); received "
                f"{self.warmup_steps}. Lower --warmup-steps, or raise --train-samples or "
                "--epochs.",
            )

    def _check_inter_op(self) -> None:
        if self.inter_op_threads is None:
            return
        why = BACKENDS[self.backend].no_inter_op_pool
        if why is not None:
            having = ", ".join(n for n, b in BACKENDS.items() if b.no_inter_op_pool is None)
            raise ConfigError(
                "inter_op_threads",
                f"expected a backend with an inter-op thread pool ({having}); received "
                f"--inter-op-threads {self.inter_op_threads} for {self.backend!r}, which has "
                f"none to set: {why}. Run {self.backend} in a command of its own without "
                "--inter-op-threads (--threads sizes its threads), or, in a sweep file, set "
                "inter_op_threads only in the groups of backends that have the pool.",
            )

    @property
    def threads_in_force(self) -> int:
        return self.threads or usable_cores()

    def to_dict(self) -> Dict[str, Any]:
        # every setting is a scalar or a tuple of them: read directly, not through
        # dataclasses.asdict's deep copy (15x slower; a study's sweep hashes thousands)
        data = {name: getattr(self, name) for name in settings()}
        for name in ("input_shape", "image_size"):
            if data[name] is not None:
                data[name] = list(data[name])
        return data

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> RunConfig:
        known = settings()
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ConfigError(
                unknown[0],
                f"unknown run setting(s) {', '.join(unknown)}; expected only: "
                f"{', '.join(sorted(known))}.",
            )
        data = dict(data)
        for name in ("input_shape", "image_size"):
            if isinstance(data.get(name), list):  # checked, with a message, on creation
                data[name] = tuple(data[name])
        return cls(**data)

    def label(self) -> str:
        repeat = f" #{self.repeat + 1}" if self.repeat else ""
        mode = f" {self.mode}" if self.mode != "train" else ""
        return f"{self.backend}/{short_name(self.model)}{mode}{repeat}"


def _input_shape(shape: Any, kind: str) -> Tuple[int, ...]:
    expected = {
        "image": ((2, 3), "HEIGHTxWIDTH or HEIGHTxWIDTHxCHANNELS (channels last), e.g. 28x28x1"),
        "sequence": ((2,), "STEPSxFEATURES, e.g. 250x50"),
        "tokens": ((1,), "STEPS, e.g. 250"),
    }[kind]
    if not isinstance(shape, (list, tuple)):
        raise ConfigError(
            "input_shape",
            f"expected a list of positive integers in a sweep file ({expected[1]} as a "
            f"flag); received {type(shape).__name__} {shape!r}.",
        )
    shape = tuple(shape)
    if len(shape) not in expected[0] or not all(_positive(d) for d in shape):
        raise ConfigError(
            "input_shape",
            f"expected {expected[1]}, positive integers; received {shape!r}.",
        )
    if kind == "image" and len(shape) == 2:
        shape = shape + (1,)
    return shape


@functools.cache
def setting_fields() -> Dict[str, Field]:
    return {f.name: f for f in fields(RunConfig)}


@functools.cache
def settings() -> Dict[str, Setting]:
    return {name: f.metadata[SETTING] for name, f in setting_fields().items()}


def default_of(name: str) -> Any:
    return setting_fields()[name].default


def check_setting(name: str, value: Any) -> Any:
    """``value`` checked as the setting ``name`` checks it on its own, made canonical: for
    the commands whose settings do not all become a :class:`RunConfig` (ops, exec, parity)."""
    return settings()[name].check(name, value)


# Warm interleaved windows time the training steps of one process per backend, for a
# set time (kbench.run.windows): what each of these settings asks for needs fresh
# processes instead. The one list the CLI, the sweeps and RunConfig read.
NOT_IN_WINDOWS: Tuple[Tuple[str, Callable[[Any], bool]], ...] = (
    ("mode", lambda mode: mode != "train"),
    ("distributed", lambda mode: mode != "none"),
    ("profile", bool),
    ("target_precision", lambda target: target is not None),
    ("time_budget_s", lambda budget: budget is not None),
)


def needs_fresh_process(
    values: Mapping[str, Any], spell: Callable[[str], str] = flag_for
) -> Optional[str]:
    """The first of ``values`` (settings by name; default where absent) that warm windows
    cannot measure, as ``spell`` names it with its value (``--mode inference``); or None."""
    for name, asks in NOT_IN_WINDOWS:
        value = values.get(name, default_of(name))
        if asks(value):
            return spell(name) if isinstance(value, bool) else f"{spell(name)} {value}"
    return None
