"""kbench tune: the settings each backend may try here, the check that a setting computes
the same, and a whole search on two cheap backends."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT, dump, kbench_here, require_backends, run_kbench

from kbench.cli.arguments import duration
from kbench.measure.processes import usable_cores
from kbench.results.comparison import comparison_metrics, window_record
from kbench.results.config import RunConfig
from kbench.results.result import RunResult
from kbench.studies import tune as studies_tune
from kbench.studies.tune import FLOAT32, Candidate, Trial, best_of, differs, search_space

BASE = RunConfig(backend="tensorflow", model="small_cnn", dataset="synthetic", window_s=1.0)


def names(candidates):
    return [c.name for c in candidates]


def test_the_search_space_follows_the_backend_and_the_machine():
    space = dict(cores=2, gpu=False, allow_batch_size=False)
    tf, tf_skipped = search_space("tensorflow", BASE, cpu_features=[], **space)
    assert names(tf) == ["default", "jit_compile=on", "jit_compile=off", "run_eagerly=True",
                         "onednn=on", "data_format=channels_first", "threads=1",
                         "inter_op_threads=1"]  # fmt: skip
    reasons = dict(tf_skipped)
    assert "no bfloat16 arithmetic" in reasons["mixed_precision=bfloat16"]
    assert "only with --allow-batch-size" in reasons["batch size"]
    # a CPU with AMX: oneDNN is TensorFlow's default there, so "off" is the change; bf16 runs
    amx, _ = search_space("tensorflow", BASE, cpu_features=["amx_tile"], **space)
    assert "onednn=off" in names(amx) and "mixed_precision=bfloat16" in names(amx)
    gluon, _ = search_space("mxnet-gluon", BASE, cpu_features=[], **dict(space, cores=1))
    assert "hybridize=True" in names(gluon) and not any("threads" in n for n in names(gluon))
    batches, _ = search_space("jax", BASE, cpu_features=[], **dict(space, allow_batch_size=True))
    assert {"batch_size=128", "batch_size=32"} <= set(names(batches))
    assert Candidate("jax", (("threads", 1),)).config(BASE).threads == 1
    # inter-op threads apart where the framework has the pool; JAX's XLA sizes its own
    _, jax_skipped = search_space("jax", BASE, cpu_features=[], **space)
    assert dict(jax_skipped)["inter_op_threads"].startswith("no inter-op pool to set: XLA")


def test_a_setting_that_computes_otherwise_is_named_with_its_figures():
    default = {"outputs": [[0.1, 0.9]], "losses": [2.0, 1.5]}
    assert differs(default, {"outputs": [[0.1, 0.9]], "losses": [2.0, 1.51]}, FLOAT32) is None
    far = differs(default, {"outputs": [[0.2, 0.8]], "losses": [2.0, 1.5]}, FLOAT32)
    assert (
        far.startswith("outputs before training differ by up to 0.1 ") and "tolerance 0.0001" in far
    )
    drift = differs(default, {"outputs": [[0.1, 0.9]], "losses": [2.0, 1.8]}, FLOAT32)
    assert (
        drift == "a training step's loss differs by up to 20.00% of the default's (tolerance 1.00%)"
    )
    nan = differs(default, {"outputs": [[0.1, 0.9]], "losses": [2.0, float("nan")]}, FLOAT32)
    assert nan is not None and "a training step's loss differs by up to inf%" in nan
    assert "outputs" not in nan  # the outputs agree: only the loss is not finite


def windows(rounds):
    """A trial's comparison document (the real builder): a window per (img/s, dropped)."""
    records = []
    for r, (ips, dropped) in enumerate(rounds):
        metrics = {"images_per_sec": ips, "measured_images": 10, "step_times_s": [10 / ips]}
        records.append(dict(window_record(r, r, 0, metrics, 0.0, 1.0), dropped=dropped))
    return RunResult(
        run_id="w", status="ok", config={"repeat": 0}, started_at="t", wall_time_s=1.0,
        environment={}, data={},
        metrics=comparison_metrics(records, {}, {"batch_size": 10, "steps": 1}, {}),
    )  # fmt: skip


def test_a_search_whose_every_round_was_dropped_says_so_instead_of_a_verdict():
    """Before: on an H100, with every window dropped (the tune's own idle workers taken
    for other jobs on the GPU), tune answered "no setting clearly faster than the default
    (7 compared, each at 99.3%)" from no measurement at all."""
    shared = "torch default's window measured while shared GPU: 7 other processes"
    default, faster = Trial(Candidate("torch")), Trial(Candidate("torch", (("tf32", "on"),)))
    default.document = windows([(100.0, shared)] * 8)
    faster.document = windows([(200.0, shared)] * 8)
    best, why = best_of([default, faster], default)
    assert best is default
    assert why == (
        "undecided, the default kept: no ratio measured (every round dropped, the first as "
        f"{shared})"
    )
    faster.document = windows([(200.0 + r, None) for r in range(8)])
    default.document = windows([(100.0, None)] * 8)
    best, why = best_of([default, faster], default)
    assert best is faster and why.startswith("x2.0")
    # On the H100, torch's jit_compile=on was x2 in each of 5 rounds, and tune said "no
    # setting clearly faster": 5 rounds cannot reach 99.3% (7 settings): it says so now.
    slower = Trial(Candidate("torch", (("threads", 8),)))
    slower.document = windows([(90.0, None)] * 5)
    faster.document = windows([(200.0 + r, None) for r in range(5)])
    best, why = best_of([default, faster, slower], default)
    assert best is default
    assert why == (
        "undecided, the default kept: 5 rounds, and 2 settings compared at 97.5% need 7; "
        "the fastest so far, tf32=on: x2.02 (x2.00-x2.04 over 5 rounds)"
    )


@pytest.mark.parametrize("text, seconds", [("90", 90.0), ("90s", 90.0), ("10m", 600.0),
                                           ("1h", 3600.0), ("2.5m", 150.0)])  # fmt: skip
def test_budgets_read_as_durations(text, seconds):
    assert duration(text) == seconds


# Not serial: what these tests assert is what tune decided and wrote, not how fast; each
# window is judged busy only by what did not fit in the cores the suite left it.
TUNE_MXNET = ["tune", "-b", "mxnet,mxnet-gluon", "-m", "mlp", "--budget", "25", "--window",
              "0.2", "--batch-size", "32", "--train-samples", "512"]  # fmt: skip


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """One tune of the two cheapest backends (its home and the store it wrote), which
    the search test reads and the resume test runs again."""
    require_backends("mxnet", "mxnet-gluon")
    home = tmp_path_factory.mktemp("tune-home")
    done = run_kbench([*TUNE_MXNET, "--store", str(home / "store")], home)
    return home, done


@pytest.mark.slow
def test_tune_searches_each_backend_and_compares_them_at_their_best(searched):
    home, done = searched
    assert done.returncode == 0, dump(done)
    report = json.loads((done.output_dir / "tune.json").read_text())
    backends = {b["backend"]: b for b in report["backends"]}
    assert set(backends) == {"mxnet", "mxnet-gluon"}
    for backend in backends.values():
        trials = {t["setting"]: t for t in backend["trials"]}
        assert trials["default"]["state"] == "best" or backend["best"] != "default"
        assert ("threads=1" in trials) == (usable_cores() > 1)  # the suite pins to 1 core
        for trial in backend["trials"][1:]:
            if trial["state"] not in ("failed", "skipped"):
                assert trial["check"]["same_computation"] is True, trial
    assert "hybridize=True" in {t["setting"] for t in backends["mxnet-gluon"]["trials"]}
    rows = report["compared"]["rows"]
    assert {row["backend"] for row in rows} == {"mxnet", "mxnet-gluon"}
    assert rows[0]["setting"] == "default" and rows[0]["backend"] == "mxnet"
    assert "mxnet-gluon: best" in done.stdout and "against mxnet default" in done.stdout
    assert "in words: hybridize=True: " in done.stdout
    windows = done.results()  # tune.json is not read as a result
    assert windows and all(r.metrics["tune"]["setting"] for r in windows if r.ok)
    # the best settings as a sweep file kbench sweep reads, and the search in the report
    sweep = kbench_here(["sweep", report["sweep_file"], "--dry-run"], home)
    assert sweep.returncode == 0 and "mxnet" in sweep.stdout, dump(sweep)
    drawn = kbench_here(["report", "--store", str(done.output_dir)], home)
    assert drawn.returncode == 0, dump(drawn)
    assert "Each backend at its best (kbench tune)" in (done.output_dir / "report.html").read_text()


@pytest.mark.slow
def test_the_same_tune_again_searches_no_backend_twice(searched):
    """Resumable like a sweep (moved from test_tune_resume, which ran a tune of its own):
    the same tune in the same store searches neither backend again."""
    home, first = searched
    store = home / "store"
    progress = json.loads((store / studies_tune.PROGRESS_NAME).read_text())
    assert [r["backend"] for r in progress["reports"]] == ["mxnet", "mxnet-gluon"]
    before = set(store.glob("2*.json"))  # the result documents (named by their start)
    again = run_kbench([*TUNE_MXNET, "--json", "--store", str(store)], home)
    assert again.returncode == first.returncode, again.stderr
    report = json.loads(again.stdout)
    assert all(b.get("resumed") for b in report["backends"])
    assert "searched before in this store" in again.stderr
    # only the default and best of each backend measured again, for the comparison
    settings = {
        json.loads(p.read_text())["metrics"].get("tune", {}).get("setting")
        for p in set(store.glob("2*.json")) - before
    }
    assert settings <= {"default", *(b["best"] for b in report["backends"])}, settings


@pytest.mark.slow
def test_a_faster_setting_that_computes_otherwise_is_refused_with_its_figures(home):
    """A user model whose computation depends on the data format: channels_first starts
    from the default's weights and gives other outputs, so it is out, with the figures."""
    require_backends("jax")
    done = run_kbench(
        ["tune", "-b", "jax", "-m", f"{ROOT / 'tests/user_models/format_dependent.py'}:build",
         "--try", "data_format", "--budget", "20", "--window", "0.2", "--batch-size", "16",
         "--train-samples", "256", "--store", str(home / "store")],
        home,
    )  # fmt: skip
    assert done.returncode == 0, dump(done)
    report = json.loads((done.output_dir / "tune.json").read_text())
    (jax,) = report["backends"]
    trials = {t["setting"]: t for t in jax["trials"]}
    assert set(trials) == {"default", "data_format=channels_first"}
    other = trials["data_format=channels_first"]
    assert other["state"] == "differs", other
    assert (
        other["reason"].startswith("outputs before training differ by up to")
        and "tolerance 0.0001" in other["reason"]
    )
    assert jax["best"] == "default"
    assert {"setting": "jit_compile=on", "reason": "not asked for (--try data_format)"} in jax[
        "skipped"
    ]
