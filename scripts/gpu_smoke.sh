#!/usr/bin/env bash
# GPU smoke check: a few training steps per backend with the sampler on, then the
# sampled GPU utilization (NVML: fraction of time a kernel ran) and memory of each, and
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
  --steps 50 --warmup-steps 10 --batch-size 128 --device gpu --sample-interval 0.1 \
  --profile --profile-steps 5 --output-dir "$out" || status=$?

"$py" - "$out" <<'PY'
import glob, json, sys
print("\nbackend     status  img/s     kernel time % (measured: mean/max)  "
      "NVML process MiB  device used MiB  framework peak MiB")
for path in sorted(glob.glob(f"{sys.argv[1]}/*.json")):
    r = json.load(open(path))
    m = r.get("metrics", {})
    summary = (r.get("sampler") or {}).get("summary", {}).get("measured", {})
    util = summary.get("gpu0_kernel_time_percent", {})
    memory = {x["kind"]: x["bytes"] for x in m.get("memory", []) if x.get("bytes") is not None}
    mib = lambda kind: f"{memory[kind] / 2**20:,.0f}" if kind in memory else "-"
    print(f"{r['config']['backend']:10s}  {r['status']:6s}  {m.get('images_per_sec', 0):8,.0f}  "
          f"{util.get('mean', float('nan')):6.1f} / {util.get('max', float('nan')):5.1f}"
          f"{'':20s}{mib('process_nvml'):>16s}  {mib('device_used'):>15s}  "
          f"{mib('framework_peak'):>18s}")
    if r["status"] != "ok":
        print(f"            {r['reason']}")
    profile = m.get("profile") or {}
    if profile.get("status") == "ok":
        top = profile["top_ops"][0]
        phases = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in profile["phases_s"].items())
        print(f"            profile on {profile['device']}: {phases}; top: {top['op']} "
              f"({top['phase']}, {top['share']:.0%})")
    elif profile:
        print(f"            profile: {profile.get('status')}: {profile.get('reason')}")
PY
exit "$status"
