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

COMMON = [
    "--model",
    "mlp",
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


def fake_interpreter(tmp_path, body):
    path = tmp_path / "fake-python"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.slow  # a real jax worker
def test_crash_is_recorded_and_the_next_backend_runs(home, tmp_path):
    require_backends("jax")
    fake = fake_interpreter(tmp_path, 'echo "Fatal Python error: simulated" >&2; exit 3')
    completed = run_kbench(
        ["run", "--backend", "torch,jax", "--repeats", "1", *COMMON],
        home,
        env={"KBENCH_PYTHON_TORCH": fake},
    )
    assert completed.returncode == 1, dump(completed)
    crashed, ok = completed.results()
    assert crashed.config["backend"] == "torch" and crashed.status == "failed"
    assert crashed.reason == "the worker exited with code 3 without reporting a result"
    assert "Fatal Python error: simulated" in crashed.error["log_tail"]
    assert crashed.metrics == {}
    assert ok.config["backend"] == "jax" and ok.status == "ok"
    assert "torch/mlp: failed" in completed.stdout


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


@pytest.mark.slow  # a real tensorflow worker
def test_exception_in_a_real_worker_keeps_its_traceback(home):
    require_backends("tensorflow")
    completed = run_kbench(
        [
            "run",
            "--backend",
            "tensorflow",
            "--model",
            "small_cnn",
            "--dataset",
            "synthetic",
            "--input-shape",
            "3x3x1",
            "--steps",
            "2",
            "--train-samples",
            "16",
            "--test-samples",
            "8",
            "--batch-size",
            "8",
        ],
        home,
    )
    assert completed.returncode == 1
    (result,) = completed.results()
    assert result.status == "failed"
    assert result.error["type"] and result.error["message"]
    assert "Traceback" in result.error["traceback"] and "conv" in result.error["traceback"].lower()
    assert result.reason.startswith(result.error["type"])
