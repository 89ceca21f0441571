"""GPU options that can only go wrong on a GPU machine, checked here without one.

Where this machine lacks what a path needs (a CUDA device), the missing piece is
replaced as low as it goes (the CUDA calls inside ``torch.cuda``), and the rest runs
for real: PyTorch's own argument checks, the backend class, the run config.
"""

from __future__ import annotations

import pytest
import shared_sweep

from kbench.results.config import RunConfig

# ---------------------------------------------------------------- case 6: torch fraction


def test_an_integer_memory_fraction_becomes_a_float():
    config = RunConfig(backend="torch", model="mlp", dataset="synthetic", gpu_memory_fraction=1)
    assert config.gpu_memory_fraction == 1.0
    assert type(config.gpu_memory_fraction) is float
    again = RunConfig.from_dict(config.to_dict())
    assert type(again.gpu_memory_fraction) is float


@pytest.fixture
def four_gpus(monkeypatch):
    """torch.cuda as on a 4-GPU machine where this process was given cuda:2, down to the
    CUDA calls: PyTorch's own set_per_process_memory_fraction (its float check) runs.
    Its allocator, as on some drivers, leaves the device it capped current."""
    import torch

    state = {"current": 2, "capped": []}

    def set_fraction(fraction, index):
        state["capped"].append((fraction, index))
        state["current"] = index

    monkeypatch.setattr(torch.cuda.memory, "_lazy_init", lambda: None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: state["current"])
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: state.update(current=i))
    monkeypatch.setattr(torch._C, "_cuda_setMemoryFraction", set_fraction, raising=False)
    return state


@pytest.mark.parametrize("fraction", [1, 0.5])
@pytest.mark.parametrize("backend", ["torch", "torch-native"])
def test_torch_fraction_caps_only_the_process_gpu_and_keeps_it_current(
    four_gpus, backend, fraction
):
    from kbench.backends import load_backend

    applied = load_backend(backend)(threads=1).configure_memory(fraction, False)
    assert four_gpus["capped"] == [(float(fraction), 2)]  # one GPU, a float: no TypeError
    assert four_gpus["current"] == 2
    assert applied == {"cuda:2": f"set_per_process_memory_fraction({fraction:g}, 2)"}


# ------------------------------------------------- case 8: torch-native float16 loss scaling


def native_backend(mixed_precision: str):
    """The torch-native backend as the worker sets it up, less its thread settings (which
    PyTorch takes once per process)."""
    from kbench.backends import load_backend

    backend = load_backend("torch-native")(threads=1, switches={"mixed_precision": mixed_precision})
    backend.load_framework("channels_first")
    backend.apply_switches()
    backend.seed(0)
    model = backend.build("mlp", (1, 28, 28), 10)
    backend.compile(model, "adam", 1e-3, "sparse_categorical_crossentropy")
    return backend, model


def test_torch_native_float16_steps_go_through_a_grad_scaler():
    import numpy as np

    backend, model = native_backend("float16")
    rng = np.random.default_rng(0)
    x = rng.random((8, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, 8)
    losses = [backend.train_step(model, x, y) for _ in range(8)]
    # Where the scaled float16 gradients overflow (the first steps, at GradScaler's
    # initial scale of 65536), the scaler skips the update (the next loss on the same
    # batch is the same) and halves the scale; every other step updates the weights and
    # counts toward growing the scale again.
    skipped = sum(a == b for a, b in zip(losses, losses[1:]))
    assert 0 < skipped < 7
    assert backend.scaler.get_scale() == 65536.0 / 2**skipped
    assert backend.scaler._growth_tracker.item() == 8 - skipped
    assert losses[-1] < losses[0]
    assert backend.loss_scaling.startswith("torch.amp.GradScaler('cpu')")


@pytest.mark.parametrize("mode", ["off", "bfloat16"])
def test_torch_native_scales_only_float16(mode):
    backend, _ = native_backend(mode)
    assert backend.scaler is None
    assert backend.loss_scaling is None


@pytest.mark.slow
def test_results_record_the_loss_scaling_of_float16_runs(request):
    """Both sides of the comparison scale the loss, and the result says how: the shared
    sweep's "loss scaling" group (tests/shared_sweep.py), float16 runs in warm workers."""
    group = shared_sweep.group(request, "loss scaling", "torch", "torch-native")
    results = group.results()
    assert all(r.ok for r in results) and len(results) == 2, [r.reason for r in results]
    assert all(r.config["mixed_precision"] == "float16" for r in results)
    scaling = {r.config["backend"]: r.environment["framework"]["loss_scaling"] for r in results}
    assert scaling["torch"].startswith("keras.optimizers.LossScaleOptimizer")
    assert scaling["torch-native"].startswith("torch.amp.GradScaler('cpu')")
    # the warm worker's next run is float32 again: nothing scaled
    later = [r for r in group.completed.results() if (r.sweep or {}).get("group") == "stream"]
    assert {r.config["backend"]: r.environment["framework"]["loss_scaling"] for r in later
            if r.config["backend"] in scaling} == {"torch": None, "torch-native": None}  # fmt: skip


# ------------------------------------------------------- case 10: out-of-memory signs on GPUs


@pytest.mark.slow  # imports TensorFlow (seconds)
def test_gpu_out_of_memory_errors_are_recognised():
    """The errors TensorFlow and cuDNN raise when GPU memory runs out, as the frameworks'
    own exception classes carry them."""
    import tensorflow as tf

    from kbench.backends.base import is_out_of_memory

    copy = tf.errors.InternalError(None, None, "Dst tensor is not initialized.")
    assert is_out_of_memory(copy)
    cudnn = RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED")
    try:  # as Keras re-raises it inside its train step
        try:
            raise cudnn
        except RuntimeError as err:
            raise ValueError("Exception encountered when calling Conv2D.call()") from err
    except ValueError as wrapped:
        assert is_out_of_memory(wrapped)
    assert not is_out_of_memory(RuntimeError("cuDNN error: CUDNN_STATUS_BAD_PARAM"))


# ------------------------------------------- case 9: CPU and GPU environments never mix

# Stands in for the Python that builds the environments (no network, no CUDA wheels
# here): `-m venv DIR` makes DIR with this script as its python; `-m pip install` puts
# one file per requirement in the environment's site-packages.
FAKE_PYTHON = r"""#!/usr/bin/env bash
if [ "$1 $2" = "-m venv" ]; then
  mkdir -p "$3/bin" "$3/site-packages" && cp "$0" "$3/bin/python"; exit 0
fi
if [ "$1 $2 $3" = "-m pip install" ]; then
  site="$(dirname "$(dirname "$0")")/site-packages"
  for req in "${@:4}"; do
    case "$req" in -*|/*) ;; *) touch "$site/$req" ;; esac
  done
  exit 0
fi
exit 1
"""


def setup_envs(tmp_path, *targets, **env):
    import os
    import subprocess
    from pathlib import Path

    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    full = {k: v for k, v in os.environ.items() if not k.startswith("KBENCH_")}
    full.update(KBENCH_PYTHON=str(python), KBENCH_ENVS_DIR=str(tmp_path / "envs"), **env)
    full.setdefault("KBENCH_SETUP_CHECK", "0")  # a stand-in Python cannot run the CUDA check
    script = Path(__file__).resolve().parent.parent / "scripts" / "setup_envs.sh"
    done = subprocess.run(
        ["bash", str(script), *targets], env=full, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


def installed(tmp_path, name):
    site = tmp_path / "envs" / name / "site-packages"
    return {p.name for p in site.iterdir()}


def test_a_gpu_setup_over_a_cpu_environment_rebuilds_it(tmp_path):
    setup_envs(tmp_path, "keras3", "mxnet")
    assert {"tensorflow-cpu", "torch==2.13.0"} <= installed(tmp_path, "keras3")
    assert "mxnet==1.9.1" in installed(tmp_path, "mxnet")

    said = setup_envs(tmp_path, "keras3", "mxnet", KBENCH_GPU="1")
    assert "holds cpu builds and KBENCH_GPU=1 asks for gpu builds" in said
    assert "removing" in said and "building it afresh" in said
    keras3, mxnet = installed(tmp_path, "keras3"), installed(tmp_path, "mxnet")
    assert {"tensorflow[and-cuda]==2.20.0", "jax[cuda12]==0.10.2", "torch==2.10.0"} <= keras3
    assert not {"tensorflow-cpu", "jax[cpu]"} & keras3
    assert "mxnet-cu112==1.9.1" in mxnet and "mxnet==1.9.1" not in mxnet
    assert (tmp_path / "envs" / "keras3" / ".kbench-kind").read_text().strip() == "gpu"

    # scripts/kbench calls the script without KBENCH_GPU: the GPU environment stays
    assert setup_envs(tmp_path, "keras3", "mxnet") == ""
    assert "tensorflow[and-cuda]==2.20.0" in installed(tmp_path, "keras3")
    # and back to the CPU builds only when asked
    said = setup_envs(tmp_path, "keras3", KBENCH_GPU="0")
    assert "holds gpu builds and KBENCH_GPU=0 asks for cpu builds" in said
    assert "tensorflow[and-cuda]==2.20.0" not in installed(tmp_path, "keras3")


def test_setup_dry_run_says_what_it_would_do_and_changes_nothing(tmp_path):
    setup_envs(tmp_path, "keras3")
    before = installed(tmp_path, "keras3")
    said = setup_envs(tmp_path, "keras3", "mxnet", KBENCH_GPU="1", KBENCH_SETUP_DRY_RUN="1")
    assert "keras3: rebuild: " in said and "mxnet: create (gpu builds)" in said
    assert installed(tmp_path, "keras3") == before
    assert not (tmp_path / "envs" / "mxnet").exists()
    said = setup_envs(tmp_path, "keras3", KBENCH_SETUP_DRY_RUN="1")
    assert "keras3: ready (cpu builds)" in said


# ----------------------------------- case 7: TensorFlow's memory cap from the right card

# Stands in for the CUDA driver (libcuda.so.1: no GPU, no driver here) with the calls
# kbench makes. KBENCH_CUDA_STANDIN lists the machine's GPUs in CUDA's order as
# "name|pci bus id|total bytes;..."; like the real driver it shows the process only
# those CUDA_VISIBLE_DEVICES names (by index), renumbered from 0.
CUDA_STANDIN_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define MAX 16
static char names[MAX][128], buses[MAX][32];
static unsigned long long totals[MAX];
static int count = -1;
int cuInit(unsigned int flags) {
    char all[MAX][3][128]; int n = 0;
    const char *spec = getenv("KBENCH_CUDA_STANDIN");
    if (!spec) return 100; /* CUDA_ERROR_NO_DEVICE */
    char *copy = strdup(spec), *save = NULL;
    for (char *dev = strtok_r(copy, ";", &save); dev && n < MAX; dev = strtok_r(NULL, ";", &save)) {
        char *f = NULL, *field = strtok_r(dev, "|", &f);
        for (int k = 0; k < 3 && field; k++, field = strtok_r(NULL, "|", &f))
            snprintf(all[n][k], 128, "%s", field);
        n++;
    }
    count = 0;
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    for (int i = 0; i < n; i++) {
        int take = i;
        if (visible) {
            int pos = 0; const char *p = visible; take = -1;
            while (*p) { if (pos == count) { take = atoi(p); break; }
                         p = strchr(p, ','); if (!p) break; p++; pos++; }
            if (take < 0 || take >= n) break;
        }
        snprintf(names[count], 128, "%s", all[take][0]);
        snprintf(buses[count], 32, "%s", all[take][1]);
        totals[count++] = strtoull(all[take][2], NULL, 10);
    }
    return 0;
}
int cuDeviceGetCount(int *n) { if (count < 0) return 3; *n = count; return 0; }
int cuDeviceGet(int *dev, int ordinal) {
    if (count < 0) return 3; /* CUDA_ERROR_NOT_INITIALIZED */
    if (ordinal < 0 || ordinal >= count) return 101; /* CUDA_ERROR_INVALID_DEVICE */
    *dev = ordinal; return 0;
}
int cuDeviceGetName(char *out, int len, int dev) { snprintf(out, len, "%s", names[dev]); return 0; }
int cuDeviceGetPCIBusId(char *out, int len, int dev) {
    snprintf(out, len, "%s", buses[dev]); return 0;
}
int cuDeviceTotalMem_v2(size_t *bytes, int dev) { *bytes = totals[dev]; return 0; }
"""

GIB = 2**30
# NVML's (PCI) order: an 80 GiB card first, a 16 GiB one second
MACHINE = (("A100 80GB", "00000000:01:00.0", 80 * GIB), ("T4", "00000000:02:00.0", 16 * GIB))


def build_cuda_standin(folder):
    import subprocess

    from nvml_standin import compiler

    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "cuda_standin.c"
    source.write_text(CUDA_STANDIN_C)
    command = [compiler(), "-shared", "-fPIC", "-o", str(folder / "libcuda.so.1"), str(source)]
    subprocess.run(command, check=True, capture_output=True)
    return folder


def total_bytes_in_a_worker(tmp_path, cuda: bool, nvml: bool, **env):
    """``cuda_device(0).total_bytes``, as the TensorFlow backend asks it, in a process
    whose loader finds the stand-in CUDA driver and/or NVML library."""
    import json
    import os
    import subprocess
    import sys

    from nvml_standin import StandinDevice, build_standin, write_config

    folders = []
    if cuda:
        folders.append(str(build_cuda_standin(tmp_path / "cuda")))
    devices = [StandinDevice(name=n, bus_id=b, memory_total=t) for n, b, t in MACHINE]
    config = write_config(tmp_path / "nvml.conf", devices)
    if nvml:
        folders.append(str(build_standin(tmp_path / "nvml")))
    full = dict(
        os.environ,
        LD_LIBRARY_PATH=":".join(folders),
        KBENCH_NVML_STANDIN=str(config),
        KBENCH_CUDA_STANDIN=";".join(f"{n}|{b[4:]}|{t}" for n, b, t in MACHINE),
        **env,
    )
    code = (
        "import json\nfrom kbench.backends import base\n"
        "try:\n    print(json.dumps(base.cuda_device(0).total_bytes))\n"
        "except Exception as err:\n    print(json.dumps(f'{type(err).__name__}: {err}'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_tensorflow_cap_comes_from_the_card_cuda_visible_devices_names(tmp_path):
    # the process sees only the T4: TensorFlow's GPU:0 is the 16 GiB card, NVML's 0 is not
    got = total_bytes_in_a_worker(tmp_path, cuda=True, nvml=True, CUDA_VISIBLE_DEVICES="1")
    assert got == 16 * GIB
    got = total_bytes_in_a_worker(tmp_path, cuda=True, nvml=True, CUDA_VISIBLE_DEVICES="0")
    assert got == 80 * GIB


def test_tensorflow_cap_needs_no_nvml(tmp_path):
    """A container without NVIDIA's utility capability has no libnvidia-ml.so.1."""
    got = total_bytes_in_a_worker(tmp_path, cuda=True, nvml=False, CUDA_VISIBLE_DEVICES="1")
    assert got == 16 * GIB


def test_tensorflow_cap_without_a_cuda_driver_says_why():
    from kbench.backends.base import GpuMemoryUnknown, cuda_device

    with pytest.raises(
        GpuMemoryUnknown, match="libcuda.so.1 could not be loaded.*--gpu-memory-growth"
    ):
        cuda_device(0)


def test_torch_fraction_puts_the_process_gpu_back_if_the_call_moved_it(four_gpus, monkeypatch):
    import torch

    from kbench.backends import load_backend

    def set_fraction_and_move(fraction, index):  # a driver that leaves cuda:0 current
        four_gpus["capped"].append((fraction, index))
        four_gpus["current"] = 0

    monkeypatch.setattr(torch._C, "_cuda_setMemoryFraction", set_fraction_and_move, raising=False)
    applied = load_backend("torch-native")(threads=1).configure_memory(0.5, False)
    assert four_gpus["capped"] == [(0.5, 2)] and four_gpus["current"] == 2
    assert applied["current_device"] == (
        "restored cuda:2 (setting the fraction had made cuda:0 current)"
    )
