"""Numbers that know when they cannot be trusted: a busy, throttled or battery-powered
window is flagged; a ratio within the noise reads "no clear difference"; a busy
machine is noticed before the first run."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from kbench.measure import quality
from kbench.measure.stats import median_interval
from kbench.results.analysis import clear, compare
from kbench.results.result import ResultError, RunResult
from kbench.views.report import Comparison
from kbench.views.tables import comparison_tables, interval_text
from tests.conftest import ROOT, dump, kbench_here, require_backends, run_kbench, spinning_loops

pytestmark = pytest.mark.own_processes("a worker timed beside busy processes")

# --------------------------------------------------------------------- hand-made series


def series(system: List[float], worker: List[float], **extra: List[float]) -> dict:
    """A sampler series, one reading a second from t=100."""
    data = {"t": [100.0 + i for i in range(len(system))], "system_cpu_percent": system}
    data["process_cpu_percent"] = worker
    data.update(extra)
    return data


def test_a_quiet_machine_is_not_flagged() -> None:
    # 4 cores; the worker uses 3.9 of them (390% of one core), the machine 100%
    found = quality.assess(series([100.0] * 5, [390.0] * 5), (100, 104), machine_cores=4)
    assert found is not None and not found.flagged
    assert found.other_cores == pytest.approx(0.1) and found.other_share == pytest.approx(0.025)
    assert found.samples == 5 and found.cores_given == 4


def test_a_busy_machine_is_flagged_with_the_others_share() -> None:
    # 4 cores all busy, the worker has 2 of them: others use 2 cores, half the machine
    found = quality.assess(series([100.0] * 5, [200.0] * 5), (100, 104), machine_cores=4)
    assert found.other_share == pytest.approx(0.5)
    assert found.flags == ["busy: 50% of the cores used by other processes"]
    assert found.to_dict()["other_share"] == pytest.approx(0.5)


def test_only_the_window_counts_and_the_threshold_is_settable() -> None:
    # busy before the window (t=100, 101), quiet inside it (t=102..104)
    busy_then_quiet = series([100.0, 100.0, 50.0, 50.0, 50.0], [100.0, 100.0, 200.0, 200.0, 200.0])
    assert not quality.assess(busy_then_quiet, (102, 104), machine_cores=4).flagged
    # others at 30% of the cores: flagged at 0.25, not at 0.4
    mild = series([80.0] * 3, [200.0] * 3)
    assert quality.assess(mild, (100, 102), machine_cores=5).flagged
    assert not quality.assess(mild, (100, 102), machine_cores=5, busy_threshold=0.4).flagged
    with pytest.raises(ValueError, match="busy_threshold: expected a share"):
        quality.assess(mild, (100, 102), busy_threshold=25)


def test_the_cores_left_free_absorb_other_work() -> None:
    # 4 cores, the run was given 2 threads and uses them; another process uses 1.5
    # cores, which fit in the 2 cores the run left free: not against the run
    fits = series([87.5] * 3, [200.0] * 3)
    found = quality.assess(fits, (100, 102), threads=2, machine_cores=4)
    assert found.other_cores == pytest.approx(1.5) and found.other_share == 0.0
    # 3 cores of others: one of them had to share the run's 2 cores
    crowded = series([100.0] * 3, [100.0] * 3)
    found = quality.assess(crowded, (100, 102), threads=2, machine_cores=4)
    assert found.other_share == pytest.approx(0.5) and found.flagged


def test_clock_throttling_and_battery_are_flagged() -> None:
    quiet = [10.0] * 3
    slow = series(quiet, [0.0] * 3, cpu_freq_mhz=[1000.0] * 3, power_plugged=[1, 0, 1])
    found = quality.assess(slow, (100, 102), machine_cores=4, cpu_freq_max_mhz=4000.0)
    assert found.cpu_clock_fraction == pytest.approx(0.25) and found.on_battery
    assert found.flags == ["slow clock: CPU at 25% of its 4,000 MHz", "on battery"]
    # NVML: 0x1 (idle) is no throttling, 0x40 (hardware thermal) is
    gpu = series(
        quiet, [0.0] * 3, gpu0_throttle_reasons=[1, 0x40, 1], gpu1_throttle_reasons=[1] * 3
    )
    found = quality.assess(gpu, (100, 102), machine_cores=4, cpu_freq_max_mhz=0)
    assert found.gpu_throttled == {"gpu0": ["hardware thermal slowdown"]}
    assert found.flags == ["throttled: gpu0 hardware thermal slowdown"]
    # no maximum frequency (a virtual machine): unknown, not flagged
    unknown = quality.assess(slow, (100, 102), machine_cores=4, cpu_freq_max_mhz=0)
    assert unknown.cpu_clock_fraction is None


def test_a_window_between_two_samples_takes_the_one_after_it() -> None:
    # CPU readings cover the time since the previous sample: the one at t=101 covers
    # a window of 0.2 s at t=100.5; the one at t=102 lies outside it
    data = series([100.0, 100.0, 0.0], [200.0, 0.0, 0.0])
    found = quality.assess(data, (100.4, 100.6), machine_cores=2)
    assert found.samples == 1 and found.other_share == 1.0 and found.flagged


def test_a_window_without_edges_or_samples_is_unknown() -> None:
    assert quality.assess(series([50.0], [0.0]), (None, None)) is None
    empty = quality.assess(series([50.0], [0.0]), (200, 300), machine_cores=2)
    assert empty.other_share is None and empty.samples == 0 and not empty.flagged


# --------------------------------------------------------------------- significance


def test_a_clear_difference_keeps_its_ratio() -> None:
    found = median_interval([0.50, 0.52, 0.51, 0.49, 0.50, 0.53, 0.51])
    assert clear(found) and found.coverage >= 0.95
    assert interval_text(found) == "x0.51 (0.49-0.53, 98% interval, n=7)"


def test_a_ratio_within_the_noise_is_no_clear_difference() -> None:
    found = median_interval([0.90, 1.04, 0.97, 1.02, 0.95])
    assert not clear(found)
    assert interval_text(found) == "no clear difference (x0.97, 0.90-1.04, 94% interval, n=5)"


def test_one_run_has_no_spread_and_the_interval_narrows_with_rounds() -> None:
    assert interval_text(median_interval([0.97])) == "x0.97 (1 run: no spread)"
    assert median_interval([]) is None
    assert median_interval([1.2, 1.3]).coverage == 0.5  # the whole range of 2 rounds
    many = median_interval([float(i) for i in range(1, 21)])  # 20 rounds: 95% inside
    assert (many.low, many.high) == (6.0, 15.0) and many.coverage >= 0.95


# --------------------------------------------------------------------- pre-flight


def test_preflight_warns_on_a_busy_machine_and_waits_for_it(caplog) -> None:
    loads = iter([90.0, 80.0, 10.0])
    now = iter(range(100))
    with caplog.at_level(logging.INFO, logger="kbench.measure.quality"):
        look = quality.preflight(0.25, 10, sample=lambda: next(loads), clock=lambda: next(now))
    assert (look.busy, look.samples, look.load) == (False, 3, 0.1)
    assert "quietened" in caplog.text and "already busy" not in caplog.text

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kbench.measure.quality"):
        look = quality.preflight(0.25, 0, sample=lambda: 90.0)
    assert look.busy and look.samples == 1
    assert "already busy before the run: 90% of the CPU" in caplog.text


def test_preflight_is_skipped_where_the_environment_says_so(monkeypatch) -> None:
    monkeypatch.setenv(quality.PREFLIGHT_SKIP_ENV, "1")
    assert quality.preflight_unless_skipped(0.25, 0) is None
    monkeypatch.setenv(quality.PREFLIGHT_SKIP_ENV, "0")
    look = quality.preflight_unless_skipped(0.99, 0)  # a real one-second sample
    assert look is not None and 0 <= look.load <= 1


def test_the_thresholds_are_checked_on_the_command_line(home: Path) -> None:
    for flag, value, expected in (
        ("--busy-threshold", "25", "expected a share above 0 and at most 1"),
        ("--wait-quiet", "-1", "expected 0 or more seconds"),
    ):
        done = kbench_here(["run", "-b", "torch", flag, value], home)
        assert done.returncode == 2 and expected in done.stderr, done.stderr


# --------------------------------------------------------------------- a real run


def stop(processes: List[subprocess.Popen]) -> None:
    for process in processes:
        process.kill()
    for process in processes:
        process.wait(timeout=10)


RUN = ["run", "-b", "torch-native", "-m", "mlp", "--dataset", "synthetic", "--steps", "30",
       "--warmup-steps", "2", "--train-samples", "256", "--test-samples", "32",
       "--sample-interval", "0.1"]  # fmt: skip


# Not serial: the loops load every core of the suite (busy whatever runs beside), and
# what these tests assert is that a run is flagged, which more load only makes surer.
@pytest.mark.slow
def test_a_run_beside_spinning_processes_is_flagged(tmp_path: Path, home: Path) -> None:
    require_backends("torch-native")
    quiet_dir, busy_dir = tmp_path / "quiet", tmp_path / "busy"
    quiet = run_kbench([*RUN, "--store", str(quiet_dir)], home)
    assert quiet.returncode == 0, dump(quiet)
    load = spinning_loops()
    try:
        # the one-second look before the run, which the other tests skip, warns
        busy = run_kbench(
            [*RUN, "--store", str(busy_dir)], home, env={quality.PREFLIGHT_SKIP_ENV: "0"}
        )
    finally:
        stop(load)
    assert busy.returncode == 0, dump(busy)

    (result,) = busy.results()
    found = result.metrics["quality"]
    assert found["other_share"] > 0.25, found
    assert any(f.startswith("busy: ") for f in found["flags"]), found
    assert "measured while busy: " in busy.stderr
    assert "already busy before the run" in busy.stderr
    assert "% of the cores used by other processes]" in busy.stdout  # the run table
    assert RunResult.from_dict(result.to_dict()).metrics["quality"] == found  # reads back

    compared = kbench_here(["compare", "--store", str(busy_dir)], home)
    assert compared.returncode == 0, dump(compared)
    assert "% of the cores used by other processes]" in compared.stdout
    text = comparison_text(quiet.results() + busy.results())
    assert "of the cores used by other processes" in text, text  # beside the figure


def hand_made(backend: str, repeat: int, ips: float, flags: List[str] = ()) -> RunResult:
    from tests.test_compare import result as make  # that test's hand-made documents

    made = make(backend, repeat, ips)
    if flags:
        made.metrics["quality"] = {"other_share": 0.48, "flags": list(flags)}
    return made


def test_comparisons_say_whether_a_ratio_is_clear() -> None:
    # b is twice as fast in every round: clear; c wobbles around a: no clear difference
    rounds = [(100, 200, 97), (50, 101, 55), (100, 199, 103), (80, 160, 78), (90, 181, 92)]
    runs = [
        hand_made(backend, repeat, ips)
        for repeat, row in enumerate(rounds)
        for backend, ips in zip("abc", row)
    ]
    text = comparison_tables(runs)
    assert "x2.00 (1.99-2.02, 94% interval, n=5)" in text
    assert "no clear difference (x1.02, 0.97-1.10, 94% interval, n=5)" in text
    assert "x1.00" in text  # the baseline itself
    # an old document (no quality section) with one run a side
    text = comparison_text([hand_made("a", 0, 10.0), hand_made("b", 0, 20.0)])
    assert "x2.00 (1 run: no spread)" in text and "[" not in text


def test_a_flagged_run_is_marked_beside_its_figure(tmp_path: Path) -> None:
    busy = "busy: 48% of the cores used by other processes"
    runs = [hand_made("a", 0, 10.0), hand_made("b", 0, 20.0, [busy])]
    text = comparison_text(runs)
    assert f"20 [{busy}]" in text and f"x2.00 (1 run: no spread) [{busy}]" in text
    assert "10 [" not in text
    assert f"[{busy}]" in comparison_tables(runs)
    loaded = RunResult.from_dict(runs[1].to_dict())
    assert loaded.metrics["quality"]["flags"] == [busy]
    broken = dict(runs[1].to_dict())
    broken["metrics"] = dict(broken["metrics"], quality={"flags": "busy"})
    with pytest.raises(ResultError, match="metrics.quality.flags: expected a list"):
        RunResult.from_dict(broken)

    # two busy rounds of one backend: one line for both, with the range of shares
    second = hand_made("b", 1, 22.0, ["busy: 60% of the cores used by other processes"])
    second.metrics["quality"]["other_share"] = 0.6
    (group,) = compare([*runs, hand_made("a", 1, 11.0), second])
    row = next(r for r in group.rows if r.backend == "b")
    assert row.quality_flags == ["busy in 2 of 2 runs: 48-60% of the cores used by other processes"]

    from kbench.views.report import write_report

    page = write_report(runs, tmp_path / "report.html").path.read_text()
    assert busy in page and "flagged" in page and "1 run: no spread" in page


# --------------------------------------------------------------------- kbench ops


def test_each_operation_batch_gets_its_own_quality() -> None:
    from kbench.ops.runner import OpsConfig, add_quality
    from kbench.views.ops import time_cell

    # a 2-core machine: quiet until t=102, then others take all of it
    data = series([5.0, 5.0, 5.0, 100.0, 100.0], [10.0, 10.0, 10.0, 0.0, 0.0])
    metrics = {"ops": [
        {"op": "gemm", "size": 32, "status": "ok", "timed_window": [100.5, 100.6],
         "median_s": 2e-5, "p10_s": 1e-5, "p90_s": 3e-5},
        {"op": "gemm", "size": 64, "status": "ok", "timed_window": [103.2, 103.3],
         "median_s": 8e-3, "p10_s": 7e-3, "p90_s": 9e-3},
        {"op": "conv2d", "size": 32, "status": "mismatch"},  # not timed: no window
    ]}  # fmt: skip
    config = OpsConfig(backend="torch", threads=2)
    add_quality(metrics, data, config)
    quiet, busy, untimed = metrics["ops"]
    assert "timed_window" not in quiet and not quiet["quality"]["flags"]
    assert busy["quality"]["flags"] == ["busy: 100% of the cores used by other processes"]
    assert "quality" not in untimed
    made = RunResult(run_id="o", status="ok", config={"backend": "torch", "model": "ops"},
                     started_at="t", wall_time_s=1.0, environment={}, data={},
                     kind="ops")  # fmt: skip
    assert time_cell(quiet, made) == "20 us (10-30)"
    assert time_cell(busy, made) == "8 ms (7-9) [busy: 100% of the cores used by other processes]"


@pytest.mark.slow
def test_operations_timed_beside_spinning_processes_are_flagged(tmp_path: Path, home: Path):
    require_backends("torch")
    load = spinning_loops()
    try:
        done = run_kbench(["ops", "--backend", "torch", "--ops", "gemm", "--sizes", "32",
                           "--store", str(tmp_path / "ops")], home)  # fmt: skip
    finally:
        stop(load)
    assert done.returncode == 0, dump(done)
    (result,) = done.results()
    (entry,) = result.metrics["ops"]
    assert entry["quality"]["other_share"] > 0.25 and entry["quality"]["flags"], entry
    assert "% of the cores used by other processes]" in done.stdout


# --------------------------------------------------------------------- GPU neighbours


def with_gpus(**extra: List[float]) -> dict:
    return series([10.0] * 3, [0.0] * 3, **extra)


BY_PIDS = {"indices": [0], "method": "nvml_pids", "note": "test"}


def test_other_processes_on_the_workers_gpu_are_flagged() -> None:
    found = quality.assess(
        with_gpus(gpu0_other_processes=[1, 2, 2], gpu0_other_memory_bytes=[2**30, 3 * 2**30, 0],
                  gpu1_other_processes=[5, 5, 5]),  # not the worker's GPU: not counted
        (100, 102), machine_cores=4, worker_gpus=BY_PIDS,
    )  # fmt: skip
    assert found.gpu_other_processes == 2 and found.gpu_other_memory_bytes == 3 * 2**30
    assert found.gpu_neighbours == {"gpu0": {"processes": 2, "memory_bytes": 3 * 2**30}}
    assert found.flags == ["shared GPU: 2 other processes using 3,072 MiB"]
    alone = quality.assess(with_gpus(gpu0_other_processes=[0, 0, 0]), (100, 102),
                           machine_cores=4, worker_gpus=BY_PIDS)  # fmt: skip
    assert alone.gpu_other_processes == 0 and not alone.flagged


def test_neighbours_are_unknown_where_nvml_lists_none_of_the_workers_pids() -> None:
    container = {"indices": [0], "method": "cuda_visible_devices", "note": "test"}
    found = quality.assess(with_gpus(gpu0_other_processes=[1, 1, 1]), (100, 102),
                           machine_cores=4, worker_gpus=container)  # fmt: skip
    assert found.gpu_other_processes is None and not found.flagged
    assert "container" in found.gpu_neighbours_reason
    no_gpu = quality.assess(with_gpus(), (100, 102), machine_cores=4)
    assert no_gpu.gpu_other_processes is None and no_gpu.gpu_neighbours_reason is None


# The runner's sampler on a child process, through the real binding on the NVML stand-in,
# then the quality section the runner would write.
NEIGHBOUR_SAMPLE = r"""
import json, subprocess, sys, time
from kbench.measure import quality, sampler
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.6)"])
companions = [int(pid) for pid in sys.argv[1:]]
start = time.time()
with sampler.Sampler(worker.pid, interval_s=0.04, companions=companions) as s:
    worker.wait()
end = time.time()
result = s.result({"run": (start, end), "measured": (start, end)})
used = result.sources["gpu"]["worker_gpus"]
found = quality.assess(result.series, (start, end), worker_gpus=used)
print(json.dumps({**found.to_dict(), "summary": result.summary["run"]}))
"""


def standin_sample(tmp_path: Path, devices, *companions: int) -> dict:
    """NEIGHBOUR_SAMPLE's quality section under the NVML stand-in with ``devices``."""
    from tests.nvml_standin import CompilerMissing, build_standin, standin_env, write_config

    try:
        lib = build_standin(tmp_path, "full")
    except CompilerMissing as err:
        pytest.skip(str(err))
    config = write_config(tmp_path / "nvml.conf", devices)
    done = subprocess.run([sys.executable, "-c", NEIGHBOUR_SAMPLE, *map(str, companions)],
                          env=standin_env(lib, config), capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_shared_gpu_is_flagged_through_the_nvml_standin(tmp_path: Path) -> None:
    from tests.nvml_standin import StandinDevice

    gib = 2**30
    devices = [
        # the worker, someone else's training job, and a process whose memory NVML hides
        StandinDevice(processes=[("children", gib), (999_999, 3 * gib), (888_888, None)]),
        StandinDevice(processes=[(777_777, 8 * gib)]),  # a GPU the worker did not use
    ]
    found = standin_sample(tmp_path, devices)
    assert found["gpu_neighbours"] == {"gpu0": {"processes": 2, "memory_bytes": 3 * gib}}
    assert "shared GPU: 2 other processes using 3,072 MiB" in found["flags"]


def test_the_idle_workers_of_the_same_comparison_are_no_shared_gpu(tmp_path: Path) -> None:
    """Before: on the first real GPU (an H100), every window of `kbench run -b
    torch,jax,torch-native` was dropped as "shared GPU: 2 other processes using 62,398
    MiB": the comparison's own idle warm workers (JAX holding 75% of the GPU). Now the
    sampler is told their PIDs: they are recorded apart (``companion_*``), and only a
    process of no comparison's makes the GPU shared."""
    from tests.nvml_standin import StandinDevice

    gib = 2**30
    companion = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        devices = [StandinDevice(processes=[("children", gib), (companion.pid, 60 * gib)])]
        found = standin_sample(tmp_path, devices, companion.pid)
        assert not any("shared GPU" in flag for flag in found["flags"]), found["flags"]
        assert found["gpu_neighbours"]["gpu0"]["processes"] == 0, found["gpu_neighbours"]
        assert found["summary"]["gpu0_companion_memory_bytes"]["max"] == 60 * gib
        assert found["summary"]["gpu0_companion_processes"]["max"] == 1
        # without being told, the same process is another's job on the GPU
        found = standin_sample(tmp_path, devices)
        assert "shared GPU: 1 other process using 61,440 MiB" in found["flags"], found
    finally:
        companion.kill()


# --------------------------------------------------------------------- data-parallel runs


def test_a_data_parallel_run_gets_a_quality_section_and_its_flag_in_the_table() -> None:
    """A data-parallel run's section is assessed over the cores its training processes
    were given together (the launcher's ``add_sampled``: threads x local workers), its
    processes' CPU summed by the sampler."""
    from kbench.views.distributed import breakdown_tables
    from tests.test_distributed import fake_run

    # every core busy, the run's processes using 2 of them (the 2 it was given): the rest
    # ran on the cores it left free, not against it
    section = quality.assess(series([100.0] * 3, [200.0] * 3), (100, 102), 2).to_dict()
    assert section["cores_given"] == 2 and section["other_share"] == 0 and not section["flags"]
    # given 1 core and using half of it: the other half went to other processes
    busy = quality.assess(series([100.0] * 3, [50.0] * 3), (100, 102), 1).to_dict()
    assert busy["other_share"] == pytest.approx(0.5)
    assert busy["flags"] == ["busy: 50% of the cores used by other processes"]
    run = fake_run("torch-ddp", "torch", 2)
    run.metrics["quality"] = busy
    (table,) = breakdown_tables([run])
    assert f"[{busy['flags'][0]}]" in table.text()
    assert any(note.startswith("[...]: measured while") for note in table.notes)


# A real data-parallel run's quality section: checked on test_distributed's runs
# (test_a_data_parallel_run_records_its_quality), which train torch-ddp anyway.


# --------------------------------------------------------------------- room for results


def test_kbench_run_warns_of_low_space_before_it_starts(tmp_path: Path) -> None:
    """For real: the store on a full 64 KB tmpfs; the warning comes before the log fails
    (and stops the command before any worker starts)."""
    import shutil

    if not shutil.which("unshare"):
        pytest.skip("unshare is not installed")
    store = tmp_path / "s"
    store.mkdir()
    command = (
        f"mount -t tmpfs -o size=64k none {store} && "
        f"dd if=/dev/zero of={store}/filler bs=4k count=16 2>/dev/null; cd {ROOT} && "
        f"{sys.executable} -m kbench run -b torch -m mlp --dataset synthetic --steps 2 "
        f"--store {store}; echo exit $?"
    )
    env = dict(os.environ, HOME=str(tmp_path))
    done = subprocess.run(["unshare", "-rm", "sh", "-c", command], capture_output=True,
                          text=True, timeout=300, env=env)  # fmt: skip
    if "exit" not in done.stdout:
        pytest.skip(f"cannot mount a tmpfs with unshare -rm: {done.stderr}")
    warned = done.stderr.find("MB free where results go")
    assert warned >= 0, done.stderr
    assert "A result that cannot be written stops kbench run" in done.stderr
    assert warned < done.stderr.find("No space left on device")  # before, not after


def comparison_text(results) -> str:
    """The comparison tables as ``kbench compare`` prints them."""
    return Comparison.of(results).text()
