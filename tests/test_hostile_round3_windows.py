"""Issue 54, the third hostile round, on warm windows: a store that stops taking documents
mid-comparison (4), a tune run again in its store (5), a worker stopped in its window (14)."""

from __future__ import annotations

import errno
import logging
import os
import signal
import time
from pathlib import Path

import pytest
from conftest import require_backends

from kbench.measure.quality import stall_flag
from kbench.results.config import RunConfig
from kbench.results.readings import round_throughputs
from kbench.results.result import RunResult
from kbench.results.store import ResultStore, StoreWriteError, rescue_places
from kbench.run import windows as run_windows
from kbench.run.runner import Runner
from kbench.run.windows import interleave
from kbench.studies import tune as studies_tune

TINY = dict(dataset="synthetic", train_samples=256, test_samples=32, batch_size=16,
            warmup_steps=2, sample_interval_s=0.05)  # fmt: skip
CHEAP = ("mxnet", "mxnet-gluon")


# 4. a store that stops taking documents mid-comparison ------------------------------


@pytest.mark.slow
def test_a_store_that_fails_mid_comparison_keeps_every_document_aside_and_stops(
    tmp_path, monkeypatch
):
    """From round 2 on, every write into the store fails (EROFS, as a store remounted
    read-only): each backend's document is kept aside in the cache, one line each, and
    the comparison stops there; the rounds stored before are intact."""
    require_backends(*CHEAP)
    store, cache = tmp_path / "s", tmp_path / "cache"
    monkeypatch.setenv("KBENCH_CACHE_DIR", str(cache))
    monkeypatch.setattr(run_windows, "PROGRESS_EVERY_S", 0.0)  # stored after each round
    real_replace = os.replace
    read_only = []

    def replace(src, dst):  # the store's file system, and nothing else, turned read-only
        if read_only and Path(dst).is_relative_to(store):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return real_replace(src, dst)

    def on_window(worker, round_index):
        if round_index == 2:
            read_only.append(True)

    monkeypatch.setattr(os, "replace", replace)
    configs = [RunConfig(backend=b, model="mlp", window_s=0.2, **TINY) for b in CHEAP]
    with pytest.raises(StoreWriteError) as caught:
        interleave(Runner(output_dir=store), configs, max_rounds=6, on_window=on_window,
                   check_parity=False)  # fmt: skip
    monkeypatch.setattr(os, "replace", real_replace)

    message = str(caught.value)
    kept = rescue_places(store)[1]
    assert "Read-only file system" in message and "2 results could not be written" in message
    rescued = {p.name: RunResult.load(p) for p in kept.glob("*.json")}
    assert len(rescued) == 2, (message, sorted(rescued))
    for name, document in rescued.items():
        assert f"kept in {kept / name}" in message  # the user told where, one line each
        rounds = {w["round"] for w in document.metrics["windows"]["list"]}
        assert rounds == {0, 1, 2}, (name, rounds)  # stopped in the round that failed
    assert f"--merge {kept}" in message
    stored = ResultStore(store).results()
    assert sorted(r.run_id + ".json" for r in stored) == sorted(rescued)
    for document in stored:  # what the store took before it failed: rounds 0 and 1
        assert {w["round"] for w in document.metrics["windows"]["list"]} == {0, 1}


# 14. a worker stopped and continued inside its window --------------------------------


@pytest.mark.slow
def test_a_worker_stopped_inside_its_window_is_flagged_stalled_and_its_round_dropped(
    tmp_path, caplog
):
    """mxnet-gluon's worker SIGSTOPped for 2 s in round 1's window, then SIGCONTinued:
    its window is flagged stalled, and the round is dropped for it and said."""
    require_backends(*CHEAP)
    configs = [RunConfig(backend=b, model="mlp", window_s=1.0, **TINY) for b in CHEAP]

    def on_window(worker, round_index):
        if round_index == 1 and worker.config.backend == "mxnet-gluon":
            time.sleep(0.3)  # past its untimed first step, inside its measured steps
            os.kill(worker.worker.pid, signal.SIGSTOP)
            time.sleep(2.0)
            os.kill(worker.worker.pid, signal.SIGCONT)

    caplog.set_level(logging.INFO, logger="kbench.run.windows")
    results, reason = interleave(Runner(output_dir=tmp_path), configs, max_rounds=3,
                                 on_window=on_window, check_parity=False)  # fmt: skip
    assert reason == "3 rounds ran", reason
    docs = {r.config["backend"]: r for r in results}
    stopped = {w["round"]: w for w in docs["mxnet-gluon"].metrics["windows"]["list"]}[1]
    flags = stopped["quality"]["flags"]
    assert flags[0].startswith("stalled: one step took"), stopped
    for doc in docs.values():  # the round dropped for it, both backends' windows
        (window,) = [w for w in doc.metrics["windows"]["list"] if w["round"] == 1]
        assert window["dropped"] == f"mxnet-gluon's window measured while {flags[0]}"
    assert "dropped (last: " in caplog.text  # said in the progress line


def test_a_stall_is_a_long_standstill_not_a_hiccup():
    def ends(spans):
        return [sum(spans[:i]) for i in range(len(spans) + 1)]

    assert stall_flag(ends([0.01] * 40)) is None
    assert stall_flag(ends([0.03] * 8 + [0.17])) is None  # a time slice lost under load
    assert stall_flag(ends([0.2] * 10 + [2.2])).startswith("stalled: one step took 2.20 s")
    assert stall_flag(ends([0.01, 3.0])) is None  # too few steps to tell


# 5. a tune run again in the same store -------------------------------------------------


@pytest.mark.slow
def test_a_tune_run_again_in_its_store_pairs_rounds_within_one_run_only(tmp_path):
    """Two tunes into one store (the second ``fresh``, measuring the same settings again):
    rounds are paired by number, so the second's rounds are numbered on from the first's,
    and every pair compare makes (default against hybridize=True) is of one run's windows."""
    require_backends("mxnet-gluon")
    store = tmp_path / "s"
    base = RunConfig(backend="mxnet-gluon", model="mlp", epochs=1, window_s=0.2, **TINY)
    runs = []
    for fresh in (False, True):
        before = {r.run_id for r in ResultStore(store).results()} if store.exists() else set()
        studies_tune.tune(["mxnet-gluon"], base, store, budget_s=3.0, target=0.02,
                          only=["hybridize"], fresh=fresh)  # fmt: skip
        runs.append([r for r in ResultStore(store).results() if r.run_id not in before])
    rounds = [{round_ for r in run for round_ in round_throughputs(r)} for run in runs]
    assert rounds[0] and rounds[1], rounds
    assert not rounds[0] & rounds[1], rounds  # no round number in both runs
    by_setting = {}
    for result in ResultStore(store).results():
        setting = result.metrics["tune"]["setting"]
        by_setting.setdefault(setting, {}).update(round_throughputs(result))
    pairs = set(by_setting["default"]) & set(by_setting["hybridize=True"])
    assert pairs and all(sum(p in r for r in rounds) == 1 for p in pairs), (pairs, rounds)
