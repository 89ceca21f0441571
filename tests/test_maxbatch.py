"""max-batch: doubling then bisection, each probe a real run."""

import pytest
from conftest import dump, require_backends, run_kbench
from test_user_model import RESIDUAL, sha256

from kbench.studies.maxbatch import search


def recorder(capacity):
    return lambda batch: batch <= capacity


@pytest.mark.parametrize("capacity", [1, 2, 5, 37, 64, 100, 1000])
def test_search_finds_the_exact_capacity(capacity):
    found = search(recorder(capacity), start=1, limit=4096)
    assert found.largest_fit == capacity and found.first_failure == capacity + 1
    tried = [batch for batch, _ in found.probes]
    assert len(tried) == len(set(tried))  # no batch is tried twice
    assert len(tried) <= 2 * (capacity.bit_length() + 1)


def test_search_stops_at_the_limit_and_reports_no_failure():
    found = search(recorder(10**6), start=3, limit=40)
    assert [b for b, _ in found.probes] == [3, 6, 12, 24, 40]
    assert (found.largest_fit, found.first_failure) == (40, None)


def test_search_when_nothing_fits():
    found = search(recorder(0), start=8, limit=64)
    assert (found.largest_fit, found.first_failure, found.probes) == (None, 8, [(8, False)])


@pytest.mark.slow
def test_max_batch_command_runs_real_probes_of_a_user_model(home):
    """Two real probes (batch 2, then 4) of the user's own model file on jax, each a run
    of its own, recorded with the file's sha256. (Merged: the command's test probed the
    MLP on torch-native, test_user_model's the user model once.)"""
    require_backends("jax")
    completed = run_kbench(
        ["max-batch", "--backend", "jax", "--model", f"{RESIDUAL}:build", "--start", "2",
         "--limit", "4", "--steps", "1", "--store", str(home / "out")],
        home,
    )  # fmt: skip
    assert completed.returncode == 0, dump(completed)
    assert "every batch up to the limit 4 fits" in completed.stdout
    results = completed.results()
    assert sorted(r.config["batch_size"] for r in results) == [2, 4]
    digest = sha256(RESIDUAL)
    assert all(r.ok and r.model["source"]["sha256"] == digest for r in results), dump(completed)


def test_bad_limits_are_refused(capsys):
    from kbench import cli

    with pytest.raises(SystemExit) as info:
        cli.main(["max-batch", "-b", "torch", "-m", "mlp", "--start", "9", "--limit", "4"])
    assert info.value.code == 2
    assert "--start: expected at most --limit 4; received 9." in capsys.readouterr().err
