"""The Jetson sampler source (kbench.measure.jetson) on fake file trees laid out like
a board's (tests/fake_jetson), read with its real file readers; and the sampler
choosing it as the ``gpu`` source under ``KBENCH_SYSTEM_ROOT``. No Jetson ran this."""

from __future__ import annotations

import os

import pytest
from conftest import dump, run_kbench
from fake_jetson import build_nano_jetpack4, build_orin, set_value

from kbench.measure import jetson
from kbench.measure.jetson import JetsonSource
from kbench.measure.nvml import SourceUnavailable
from kbench.measure.sampler import ROOT_VARIABLE, Sampler, summarize
from kbench.run.metrics import measured_energy


class Clock:
    def __init__(self, *times: float) -> None:
        self.times = list(times)

    def __call__(self) -> float:
        return self.times.pop(0)


def test_orin_on_jetpack6_reads_load_frequency_rails_and_nvmap(tmp_path):
    build_orin(tmp_path)
    source = JetsonSource(tmp_path, clock=Clock(0.0))
    reading = source.read([])
    assert reading["gpu0_load_percent"] == pytest.approx(52.3)  # 523 per mille
    assert reading["gpu0_freq_mhz"] == pytest.approx(624.75)  # Hz in cur_freq
    assert reading["rail_VDD_IN_power_w"] == pytest.approx(5.064 * 1.392)  # mV x mA
    assert reading["rail_VDD_SOC_power_w"] == pytest.approx(5.064 * 0.312)
    assert reading["board_power_w"] == pytest.approx(5.064 * 1.392)  # the input rail only
    assert reading["board_energy_j"] == 0.0  # nothing integrated after one sample
    assert reading["gpu0_shared_memory_bytes"] == 524288 * 1024
    assert "gpu0_power_w" not in reading  # VDD_CPU_GPU_CV feeds the CPU too
    described = source.describe()
    assert described["method"] == jetson.METHOD
    assert described["board"] == "NVIDIA Jetson Orin Nano Developer Kit"
    assert described["gpu_node"]["name"] == "ga10b"  # not the NVDLA's devfreq entry
    assert described["power_files"] == "hwmon (ina3221)"
    assert described["board_power"] == "input rail VDD_IN"
    assert "feeds the GPU alone" in described["unavailable"]["gpu0_power_w"]


def test_board_energy_is_the_power_integrated_over_the_samples(tmp_path):
    files = build_orin(tmp_path)
    source = JetsonSource(tmp_path, clock=Clock(100.0, 101.0, 103.0))
    powers = []
    for milliamps in (1000, 2000, 500):
        set_value(files, "hwmon_curr1_input", milliamps)
        reading = source.read([])
        powers.append(reading["board_power_w"])
    assert powers == pytest.approx([5.064, 10.128, 2.532])
    expected = 1.0 * (powers[0] + powers[1]) / 2 + 2.0 * (powers[1] + powers[2]) / 2
    assert reading["board_energy_j"] == pytest.approx(expected)
    # the summary reads it as a counter; the power's integral over the same span agrees
    series = {"t": [100.0, 101.0, 103.0], "board_energy_j": [0.0, 7.596, expected],
              "board_power_w": powers}  # fmt: skip
    stats = summarize(series, {"run": (100.0, 103.0)})["run"]
    assert stats["board_energy_j"]["increase"] == pytest.approx(expected)
    assert stats["board_power_w"]["integral_j"] == pytest.approx(expected)
    # the run's energy is the board's (no rail feeds the Orin's GPU alone): not unknown
    loaded = dict(series, gpu0_load_percent=[10.0, 20.0, 30.0])
    summary = summarize(loaded, {"measured": (100.0, 103.0)})
    energy = measured_energy(summary, 600)
    assert energy["available"] and energy["method"] == "board_power_integral"
    assert energy["measured_j"] == pytest.approx(expected)
    assert energy["images_per_joule"] == pytest.approx(600 / expected)


def test_nano_on_jetpack4_reads_the_iio_rails_and_its_gpu_rail(tmp_path):
    build_nano_jetpack4(tmp_path)
    source = JetsonSource(tmp_path, clock=Clock(0.0))
    reading = source.read([])
    assert reading["gpu0_load_percent"] == pytest.approx(99.8)
    assert reading["gpu0_freq_mhz"] == pytest.approx(921.6)
    assert reading["board_power_w"] == pytest.approx(4.912)  # POM_5V_IN, in mW
    assert reading["gpu0_power_w"] == pytest.approx(1.804)  # POM_5V_GPU feeds the GPU alone
    assert reading["gpu0_shared_memory_bytes"] == 262144 * 1024
    described = source.describe()
    assert described["power_files"] == "iio (ina3221x)"
    assert described["gpu_power_rail"] == "POM_5V_GPU"
    assert described["gpu_node"]["load"].endswith("57000000.gpu/load")


def test_rails_without_an_input_rail_are_summed_and_say_so(tmp_path):
    # as an AGX Xavier: GPU, CPU, SOC and no *_IN rail
    build_orin(tmp_path)
    hwmon = tmp_path / "sys/devices/platform/bus@0/c240000.i2c/i2c-1/1-0040/hwmon/hwmon1"
    for channel, label in enumerate(("GPU", "CPU", "SOC"), start=1):
        (hwmon / f"in{channel}_label").write_text(label + "\n")
    source = JetsonSource(tmp_path, clock=Clock(0.0))
    reading = source.read([])
    rails = [reading[f"rail_{name}_power_w"] for name in ("GPU", "CPU", "SOC")]
    assert reading["board_power_w"] == pytest.approx(sum(rails))
    assert reading["gpu0_power_w"] == pytest.approx(rails[0])
    assert source.describe()["board_power"].startswith("sum of every rail")


def test_a_reading_that_fails_is_left_out_not_zero(tmp_path):
    files = build_orin(tmp_path)
    source = JetsonSource(tmp_path, clock=Clock(0.0, 1.0))
    files["load"].unlink()
    files["hwmon_curr1_input"].write_text("garbage\n")
    reading = source.read([])
    assert "gpu0_load_percent" not in reading
    assert "rail_VDD_IN_power_w" not in reading and "board_power_w" not in reading
    assert reading["gpu0_freq_mhz"] == pytest.approx(624.75)


def test_not_a_jetson_says_which_files_told_it(tmp_path):
    (tmp_path / "proc/device-tree").mkdir(parents=True)
    (tmp_path / "proc/device-tree/model").write_text("Raspberry Pi 4 Model B\x00")
    assert not jetson.is_jetson(tmp_path)
    with pytest.raises(SourceUnavailable, match="names no Jetson.*nv_tegra_release"):
        JetsonSource(tmp_path)


def test_a_jetson_without_gpu_node_or_monitors_is_unavailable_with_the_reason(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/nv_tegra_release").write_text("# R35 (release)\n")
    assert jetson.is_jetson(tmp_path)
    with pytest.raises(SourceUnavailable, match="neither a GPU devfreq node.*INA3221"):
        JetsonSource(tmp_path)


def test_the_sampler_reads_the_gpu_from_the_jetson_tree(tmp_path, monkeypatch):
    build_orin(tmp_path)
    monkeypatch.setenv(ROOT_VARIABLE, str(tmp_path))
    with Sampler(os.getpid(), interval_s=0.02) as sampler:
        pass
    result = sampler.result({"run": (0.0, 2e10)}).to_dict()
    gpu = result["sources"]["gpu"]
    assert gpu["available"] is True and gpu["method"] == jetson.METHOD
    assert result["series"]["gpu0_load_percent"][0] == pytest.approx(52.3)
    assert result["series"]["process_rss_bytes"][0] > 0  # the CPU source still runs
    assert "busy" in result["labels"]["gpu0_load_percent"]
    assert "INA3221" in result["labels"]["rail_VDD_IN_power_w"]
    assert result["summary"]["run"]["board_power_w"]["mean"] == pytest.approx(5.064 * 1.392)


@pytest.mark.slow  # one kbench command (its worker is a stand-in that exits)
def test_kbench_run_on_the_jetson_tree_records_the_gpu_section_from_it(home, tmp_path):
    build_orin(tmp_path / "jetson")
    fake = tmp_path / "fake-python"  # a worker that runs 1 s and dies: the sampler still ran
    fake.write_text("#!/bin/sh\nsleep 1\nexit 3\n")
    fake.chmod(0o755)
    completed = run_kbench(
        ["run", "--backend", "torch", "--model", "mlp", "--dataset", "synthetic",
         "--steps", "3", "--batch-size", "8", "--train-samples", "32", "--test-samples", "16"],
        home,
        env={"KBENCH_PYTHON_TORCH": str(fake), ROOT_VARIABLE: str(tmp_path / "jetson")},
    )  # fmt: skip
    (result,) = completed.results()
    assert result.status == "failed", dump(completed)
    gpu = result.sampler["sources"]["gpu"]
    assert gpu["method"] == jetson.METHOD and gpu["board"].startswith("NVIDIA Jetson Orin")
    series = result.sampler["series"]
    assert {"gpu0_load_percent", "board_power_w", "board_energy_j"} <= set(series)
