"""Precision on request: ``--target-precision P`` keeps measuring until the median
throughput's 95% interval is within +-P, ``--time-budget S`` stops it after S seconds,
and the result says which happened (issue 20).

The statistics run on hand-made step times; the real runs (slow) train and infer a tiny
MLP on torch (the runs of one sweep file, sharing one warm worker) and time one operation
with ``kbench ops`` through the CLI."""

from __future__ import annotations

import argparse
import json
import math
import random
import time

import pytest

from kbench.cli.arguments import budget, precision
from kbench.measure.stats import (
    BUDGET_SPENT,
    PRECISION_REACHED,
    STEPS_EXHAUSTED,
    PrecisionGoal,
    PrecisionTracker,
    binomial_below,
    median_interval,
    order_statistic_rank,
)
from kbench.ops.runner import OpsConfig
from kbench.results.config import ConfigError, RunConfig
from kbench.studies.sweep import SweepError, load_sweep
from tests.conftest import dump, require_backends, run_kbench

# ------------------------------------------------------------------ the interval itself


def exact_below(j: int, n: int) -> float:
    return sum(math.comb(n, k) for k in range(j)) / 2**n


@pytest.mark.parametrize("n, j", [(1, 1), (6, 1), (6, 2), (10, 2), (40, 14), (300, 134)])
def test_the_binomial_tail_matches_exact_integer_arithmetic(n, j):
    assert binomial_below(j, n) == pytest.approx(exact_below(j, n), rel=1e-12, abs=1e-300)


@pytest.mark.parametrize("n", [2, 5, 6, 7, 10, 17, 50, 101, 1000])
def test_the_rank_is_the_largest_with_95_percent_coverage(n):
    j = order_statistic_rank(n)
    if n < 6:  # no pair reaches 95%: the whole range
        assert j == 1 and 1 - 2 * exact_below(1, n) < 0.95
        return
    assert 1 - 2 * exact_below(j, n) >= 0.95
    assert j == n // 2 or 1 - 2 * exact_below(j + 1, n) < 0.95


def test_median_interval_on_hand_made_samples():
    # 10 values: j = 2, so the 2nd and 9th values, coverage 1 - 2 * 11/1024
    found = median_interval([7, 1, 9, 3, 5, 2, 8, 4, 10, 6])
    assert (found.median, found.low, found.high, found.n) == (5.5, 2, 9, 10)
    assert found.coverage == pytest.approx(1 - 22 / 1024)
    single = median_interval([4.0])
    assert (single.low, single.high, single.coverage) == (4.0, 4.0, 0.0)
    assert median_interval([]) is None
    # the same answer as the comparison tables' interval on per-round ratios (one type)
    from kbench.results.analysis import compare
    from tests.test_compare import result

    rng = random.Random(3)
    for n in range(1, 40, 3):
        values = [rng.lognormvariate(0, 0.3) for _ in range(n)]
        runs = [
            r for i, v in enumerate(values) for r in (result("a", i, 100), result("b", i, 100 * v))
        ]
        (group,) = compare(runs)
        mine, theirs = median_interval(values), group.rows[1].ratio_interval
        assert (mine.low, mine.high, mine.n) == pytest.approx((theirs.low, theirs.high, theirs.n))
        assert mine.coverage == pytest.approx(theirs.coverage)


def test_a_large_sample_is_cheap():
    values = [random.Random(1).random() for _ in range(100_000)]
    started = time.perf_counter()
    found = median_interval(values)
    assert time.perf_counter() - started < 2.0
    assert found.coverage >= 0.95 and found.low <= found.median <= found.high


# ------------------------------------------------------------------ the stopping rule


def feed(tracker: PrecisionTracker, times, start: float = 0.0):
    """Steps back to back from ``start``; the reason it stopped and the steps fed."""
    clock = start
    for count, seconds in enumerate(times, start=1):
        reason = tracker.add(clock, clock + seconds)
        clock += seconds
        if reason:
            return reason, count
    return None, len(list(times))


def test_a_steady_workload_reaches_its_precision_at_the_first_check():
    tracker = PrecisionTracker(PrecisionGoal(target=0.02), items_per_step=64)
    reason, steps = feed(tracker, [0.100, 0.101, 0.099, 0.1005, 0.0995, 0.100] * 10)
    assert (reason, steps) == (PRECISION_REACHED, 6)
    record = tracker.record()
    assert record["stopped"] == PRECISION_REACHED and record["measured_steps"] == 6
    assert record["half_width"] <= 0.02 and record["checks"] == 1
    # throughput: 64 images over the median step time, the bounds reversed
    assert record["interval"]["median"] == pytest.approx(64 / 0.100)
    assert record["interval"]["low"] == pytest.approx(64 / 0.101)
    assert record["interval"]["high"] == pytest.approx(64 / 0.099)


def test_a_noisy_workload_spends_its_budget():
    rng = random.Random(0)
    noisy = [rng.lognormvariate(math.log(0.05), 0.8) for _ in range(10_000)]
    tracker = PrecisionTracker(PrecisionGoal(target=0.0001, budget_s=5.0))
    reason, steps = feed(tracker, noisy)
    assert reason == BUDGET_SPENT and steps < len(noisy)
    record = tracker.record()
    assert record["measured_s"] >= 5.0 and record["half_width"] > 0.0001
    # checked every tenth of the steps so far, not at every step
    assert record["checks"] < steps / 4


def test_steps_that_run_out_say_so():
    tracker = PrecisionTracker(PrecisionGoal(target=0.0001))
    reason, _ = feed(tracker, [0.1, 0.2] * 20)
    assert reason is None and tracker.record()["stopped"] == STEPS_EXHAUSTED
    assert tracker.record()["interval"]["n"] == 40


def test_a_budget_alone_stops_by_time_only():
    tracker = PrecisionTracker(PrecisionGoal(budget_s=1.0))
    reason, steps = feed(tracker, [0.1] * 100, start=50.0)
    assert (reason, steps) == (BUDGET_SPENT, 10) and tracker.checks == 0


# ------------------------------------------------------------------ settings


@pytest.mark.parametrize("value", [0, 1, -0.1, float("nan"), float("inf"), "0.1", True])
def test_a_target_outside_0_1_is_refused(value):
    with pytest.raises(ConfigError, match="target_precision: expected a relative half-width"):
        RunConfig(backend="torch", model="mlp", target_precision=value)
    with pytest.raises(ConfigError, match="target_precision"):
        OpsConfig(backend="torch", target_precision=value)


@pytest.mark.parametrize("value", [0, -1, float("nan"), 1e20])
def test_a_budget_must_be_positive_and_finite(value):
    with pytest.raises(ConfigError, match="time_budget_s: expected a positive number"):
        RunConfig(backend="torch", model="mlp", time_budget_s=value)


def test_data_parallel_runs_refuse_a_target():
    with pytest.raises(ConfigError, match="--distributed torch-ddp trains a fixed number"):
        RunConfig(backend="torch", model="mlp", distributed="torch-ddp", workers=2,
                  target_precision=0.05)  # fmt: skip


def test_flags_teach_what_they_take():
    assert precision("0.02") == 0.02 and budget("30") == 30.0
    with pytest.raises(argparse.ArgumentTypeError, match="for example 0.02 for"):
        precision("2")
    with pytest.raises(argparse.ArgumentTypeError, match="more than 0 seconds"):
        budget("0")


def test_a_sweep_file_takes_the_settings(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: p\nsettings: {backend: torch, model: mlp, target_precision: 0.05, "
                    "time_budget_s: 30}\n")  # fmt: skip
    (run,) = load_sweep(path).runs
    assert (run.config.target_precision, run.config.time_budget_s) == (0.05, 30)
    path.write_text("name: p\nsettings: {backend: torch, model: mlp, target_precision: 5}\n")
    with pytest.raises(SweepError, match="target_precision"):
        load_sweep(path)


# ------------------------------------------------------------------ real runs (slow)

SWEEP = """\
name: precision
settings:
  backend: torch
  model: mlp
  dataset: synthetic
  train_samples: 64000
  test_samples: 64
  batch_size: 64
  warmup_steps: 3
  threads: 1
  sample_interval_s: 0
groups:
  - name: steady
    settings: {target_precision: 0.25, time_budget_s: 120}
  - name: noisy
    # 20 epochs: 20,000 steps, more than a fast core takes in the 3 s (1,000 were not)
    settings: {target_precision: 0.0001, time_budget_s: 3, epochs: 20}
  - name: inference
    settings: {mode: inference, target_precision: 0.25, time_budget_s: 120}
"""


@pytest.fixture(scope="module")
def precision_runs(tmp_path_factory):
    """The three tiny torch runs of one sweep file, in one warm worker (what they check is
    where each run stopped and why, not a fresh process): {group name: RunResult}."""
    from kbench.run.runner import Runner

    require_backends("torch")
    root = tmp_path_factory.mktemp("precision")
    (root / "p.yaml").write_text(SWEEP)
    runs = load_sweep(root / "p.yaml").runs
    results = Runner(output_dir=root / "store", warm=True).run_all([r.config for r in runs])
    assert [r.config["mode"] for r in results] == [r.config.mode for r in runs]
    for result in results:
        assert result.ok, json.dumps(result.error, indent=1)[-3000:]
    assert [r.metrics.get("warm_worker", False) for r in results] == [False, True, True]
    return {run.group: result for run, result in zip(runs, results)}


@pytest.mark.slow
@pytest.mark.serial  # an interval of measured times: nothing beside it
def test_a_real_training_run_stops_when_its_interval_is_reached(precision_runs):
    r = precision_runs["steady"]
    m = r.metrics
    p = m["precision"]
    assert p["stopped"] == PRECISION_REACHED, json.dumps(p)
    assert p["half_width"] <= 0.25 and p["interval"]["coverage"] >= 0.95
    # it stopped early (1,000 steps were there) and measured exactly what it says
    assert m["measured_steps"] == p["measured_steps"] == len(m["step_times_s"]) < 1000
    again = median_interval(m["step_times_s"])
    assert p["interval"]["low"] == pytest.approx(64 / again.high)
    assert p["interval"]["high"] == pytest.approx(64 / again.low)
    assert m["test_accuracy"] is not None and m["epoch_time_s"]  # evaluated after the stop


@pytest.mark.slow
@pytest.mark.serial  # an interval of measured times: nothing beside it
def test_an_unreachable_precision_spends_the_budget(precision_runs):
    p = precision_runs["noisy"].metrics["precision"]
    assert p["stopped"] == BUDGET_SPENT and p["measured_s"] >= 3.0
    assert p["half_width"] is None or p["half_width"] > 0.0001
    assert p["measured_steps"] < 20 * 1000


@pytest.mark.slow
@pytest.mark.serial  # an interval of measured times: nothing beside it
def test_inference_passes_stop_at_the_interval_too(precision_runs):
    m = precision_runs["inference"].metrics
    assert m["precision"]["stopped"] == PRECISION_REACHED
    assert m["measured_batches"] == m["precision"]["measured_steps"] == len(m["latencies_s"])


@pytest.mark.slow
@pytest.mark.serial  # an interval of measured times: nothing beside it
def test_kbench_ops_times_each_operation_until_its_interval(tmp_path):
    require_backends("torch-native")
    completed = run_kbench(
        ["ops", "--backend", "torch-native", "--ops", "gemm", "--sizes", "16",
         "--calls", "5000", "--target-precision", "0.2", "--store", str(tmp_path / "o")],
        tmp_path,
    )  # fmt: skip
    assert completed.returncode == 0, dump(completed)
    (entry,) = completed.results()[0].metrics["ops"]
    assert entry["precision"]["stopped"] == PRECISION_REACHED
    assert entry["n"] == entry["precision"]["measured_steps"] < 5000


# ------------------------------------------- --ratio-precision: rounds until ratios settle


def _run(backend, repeat, ips):
    from kbench.results.result import RunResult

    return RunResult(
        run_id=f"{backend}{repeat}", status="ok", started_at="t", wall_time_s=1.0,
        config={"backend": backend, "model": "mlp", "dataset": "synthetic", "batch_size": 32,
                "repeat": repeat, "mode": "train"},
        environment={}, data={"synthetic": True}, metrics={"images_per_sec": ips},
    )  # fmt: skip


def test_rounds_stop_once_every_ratio_is_within_the_target():
    from kbench.studies.rounds import ratio_stop

    stop = ratio_stop(0.10, None, None)
    steady = [_run(b, i, ips) for i in range(6) for b, ips in (("a", 100), ("b", 200 + i))]
    assert stop(steady[:10]) is None  # five rounds: no 95% interval yet
    assert stop(steady).startswith("ratio precision reached")
    noisy = [_run(b, i, ips) for i in range(6) for b, ips in (("a", 100), ("b", 100 + 60 * i))]
    assert stop(noisy) is None  # the ratios spread over 1.0-4.0: go on


@pytest.mark.slow
def test_a_spent_ratio_budget_stops_the_rounds(tmp_path):
    require_backends("torch-native", "mxnet-gluon")
    store = tmp_path / "store"
    done = run_kbench(
        ["run", "-b", "torch-native,mxnet-gluon", "-m", "mlp", "--dataset", "synthetic",
         "--steps", "2", "--warmup-steps", "1", "--train-samples", "128", "--test-samples",
         "32", "--repeats", "8", "--ratio-precision", "0.01", "--ratio-budget", "0.5",
         "--store", str(store)],
        tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, dump(done)
    assert len(done.results()) == 2  # one round of eight
    assert "rounds: 1 of at most 8: --ratio-budget 0.5 s spent" in done.stdout
