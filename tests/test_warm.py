"""A warm worker runs several runs in one process; each keeps its own result, its own
failure, and its own times, and a worker that dies fails only the runs that had not
replied."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from conftest import dump, require_backends, run_kbench

from kbench.measure.processes import usable_cores
from kbench.results.config import RunConfig
from kbench.run.runner import worker_key

pytestmark = pytest.mark.own_processes("a warm worker that dies or fails a run")

TINY = ["--dataset", "synthetic", "--steps", "2", "--warmup-steps", "1", "--batch-size", "8",
        "--train-samples", "16", "--test-samples", "8"]  # fmt: skip


def write_model(folder: Path, name: str, body: str) -> str:
    path = folder / f"{name}.py"
    path.write_text(
        textwrap.dedent(
            f"""
            import os
            import keras
            from keras import layers

            INPUT_SHAPE = (6, 6, 1)
            NUM_CLASSES = 3


            def build(input_shape, num_classes):
                {body}
                inputs = keras.Input(shape=tuple(input_shape))
                x = layers.Flatten()(inputs)
                outputs = layers.Dense(num_classes, activation="softmax")(x)
                return keras.Model(inputs, outputs)
            """
        )
    )
    return f"{path}:build"


def test_runs_share_a_worker_only_when_they_start_alike():
    base = RunConfig(backend="torch", model="mlp", dataset="synthetic")
    same = RunConfig(backend="torch", model="small_cnn", dataset="synthetic", batch_size=8)
    assert worker_key(base) == worker_key(same)  # model and batch are the run's own
    for other in (
        RunConfig(backend="jax", model="mlp", dataset="synthetic"),
        RunConfig(backend="torch", model="mlp", dataset="synthetic", threads=usable_cores() + 1),
        RunConfig(backend="torch", model="mlp", dataset="synthetic", data_format="channels_first"),
        RunConfig(backend="torch", model="mlp", dataset="synthetic", tf32="on"),
        RunConfig(backend="tensorflow", model="mlp", dataset="synthetic", onednn="off"),
    ):
        assert worker_key(base) != worker_key(other), other
    # a switch applied to each run's model and compile is the run's own
    for own in (
        RunConfig(backend="torch", model="mlp", dataset="synthetic", jit_compile="off"),
        RunConfig(backend="torch", model="mlp", dataset="synthetic", run_eagerly=True),
        RunConfig(backend="torch", model="mlp", dataset="synthetic", mixed_precision="bfloat16"),
        RunConfig(backend="torch", model="mlp", dataset="synthetic", torch_compile=True),
        RunConfig(backend="torch", model="mlp", dataset="synthetic", hybridize=True),
    ):
        assert worker_key(base) == worker_key(own), own
    # except XLA on a channels_first TensorFlow run: it decides, as TensorFlow starts,
    # whether the run can start on Eigen's kernels (kbench.backends.kernels.nchw_refusal)
    nchw = dict(backend="tensorflow", model="small_cnn", data_format="channels_first")
    assert worker_key(RunConfig(**nchw, jit_compile="on")) != worker_key(RunConfig(**nchw))
    nhwc = dict(nchw, data_format="channels_last")
    assert worker_key(RunConfig(**nhwc, jit_compile="on")) == worker_key(RunConfig(**nhwc))


@pytest.mark.slow
def test_a_failing_run_leaves_the_others_of_its_worker_alone(home):
    """small_cnn cannot take a 3x3 input (two valid 3x3 convolutions); mlp can."""
    require_backends("torch-native")
    completed = run_kbench(
        ["run", "--warm", "-b", "torch-native", "-m", "small_cnn,mlp,lenet5", "--input-shape",
         "3x3x1", *TINY],
        home,
    )  # fmt: skip
    assert completed.returncode == 1, dump(completed)
    by_model = {r.config["model"]: r for r in completed.results()}
    assert by_model["small_cnn"].status == "failed"
    assert "Traceback" in by_model["small_cnn"].error["traceback"]
    assert by_model["mlp"].status == "ok", by_model["mlp"].reason
    assert by_model["mlp"].metrics["warm_worker"] is True
    assert by_model["mlp"].metrics["import_time_s"] == 0.0
    assert by_model["lenet5"].status == "failed"  # 3x3 is too small for it as well
    # each run has its own times, in the order they ran
    starts = [by_model[m].started_at for m in ("small_cnn", "mlp", "lenet5")]
    assert starts == sorted(starts) and len(set(starts)) == 3
    assert len(list((completed.output_dir / "logs").glob("*.log"))) == 3


@pytest.mark.slow
def test_a_worker_that_dies_fails_only_the_runs_that_had_not_replied(home, tmp_path):
    require_backends("torch")
    first = write_model(tmp_path, "first", "pass")
    dies = write_model(tmp_path, "dies", "os._exit(3)")
    never = write_model(tmp_path, "never", "pass")
    completed = run_kbench(
        ["run", "--warm", "-b", "torch", "-m", f"{first},{dies},{never}", *TINY], home
    )
    assert completed.returncode == 1, dump(completed)
    results = {Path(r.config["model"].split(":")[0]).stem: r for r in completed.results()}
    assert results["first"].status == "ok"
    for name in ("dies", "never"):
        assert results[name].status == "failed"
        assert "exited with code 3" in results[name].reason
        assert "warm worker" in results[name].reason
