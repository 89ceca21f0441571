"""The third hostile round's inputs (issue 54, items 11-13 and 15-20): files that would
hang a load, tools that answer badly, documents nested or sized to break a reader,
labels and fields that are not what a view expects, and wrong types at the Python API.

All fast: documents, stores and stand-in Slurm tools are made here by hand; the CLI is
called in this process; no framework is started.
"""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from conftest import ROOT, kbench_here
from test_store import result
from test_store_robustness import _unshare_works

import kbench
from kbench.datasets import npz, readers
from kbench.datasets.sources import DataUnavailable
from kbench.results.store import INDEX_NAME, ResultStore
from kbench.studies import published, slurm
from kbench.studies.sweep import SweepError, load_sweep
from kbench.views import tables

TINY = {"model": "mlp", "dataset": "synthetic", "steps": 2, "warmup_steps": 1,
        "train_samples": 64, "test_samples": 16}  # fmt: skip


def alias_bomb(top: str) -> str:
    """A 500-byte YAML whose aliases to aliases name 10^9 values, at ``top``."""
    lines = ["a0: &a0 [x,x,x,x,x,x,x,x,x,x]"]
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    return "\n".join([*lines, top.replace("BOMB", "*a8")]) + "\n"


# 11. a YAML alias bomb ---------------------------------------------------------------


def test_a_yaml_alias_bomb_is_refused_quickly(tmp_path):
    sweep = tmp_path / "bomb.yaml"
    sweep.write_text(alias_bomb("name: b\nsettings: {model: mlp}\nmatrix: {batch_size: BOMB}"))
    assert len(sweep.read_bytes()) < 600
    started = time.monotonic()  # before: it walked 10^9 values (hours)
    done = kbench_here(["sweep", str(sweep), "--store", str(tmp_path / "s"), "--dry-run"],
                       tmp_path, timeout=20)  # fmt: skip
    assert done.returncode == 2 and "matrix.batch_size" in done.stderr, done.stderr
    with pytest.raises(SweepError, match="at most 100,000 values once YAML's aliases"):
        load_sweep(sweep)
    study = tmp_path / "study.yaml"
    study.write_text(alias_bomb("name: toy\nhardware: BOMB"))
    with pytest.raises(published.StudyError, match="at most 100,000 values"):
        published.load_study(study)
    assert time.monotonic() - started < 10
    # an alias used often, within the limit, still reads; a cycle is too deep
    shared = "name: b\nsettings: {model: mlp, backend: jax}\n"
    shared += "matrix: {batch_size: &v [8, 16], epochs: *v}"
    (tmp_path / "shared.yaml").write_text(shared)
    assert len(load_sweep(tmp_path / "shared.yaml").runs) == 4
    (tmp_path / "cycle.yaml").write_text("name: b\ndescription: &c [*c]\n")
    with pytest.raises(SweepError, match="nested at most 32 deep"):
        load_sweep(tmp_path / "cycle.yaml")


# 12, 13. Slurm's tools answering what kbench does not expect ------------------------


def slurm_tools(folder: Path, sbatch: str, squeue: str = "echo '4242_0|COMPLETED|None|-|n1'"):
    """Stand-in sbatch, squeue, scancel and sacct (no accounting) in ``folder``; a
    ``squeue`` may read ``$0.calls``, the number of times it was called before."""
    folder.mkdir()
    count = 'n=$(cat "$0.calls" 2>/dev/null || echo 0); echo $((n + 1)) > "$0.calls"\n'
    tools = {"sbatch": sbatch, "squeue": count + squeue, "scancel": "exit 0", "sacct": "exit 1"}
    for name, body in tools.items():
        (folder / name).write_text(f"#!/bin/sh\n{body}\n")
        (folder / name).chmod(0o755)
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def slurm_sweep(tmp_path: Path, env, timeout: float = 60):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(yaml.safe_dump({"name": "s", "settings": dict(TINY, backend="torch")}))
    command = ["sweep", str(sweep), "--store", str(tmp_path / "store"), "--executor", "slurm",
               "--poll", "0.05"]  # fmt: skip
    return kbench_here(command, tmp_path, env=env, timeout=timeout)


def one_line_refusal(done) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    return done.stderr


def test_sbatch_that_prints_no_bare_job_id_is_refused(tmp_path):
    env = slurm_tools(tmp_path / "bin", "echo 'Submitted batch job 4242'")
    done = slurm_sweep(tmp_path, env, timeout=20)  # before: followed job "Submitted ..."
    assert "expected a job id (digits" in one_line_refusal(done)
    assert "'Submitted batch job 4242'" in done.stderr
    assert not list((tmp_path / "store").glob(".slurm/*/job.json"))


UNREACHABLE = "echo 'error: Unable to contact slurm controller (connect failure)' >&2; exit 1"


def test_slurm_tools_that_fail_end_in_one_line_or_are_asked_again(tmp_path, monkeypatch):
    env = slurm_tools(tmp_path / "bin", UNREACHABLE)
    message = one_line_refusal(slurm_sweep(tmp_path, env))  # before: a SlurmError traceback
    assert "sbatch" in message and "exited 1: error: Unable to contact slurm" in message
    # squeue failing twice while the job is followed: warned, asked again, followed on
    flaky = f'[ "$n" -lt 2 ] && {{ {UNREACHABLE}; }}; echo "4242_0|COMPLETED|None|-|n1"'
    env = slurm_tools(tmp_path / "bin2", "echo 4242", flaky)
    done = slurm_sweep(tmp_path, env)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("Unable to contact slurm controller") == 2
    assert "asking again (2 of 30)" in done.stderr and "all tasks ended" in done.stdout
    (recorded,) = ResultStore(tmp_path / "store").results()  # the run, with Slurm's reason
    assert recorded.error["type"] == "SlurmTaskEnded" and "COMPLETED" in recorded.reason
    # squeue that never answers: the follower ends in one line; the jobs go on
    monkeypatch.setattr(slurm, "FAILED_POLLS", 3)
    env = slurm_tools(tmp_path / "bin3", "echo 4243", UNREACHABLE)
    done = slurm_sweep(tmp_path / "bin3", env)  # its own sweep file and store there
    assert "3 times in a row; the jobs go on" in done.stderr.splitlines()[-1], done.stderr
    assert done.returncode == 2 and "Traceback" not in done.stderr


# 15. a document nested 200,000 brackets deep -----------------------------------------


def nested_store(folder: Path, depth: int) -> Path:
    """A store of two good runs and ``deep.json``, whose metrics hold a list nested
    ``depth`` deep."""
    store = ResultStore(folder)
    store.add(result("good1", "jax", 10.0))
    store.add(result("good2", "torch", 20.0))
    text = json.dumps(result("deep", "jax", 30.0).to_dict()).replace(
        '"test_accuracy": 0.5', '"x": ' + "[" * depth + "]" * depth
    )
    (folder / "deep.json").write_text(text)
    return folder


@pytest.mark.parametrize("depth", [200_000, 600])  # 600: read, but copying it recursed
def test_a_document_nested_too_deep_is_unreadable_and_skipped(tmp_path, depth, caplog):
    store = str(nested_store(tmp_path / "s", depth))
    commands = [["results", "--store", store],
                ["results", "--store", str(tmp_path / "m"), "--merge", store],
                ["compare", "--store", store],
                ["report", "--store", store, "--output", str(tmp_path / "r.html")]]  # fmt: skip
    for command in commands:  # before: RecursionError tracebacks
        done = kbench_here(command, tmp_path)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        assert "deep.json" in done.stderr and "nested at most 64 deep" in done.stderr
    assert {r.run_id for r in ResultStore(tmp_path / "m").results()} == {"good1", "good2"}
    with caplog.at_level(logging.WARNING, logger="kbench"):
        assert {r.run_id for r in kbench.load(store).runs} == {"good1", "good2"}
    assert "nested at most 64 deep" in caplog.text


# 16. npz bombs ---------------------------------------------------------------------


def declaring_npz(path: Path, shape) -> Path:
    """An .npz of small arrays but an x_train whose .npy header declares ``shape`` (uint8)."""
    small = {"y_train": np.zeros(4, np.int64), "x_test": np.zeros((4, 8), np.uint8),
             "y_test": np.zeros(4, np.int64)}  # fmt: skip
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "|u1", "fortran_order": False, "shape": shape}
    )
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x_train.npy", header.getvalue() + b"\0" * 64)
        for name, array in small.items():
            buffer = io.BytesIO()
            np.save(buffer, array)
            archive.writestr(f"{name}.npy", buffer.getvalue())
    return path


def test_npz_bombs_are_refused_before_their_arrays_are_read(tmp_path, monkeypatch):
    bomb = declaring_npz(tmp_path / "bomb.npz", (730 * 2**30 // 8, 8))
    assert bomb.stat().st_size < 4096
    with pytest.raises(DataUnavailable) as refused:  # before: MemoryError
        npz.inspect_npz(str(bomb))
    assert "declare 730.0 GiB once read (x_train 730.0 GiB" in str(refused.value)
    assert "at most 64.0 GiB" in str(refused.value)
    store = tmp_path / "store"
    done = kbench_here(["run", "--backend", "torch", "--model", "mlp", "--dataset",
                        f"npz:{bomb}", "--store", str(store)], tmp_path)  # fmt: skip
    assert done.returncode == 2 and "730.0 GiB" in done.stderr and "Traceback" not in done.stderr
    assert not store.exists()  # before any worker
    # deflated zeros: 64 KB on disk, 32 MiB once read, past a limit of 16 MiB
    inflating = tmp_path / "zeros.npz"
    np.savez_compressed(inflating, x_train=np.zeros((2**15, 1024), np.uint8),
                        y_train=np.arange(2**15) % 2, x_test=np.zeros((4, 1024), np.uint8),
                        y_test=np.arange(4) % 2)  # fmt: skip
    assert inflating.stat().st_size < 2**16
    monkeypatch.setattr(readers, "NPZ_MAX_BYTES", 16 * 2**20)
    with pytest.raises(DataUnavailable, match=r"x_train 32\.0 MiB.*at most 16\.0 MiB"):
        npz.inspect_npz(str(inflating))  # before: inflated, then read as a data set
    monkeypatch.setattr(readers.psutil, "virtual_memory", lambda: SimpleNamespace(available=2**20))
    monkeypatch.setattr(readers, "NPZ_MAX_BYTES", 64 * 2**30)
    with pytest.raises(DataUnavailable, match=r"1\.0 MiB of memory is free"):
        npz.inspect_npz(str(inflating))
    (tmp_path / "mnist").mkdir()  # Keras' mnist.npz, too, as a data directory holds it
    declaring_npz(tmp_path / "mnist" / "mnist.npz", (2**40,))
    with pytest.raises(readers.CorruptData, match="declare 1,024.0 GiB"):
        readers.keras_npz_images(tmp_path / "mnist" / "mnist.npz")


# 17. `$` in a label ---------------------------------------------------------------------


def test_dollars_in_labels_are_drawn_as_written(tmp_path):
    store = ResultStore(tmp_path / "s")
    for i, (backend, ips, batch) in enumerate(
        [("jax", 10.0, 32), ("torch", 20.0, 32), ("jax", 30.0, 64), ("torch", 50.0, 64)]
    ):
        run = result(f"r{i}", backend, ips, batch=batch, host="h$o$st")
        run.config["model"] = str(tmp_path / "exp$^$" / "net.py")  # mathtext: "^" alone
        store.add(run)
    output = tmp_path / "r.html"
    done = kbench_here(["report", "--store", str(store.directory), "--output", str(output)],
                       tmp_path)  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr  # before:
    assert output.read_text().count("data:image/png") >= 3  # ParseSyntaxException


# 18. a read-only store ---------------------------------------------------------------


def test_compare_and_report_on_a_read_only_store_warn_and_point_to_output(tmp_path):
    """For real: the store bind-mounted read-only in a private mount namespace."""
    why = _unshare_works(tmp_path)
    if why:
        pytest.skip(why)
    store = ResultStore(tmp_path / "s")
    store.add(result("a1", "jax", 10.0))
    store.add(result("b22", "torch", 20.0))
    kbench_command = f"cd {ROOT} && {sys.executable} -m kbench"
    command = (
        f"mount --bind {store.directory} {store.directory} && "
        f"mount -o remount,bind,ro {store.directory} && "
        f"{kbench_command} compare --store {store.directory}; echo exit $?; "
        f"{kbench_command} report --store {store.directory}; echo exit $?"
    )
    env = dict(os.environ, HOME=str(tmp_path))
    done = subprocess.run(["unshare", "-rm", "sh", "-c", command], capture_output=True,
                          text=True, timeout=300, env=env)  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr  # before: OSError [Errno 30]
    exits = [line for line in done.stdout.splitlines() if line.startswith("exit")]
    assert exits == ["exit 0", "exit 2"], done.stdout  # the tables shown; the report refused
    assert "compare.md: not written (Read-only file system); --output FILE" in done.stderr
    assert "--output: expected a file in a directory kbench may write" in done.stderr
    assert sorted(p.name for p in store.directory.iterdir()) == ["a1.json", "b22.json", INDEX_NAME]


# 19. a damaged tune.json ---------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "{}",
        "[]",
        '{"model": "m", "dataset": "d", "batch_size": 8, "seconds": 9, '
        '"budget_s": 1, "backends": 5}',
    ],  # fmt: skip
)
def test_a_damaged_tune_json_leaves_the_tune_section_out(tmp_path, text):
    store = ResultStore(tmp_path / "s")
    store.add(result("a1", "jax", 10.0))
    (store.directory / "tune.json").write_text(text)
    output = tmp_path / "r.html"
    done = kbench_here(["report", "--store", str(store.directory), "--output", str(output)],
                       tmp_path)  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr  # before:
    assert "tune.json: unreadable (" in done.stderr  # JSONDecodeError, KeyError, TypeError
    assert "leaves the tune section out" in done.stderr
    assert output.is_file() and "kbench tune" not in output.read_text()


# 20. control characters in stored fields; wrong types at the Python API ---------------

ESCAPES = "\x1b]0;owned\x07\x1b[2J\x1b]52;c;ZWNobyBoaQ==\x07\x9b31m\x08\x7f"


def test_control_characters_in_stored_fields_are_not_printed(tmp_path):
    store = ResultStore(tmp_path / "s")
    for i, backend in enumerate(["jax", "torch"]):
        run = result(f"r{i}", backend, 10.0 * (i + 1), host=f"node{ESCAPES}")
        run.config["model"] = f"mlp{ESCAPES}"
        store.add(run)
    for command in (["results"], ["compare"]):
        done = kbench_here([*command, "--store", str(store.directory)], tmp_path)
        assert done.returncode == 0, done.stderr
        shown = done.stdout  # before: the sequences themselves (title, clear, clipboard)
        assert not any(c in shown for c in "\x1b\x07\x9b\x08\x7f"), repr(shown)
        assert "mlp" + ESCAPES.encode("unicode_escape").decode() in shown  # \x1b]0;owned...
    assert tables.printable("a\nb\tc\x00\x85") == "a\nb\\x09c\\x00\\x85"


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: kbench.run(backends=["torch"], model=None), "model must be a name or a list of "
         "names (str), received None (NoneType)"),
        (lambda: kbench.run(backends=5), "backends must be a name or a list of names (str), "
         "received 5 (int)"),
        (lambda: kbench.run(backends=["torch", 5]), "received ['torch', 5] (list)"),
        (lambda: kbench.run(backends=["torch"], store=None), "store must be a path (str or "
         "os.PathLike), received None (NoneType)"),
        (lambda: kbench.run(backends=["torch"], repeats="2"), "repeats must be an int, "
         "received '2' (str)"),
        (lambda: kbench.load(None), "store must be a path or a list of paths (str or "
         "os.PathLike), received None (NoneType)"),
        (lambda: kbench.load("results", filters="status=ok"), "filters must be a list of "
         "filter expressions (str), received 'status=ok' (str)"),
        (lambda: kbench.compare(5), "results_or_store must be Results, a list of RunResult "
         "or a store path, received 5 (int)"),
    ],
)  # fmt: skip
def test_the_python_api_names_a_wrong_typed_argument_and_its_value(call, message):
    with pytest.raises(TypeError) as refused:  # before: "'int' object is not iterable", ...
        call()
    assert message in str(refused.value)
