"""The runs several test modules read, made by one ``kbench sweep --warm``: one worker
process per backend instead of one per backend for each module.

test_accuracy (the MLP learns digits), test_switches and test_gpu_options (runs with
per-run switches: eager bfloat16, float16 with loss scaling), test_stream (training from a
streamed image folder), test_zoo_training (the LSTM models, AlexNet on a CIFAR archive),
test_profile (every profiler), test_backends (both models on every backend; keras-mxnet's
run of its data-format test) and
test_measurement (an inference run) each read their group of this sweep
(:meth:`SharedSweep.group`); what each asserts is what it
asserted of its own ``kbench run`` before. The modules share one pytest-xdist worker
(``suite_plugin.SHARED_WORKER``), so the sweep runs once per session. A group's runs are
warm (every run of a worker but the first): these tests check what runs compute and
record, not the speed of a fresh process.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import List

import numpy as np
import yaml
from conftest import Completed, dump, require_backends, run_kbench, selected_backends
from PIL import Image
from test_datasets import write_cifar

from kbench.results.result import RunResult

EVERY_BACKEND = ["tensorflow", "jax", "torch", "torch-native", "mxnet"]
# test_backends' group: what its tests assert of every backend's run of each model
MATRIX_MODELS = ("mlp", "small_cnn")
MATRIX_STEPS = 6
COLOURS = {"n01": (220, 20, 20), "n02": (20, 220, 20), "n03": (20, 20, 220)}

# The profiled runs (test_profile): every profiler, and MXNet's that is compiled out.
PROFILED = {"model": "small_cnn", "dataset": "synthetic", "input_shape": [12, 12, 1],
            "num_classes": 4, "train_samples": 32, "test_samples": 8, "batch_size": 8,
            "steps": 2, "warmup_steps": 1, "sample_interval_s": 0, "profile": True,
            "profile_steps": 2}  # fmt: skip


# The switched runs (test_switches, test_gpu_options): an MLP, two steps of batch 8.
SWITCHED = {"model": "mlp", "dataset": "synthetic", "steps": 2, "warmup_steps": 1,
            "batch_size": 8, "train_samples": 32, "test_samples": 8,
            "sample_interval_s": 0}  # fmt: skip


# test_hub's runs: BertTextClassifier built from a tiny configuration, 2 steps of batch 8
HUB_ARGS = {"num_layers": 1, "hidden_dim": 16, "num_heads": 2, "intermediate_dim": 32,
            "vocabulary_size": 100, "max_sequence_length": 16}  # fmt: skip
HUB = {"model": "hub:BertTextClassifier", "model_args": HUB_ARGS, "dataset": "synthetic",
       "steps": 2, "warmup_steps": 1, "batch_size": 8, "train_samples": 32, "test_samples": 8,
       "sample_interval_s": 0, "run_eagerly": True}  # fmt: skip
HUB_BACKENDS = ["tensorflow", "torch", "torch-native", "mxnet"]


def image_folder(root: Path, per_class=(8, 2), split=True) -> Path:
    """Three classes of coloured noise, of two sizes, as PNG files in class folders
    (``train/`` and ``val/`` with ``split``), and a file that is not an image."""
    rng = np.random.default_rng(0)
    splits = (("train", per_class[0]), ("val", per_class[1])) if split else (("", sum(per_class)),)
    for name, count in splits:
        for label, colour in COLOURS.items():
            folder = root / name / label
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                height, width = (30, 40) if i % 2 else (50, 50)
                noise = rng.normal(0, 30, (height, width, 3))
                pixels = np.clip(np.array(colour) + noise, 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(folder / f"{label}_{i}.png")
    (root / "train" if split else root).joinpath("README.txt").write_text("not an image")
    return root


def sweep_file(folder: Path) -> Path:
    """The sweep: one group per test module that reads it."""
    images = image_folder(folder / "images")
    cifar = folder / "cifar"
    write_cifar(cifar, "cifar-10", n_train=24, n_test=8, as_tar=True)
    sweep = {
        "name": "suite",
        "description": "the runs test_accuracy, test_switches, test_gpu_options, "
        "test_stream, test_zoo_training, test_profile, test_backends and test_measurement "
        "read (tests/shared_sweep.py)",
        # one thread, as the profiled runs ask: every group shares its backend's worker
        "settings": {"threads": 1},
        "groups": [
            {"name": "accuracy",
             "settings": {"model": "mlp", "dataset": "digits", "epochs": 10, "batch_size": 32,
                          "warmup_steps": 3},
             "matrix": {"backend": EVERY_BACKEND}},
            # test_switches and test_gpu_options: per-run switches, each backend's worker
            # switching them for these runs and back for the groups after them
            {"name": "switches",
             "settings": {**SWITCHED, "run_eagerly": True, "mixed_precision": "bfloat16"},
             "matrix": {"backend": ["tensorflow", "torch-native", "mxnet"]}},
            {"name": "loss scaling",
             "settings": {**SWITCHED, "mixed_precision": "float16", "steps": 4,
                          "test_samples": 16},
             "matrix": {"backend": ["torch", "torch-native"]}},
            {"name": "stream",
             "settings": {"model": "mlp", "dataset": "imagenet", "data_dir": str(images),
                          "image_size": [16, 16], "epochs": 2, "batch_size": 4,
                          "warmup_steps": 1, "sample_interval_s": 0},
             "matrix": {"backend": EVERY_BACKEND}},
            {"name": "lstm",
             "settings": {"dataset": "synthetic", "steps": 2, "warmup_steps": 1,
                          "batch_size": 8, "train_samples": 32, "test_samples": 16},
             "matrix": {"backend": ["tensorflow", "jax", "torch", "mxnet"],
                        "model": ["lstm", "lstm_embedding"]}},
            # test_hub: a keras_hub model from its configuration (TensorFlow eager: no graph
            # to trace for two steps), and the backends that refuse it
            {"name": "hub", "settings": HUB, "matrix": {"backend": HUB_BACKENDS}},
            {"name": "profile", "settings": PROFILED, "matrix": {"backend": EVERY_BACKEND}},
            # test_backends: both models on every backend, 6 measured steps of batch 16
            {"name": "matrix",
             "settings": {"dataset": "synthetic", "steps": MATRIX_STEPS, "warmup_steps": 2,
                          "batch_size": 16, "test_samples": 64},
             "matrix": {"backend": EVERY_BACKEND, "model": list(MATRIX_MODELS)}},
            # test_backends' data-format test: keras-mxnet's default, channels_first, on a
            # non-square three-channel input
            {"name": "data format",
             "settings": {"model": "small_cnn", "dataset": "synthetic", "input_shape": [12, 16, 3],
                          "num_classes": 4, "steps": 3, "warmup_steps": 1, "batch_size": 8,
                          "test_samples": 16},
             "matrix": {"backend": ["mxnet"]}},
            # test_measurement: an inference run, latency percentiles over 1.5 s
            {"name": "inference",
             "settings": {"model": "small_cnn", "dataset": "synthetic", "mode": "inference",
                          "duration_s": 1.5, "warmup_steps": 3, "batch_size": 16,
                          "test_samples": 16, "train_samples": 16},
             "matrix": {"backend": ["tensorflow"]}},
            {"name": "cifar",
             "settings": {"model": "alexnet", "dataset": "cifar10", "data_dir": str(cifar),
                          "image_size": [64, 64], "steps": 2, "warmup_steps": 1,
                          "batch_size": 8},
             "matrix": {"backend": ["tensorflow", "mxnet"]}},
        ],
    }  # fmt: skip
    path = folder / "suite.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    return path


@dataclass
class Group:
    """One group's runs, read as a test module read its own command's results."""

    name: str
    completed: Completed

    def results(self) -> List[RunResult]:
        return [r for r in self.completed.results() if (r.sweep or {}).get("group") == self.name]


@dataclass
class SharedSweep:
    completed: Completed

    def group(self, name: str) -> Group:
        return Group(name, self.completed)


def run_shared_sweep(folder: Path) -> SharedSweep:
    """The sweep, on the backends KBENCH_TEST_BACKENDS selects (default: every one)."""
    selected = selected_backends()
    backends = [b for b in EVERY_BACKEND if selected in (None, ["cross"]) or b in selected]
    require_backends(*backends)
    only = [] if backends == EVERY_BACKEND else ["--filter", "backend=" + ",".join(backends)]
    home = folder / "home"
    home.mkdir()
    output = folder / "results"
    command = ["sweep", str(sweep_file(folder)), "--warm", "--store", str(output), *only]
    completed = run_kbench(command, home, output)
    assert completed.returncode == 0, dump(completed)
    return SharedSweep(completed)


def group(request, name: str, *backends: str) -> Group:
    """The shared sweep's group ``name``, for a test that needs ``backends``: skipped
    (before the sweep runs) where KBENCH_TEST_BACKENDS leaves one out."""
    require_backends(*backends)
    return request.getfixturevalue("shared_sweep").group(name)
