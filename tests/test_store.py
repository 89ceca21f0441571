"""The results store: index kept true to the documents, filters, export, merge, compare."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import kbench_here

from kbench.results.result import RunResult
from kbench.results.store import INDEX_NAME, Filter, ResultStore, StoreError, load_frame
from kbench.views.report import Comparison
from kbench.views.tables import study_tables


def result(run_id, backend, ips, *, host="laptop", status="ok", batch=32, repeat=0, gpu=None,
           memory=None, sweep=None):  # fmt: skip
    machine = {"hostname": host, "gpu": {"devices": [{"name": gpu}] if gpu else []}}
    metrics = {}
    if status == "ok":
        metrics = {"images_per_sec": ips, "test_accuracy": 0.5,
                   "memory": [{"kind": "process_peak_rss", "bytes": memory or 2**30}]}  # fmt: skip
    return RunResult(
        run_id=run_id, status=status, reason=None if status == "ok" else "out of memory",
        config={"backend": backend, "model": "mlp", "dataset": "synthetic", "batch_size": batch,
                "repeat": repeat, "mode": "train", "timeout_s": 9},
        started_at=f"2026-01-01T00:00:{len(run_id):02d}", wall_time_s=1.0,
        environment={"machine": machine}, data={"synthetic": True, "name": "synthetic"},
        metrics=metrics, sweep=sweep,
    )  # fmt: skip


def test_index_follows_the_documents(tmp_path):
    store = ResultStore(tmp_path)
    store.add(result("a1", "jax", 10.0))
    store.add(result("b22", "torch", 20.0))
    assert [e.run_id for e in store.entries()] == ["a1", "b22"]
    assert len((tmp_path / INDEX_NAME).read_text().splitlines()) == 2
    # A document copied in by hand is indexed; a deleted one is dropped.
    result("c333", "mxnet", 5.0).save(tmp_path)
    (tmp_path / "a1.json").unlink()
    assert [e.run_id for e in store.entries()] == ["b22", "c333"]
    assert len((tmp_path / INDEX_NAME).read_text().splitlines()) == 2
    # A damaged index is rebuilt from the documents; a damaged document is reported.
    (tmp_path / INDEX_NAME).write_text("{not json\n")
    (tmp_path / "broken.json").write_text('{"schema_version": 99, "run_id": "x"}')
    assert [e.run_id for e in store.entries()] == ["b22", "c333"]
    assert store.unreadable and "newer kbench" in store.unreadable[0][1]


def test_a_writer_keeps_what_another_writer_indexed_since_its_last_add(tmp_path):
    """Each store keeps the index lines it last read or wrote, and reuses them while the
    file is still the one it saw (a sweep's adds were quadratic in its runs); an index
    another writer replaced, or one edited in place, is read again."""
    first, second = ResultStore(tmp_path), ResultStore(tmp_path)
    first.add(result("a1", "jax", 10.0))
    second.add(result("b22", "torch", 20.0))  # first's cached index is stale now
    first.add(result("c333", "mxnet", 5.0))
    lines = (tmp_path / INDEX_NAME).read_text().splitlines()
    assert [json.loads(line)["run_id"] for line in lines] == ["a1", "b22", "c333"]
    assert [json.loads(line)["images_per_sec"] for line in lines] == [10.0, 20.0, 5.0]
    (tmp_path / INDEX_NAME).write_text("{not json\n")  # damaged by hand, same store
    first.add(result("d4444", "jax", 1.0))
    assert [e.run_id for e in ResultStore(tmp_path).entries()] == ["a1", "b22", "c333", "d4444"]


def test_a_copy_of_a_document_is_indexed_once_and_the_index_left_alone_after(tmp_path):
    """Two documents of one run (a hand-made backup beside it) are two index lines, so a
    second reading finds the index whole and does not rewrite it."""
    store = ResultStore(tmp_path)
    store.add(result("a1", "jax", 10.0))
    (tmp_path / "backup.json").write_bytes((tmp_path / "a1.json").read_bytes())
    assert [e.file for e in store.entries()] == ["a1.json", "backup.json"]
    before = (tmp_path / INDEX_NAME).stat()
    assert [e.file for e in ResultStore(tmp_path).entries()] == ["a1.json", "backup.json"]
    after = (tmp_path / INDEX_NAME).stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_filters_match_settings_and_fields_and_refuse_unknown_names(tmp_path):
    store = ResultStore(tmp_path)
    store.add(result("a1", "jax", 10.0, batch=16))
    store.add(result("b22", "torch", 20.0))
    store.add(result("c333", "torch", 0, status="oom"))
    assert [e.run_id for e in store.entries([Filter.parse("backend=torch")])] == ["b22", "c333"]
    both = [Filter.parse("backend=jax,torch"), Filter.parse("status=ok")]
    assert [e.run_id for e in store.entries(both)] == ["a1", "b22"]
    assert [e.run_id for e in store.entries([Filter.parse("batch_size=16")])] == ["a1"]
    with pytest.raises(StoreError, match="unknown field 'bakend'"):
        store.entries([Filter.parse("bakend=jax")])
    with pytest.raises(StoreError, match="NAME=VALUE"):
        Filter.parse("backend")


def test_latest_result_of_a_rerun_sweep_run_counts(tmp_path):
    store = ResultStore(tmp_path)
    store.add(result("a1", "jax", 0, status="timeout", sweep={"name": "s", "run_key": "k1"}))
    store.add(result("a22", "jax", 30.0, sweep={"name": "s", "run_key": "k1"}))
    store.add(result("b333", "torch", 20.0, sweep={"name": "s", "run_key": "k2"}))
    assert store.done_keys() == {"k1": "ok", "k2": "ok"}
    assert [r.run_id for r in store.results(latest_only=True)] == ["a22", "b333"]
    assert len(store.results()) == 3


def test_export_csv_parquet_and_the_dataframe_api(tmp_path):
    store = ResultStore(tmp_path / "s")
    store.add(result("a1", "jax", 10.0))
    store.add(result("b22", "torch", 0, status="oom"))
    frame = load_frame(tmp_path / "s")
    assert list(frame["backend"]) == ["jax", "torch"]
    assert frame.loc[0, "images_per_sec"] == 10.0 and pd.isna(frame.loc[1, "images_per_sec"])
    assert frame.loc[0, "memory_process_peak_rss_bytes"] == 2**30
    assert frame.loc[1, "status"] == "oom" and frame.loc[0, "host"] == "laptop"
    done = kbench_here(["results", "--store", str(tmp_path / "s"), "--export",
                       str(tmp_path / "r.csv")], tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert list(pd.read_csv(tmp_path / "r.csv")["backend"]) == ["jax", "torch"]
    done = kbench_here(["results", "--store", str(tmp_path / "s"), "--export",
                       str(tmp_path / "r.parquet"), "--filter", "status=ok"], tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert list(pd.read_parquet(tmp_path / "r.parquet")["run_id"]) == ["a1"]
    done = kbench_here(["results", "--store", str(tmp_path / "s"), "--export",
                       str(tmp_path / "r.xlsx")], tmp_path)  # fmt: skip
    assert done.returncode == 2 and ".csv or .parquet" in done.stderr


def test_merged_machines_stay_apart_in_comparisons(tmp_path):
    laptop, gpu_box, merged = tmp_path / "laptop", tmp_path / "gpu", tmp_path / "all"
    for r in (result("a1", "jax", 10.0), result("b22", "torch", 20.0)):
        ResultStore(laptop).add(r)
    for r in (result("c333", "jax", 400.0, host="box", gpu="H100"),
              result("d4444", "torch", 0, host="box", gpu="H100", status="oom")):  # fmt: skip
        ResultStore(gpu_box).add(r)
    (laptop / "logs").mkdir()
    (laptop / "logs" / "a1.log").write_text("log of a1")
    done = kbench_here(["results", "--store", str(merged), "--merge", str(laptop), str(gpu_box)],
                      tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "4 runs added, 0 already there" in done.stdout
    assert (merged / "logs" / "a1.log").read_text() == "log of a1"
    again = ResultStore(merged).merge([laptop])
    assert (again.added, again.already_present) == (0, 2)

    results = ResultStore(merged).results()
    made = study_tables(results, baseline="jax")  # a table per machine, no ratio across them
    laptop_table, box_table = [t for t in made if t.title.startswith("Throughput")]
    assert laptop_table.title.endswith(", on laptop")
    assert box_table.title.endswith(", on box (H100)")
    assert laptop_table.headers == box_table.headers == ["model", "jax", "torch"]
    assert laptop_table.rows == [["mlp (synthetic)", "10", "20"]]
    assert box_table.rows == [["mlp (synthetic)", "400", "OOM"]]
    ratio = [t for t in made if t.title.startswith("Speed")][0]
    assert ratio.rows[0][1:] == ["x1.00", "x2.00 (1 run: no spread)"]
    markdown = Comparison.of(results).markdown("merged")
    assert "| mlp (synthetic) | 400 | OOM |" in markdown and "a table per machine" in markdown
    assert "| d4444 | oom | out of memory |" in markdown


def test_compare_command_prints_and_writes_markdown(tmp_path):
    store = ResultStore(tmp_path / "s")
    for repeat, (a, b) in enumerate([(10.0, 30.0), (20.0, 40.0), (10.0, 20.0)]):
        store.add(result(f"a{'x' * repeat}", "jax", a, repeat=repeat, batch=16))
        store.add(result(f"b{'x' * repeat}", "torch", b, repeat=repeat, batch=16))
    store.add(result("cc", "jax", 50.0, batch=64))
    done = kbench_here(["compare", "--store", str(tmp_path / "s"), "--baseline", "jax"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "batch 16" in done.stdout  # the setting that tells rows apart
    assert "30 (20-40, n=3)" in done.stdout
    assert "x2.00 (2.00-3.00, 75% interval, n=3)" in done.stdout
    markdown = (tmp_path / "s" / "compare.md").read_text()
    assert "| mlp (synthetic) | batch 16 | 10 (10-20, n=3) | 30 (20-40, n=3) |" in markdown
    assert "| mlp (synthetic) | batch 64 | 50 | - |" in markdown
    missing = kbench_here(["compare", "--store", str(tmp_path / "nothing")], tmp_path)
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_results_listing(tmp_path):
    store = ResultStore(tmp_path / "s")
    store.add(result("a1", "jax", 1234.0))
    json.loads((tmp_path / "s" / "a1.json").read_text())
    done = kbench_here(["results", "--store", str(tmp_path / "s")], tmp_path)
    assert done.returncode == 0 and "a1" in done.stdout and "1,234" in done.stdout


def test_merge_goes_on_past_a_document_damaged_after_it_was_indexed(tmp_path):
    source = ResultStore(tmp_path / "src")
    source.add(result("a1", "jax", 10.0))
    source.add(result("b22", "torch", 20.0))
    (tmp_path / "src" / "b22.json").write_text('{"schema_version": 2, "run_id": "b22", "sta')
    done = kbench_here(["results", "--store", str(tmp_path / "all"), "--merge",
                       str(tmp_path / "src")], tmp_path)  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "1 runs added" in done.stdout
    assert "b22.json: not merged: expected a JSON document; it does not parse" in done.stderr
    assert [e.run_id for e in ResultStore(tmp_path / "all").entries()] == ["a1"]
