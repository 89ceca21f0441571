#!/usr/bin/env bash
# Creates kbench's two Python environments inside the checkout, idempotently.
#
#   envs/keras3  Keras 3 with TensorFlow (CPU), JAX (CPU), PyTorch 2.13.0 (CPU)
#   envs/mxnet   MXNet 1.9.1 with keras-mxnet 2.2.4.3 (needs numpy<1.24)
#
# Usage: scripts/setup_envs.sh [keras3] [mxnet] [data] [browser] [compiler]
#        (default: keras3 mxnet data; browser is headless Chromium and compiler a C
#        compiler (gcc), both for the tests)
# A finished environment is marked by a stamp file holding its requirements,
# so a second call returns in well under a second.
#
# Each environment also records its kind, cpu or gpu, in envs/<name>/.kbench-kind
# (environments made before that file existed: read off the stamp). CPU and CUDA
# builds never share a site-packages: pip would keep the CPU torch (it satisfies
# torch==2.13.0) and put tensorflow[and-cuda] beside tensorflow-cpu, mxnet-cu112
# beside mxnet. So when KBENCH_GPU asks for the other kind, the environment is
# deleted and built afresh, and the script says so. Without KBENCH_GPU an existing
# environment keeps its kind (scripts/kbench calls this script before every command),
# and a new one is made for the CPU.
#
# Options (environment variables):
#   KBENCH_PYTHON   interpreter to build the venvs from (default: python3.11, else python3)
#   KBENCH_GPU=1    install CUDA builds (tensorflow[and-cuda], jax[cuda12], torch 2.13.0
#                   from PyPI's default CUDA wheel, mxnet-cu112) instead of the CPU ones
#   KBENCH_MXNET_WHEEL  with KBENCH_GPU=1, MXNet's CUDA wheel for your CUDA (default
#                   mxnet-cu112; mxnet-cu101 to mxnet-cu117 exist for MXNet 1.9.1)
#   KBENCH_ENVS_DIR where the environments live (default: envs/ in the checkout)
#   KBENCH_SETUP_DRY_RUN=1  say what would be done to each environment; change nothing
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
envs="${KBENCH_ENVS_DIR:-$root/envs}"
python_bin="${KBENCH_PYTHON:-$(command -v python3.11 || command -v python3)}"
dry_run="${KBENCH_SETUP_DRY_RUN:-0}"

log() { printf '[setup] %s\n' "$*" >&2; }

keras3_requirements() {  # kind
  if [ "$1" = gpu ]; then
    printf '%s\n' "tensorflow[and-cuda]" "jax[cuda12]" "torch==2.13.0"
  else
    printf '%s\n' "tensorflow-cpu" "jax[cpu]" "torch==2.13.0"
  fi
  printf '%s\n' keras tensorflow-datasets nvidia-ml-py psutil pyyaml \
    pandas pyarrow matplotlib pillow scikit-learn pytest ruff
}

mxnet_requirements() {  # kind
  if [ "$1" = gpu ]; then
    printf '%s\n' "${KBENCH_MXNET_WHEEL:-mxnet-cu112}==1.9.1"
  else
    printf '%s\n' "mxnet==1.9.1"
  fi
  printf '%s\n' "keras-mxnet==2.2.4.3" "numpy<1.24" nvidia-ml-py psutil pillow
}

existing_kind() {  # dir: cpu, gpu, or none (no environment), or unknown
  local dir="$1"
  if [ -f "$dir/.kbench-kind" ]; then
    cat "$dir/.kbench-kind"
  elif [ -f "$dir/.kbench-requirements" ]; then
    # made before .kbench-kind: the stamp names the builds it installed
    if grep -qE '^(tensorflow\[and-cuda\]|jax\[cuda12\]|mxnet-cu[0-9]+==)' "$dir/.kbench-requirements"; then
      echo gpu
    else
      echo cpu
    fi
  elif [ -e "$dir" ]; then
    echo unknown
  else
    echo none
  fi
}

wanted_kind() {  # dir: what KBENCH_GPU asks for, else what the environment is, else cpu
  local have
  case "${KBENCH_GPU:-}" in
    1) echo gpu ;;
    0) echo cpu ;;
    "")
      have="$(existing_kind "$1")"
      if [ "$have" = gpu ]; then echo gpu; else echo cpu; fi ;;
    *) log "KBENCH_GPU=${KBENCH_GPU}: expected 1 (CUDA builds) or 0 (CPU builds)"; exit 2 ;;
  esac
}

env_action() {  # dir, kind, requirements: ready, create, update or rebuild (and why)
  local dir="$1" kind="$2" reqs="$3" have
  have="$(existing_kind "$dir")"
  if [ "$have" = none ]; then
    echo "create"
  elif [ "$have" = unknown ]; then
    echo "rebuild: $dir is not a finished kbench environment (no .kbench-kind or stamp)"
  elif [ "$have" != "$kind" ]; then
    echo "rebuild: $dir holds $have builds and KBENCH_GPU=${KBENCH_GPU:-} asks for $kind builds"
  elif [ -f "$dir/.kbench-requirements" ] && [ "$(cat "$dir/.kbench-requirements")" = "$reqs" ] \
    && [ -x "$dir/bin/python" ]; then
    echo "ready"
  else
    echo "update"
  fi
}

make_env() {  # name
  local name="$1" dir="$envs/$1" kind reqs action
  local stamp="$dir/.kbench-requirements"
  kind="$(wanted_kind "$dir")"
  reqs="$("${name}_requirements" "$kind")"
  action="$(env_action "$dir" "$kind" "$reqs")"
  if [ "$dry_run" = 1 ]; then
    log "$name: $action ($kind builds)"
    return 0
  fi
  case "$action" in
    ready)
      [ -f "$dir/.kbench-kind" ] || echo "$kind" > "$dir/.kbench-kind"
      return 0 ;;  # ready: stay quiet, this runs before every scripts/kbench call
    rebuild*)
      log "$name: ${action#rebuild: }; CPU and CUDA builds must not share one environment, so removing $dir and building it afresh"
      rm -rf "$dir" ;;
  esac
  log "$name: creating $dir ($kind builds; several minutes on first use)"
  rm -f "$stamp"
  [ -x "$dir/bin/python" ] || "$python_bin" -m venv "$dir"
  echo "$kind" > "$dir/.kbench-kind"
  "$dir/bin/python" -m pip install --quiet --upgrade pip
  # shellcheck disable=SC2086
  echo "$reqs" | xargs "$dir/bin/python" -m pip install --quiet
  if [ "$name" = keras3 ]; then
    # The harness runs here: kbench itself, editable, for the `kbench` command.
    # Workers in any environment import kbench through the runner's PYTHONPATH.
    "$dir/bin/python" -m pip install --quiet --no-deps -e "$root"
  fi
  echo "$reqs" > "$stamp"
  log "$name: ready"
}

install_data() {
  local stamp="$envs/.data-checked"
  if [ -d /usr/share/datasets/fashion-mnist ] || [ -f "$stamp" ]; then
    return 0
  fi
  touch "$stamp"  # try apt-get once per checkout, not before every command
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "data: installing Debian's dataset-fashion-mnist"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1; then
      apt-get update -qq >/dev/null 2>&1 || true
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null 2>&1 \
        || log "data: apt-get could not install dataset-fashion-mnist; runs fall back to synthetic data"
    fi
  else
    log "data: not root or no apt-get; Fashion-MNIST comes from the Keras cache or a download"
  fi
}

install_browser() {  # headless Chromium, for the test that renders kbench's HTML report
  if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then
    return 0
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "browser: installing Debian's chromium (for the report rendering test)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 || {
      apt-get update -qq >/dev/null 2>&1 || true
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 \
        || log "browser: apt-get could not install chromium"
    }
  else
    log "browser: not root or no apt-get; install chromium to run the report rendering test"
  fi
}

install_compiler() {  # a C compiler, for the stand-in NVML and CUDA libraries the GPU tests build
  if command -v cc >/dev/null || command -v gcc >/dev/null; then
    return 0
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "compiler: installing Debian's gcc (the GPU tests compile stand-in NVML/CUDA libraries)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev >/dev/null 2>&1 || {
      apt-get update -qq >/dev/null 2>&1 || true
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev >/dev/null 2>&1 \
        || log "compiler: apt-get could not install gcc"
    }
  else
    log "compiler: not root or no apt-get; install a C compiler (cc) to run the GPU tests"
  fi
}

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(keras3 mxnet data)
[ "$dry_run" = 1 ] || mkdir -p "$envs"
for target in "${targets[@]}"; do
  case "$target" in
    keras3 | mxnet) make_env "$target" ;;
    data | browser | compiler) if [ "$dry_run" = 1 ]; then log "$target: not checked in a dry run"
      else "install_$target"; fi ;;
    *) log "unknown target '$target'; expected keras3, mxnet, data, browser or compiler"; exit 2 ;;
  esac
done
