"""Sweeps in warm interleaved windows (``measure: windows``, ``kbench sweep --windows``,
``kbench reproduce --reduced`` of a study whose claims are backend ratios).

The grouping, the keys, the plan, resuming and the verdicts are checked on documents
built here (no framework process); one slow test runs a tiny sweep in windows on jax
and torch, then runs it again and checks that nothing runs twice.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import List, Optional, Tuple

import pytest
import yaml
from conftest import dump, require_backends, run_kbench

from kbench.cli.app import main
from kbench.results.comparison import comparison_metrics, window_record
from kbench.results.config import ConfigError
from kbench.results.result import RunResult
from kbench.results.store import ResultStore, StoreError
from kbench.studies import published, reproduce, sweep_runs
from kbench.studies.claims import HOLDS, ROUNDS_NEEDED
from kbench.studies.sweep import (
    Sweep,
    SweepRun,
    WindowSettings,
    comparisons_of,
    in_windows,
    parse_sweep,
    run_key,
    sweep_run_of,
)

TINY = {"model": "mlp", "dataset": "synthetic", "train_samples": 256, "test_samples": 32,
        "warmup_steps": 2}  # fmt: skip
_ids = itertools.count()


def document(**sections) -> dict:
    return dict({"name": "w", "settings": dict(TINY)}, **sections)


def two_by_two(**top) -> dict:
    """2 batch sizes x 2 backends, 3 repeats; an inference setting; a one-backend one."""
    return document(
        repeats=3,
        groups=[
            {"name": "pairs", "matrix": {"batch_size": [16, 32], "backend": ["jax", "torch"]}},
            {"name": "infer", "settings": {"mode": "inference", "batch_size": 8},
             "matrix": {"backend": ["jax", "torch"]}},
            {"name": "alone", "settings": {"backend": "jax", "batch_size": 64}},
        ],
        **top,
    )  # fmt: skip


def test_each_setting_becomes_one_comparison_and_fresh_ones_say_why():
    fresh = parse_sweep(two_by_two(measure="windows", window=0.5), "f.yaml")
    assert fresh.measure == "windows" and fresh.window_settings.window_s == 0.5
    assert fresh.windows is None and len(fresh.runs) == 3 * (4 + 2 + 1)  # the file's runs
    sweep = sweep_runs.as_asked(fresh)
    windowed = [run for run in sweep.runs if run.config.window_s is not None]
    # the first repeat of each pair, window_s set: one run per backend and setting
    assert [(r.config.batch_size, r.config.backend, r.config.repeat) for r in windowed] == [
        (16, "jax", 0), (16, "torch", 0), (32, "jax", 0), (32, "torch", 0),
    ]  # fmt: skip
    assert {r.config.window_s for r in windowed} == {0.5}
    assert {r.key for r in windowed}.isdisjoint({r.key for r in fresh.runs})  # no mixing
    assert all(r.key == run_key(r.config) for r in windowed)
    # inference and a lone backend stay fresh processes, every repeat
    kept = [run for run in sweep.runs if run.config.window_s is None]
    assert len(kept) == 3 * 3 and {r.group for r in kept} == {"infer", "alone"}
    plan = sweep_runs.plan_text(sweep, {r.key: "to run" for r in sweep.runs}, fresh.varying())
    assert "mode inference needs a fresh process per run" in plan
    assert "one backend (jax): windows compare several backends" in plan
    assert "windows of 0.5 s" in plan


def test_the_command_line_turns_windows_on_and_off_and_overrides():
    fresh = parse_sweep(two_by_two(ratio_budget=30), "f.yaml")
    assert sweep_runs.as_asked(fresh) is fresh  # the file asks for fresh processes
    on = sweep_runs.as_asked(fresh, True, ratio_precision=0.05)
    assert on.windows == WindowSettings(ratio_precision=0.05, ratio_budget_s=30.0)
    asked = parse_sweep(two_by_two(measure="windows"), "f.yaml")
    assert sweep_runs.as_asked(asked, False).windows is None  # --fresh
    with pytest.raises(ConfigError, match="expected --window with warm windows"):
        sweep_runs.as_asked(fresh, None, window_s=2.0)


def sweep_document() -> dict:
    return document(matrix={"batch_size": [16, 32], "backend": ["jax", "torch"]})


def windows_sweep() -> Sweep:
    return in_windows(parse_sweep(sweep_document(), "f.yaml"), WindowSettings(window_s=0.3))


def comparison_doc(run: SweepRun, rounds: List[Tuple[float, Optional[str]]]) -> RunResult:
    """A backend's comparison document as kbench.run.windows stores it (no sweep
    provenance yet): a window per round, its throughput and why its round was dropped."""
    n = next(_ids)
    records = []
    for r, (ips, dropped) in enumerate(rounds):
        metrics = {"images_per_sec": ips, "measured_images": 10, "measured_time_s": 10 / ips,
                   "step_times_s": [10 / ips], "memory": []}  # fmt: skip
        records.append(dict(window_record(r, r, 0, metrics, 0.0, 1.0), dropped=dropped))
    facts = {"steps": 1, "window_s": 0.3, "batch_size": 10, "worker_pid": 1}
    return RunResult(
        run_id=f"w{n:05d}",
        status="ok",
        config=run.config.to_dict(),
        started_at=f"2026-11-27T10:{n // 60 % 60:02d}:{n % 60:02d}Z",
        wall_time_s=1.0,
        environment={"machine": {"hostname": "here", "gpu": {"available": False}}},
        data={"synthetic": True},
        metrics=comparison_metrics(records, {}, facts, {}),
    )


def measured(store: Path, sweep: Sweep, group: List[SweepRun], rounds: int) -> List[RunResult]:
    """A document of ``rounds`` windows for each backend of ``group`` in ``store``."""
    found = [comparison_doc(run, [(100.0 + r, None) for r in range(rounds)]) for run in group]
    writer = ResultStore(store)
    for result in found:
        writer.add(result)
    return found


def plan_of(store: Path, sweep: Sweep, **options) -> sweep_runs.PlannedSweep:
    with sweep_runs.planned_sweep(sweep, store, lock=False, **options) as planned:
        return planned


def test_a_stopped_comparison_is_done_and_one_cut_short_reruns_whole(tmp_path):
    sweep = windows_sweep()
    first, second = comparisons_of(sweep.runs)
    store = tmp_path / "store"
    marked = sweep_runs.mark(store, sweep, first, measured(store, sweep, first, 3), "budget")
    # a document per backend, its 3 windows inside, marked with its run's key
    assert [sweep_run_of(r) for r in marked] == [run.key for run in first]
    assert [r.sweep["run_key"] for r in marked] == [run.key for run in first]
    assert [len(r.metrics["windows"]["list"]) for r in marked] == [3, 3]
    assert {r.sweep["windows"]["stopped"] for r in marked} == {"budget"}
    # cut short: the second comparison's documents are stored, never marked
    orphans = measured(store, sweep, second, 2)
    planned = plan_of(store, sweep)
    assert [run.key for run in planned.plan.to_run] == [run.key for run in second]
    # a comparison with one backend done and one not runs whole
    only_one = sweep_runs.mark(store, sweep, second, orphans[:1], "a worker failed")
    assert only_one[0].config["backend"] == "jax"
    assert [r.key for r in plan_of(store, sweep).plan.to_run] == [r.key for r in second]
    # before it runs again, its earlier documents (marked or not) are superseded, and said
    earlier = sweep_runs.EarlierWindows.read(store, sweep)
    assert earlier.supersede(second) == 4  # the windows of 2 rounds of 2 backends
    after = {r.run_id: r for r in ResultStore(store).results()}
    assert all(after[r.run_id].superseded == sweep_runs.SUPERSEDED for r in orphans)
    assert not any(after[r.run_id].superseded for r in marked)
    # --force reruns the done comparison too
    assert len(plan_of(store, sweep, force=True).plan.to_run) == 4


def toy_study(*claims: dict) -> published.Study:
    """A study of ``claims`` (each a claim's keys beside its id and kind)."""
    document_ = {
        "name": "toy", "title": "A toy study", "document": "toy.txt", "source": "tests",
        "hardware": {"cpu": "a CPU"}, "versions": {"mxnet": "1.4.0"}, "sweep": "sweeps/x.yaml",
        "figures": [{"id": "f1", "value": 1.3, "units": "x", "as_published": "1.3x",
                     "provenance": {"table": "Table 1", "row": "MLP", "column": "ratio"}}],
        "claims": [
            {"statement": "s", "quote": "q", "metric": "images_per_sec", **claim}
            for claim in claims
        ],
    }  # fmt: skip
    return published.parse_study(document_, "toy.yaml")


FASTER = {"id": "jax-faster", "kind": "sign", "expect": "greater", "for_each": "batch_size",
          "numerator": {"backend": "jax"}, "denominator": {"backend": "torch"}}  # fmt: skip
BATCHES = {"id": "bigger-batches-faster", "kind": "sign", "expect": "greater",
           "where": {"backend": "jax"}, "numerator": {"batch_size": 32},
           "denominator": {"batch_size": 16}}  # fmt: skip
MEMORY = {"id": "jax-less-memory", "kind": "sign", "expect": "less", "requires": ["gpu"],
          "metric": "memory_process_nvml", "numerator": {"backend": "jax"},
          "denominator": {"backend": "torch"}}  # fmt: skip


def test_verdicts_read_each_window_round_as_a_round_and_leave_dropped_ones_out(tmp_path):
    study = toy_study(FASTER)
    sweep = windows_sweep()
    store = tmp_path / "store"
    for group in comparisons_of(sweep.runs):
        found = []
        for run in group:
            rounds = []
            for r in range(ROUNDS_NEEDED + 1):
                busy = "torch's window measured while busy" if r == ROUNDS_NEEDED else None
                ips = {"jax": 130.0, "torch": 100.0}[run.config.backend] + r % 2
                rounds.append((ips if busy is None else 1.0, busy))
            found.append(comparison_doc(run, rounds))
        writer = ResultStore(store)
        for result in found:
            writer.add(result)
        sweep_runs.mark(store, sweep, group, found, "ratio precision reached")
    (outcome,) = reproduce.verdicts(study, sweep, store)
    assert outcome.verdict == HOLDS, outcome.reason
    assert outcome.evidence.rounds == ROUNDS_NEEDED  # the dropped round is not one
    # run keys of another plan (the fresh-process sweep) find none of the windows
    with pytest.raises(StoreError, match="no runs of the sweep w as planned here"):
        reproduce.verdicts(study, parse_sweep(sweep_document(), "f.yaml"), store)


def test_reproduce_measures_backend_ratio_studies_in_windows_only():
    ratios = toy_study(FASTER, MEMORY)
    assert reproduce.measure_choice(ratios, True, None, None, gpu=False)[0]
    on_gpu, why = reproduce.measure_choice(ratios, True, None, None, gpu=True)
    assert not on_gpu and "memory_process_nvml, which needs fresh processes" in why
    fresh, why = reproduce.measure_choice(toy_study(FASTER, BATCHES), True, None, None, gpu=False)
    assert not fresh and "compares batch_size, not backends" in why
    assert reproduce.measure_choice(ratios, True, None, "--repeats", gpu=False) == (
        False, "fresh-process rounds (--repeats)",
    )  # fmt: skip
    assert not reproduce.measure_choice(ratios, True, False, None, gpu=False)[0]  # --fresh
    assert not reproduce.measure_choice(ratios, False, None, None, gpu=False)[0]  # full size
    with pytest.raises(ConfigError, match="without --repeats"):
        reproduce.measure_choice(ratios, True, True, "--repeats", gpu=False)


def test_windows_on_slurm_one_run_per_task_are_refused_before_anything_runs(tmp_path, capsys):
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(two_by_two(measure="windows")))
    with pytest.raises(SystemExit) as stopped:
        main(["sweep", str(path), "--executor", "slurm", "--per-task", "run",
              "--store", str(tmp_path / "s")])  # fmt: skip
    assert stopped.value.code == 2
    assert "runs cannot be tasks of their own; received --per-task run" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_warm_is_refused_for_a_sweep_in_windows_before_anything_runs(tmp_path, capsys):
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(two_by_two(measure="windows")))
    with pytest.raises(SystemExit) as stopped:
        main(["sweep", str(path), "--warm", "--store", str(tmp_path / "s")])
    assert stopped.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--warm: expected --warm for fresh-process runs only" in err
    assert "or add --fresh-processes" in err and not (tmp_path / "s").exists()


@pytest.mark.slow
def test_a_tiny_sweep_in_windows_stores_marked_comparisons_and_resumes(tmp_path, home):
    require_backends("jax", "torch")
    path = tmp_path / "w.yaml"
    sweep_file = document(
        measure="windows", window=0.2, ratio_budget=4,
        matrix={"batch_size": [16, 32], "backend": ["jax", "torch"]},
    )  # fmt: skip
    path.write_text(yaml.safe_dump(sweep_file))
    store = tmp_path / "store"
    # a busy-threshold of 1: no round of this shared machine is dropped for other work
    first = run_kbench(["sweep", str(path), "--store", str(store), "--busy-threshold", "1"], home)
    assert first.returncode == 0, dump(first)
    assert "4 runs in 2 comparisons in warm windows" in first.stdout
    # the budget counts from the workers' start: a round or more per comparison
    assert first.stderr.count("stopped: --ratio-budget 4 s spent") == 2, first.stderr
    results = ResultStore(store).results()  # a document per backend and comparison
    assert len(results) == 4 and all(r.ok and r.metrics["windows"]["list"] for r in results)
    by_comparison = {}
    for r in results:
        by_comparison.setdefault(r.sweep["windows"]["comparison"], []).append(r)
    assert len(by_comparison) == 2
    for found in by_comparison.values():  # each comparison: both backends, round by round
        assert sorted(r.config["backend"] for r in found) == ["jax", "torch"]
        assert {r.config["batch_size"] for r in found} in ({16}, {32})
    assert len({r.sweep["run_key"] for r in results}) == 4  # a key per backend's run
    sweep = sweep_runs.as_asked(parse_sweep(sweep_file, str(path)))
    assert {sweep_run_of(r) for r in results} == {run.key for run in sweep.runs}
    again = run_kbench(["sweep", str(path), "--store", str(store)], home)
    assert again.returncode == 0, dump(again)
    assert "4 already done, 0 to run" in again.stdout
    assert len(ResultStore(store).results()) == len(results)  # nothing ran twice
