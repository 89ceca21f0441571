"""Hostile inputs and leftovers (issue 19, cases 5-9): bad sweep files and flags exit 2
with a message naming the place and the fix; a sweep's size is bounded; data sets are
prepared one group at a time; a killed kbench leaves nothing that the next one does
not clear or explain.

Most tests run the CLI in this process and stop at its checks, before any worker
starts. The leftover tests start the CLI as a process with a shell script standing in
for the torch worker's interpreter (KBENCH_PYTHON_TORCH); one, marked slow, starts a
real worker.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path

import pytest
from conftest import ROOT, dump, require_backends, run_kbench

from kbench import cli
from kbench.results.config import ConfigError, RunConfig
from kbench.run import leftovers

TINY = ["--model", "mlp", "--dataset", "synthetic", "--steps", "2", "--train-samples", "16",
        "--test-samples", "8"]  # fmt: skip
SMALL = "model: mlp, dataset: synthetic, steps: 2, warmup_steps: 1, batch_size: 8"


def fake_worker(tmp_path: Path, body: str) -> str:
    path = tmp_path / "fake-python"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def kbench_exit(capsys, args):
    """(exit code, stdout, stderr) of the CLI run in this process."""
    try:
        code = cli.main(args)
    except SystemExit as info:
        code = info.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def sweep_file(tmp_path: Path, text, name="s.yaml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


# case 5 and 6: sweep files --------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            b"name: a\nsettings: {backend: jax, model: mlp}\n# caf\xe9\n",
            "line 3: expected UTF-8 text; received the byte 0xe9|Save the file as UTF-8",
        ),
        (
            "name: a\nsettings: {dataset: synthetic}\nmatrix: {backend: [jax]}\n",
            "settings: model: expected every run to have a model; received none. Add it under "
            "settings (model: NAME) or matrix|one of: mlp, small_cnn",
        ),
        (
            "name: a\nsettings: {model: mlp}\n",
            "settings: backend: expected every run to have a backend|one of: tensorflow, jax",
        ),
        (
            "name: a\nsettings: {model: mlp}\ngroups:\n- settings: {backend: jax}\n"
            "- settings: {dataset: synthetic}\n",
            "groups[1].settings: backend: expected every run to have a backend|"
            "Add it under groups[1].settings",
        ),
        (
            f"name: a\nsettings: {{backend: jax, {SMALL}, input_shape: 28}}\n",
            "settings.input_shape: input_shape: expected a list of positive integers in a "
            "sweep file|received int 28",
        ),
        (
            "name: a\nsettings: {backend: jax, model: small_cnn, dataset: mnist, image_size: 5}\n",
            "settings.image_size: image_size: expected HEIGHTxWIDTH|[64, 64]|received int 5",
        ),
        (
            f"name: a\nsettings: {{backend: jax, {SMALL}, learning_rate: .nan}}\n",
            "settings.learning_rate: learning_rate: expected a positive number (finite); "
            "received nan",
        ),
        (
            f"name: a\nsettings: {{backend: jax, {SMALL}}}\nmatrix: {{timeout_s: [10, .inf]}}\n",
            "matrix.timeout_s[1]: timeout_s: expected a positive number of seconds|received inf",
        ),
        (
            f"name: a\nsettings: {{backend: jax, {SMALL}, sample_interval_s: .nan}}\n",
            "settings.sample_interval_s: sample_interval_s: expected a finite number",
        ),
        (
            f"name: a\nsettings: {{backend: jax, {SMALL}, threads: 2147483648}}\n",
            "settings.threads: threads: expected an integer from 1 to 4096",
        ),
        (
            f"name: a\nsettings: {{{SMALL}}}\nmatrix: {{backend: [torch, jax, torch]}}\n",
            "the run torch/mlp is declared twice: by matrix.backend[0] and by matrix.backend[2]",
        ),
    ],
    ids=[
        "not-utf8",
        "no-model",
        "no-backend",
        "no-backend-in-a-group",
        "input-shape-int",
        "image-size-int",
        "nan",
        "inf",
        "sampler-nan",
        "threads-overflow",
        "duplicate-backend",
    ],
)
def test_bad_sweep_file_exits_2_naming_the_place(capsys, tmp_path, text, expected):
    path = sweep_file(tmp_path, text)
    code, out, err = kbench_exit(capsys, ["sweep", str(path), "--dry-run"])
    assert code == 2, (out, err)
    assert "Traceback" not in err
    for part in expected.split("|"):
        assert part in err, err


def test_every_mistyped_setting_is_a_config_error():
    """No value of any type makes RunConfig raise anything but a ConfigError."""
    base = dict(backend="jax", model="mlp", dataset="synthetic", steps=2)
    values = [[1], {"a": 1}, "x", math.nan, math.inf, -math.inf, 2**40, -1, True, 1.5, []]
    for field in fields(RunConfig):
        for value in values:
            try:
                RunConfig.from_dict(dict(base, **{field.name: value}))
            except ConfigError:
                pass


# case 6 and 8, 9: flags ----------------------------------------------------------


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--learning-rate", "nan"], "--learning-rate: expected a finite number; received 'nan'"),
        (["--timeout", "nan"], "--timeout: expected a finite number"),
        (["--timeout", "1e20"], "--timeout: expected a positive number of seconds up to"),
        (["--sample-interval", "nan"], "--sample-interval: expected a finite number"),
        (["--duration", "inf"], "--duration: expected a finite number"),
        (["--gpu-memory-fraction", "nan"], "--gpu-memory-fraction: expected a finite number"),
        (["--threads", "2147483648"], "--threads: expected an integer from 1 to 4096"),
        (["--batch-size", "4294967296"], "--batch-size: expected an integer from 1 to 2147483647"),
        (["--seed", "-1"], "--seed: expected a non-negative integer"),
        (
            ["--backend", "torch,jax,torch"],
            "--backend/-b: expected each of the backends once; received 'torch' twice|--repeats",
        ),
        (["--model", "mlp,mlp"], "--model/-m: expected each of the models once"),
    ],
)
def test_bad_numbers_and_duplicates_exit_2(capsys, tmp_path, args, expected):
    out = tmp_path / "out"
    backend = [] if "--backend" in args else ["--backend", "jax"]
    code, _, err = kbench_exit(
        capsys, ["run", *backend, "--dataset", "synthetic", *args, "--store", str(out)]
    )
    assert code == 2, err
    for part in expected.split("|"):
        assert part in err, err
    assert not out.exists()


# case 7: a sweep's size --------------------------------------------------------------


def test_a_million_run_sweep_is_refused_before_it_is_built(capsys, tmp_path):
    seeds = ", ".join(map(str, range(1000)))
    batches = ", ".join(map(str, range(1, 501)))
    path = sweep_file(
        tmp_path,
        "name: big\nsettings: {model: mlp, dataset: synthetic, steps: 2}\nmatrix:\n"
        "  backend: [jax, torch]\n"
        f"  seed: [{seeds}]\n  batch_size: [{batches}]\n",
    )
    started = time.monotonic()
    code, _, err = kbench_exit(capsys, ["sweep", str(path), "--dry-run"])
    assert code == 2
    assert time.monotonic() - started < 10
    assert (
        "matrix: expected at most 10,000 runs; the file declares 1,000,000 (matrix: 2 backend "
        "x 1000 seed x 500 batch_size = 1,000,000). Shorten the matrix lists, or raise the "
        "limit with --max-runs 1000000." in err
    )


def test_max_runs_and_the_summary_of_a_large_dry_run(capsys, tmp_path):
    seeds = ", ".join(map(str, range(30)))
    path = sweep_file(
        tmp_path,
        f"name: mid\nrepeats: 2\nsettings: {{{SMALL}}}\n"
        f"matrix: {{backend: [jax, torch], seed: [{seeds}]}}\n",
    )
    code, _, err = kbench_exit(capsys, ["sweep", str(path), "--dry-run", "--max-runs", "100"])
    assert code == 2 and "expected at most 100 runs; the file declares 120" in err
    assert "x 2 repeats" in err
    out_dir = tmp_path / "out"
    code, out, err = kbench_exit(capsys, ["sweep", str(path), "--dry-run", "--store", str(out_dir)])
    assert code == 0, err
    assert "120 runs, 0 already done, 120 to run" in out
    assert "backend: 2 values: jax (60), torch (60)" in out
    assert "seed: 30 values: 0 (4), 1 (4)" in out and "and 18 more values" in out
    assert "repeat: 2 values: 0 (60), 1 (60)" in out
    assert "... and 110 more" in out
    assert len(out.splitlines()) < 30
    assert not out_dir.exists()


# case 9: --filter, compare --output ------------------------------------------------


def test_only_that_selects_nothing_names_the_values(capsys, tmp_path):
    path = sweep_file(
        tmp_path, f"name: a\nsettings: {{{SMALL}}}\nmatrix: {{backend: [jax, torch]}}\n"
    )
    code, _, err = kbench_exit(
        capsys, ["sweep", str(path), "--dry-run", "--filter", "backend=jaxx"]
    )
    assert code == 2
    assert (
        "--filter: expected a filter that keeps at least one of the file's 2 runs; "
        "--filter backend=jaxx keeps none. In this file backend has jax, torch." in err
    )
    code, out, err = kbench_exit(
        capsys,
        ["sweep", str(path), "--dry-run", "--filter", "backend=jax,jaxx",
         "--store", str(tmp_path / "out")],
    )  # fmt: skip
    assert code == 0 and "1 runs, 0 already done" in out
    assert "--filter backend=jaxx: no run of" in err and "its values: jax, torch" in err


def test_compare_markdown_into_a_missing_directory(capsys, home, tmp_path):
    store = tmp_path / "store"  # one (failed) run, from a stand-in worker
    fake = fake_worker(tmp_path, "exit 3")
    made = run_kbench(["run", "--backend", "torch", *TINY, "--store", str(store)], home,
                      env={"KBENCH_PYTHON_TORCH": fake})  # fmt: skip
    assert made.returncode == 1 and list(store.glob("*.json")), dump(made)
    target = tmp_path / "missing-dir" / "x.md"
    code, _, err = kbench_exit(capsys, ["compare", "--store", str(store), "--output", str(target)])
    assert code == 2
    assert "Traceback" not in err
    assert f"--output: expected a file in an existing directory; received '{target}'" in err
    assert f"mkdir -p {target.parent}" in err


# case 7 and 9, with processes: lazy data, leftovers --------------------------------


def test_data_sets_are_prepared_one_group_at_a_time(home, tmp_path):
    """Each run sees only its own data set in the session: the one before is deleted
    once no run still to come needs it, and the next is not there yet."""
    listing = tmp_path / "listing.txt"
    fake = fake_worker(tmp_path, f"(ls ../data; echo ---) >> {listing}; exit 3")
    path = sweep_file(
        tmp_path,
        f"name: lazy\nsettings: {{backend: torch, {SMALL}, train_samples: 16, "
        "test_samples: 8}\nmatrix: {seed: [0, 1, 2]}\n",
    )
    completed = run_kbench(
        ["sweep", str(path), "--store", str(tmp_path / "out")],
        home,
        env={"KBENCH_PYTHON_TORCH": fake},
    )
    assert completed.returncode == 1, dump(completed)  # the stand-in worker fails
    seen = [block.split() for block in listing.read_text().split("---")[:-1]]
    assert seen == [["group-1"], ["group-2"], ["group-3"]], seen


def test_the_working_directory_of_a_dead_kbench_is_removed(home, tmp_path):
    temp = tmp_path / "tmp"
    temp.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    left = temp / f"kbench-{dead.pid}-abcd1234"
    (left / "data").mkdir(parents=True)
    (left / "data" / "big.npz").write_bytes(b"0" * 1000)
    (left / leftovers.MARKER).write_text(f"{leftovers.TAG} {dead.pid}\n")  # as kbench made it
    alive = temp / f"kbench-{os.getpid()}-efgh5678"  # this test's own: still running
    alive.mkdir()
    other = temp / "kbench-notours"
    other.mkdir()
    fake = fake_worker(tmp_path, "exit 3")
    completed = run_kbench(
        ["run", "--backend", "torch", *TINY],
        home,
        env={"KBENCH_PYTHON_TORCH": fake, "TMPDIR": str(temp)},
    )  # fmt: skip
    assert completed.returncode == 1, dump(completed)
    assert not left.exists()
    assert alive.exists() and other.exists()
    assert f"removed {left}, left by kbench process {dead.pid}" in completed.stderr
    # the command's own directory carries its PID and is gone after it
    assert sorted(p.name for p in temp.iterdir()) == sorted([alive.name, other.name])


@pytest.mark.parametrize("parallel", [[], ["--distributed", "torch-ddp", "--workers", "2"]],
                         ids=["one worker", "data-parallel"])  # fmt: skip
def test_an_interrupted_run_leaves_a_document_beside_its_log(home, tmp_path, parallel):
    out = tmp_path / "out"
    started = tmp_path / "started"
    fake = fake_worker(tmp_path, f"touch {started}; sleep 60")
    command = [sys.executable, "-m", "kbench", "run", "--backend", "torch", "--model", "mlp",
               "--dataset", "synthetic", "--steps", "2", "--train-samples", "16",
               "--test-samples", "8", "--store", str(out), *parallel]  # fmt: skip
    env = dict(os.environ, HOME=str(home), KBENCH_PYTHON_TORCH=fake)
    process = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert started.exists(), process.stderr.read() if process.poll() is not None else ""
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 130
    (log,) = (out / "logs").glob("*.log")
    document = json.loads((out / "logs" / f"{log.stem}.interrupted.json").read_text())
    assert document["status"] == "interrupted"
    assert document["run_id"] == log.stem and document["log"] == log.name
    assert document["config"]["backend"] == "torch"
    assert "no result was stored" in document["reason"]
    assert not list(out.glob("*.json"))  # not a result: the run is not done


@pytest.mark.slow
@pytest.mark.own_processes("a worker whose parent dies")
def test_a_worker_stops_within_a_second_of_its_parent(home, tmp_path):
    """kill -9 of kbench: its real worker, mid-training, notices and ends. (Not serial:
    the worker runs on its pytest worker's core; a Keras-on-torch worker, beside three
    busy loops on two cores, ended 0.31 s after its parent.) Its first progress line comes
    after 10 s of training, and none follows before the kill: a line written to the dead
    parent's pipe would end the worker without its parent watch."""
    import psutil

    require_backends("torch-native")
    command = [sys.executable, "-m", "kbench", "run", "--backend", "torch-native", "--model",
               "mlp", "--dataset", "synthetic", "--steps", "100000", "--warmup-steps", "1",
               "--batch-size", "8", "--train-samples", "64", "--test-samples", "8",
               "--threads", "1", "--sample-interval", "0",
               "--store", str(tmp_path / "out")]  # fmt: skip
    env = dict(os.environ, HOME=str(home))
    parent = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        worker = None
        for line in parent.stderr:  # progress lines: the worker is training
            workers = [
                child
                for child in psutil.Process(parent.pid).children()
                if "kbench.run.worker" in " ".join(child.cmdline())
            ]
            if workers and "step" in line.lower():
                (worker,) = workers
                break
        assert worker is not None and worker.is_running()
        parent.kill()
        parent.wait()
        killed = time.monotonic()
        while time.monotonic() - killed < 5:
            try:
                if worker.status() == psutil.STATUS_ZOMBIE:  # dead, not yet reaped by init
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.05)
        else:
            worker.kill()
            pytest.fail("the worker outlived its parent by 5 s")
        took = time.monotonic() - killed
        assert took < 1.5, f"the worker ended {took:.2f} s after its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
