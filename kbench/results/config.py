"""What one run is: a frozen, validated description that travels to the worker as JSON.

Every check happens here, when the config is created, so a bad flag or sweep entry
fails before any process starts, with a message that names the setting, what was
expected, what was received and how to fix it.
"""

from __future__ import annotations

import difflib
import functools
import math
import os
import re
from dataclasses import dataclass, fields
from typing import Any, Dict, Iterable, Optional, Tuple

from kbench.backends import BACKENDS
from kbench.backends.switches import SWITCHES
from kbench.datasets import DATASETS as DATASET_SPECS
from kbench.datasets import DataUnavailable, dataset_spec, user_dataset
from kbench.datasets.npz import NPZ_PREFIX, inspect_npz
from kbench.measure.processes import usable_cores
from kbench_models import MODELS, short_name, spec_for
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
MODES: Tuple[str, ...] = ("train", "inference")
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


def file_safe(model: str) -> str:
    """A model name fit for a file name: ``/a/residual.py:build`` -> ``residual.py-build``."""
    return re.sub(r"[^A-Za-z0-9_.]+", "-", short_name(model)).strip("-")


class FileError(ValueError):
    """A file kbench reads settings from (a sweep, a study) that it cannot use;
    ``where`` is the place in the file (``runs[2].model``), "" for the whole file."""

    def __init__(self, file: str, where: str, message: str) -> None:
        super().__init__(f"{file}: {where}: {message}" if where else f"{file}: {message}")
        self.file = file
        self.where = where
        self.message = message


class ConfigError(ValueError):
    """A setting has a value kbench cannot run with; the message says how to fix it.

    ``setting`` is the field name (``batch_size``); the CLI shows it as its flag.
    """

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"{setting}: {message}")
        self.setting = setting
        self.message = message


def did_you_mean(word: str, allowed: Iterable[str]) -> str:
    """ " Did you mean 'x'?" for the closest of ``allowed``, or "": the hint every
    error about a misspelt name ends with."""
    close = difflib.get_close_matches(word, list(allowed), n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def check_choice(setting: str, value: Any, allowed: Iterable[str]) -> None:
    allowed = tuple(allowed)
    if value in allowed:
        return
    hint = did_you_mean(value, allowed) if isinstance(value, str) else ""
    raise ConfigError(setting, f"expected one of {', '.join(allowed)}; received {value!r}.{hint}")


def _positive_int(
    setting: str, value: Any, *, allow_zero: bool = False, most: Optional[int] = None
) -> None:
    """An integer from 0 or 1 up to ``most``, by default the 32-bit limit of the counts
    frameworks take (2**31 overflows in the worker, not here)."""
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


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _input_shape(shape: Any, kind: str) -> Tuple[int, ...]:
    """A synthetic input shape checked against the model's kind of input."""
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


def _not_number(value: Any) -> bool:
    return isinstance(value, bool) or not isinstance(value, (int, float))


def _positive_number(
    setting: str, value: Any, unit: str = "", most: Optional[float] = None
) -> None:
    if (
        _not_number(value)
        or not math.isfinite(value)
        or value <= 0
        or (most is not None and value > most)
    ):
        what = f"a positive number of {unit}" if unit else "a positive number"
        bound = f" up to {most:,.0f}" if most is not None else ""
        raise ConfigError(setting, f"expected {what}{bound} (finite); received {value!r}.")


def check_precision(target_precision: Any, time_budget_s: Any) -> None:
    """``--target-precision`` (a relative half-width in (0, 1)) and ``--time-budget``
    (positive seconds), each optional; shared by runs and ``kbench ops``."""
    target = target_precision
    if target is not None and (
        _not_number(target) or not math.isfinite(target) or not 0 < target < 1
    ):
        raise ConfigError(
            "target_precision",
            "expected a relative half-width above 0 and below 1 (0.02: the median's 95% "
            f"interval within +-2%); received {target!r}.",
        )
    if time_budget_s is not None:
        _positive_number("time_budget_s", time_budget_s, "seconds", MAX_SECONDS)


@dataclass(frozen=True)
class RunConfig:
    """One run of one model on one backend: training or inference.

    Training length is either ``epochs`` (full passes over the training set, the
    first ``warmup_steps`` steps of epoch 1 excluded from throughput) or ``steps``
    (``warmup_steps`` + ``steps`` steps in one pass, all ``steps`` measured).
    Inference runs ``warmup_steps`` forward passes of one fixed batch, then measures
    forward passes for ``duration_s`` seconds.
    """

    backend: str
    model: str
    dataset: str = "fashion_mnist"
    batch_size: int = 64
    epochs: Optional[int] = 1
    steps: Optional[int] = None
    warmup_steps: int = 5
    data_format: Optional[str] = None  # None: the backend's keras_configs default
    optimizer: str = "adam"
    learning_rate: float = 1e-3
    train_samples: Optional[int] = None  # None: the whole training set
    test_samples: Optional[int] = None
    input_shape: Optional[Tuple[int, ...]] = None  # synthetic only; channels_last
    num_classes: Optional[int] = None  # synthetic only
    image_size: Optional[Tuple[int, int]] = None  # real images resized to (height, width)
    data_dir: Optional[str] = None
    threads: Optional[int] = None  # None: every core this process may run on
    # the framework's inter-op pool (TensorFlow, torch) apart from its intra-op threads;
    # None: the threads in force, as for the intra-op pool
    inter_op_threads: Optional[int] = None
    seed: int = 0
    timeout_s: float = 1800.0
    mode: str = "train"
    duration_s: float = 10.0  # inference: measured seconds
    repeat: int = 0  # which repetition of the same config this is (0-based)
    sample_interval_s: float = 0.2  # 0 turns the sampler off
    device: str = "auto"  # cpu hides every GPU from the worker; gpu requires one
    gpu_memory_fraction: Optional[float] = None
    gpu_memory_growth: bool = False
    # optimization switches (kbench.backends.switches): each backend applies what it has
    jit_compile: str = "auto"
    run_eagerly: bool = False
    torch_compile: bool = False
    mixed_precision: str = "off"
    hybridize: bool = False
    tf32: str = "auto"
    onednn: str = "auto"  # TensorFlow's oneDNN CPU kernels (TF_ENABLE_ONEDNN_OPTS)
    mxnet_gpus: int = 0  # 0: keras-mxnet's own choice of device
    # data-parallel training (kbench.distributed): batch_size is per worker, the global
    # batch is batch_size x workers
    distributed: str = "none"
    workers: int = 1
    # per-operator breakdown (kbench.profiling): extra steps after the measured run
    profile: bool = False
    profile_steps: int = 10
    # measure until the median throughput's 95% interval is within +-target_precision
    # of it, or time_budget_s seconds of measuring are spent (kbench.measure.precision)
    target_precision: Optional[float] = None
    time_budget_s: Optional[float] = None
    # a measuring window of this many seconds in a warm worker, interleaved with the other
    # backends' (kbench.run.windows); None: the run is a fresh process of its own
    window_s: Optional[float] = None

    def __post_init__(self) -> None:
        for name in REQUIRED:
            if getattr(self, name) is None:
                raise ConfigError(name, f"expected a {name}; received none.")
        check_choice("backend", self.backend, BACKENDS)
        self._check_model()
        self._check_dataset()
        self._check_training()
        self._check_data()
        self._check_measurement()
        self._check_distributed()
        self._check_profile()
        self._check_precision()
        for name, switch in SWITCHES.items():
            value = getattr(self, name)
            if isinstance(value, bool) and "on" in switch.choices:
                # YAML reads a bare on/off as true/false
                value = "on" if value else "off"
                object.__setattr__(self, name, value)
            if isinstance(switch.default, bool):
                if not isinstance(value, bool):
                    raise ConfigError(name, f"expected true or false; received {value!r}.")
            elif switch.is_count:
                _positive_int(name, value, allow_zero=True)
            else:
                check_choice(name, value, switch.choices)
        self._check_mxnet_gpus()

    def _check_model(self) -> None:
        """A zoo name, or a user model made canonical: ``/absolute/file.py:function``
        (the worker runs in another folder)."""
        if not (isinstance(self.model, str) and is_reference(self.model)):
            try:
                check_choice("model", self.model, MODELS)
            except ConfigError as err:
                raise ConfigError(
                    "model", f"{err.message} Or your own model: {USER_MODEL_FORMS}."
                ) from None
            return
        try:
            spec = spec_for(self.model)
        except UserModelError as err:
            raise ConfigError("model", str(err)) from None
        object.__setattr__(self, "model", spec.name)

    def _check_dataset(self) -> None:
        """A built-in name, or ``npz:PATH`` made absolute and checked here."""
        if isinstance(self.dataset, str) and self.dataset.startswith(NPZ_PREFIX):
            try:
                facts = inspect_npz(self.dataset[len(NPZ_PREFIX) :])
            except DataUnavailable as err:
                raise ConfigError("dataset", str(err)) from None
            object.__setattr__(self, "dataset", NPZ_PREFIX + facts.path)
            return
        try:  # folder:PATH made absolute, tfds:NAME checked for its form
            own = user_dataset(self.dataset) if isinstance(self.dataset, str) else None
        except DataUnavailable as err:
            raise ConfigError("dataset", str(err)) from None
        if own is not None:
            object.__setattr__(self, "dataset", own)
            return
        try:
            check_choice("dataset", self.dataset, DATASETS)
        except ConfigError as err:
            raise ConfigError(
                "dataset",
                f"{err.message} Or your own data: npz:path/to/data.npz, folder:path/to/images "
                "or tfds:NAME.",
            ) from None

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
        check_choice("distributed", self.distributed, DISTRIBUTED)
        _positive_int("workers", self.workers)
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

    def _check_training(self) -> None:
        check_choice("mode", self.mode, MODES)
        _positive_int("batch_size", self.batch_size)
        if self.steps is not None:
            _positive_int("steps", self.steps)
            if self.epochs is not None:  # the flags' default: steps replace it
                _positive_int("epochs", self.epochs)
            object.__setattr__(self, "epochs", None)
        elif self.epochs is None:
            raise ConfigError("epochs", "expected a number of epochs or steps; received neither.")
        else:
            _positive_int("epochs", self.epochs)
        _positive_int("warmup_steps", self.warmup_steps, allow_zero=True)
        check_choice("optimizer", self.optimizer, OPTIMIZERS)
        _positive_number("learning_rate", self.learning_rate)
        _positive_number("duration_s", self.duration_s, "seconds", MAX_SECONDS)

    def _check_data(self) -> None:
        if self.data_format is not None:
            check_choice("data_format", self.data_format, DATA_FORMATS)
            allowed = BACKENDS[self.backend].data_formats
            if self.data_format not in allowed:
                raise ConfigError(
                    "data_format",
                    f"backend {self.backend!r} runs {' or '.join(allowed)} only; received "
                    f"{self.data_format!r}. Drop --data-format for it.",
                )
        for name in ("train_samples", "test_samples", "num_classes"):
            if getattr(self, name) is not None:
                _positive_int(name, getattr(self, name))
        self._check_warmup_fits()
        model_kind = spec_for(self.model).input_kind
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
        npz_classes = self.dataset.startswith(NPZ_PREFIX) and self.input_shape is None
        if (
            self.dataset != "synthetic"
            and not npz_classes
            and (self.input_shape is not None or self.num_classes is not None)
        ):
            raise ConfigError(
                "input_shape/num_classes",
                f"only synthetic data takes them (and npz: data --num-classes, the model's "
                f"output size); dataset {self.dataset!r} has its own. Drop the flags or use "
                "--dataset synthetic.",
            )
        if self.input_shape is not None:
            object.__setattr__(self, "input_shape", _input_shape(self.input_shape, model_kind))
        if self.image_size is not None:
            size = self.image_size
            if (
                not isinstance(size, (list, tuple))
                or len(size) != 2
                or not all(_positive(d) for d in size)
            ):
                raise ConfigError(
                    "image_size",
                    "expected HEIGHTxWIDTH of positive integers (a list in a sweep file: "
                    f"[64, 64]); received {type(size).__name__} {size!r}.",
                )
            size = tuple(size)
            if data_kind != "image":
                raise ConfigError(
                    "image_size",
                    f"only real image data sets are resized; {self.dataset!r} is not one "
                    "(synthetic data takes --input-shape).",
                )
            object.__setattr__(self, "image_size", size)
        if self.data_dir is not None and (
            not isinstance(self.data_dir, str) or not os.path.isdir(self.data_dir)
        ):
            raise ConfigError(
                "data_dir",
                f"expected an existing directory; received {self.data_dir!r}, which is not one.",
            )

    def _check_profile(self) -> None:
        if not isinstance(self.profile, bool):
            raise ConfigError("profile", f"expected true or false; received {self.profile!r}.")
        _positive_int("profile_steps", self.profile_steps)
        if self.profile and self.distributed != "none":
            raise ConfigError(
                "profile",
                f"profiles one process; received --distributed {self.distributed} too. Profile "
                "the model without --distributed (the breakdown per operator is the same "
                "computation), or drop --profile.",
            )

    def _check_precision(self) -> None:
        check_precision(self.target_precision, self.time_budget_s)
        asked = self.target_precision is not None or self.time_budget_s is not None
        if self.window_s is not None:
            self._check_window(asked)
        if asked and self.distributed != "none":
            raise ConfigError(
                "target_precision",
                f"--distributed {self.distributed} trains a fixed number of steps on every "
                "worker; received --target-precision/--time-budget too. Drop them, or set the "
                "length with --steps or --epochs.",
            )

    def _check_window(self, precision_asked: bool) -> None:
        """A warm window measures training steps of one process, for a set time."""
        _positive_number("window_s", self.window_s, "seconds", MAX_SECONDS)
        other = (
            "--mode inference" if self.mode != "train"
            else f"--distributed {self.distributed}" if self.distributed != "none"
            else "--profile" if self.profile
            else "--target-precision/--time-budget" if precision_asked
            else None
        )  # fmt: skip
        if other is not None:
            raise ConfigError(
                "window_s",
                f"warm windows measure training steps in one process per backend; received "
                f"{other} too, which needs fresh processes. Add --repeats N (fresh-process "
                "rounds) or drop it.",
            )

    def _check_warmup_fits(self) -> None:
        """Where the training length is known here (epochs of at most ``train_samples``),
        the warmup must leave steps to measure: the worker checks again on the real data."""
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

    def _check_measurement(self) -> None:
        if self.threads is not None:
            _positive_int("threads", self.threads, most=MAX_THREADS)
        self._check_inter_op()
        _positive_int("seed", self.seed, allow_zero=True, most=MAX_SEED)
        _positive_number("timeout_s", self.timeout_s, "seconds", MAX_SECONDS)
        check_choice("device", self.device, DEVICES)
        _positive_int("repeat", self.repeat, allow_zero=True)
        interval = self.sample_interval_s
        if (
            _not_number(interval)
            or not math.isfinite(interval)
            or not 0 <= interval <= MAX_SAMPLE_INTERVAL_S
        ):
            raise ConfigError(
                "sample_interval_s",
                f"expected a finite number of seconds up to {MAX_SAMPLE_INTERVAL_S:g}, 0 to "
                f"turn the sampler off; received {interval!r}.",
            )
        fraction = self.gpu_memory_fraction
        if fraction is not None and (_not_number(fraction) or not 0 < fraction <= 1):
            raise ConfigError(
                "gpu_memory_fraction",
                f"expected a fraction of GPU memory above 0 and at most 1; received {fraction!r}.",
            )
        if fraction is not None:  # 1 in a sweep file: frameworks take a float only
            object.__setattr__(self, "gpu_memory_fraction", float(fraction))
        if not isinstance(self.gpu_memory_growth, bool):
            raise ConfigError(
                "gpu_memory_growth", f"expected true or false; received {self.gpu_memory_growth!r}."
            )

    def _check_inter_op(self) -> None:
        """``inter_op_threads``: a pool count, only where the framework has such a pool."""
        if self.inter_op_threads is None:
            return
        _positive_int("inter_op_threads", self.inter_op_threads, most=MAX_THREADS)
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
        data = {name: getattr(self, name) for name in _setting_names()}
        for name in ("input_shape", "image_size"):
            if data[name] is not None:
                data[name] = list(data[name])
        return data

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> RunConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
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
        for name in REQUIRED:
            data.setdefault(name, None)
        return cls(**data)

    def label(self) -> str:
        repeat = f" #{self.repeat + 1}" if self.repeat else ""
        mode = " inference" if self.mode == "inference" else ""
        return f"{self.backend}/{short_name(self.model)}{mode}{repeat}"


@functools.cache
def _setting_names() -> Tuple[str, ...]:
    return tuple(f.name for f in fields(RunConfig))
