"""A worker that crashes, dies by a signal, hangs or raises is a recorded failure; the
command goes on to the next backend and exits non-zero.

The crash and hang cases stand in a shell script for the worker's interpreter
(through KBENCH_PYTHON_TORCH), the way a broken environment or a dead process would
look to the runner; the raising case is a real worker whose model cannot be built.
"""

import time

import psutil
import pytest
from conftest import dump, require_backends, run_kbench

# a few tiny steps on synthetic data; COMMON: of the MLP
TINY = [
    "--dataset",
    "synthetic",
    "--steps",
    "3",
    "--warmup-steps",
    "1",
    "--batch-size",
    "8",
    "--train-samples",
    "32",
    "--test-samples",
    "16",
]
COMMON = ["--model", "mlp", *TINY]


def fake_interpreter(tmp_path, body):
    path = tmp_path / "fake-python"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.slow  # a real tensorflow worker
def test_crash_is_recorded_and_the_next_backend_runs_and_keeps_its_traceback(home, tmp_path):
    """A crashed worker (torch, a stand-in interpreter) is a failure with its log's tail;
    the command goes on to the next backend, a real tensorflow worker whose model cannot
    be built (a 3x3 input into small_cnn's convolutions), which is a failure that keeps
    the framework's traceback. (Merged: the crash test ran jax next, which trained.)"""
    require_backends("tensorflow")
    fake = fake_interpreter(tmp_path, 'echo "Fatal Python error: simulated" >&2; exit 3')
    completed = run_kbench(
        ["run", "--backend", "torch,tensorflow", "--repeats", "1", "--model", "small_cnn",
         "--input-shape", "3x3x1", *TINY],
        home,
        env={"KBENCH_PYTHON_TORCH": fake},
    )  # fmt: skip
    assert completed.returncode == 1, dump(completed)
    crashed, raised = completed.results()
    assert crashed.config["backend"] == "torch" and crashed.status == "failed"
    assert crashed.reason == "the worker exited with code 3 without reporting a result"
    assert "Fatal Python error: simulated" in crashed.error["log_tail"]
    assert crashed.metrics == {}
    assert "torch/small_cnn: failed" in completed.stdout
    # the next backend ran, in a real worker, and its exception is kept whole
    assert raised.config["backend"] == "tensorflow" and raised.status == "failed", dump(completed)
    assert raised.error["type"] and raised.error["message"]
    assert "Traceback" in raised.error["traceback"] and "conv" in raised.error["traceback"].lower()
    assert raised.reason.startswith(raised.error["type"])
    assert "tensorflow/small_cnn: failed" in completed.stdout


def test_killed_worker_is_recorded(home, tmp_path):
    fake = fake_interpreter(tmp_path, "kill -SEGV $$")
    completed = run_kbench(
        ["run", "--backend", "torch", *COMMON], home, env={"KBENCH_PYTHON_TORCH": fake}
    )
    assert completed.returncode == 1
    (result,) = completed.results()
    assert result.status == "failed" and "killed by signal SIGSEGV" in result.reason


@pytest.mark.serial  # a timeout: measured in wall-clock seconds
def test_hang_past_timeout_is_killed_with_its_children(home, tmp_path):
    child_pid = tmp_path / "child.pid"
    hung_python = fake_interpreter(tmp_path, f"sleep 300 & echo $! > {child_pid}; sleep 300")
    (tmp_path / "next").mkdir()
    next_python = fake_interpreter(tmp_path / "next", 'echo "the next backend ran" >&2; exit 3')
    started = time.monotonic()
    completed = run_kbench(
        ["run", "--backend", "torch,jax", "--repeats", "1", *COMMON, "--timeout", "3"],
        home,
        env={"KBENCH_PYTHON_TORCH": hung_python, "KBENCH_PYTHON_JAX": next_python},
    )
    assert completed.returncode == 1, dump(completed)
    hung, after = completed.results()
    assert hung.status == "timeout" and "3 s timeout" in hung.reason
    assert 3 <= hung.wall_time_s < 60
    # the sweep went on to the next backend once the hung one was stopped
    assert after.config["backend"] == "jax" and "the next backend ran" in after.error["log_tail"]
    assert time.monotonic() - started < 120
    # the worker's own child is gone too (dead; a zombie waiting for init to reap it
    # counts as gone)
    child = int(child_pid.read_text())
    deadline = time.monotonic() + 10
    while not gone(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gone(child), f"pid {child}, started by the hung worker, is still running"


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
