#!/usr/bin/env bash
# GPU smoke check, the first thing to run on a real GPU: everything it finds in one run.
#
#   scripts/gpu_smoke.sh [BACKENDS] [MODEL]      (default: every runnable backend, small_cnn)
#
# Stages (KBENCH_SMOKE_STAGES, default "check smoke memory parity windows"):
#   check    the framework builds: what CUDA and cuDNN each was built for and loads
#            (python -m kbench.setup --check where envs/ exist, else the probe on each
#            KBENCH_PYTHON_<BACKEND> interpreter)
#   smoke    a few training steps per backend with the sampler on, then, for each GPU the
#            worker used (and how that was found), the sampled utilization (NVML: fraction
#            of time a kernel ran), memory by kind (the worker's own, the whole device's,
#            with the NVML call that gave it), power and energy with the method that gave
#            the joules, and the GPU path of --profile (kernel time per phase, top operator)
#   memory   each backend under its default, --gpu-memory-growth and --gpu-memory-fraction
#            0.25: the framework's peak, the worker's NVML memory, the device's, its total
#   parity   kbench parity on the GPU (the first Keras backend the reference)
#   windows  warm interleaved windows between the backends (--ratio-budget
#            KBENCH_SMOKE_WINDOWS_BUDGET, default 40 seconds)
#   tune     kbench tune on the GPU: each backend's settings searched (TensorFloat-32,
#            bfloat16, XLA, torch.compile ...) within KBENCH_SMOKE_TUNE_BUDGET (default
#            3m), the backends then compared at their best (not in the default stages)
# Runs wherever NVML sees a GPU; elsewhere it says so and exits 0. Exits 1 if a stage
# failed, after running the others. The stores go to KBENCH_SMOKE_OUT (default: a new
# temporary folder), one folder per stage.
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
stages="${KBENCH_SMOKE_STAGES:-check smoke memory parity windows}"
out="${KBENCH_SMOKE_OUT:-$(mktemp -d)}"  # each stage's results store, a folder under it
failed=""
report="$root/scripts/gpu_smoke_report.py"
stage() { echo; echo "== gpu_smoke: $1"; }
# The first Keras backend of the list: parity's reference.
reference=$(tr ',' '\n' <<<"$backends" | grep -vE '^(torch-native|mxnet-gluon)$' | head -1 || true)

for name in $stages; do
  case "$name" in
  check)
    stage "check: the framework builds, their CUDA and cuDNN"
    if [ -d "$root/envs" ]; then
      "$py" -m kbench.setup --check || failed="$failed check"
    else
      # Each interpreter the backends name, once: what its frameworks were built for.
      probed=" "
      for b in ${backends//,/ }; do
        var="KBENCH_PYTHON_$(tr 'a-z-' 'A-Z_' <<<"$b")"
        interp="${!var:-}"
        [ -n "$interp" ] && [[ "$probed" != *" $interp "* ]] || continue
        probed+="$interp "
        echo "-- $interp (${var})"
        "$interp" "$root/kbench/setup/probe.py" --pretty || failed="$failed check($interp)"
      done
      [ "$probed" != " " ] || echo "no envs/ and no KBENCH_PYTHON_<BACKEND>: nothing to probe"
    fi
    ;;
  smoke)
    stage "smoke: $model on $backends, sampler and profile"
    "$py" -m kbench run --backend "$backends" --model "$model" --dataset synthetic \
      --steps 50 --warmup-steps 10 --batch-size 128 --device "$device" --sample-interval 0.1 \
      --profile --profile-steps 5 --store "$out/smoke" || failed="$failed smoke"
    "$py" "$report" smoke "$out/smoke"
    ;;
  memory)
    stage "memory: default, --gpu-memory-growth, --gpu-memory-fraction 0.25"
    for option in "" "--gpu-memory-growth" "--gpu-memory-fraction 0.25"; do
      # shellcheck disable=SC2086  # the option is one or two words
      "$py" -m kbench -q run --backend "$backends" --model "$model" --dataset synthetic \
        --steps 30 --warmup-steps 5 --batch-size 128 --device "$device" --repeats 1 \
        --sample-interval 0.05 $option --store "$out/memory" || failed="$failed memory($option)"
    done
    "$py" "$report" memory "$out/memory"
    ;;
  parity)
    stage "parity on the GPU: $model, reference $reference"
    if [ -n "$reference" ]; then
      "$py" -m kbench parity --model "$model" --backend "$backends" --store "$out/parity" \
        || failed="$failed parity"
    else
      echo "no Keras backend among $backends: parity needs one as the reference"
    fi
    ;;
  windows)
    budget="${KBENCH_SMOKE_WINDOWS_BUDGET:-40}"
    stage "windows: $backends, warm interleaved, $budget s budget"
    if [ "$(tr ',' '\n' <<<"$backends" | wc -l)" -ge 2 ]; then
      "$py" -m kbench run --backend "$backends" --model "$model" --dataset synthetic \
        --batch-size 128 --device "$device" --ratio-budget "$budget" --store "$out/windows" \
        || failed="$failed windows"
    else
      echo "one backend: nothing to interleave"
    fi
    ;;
  tune)
    budget="${KBENCH_SMOKE_TUNE_BUDGET:-3m}"
    stage "tune: $model on $backends, budget $budget"
    "$py" -m kbench tune --backend "$backends" --model "$model" --batch-size 128 \
      --device "$device" --budget "$budget" --store "$out/tune" || failed="$failed tune"
    ;;
  *)
    echo "gpu_smoke: unknown stage '$name' in KBENCH_SMOKE_STAGES (expected some of:" \
      "check smoke memory parity windows tune)" >&2
    exit 2
    ;;
  esac
done

echo
if [ -n "$failed" ]; then
  echo "gpu_smoke: failed:$failed"
  exit 1
fi
echo "gpu_smoke: every stage passed ($stages)"
