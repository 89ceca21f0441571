"""Intra-op and inter-op threads apart (issue 28): ``--inter-op-threads`` / the sweep key
``inter_op_threads`` sets TensorFlow's and torch's inter-op pool apart from ``--threads``;
refused, with the reason, where the framework has no such pool to set (JAX, MXNet);
runs that differ in it never share a worker; ``kbench tune`` tries one inter-op thread.

Every test but the last is pure Python; the last starts two workers (tensorflow, torch).
"""

from __future__ import annotations

import argparse

import pytest
from conftest import dump, require_backends, run_kbench

from kbench import cli
from kbench.cli import app
from kbench.results.config import ConfigError, RunConfig
from kbench.run.runner import shared_workers, worker_key
from kbench.studies.sweep import SweepError, load_sweep
from kbench.studies.tune import Candidate, search_space

pytestmark = pytest.mark.own_processes("a setting read as a framework starts")

SPACE = dict(cores=2, cpu_features=[], gpu=False, allow_batch_size=False)


def config(backend="torch", **settings):
    return RunConfig(backend=backend, model="mlp", dataset="synthetic", **settings)


@pytest.mark.parametrize("backend", ["tensorflow", "torch", "torch-native"])
def test_the_backends_with_an_inter_op_pool_take_it_and_keep_it_through_json(backend):
    run = config(backend, threads=2, inter_op_threads=1)
    assert run.inter_op_threads == 1 and run.threads == 2
    assert RunConfig.from_dict(run.to_dict()) == run
    # a document written before the setting existed reads as "the threads in force"
    old = {k: v for k, v in run.to_dict().items() if k != "inter_op_threads"}
    assert RunConfig.from_dict(old).inter_op_threads is None


@pytest.mark.parametrize(
    "value, expected",
    [
        (0, "expected a positive integer; received 0."),
        (-2, "expected a positive integer; received -2."),
        (True, "expected a positive integer; received True."),
        ("2", "expected a positive integer; received '2'."),
        (5000, "expected an integer from 1 to 4096; received 5000."),
    ],
)
def test_a_bad_count_is_refused_like_threads(value, expected):
    with pytest.raises(ConfigError) as err:
        config(inter_op_threads=value)
    assert err.value.setting == "inter_op_threads"
    assert err.value.message == expected


@pytest.mark.parametrize(
    "backend, why",
    [
        ("jax", "XLA's CPU client sizes its thread pools itself"),
        ("mxnet", "MXNet runs its operators on OpenMP threads"),
        ("mxnet-gluon", "MXNet runs its operators on OpenMP threads"),
    ],
)
def test_a_backend_without_an_inter_op_pool_refuses_it_with_the_reason(backend, why):
    with pytest.raises(ConfigError) as err:
        config(backend, inter_op_threads=1)
    message = err.value.message
    assert message.startswith(
        "expected a backend with an inter-op thread pool (tensorflow, torch, torch-native); "
        f"received --inter-op-threads 1 for {backend!r}, which has none to set: "
    )
    assert why in message
    assert message.endswith(
        f"Run {backend} in a command of its own without --inter-op-threads (--threads sizes its "
        "threads), or, in a sweep file, set inter_op_threads only in the groups of backends "
        "that have the pool."
    )
    config(backend)  # without it, the backend runs as before


def test_the_cli_refuses_it_for_jax_before_any_worker_starts(capsys, tmp_path):
    store = tmp_path / "store"
    with pytest.raises(SystemExit) as info:
        cli.main(["run", "-b", "torch,jax", "-m", "mlp", "--dataset", "synthetic",
                  "--inter-op-threads", "1", "--store", str(store)])  # fmt: skip
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--inter-op-threads: expected a backend with an inter-op thread pool" in err
    assert "for 'jax', which has none to set: XLA's CPU client" in err
    assert not store.exists()


def test_the_flag_is_offered_where_runs_choose_their_settings():
    parser = app.build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    commands = sub.choices
    for name in ("run", "max-batch", "tune"):
        args = commands[name].parse_args(["-b", "torch", "-m", "mlp", "--inter-op-threads", "3"])
        assert args.inter_op_threads == 3 and args.threads is None, name
    tried = commands["tune"].parse_args(["-b", "torch", "--try", "threads,inter_op_threads"])
    assert tried.only == ["threads", "inter_op_threads"]
    # kbench exec runs the user's own script, whose framework pools kbench cannot set
    flags = {s for a in commands["exec"]._actions for s in a.option_strings}
    assert "--threads" in flags and "--inter-op-threads" not in flags


def test_a_sweep_file_takes_the_key(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(
        "name: inter-op\nsettings: {model: mlp, dataset: synthetic, steps: 2, threads: 2}\n"
        "groups:\n  - {name: tf, settings: {backend: tensorflow, inter_op_threads: 1}}\n"
        "  - {name: torch, settings: {backend: torch}}\n"
    )
    runs = {r.config.backend: r.config for r in load_sweep(path).runs}
    assert runs["tensorflow"].inter_op_threads == 1 and runs["torch"].inter_op_threads is None
    path.write_text(path.read_text().replace("backend: torch}", "backend: jax, "
                                             "inter_op_threads: 1}"))  # fmt: skip
    with pytest.raises(SweepError, match="inter_op_threads: .* for 'jax', which has none to set"):
        load_sweep(path)


def test_runs_that_differ_in_inter_op_threads_never_share_a_worker():
    two = config(threads=2)
    assert worker_key(two) == worker_key(config(threads=2, inter_op_threads=2))  # the same pools
    one = config(threads=2, inter_op_threads=1)
    assert worker_key(two) != worker_key(one)
    assert shared_workers([two, one, config(threads=2, inter_op_threads=2)]) == [[0, 2], [1]]


def test_tune_tries_one_inter_op_thread_where_the_framework_has_the_pool():
    for backend in ("tensorflow", "torch", "torch-native"):
        base = config(backend, threads=None)
        candidates, skipped = search_space(backend, base, **SPACE)
        names = [c.name for c in candidates]
        assert "threads=1" in names and "inter_op_threads=1" in names, backend
        assert not any("inter" in name for name, _ in skipped), backend
        # one core in force: the pool has one thread already, so nothing to try
        _, single = search_space(backend, base, **dict(SPACE, cores=1))
        assert dict(single)["inter_op_threads=1"] == "the inter-op pool has 1 thread already"
    for backend in ("jax", "mxnet", "mxnet-gluon"):
        candidates, skipped = search_space(backend, config(backend), **SPACE)
        assert not any("inter_op" in c.name for c in candidates), backend
        assert dict(skipped)["inter_op_threads"].startswith("no inter-op pool to set: "), backend
    # --try inter_op_threads alone leaves half the threads out, with the reason
    only, skipped = search_space("torch", config(), **SPACE, only=["inter_op_threads"])
    assert [c.name for c in only] == ["default", "inter_op_threads=1"]
    assert dict(skipped)["threads=1"] == "not asked for (--try inter_op_threads)"


def test_half_the_threads_and_one_inter_op_thread_combine_as_two_changes():
    """tune's "changes tried together" step combines changes of different settings:
    threads and inter_op_threads are two, and together they make one valid run."""
    changes = (("threads", 1), ("inter_op_threads", 1))
    assert len({name for name, _ in changes}) == len(changes)
    together = Candidate("torch", changes)
    assert together.name == "threads=1, inter_op_threads=1"
    run = together.config(config(threads=None))
    assert (run.threads, run.inter_op_threads) == (1, 1)


@pytest.mark.slow  # two workers: tensorflow and torch, each a few steps of a tiny MLP
def test_tensorflow_and_torch_apply_the_inter_op_threads_apart(home):
    """Two backends without --repeats measure in warm windows (kbench.run.windows): the
    setting reaches each window worker through its task file; one round is enough."""
    require_backends("tensorflow", "torch")
    args = ["run", "-b", "tensorflow,torch", "-m", "mlp", "--dataset", "synthetic",
            "--threads", "2", "--inter-op-threads", "1", "--steps", "2", "--warmup-steps", "1",
            "--batch-size", "8", "--test-samples", "8", "--sample-interval", "0",
            "--ratio-budget", "1"]  # fmt: skip
    completed = run_kbench(args, home)
    assert completed.returncode == 0, dump(completed)
    results = {r.config["backend"]: r for r in completed.results()}
    assert sorted(results) == ["tensorflow", "torch"], dump(completed)
    for backend, result in results.items():
        assert result.ok, dump(completed)
        assert result.config["inter_op_threads"] == 1 and result.config["threads"] == 2
        threads = result.environment["framework"]["threads"]
        assert threads["framework"] == {"intra_op": 2, "inter_op": 1}, backend
