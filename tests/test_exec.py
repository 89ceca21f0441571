"""``kbench exec``: the user's own script under each backend, and kbench's
measurement as a library (kbench.callbacks.Throughput, kbench.measure.sample,
kbench.record).

The fast tests run scripts that import no framework (exit 1, a hang past a 3-s
timeout, no fit) through the real runner, sampler and store, in one session shared by
their assertions; the slow ones run a small Keras training script under tensorflow,
jax, torch and mxnet in one ``kbench exec`` call, and the library inside a plain
script.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import psutil
import pytest
from conftest import ROOT, dump, kbench_here, require_backends, run_kbench

from kbench.exec.environment import ExecConfig, memory_variables, resolve_command, script_name
from kbench.exec.runner import ExecRunner
from kbench.measure.keras_events import NO_TRAINING, summarize
from kbench.results.config import ConfigError
from kbench.results.store import ResultStore
from kbench.run import environments

pytestmark = pytest.mark.own_processes("the user's own script, run as the user runs it")

SCRIPTS = ROOT / "tests" / "user_scripts"
TRAIN = str(SCRIPTS / "train_fashion.py")
HANG = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
    "open('child.pid', 'w').write(str(child.pid))\n"
    "print('hanging', flush=True)\n"
    "time.sleep(120)\n"
)


# ---- fast: scripts without a framework, through the real runner --------------------


@pytest.fixture(scope="module")
def plain_runs(tmp_path_factory):
    """One runner session: a script that exits 1, one that hangs (with a child) past
    a 3-s timeout, one that never trains."""
    require_backends("jax")
    work = tmp_path_factory.mktemp("exec-plain")
    store = work / "store"
    configs = [
        ExecConfig("jax", ("python", "-c", "print('boom'); import sys; sys.exit(1)"),
                   name="exits1", cwd=str(work), sample_interval_s=0.1),
        ExecConfig("jax", ("python", "-c", HANG), name="hangs", cwd=str(work), timeout_s=3,
                   sample_interval_s=0.1),
        ExecConfig("jax", ("python", "-c", "import time; x = [0] * 10**6; time.sleep(0.5)"),
                   name="nofit", cwd=str(work), sample_interval_s=0.1, threads=1),
    ]  # fmt: skip
    results = ExecRunner(output_dir=store).run_all(configs)
    return {r.config["name"]: r for r in results}, store, work


def test_a_script_exiting_1_is_failed_with_its_code_and_log_tail(plain_runs):
    result = plain_runs[0]["exits1"]
    assert result.status == "failed"
    assert result.metrics["exit_code"] == 1
    assert "exited with code 1" in result.reason
    assert "boom" in result.error["log_tail"]


def test_a_hang_past_the_timeout_is_killed_with_its_whole_tree(plain_runs):
    result = plain_runs[0]["hangs"]
    assert result.status == "timeout", result.reason
    assert "3 s timeout" in result.reason
    assert 3 <= result.wall_time_s < 30
    child = int((plain_runs[2] / "child.pid").read_text())
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == "zombie"


def test_a_script_without_fit_is_ok_with_process_figures(plain_runs):
    result = plain_runs[0]["nofit"]
    assert result.ok, result.reason
    assert result.metrics["note"] == NO_TRAINING
    assert result.metrics["images_per_sec"] is None
    series = result.sampler["series"]
    assert len(series["t"]) >= 3 and max(v for v in series["process_rss_bytes"] if v) > 0
    assert result.metrics["memory"][0]["kind"] == "process_peak_rss"
    # --threads 1: pinned to one core, thread variables set and recorded
    framework = result.environment["framework"]
    assert framework["cpu_affinity"] is None or len(framework["cpu_affinity"]) == 1
    assert result.environment["process_env"]["OMP_NUM_THREADS"] == "1"
    assert result.environment["process_env"]["KERAS_BACKEND"] == "jax"


def test_exec_results_are_read_back_by_the_store(plain_runs):
    _, store, _ = plain_runs
    results = ResultStore(store).results()
    assert sorted(r.config["name"] for r in results) == ["exits1", "hangs", "nofit"]
    assert {r.kind for r in results} == {"exec"}
    assert (store / "logs").is_dir() and len(list((store / "logs").glob("*.log"))) == 3


def test_config_checks_name_the_flag():
    with pytest.raises(ConfigError, match="command"):
        ExecConfig("jax", ())
    with pytest.raises(ConfigError, match="backend.*Did you mean 'torch'"):
        ExecConfig("torhc", ("python", "x.py"))
    with pytest.raises(ConfigError, match="gpu_memory_fraction"):
        ExecConfig("jax", ("python", "x.py"), gpu_memory_fraction=1.5)
    assert script_name(("python", "-u", "train.py", "--epochs", "1")) == "train.py"
    assert script_name(("python", "-m", "pkg.train")) == "pkg.train"
    python = Path("/env/bin/python")
    assert resolve_command(("python", "t.py"), python) == ["/env/bin/python", "t.py"]
    assert resolve_command(("./run.sh",), python) == ["./run.sh"]


def test_memory_options_set_what_the_environment_can_and_say_what_it_cannot():
    variables, applied = memory_variables("jax", 0.5, True)
    assert variables == {
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5",
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
    }
    variables, applied = memory_variables("tensorflow", 0.5, True)
    assert variables == {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    assert applied["gpu_memory_fraction"].startswith("not applied")


def test_summary_excludes_the_warmup_of_the_first_fit():
    batches = [
        {"event": "batch", "stage": "train", "call": 0, "epoch": 0, "batch": i,
         "t0": float(i), "t1": i + 1.0, "size": 10}
        for i in range(6)
    ]  # fmt: skip
    events = [{"event": "fit_begin", "t": 0.0}, *batches,
              {"event": "epoch", "epoch": 0, "logs": {"loss": 0.5, "accuracy": 0.9}}]  # fmt: skip
    summary = summarize(events, warmup_steps=2)
    assert summary["measured_steps"] == 4
    assert summary["images_per_sec"] == pytest.approx(40 / 4.0)
    assert summary["final_train_loss"] == 0.5 and summary["epochs"] == 1
    assert summarize([], 5)["note"] == NO_TRAINING


def test_cli_records_a_failing_command_and_exits_1(home, tmp_path):
    require_backends("jax")
    store = tmp_path / "store"
    done = run_kbench(
        ["exec", "-b", "jax", "--store", str(store), "--", "python", "-c",
         "import sys; sys.exit(3)"],
        home,
    )  # fmt: skip
    assert done.returncode == 1, dump(done)
    [result] = done.results()
    assert result.status == "failed" and result.metrics["exit_code"] == 3
    assert "FAILED" in done.stdout


# ---- slow: real Keras under every backend --------------------------------------------

BACKENDS = ["tensorflow", "jax", "torch", "mxnet"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    require_backends(*BACKENDS)
    home = tmp_path_factory.mktemp("exec-home")
    store = home / "store"
    done = run_kbench(
        ["exec", "-b", ",".join(BACKENDS), "--warmup-steps", "2", "--store", str(store),
         "--", "python", TRAIN, "--samples", "256", "--batch-size", "32", "--epochs", "1"],
        home,
    )  # fmt: skip
    return done


@pytest.mark.slow
def test_four_backends_train_and_report_img_s(trained):
    assert trained.returncode == 0, dump(trained)
    results = {r.config["backend"]: r for r in trained.results()}
    assert sorted(results) == sorted(BACKENDS)
    for backend, result in results.items():
        m = result.metrics
        assert result.ok and result.kind == "exec", result.reason
        assert m["images_per_sec"] > 0 and m["measured_steps"] == 8 - 2
        assert m["epochs"] == 1 and m["batch_sizes"] == [32]
        assert result.model["params"] == 28 * 28 * 32 + 32 + 32 * 10 + 10
        assert len(result.sampler["series"]["t"]) > 2
        # the backend Keras in the child reported, from kbench and from the script itself
        assert result.environment["framework"]["keras_backend_reported"] == backend
        log = (trained.output_dir / "logs" / f"{result.run_id}.log").read_text()
        assert f"keras backend: {backend}" in log
        # the user's own callback still saw every batch beside kbench's
        assert "user callback batches: 8" in log
        assert 0 <= m["test_accuracy"] <= 1


@pytest.mark.slow
def test_exec_results_show_in_compare(trained, home):
    done = kbench_here(["compare", "--store", str(trained.output_dir)], home)
    assert done.returncode == 0, dump(done)
    assert "train_fashion.py" in done.stdout and "mxnet" in done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "mxnet"])
def test_library_callback_sampler_and_record_in_a_plain_script(tmp_path, backend):
    """Under Keras 3 and keras-mxnet: the script imports kbench from a folder on its
    PYTHONPATH (the mxnet environment has no kbench installed)."""
    require_backends(backend)
    store = tmp_path / "store"
    python_path = environments.import_root(tmp_path / "pythonpath")
    done = subprocess.run(
        [str(environments.interpreter_for(backend)), str(SCRIPTS / "library_use.py"), str(store)],
        env=dict(os.environ, KERAS_BACKEND=backend, KERAS_HOME=str(tmp_path),
                 PYTHONPATH=str(python_path)),
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    [result] = ResultStore(store).results()
    assert result.ok and result.config["backend"] == backend
    assert result.metrics["images_per_sec"] > 0 and result.metrics["epochs"] == 2
    assert result.metrics["measured_steps"] == 16 - 2
    assert result.model["params"] == 28 * 28 * 16 + 16 + 16 * 10 + 10
    assert len(result.sampler["series"]["t"]) >= 3
