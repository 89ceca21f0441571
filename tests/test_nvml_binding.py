"""kbench's GPU paths through the real nvidia-ml-py binding, against a stand-in library.

Each test writes a stand-in configuration (tests/nvml_standin), then runs kbench's
sampler, the data-parallel sampler or the environment description in a subprocess
whose LD_LIBRARY_PATH makes the binding's ``CDLL("libnvidia-ml.so.1")`` open the
stand-in. The numbered cases are those of issue 14.
"""

from __future__ import annotations

import csv
import dataclasses
import html
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
from conftest import dump, require_backends, run_kbench
from nvml_standin import (
    ERRORS,
    GIB,
    CompilerMissing,
    StandinDevice,
    build_standin,
    standin_env,
    write_config,
)

from kbench.results.analysis import compare
from kbench.results.result import RunResult
from kbench.run.metrics import measured_energy, sampled_memory
from kbench.views.tables import study_tables

pytestmark = pytest.mark.own_processes("the stand-in NVML library a worker loads")

MIB = 2**20
# Runs the single-run sampler on a worker (a child sleeping ``seconds``, with the
# environment overrides given) and prints what the runner would record from it.
SAMPLE = r"""
import json, os, subprocess, sys, time
from kbench.measure import sampler, sysinfo
from kbench.run.metrics import measured_energy, sampled_memory
args = json.loads(sys.argv[1])
env = dict(os.environ if args["inherit_env"] else {}, **args["worker_env"])
start = time.time()
command = args["command"] or [sys.executable, "-c", f"import time; time.sleep({args['seconds']})"]
worker = subprocess.Popen(command, env=env)
with sampler.Sampler(worker.pid, interval_s=0.04) as s:
    worker.wait()
end = time.time()
windows = {"run": (start, end), "measured": (start + 0.1, end - 0.1)}
result = s.result(windows).to_dict()
print(json.dumps({
    "sampler": result,
    "memory": sampled_memory(result["summary"]),
    "energy": measured_energy(result["summary"], 1000),
    "gpu_info": sysinfo.gpu_info(),
    "windows": windows,
}))
"""
# The data-parallel sampler on two processes.
JOB_SAMPLE = r"""
import json, subprocess, sys, time
from kbench.measure.sampler import Sampler
job = Sampler(interval_s=0.04, per_process=True).__enter__()
start = time.time()
procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"]) for _ in range(2)]
for i, p in enumerate(procs):
    job.add(f"worker{i}", p.pid)
for p in procs:
    p.wait()
job.__exit__()
print(json.dumps(job.result({"run": (start, time.time())}).to_dict()))
"""

# A worker whose environment is empty for 0.3 s (started with none), then the same PID
# a program with CUDA_VISIBLE_DEVICES=''
LATE_ENV_WORKER = ["/bin/sh", "-c", "sleep 0.3; export CUDA_VISIBLE_DEVICES=; exec sleep 0.4"]
# The data-parallel sampler on the one worker given, started with no environment.
JOB_LATE_ENV = r"""
import json, subprocess, sys, time
from kbench.measure.sampler import Sampler
job = Sampler(interval_s=0.04, per_process=True).__enter__()
start = time.time()
proc = subprocess.Popen(json.loads(sys.argv[1])["command"], env={})
job.add("worker0", proc.pid)
proc.wait()
job.__exit__()
print(json.dumps(job.result({"run": (start, time.time())}).to_dict()))
"""


@pytest.fixture(scope="session")
def standin_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("nvml_standin")


def peak(values):
    """The largest reading; a sample taken after the worker ended has none."""
    return max(v for v in values if v is not None)


def run_with(
    root: Path,
    devices: List[StandinDevice],
    variant: str = "full",
    code: str = SAMPLE,
    worker_env: Optional[Dict[str, str]] = None,
    seconds: float = 0.5,
    name: str = "nvml.conf",
    command: Optional[List[str]] = None,
    inherit_env: bool = True,
) -> Dict[str, Any]:
    try:
        lib = build_standin(root, variant)
    except CompilerMissing as err:
        pytest.skip(str(err))
    config = write_config(root / f"{variant}-{name}", devices)
    args = json.dumps(
        {
            "worker_env": worker_env or {},
            "seconds": seconds,
            "command": command,
            "inherit_env": inherit_env,
        }
    )
    done = subprocess.run(
        [sys.executable, "-c", code, args],
        env=standin_env(lib, config),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def worker_on_gpu(memory: Optional[int] = MIB, **kwargs) -> StandinDevice:
    return StandinDevice(processes=[("children", memory)], **kwargs)


def run_result(backend: str, memory: List[Dict[str, Any]], sampler: Dict[str, Any]) -> RunResult:
    return RunResult(
        run_id=backend, status="ok",
        config={"backend": backend, "model": "mlp", "dataset": "synthetic", "batch_size": 32,
                "repeat": 0, "mode": "train"},
        started_at="t", wall_time_s=1.0, environment={}, data={"synthetic": True},
        metrics={"images_per_sec": 100.0, "memory": memory}, sampler=sampler,
    )  # fmt: skip


def test_the_binding_really_loads_the_standin(standin_root):
    out = run_with(standin_root, [StandinDevice(name="Stand-in A100")])
    assert out["gpu_info"]["available"]
    assert out["gpu_info"]["driver"] == "999.99-standin"
    assert out["gpu_info"]["devices"][0]["name"] == "Stand-in A100"
    assert out["gpu_info"]["devices"][0]["pci_bus_id"] == "00000000:01:00.0"


# ---------------------------------------------------------------- 1: unknown is not 0


def test_1_process_memory_not_available_is_none_with_a_reason(standin_root):
    """Before: process_nvml 0 B (usedGpuMemory None summed as 0)."""
    out = run_with(standin_root, [worker_on_gpu(memory=None)])
    series = out["sampler"]["series"].get("gpu0_process_memory_bytes", [])
    assert set(series) <= {None}  # nothing recorded, no 0
    (process,) = [m for m in out["memory"] if m["kind"] == "process_nvml"]
    assert process["bytes"] is None and "NVML_VALUE_NOT_AVAILABLE" in process["reason"]
    assert out["sampler"]["sources"]["gpu"]["worker_gpus"]["indices"] == [0]


def test_1_container_pids_match_nothing_and_compare_falls_back(standin_root):
    """Before: "Peak memory 0 B (process_nvml)": host PIDs match no worker PID."""
    devices = [StandinDevice(processes=[(999_999, GIB)])]
    out = run_with(standin_root, devices, worker_env={"CUDA_VISIBLE_DEVICES": "0"})
    (process,) = [m for m in out["memory"] if m["kind"] == "process_nvml"]
    assert process["bytes"] is None and "PID namespace" in process["reason"]
    used = out["sampler"]["sources"]["gpu"]["worker_gpus"]
    assert used["indices"] == [0] and used["method"] == "cuda_visible_devices"
    run = run_result("torch", out["memory"], out["sampler"])
    (group,) = compare([run])
    row = group.rows[0]
    assert row.memory_kind == "device_used"
    assert row.memory_bytes.median == 4 * GIB - 256 * MIB  # v2: without driver-reserved


def test_1_cpu_run_on_a_gpu_machine_reports_no_gpu_figures(standin_root):
    """Before: "Peak memory 0 B (process_nvml)" and "Utilization 87 (gpu)", another
    process's load on a GPU the worker never touched."""
    devices = [StandinDevice(gpu_util=87, processes=[(999_999, GIB)])]
    out = run_with(standin_root, devices, worker_env={"CUDA_VISIBLE_DEVICES": ""})
    used = out["sampler"]["sources"]["gpu"]["worker_gpus"]
    assert used["indices"] == [] and "CUDA_VISIBLE_DEVICES=''" in used["note"]
    assert "gpu0_kernel_time_percent" in out["sampler"]["series"]  # recorded, raw
    measured = out["sampler"]["summary"]["measured"]
    assert not any(name.startswith("gpu") for name in measured)  # not the worker's
    assert out["memory"] == []
    rss = [{"kind": "process_peak_rss", "bytes": 300 * MIB}]
    (group,) = compare([run_result("torch", rss, out["sampler"])])
    assert group.rows[0].utilization_kind == "cpu"
    assert group.rows[0].memory_kind == "process_peak_rss"


def test_1_a_worker_read_while_it_starts_is_read_again(standin_root):
    """CI, stop 42: the CPU-run test above counted GPU 0. Its worker's environment was
    read once, as ``Popen`` returned, while the kernel was still loading the program:
    it read empty, so CUDA_VISIBLE_DEVICES looked unset. Here the worker's first
    environment is empty for 0.3 s, then the same PID becomes a program with
    CUDA_VISIBLE_DEVICES=''; the sampler must use the second."""
    devices = [StandinDevice(gpu_util=87, processes=[(999_999, GIB)])]
    out = run_with(standin_root, devices, command=LATE_ENV_WORKER, inherit_env=False)
    used = out["sampler"]["sources"]["gpu"]["worker_gpus"]
    assert used["indices"] == [] and "CUDA_VISIBLE_DEVICES=''" in used["note"]
    job = run_with(standin_root, devices, code=JOB_LATE_ENV, command=LATE_ENV_WORKER)
    used = job["sources"]["gpu"]["worker_gpus"]
    assert used["indices"] == [] and "CUDA_VISIBLE_DEVICES=''" in used["note"]


def test_1_cuda_visible_devices_is_mapped_to_nvml_by_pci_bus_id(standin_root):
    """NVML index 1 sits first on the PCI bus: CUDA's device 0 under PCI_BUS_ID order."""
    devices = [
        StandinDevice(bus_id="00000000:81:00.0", processes=[(999_999, GIB)]),
        StandinDevice(bus_id="00000000:01:00.0", processes=[(999_998, GIB)]),
    ]
    env = {"CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    out = run_with(standin_root, devices, worker_env=env)
    used = out["sampler"]["sources"]["gpu"]["worker_gpus"]
    assert used["indices"] == [1] and "assumed" not in used["note"]
    uuid = "GPU-00000000-0000-0000-0000-000000000000"  # NVML index 0's
    out = run_with(standin_root, devices, worker_env={"CUDA_VISIBLE_DEVICES": uuid})
    assert out["sampler"]["sources"]["gpu"]["worker_gpus"]["indices"] == [0]


# ---------------------------------------------------- 2: a driver without the _v3 call


def test_2_driver_without_v3_falls_back_to_v2_and_keeps_every_series(standin_root):
    """Before: NVMLLibraryMismatchError escaped NvmlSource.read: no GPU series at all."""
    out = run_with(standin_root, [worker_on_gpu()], variant="no_v3")
    series = out["sampler"]["series"]
    assert set(series["gpu0_kernel_time_percent"]) == {57}
    assert set(series["gpu0_process_memory_bytes"]) - {None} == {MIB}
    device = out["sampler"]["sources"]["gpu"]["devices"][0]
    assert device["processes_call"] == "v2"
    assert {m["kind"]: m["bytes"] for m in out["memory"]}["process_nvml"] == MIB


def test_2_job_sampler_keeps_its_cpu_series_without_v3(standin_root):
    """Before: the mismatch escaped _gpu_per_process and every row was lost."""
    devices = [StandinDevice(processes=[("children", 2 * MIB)])]
    out = run_with(standin_root, devices, variant="no_v3", code=JOB_SAMPLE)
    series = out["series"]
    assert len(series["t"]) >= 3 and peak(series["process_rss_bytes"]) > MIB
    assert set(series["worker0_gpu0_process_memory_bytes"]) - {None} == {2 * MIB}
    assert max(v or 0 for v in series["gpu0_process_memory_bytes"]) == 4 * MIB


def test_10_old_driver_memory_v1_and_throttle_reasons_say_so(standin_root):
    old = run_with(standin_root, [worker_on_gpu()], variant="old_driver")
    device = old["sampler"]["sources"]["gpu"]["devices"][0]
    assert device["memory_used_method"].startswith("nvmlDeviceGetMemoryInfo (v1)")
    assert device["clock_reasons_call"] == "throttle_reasons"
    assert set(old["sampler"]["series"]["gpu0_memory_used_bytes"]) == {4 * GIB}
    new = run_with(standin_root, [worker_on_gpu()])
    device = new["sampler"]["sources"]["gpu"]["devices"][0]
    assert device["memory_used_method"].startswith("nvmlDeviceGetMemoryInfo_v2")
    assert device["clock_reasons_call"] == "event_reasons"
    assert set(new["sampler"]["series"]["gpu0_memory_used_bytes"]) == {4 * GIB - 256 * MIB}


# --------------------------------------------------------- 3: NVML errors after init


def test_3_no_permission_on_one_gpu_keeps_the_other(standin_root):
    """Before: NVMLError_NoPermission out of Sampler() and gpu_info()."""
    devices = [
        worker_on_gpu(),
        StandinDevice(fails={"nvmlDeviceGetHandleByIndex_v2": (ERRORS["NO_PERMISSION"], 0)}),
    ]
    out = run_with(standin_root, devices)
    gpu = out["sampler"]["sources"]["gpu"]
    assert gpu["available"] and "NoPermission" in gpu["failed"]["gpu1"]
    assert set(out["sampler"]["series"]["gpu0_kernel_time_percent"]) == {57}
    assert not any(name.startswith("gpu1_") for name in out["sampler"]["series"])
    info = out["gpu_info"]
    assert info["available"] and "NoPermission" in info["devices"][1]["error"]


def test_3_gpu_lost_while_opening_is_a_reason_not_a_crash(standin_root):
    """Before: NVMLError_GpuIsLost out of Sampler() and gpu_info()."""
    lost = StandinDevice(fails={"nvmlDeviceGetName": (ERRORS["GPU_IS_LOST"], 0)})
    out = run_with(standin_root, [lost])
    gpu = out["sampler"]["sources"]["gpu"]
    assert not gpu["available"] and "GpuIsLost" in gpu["reason"]
    assert peak(out["sampler"]["series"]["process_rss_bytes"]) > MIB
    assert not out["gpu_info"]["available"] and "GPU is lost" in out["gpu_info"]["reason"]
    job = run_with(standin_root, [lost], code=JOB_SAMPLE)
    assert "GpuIsLost" in job["sources"]["gpu"]["reason"] and job["series"]["process_rss_bytes"]


def test_3_gpu_lost_mid_run_is_marked_failed_and_sampling_goes_on(standin_root):
    fails = {"nvmlDeviceGetUtilizationRates": (ERRORS["GPU_IS_LOST"], 3)}
    out = run_with(standin_root, [worker_on_gpu(fails=fails)])
    series, gpu = out["sampler"]["series"], out["sampler"]["sources"]["gpu"]
    assert "GpuIsLost" in gpu["failed"]["gpu0"]
    assert gpu["devices"][0]["failed"].startswith("utilization")
    kernel = series["gpu0_kernel_time_percent"]
    assert kernel[:3] == [57, 57, 57] and set(kernel[3:]) == {None}
    assert peak(series["process_rss_bytes"][4:]) > MIB  # the CPU series went on


# ------------------------------------------------------- 4: compare without a reading


def test_4_compare_shows_na_for_an_mxnet_gpu_run_without_process_memory(standin_root):
    """Before: TypeError (float(None)) in compare's memory summary."""
    out = run_with(standin_root, [worker_on_gpu(memory=None)], variant="no_v3")
    peak = {"kind": "framework_peak", "bytes": None, "reason": "MXNet has no peak counter"}
    memory = [peak, *out["memory"]]
    (group,) = compare([run_result("mxnet", memory, out["sampler"])])
    assert group.rows[0].memory_kind == "device_used"  # the next kind, never 0
    no_device = [peak, *[m for m in out["memory"] if m["kind"] == "process_nvml"]]
    results = [run_result("mxnet", no_device, out["sampler"])]
    (row,) = compare(results)[0].rows
    assert row.memory_kind is None and "MXNet has no peak counter" in row.memory_reason
    (memory_table,) = [t for t in study_tables(results) if t.title == "Peak memory"]
    assert "n/a" in memory_table.text()


# ------------------------------------------------------------------ 5: several GPUs


def test_5_energy_and_memory_cover_only_the_gpu_the_worker_used(standin_root):
    """Before: 66 J from four counters (16.5 J each) and four device_used readings."""
    devices = [worker_on_gpu()] + [StandinDevice(processes=[(999_999, 8 * GIB)]) for _ in range(3)]
    out = run_with(standin_root, devices)
    used = out["sampler"]["sources"]["gpu"]["worker_gpus"]
    assert used == dict(used, indices=[0], method="nvml_pids")
    energy = out["energy"]
    assert list(energy["devices"]) == ["gpu0"] and energy["method"] == "counter"
    assert {m["device"] for m in out["memory"]} == {"gpu0"}
    assert len([m for m in out["memory"] if m["kind"] == "device_used"]) == 1


# --------------------------------------------------------------------- 10: smaller


def test_10_unsupported_is_remembered_per_gpu(standin_root):
    """Before: GPU 0's NotSupported power hid GPU 1's power for the rest of the run."""
    devices = [worker_on_gpu(power_mw=None), worker_on_gpu(power_mw=90_000)]
    out = run_with(standin_root, devices)
    series, gpu = out["sampler"]["series"], out["sampler"]["sources"]["gpu"]
    assert set(series["gpu1_power_w"]) == {90.0}
    assert "gpu0_power_w" not in series
    assert "NotSupported" in gpu["unsupported"]["gpu0"]["power_w"]
    assert "gpu1" not in gpu["unsupported"]


def test_10_energy_from_power_where_there_is_no_counter(standin_root):
    """Before: "no energy counter was readable": no energy, no images per joule."""
    out = run_with(standin_root, [worker_on_gpu(energy_mj=None, power_mw=100_000)])
    energy = out["energy"]
    assert energy["available"] and energy["method"] == "power_integral"
    window = out["sampler"]["summary"]["measured"]
    assert energy["measured_j"] == pytest.approx(window["gpu0_power_w"]["integral_j"])
    # 100 W held over the measured window, however long a busy machine made it (it was
    # assumed to be about 0.3 s: the child's start stretched it to 0.57 s at a suite's end)
    start, end = out["windows"]["measured"]
    assert end - start > 0.2
    assert energy["measured_j"] == pytest.approx(100 * (end - start), rel=0.01)
    assert energy["images_per_joule"] == pytest.approx(1000 / energy["measured_j"])


def test_10_no_power_and_no_counter_is_unknown_energy_with_the_reason(standin_root):
    out = run_with(standin_root, [worker_on_gpu(energy_mj=None, power_mw=None)])
    energy = out["energy"]
    assert not energy["available"] and "NotSupported" in energy["reason"]
    assert energy.get("measured_j") is None


def test_10_counter_is_interpolated_to_the_window_edges():
    """Before: only the counter's rise between the first and last sample inside: 10 J."""
    from kbench.measure.sampler import summarize

    series = {"t": [0.0, 1.0, 2.0, 3.0], "gpu0_energy_j": [0.0, 10.0, 20.0, 30.0],
              "gpu0_power_w": [10.0, 10.0, 10.0, 10.0]}  # fmt: skip
    summary = summarize(series, {"measured": (0.5, 2.5)})
    assert summary["measured"]["gpu0_energy_j"]["increase"] == pytest.approx(20.0)
    assert summary["measured"]["gpu0_power_w"]["integral_j"] == pytest.approx(20.0)
    energy = measured_energy(summary, 100)
    assert energy["measured_j"] == pytest.approx(20.0) and energy["method"] == "counter"
    assert sampled_memory({"run": {}}) == []


# ------------------------------------------------------- a two-GPU run reads alike


def torch_peaks(per_gpu: List[tuple]) -> List[Dict[str, Any]]:
    """The framework readings a torch worker records of each GPU: its allocated and its
    reserved peak (kbench.backends.torch_common), ``per_gpu`` as (allocated, reserved)."""
    return [
        {"kind": "framework_peak", "bytes": value, "device": f"cuda:{index}",
         "source": f"torch.cuda.max_memory_{what}({index})"}
        for index, pair in enumerate(per_gpu)
        for what, value in zip(("allocated", "reserved"), pair)
    ]  # fmt: skip


def test_a_two_gpu_run_reads_alike_in_compare_the_csv_and_the_report(
    standin_root, tmp_path, capsys
):
    """A worker on two GPUs (3 and 2 GiB of its own, as NVML sees them; torch's reserved
    peaks 2.5 and 1.5 GiB) beside a one-GPU run. Before, ``kbench compare`` and the CSV
    stated 3 GiB and 2.5 GiB (the largest reading) and ``kbench report`` 5 GiB and 7 GiB
    (every reading summed, torch's allocated and reserved peaks of one GPU added), neither
    saying which. Now each states the largest per-GPU peak and, labelled, the sum."""
    from kbench.cli.app import main
    from kbench.results.store import ResultStore

    two = [
        StandinDevice(memory_used=6 * GIB, memory_reserved=0, gpu_util=60,
                      processes=[("children", 3 * GIB)]),
        StandinDevice(memory_used=4 * GIB, memory_reserved=0, gpu_util=80,
                      processes=[("children", 2 * GIB)]),
    ]  # fmt: skip
    out = run_with(standin_root, two, name="two-gpus.conf")
    nvml = out["memory"]
    assert sorted((m["kind"], m["device"], m["bytes"]) for m in nvml) == [
        ("device_used", "gpu0", 6 * GIB), ("device_used", "gpu1", 4 * GIB),
        ("process_nvml", "gpu0", 3 * GIB), ("process_nvml", "gpu1", 2 * GIB),
    ]  # fmt: skip
    one = run_with(standin_root, [two[1]], name="one-gpu.conf")
    store = ResultStore(tmp_path / "store")
    runs = [
        dataclasses.replace(
            run_result(backend, memory, found["sampler"]),
            run_id=f"{backend}-run",
            started_at=f"2026-01-01T00:00:0{i}",
        )  # fmt: skip
        for i, (backend, memory, found) in enumerate(
            [
                ("jax", one["memory"], one),
                ("torch", nvml + torch_peaks([(2 * GIB, 5 * GIB // 2), (GIB, 3 * GIB // 2)]), out),
            ]
        )  # fmt: skip
    ]
    for run in runs:
        store.add(run)

    # kbench compare: the largest per-GPU peak, the sum beside it, said to be one
    assert main(["compare", "--store", str(store.directory)]) == 0
    printed = capsys.readouterr().out
    per_gpu = "3.0 GiB per GPU (largest of 2; sum 5.0 GiB)"
    memory = printed[printed.index("Peak memory") :]
    assert memory.splitlines()[3] == f"mlp (synthetic)  2.0 GiB  {per_gpu}", memory
    assert "70 (gpu, mean of 2 GPUs)" in printed  # 60% and 80%
    # the CSV: the same figures, the sum in a column named so, empty for one GPU
    csv_path = tmp_path / "runs.csv"
    assert main(["results", "--store", str(store.directory), "--export", str(csv_path)]) == 0
    rows = {r["backend"]: r for r in csv.DictReader(csv_path.open())}
    torch = {k: float(v) for k, v in rows["torch"].items() if k.startswith("memory_") and v}
    assert torch == {
        "memory_process_nvml_bytes": 3 * GIB, "memory_process_nvml_sum_bytes": 5 * GIB,
        "memory_framework_peak_bytes": 2.5 * GIB, "memory_framework_peak_sum_bytes": 4 * GIB,
        "memory_device_used_bytes": 6 * GIB, "memory_device_used_sum_bytes": 10 * GIB,
    }  # fmt: skip
    assert rows["jax"]["memory_process_nvml_bytes"] == str(2 * GIB)
    assert rows["jax"]["memory_process_nvml_sum_bytes"] == ""
    assert float(rows["torch"]["gpu_utilization_percent_mean"]) == pytest.approx(70)
    # kbench report: its summary is compare's tables, the memory row the same figures
    page = tmp_path / "report.html"
    assert main(["report", "--store", str(store.directory), "--output", str(page)]) == 0
    summary = html.unescape(page.read_text().split('<section id="summary">')[1])
    memory = summary[summary.index("<h3>Peak memory</h3>") :]
    memory = memory[memory.index("<tr><td>mlp") :].split("</tr>")[0]
    assert (
        memory
        == f'<tr><td>mlp (synthetic)</td><td class="num">2.0 GiB</td><td class="num">{per_gpu}</td>'
    )


# ------------------------------------------------------------------ kbench run, compare


@pytest.mark.slow
def test_kbench_run_and_compare_on_a_two_gpu_standin(standin_root, tmp_path):
    """The real CLI, the runner's sampler on the worker, the binding on the stand-in."""
    require_backends("torch-native")
    try:
        lib = build_standin(standin_root, "full")
    except CompilerMissing as err:
        pytest.skip(str(err))
    devices = [
        worker_on_gpu(memory=None),  # the worker's memory unknown (laptop, WDDM)
        StandinDevice(gpu_util=87, processes=[(999_999, 8 * GIB)]),  # someone else's
    ]
    config = write_config(tmp_path / "nvml.conf", devices)
    env = standin_env(lib, config)
    # 150 steps: torch-native's take about 1.5 ms each, and the measured window must hold
    # samples every 0.05 s for the utilization compare shows
    completed = run_kbench(
        ["run", "--backend", "torch-native", "--model", "mlp", "--dataset", "synthetic",
         "--steps", "150", "--warmup-steps", "2", "--batch-size", "32", "--test-samples", "32",
         "--sample-interval", "0.05"],
        tmp_path, env=env,
    )  # fmt: skip
    assert completed.returncode == 0, dump(completed)
    (r,) = completed.results()
    assert r.environment["machine"]["gpu"]["driver"] == "999.99-standin"
    gpu = r.sampler["sources"]["gpu"]
    assert gpu["worker_gpus"]["indices"] == [0]
    kinds = {m["kind"]: m for m in r.metrics["memory"]}
    assert kinds["process_nvml"]["bytes"] is None
    assert "NVML_VALUE_NOT_AVAILABLE" in kinds["process_nvml"]["reason"]
    assert {m["device"] for m in r.metrics["memory"] if m["kind"] == "device_used"} == {"gpu0"}
    energy = r.metrics["energy"]
    assert energy["available"] and list(energy["devices"]) == ["gpu0"]
    compared = run_kbench(["compare", "--store", str(tmp_path / "results")], tmp_path, env=env)
    assert compared.returncode == 0, dump(compared)
    assert "57 (gpu)" in compared.stdout  # GPU 0's, not GPU 1's 87
    assert "0 B" not in compared.stdout


@pytest.mark.slow
def test_kbench_run_device_cpu_on_a_gpu_machine_compares_by_rss(standin_root, tmp_path):
    """Before: compare showed "Peak memory 0 B (process_nvml)" and "87 (gpu)"."""
    require_backends("torch-native")
    try:
        lib = build_standin(standin_root, "full")
    except CompilerMissing as err:
        pytest.skip(str(err))
    busy = StandinDevice(gpu_util=87, processes=[(999_999, 8 * GIB)])  # another process
    env = standin_env(lib, write_config(tmp_path / "nvml.conf", [busy]))
    completed = run_kbench(
        ["run", "--backend", "torch-native", "--model", "mlp", "--dataset", "synthetic",
         "--steps", "30", "--warmup-steps", "2", "--batch-size", "32", "--test-samples", "32",
         "--sample-interval", "0.05", "--device", "cpu"],
        tmp_path, env=env,
    )  # fmt: skip
    assert completed.returncode == 0, dump(completed)
    (r,) = completed.results()
    assert r.sampler["sources"]["gpu"]["worker_gpus"]["indices"] == []
    assert [m["kind"] for m in r.metrics["memory"]] == ["process_peak_rss"]
    assert not r.metrics["energy"]["available"]
    compared = run_kbench(["compare", "--store", str(tmp_path / "results")], tmp_path, env=env)
    assert compared.returncode == 0, dump(compared)
    assert "(gpu)" not in compared.stdout  # the CPU use, or nothing where unsampled
    assert "0 B" not in compared.stdout


@pytest.mark.slow
def test_5_gpu_smoke_prints_the_gpu_the_worker_used(standin_root, tmp_path):
    """Before: scripts/gpu_smoke.sh kept the last GPU's reading, 0 for a worker on GPU 0
    of two. Now it prints, per GPU the worker used, utilization, memory by kind, power
    and energy with their methods."""
    require_backends("torch")
    try:
        lib = build_standin(standin_root, "full")
    except CompilerMissing as err:
        pytest.skip(str(err))
    devices = [worker_on_gpu(memory=3 * MIB), StandinDevice(gpu_util=87, processes=[])]
    env = standin_env(lib, write_config(tmp_path / "nvml.conf", devices))
    # the smoke stage; the others (check, memory, parity, windows) ran on a real H100
    # (tests/test_gpu_h100_results.py reads what they wrote)
    env.update(KBENCH_SMOKE_DEVICE="auto", KBENCH_SMOKE_STAGES="smoke", HOME=str(tmp_path),
               TMPDIR=str(tmp_path))  # fmt: skip
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([str(root / "scripts" / "gpu_smoke.sh"), "torch", "mlp"], env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "gpu_smoke: GPUs: Stand-in GPU, Stand-in GPU" in out, out
    assert "GPUs the worker used: [0] (nvml_pids" in out, out
    assert "GPU 0 Stand-in GPU" in out and "GPU 1 Stand-in GPU" not in out, out
    assert "kernel time % (measured, NVML): mean 57.0" in out, out
    assert "worker (NVML per process) 3 MiB" in out, out
    assert "(counter)" in out, out  # the energy with the method that gave it
