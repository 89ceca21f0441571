"""The CPU's kernel-deciding features and TensorFlow's oneDNN plan, without a framework."""

from __future__ import annotations

import pytest

from kbench.backends import kernels
from kbench.backends.switches import SwitchBoard
from kbench.measure import sysinfo
from kbench.results.config import ConfigError, RunConfig

pytestmark = pytest.mark.own_processes("a setting read as a framework starts")

EPYC = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B12
flags\t\t: fpu sse4_1 sse4_2 avx f16c fma avx2 bmi2 sha_ni
processor\t: 1
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B12
flags\t\t: fpu sse4_1 sse4_2 avx f16c fma avx2 bmi2 sha_ni
"""
SAPPHIRE_RAPIDS = """vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: sse4_2 avx avx2 fma avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni \
avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8
"""
GRAVITON = """processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics asimddp sve i8mm bf16
CPU implementer\t: 0x41
"""


def test_cpuinfo_gives_vendor_model_and_the_features_that_decide_kernels():
    cpu = sysinfo.parse_cpuinfo(EPYC, "x86_64")
    assert cpu == {
        "vendor": "AuthenticAMD",
        "model": "AMD EPYC 7B12",
        "architecture": "x86_64",
        "features": ["sse4_2", "avx", "avx2", "fma"],
        "source": "/proc/cpuinfo",
    }
    intel = sysinfo.parse_cpuinfo(SAPPHIRE_RAPIDS, "x86_64")
    assert {"avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8"} <= set(intel["features"])
    arm = sysinfo.parse_cpuinfo(GRAVITON, "aarch64")
    assert arm["vendor"] == "ARM" and arm["model"] is None
    assert arm["features"] == ["asimd", "asimddp", "sve", "i8mm", "bf16"]


def test_this_machine_is_described():
    cpu = sysinfo.cpu_features()
    assert cpu["architecture"] and set(cpu) >= {"vendor", "model", "features", "source"}
    assert cpu["features"] is None or set(cpu["features"]) <= set(sysinfo.KERNEL_FEATURES)


def test_tensorflow_turns_onednn_on_by_default_only_with_vnni_bf16_or_amx():
    amd = sysinfo.parse_cpuinfo(EPYC, "x86_64")
    intel = sysinfo.parse_cpuinfo(SAPPHIRE_RAPIDS, "x86_64")
    arm = sysinfo.parse_cpuinfo(GRAVITON, "aarch64")
    assert kernels.cpu_default(amd, "linux") is False
    assert kernels.cpu_default(intel, "linux") is True
    assert kernels.cpu_default(intel, "win32") is False
    assert kernels.cpu_default(arm, "linux") is None  # the build decides
    assert kernels.cpu_default({"architecture": "x86_64", "features": None}, "linux") is None


AMD = sysinfo.parse_cpuinfo(EPYC, "x86_64")
INTEL = sysinfo.parse_cpuinfo(SAPPHIRE_RAPIDS, "x86_64")


@pytest.mark.parametrize(
    "requested, environment, cpu, data_format, device, set_to, in_reason",
    [
        # channels_last: TensorFlow's own choice, or the user's variable
        ("auto", None, AMD, "channels_last", "auto", None, "off by default on this CPU"),
        ("auto", None, INTEL, "channels_last", "auto", None, "on by default on this CPU"),
        ("auto", "1", AMD, "channels_last", "auto", None, "TF_ENABLE_ONEDNN_OPTS=1 in the"),
        # channels_first where oneDNN would be off: turned on, whatever made it off
        ("auto", None, AMD, "channels_first", "auto", "1", "turned on for channels_first"),
        ("auto", "0", INTEL, "channels_first", "auto", "1", "TF_ENABLE_ONEDNN_OPTS=0 in the"),
        ("auto", None, INTEL, "channels_first", "auto", None, "on by default"),
        ("auto", None, AMD, "channels_first", "gpu", None, "off by default"),  # cuDNN's NCHW
        # the switch wins over the environment
        ("off", "1", INTEL, "channels_first", "auto", "0", "--onednn off"),
        ("on", "0", AMD, "channels_last", "auto", "1", "--onednn on"),
    ],
)
def test_the_onednn_plan(requested, environment, cpu, data_format, device, set_to, in_reason):
    plan = kernels.plan_onednn(requested, environment, cpu, "linux", data_format, device)
    assert plan.set_to == set_to
    assert in_reason in plan.reason
    assert plan.switched_for_layout == (requested == "auto" and set_to == "1")
    assert plan.to_dict()["requested"] == requested


def test_channels_first_on_eigen_without_xla_or_gpu_is_refused_with_the_fix():
    refusal = kernels.nchw_refusal("channels_first", False, 0, "auto", "--onednn off")
    assert "expected oneDNN on, XLA (--jit-compile on) or a GPU" in refusal
    assert "received oneDNN off (--onednn off) and no GPU" in refusal
    assert "Fix: --onednn on (or auto), --jit-compile on, or --data-format channels_last" in (
        refusal
    )
    assert not kernels.nchw_refusal("channels_first", True, 0, "auto")
    assert not kernels.nchw_refusal("channels_first", False, 1, "auto")
    assert not kernels.nchw_refusal("channels_first", False, 0, "on")
    assert not kernels.nchw_refusal("channels_first", None, 0, "auto")  # cannot tell
    assert not kernels.nchw_refusal("channels_last", False, 0, "auto")


def test_onednn_is_a_recorded_switch():
    assert RunConfig(backend="tensorflow", model="mlp", onednn="off").switches()["onednn"] == "off"
    with pytest.raises(ConfigError, match="expected one of auto, on, off"):
        RunConfig(backend="tensorflow", model="mlp", onednn="eigen")
    record = SwitchBoard({"onednn": "on"}, "jax").record()
    assert record["onednn"]["status"] == "not applicable"


def test_numpy_blas_is_named():
    info = kernels.numpy_blas()
    assert info["numpy"]
    assert info["blas"] is None or "name" in info["blas"]


def run_on(host, cpu, backend, ips, kernels, repeat=0, model="mlp"):
    from kbench.results.result import RunResult

    return RunResult(
        run_id=f"{host}{backend}{repeat}{model}", status="ok",
        config={"backend": backend, "model": model, "dataset": "synthetic", "batch_size": 32,
                "repeat": repeat, "mode": "train"},
        started_at="t", wall_time_s=1.0, data={"synthetic": True},
        environment={"machine": {"hostname": host, "cpu": cpu},
                     "framework": {"cpu_kernels": kernels}},
        metrics={"images_per_sec": ips},
    )  # fmt: skip


EIGEN = {"library": "Eigen", "onednn": False}
ONEDNN = {"library": "oneDNN", "onednn": True}
XLA = {"library": "XLA"}


def test_compare_marks_rows_from_other_cpus_and_kernel_libraries():
    from kbench.results.analysis import compare
    from kbench.views.tables import comparison_tables

    results = [
        run_on("laptop", AMD, "tensorflow", 100, EIGEN),
        run_on("laptop", AMD, "jax", 120, XLA),
        run_on("server", INTEL, "tensorflow", 300, ONEDNN),
    ]
    (group,) = compare(results)
    rows = {row.backend: row for row in group.rows}
    assert rows["tensorflow @ laptop"].setup_flags == [
        "CPU: AMD EPYC 7B12 (avx2, fma)",
        "kernels: Eigen",
    ]
    assert rows["jax @ laptop"].setup_flags == ["CPU: AMD EPYC 7B12 (avx2, fma)"]  # XLA alone
    assert rows["tensorflow @ server"].setup_flags[1] == "kernels: oneDNN"
    assert "avx512_vnni, avx512_bf16, amx_tile" in rows["tensorflow @ server"].setup_flags[0]
    text = comparison_tables(results)
    assert "[CPU: AMD EPYC 7B12 (avx2, fma); kernels: Eigen]" in text
    assert "rows measured on different CPUs" in text


def test_compare_says_nothing_when_cpu_and_kernels_agree():
    from kbench.results.analysis import compare

    results = [run_on("laptop", AMD, "tensorflow", 100, EIGEN),
               run_on("laptop", AMD, "jax", 120, XLA)]  # fmt: skip
    (group,) = compare(results)
    assert all(not row.setup_flags for row in group.rows)
    # one machine's repeats on two kernel libraries (TF_ENABLE_ONEDNN_OPTS changed between)
    mixed = [run_on("laptop", AMD, "tensorflow", 100, EIGEN),
             run_on("laptop", AMD, "tensorflow", 90, ONEDNN, repeat=1)]  # fmt: skip
    (group,) = compare(mixed)
    assert group.rows[0].setup_flags == ["kernels: Eigen / oneDNN"]


def test_the_report_marks_rows_from_other_cpus_and_kernel_libraries(tmp_path):
    import html

    from kbench.views import report

    mixed = [
        run_on("laptop", AMD, "tensorflow", 100, EIGEN),
        run_on("laptop", AMD, "jax", 120, XLA),
        run_on("server", INTEL, "tensorflow", 300, ONEDNN),
    ]
    report.write_report(mixed, tmp_path / "mixed.html")
    text = html.unescape((tmp_path / "mixed.html").read_text())
    # runs of two machines: a summary table per machine (issue 29), headed by its CPU and
    # kernel libraries, so no row carries another machine's setup beside it
    assert '<span class="badge setup">2 MACHINES</span>' in text
    assert "On laptop" in text and "On server" in text
    assert "CPU AMD EPYC 7B12 (avx2, fma); no GPU; kernels: tensorflow Eigen, jax XLA." in text
    assert "no GPU; kernels: tensorflow oneDNN." in text
    assert "backends: tensorflow @ laptop, jax @ laptop, tensorflow @ server" in text
    # (the throughput plot divided by zero when it looked for rows by backend alone)
    assert 'alt="Throughput by backend' in text
    # a model one machine alone ran: drawn, with its ratio to the baseline on that machine
    alone = mixed + [run_on("laptop", AMD, "tensorflow", 50, EIGEN, model="small_cnn"),
                     run_on("laptop", AMD, "jax", 70, XLA, model="small_cnn")]  # fmt: skip
    report.write_report(alone, tmp_path / "alone.html", baseline="tensorflow")
    text = html.unescape((tmp_path / "alone.html").read_text())
    assert 'alt="Throughput by backend' in text and "x1.40" in text  # small_cnn: jax 70/50
    agreeing = mixed[:2]
    report.write_report(agreeing, tmp_path / "agreeing.html")
    assert 'badge setup">other setup' not in (tmp_path / "agreeing.html").read_text()


@pytest.mark.slow
def test_pytorch_records_the_kernels_an_older_cpu_gets(tmp_path):
    """ATEN_CPU_CAPABILITY=default: PyTorch dispatches its unvectorised kernels, as on a
    CPU without AVX2, and the result says so."""
    from conftest import dump, require_backends, run_kbench

    require_backends("torch-native")
    done = run_kbench(
        ["run", "-b", "torch-native", "-m", "mlp", "--dataset", "synthetic", "--steps", "1",
         "--warmup-steps", "0", "--batch-size", "8", "--train-samples", "8",
         "--test-samples", "8", "--sample-interval", "0"],
        tmp_path, env={"ATEN_CPU_CAPABILITY": "default"},
    )  # fmt: skip
    (result,) = done.results()
    assert result.ok, dump(done)
    kernels = result.environment["framework"]["cpu_kernels"]
    assert kernels["cpu_capability"] == "DEFAULT" and kernels["ATEN_CPU_CAPABILITY"] == "default"
