"""Machines told apart (issue 29): `kbench report`, `kbench reproduce` and
`kbench results --merge` on stores that hold runs of several machines.

The documents are real: tests/machines/ holds two result documents written by one tiny
real run on one machine (`kbench run --backend jax,torch --model mlp --dataset synthetic
--steps 10 --warmup-steps 2`); each test copies them into the stores of two "machines",
editing only what tells machines apart (hostname, CPU model, a GPU) and, for the
study, the settings and provenance of the study's sweep. No framework runs here.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
from test_reproduce import run_main

from kbench.results.result import RunResult
from kbench.results.store import ResultStore, host_of
from kbench.studies import claims, reproduce
from kbench.views import machines
from kbench.views.report import write_report

DOCUMENTS = Path(__file__).parent / "machines"
TEMPLATES = {
    backend: RunResult.load(DOCUMENTS / f"{backend}-mlp.json") for backend in ("jax", "torch")
}
# machine -> its hardware, and each backend's speed there as a multiple of the recorded
# one: torch at about half jax's speed on laptop-a (x0.52), jax 3x faster on laptop-b but
# torch not (x0.17 there), so each machine's own ratio differs from any across machines
MACHINES = {
    "laptop-a": {"cpu": "AMD EPYC", "speed": {"jax": 1.0, "torch": 100.0}},
    "laptop-b": {"cpu": "Intel Core i7-8750H", "speed": {"jax": 3.0, "torch": 100.0}},
}


def on_machine(
    template: RunResult, host: str, *, gpu: Optional[str] = None, clean: bool = False
) -> RunResult:
    """``template`` as if run on ``host``: hostname, CPU model (and a GPU) edited, its
    speed scaled as MACHINES says; ``clean``: its quality flags (busy) dropped."""
    environment = copy.deepcopy(template.environment)
    machine = environment["machine"]
    machine["hostname"] = host
    machine["cpu_model"] = machine["cpu"]["model"] = MACHINES[host]["cpu"]
    if gpu:
        machine["gpu"] = {"available": True, "devices": [{"index": 0, "name": gpu}]}
    speed = MACHINES[host]["speed"][template.config["backend"]]
    metrics = dict(template.metrics, images_per_sec=template.metrics["images_per_sec"] * speed)
    if clean:
        metrics["quality"] = dict(metrics["quality"], flags=[])
    return replace(template, environment=environment, metrics=metrics)


def machine_store(directory: Path, host: str, repeats: int = 2, **kwargs: Any) -> Path:
    """A store of ``host``'s runs: jax and torch, ``repeats`` rounds each."""
    store = ResultStore(directory)
    for repeat in range(repeats):
        for template in TEMPLATES.values():
            run = on_machine(template, host, **kwargs)
            run_id = f"{template.run_id}-{host}-{repeat}"
            store.add(replace(run, run_id=run_id, config={**run.config, "repeat": repeat}))
    return store.directory


def merged_store(tmp_path: Path, **kwargs: Any) -> Path:
    """Both machines' stores merged with kbench's own merge, as a user would."""
    merged = ResultStore(tmp_path / "merged")
    merged.merge([machine_store(tmp_path / host, host, **kwargs) for host in MACHINES])
    return merged.directory


def ratio_of(text: str) -> float:
    """The median ratio in a cell: ``x0.01 (...)``, ``0.00719× (...)``."""
    found = re.search(r"x?([0-9.]+)×?", text)
    assert found, text
    return float(found.group(1))


# the grouping ---------------------------------------------------------------------


def test_the_fixture_documents_are_real_runs_of_one_machine():
    for backend, template in TEMPLATES.items():
        assert template.ok and template.config["backend"] == backend
        assert template.sampler and template.metrics["step_times_s"]  # what a worker wrote
        assert template.environment["framework"]["name"] == backend
    assert len({host_of(t) for t in TEMPLATES.values()}) == 1


def test_machines_are_told_apart_by_hostname_and_gpu(tmp_path):
    runs = ResultStore(merged_store(tmp_path)).results()
    found = machines.measured_machines(runs)
    assert list(found) == list(MACHINES) and all(len(r) == 4 for r in found.values())
    same_name = [on_machine(TEMPLATES["jax"], "laptop-a", gpu="NVIDIA H100")] + [
        on_machine(TEMPLATES["jax"], "laptop-a")
    ]
    assert list(machines.measured_machines(same_name)) == ["laptop-a (NVIDIA H100)", "laptop-a"]
    one = machines.hardware_text(found["laptop-b"])
    assert "Intel Core i7-8750H (avx2, fma)" in one and "no GPU" in one
    assert "torch oneDNN on" in one and "jax XLA" in one  # each framework's kernel library
    assert machines.several_machines(found["laptop-a"]) is None  # one machine: nothing to tell
    other_cpu = copy.deepcopy(found["laptop-a"][0].environment)
    other_cpu["machine"]["cpu"]["model"] = "Intel Xeon"
    mixed = [*found["laptop-a"], replace(found["laptop-a"][0], environment=other_cpu)]
    assert "CPUs (mixed under one name) AMD EPYC (avx2, fma) / Intel Xeon" in (
        machines.hardware_text(mixed)
    )


def test_a_machine_without_a_finished_run_is_not_a_machine_to_compare_on(tmp_path):
    runs = ResultStore(machine_store(tmp_path / "a", "laptop-a")).results()
    never = replace(
        runs[0],
        run_id="never-started",
        status="failed",
        reason="slurm: the task never started",
        environment={"machine": {"hostname": "no node (the task never started)"}},
    )
    assert machines.several_machines([*runs, never]) is None
    assert machines.machine_table([*runs, never]) is None


# kbench results --merge ----------------------------------------------------------


def test_results_merge_of_two_machines_prints_a_row_per_machine_and_backend(tmp_path):
    sources = [str(machine_store(tmp_path / host, host)) for host in MACHINES]
    text = run_main(["results", "--store", str(tmp_path / "merged"), "--merge", *sources])
    assert "8 runs added" in text and "machines: laptop-a, laptop-b" in text
    table = text.split("Per machine: headline figures\n")[1]
    rows = {
        (cells[1], cells[2]): cells
        for cells in (re.split(r"\s{2,}", line.strip()) for line in table.splitlines()[2:6])
    }
    assert set(rows) == {(h, b) for h in MACHINES for b in ("jax", "torch")}
    # each machine's ratio is to jax on the same machine: laptop-b's jax is 3x faster,
    # so its torch/jax ratio is a third of laptop-a's; a ratio across machines would be 1
    a, b = ratio_of(rows["laptop-a", "torch"][4]), ratio_of(rows["laptop-b", "torch"][4])
    assert rows["laptop-a", "jax"][4] == rows["laptop-b", "jax"][4] == "x1.00"
    assert a == pytest.approx(3 * b, rel=0.35)
    assert "2 machines (laptop-a, laptop-b)" in table and "no ratio is computed across" in table
    assert "laptop-b: CPU Intel Core i7-8750H (avx2, fma); no GPU" in table


def test_results_merge_of_one_machine_prints_no_machine_table(tmp_path):
    source = machine_store(tmp_path / "a", "laptop-a")
    text = run_main(["results", "--store", str(tmp_path / "merged"), "--merge", str(source)])
    assert "4 runs added" in text and "Per machine" not in text


def test_results_merge_table_names_a_machine_without_the_baseline(tmp_path):
    merged = merged_store(tmp_path)
    store = ResultStore(merged)
    runs = [
        r
        for r in store.results()
        if not (host_of(r) == "laptop-b" and r.config["backend"] == "jax")
    ]
    table = machines.machine_table(runs, "jax")
    cells = {(row[1], row[2]): row for row in table.rows}
    assert cells["laptop-b", "torch"][4] == "- [no jax run on laptop-b]"
    assert cells["laptop-a", "torch"][4].startswith("x")


def test_results_merge_table_shows_kernel_libraries_where_a_backend_differs(tmp_path):
    runs = ResultStore(merged_store(tmp_path)).results()
    assert "CPU kernels" not in machines.machine_table(runs).headers  # the same everywhere
    eigen = []
    for r in runs:
        if host_of(r) == "laptop-b" and r.config["backend"] == "torch":
            environment = copy.deepcopy(r.environment)
            environment["framework"]["cpu_kernels"] = {"library": "Eigen"}
            r = replace(r, environment=environment)
        eigen.append(r)
    table = machines.machine_table(eigen)
    cells = {(row[1], row[2]): row[-1] for row in table.rows}
    assert table.headers[-1] == "CPU kernels" and cells["laptop-b", "torch"] == "Eigen"
    assert cells["laptop-a", "torch"].startswith("oneDNN on")


# kbench report ---------------------------------------------------------------------


def sections(page: str) -> Dict[str, str]:
    return dict(re.findall(r'<section id="([a-z-]+)">(.*?)</section>', page, re.S))


def test_report_of_two_machines_has_a_summary_and_a_heatmap_per_machine(tmp_path):
    results = ResultStore(merged_store(tmp_path)).results()
    summary = write_report(results, tmp_path / "report.html")
    page = (tmp_path / "report.html").read_text()
    assert "2 MACHINES" in page and "no median and no ratio is computed across machines" in page
    body = sections(page)["summary"]
    assert [m for m in re.findall(r"<h3>On ([^<]+)</h3>", body)] == list(MACHINES)
    assert "Intel Core i7-8750H (avx2, fma); no GPU; kernels: jax XLA" in body
    assert "@" not in body  # rows are backends of one machine, never backend @ host
    per_machine = body.split("<h3>On ")[1:]
    speed = [t.split("<h3>Speed against")[1].split("</table>")[0] for t in per_machine]
    ratios = [  # the torch column of each machine's speed table
        ratio_of(
            re.findall(r"<td[^>]*>(.*?)</td>", t)[re.findall(r"<th>(.*?)</th>", t).index("torch")]
        )
        for t in speed
    ]
    assert ratios[0] == pytest.approx(3 * ratios[1], rel=0.35)  # each to its own jax
    assert [f for f in summary.figures if f.startswith("Speed against")] == [
        "Speed against the baseline, on laptop-a",
        "Speed against the baseline, on laptop-b",
    ]
    frameworks = sections(page)["environment"].split("<h3>Frameworks</h3>")[1]
    assert "<th>host</th>" in frameworks and "<th>CPU kernels</th>" in frameworks
    assert "<td>laptop-b</td><td>torch</td>" in frameworks


def test_report_of_one_machine_keeps_one_summary_table(tmp_path):
    results = ResultStore(machine_store(tmp_path / "a", "laptop-a")).results()
    summary = write_report(results, tmp_path / "report.html")
    page = (tmp_path / "report.html").read_text()
    assert "MACHINES" not in page and "<h3>On " not in page
    assert "Speed ratios are against <b>jax</b>." in page
    assert "Speed against the baseline" in summary.figures
    assert "<th>CPU kernels</th>" not in page


def test_report_baseline_missing_on_one_machine_says_so(tmp_path):
    runs = ResultStore(merged_store(tmp_path)).results()
    runs = [r for r in runs if not (host_of(r) == "laptop-b" and r.config["backend"] == "jax")]
    write_report(runs, tmp_path / "report.html", baseline="jax")
    body = sections((tmp_path / "report.html").read_text())["summary"]
    assert "No jax run on this machine: its ratios are against torch." in body


# kbench reproduce ------------------------------------------------------------------


LAPTOP_GPU = {"available": True, "devices": [{"index": 0}]}  # smaller-batches-slower: a GPU claim


def laptop_study_store(tmp_path: Path, hosts: List[str]) -> Path:
    """The ResNet-50 runs of keras-mxnet-laptop's reduced sweep (its own run keys and
    settings), from the real documents, on each of ``hosts``: MXNet slower than
    TensorFlow at batch 16 than at 32 on laptop-a, the other way round on laptop-b."""
    _, sweep = reproduce.prepare("keras-mxnet-laptop", True)
    sweep = reproduce.with_rounds(sweep, claims.ROUNDS_NEEDED)
    speeds = {  # (batch, backend) -> img/s
        "laptop-a": {(16, "mxnet"): 10, (32, "mxnet"): 30, (16, "tensorflow"): 12,
                     (32, "tensorflow"): 40},
        "laptop-b": {(16, "mxnet"): 30, (32, "mxnet"): 10, (16, "tensorflow"): 40,
                     (32, "tensorflow"): 12},
    }  # fmt: skip
    store = ResultStore(tmp_path / "study")
    for host in hosts:
        for run in sweep.runs:
            ips = speeds[host].get((run.config.batch_size, run.config.backend))
            if run.group != "resnet50-synthetic" or ips is None:
                continue
            done = on_machine(TEMPLATES["jax"], host, clean=True)
            # the framework facts are jax's, not this run's backend's: left out
            environment = {k: v for k, v in done.environment.items() if k != "framework"}
            environment["machine"] = {**environment["machine"], "gpu": LAPTOP_GPU}
            store.add(
                replace(
                    done,
                    run_id=f"{host}-{run.key}",
                    config=run.config.to_dict(),
                    metrics=dict(done.metrics, images_per_sec=float(ips + run.config.repeat)),
                    sweep=sweep.provenance(run),
                    sampler=None,  # no timelines to draw: the claims are the point here
                    environment=environment,
                )
            )
    return store.directory


def test_reproduce_judges_each_machine_apart(tmp_path):
    store = laptop_study_store(tmp_path, list(MACHINES))
    text = run_main(
        ["reproduce", "keras-mxnet-laptop", "--reduced", "--dry-run", "--fresh-processes",
         "--store", str(store)]
    )  # fmt: skip
    # the machines carry a GPU: smaller-batches-slower is a GPU finding (issue 26)
    assert "2 machines (laptop-a (GPU), laptop-b (GPU))" in text
    assert "claims judged per machine" in text
    a = text.split("=== on laptop-a")[1].split("=== on laptop-b")[0]
    b = text.split("=== on laptop-b")[1]
    assert "[HOLDS] smaller-batches-slower" in a  # batch 16 slower than 32 on laptop-a
    assert "[DOES NOT HOLD] smaller-batches-slower" in b  # and faster on laptop-b
    assert "CPU Intel Core i7-8750H" in b
    markdown = (store / "claims.md").read_text()
    assert "on laptop-a" in markdown and "on laptop-b" in markdown
    document = json.loads((store / "claims.json").read_text())
    verdicts = {
        m["machine"]: {c["id"]: c["verdict"] for c in m["claims"]} for m in document["machines"]
    }
    assert verdicts["laptop-a (GPU)"]["smaller-batches-slower"] == claims.HOLDS
    assert verdicts["laptop-b (GPU)"]["smaller-batches-slower"] == claims.FAILS


def test_reproduce_of_one_machine_is_as_before(tmp_path):
    store = laptop_study_store(tmp_path, ["laptop-a"])
    text = run_main(
        ["reproduce", "keras-mxnet-laptop", "--reduced", "--dry-run", "--fresh-processes",
         "--store", str(store)]
    )  # fmt: skip
    assert "[HOLDS] smaller-batches-slower" in text and "=== on" not in text
    document = json.loads((store / "claims.json").read_text())
    assert "machines" not in document and document["study"] == "keras-mxnet-laptop"


def test_report_of_a_study_of_two_machines_has_claims_per_machine(tmp_path):
    from kbench.studies.reproduce import paper_section

    store = laptop_study_store(tmp_path, list(MACHINES))
    # as `kbench report` reads a store: of each sweep run, the newest on each machine
    section = paper_section(machines.load_per_machine([store]))
    tables = {t.title: t for t in section.tables}
    title = "Paper vs this machine: keras-mxnet-laptop (reduced size), on "
    assert list(tables) == [title + "laptop-a (GPU)", title + "laptop-b (GPU)"]
    verdicts = {
        host: {row[0]: row[4].split(":")[0] for row in tables[f"{title}{host} (GPU)"].rows}
        for host in MACHINES
    }
    assert verdicts["laptop-a"]["smaller-batches-slower"] == claims.HOLDS
    assert verdicts["laptop-b"]["smaller-batches-slower"] == claims.FAILS
    assert "CPU Intel Core i7-8750H" in " ".join(tables[title + "laptop-b (GPU)"].notes)


# the newest result of a sweep run, per machine ---------------------------------------


def sweep_run(template: RunResult, host: str, run_id: str, started: str, status: str = "ok"):
    """``template`` on ``host`` as run ``k1`` of sweep ``s``, started at ``started``."""
    run = on_machine(template, host)
    sweep = {"name": "s", "file": "s.yaml", "reduced": False, "group": "g", "run_key": "k1"}
    return replace(run, run_id=run_id, started_at=started, status=status, sweep=sweep)


def test_each_machine_keeps_its_newest_result_of_a_sweep_run():
    jax = TEMPLATES["jax"]
    a_old = sweep_run(jax, "laptop-a", "a-old", "2026-11-27T10:00:00")
    a_new = sweep_run(jax, "laptop-a", "a-new", "2026-11-27T11:00:00")
    b = sweep_run(jax, "laptop-b", "b", "2026-11-27T09:00:00")
    found = machines.newest_per_machine([a_old, b, a_new])
    assert [r.run_id for r in found] == ["b", "a-new"]  # latest_only would keep a-new only
    # one machine: the newest of each run, as the store's latest_only reads them
    assert [r.run_id for r in machines.newest_per_machine([a_old, a_new])] == ["a-new"]


def test_a_failure_rerun_later_on_another_machine_is_left_out():
    jax = TEMPLATES["jax"]
    other = sweep_run(TEMPLATES["torch"], "laptop-a", "other", "2026-11-27T08:00:00")
    other = replace(other, sweep={**other.sweep, "run_key": "k2"})
    failed = sweep_run(jax, "laptop-a", "failed", "2026-11-27T10:00:00", status="failed")
    rerun = sweep_run(jax, "laptop-b", "rerun", "2026-11-27T11:00:00")
    found = machines.newest_per_machine([other, failed, rerun])
    assert [r.run_id for r in found] == ["other", "rerun"]
    kept = sweep_run(jax, "laptop-a", "kept", "2026-11-27T12:00:00", status="failed")
    found = machines.newest_per_machine([other, rerun, kept])  # a newer failure stays
    assert [r.run_id for r in found] == ["other", "rerun", "kept"]


def test_compare_of_a_store_merged_from_machines_that_ran_one_sweep_shows_both(tmp_path):
    store = laptop_study_store(tmp_path, list(MACHINES))
    text = run_main(["compare", "--store", str(store)])
    assert "on laptop-a" in text and "on laptop-b" in text  # both machines' runs, apart


def test_the_python_api_and_a_sweeps_closing_tables_keep_each_machines_runs(tmp_path):
    """Before: kbench.load and the tables a sweep ends with kept one result per sweep run
    over all machines, so a store merged from machines that ran one sweep lost one."""
    from types import SimpleNamespace

    import kbench
    from kbench.studies import sweep_runs

    store = laptop_study_store(tmp_path, list(MACHINES))
    loaded = kbench.load(store)
    hosts = {host_of(r) for r in loaded}
    assert len(hosts) == 2 and all(h.split()[0] in MACHINES for h in hosts), hosts
    assert len(loaded) == len(kbench.load(store, latest_only=False))  # nothing rerun
    sweep = SimpleNamespace(name=loaded[0].sweep["name"])  # all stored_results reads of it
    assert {host_of(r) for r in sweep_runs.stored_results(store, sweep)} == hosts
