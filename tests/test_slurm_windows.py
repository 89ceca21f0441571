"""Sweeps in warm windows on Slurm (``kbench sweep --windows --executor slurm``).

The job plan (which comparisons become which tasks, what a resumed plan skips and
measures again, the windows a cut-short comparison left superseded, the runs a
node finds for its task) is checked on documents built here, without a framework
process. One slow test submits a tiny sweep in windows (2 settings x jax, torch: 4
warm workers) to the one-node cluster of ``tests/slurm_cluster.py`` (skipped with the
reason where it cannot start; under CI it must start), then submits it again.
"""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest
import yaml
from conftest import dump, require_backends, run_kbench
from slurm_cluster import running
from test_sweep_windows import measured  # a comparison's documents, as measured

from kbench.cli.app import main
from kbench.results.config import ConfigError
from kbench.results.store import ResultStore
from kbench.studies import slurm, sweep_runs
from kbench.studies.sweep import (
    WindowSettings,
    comparisons_of,
    parse_sweep,
    sweep_run_of,
    windowed,
)

pytestmark = pytest.mark.own_processes("a Slurm job, failed, cancelled or resumed")

TINY = {"model": "mlp", "dataset": "synthetic", "train_samples": 256, "test_samples": 32,
        "warmup_steps": 2}  # fmt: skip
PAIRS = {"name": "pairs", "matrix": {"batch_size": [16, 32], "backend": ["jax", "torch"]}}
INFER = {"name": "infer", "settings": {"mode": "inference", "batch_size": 8},
         "matrix": {"backend": ["jax", "torch"]}}  # fmt: skip


def document(**top) -> dict:
    return dict({"name": "sw", "settings": dict(TINY), "measure": "windows", "window": 0.3}, **top)


def windows_sweep(**top):
    return sweep_runs.as_asked(parse_sweep(document(**top), "f.yaml"))


def test_each_comparison_in_windows_is_one_task_and_fresh_settings_stay_per_repeat():
    sweep = windows_sweep(repeats=2, groups=[PAIRS, INFER])
    units = slurm.task_units(sweep.runs, "comparison", warm=False)
    by_window = [unit for unit in units if windowed(unit)]
    comparisons = comparisons_of(sweep.runs)
    assert len(comparisons) == 2  # batch 16 and 32, every backend, the repeats folded in
    assert [[r.key for r in u] for u in by_window] == [[r.key for r in g] for g in comparisons]
    for unit in by_window:  # one task: both backends' warm workers, one setting
        assert [r.config.backend for r in unit] == ["jax", "torch"]
        assert len({r.config.batch_size for r in unit}) == 1
        assert {r.config.window_s for r in unit} == {0.3}
    fresh = [unit for unit in units if not windowed(unit)]
    assert [[(r.config.backend, r.config.repeat) for r in u] for u in fresh] == [
        [("jax", 0), ("torch", 0)], [("jax", 1), ("torch", 1)],
    ]  # fmt: skip
    assert len(units) == 4


def test_a_resumed_plan_skips_done_comparisons_and_measures_cut_short_ones_whole(tmp_path):
    sweep = windows_sweep(groups=[PAIRS])
    first, second = comparisons_of(sweep.runs)
    store = tmp_path / "store"
    assert slurm.runs_to_do(sweep, store, False, False) == sweep.runs  # nothing yet
    done = sweep_runs.mark(store, sweep, first, measured(store, sweep, first, 3), "budget")
    # the second comparison cut short: its jax worker's windows marked, torch's not
    orphans = measured(store, sweep, second, 2)
    sweep_runs.mark(store, sweep, second, orphans[:1], "cut short")
    to_do = slurm.runs_to_do(sweep, store, False, False)
    assert [r.key for r in to_do] == [r.key for r in second]  # whole, jax included
    assert [len(u) for u in slurm.task_units(to_do, "comparison", False)] == [2]
    # a run a Slurm task left without a result: recorded, and its comparison redone whole
    submission = slurm.Submission(tmp_path, {"tasks": [[r.key for r in first]]}, "7",
                                  {0: slurm.TaskState("CANCELLED by 0")})  # fmt: skip
    slurm.record_ended(sweep, submission, 0, first[1:], store)
    assert {r.key for r in slurm.runs_to_do(sweep, store, False, False)} == {
        r.key for r in sweep.runs
    }
    assert len(slurm.runs_to_do(sweep, store, True, False)) == 4  # --force: everything
    # before submitting again: the earlier windows of what is resubmitted are dropped, said
    said = []
    assert slurm.drop_earlier_windows(sweep, store, second, said.append) == 4
    assert len(said) == 1 and "batch_size=32: 4 earlier window(s) superseded: " in said[0]
    after = {r.run_id: r for r in ResultStore(store).results()}
    assert all(after[r.run_id].superseded == sweep_runs.SUPERSEDED for r in orphans)
    assert not any(after[r.run_id].superseded for r in done)
    assert slurm.drop_earlier_windows(sweep, store, second, said.append) == 0  # once


def test_a_node_finds_its_comparison_and_the_runs_kept_fresh(tmp_path):
    path = tmp_path / "sw.yaml"
    path.write_text(yaml.safe_dump(document(groups=[PAIRS, INFER])))
    sweep = sweep_runs.as_asked(parse_sweep(yaml.safe_load(path.read_text()), str(path)))
    jax_only = sweep_runs.as_asked(  # --filter backend=jax: one backend, fresh processes
        sweep_runs.select_runs(parse_sweep(document(groups=[PAIRS]), str(path)), ["backend=jax"])
    )
    assert not any(windowed([r]) for r in jax_only.runs)
    comparison = comparisons_of(sweep.runs)[1]
    tasks = [[r.key for r in comparison], [jax_only.runs[0].key], ["gone"]]
    manifest = {"sweep_file": str(path), "reduced": False, "max_runs": 1000,
                "windows": asdict(sweep.windows), "tasks": tasks}  # fmt: skip
    found, runs = slurm.task_runs(manifest, 0)
    assert found.windows == WindowSettings(window_s=0.3)
    assert [r.key for r in runs] == [r.key for r in comparison] and windowed(runs)
    found, runs = slurm.task_runs(manifest, 1)
    assert runs[0].config == jax_only.runs[0].config and not windowed(runs)
    with pytest.raises(ConfigError, match="the file changed after submission"):
        slurm.task_runs(manifest, 2)


def test_windows_on_slurm_are_planned_not_refused(tmp_path, capsys):
    path = tmp_path / "sw.yaml"
    path.write_text(yaml.safe_dump(document(matrix=PAIRS["matrix"])))
    status = main(["sweep", str(path), "--executor", "slurm", "--dry-run",
                   "--store", str(tmp_path / "s")])  # fmt: skip
    out = capsys.readouterr().out
    assert status == 0, out
    assert "4 runs in 2 comparisons in warm windows, 0 already done, 4 to run" in out
    assert out.count("warm windows") >= 3  # the plan: one row per comparison
    assert not (tmp_path / "s").exists()


# the one-node cluster ---------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from running(tmp_path_factory.mktemp("slurm"))


@pytest.mark.slow
def test_a_sweep_in_windows_on_slurm_is_a_task_per_comparison_and_resumes(cluster, tmp_path):
    require_backends("jax", "torch")  # the cheapest imports: 2 comparisons, 4 warm workers
    path = tmp_path / "sw.yaml"
    path.write_text(yaml.safe_dump(document(window=0.2, ratio_budget=4, matrix=PAIRS["matrix"])))
    store = tmp_path / "store"
    # one task at a time on this shared machine; a busy-threshold of 1: no round dropped
    args = ["sweep", str(path), "--store", str(store), "--executor", "slurm",
            "--max-parallel", "1", "--poll", "0.5", "--busy-threshold", "1"]  # fmt: skip
    env = {"SLURM_CONF": cluster.env["SLURM_CONF"]}
    first = run_kbench(args, tmp_path, env=env, timeout=600)
    print(first.stdout, first.stderr)
    (submission,) = [p.parent for p in store.glob(".slurm/*/job.json")]
    outputs = "".join(p.read_text() for p in sorted(submission.glob("task-*.out")))
    assert first.returncode == 0, dump(first) + outputs
    assert "4 runs in 2 comparisons in warm windows, 0 already done, 4 to run" in first.stdout
    job = json.loads((submission / "job.json").read_text())["job_id"]
    assert f"submitted job {job}: 2 tasks, 4 runs" in first.stdout
    assert "tasks: 0 queued, 0 running, 2 done, 0 failed" in first.stdout
    manifest = json.loads((submission / "tasks.json").read_text())
    assert manifest["windows"]["window_s"] == 0.2 and manifest["windows"]["ratio_budget_s"] == 4
    sweep = sweep_runs.as_asked(parse_sweep(yaml.safe_load(path.read_text()), str(path)))
    comparisons = comparisons_of(sweep.runs)
    assert manifest["tasks"] == [[r.key for r in group] for group in comparisons]
    windows = ResultStore(store).results()  # a document per backend and comparison
    assert len(windows) == 4 and all(r.ok and r.metrics["windows"]["list"] for r in windows)
    for index, group in enumerate(comparisons):  # each comparison: its task, whole
        output = (submission / f"task-{index}.out").read_text()
        assert output.count("stopped: --ratio-budget 4 s spent") == 1, output
        assert "jax/mlp: warm" in output and "torch/mlp: warm" in output  # side by side
        key = sweep_runs.comparison_key(group)
        mine = [r for r in windows if r.sweep["windows"]["comparison"] == key]
        assert sorted(r.config["backend"] for r in mine) == ["jax", "torch"]
        for r in mine:  # round by round, from the first
            rounds = [w["round"] for w in r.metrics["windows"]["list"]]
            assert rounds == list(range(len(rounds))), rounds
        assert {r.sweep["name"] for r in mine} == {"sw"} and all(
            r.sweep["windows"]["stopped"].startswith("--ratio-budget") for r in mine
        )
    assert len({r.sweep["run_key"] for r in windows}) == len(windows)  # a key per document
    assert {sweep_run_of(r) for r in windows} == {run.key for run in sweep.runs}
    assert not list(store.glob(".slurm/*/task-*/*.json"))  # every document moved in

    again = run_kbench(args, tmp_path, env=env, timeout=300)
    assert again.returncode == 0, dump(again)
    assert "4 already done, 0 to run" in again.stdout
    assert "nothing to submit: every run has a result" in again.stdout
    assert len(list(store.glob(".slurm/*/job.json"))) == 1  # no second job
    assert len(ResultStore(store).results()) == len(windows)  # nothing measured twice
