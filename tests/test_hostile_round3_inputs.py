"""The third hostile round's inputs (issue 54, items 11-13 and 15-20): files that would
hang a load, tools that answer badly, documents nested or sized to break a reader,
labels and fields that are not what a view expects, and wrong types at the Python API.

All fast: documents, stores and stand-in Slurm tools are made here by hand; the CLI is
called in this process; no framework is started.
"""

from __future__ import annotations

import time

import pytest
from conftest import kbench_here

from kbench.studies import published
from kbench.studies.sweep import SweepError, load_sweep


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
