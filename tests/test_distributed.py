"""Data-parallel training on each framework's engine (kbench.distributed).

Fast tests check the launch plan, the shards and the breakdown arithmetic, the
breakdown table and figures (from hand-made results), and the CLI's refusals. Slow
tests train the MLP with 2 workers in every mode (tiny synthetic data, a few steps)
in one runner session, show those runs in ``kbench compare``, the report and
``python -m kbench.cli.distributed_table``, kill a worker mid-run, and check that
nothing is left running.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import uuid

import numpy as np
import psutil
import pytest
from conftest import ROOT, dump, kbench_here, require_backends

from kbench import datasets
from kbench.cli.distributed_table import main as table_main
from kbench.distributed.launcher import core_layout, cut_shards, preflight
from kbench.distributed.merge import HEADERS, breakdown_line, combine, shard_check
from kbench.distributed.plan import Cluster, PlanError, free_ports, plan, ports_needed
from kbench.distributed.worker import PHASES, StepLog, worker_summary
from kbench.measure import sysinfo
from kbench.results.config import DISTRIBUTED, ConfigError, RunConfig
from kbench.results.result import RunResult
from kbench.results.store import ResultStore
from kbench.views.distributed import (
    BREAKDOWN,
    SCALING,
    breakdown_figures,
    breakdown_tables,
    numeric_columns,
)
from kbench.views.figures import Drawn, Skipped
from kbench.views.report import write_report

pytestmark = pytest.mark.own_processes("a data-parallel engine's ranks and launchers")

TINY = dict(
    model="mlp",
    dataset="synthetic",
    steps=5,
    warmup_steps=2,
    batch_size=8,
    train_samples=128,
    test_samples=32,
    timeout_s=240.0,
    sample_interval_s=0.2,
)
# (mode, backend) pairs the slow test runs; tf-mirrored needs GPUs and is expected
# to be recorded unsupported on a machine without them
MODES = [
    ("torch-ddp", "torch-native"),
    ("torch-ddp", "torch"),
    ("tf-multiworker", "tensorflow"),
    ("tf-mirrored", "tensorflow"),
    ("tf-ps", "tensorflow"),
    ("jax", "jax"),
    ("mxnet-sync", "mxnet"),
    ("mxnet-async", "mxnet"),
    ("mxnet-sync", "mxnet-gluon"),
]


# ---------------------------------------------------------------------------- plan


def test_single_host_plan_binds_loopback_and_gives_every_mode_its_processes():
    cluster = Cluster.from_environment({})
    assert cluster.hosts == ("127.0.0.1",) and cluster.ifname == "lo"
    roles = {}
    for mode in ("torch-ddp", "tf-multiworker", "tf-ps", "jax", "mxnet-sync", "tf-mirrored"):
        ports = free_ports(ports_needed(mode, 2))
        assert len(set(ports)) == len(ports)
        procs, endpoints = plan(mode, 2, cluster, ports, "run.json")
        roles[mode] = sorted(p.name for p in procs)
        assert endpoints["bind"] == endpoints["coordinator"] == "127.0.0.1"
        text = json.dumps([list(p.args) + sorted(p.env.values()) for p in procs] + [endpoints])
        assert "0.0.0.0" not in text and "localhost" not in text
    assert roles["torch-ddp"] == ["launcher0"]
    assert roles["tf-multiworker"] == ["worker0", "worker1"]
    assert roles["tf-ps"] == ["chief0", "ps0", "worker0", "worker1"]
    assert roles["mxnet-sync"] == ["scheduler0", "server0", "worker0", "worker1"]
    assert roles["tf-mirrored"] == ["worker0"]
    procs, _ = plan("mxnet-async", 2, cluster, [5000], "run.json")
    worker = next(p for p in procs if p.name == "worker1")
    assert worker.env["DMLC_ROLE"] == "worker" and worker.env["DMLC_NODE_HOST"] == "127.0.0.1"
    assert worker.env["DMLC_INTERFACE"] == "lo" and worker.env["DMLC_PS_ROOT_PORT"] == "5000"


def test_multi_host_plan_splits_ranks_and_shares_ports():
    env = {
        "KBENCH_DIST_HOSTS": "10.0.0.1,10.0.0.2",
        "KBENCH_DIST_NODE": "1",
        "KBENCH_DIST_PORT": "29500",
        "KBENCH_DIST_IFNAME": "eth0",
    }
    cluster = Cluster.from_environment(env)
    assert cluster.address == "10.0.0.2" and cluster.coordinator == "10.0.0.1"
    procs, endpoints = plan("tf-multiworker", 4, cluster, range(29500, 29504), "run.json")
    assert [p.rank for p in procs] == [2, 3]
    assert endpoints["workers"] == [
        "10.0.0.1:29500",
        "10.0.0.1:29501",
        "10.0.0.2:29502",
        "10.0.0.2:29503",
    ]
    (launcher,), _ = plan("torch-ddp", 4, cluster, [29500], "run.json")
    args = " ".join(launcher.args)
    assert "--node-rank 1" in args and "--master-addr 10.0.0.1" in args
    assert "--local-addr 10.0.0.2" in args and "--nproc-per-node 2" in args
    procs, _ = plan("mxnet-sync", 4, cluster, [29500], "run.json")
    assert sorted(p.name for p in procs) == ["worker2", "worker3"]  # scheduler on host 0
    with pytest.raises(PlanError, match="tf-ps runs on one host"):
        plan("tf-ps", 4, cluster, range(29500, 29506), "run.json")
    with pytest.raises(PlanError, match="multiple of the 2 hosts"):
        plan("jax", 3, cluster, [29500], "run.json")
    with pytest.raises(PlanError, match="KBENCH_DIST_PORT"):
        Cluster.from_environment({"KBENCH_DIST_HOSTS": "a,b", "KBENCH_DIST_NODE": "0"})
    with pytest.raises(PlanError, match="KBENCH_DIST_NODE"):
        Cluster.from_environment(
            {"KBENCH_DIST_HOSTS": "a,b", "KBENCH_DIST_NODE": "2", "KBENCH_DIST_PORT": "29500"}
        )


def test_core_layout_gives_each_local_worker_its_own_cores():
    config = RunConfig(backend="torch", model="mlp", distributed="torch-ddp", workers=2)
    threads, layout = core_layout(config, 2)
    cores = sorted(os.sched_getaffinity(0))
    assert threads == max(1, len(cores) // 2)
    if len(cores) >= 2:
        assert not set(layout[0]) & set(layout[1])


# --------------------------------------------------------------------------- shards


def test_shards_are_disjoint_slices_of_the_runners_order():
    for steps in (None, 7):  # epochs, and a steps run that cycles through the data
        order = datasets.batch_order(50, 12, 2, seed=3, total_steps=steps)
        shards = cut_shards(order, 3, 4)
        assert shards.shape[0] == 3 and shards.shape[2] == 4
        # worker r's slice of global step s is positions [r*4, (r+1)*4) of that step
        flat = order.reshape(-1, 12)
        assert np.array_equal(shards[1, 0], flat[0, 4:8])
        check = shard_check(shards, 48 if steps is None else 50, [])
        assert check["disjoint"] and check["per_worker_samples"] == [shards[0].size] * 3
    broken = shards.copy()
    broken[1, 0, 0] = broken[0, 0, 0]  # one sample on two workers in a pass
    assert not shard_check(broken, 50, [])["disjoint"]
    assert not shard_check(cut_shards(np.arange(24).reshape(1, 24) % 12, 2, 6), 24, [])[
        "disjoint"
    ]  # the same sample twice in one pass


# ------------------------------------------------------------------------ breakdown


def fake_log(warmup, steps, phases, update=True):
    log = StepLog(warmup_steps=warmup)
    t = 1000.0
    for i in range(steps):
        data, fwd, bwd, upd, comm = phases(i)
        length = data + fwd + bwd + (upd if update else 0) + comm
        log.add(
            t,
            t + length,
            data=data,
            forward=fwd,
            backward=bwd,
            update=upd if update else None,
            loss=1.0 / (i + 1),
            hits=4,
        )
        t += length
    return log


def test_breakdown_parts_add_up_to_the_step_and_the_slowest_worker_is_named():
    fast = worker_summary(
        fake_log(1, 5, lambda i: (0.001, 0.01, 0.02, 0.003, 0.03)),
        rank=0,
        batch_size=8,
        steps_per_epoch=5,
        method="test",
    )
    slow = worker_summary(
        fake_log(1, 5, lambda i: (0.002, 0.03, 0.04, 0.003, 0.001)),
        rank=1,
        batch_size=8,
        steps_per_epoch=5,
        method="test",
    )
    fused = worker_summary(
        fake_log(1, 5, lambda i: (0.001, 0.01, 0.02, 0.0, 0.03), False),
        rank=2,
        batch_size=8,
        steps_per_epoch=5,
        method="test",
    )
    assert fast["measured_steps"] == 4 and fast["measured_images"] == 32
    assert fast["phase_mean_s"]["comm"] == pytest.approx(0.03)
    assert fused["phase_times_s"]["update"] is None
    breakdown = combine([fast, slow], global_batch=16)
    mean = breakdown["mean"]
    assert sum(mean[f"{p}_s"] for p in PHASES) == pytest.approx(mean["step_s"])
    assert breakdown["slowest"]["rank"] == 1
    assert combine([fast, fused], 16)["mean"]["update_s"] is None  # not measured everywhere


# --------------------------------------------------------------------------- views


def fake_run(mode, backend, workers, *, model="lenet5", status="ok", efficiency=None, n=0):
    """A data-parallel result as the launcher writes it, its workers from fake logs."""
    config = dict(TINY, model=model, backend=backend, distributed=mode, workers=workers, repeat=0)
    metrics = {}
    if status == "ok":
        summaries = [
            worker_summary(
                fake_log(1, 5, lambda i, r=rank: (0.001, 0.01 + r * 0.01, 0.02, 0.003, 0.03)),
                rank=rank,
                batch_size=8,
                steps_per_epoch=5,
                method="test",
            )
            for rank in range(workers)
        ]
        scaling = {"efficiency": efficiency} if efficiency is not None else {"efficiency": None}
        metrics = {
            "images_per_sec": 1234.5 * workers,
            "distributed": {"breakdown": combine(summaries, 8 * workers), "scaling": scaling},
        }
    return RunResult(
        run_id=f"run{n}",
        status=status,
        config=config,
        started_at=f"2026-01-01T00:00:{n:02d}+00:00",
        wall_time_s=1.0,
        environment={},
        data={"synthetic": True},
        metrics=metrics,
        reason=None if status == "ok" else "tf-mirrored needs 2 GPUs; found 0",
    )


def test_breakdown_table_orders_runs_and_says_why_a_run_has_no_numbers():
    runs = [
        fake_run("jax", "jax", 2, efficiency=0.5, n=1),
        fake_run("tf-mirrored", "tensorflow", 2, status="unsupported", n=2),
        fake_run("torch-ddp", "torch", 2, efficiency=0.75, n=3),
        fake_run("torch-ddp", "torch", 1, efficiency=1.0, n=4),
        fake_run("torch-ddp", "torch", 1, model="alexnet", efficiency=1.0, n=5),
    ]
    plain = fake_run("none", "torch", 1, n=6)
    (found,) = breakdown_tables([*runs, plain])  # a run that is not data-parallel: no row
    assert found.headers == ["model", *HEADERS]  # nothing but the model tells rows apart
    assert [row[:4] for row in found.rows] == [
        ["alexnet", "torch-ddp", "torch", "1"],
        ["lenet5", "torch-ddp", "torch", "1"],
        ["lenet5", "torch-ddp", "torch", "2"],
        ["lenet5", "tf-mirrored", "tensorflow", "2"],
        ["lenet5", "jax", "jax", "2"],
    ]
    torch2 = found.rows[2]
    # worker 1's forward is 10 ms longer: the mean is 15 ms, worker 1 is the slowest
    assert torch2[4:] == ["2,469", "0.75", "69.0", "1.0", "15.0", "20.0", "3.0", "30.0", "1 (74.0)"]
    assert found.rows[3][4:] == ["UNSUPPORTED"] + ["-"] * 8
    assert "tf-mirrored tensorflow/lenet5 x2: UNSUPPORTED: tf-mirrored needs 2 GPUs; found 0" in (
        found.notes
    )
    assert breakdown_line(runs[2]) == (
        "torch-ddp torch/lenet5 x2: 2,469 img/s global, efficiency 0.75; per step: step ms "
        "69.0, data ms 1.0, forward ms 15.0, backward ms 20.0, update ms 3.0, comm ms 30.0; "
        "slowest worker 1 (74.0)"
    )
    assert numeric_columns(found) == tuple(range(3, 12))
    # a setting that differs between runs gets its own column
    other = fake_run("jax", "jax", 2, n=7)
    other = RunResult(**{**other.__dict__, "config": {**other.config, "batch_size": 16}})
    (found,) = breakdown_tables([runs[0], other])
    assert found.headers[:2] == ["model", "setting"]
    assert [row[1] for row in found.rows] == ["batch 8", "batch 16"]
    # a setting that older documents lack reads as its default: no column for it
    newer = RunResult(**{**other.__dict__, "config": {**runs[0].config, "hybridize": False}})
    (found,) = breakdown_tables([runs[0], newer])
    assert found.headers == ["model", *HEADERS]
    assert breakdown_tables([plain]) == [] and breakdown_figures([plain]) == []


def test_breakdown_figures_are_drawn_or_say_why_not():
    one = fake_run("torch-ddp", "torch", 1, efficiency=1.0, n=1)
    two = fake_run("torch-ddp", "torch", 2, efficiency=0.75, n=2)
    failed = fake_run("tf-mirrored", "tensorflow", 2, status="unsupported", n=3)
    bars, scaling = breakdown_figures([one, two, failed])
    assert isinstance(bars, Drawn) and bars.title == BREAKDOWN and bars.png[:4] == b"\x89PNG"
    assert isinstance(scaling, Drawn) and scaling.title == SCALING
    bars, scaling = breakdown_figures([two, failed])
    assert isinstance(bars, Drawn)
    assert scaling == Skipped(SCALING, "no mode finished runs with more than one worker count")
    assert breakdown_figures([failed])[0] == Skipped(BREAKDOWN, "no data-parallel run finished")


# ------------------------------------------------------------------------------ CLI


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--backend", "jax", "--distributed", "torch-ddp"],
            "--distributed: mode 'torch-ddp' runs torch or torch-native; received backend 'jax'. "
            "Modes for it: none, jax.",
        ),
        (
            ["--backend", "torch", "--workers", "2"],
            "--workers: expected 1 without --distributed; received 2.",
        ),
        (["--backend", "torch", "--distributed", "torch-dp"], "Did you mean 'torch-ddp'?"),
        (
            ["--backend", "tensorflow", "--distributed", "tf-ps", "--mode", "inference"],
            "data-parallel modes train",
        ),
    ],
)
def test_cli_refuses_a_mode_that_does_not_fit(home, flags, message):
    completed = kbench_here(["run", "--model", "mlp", *flags], home)
    assert completed.returncode == 2, dump(completed)
    assert message in completed.stderr
    assert not completed.output_dir.exists() or not list(completed.output_dir.glob("*.json"))


def test_tf_mirrored_without_gpus_is_unsupported_before_tensorflow_starts():
    """Decided in the parent (before: a TensorFlow worker started, 8 s of import, to say
    it saw no GPU)."""
    config = RunConfig(backend="tensorflow", model="mlp", distributed="tf-mirrored", workers=2)
    on_cpu = preflight(dataclasses.replace(config, device="cpu"))
    assert on_cpu.startswith("tf-mirrored mirrors the model over one host's GPUs")
    assert "--workers 2 needs 2 GPUs, and --device cpu hides them" in on_cpu
    gpus = sysinfo.gpu_info()
    if not gpus.get("available"):  # this machine: no NVIDIA driver
        assert f"needs 2 GPUs and this machine has none ({gpus['reason']})" in preflight(config)
    assert preflight(RunConfig(backend="tensorflow", model="mlp", distributed="tf-ps")) is None


def test_switches_are_refused_before_anything_starts():
    config = RunConfig(
        backend="torch", model="mlp", distributed="torch-ddp", workers=2, mixed_precision="bfloat16"
    )
    assert "mixed_precision" in preflight(config)
    assert preflight(RunConfig(backend="torch", model="mlp", distributed="torch-ddp")) is None
    with pytest.raises(ConfigError):
        RunConfig(backend="mxnet", model="mlp", distributed="jax", workers=2)


# ----------------------------------------------------------------------------- slow


@pytest.fixture(scope="module")
def runs_store(tmp_path_factory):
    """Every mode with 2 workers, and torch-ddp and jax with 1 (the scaling baselines),
    in one runner session: the results store they were written to.

    Whichever test first asks for it builds it. No test of them is serial: what they
    assert of the runs' timings holds beside another test (a jax step compiled once is
    a first step 3x any other; the scaling efficiency is the arithmetic of the measured
    rates; the quality section judges the window against the cores the run was given)."""
    from kbench.distributed.launcher import run_distributed
    from kbench.run.runner import Runner

    backends = sorted({b for _, b in MODES})
    for backend in backends:
        require_backends(backend)

    def tiny(mode):  # jax with a one-step warmup: a second compile would show (see below)
        return dict(TINY, warmup_steps=1) if mode == "jax" else TINY

    configs = [
        RunConfig(backend=b, distributed=m, workers=1, **tiny(m))
        for m, b in (("torch-ddp", "torch-native"), ("jax", "jax"))
    ]
    configs += [RunConfig(backend=b, distributed=m, workers=2, **tiny(m)) for m, b in MODES]
    out = tmp_path_factory.mktemp("distributed")
    # the jax step's first compile is timed below: not from the suite's compilation cache,
    # and with XLA's flags as users have them (suite_plugin.xla_quick_compiles)
    cache = {
        k: os.environ.pop(k)
        for k in list(os.environ)
        if k.startswith("JAX_COMPILATION") or k == "XLA_FLAGS"
    }
    try:
        Runner(output_dir=out, data_parallel=run_distributed).run_all(configs)
    finally:
        os.environ.update(cache)
    return out


@pytest.fixture(scope="module")
def runs(runs_store):
    """{(mode, backend, workers): RunResult} of the runs in ``runs_store``."""
    results = ResultStore(runs_store).results()
    return {(r.config["distributed"], r.config["backend"], r.config["workers"]): r for r in results}


@pytest.mark.slow
@pytest.mark.parametrize("mode, backend", MODES)
def test_every_mode_trains_with_two_workers(runs, mode, backend):
    result = runs[(mode, backend, 2)]
    if mode == "tf-mirrored" and result.status == "unsupported":
        assert "needs 2 GPUs" in result.reason
        return
    assert result.status == "ok", json.dumps(result.error, indent=1)[-3000:]
    m = result.metrics
    d = m["distributed"]
    assert result.kind == "train" and d["mode"] == mode and d["workers"] == 2
    assert m["global_batch_size"] == 16 and m["per_worker_batch_size"] == 8
    assert m["images_per_sec"] > 0 and m["test_accuracy"] is not None
    assert set(m["step_time_s"]) >= {"p10", "p50", "p90", "mean"}
    # the breakdown adds up, worker by worker and step by step
    assert len(m["per_worker"]) == 2 and {w["rank"] for w in m["per_worker"]} == {0, 1}
    for worker in m["per_worker"]:
        parts = worker["phase_times_s"]
        for i, step in enumerate(worker["step_times_s"]):
            total = sum(parts[p][i] for p in PHASES if parts[p] is not None)
            assert total == pytest.approx(step, abs=1e-9)
        assert worker["measured_steps"] >= 1
    mean = d["breakdown"]["mean"]
    assert sum(mean[f"{p}_s"] or 0.0 for p in PHASES) == pytest.approx(mean["step_s"])
    assert d["breakdown"]["slowest"]["rank"] in (0, 1)
    # every worker trained on its own slice of the runner's order
    assert d["shards"]["disjoint"] and d["shards"]["verified_by_workers"]
    # each process sampled into the one result
    series = result.sampler["series"]
    assert any(name.startswith("worker0_process_cpu_percent") for name in series)
    assert any(name.startswith("worker1_process_rss_bytes") for name in series)
    assert "process_cpu_percent" in series


@pytest.mark.slow
def test_a_data_parallel_run_records_its_quality(runs):
    """The measured window of a real data-parallel run is judged against the cores its
    training processes were given (moved here from test_quality: the same torch-ddp run)."""
    result = runs[("torch-ddp", "torch-native", 2)]
    assert result.ok, json.dumps(result.error, indent=1)[-3000:]
    threads, _ = core_layout(RunConfig.from_dict(result.config), 2)
    q = result.metrics["quality"]
    assert q["window"] == "measured" and q["cores_given"] == 2 * threads
    assert q["other_share"] is not None or q["samples"] == 0
    assert isinstance(q["flags"], list)


@pytest.mark.slow
def test_scaling_efficiency_against_the_one_worker_run(runs):
    one, two = runs[("torch-ddp", "torch-native", 1)], runs[("torch-ddp", "torch-native", 2)]
    assert one.ok and two.ok
    assert one.metrics["distributed"]["scaling"]["efficiency"] == 1.0
    scaling = two.metrics["distributed"]["scaling"]
    assert scaling["baseline"]["run_id"] == one.run_id
    expected = two.metrics["images_per_sec"] / (2 * one.metrics["images_per_sec"])
    assert scaling["efficiency"] == pytest.approx(expected)


@pytest.mark.slow
def test_one_jax_worker_compiles_its_step_once(runs):
    """Over a one-device mesh Keras' step compiled again on its second call, inside the
    measured window of a one-step warmup; the engine trains that case without a mesh."""
    result = runs[("jax", "jax", 1)]
    assert result.ok, json.dumps(result.error, indent=1)[-3000:]
    (worker,) = result.metrics["per_worker"]
    # the first step compiles; a second compile would take about as long again
    assert max(worker["step_times_s"]) < worker["first_step_s"] / 3, worker["step_times_s"]
    assert worker["engine"]["distribution"].startswith("none (one device")
    scaling = runs[("jax", "jax", 2)].metrics["distributed"]["scaling"]
    assert scaling["baseline"]["run_id"] == result.run_id


@pytest.mark.slow
def test_compare_report_and_table_show_the_breakdown(runs, runs_store, tmp_path, capsys):
    (found,) = breakdown_tables(list(runs.values()))
    # the jax runs warm up for one step, the others for two: a setting column tells them apart
    assert found.headers == ["model", "setting", *HEADERS]
    column = {name: i for i, name in enumerate(found.headers)}
    rows = {(row[2], row[3], int(row[4])): row for row in found.rows}
    assert len(rows) == len(found.rows) == len(runs) == len(MODES) + 2
    # ordered by setting, then mode (in DISTRIBUTED's order), backend, workers
    assert list(rows) == sorted(
        runs,
        key=lambda k: (
            runs[k].config["warmup_steps"], list(DISTRIBUTED).index(k[0]), k[1], k[2]
        ),
    )  # fmt: skip
    for key, result in runs.items():
        row = rows[key]
        assert row[:2] == ["mlp", f"warmup steps {result.config['warmup_steps']}"]
        if not result.ok:
            assert row[column["img/s (global)"]] == result.status.upper()
            assert any(note.endswith(f"{result.status.upper()}: {result.reason}")
                       for note in found.notes)  # fmt: skip
            continue
        d = result.metrics["distributed"]
        mean, slowest = d["breakdown"]["mean"], d["breakdown"]["slowest"]
        # a run measured on a busy machine carries its flag beside the figure
        flags = (result.metrics.get("quality") or {}).get("flags") or []
        figure, _, flag = row[column["img/s (global)"]].partition(" [")
        assert figure == f"{result.metrics['images_per_sec']:,.0f}"
        assert bool(flag) == bool(flags)
        ms = [mean[f"{p}_s"] for p in ("step", *PHASES)]
        phases = row[column["step ms"] : column["comm ms"] + 1]
        assert phases == ["-" if v is None else f"{v * 1000:.1f}" for v in ms]
        slowest_cell = f"{slowest['rank']} ({slowest['step_s'] * 1000:.1f})"
        assert row[column["slowest worker (step ms)"]] == slowest_cell
        efficiency = (d.get("scaling") or {}).get("efficiency")
        expected = "-" if efficiency is None else f"{efficiency:.2f}"
        assert row[column["efficiency"]] == expected
    efficiency = column["efficiency"]
    assert rows[("torch-ddp", "torch-native", 1)][efficiency] == "1.00"
    assert rows[("torch-ddp", "torch-native", 2)][efficiency] != "-"
    assert rows[("jax", "jax", 2)][efficiency] != "-"
    assert rows[("mxnet-sync", "mxnet", 2)][efficiency] == "-"  # no one-worker run

    # kbench compare: printed and in its Markdown file
    markdown = tmp_path / "compare.md"
    done = kbench_here(["compare", "--store", str(runs_store), "--output", str(markdown)],
                      tmp_path)  # fmt: skip
    assert done.returncode == 0, dump(done)
    assert found.text() in done.stdout
    assert found.markdown() in markdown.read_text()

    # the report: a section with the table and both figures
    summary = write_report(list(runs.values()), tmp_path / "report.html")
    assert BREAKDOWN in summary.figures and SCALING in summary.figures
    text = summary.path.read_text(encoding="utf-8")
    assert '<a href="#distributed">Data-parallel training</a>' in text
    section = text[text.index('<section id="distributed">') :]
    section = section[: section.index("</section>")]
    body = found.html(numeric_columns(found))
    assert body[body.index("<tbody>") :] in section
    assert section.count('<img src="data:image/png;base64,') == 2
    assert "needs 2 GPUs" in section  # tf-mirrored's reason, under the table

    # python -m kbench.cli.distributed_table
    only = ["--filter", "workers=2", "--filter", "distributed=torch-ddp"]
    assert table_main(["--store", str(runs_store), *only]) == 0
    printed = capsys.readouterr().out
    assert "| mlp | torch-ddp | torch-native | 2 |" in printed
    assert "| mlp | torch-ddp | torch-native | 1 |" not in printed


def tagged_processes(tag: str, exclude: int):
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != exclude and proc.environ().get("KBENCH_TEST_TAG") == tag:
                found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.mark.slow
@pytest.mark.parametrize("mode, backend", [("torch-ddp", "torch-native"), ("mxnet-sync", "mxnet")])
def test_a_killed_worker_fails_the_run_and_leaves_nothing_running(home, tmp_path, mode, backend):
    """Worker 1 is killed once training has started: the run fails at once (well inside
    its timeout) naming it, and every process of the run is gone."""
    require_backends(backend)
    tag = uuid.uuid4().hex
    out = tmp_path / "results"
    command = [
        sys.executable,
        "-m",
        "kbench",
        "run",
        "--backend",
        backend,
        "--distributed",
        mode,
        "--workers",
        "2",
        "--model",
        "mlp",
        "--dataset",
        "synthetic",
        "--steps",
        "100000",
        "--warmup-steps",
        "1",
        "--batch-size",
        "8",
        "--train-samples",
        "256",
        "--test-samples",
        "32",
        "--timeout",
        "300",
        "--store",
        str(out),
    ]
    env = dict(
        os.environ, HOME=str(home), KBENCH_CACHE_DIR=str(home / "cache"), KBENCH_TEST_TAG=tag
    )
    cli = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        victim, deadline = None, time.monotonic() + 180
        while victim is None and time.monotonic() < deadline and cli.poll() is None:
            time.sleep(0.5)
            logs = list((out / "logs").glob("*.log")) if (out / "logs").exists() else []
            if not logs or '"step": 1,' not in logs[0].read_text():
                continue  # training has not started
            for proc in tagged_processes(tag, cli.pid):
                try:
                    env_of = proc.environ()
                    if (
                        "kbench.distributed.worker" in " ".join(proc.cmdline())
                        and env_of.get("KBENCH_DIST_ROLE", "worker") == "worker"
                        and env_of.get("RANK", env_of.get("KBENCH_DIST_RANK")) == "1"
                    ):
                        victim = proc
                except psutil.Error:
                    continue
        assert victim is not None, "worker 1 never started training"
        os.kill(victim.pid, signal.SIGKILL)
        killed = time.monotonic()
        output = cli.communicate(timeout=120)[0]
        took = time.monotonic() - killed
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    assert cli.returncode == 1, output[-3000:]
    assert took < 60, f"the run took {took:.0f} s to fail after the kill"
    (path,) = out.glob("*.json")
    result = json.loads(path.read_text())
    assert result["status"] == "failed"
    assert result["reason"].startswith(f"worker1 (pid {victim.pid})"), result["reason"]
    time.sleep(0.5)
    left = tagged_processes(tag, cli.pid)
    assert not left, [(p.pid, p.cmdline()[:4]) for p in left]


@pytest.mark.slow
def test_two_hosts_on_one_machine_share_one_run(tmp_path):
    """The multi-host path (KBENCH_DIST_*), both 'hosts' on 127.0.0.1: each runs its own
    worker and records the run from its side."""
    require_backends("mxnet")
    port = free_ports(1)[0]
    procs = []
    for node in (0, 1):
        env = dict(
            os.environ,
            KBENCH_DIST_HOSTS="127.0.0.1,127.0.0.1",
            KBENCH_DIST_NODE=str(node),
            KBENCH_DIST_PORT=str(port),
            HOME=str(tmp_path),
        )
        command = [
            sys.executable,
            "-m",
            "kbench",
            "run",
            "--backend",
            "mxnet",
            "--distributed",
            "mxnet-sync",
            "--workers",
            "2",
            "--threads",
            "1",
            "--model",
            "mlp",
            "--dataset",
            "synthetic",
            "--steps",
            "4",
            "--warmup-steps",
            "1",
            "--batch-size",
            "8",
            "--train-samples",
            "64",
            "--test-samples",
            "16",
            "--timeout",
            "120",
            "--store",
            str(tmp_path / f"host{node}"),
        ]
        procs.append(
            subprocess.Popen(
                command,
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = [p.communicate(timeout=200)[0] for p in procs]
    for node, proc in enumerate(procs):
        assert proc.returncode == 0, outputs[node][-3000:]
        (path,) = (tmp_path / f"host{node}").glob("*.json")
        metrics = json.loads(path.read_text())["metrics"]
        assert [w["rank"] for w in metrics["per_worker"]] == [node]
        assert "this host's 1 of 2 workers" in metrics["distributed"]["scope"]
