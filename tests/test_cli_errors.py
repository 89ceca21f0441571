"""Bad input stops `kbench run` before anything runs: exit 2, a message that teaches, no files."""

import pytest

from kbench import cli


def run_cli(capsys, args):
    with pytest.raises(SystemExit) as info:
        cli.main(["run", *args])
    return info.value.code, capsys.readouterr().err


@pytest.mark.parametrize(
    "args, expected",
    [
        (
            ["--backend", "tensorflw"],
            "--backend/-b: expected one of tensorflow, jax, torch, torch-native, mxnet"
            "|received 'tensorflw'. Did you mean 'tensorflow'?",
        ),
        (["--backend", "jax,cntk"], "received 'cntk'"),
        (["--backend", "jax", "--model", "resnet9000"], "--model: expected one of mlp, small_cnn"),
        (["--backend", "jax", "--dataset", "imagenett"], "--dataset: expected one of"),
        (
            ["--backend", "jax", "--batch-size", "0"],
            "--batch-size: expected a positive integer; received 0.",
        ),
        (["--backend", "jax", "--batch-size", "-4"], "received -4"),
        (["--backend", "jax", "--batch-size", "big"], "invalid int value: 'big'"),
        (["--backend", "jax", "--epochs", "2", "--steps", "3"], "not allowed with argument"),
        (["--backend", "jax", "--input-shape", "32x32x3"], "--input-shape/num-classes"),
        (["--backend", "jax", "--input-shape", "32by32"], "expected HEIGHTxWIDTH"),
        (
            ["--backend", "jax", "--data-format", "NCHW"],
            "--data-format: expected one of channels_last, channels_first",
        ),
        (["--backend", "jax", "--timeout", "0"], "--timeout: expected a positive number"),
        ([], "the following arguments are required: --backend"),
        (
            ["--backend", "jax", "--repeats", "8", "--ratio-precision", "0.05"],
            "--ratio-precision: expected at least two backends to compare; received jax",
        ),
        (
            ["--backend", "jax,torch", "--repeats", "3", "--ratio-precision", "0.05"],
            "--ratio-precision: expected --repeats of at least 6",
        ),
        (["--backend", "jax,torch", "--ratio-precision", "1.5"], "below 1, for example 0.02"),
        (
            ["--backend", "jax,torch", "--repeats", "2", "--ratio-budget", "60"],
            "--ratio-budget: expected it only with --ratio-precision",
        ),
        (
            ["--backend", "jax,torch", "--repeats", "2", "--window", "2"],
            "--window: expected --window only for warm windows (several backends, no "
            "--repeats, training in one process each); received it with --repeats",
        ),
        (
            ["--backend", "jax", "--window", "2"],
            "--window: expected --window only for warm windows (several backends, no "
            "--repeats, training in one process each); received it with one backend",
        ),
        (["--backend", "jax,torch", "--window", "0"], "expected more than 0 seconds"),
    ],
)
def test_bad_flags(capsys, tmp_path, args, expected):
    out = tmp_path / "out"
    code, err = run_cli(capsys, [*args, "--store", str(out)])
    assert code == 2
    for part in expected.split("|"):  # parts that must all appear
        assert part in err
    assert not out.exists()


def test_unwritable_output_dir(capsys, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    code, err = run_cli(
        capsys, ["--backend", "jax", "--dataset", "synthetic", "--store", str(blocker / "x")]
    )
    assert code == 2
    assert "--store: expected a directory kbench can write" in err
    assert str(blocker / "x") in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_missing_environment_names_the_command_that_creates_it(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("KBENCH_ENVS_DIR", str(tmp_path / "no-envs"))
    out = tmp_path / "out"
    code, err = run_cli(
        capsys, ["--backend", "mxnet", "--dataset", "synthetic", "--store", str(out)]
    )
    assert code == 2
    assert "scripts/setup_envs.sh mxnet" in err and "KBENCH_PYTHON_MXNET" in err
    assert not out.exists()


def test_bad_interpreter_override(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("KBENCH_PYTHON_TORCH", str(tmp_path / "python-that-is-not-there"))
    code, err = run_cli(
        capsys, ["--backend", "torch", "--dataset", "synthetic", "--store", str(tmp_path)]
    )
    assert code == 2 and "KBENCH_PYTHON_TORCH=" in err and "no such file" in err


def test_missing_data_suggests_synthetic(capsys, tmp_path, monkeypatch):
    from kbench.datasets import sources

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KBENCH_OFFLINE", "1")
    monkeypatch.setattr(sources, "DEBIAN_FASHION_MNIST", tmp_path / "none")

    def not_prepared(name, *args, **kwargs):
        # what the tensorflow-datasets reader (a TensorFlow process) says of a set it lacks;
        # test_env_and_demo's demo test runs the real reader
        raise sources.TfdsUnavailable(f"{name}: not prepared")

    monkeypatch.setattr(sources, "from_tfds", not_prepared)
    out = tmp_path / "out"
    code, err = run_cli(capsys, ["--backend", "jax", "--store", str(out)])
    assert code == 2 and "--dataset synthetic" in err
    assert not out.exists()


def test_help_teaches_with_examples(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert info.value.code == 0
    for text in ("--backend", "tensorflow, jax, torch, torch-native, mxnet", "examples:"):
        assert text in out
