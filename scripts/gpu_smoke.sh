#!/usr/bin/env bash
# GPU smoke check: a few training steps per backend with the sampler on, then, for each
# GPU the worker used (and how that was found), the sampled utilization (NVML: fraction
# of time a kernel ran), memory by kind (the worker's own, the whole device's, with the
# NVML call that gave it), power and energy with the method that gave the joules, and
# the GPU path of --profile (kernel time per phase, the top operator).
# Runs wherever NVML sees a GPU; elsewhere it says so and exits 0.
#
#   scripts/gpu_smoke.sh [BACKENDS] [MODEL]      (default: every runnable backend, small_cnn)
#
# Without the envs/ environments (for example on a machine that has PyTorch and JAX but
# no TensorFlow), point the backends at an interpreter: KBENCH_PYTHON_TORCH=python3 ...
# and set KBENCH_HARNESS_PYTHON to the interpreter that runs kbench itself.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${KBENCH_HARNESS_PYTHON:-$root/envs/keras3/bin/python}"
model="${2:-small_cnn}"
# KBENCH_SMOKE_DEVICE=auto lets the printout be checked against tests/nvml_standin on a
# machine without a GPU; on a GPU machine leave it at gpu.
device="${KBENCH_SMOKE_DEVICE:-gpu}"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"

if ! reason=$("$py" - <<'PY'
import sys
try:
    import pynvml
    pynvml.nvmlInit()
    n = pynvml.nvmlDeviceGetCount()
    names = [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(n)]
    print(", ".join(x.decode() if isinstance(x, bytes) else x for x in names))
    sys.exit(0 if n else 1)
except Exception as err:  # no NVML, no driver, no GPU
    print(f"{type(err).__name__}: {err}")
    sys.exit(1)
PY
); then
  echo "gpu_smoke: no GPU visible to NVML ($reason); nothing to check"
  exit 0
fi
echo "gpu_smoke: GPUs: $reason"

backends="${1:-}"
if [ -z "$backends" ]; then
  backends=$("$py" -c "
from kbench.run.environments import runnable_backends
print(','.join(b for b, missing in runnable_backends().items() if missing is None))")
fi
out="$(mktemp -d)"
status=0
"$py" -m kbench run --backend "$backends" --model "$model" --dataset synthetic \
  --steps 50 --warmup-steps 10 --batch-size 128 --device "$device" --sample-interval 0.1 \
  --profile --profile-steps 5 --store "$out" || status=$?

"$py" - "$out" <<'PY'
import glob, json, sys

def mib(value):
    return "n/a" if value is None else f"{value / 2**20:,.0f} MiB"

def stat(summary, name, key):
    return (summary.get(name) or {}).get(key)

def num(value, fmt=".1f"):
    return "n/a" if value is None else format(value, fmt)

for path in sorted(glob.glob(f"{sys.argv[1]}/*.json")):
    r = json.load(open(path))
    m = r.get("metrics", {})
    sampler = r.get("sampler") or {}
    summary = sampler.get("summary", {})
    measured, run = summary.get("measured", {}), summary.get("run", {})
    memory = {x["kind"]: x for x in m.get("memory", [])}
    peak = (memory.get("framework_peak") or {}).get("bytes")
    print(f"\n{r['config']['backend']}: {r['status']}, {m.get('images_per_sec', 0):,.0f} img/s, "
          f"framework peak {mib(peak)}")
    if r["status"] != "ok":
        print(f"  {r['reason']}")
    gpu = sampler.get("sources", {}).get("gpu", {})
    if not gpu.get("available"):
        print(f"  no GPU series: {gpu.get('reason') or 'sampler off'}")
    used = gpu.get("worker_gpus") or {}
    print(f"  GPUs the worker used: {used.get('indices')} ({used.get('method')}: {used.get('note')})")
    devices = {d.get("index"): d for d in gpu.get("devices", [])}
    energy = m.get("energy") or {}
    for index in used.get("indices") or []:
        p, d = f"gpu{index}_", devices.get(index, {})
        process = run.get(p + "process_memory_bytes") or {}
        joules = (energy.get("devices") or {}).get(f"gpu{index}") or {}
        print(f"  GPU {index} {d.get('name')} ({d.get('pci_bus_id')})"
              + (f" FAILED: {d['failed']}" if d.get("failed") else ""))
        print(f"    kernel time % (measured, NVML): mean {num(stat(measured, p + 'kernel_time_percent', 'mean'))}"
              f" / max {num(stat(measured, p + 'kernel_time_percent', 'max'))}")
        print(f"    memory, peak over the run: worker (NVML per process) {mib(process.get('max'))}"
              + (f" [{process['reason']}]" if process.get("reason") else "")
              + f"; device used {mib(stat(run, p + 'memory_used_bytes', 'max'))}"
              f" [{d.get('memory_used_method')}]")
        print(f"    power (measured): mean {num(stat(measured, p + 'power_w', 'mean'))} W; energy "
              + (f"{joules['joules']:.1f} J ({joules['method']})" if joules
                 else f"n/a ({energy.get('reason') or 'the run gave no energy figure'})"))
    if energy.get("available"):
        print(f"  energy, measured window: {energy['measured_j']:.1f} J ({energy['method']}), "
              f"{num(energy.get('images_per_joule'), '.2f')} img/J")
    if gpu.get("unsupported") or gpu.get("failed"):
        print(f"  unsupported: {gpu.get('unsupported')}; failed: {gpu.get('failed')}")
    profile = m.get("profile") or {}
    if profile.get("status") == "ok":
        top = profile["top_ops"][0]
        phases = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in profile["phases_s"].items())
        print(f"  profile on {profile['device']}: {phases}; top: {top['op']} "
              f"({top['phase']}, {top['share']:.0%})")
    elif profile:
        print(f"  profile: {profile.get('status')}: {profile.get('reason')}")
PY
exit "$status"
