"""Comparison maths: medians over repeats, per-round ratios, failures kept visible."""

import pytest

from kbench.results.analysis import compare
from kbench.results.result import RunResult
from kbench.views.tables import comparison_tables, group_title


def result(backend, repeat, ips, status="ok", batch=32):
    return RunResult(
        run_id=f"{backend}{repeat}", status=status,
        config={"backend": backend, "model": "mlp", "dataset": "synthetic", "batch_size": batch,
                "repeat": repeat, "mode": "train", "timeout_s": 9},
        started_at="t", wall_time_s=1.0, environment={}, data={"synthetic": True},
        metrics={"images_per_sec": ips, "test_accuracy": 0.9, "epoch_time_s": [1.0, 3.0],
                 "first_step_s": 0.5} if status == "ok" else {},
    )  # fmt: skip


def test_ratio_is_the_median_of_per_round_ratios():
    # Round 2 ran on a slowed machine: both backends halve, the ratio holds.
    results = [
        result("a", 0, 100),
        result("b", 0, 200),
        result("a", 1, 50),
        result("b", 1, 100),
        result("a", 2, 100),
        result("b", 2, 300),
    ]
    (group,) = compare(results)
    a, b = group.rows
    assert group.baseline == "a"
    assert (b.ratio.median, b.ratio.low, b.ratio.high, b.ratio.n) == (2.0, 2.0, 3.0, 3)
    assert (a.ratio.median, a.ratio.low) == (1.0, 1.0)
    assert (b.images_per_sec.median, b.images_per_sec.low) == (200, 100)
    assert a.epoch_time_s.median == 2.0


def test_baseline_choice_and_failed_runs():
    results = [result("a", 0, 100), result("b", 0, 0, status="oom"), result("c", 0, 50)]
    (group,) = compare(results, baseline="c")
    rows = {row.backend: row for row in group.rows}
    assert group.baseline == "c" and rows["a"].ratio.median == 2.0
    assert rows["b"].images_per_sec is None and rows["b"].statuses == {"oom": 1}
    text = comparison_tables(results, baseline="c")
    assert "vs c" in text and "OOM x1" in text and "x2.00" in text


def test_different_settings_are_different_groups():
    groups = compare([result("a", 0, 1, batch=32), result("a", 0, 1, batch=64)])
    assert [g.batch_size for g in groups] == [32, 64]
    assert group_title(groups[0]) == "mlp on synthetic (synthetic data), batch 32"


def test_ratio_precision_needs_six_rounds_then_reads_the_widest_interval():
    from kbench.results.analysis import widest_ratio_half_width

    rounds = [(100, 200), (100, 210), (100, 190), (100, 205), (100, 195)]
    results = [result(b, i, ips) for i, pair in enumerate(rounds) for b, ips in zip("ab", pair)]
    assert widest_ratio_half_width(results) is None  # 5 rounds: no 95% interval yet
    results += [result("a", 5, 100), result("b", 5, 200)]
    # six rounds: the interval is the whole range, 1.90-2.10 around the median 2.00
    assert widest_ratio_half_width(results) == pytest.approx(0.05)
    results += [result("c", i, 100 * (1 + i)) for i in range(6)]  # a wildly varying third
    assert widest_ratio_half_width(results) > 0.5
