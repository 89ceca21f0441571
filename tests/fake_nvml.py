"""A stand-in for the pynvml module, for machines without a GPU.

It answers the calls kbench's sampler makes with fixed, recognisable values: one
GPU, 57 % kernel time, 23 % memory busy, 4 GiB used of 16 GiB, 1 MiB of device
memory for every process on the machine, 150 W, an energy counter that grows by
1.5 J per reading, and NotSupported for throttle reasons (as some boards answer).
"""

import psutil

NVML_CLOCK_SM = 1
NVML_TEMPERATURE_GPU = 0
GIB = 2**30


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's own spelling
    pass


class _Memory:
    total = 16 * GIB
    used = 4 * GIB
    free = 12 * GIB


class _Rates:
    gpu = 57
    memory = 23


class _Process:
    def __init__(self, pid):
        self.pid = pid
        self.usedGpuMemory = 2**20  # noqa: N815 - pynvml's field name


class FakeNvml:
    NVMLError = NVMLError
    NVML_CLOCK_SM = NVML_CLOCK_SM
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU

    def __init__(self):
        self.energy_mj = 1_000_000
        self.initialised = 0

    def nvmlInit(self):  # noqa: N802 - pynvml's names
        self.initialised += 1

    def nvmlShutdown(self):  # noqa: N802
        self.initialised -= 1

    def nvmlDeviceGetCount(self):  # noqa: N802
        return 1

    def nvmlDeviceGetHandleByIndex(self, index):  # noqa: N802
        return f"handle{index}"

    def nvmlDeviceGetName(self, handle):  # noqa: N802
        return b"Fake GPU 16GB"

    def nvmlDeviceGetMemoryInfo(self, handle):  # noqa: N802
        return _Memory()

    def nvmlDeviceGetUtilizationRates(self, handle):  # noqa: N802
        return _Rates()

    def nvmlDeviceGetComputeRunningProcesses(self, handle):  # noqa: N802
        return [_Process(pid) for pid in psutil.pids()]

    def nvmlDeviceGetPowerUsage(self, handle):  # noqa: N802
        return 150_000  # milliwatts

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):  # noqa: N802
        self.energy_mj += 1500
        return self.energy_mj

    def nvmlDeviceGetClockInfo(self, handle, clock):  # noqa: N802
        assert clock == NVML_CLOCK_SM
        return 1410

    def nvmlDeviceGetTemperature(self, handle, sensor):  # noqa: N802
        return 61

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):  # noqa: N802
        raise NVMLError_NotSupported("Not Supported")
