"""Issue 31: ``kbench exec`` on the scripts people actually have (tests/user_scripts/,
written here in the styles of Keras' examples, keras-io guides and TensorFlow's
tutorials), and the fast checks of each case the issue found.

The corpus runs in one runner session (the engine of ``kbench exec``: one process per
script and backend), each script on the backend its case needs, not every script on
every backend: eleven framework processes in all, about two minutes on two cores.
The user's HOME is a folder of the test's, with a Fashion-MNIST-shaped dataset cache
in ``~/.keras/datasets`` (offline: nothing is downloaded).
"""

from __future__ import annotations

import gzip
import logging
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, require_backends

from kbench.exec.environment import ExecConfig, link_datasets, user_datasets
from kbench.exec.runner import MIN_MEASURED_STEPS, ExecRunner, judge, observe
from kbench.exec.watch import LogKeeper, ScriptOutcome, readable
from kbench.results.result import RunResult
from kbench.run.engine import LogWriter
from kbench.run.protocol import show_progress
from kbench.views import tables

pytestmark = pytest.mark.own_processes("the user's own script, run as the user runs it")

SCRIPTS = ROOT / "tests" / "user_scripts"
TRAIN_SAMPLES, TEST_SAMPLES = 320, 64


def fake_fashion_mnist(datasets: Path) -> None:
    """The four files ``keras.datasets.fashion_mnist.load_data()`` reads (Keras 3 and
    2.2.4), in their idx format, small."""
    folder = datasets / "fashion-mnist"
    folder.mkdir(parents=True)
    rng = np.random.RandomState(0)
    for prefix, count in (("train", TRAIN_SAMPLES), ("t10k", TEST_SAMPLES)):
        labels = rng.randint(0, 10, size=count).astype(np.uint8)
        images = rng.randint(0, 256, size=(count, 28, 28)).astype(np.uint8)
        with gzip.open(folder / f"{prefix}-labels-idx1-ubyte.gz", "wb") as f:
            f.write(bytes(8) + labels.tobytes())
        with gzip.open(folder / f"{prefix}-images-idx3-ubyte.gz", "wb") as f:
            f.write(bytes(16) + images.tobytes())


# ---- fast: each case on its own ---------------------------------------------------


def test_case1_the_users_dataset_cache_is_seen_read_only(tmp_path, monkeypatch):
    cache = tmp_path / "user" / ".keras" / "datasets"
    fake_fashion_mnist(cache)
    (cache / "mnist.npz").write_bytes(b"npz")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.delenv("KERAS_HOME", raising=False)
    assert user_datasets() == cache
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "elsewhere"))  # the user's own
    assert user_datasets() == tmp_path / "elsewhere" / "datasets"
    run_home = tmp_path / "run" / "keras_home"
    assert link_datasets(run_home, cache) == str(cache)
    seen = run_home / "datasets" / "fashion-mnist" / "t10k-labels-idx1-ubyte.gz"
    original = cache / "fashion-mnist" / seen.name
    assert seen.is_symlink() and seen.read_bytes() == original.read_bytes()
    assert (run_home / "datasets" / "mnist.npz").read_bytes() == b"npz"
    # a download lands in the run's own folder, never in the user's cache
    assert not (run_home / "datasets" / "fashion-mnist").is_symlink()
    (run_home / "datasets" / "fashion-mnist" / "new.gz").write_bytes(b"x")
    assert not (cache / "fashion-mnist" / "new.gz").exists()
    assert link_datasets(tmp_path / "run2", tmp_path / "none") is None


JAX_FAILURE = """\
first model trained
Traceback (most recent call last):
  File "/home/u/fails.py", line 31, in <module>
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)
  File "/work/kbench/exec/instrument.py", line 180, in wrapper
    return original(self, *args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
TypeError: TensorFlowStyle.train_step() takes 2 positional arguments but 3 were given
--------------------
For simplicity, JAX has removed its internal frames from the traceback of the following \
exception. Set JAX_TRACEBACK_FILTERING=off to include these.
"""


def test_case4_the_reason_is_the_exception_line_of_the_last_traceback(tmp_path):
    keeper = LogKeeper(LogWriter.open(tmp_path / "run.log"), limit=10_000)
    for piece in (JAX_FAILURE[:50], JAX_FAILURE[50:300], JAX_FAILURE[300:]):
        keeper.feed(piece.encode())
    keeper.close()
    assert keeper.exception.startswith("TypeError: TensorFlowStyle.train_step() takes 2")
    outcome = ScriptOutcome(returncode=1, timed_out=False, log_tail=list(keeper.tail),
                            exception=keeper.exception)  # fmt: skip
    config = ExecConfig("jax", ("python", "fails.py"), cwd=str(tmp_path))
    verdict = judge(outcome, config)
    assert verdict.reason.startswith("the command exited with code 1: TypeError: ")
    assert "JAX has removed" not in verdict.reason
    # no traceback: the last line, as before
    outcome = ScriptOutcome(returncode=2, timed_out=False, log_tail=["usage: x", "bad flag"])
    assert judge(outcome, config).reason.endswith(": bad flag")


def batches(count: int, stage: str = "train", size: int = 32, **fields):
    return [
        {"event": "batch", "stage": stage, "batch": i, "t0": float(i), "t1": i + 0.5,
         "size": size, **fields}
        for i in range(count)
    ]  # fmt: skip


def test_case6_a_measurement_of_too_few_steps_is_flagged_with_its_count():
    events = [{"event": "fit_begin", "t": 0.0, "call": 0},
              *batches(2, call=0, epoch=0)]  # fmt: skip
    observed = observe(events, warmup_steps=5)
    assert observed["measured_steps"] == 1 and observed["warmup_steps"] == 1
    note = observed["measurement_note"]
    assert "1 measured step" in note and "cut from 5 to 1" in note and "--warmup-steps" in note
    enough = observe(
        [{"event": "fit_begin", "t": 0.0}, *batches(5 + MIN_MEASURED_STEPS, call=0, epoch=0)], 5
    )
    assert "measurement_note" not in enough
    # the run table shows the count and no spread beside a figure of one step
    result = fake_exec_result(observed)
    row = tables.run_table([result]).splitlines()[2]
    assert "1 step(s): too short" in row and "p10-p90" not in row
    assert "too short to mean much" in tables.run_table([result])  # the warning line


def test_case7_predict_without_fit_is_measured_as_inference():
    later = [dict(b, t0=b["t0"] + 10, t1=b["t1"] + 10) for b in batches(8, "predict", call=1)]
    events = [{"event": "predict_begin", "t": 0.0},
              *batches(4, stage="predict", call=0), {"event": "predict_end", "t": 4.0},
              {"event": "predict_begin", "t": 10.0}, *later,
              {"event": "predict_end", "t": 20.0},
              {"event": "model", "t": 0.0, "params": 42, "backend": "jax"}]  # fmt: skip
    observed = observe(events, warmup_steps=2)
    assert observed["measured_stage"] == "predict" and observed["predict_calls"] == 2
    assert observed["measured_steps"] == 12 - 2 and observed["params"] == 42
    # 2 + 8 batches over 2 s (call 1) + 7.5 s (call 2): the time between calls left out
    assert observed["images_per_sec"] == pytest.approx(10 * 32 / 9.5)
    assert "measurement_note" not in observed
    # keras-mxnet: predict takes no callbacks, each call is one timed step
    mxnet = [{"event": "predict_begin", "t": 0.0, "samples": 100},
             {"event": "predict_end", "t": 2.0},
             {"event": "predict_begin", "t": 3.0, "samples": 100},
             {"event": "predict_end", "t": 4.0}]  # fmt: skip
    observed = observe(mxnet, warmup_steps=5)
    assert observed["images_per_sec"] == pytest.approx(100.0) and observed["measured_steps"] == 1


def fake_exec_result(observed, status="ok", config=None) -> RunResult:
    from kbench.exec.runner import script_document, training_metrics

    metrics = {"exit_code": 0, "images_per_sec": None, "test_accuracy": None,
               **training_metrics(observed)}  # fmt: skip
    config = config or ExecConfig("jax", ("python", "t.py")).to_dict()
    result = script_document(
        config, config["name"], observed, run_id="r", started_at=0.0, ended_at=1.0,
        interpreter="python", process_env={}, keras_json={}, metrics=metrics,
        sampled=None, framework={"name": "jax", "warnings": [observed.get("measurement_note")]
                                 if observed.get("measurement_note") else []},
    )  # fmt: skip
    if status != "ok":
        data = result.to_dict()
        data.update(status=status, reason="the command exited with code 1: TypeError: x")
        result = RunResult.from_dict(data)
    return result


def test_case8_readable_logs_tables_and_a_script_that_chose_its_backend():
    # ANSI colours, \r and \b of a progress bar, as a terminal would have left them
    bar = "\x1b[1m1/4\x1b[0m \x1b[32m━\x1b[0m\r\x1b[1m4/4\x1b[0m \x1b[32m━━━━\x1b[0m - loss: 0.1"
    assert readable(bar) == "4/4 ━━━━ - loss: 0.1"
    assert readable("abc\b\bX") == "aXc" and readable("plain") == "plain"
    # a failed run that measured before it failed shows its figure, marked partial
    events = [{"event": "fit_begin", "t": 0.0}, *batches(20, call=0, epoch=0)]
    failed = fake_exec_result(observe(events, 5), status="failed")
    row = tables.run_table([failed]).splitlines()[2]
    assert "FAILED" in row and "(partial)" in row and "p10-p90" in row
    # accuracy shown with the name the script gave it
    regression = observe([*events, {"event": "evaluate_end", "t": 30.0,
                                    "result": {"loss": 0.3, "acc": 0.25}}], 5)  # fmt: skip
    assert "0.250 (acc)" in tables.run_table([fake_exec_result(regression)])
    # the setting column: the script's arguments, not the interpreter and folder
    assert tables.setting_cell(["/env/bin/python", "-u", "/x/train.py", "--epochs", "1"],
                               "command") == "--epochs 1"  # fmt: skip
    assert tables.setting_cell("/home/u/projects/mnist", "cwd") == "mnist"
    assert tables.setting_cell(["a", "b"]) == "a b"
    # a script that picked torch when jax was asked is filed under torch, and said
    observed = observe([*events, {"event": "model", "t": 0.0, "backend": "torch"}], 5)
    moved = fake_exec_result(observed)
    assert moved.config["backend"] == "torch" and moved.config["backend_requested"] == "jax"


# ---- slow: the corpus ---------------------------------------------------------------

# (script, backend, its arguments, settings): each case once
CORPUS = [
    ("functional.py", "torch", [], {}),
    ("subclassed.py", "tensorflow", [], {}),
    ("custom_train_step.py", "torch", [], {}),
    ("several_fits.py", "jax", [], {}),
    ("inference_only.py", "jax", [], {}),
    ("tutorial.py", "tensorflow", [], {}),
    ("generator.py", "torch", [], {}),
    ("keras2_fashion.py", "mxnet", [], {}),
    ("keras2_fashion.py", "mxnet", [], {"instrument": False, "name": "keras2 uninstrumented"}),
    ("own_backend.py", "jax", [], {}),
    ("fails_in_train_step.py", "jax", [], {}),
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    require_backends("tensorflow", "jax", "torch", "mxnet")
    work = tmp_path_factory.mktemp("corpus")
    home = work / "home"
    fake_fashion_mnist(home / ".keras" / "datasets")
    configs = [
        ExecConfig(backend, ("python", str(SCRIPTS / script), *args), cwd=str(work),
                   timeout_s=300, warmup_steps=2, **settings)
        for script, backend, args, settings in CORPUS
    ]  # fmt: skip
    epochs, shown = {}, []
    handler = logging.Handler()
    handler.emit = lambda record: shown.append(record.getMessage())  # type: ignore

    def progress(config, event):
        epochs.setdefault(config.name, []).append(event)
        show_progress(config, event)

    logger = logging.getLogger("kbench")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    started = time.monotonic()
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("HOME", str(home))
            patch.delenv("KERAS_HOME", raising=False)
            results = ExecRunner(output_dir=work / "store", on_progress=progress).run_all(configs)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    print(f"\ncorpus: {len(configs)} runs in {time.monotonic() - started:.0f} s")
    print(tables.run_table(results))
    named = {r.config["name"]: r for r in results}
    return named, epochs, shown, work


def log_of(corpus, name: str) -> str:
    named, _, _, work = corpus
    return (work / "store" / "logs" / f"{named[name].run_id}.log").read_text()


def own_timing(text: str) -> float:
    return float(re.findall(r"own timing: .*?([\d.]+) samples/s", text)[-1])


@pytest.mark.slow
def test_corpus_training_scripts_report_status_img_s_params_backend_and_epochs(corpus):
    named, epochs, shown, _ = corpus
    expected = {  # script: (backend, params)
        "functional.py": ("torch", 64 * 128 + 128 + 136 * 64 + 64 + 64 * 10 + 10),
        "subclassed.py": ("tensorflow", 32 * 64 + 64 + 64 * 64 + 64 + 64 * 4 + 4),
        "custom_train_step.py": ("torch", 32 * 32 + 32 + 32 + 1),
        "several_fits.py": ("jax", 16 * 32 + 32 + 32 + 1),
        "keras2_fashion.py": ("mxnet", 784 * 32 + 32 + 32 * 10 + 10),
    }
    for name, (backend, params) in expected.items():
        result = named[name]
        assert result.ok, (name, result.reason)
        assert result.metrics["images_per_sec"] > 0, name
        assert result.model["params"] == params, name
        assert result.environment["framework"]["keras_backend_reported"] == backend, name
        assert epochs.get(name), f"{name}: no epoch line"
        assert not result.metrics.get("instrumentation_errors"), name
    assert any("epoch 2/2, loss" in line for line in shown)
    assert named["several_fits.py"].metrics["fit_calls"] == 2
    assert named["several_fits.py"].metrics["evaluate_calls"] == 2
    assert named["several_fits.py"].metrics["predict_calls"] == 1
    assert named["several_fits.py"].metrics["test_accuracy_metric"] == "acc"


@pytest.mark.slow
def test_corpus_case3_a_subclassed_model_keeps_its_facts_on_tensorflow(corpus):
    result = corpus[0]["subclassed.py"]
    framework = result.environment["framework"]
    assert result.model["keras_name"] == "my_model"
    assert framework["keras_version"] and framework["keras_backend_reported"] == "tensorflow"
    assert "params: 6532" in log_of(corpus, "subclassed.py")


@pytest.mark.slow
def test_corpus_case1_keras_datasets_come_from_the_users_cache(corpus):
    named, _, _, work = corpus
    for name in ("tutorial.py", "keras2_fashion.py"):
        result = named[name]
        assert result.ok, (name, result.reason)
        assert f"({TRAIN_SAMPLES}, 28, 28)" in log_of(corpus, name) or name != "tutorial.py"
        assert "Downloading" not in log_of(corpus, name)
    tutorial = named["tutorial.py"]
    assert (
        str(work / "home" / ".keras" / "datasets")
        in tutorial.environment["framework"]["keras_datasets"]
    )
    # tf.data: no batch sizes for callbacks, so the reason instead of a figure
    assert tutorial.metrics["images_per_sec"] is None
    assert "data set or generator" in tutorial.metrics["images_per_sec_reason"]
    assert "n/a: batch sizes unknown" in tables.run_table([tutorial])
    assert tutorial.metrics["epochs"] == 2 and 0 <= tutorial.metrics["test_accuracy"] <= 1
    generator = named["generator.py"]
    assert generator.ok and generator.metrics["images_per_sec"] is None
    assert generator.metrics["measured_steps"] == 40 - 2


@pytest.mark.slow
def test_corpus_case5_no_instrument_runs_keras_mxnet(corpus):
    result = corpus[0]["keras2 uninstrumented"]
    assert result.ok, result.reason
    assert result.metrics["note"].startswith("--no-instrument")
    assert "Test accuracy:" in log_of(corpus, "keras2 uninstrumented")


@pytest.mark.slow
def test_corpus_case7_an_inference_only_script_is_measured(corpus):
    result = corpus[0]["inference_only.py"]
    m = result.metrics
    assert result.ok and m["measured_stage"] == "predict" and m["predict_calls"] == 2
    assert m["images_per_sec"] > 0 and m["measured_steps"] == 64 - 2
    assert result.model["params"] == 64 * 256 + 256 + 256 * 10 + 10
    own = own_timing(log_of(corpus, "inference_only.py"))
    print(f"inference_only.py: kbench {m['images_per_sec']:,.0f} img/s, script {own:,.0f}")
    assert 0.2 < m["images_per_sec"] / own < 5  # the order of magnitude: a busy machine


@pytest.mark.slow
def test_corpus_functional_img_s_agrees_with_the_scripts_own_timing(corpus):
    result = corpus[0]["functional.py"]
    own = own_timing(log_of(corpus, "functional.py"))
    print(f"functional.py: kbench {result.metrics['images_per_sec']:,.0f} img/s, script {own:,.0f}")
    assert 0.2 < result.metrics["images_per_sec"] / own < 5  # the order of magnitude


@pytest.mark.slow
def test_corpus_case4_and_8_a_failure_in_train_step(corpus):
    result = corpus[0]["fails_in_train_step.py"]
    assert result.status == "failed"
    assert "TypeError: " in result.reason and "train_step()" in result.reason, result.reason
    assert "JAX has removed" not in result.reason
    assert result.metrics["images_per_sec"] > 0  # the first model's fit, measured
    row = next(line for line in tables.run_table([result]).splitlines() if "FAILED" in line)
    assert "(partial)" in row
    # every kbench file a traceback names still exists (not the run's temporary links)
    text = log_of(corpus, "fails_in_train_step.py")
    files = re.findall(r'File "([^"]+)"', text)
    assert any("instrument.py" in f for f in files), text[-2000:]
    assert [f for f in files if "kbench" in f and not os.path.exists(f)] == []


@pytest.mark.slow
def test_corpus_case8_a_script_that_picks_its_backend_is_filed_under_it(corpus):
    result = corpus[0]["own_backend.py"]
    assert result.ok and result.config["backend"] == "torch"
    assert result.config["backend_requested"] == "jax"
    assert any("reported backend 'torch', not 'jax'" in w for w in result.warnings)


@pytest.mark.slow
def test_corpus_case8_a_progress_bar_log_has_a_readable_copy(corpus):
    named, _, _, work = corpus
    result = named["tutorial.py"]  # Keras' progress bar: colours, \r and \b
    logs = work / "store" / "logs"
    assert "\x1b[" in log_of(corpus, "tutorial.py")  # the raw log, as printed
    text = (logs / result.metrics["log"]["readable"]).read_text()
    assert "\x1b[" not in text and "\r" not in text and "\b" not in text
    assert re.search(r"^10/10 ━+ .*loss: ", text, re.M), text[-1000:]
    assert not any("\x1b" in line for line in result.metrics["log_tail"])
    assert named["functional.py"].metrics["log"]["readable"] is None  # verbose=2: plain
