"""RunConfig validation: every bad value is refused with what was expected and received."""

import pytest

from kbench.results.config import ConfigError, RunConfig


def test_defaults_round_trip_through_json_dict():
    config = RunConfig(
        backend="jax",
        model="small_cnn",
        dataset="synthetic",
        input_shape=(8, 12),
        num_classes=3,
        steps=4,
    )
    again = RunConfig.from_dict(config.to_dict())
    assert again == config
    assert again.input_shape == (8, 12, 1)  # a missing channel axis becomes 1
    assert again.epochs is None  # steps wins over the epochs default


@pytest.mark.parametrize(
    "changes, setting, fragment",
    [
        ({"backend": "tensorflw"}, "backend", "Did you mean 'tensorflow'?"),
        (
            {"backend": "caffe"},
            "backend",
            "expected one of tensorflow, jax, torch, torch-native, mxnet",
        ),
        ({"model": "resnet1000"}, "model", "received 'resnet1000'"),
        ({"dataset": "fashion"}, "dataset", "Did you mean 'fashion_mnist'?"),
        ({"batch_size": 0}, "batch_size", "expected a positive integer; received 0"),
        ({"batch_size": -8}, "batch_size", "received -8"),
        ({"batch_size": True}, "batch_size", "received True"),
        ({"epochs": 0}, "epochs", "positive integer"),
        ({"epochs": None}, "epochs", "received neither"),
        ({"warmup_steps": -1}, "warmup_steps", "non-negative integer"),
        (
            {"train_samples": 512, "batch_size": 128},
            "warmup_steps",
            "expected fewer than the run's at most 4 steps (1 epoch(s) of 512 samples in "
            "batches of 128); received 5",
        ),
        ({"data_format": "NHWC"}, "data_format", "channels_last, channels_first"),
        ({"learning_rate": 0}, "learning_rate", "positive number"),
        ({"timeout_s": -5}, "timeout_s", "positive number of seconds"),
        ({"input_shape": (28, 28)}, "input_shape/num_classes", "--dataset synthetic"),
        ({"data_dir": "/no/such/dir"}, "data_dir", "expected an existing directory"),
    ],
)
def test_bad_values_name_the_setting_and_what_was_received(changes, setting, fragment):
    with pytest.raises(ConfigError) as info:
        RunConfig(**{"backend": "torch", "model": "mlp", **changes})
    assert info.value.setting == setting
    assert fragment in str(info.value)


def test_synthetic_shape_must_be_positive_integers():
    with pytest.raises(ConfigError, match="HEIGHTxWIDTH"):
        RunConfig(backend="torch", model="mlp", dataset="synthetic", input_shape=(0, 4, 1))


def test_unknown_fields_in_a_dict_are_refused():
    with pytest.raises(ConfigError, match="unknown run setting"):
        RunConfig.from_dict({"backend": "torch", "model": "mlp", "batchsize": 3})


@pytest.mark.parametrize(
    "changes, setting, fragment",
    [
        ({"model": "lstm_embedding", "dataset": "cifar10"}, "dataset",
         "takes sequences of word ids; dataset 'cifar10' holds images. Use one of: imdb"),
        ({"model": "lstm", "dataset": "imdb"}, "dataset", "Use one of: synthetic"),
        ({"model": "mlp", "dataset": "imdb"}, "dataset", "holds sequences of word ids"),
        ({"model": "lstm", "dataset": "synthetic", "input_shape": (4, 5, 6)}, "input_shape",
         "STEPSxFEATURES"),
        ({"model": "mlp", "dataset": "synthetic", "image_size": (64, 64)}, "image_size",
         "only real image data sets are resized"),
        ({"model": "mlp", "dataset": "cifar10", "image_size": (64,)}, "image_size",
         "HEIGHTxWIDTH"),
    ],
)  # fmt: skip
def test_model_and_data_must_fit_together(changes, setting, fragment):
    with pytest.raises(ConfigError) as info:
        RunConfig(**{"backend": "torch", **changes})
    assert info.value.setting == setting and fragment in str(info.value)
