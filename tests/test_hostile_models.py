"""Issue 30, the user's model and comparisons: what a careless or hostile model file, a
crafted ``.keras``, or a store of unlike runs did, and what kbench does now.

- Ratios only between like runs: an edited model file, a replaced ``.npz``, three
  ``net.py`` files, a model whose layers depend on the backend (case 3).
- A ``.py`` model whose output is not one unit per class (case 4), a regression
  ``.keras``, ``NUM_CLASSES`` 0 or 1 (case 6), crafted ``config.json`` and hook values
  (case 7): refused with what was expected, what was received and the fix.
- Markdown that escapes user-given names, valid model files kbench misread, a comma
  inside a model's path (case 10). The custom layer under mxnet (case 10) is one of
  tests/test_user_model.py's refusals, in its sweep's mxnet worker.

Fast tests call kbench's own functions on result documents and files written here; the
slow one starts one jax and one torch worker.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any, Dict, Optional

import pytest
from conftest import dump, require_backends, run_kbench

from kbench import cli
from kbench.backends.keras_mxnet import keras224_gap
from kbench.cli.app import build_parser
from kbench.results.analysis import compare
from kbench.results.config import ConfigError, RunConfig
from kbench.results.result import RunResult
from kbench.views.report import Comparison
from kbench.views.tables import (
    comparison_tables,
    model_labels,
    parameter_mismatches,
    run_table,
)
from kbench_models import spec_for
from kbench_models.user import WrongOutput, check_output, split_references

MODELS_DIR = Path(__file__).resolve().parent / "user_models"
SHA_A, SHA_B = "ab12" * 16, "cd34" * 16


def result(
    backend: str,
    model: str = "/home/me/proj/net.py:build",
    *,
    sha: Optional[str] = SHA_A,
    params: Optional[int] = 7_850,
    shape=(28, 28, 1),
    ips: float = 100.0,
    dataset: str = "synthetic",
    data: Optional[Dict[str, Any]] = None,
    status: str = "ok",
    repeat: int = 0,
) -> RunResult:
    """A result document as the runner writes one for a user model."""
    source = {"path": model.rpartition(":")[0], "function": "build", "sha256": sha}
    return RunResult(
        run_id=f"{backend}-{sha}-{params}-{repeat}", status=status,
        config={"backend": backend, "model": model, "dataset": dataset, "batch_size": 32,
                "repeat": repeat, "mode": "train"},
        started_at="t", wall_time_s=1.0, environment={},
        data={"synthetic": dataset == "synthetic", "input_shape": list(shape), **(data or {})},
        model={"name": model, "source": source, **({"params": params} if status == "ok" else {})},
        metrics={"images_per_sec": ips, "test_accuracy": 0.9, "epoch_time_s": [1.0],
                 "first_step_s": 0.5, "step_time_s": {"p50": 0.1},
                 "images_per_sec_per_step": {"p10": ips, "p90": ips}} if status == "ok" else {},
        reason=None if status == "ok" else "boom",
    )  # fmt: skip


# --------------------------------------------------------------------------- case 3


def test_an_edited_model_file_is_compared_apart_with_the_reason():
    """Before: one row, x1.47 between 7,850 and 669,706 parameters."""
    old = result("jax", params=7_850, ips=100.0)
    new = result("torch", sha=SHA_B, params=669_706, ips=147.0)
    groups = compare([old, new])
    assert len(groups) == 2 and all(len(g.rows) == 1 for g in groups)
    first = groups[0].apart[0]
    assert "model file changed: sha256 ab12ab12.. vs cd34cd34.." in first
    assert "parameters 7,850 vs 669,706" in groups[0].apart
    text = comparison_tables([old, new])
    assert "x1.47" not in text and "model file changed" in text
    # the study tables tell the two rows apart
    rows = Comparison.of([old, new]).tables[0].rows
    assert rows[0][:2] != rows[1][:2] and "7,850 parameters" in rows[0][1]


def test_a_replaced_npz_is_compared_apart_with_the_reason():
    """Before: x0.75 between 28x28x1 and 64x64x3 inputs."""
    dataset = "npz:/home/me/data.npz"
    small = result("jax", dataset=dataset, data={"sha256": "11" * 32, "num_classes": 10})
    large = result("torch", dataset=dataset, shape=(64, 64, 3), ips=75.0,
                   data={"sha256": "22" * 32, "num_classes": 10})  # fmt: skip
    groups = compare([small, large])
    assert len(groups) == 2
    assert groups[0].apart == [
        "input 28x28x1 vs 64x64x3", "data file changed: sha256 11111111.. vs 22222222.."
    ]  # fmt: skip
    assert "x0.75" not in comparison_tables([small, large])


def test_a_folder_whose_classes_changed_is_compared_apart():
    dataset = "folder:/home/me/photos"
    listing = {"streamed": True, "source": "image folders /home/me/photos; classes a, b"}
    before = result("jax", dataset=dataset, data={**listing, "num_classes": 2})
    after = result(
        "torch",
        dataset=dataset,
        data={"streamed": True, "num_classes": 3, "source": "image folders; classes a, b, c"},
    )
    groups = compare([before, after])
    assert len(groups) == 2
    assert "classes 2 vs 3" in groups[0].apart


def test_like_runs_still_share_a_row_and_failed_runs_stay_beside_them():
    runs = [result("jax", ips=100.0), result("torch", ips=200.0), result("tensorflow",
            status="oom")]  # fmt: skip
    (group,) = compare(runs)
    assert group.apart == [] and group.rows[1].ratio.median == 2.0
    assert group.rows[2].statuses == {"oom": 1}


def test_three_files_of_one_name_get_labels_that_tell_them_apart():
    """Before: three rows labelled net.py:build."""
    models = [f"/home/me/{name}/net.py:build" for name in ("alpha", "beta", "gamma")]
    runs = [result("jax", model, sha=str(i) * 64) for i, model in enumerate(models)]
    labels = model_labels(g.model for g in compare(runs))
    assert list(labels.values()) == [
        "alpha/net.py:build",
        "beta/net.py:build",
        "gamma/net.py:build",
    ]
    assert len({row[0] for row in Comparison.of(runs).tables[0].rows}) == 3
    assert "alpha/net.py:build" in run_table(runs)
    # deeper paths take as many parts as tell them apart; one file keeps its name
    deep = model_labels(["/a/x/m/net.py:build", "/b/x/m/net.py:build", "/c/other.py:build"])
    assert deep == {"/a/x/m/net.py:build": "a/x/m/net.py:build",
                    "/b/x/m/net.py:build": "b/x/m/net.py:build",
                    "/c/other.py:build": "other.py:build"}  # fmt: skip


def test_backends_that_built_different_models_get_no_ratio():
    """Before: 6,370 vs 407,050 parameters in one kbench run gave x1.44 and exit 0."""
    runs = [result("torch", params=6_370, ips=100.0), result("jax", params=407_050, ips=144.0)]
    (group,) = compare(runs)
    torch, jax = group.rows
    assert torch.apart is None and jax.ratio is None
    assert jax.apart == "parameters 407,050 vs 6,370 on torch: no ratio"
    text = comparison_tables(runs)
    assert "x1.44" not in text and "parameters 407,050 vs 6,370 on torch" in text
    (line,) = parameter_mismatches(runs)
    assert "torch: 6,370; jax: 407,050" in line
    assert parameter_mismatches([result("torch"), result("jax")]) == []


def test_fresh_rounds_find_different_models_as_soon_as_two_backends_built_them():
    """Issue 53: a fresh-process comparison stops after the first run that built another
    model than an earlier backend's, with the counts and the fix; channels_first beside
    channels_last names --data-format channels_last."""
    from kbench.run.runner import models_of_results

    torch, jax = result("torch", params=628), result("jax", params=628)
    assert models_of_results([torch, jax, result("torch", params=628, repeat=1)]) is None
    mxnet = result("mxnet", params=612)
    mxnet.environment["keras_json"] = {"image_data_format": "channels_first"}
    torch.environment["keras_json"] = {"image_data_format": "channels_last"}
    said = models_of_results([torch, mxnet])
    assert said.startswith("the backends built models of different parameter counts "
                           "(torch: 628; mxnet: 612), so their speeds would compare "
                           "different models; stopped after 2 run(s)")  # fmt: skip
    assert "mxnet laid the images out channels_first" in said
    assert "--data-format channels_last" in said
    other = result("jax", "/home/me/proj/other.py:build", params=99)  # another comparison
    assert models_of_results([torch, other]) is None
    assert models_of_results([torch, result("jax", params=None, status="failed")]) is None


def test_kbench_run_fails_when_its_backends_built_different_models(tmp_path, capsys):
    """The README's promise, the same parameter count on every backend, checked where
    ``kbench run`` reports (kbench.cli.run_commands.report)."""
    from kbench.cli.run_commands import report

    runs = [result("torch", params=6_370), result("jax", params=407_050)]
    assert report(runs, tmp_path) != 0
    said = capsys.readouterr()
    assert "built models of different parameter counts" in said.out + said.err
    assert report([result("torch"), result("jax")], tmp_path) == 0


# --------------------------------------------------------------------------- case 4


class Built:
    """What check_output reads of a Keras 2.2 model (``output_shape``), for the rule
    itself; the slow test below checks a real Keras 3 model in a worker."""

    def __init__(self, output_shape):
        self.output_shape = output_shape


@pytest.mark.parametrize(
    "shape, classes, binary, expected",
    [
        ((None, 4), 4, False, None),
        ((None, 1), 2, True, None),  # one sigmoid output, binary_crossentropy
        ((None, 3), 10, False, "expected an output of 10 units, one per class of the data "
         "(labels 0 to 9); the model's output has 3. End the model with Dense(num_classes"),
        ((None, 12), 10, False, "the model's output has 12"),
        ((None, 1), 2, False, "LOSS = 'binary_crossentropy'"),
        ((None, 8, 8, 4), 4, False, "one output of shape (batch, classes)"),
        ([(None, 4), (None, 4)], 4, False, "it returns 2 output(s)"),
    ],
)  # fmt: skip
def test_output_width_must_be_the_class_count(shape, classes, binary, expected):
    if expected is None:
        check_output(Built(shape), "net.py:build", classes, binary)
        return
    with pytest.raises(WrongOutput) as info:
        check_output(Built(shape), "net.py:build", classes, binary)
    assert str(info.value).startswith("net.py:build: expected") and expected in str(info.value)


# --------------------------------------------------------------------------- cases 6, 7


def saved_config(units: Any = 4, activation: Any = "softmax", extra_layers=()) -> Dict:
    """A config.json as Keras 3 writes it for Input(8, 8, 1), Flatten, Dense."""
    layers = [
        {"class_name": "InputLayer", "config": {"batch_shape": [None, 8, 8, 1],
                                                "dtype": "float32", "name": "input"}},
        {"class_name": "Flatten", "config": {"name": "flatten"}},
        {"class_name": "Dense", "config": {"name": "dense", "units": units,
                                           "activation": activation}},
        *extra_layers,
    ]  # fmt: skip
    return {"module": "keras", "class_name": "Sequential", "config": {"layers": layers}}


def write_keras(path: Path, config: Any, raw: Optional[str] = None) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("config.json", json.dumps(config) if raw is None else raw)
    return path


def refusal(model: str) -> str:
    with pytest.raises(ConfigError) as info:
        RunConfig(backend="jax", model=model, dataset="synthetic")
    return str(info.value)


def test_a_regression_keras_model_is_refused(tmp_path):
    """Before: one linear output trained 'ok', loss 0.0000, accuracy 1.000."""
    path = write_keras(tmp_path / "regression.keras", saved_config(units=1, activation="linear"))
    message = refusal(str(path))
    assert "its output is one unit with activation 'linear', a regression" in message
    assert "Dense(1, activation='sigmoid') for two classes" in message
    # a sigmoid in an Activation layer after Dense(1) is a binary classifier
    sigmoid = {"class_name": "Activation", "config": {"name": "act", "activation": "sigmoid"}}
    binary = write_keras(tmp_path / "binary.keras", saved_config(1, "linear", [sigmoid]))
    spec = spec_for(str(binary))
    assert (spec.num_classes, spec.loss) == (2, "binary_crossentropy")


def mutated(change) -> Dict:
    config = saved_config()
    change(config)
    return config


INPUT = lambda c: c["config"]["layers"][0]["config"]  # noqa: E731
OUTPUT = lambda c: c["config"]["layers"][2]["config"]  # noqa: E731


@pytest.mark.parametrize(
    "config, expected",
    [
        ([1, 2], "expected config.json to be an object ({...}); received list [1, 2]"),
        (None, "expected config.json to be an object ({...}); received NoneType None"),
        ("model", "expected config.json to be an object ({...}); received str 'model'"),
        (mutated(lambda c: INPUT(c).update(batch_shape=None)), "names no input shape"),
        (mutated(lambda c: INPUT(c).update(batch_shape="8x8")),
         "expected the input's batch_shape to be a list"),
        (mutated(lambda c: OUTPUT(c).update(units="ten")),
         "expected the output layer's units (dense) to be a positive whole number; "
         "received str 'ten'"),
        (mutated(lambda c: OUTPUT(c).update(units="4")), "received str '4'"),
        (mutated(lambda c: c.pop("config")), "names no input shape"),
        (mutated(lambda c: c["config"].update(layers="Dense")),
         "expected config.layers to be a list of layers; received str 'Dense'"),
        (mutated(lambda c: c["config"]["layers"].append(7)),
         "expected layer 3 to be an object ({...}); received int 7"),
        (mutated(lambda c: INPUT(c).update(batch_shape=[None, 100_000, 100_000])),
         "makes samples of 10,000,000,000 values"),
    ],
)  # fmt: skip
def test_crafted_config_json_is_refused_with_a_reason(tmp_path, config, expected):
    """Before: AttributeError, TypeError or ValueError tracebacks."""
    message = refusal(str(write_keras(tmp_path / "crafted.keras", config)))
    assert expected in message, message
    assert "Traceback" not in message


HOOKS = "import keras\n{hooks}\n\ndef build(input_shape, num_classes):\n    pass\n"


@pytest.mark.parametrize(
    "hooks, expected",
    [
        ("NUM_CLASSES = 0", "NUM_CLASSES must be 2 or more; received 0. kbench trains "
         "classifiers"),
        ("NUM_CLASSES = 1", "NUM_CLASSES must be 2 or more; received 1"),
        ('NUM_CLASSES = "ten"', "NUM_CLASSES must be a whole number from 2 to 2,147,483,647 "
         "(e.g. NUM_CLASSES = 10); received str 'ten'"),
        ("NUM_CLASSES = -3", "NUM_CLASSES must be 2 or more; received -3"),
        ("NUM_CLASSES = True", "received bool True"),
        ("INPUT_SHAPE = (True, 28, 1)", "INPUT_SHAPE must be a tuple of positive integers"),
        ('INPUT_KIND = "tokens"\nINPUT_SHAPE = (250,)\nVOCABULARY_SIZE = 0',
         "VOCABULARY_SIZE must be 2 or more; received 0"),
        ('INPUT_KIND = "tokens"\nINPUT_SHAPE = (250,)\nVOCABULARY_SIZE = "x"',
         "VOCABULARY_SIZE must be a whole number from 2"),
        ("INPUT_SHAPE = (100000, 100000, 1)", "INPUT_SHAPE (100000, 100000, 1) makes samples "
         "of 10,000,000,000 values (37.3 GiB each as float32)"),
        ('INPUT_KIND = "sequence"\nINPUT_SHAPE = (28, 28, 1)',
         "INPUT_KIND 'sequence' takes an INPUT_SHAPE of 2 axes"),
        ('LOSS = "mse"', "LOSS must be one of 'sparse_categorical_crossentropy', "
         "'binary_crossentropy'"),
        ("NUM_CLASSES = {[1]: 2}", "NUM_CLASSES must be a plain literal"),
    ],
)  # fmt: skip
def test_bad_hook_values_are_refused(tmp_path, hooks, expected):
    """Before: tracebacks in the worker (numpy's), or NUM_CLASSES = 0 ran with 10."""
    path = tmp_path / "hooked.py"
    path.write_text(HOOKS.format(hooks=hooks))
    message = refusal(f"{path}:build")
    assert expected in message, message


def test_num_classes_zero_stops_kbench_run_with_exit_2(tmp_path, capsys):
    path = tmp_path / "zero.py"
    path.write_text(HOOKS.format(hooks="NUM_CLASSES = 0"))
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as info:
        cli.main(["run", "-b", "jax", "--model", str(path), "--dataset", "synthetic",
                  "--store", str(out)])  # fmt: skip
    assert info.value.code == 2
    assert "NUM_CLASSES must be 2 or more" in capsys.readouterr().err
    assert not out.exists()


# --------------------------------------------------------------------------- case 10


def test_compare_markdown_escapes_names_and_titles():
    """Before: compare.md held the model's <img onerror> and the title's <script> as HTML."""
    model = "/home/me/<img src=x onerror=alert(1)>.py:build"
    runs = [result("jax", model), result("torch", model, ips=50.0, status="failed")]
    markdown = Comparison.of(runs).markdown(title="<script>alert(1)</script>")
    assert "<script>" not in markdown and "<img" not in markdown
    assert "# &lt;script&gt;alert(1)&lt;/script&gt;" in markdown
    assert "| &lt;img src=x onerror=alert(1)&gt;.py:build" in markdown


@pytest.mark.parametrize("name", ["partial_build.py", "build_in_if.py"])
def test_valid_model_files_are_accepted(name):
    """Before: "defines no 'build'" for build = functools.partial(...) and for a
    def build inside an if."""
    config = RunConfig(backend="jax", model=str(MODELS_DIR / name), dataset="synthetic")
    assert config.model == f"{MODELS_DIR / name}:build"


def test_a_name_set_to_a_literal_is_no_function(tmp_path):
    path = tmp_path / "gone.py"
    path.write_text("def build(input_shape, num_classes):\n    pass\n\nbuild = None\n")
    assert "the file defines no 'build'" in refusal(f"{path}:build")


def test_a_comma_inside_an_existing_path_is_one_model(tmp_path):
    folder = tmp_path / "runs,2024"
    folder.mkdir()
    net = folder / "net.py"
    net.write_text("def build(input_shape, num_classes):\n    pass\n")
    assert split_references(f"{net}:build") == [f"{net}:build"]
    assert split_references(f"mlp,{net},lenet5") == ["mlp", str(net), "lenet5"]
    assert split_references("mlp, small_cnn,") == ["mlp", "small_cnn"]
    # where no such file exists, a comma separates as before
    assert split_references(f"{tmp_path}/a,b.py") == [f"{tmp_path}/a", "b.py"]


def test_kbench_run_reads_a_comma_inside_a_model_path_as_one_model(tmp_path):
    folder = tmp_path / "runs,2024"
    folder.mkdir()
    net = folder / "net.py"
    net.write_text("def build(input_shape, num_classes):\n    pass\n")
    args = build_parser().parse_args(["run", "-b", "jax", "--model", f"{net}:build"])
    assert args.model == [f"{net}:build"]


def test_keras224_gap_names_a_call_keras_refused(tmp_path):
    """A TypeError raised inside the Keras package (here a stand-in package on disk) is a
    call Keras 2.2.4 takes otherwise; one raised in the model's own code is not."""
    keras_root = tmp_path / "keras"
    keras_root.mkdir()
    (keras_root / "base_layer.py").write_text(
        "class Layer:\n"
        "    def add_weight(self, name, shape):\n"
        "        pass\n\n"
        "def call(method, **kwargs):\n"
        "    return method(**kwargs)\n"
    )
    namespace: Dict[str, Any] = {}
    source = keras_root / "base_layer.py"
    exec(compile(source.read_text(), str(source), "exec"), namespace)  # noqa: S102
    try:
        namespace["call"](namespace["Layer"]().add_weight, shape=(3,))
    except TypeError as err:
        gap = keras224_gap(err, str(keras_root))
        own = keras224_gap(err, str(tmp_path / "elsewhere"))
    assert gap.startswith("a default for the argument 'name' of `Layer.add_weight`")
    assert own is None


# --------------------------------------------------------------------------- slow


@pytest.mark.slow
def test_a_narrow_model_fails_on_jax_too_and_valid_files_run(home, tmp_path):
    """Case 4 on jax (before: ``ok``, accuracy 0.154, while tensorflow and torch failed),
    beside the two model files kbench used to refuse (case 10), in one warm worker per
    backend; found once, the narrow model is not started again on torch."""
    require_backends("jax", "torch")
    models = ",".join(
        f"{MODELS_DIR / name}:build" for name in ("narrow.py", "partial_build.py", "build_in_if.py")
    )
    done = run_kbench(
        ["run", "-b", "jax,torch", "--warm", "--model", models, "--dataset", "synthetic",
         "--steps", "1", "--warmup-steps", "1", "--batch-size", "8", "--sample-interval", "0",
         "--store", str(tmp_path / "out")],
        home, tmp_path / "out",
    )  # fmt: skip
    results = {
        Path(r.config["model"].rpartition(":")[0]).name: r
        for r in done.results()
        if r.config["backend"] == "jax"
    }
    (again,) = [r for r in done.results() if r.config["backend"] == "torch"
                and "narrow.py" in r.config["model"]]  # fmt: skip
    assert again.status == "failed" and "found by jax's run" in again.reason, again.reason
    assert again.wall_time_s == 0 and "the model's output has 3" in again.reason
    narrow = results["narrow.py"]
    assert narrow.status == "failed", dump(done)
    assert "expected an output of 4 units, one per class of the data" in narrow.reason
    assert "the model's output has 3" in narrow.reason
    assert results["partial_build.py"].ok and results["build_in_if.py"].ok, dump(done)
    assert done.returncode == 1
