#!/usr/bin/env bash
# Creates kbench's two Python environments inside the checkout, idempotently.
#
#   envs/keras3  Keras 3 with TensorFlow (CPU), JAX (CPU), PyTorch 2.13.0 (CPU)
#   envs/mxnet   MXNet 1.9.1 with keras-mxnet 2.2.4.3 (needs numpy<1.24)
#
# Usage: scripts/setup_envs.sh [keras3] [mxnet] [data] [browser]
#        (default: keras3 mxnet data; browser is headless Chromium, for the tests)
# A finished environment is marked by a stamp file holding its requirements,
# so a second call returns in well under a second.
#
# Options (environment variables):
#   KBENCH_PYTHON   interpreter to build the venvs from (default: python3.11, else python3)
#   KBENCH_GPU=1    install CUDA builds (tensorflow[and-cuda], jax[cuda12], default
#                   torch wheel, mxnet-cu112) instead of the CPU ones
#   KBENCH_MXNET_WHEEL  with KBENCH_GPU=1, MXNet's CUDA wheel for your CUDA (default
#                   mxnet-cu112; mxnet-cu101 to mxnet-cu117 exist for MXNet 1.9.1)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
envs="$root/envs"
python_bin="${KBENCH_PYTHON:-$(command -v python3.11 || command -v python3)}"
gpu="${KBENCH_GPU:-0}"

log() { printf '[setup] %s\n' "$*" >&2; }

keras3_requirements() {
  if [ "$gpu" = 1 ]; then
    printf '%s\n' "tensorflow[and-cuda]" "jax[cuda12]" "torch"
  else
    printf '%s\n' "tensorflow-cpu" "jax[cpu]" "torch==2.13.0"
  fi
  printf '%s\n' keras tensorflow-datasets nvidia-ml-py psutil pyyaml \
    pandas pyarrow matplotlib pillow scikit-learn pytest ruff
}

mxnet_requirements() {
  if [ "$gpu" = 1 ]; then
    printf '%s\n' "${KBENCH_MXNET_WHEEL:-mxnet-cu112}==1.9.1"
  else
    printf '%s\n' "mxnet==1.9.1"
  fi
  printf '%s\n' "keras-mxnet==2.2.4.3" "numpy<1.24" nvidia-ml-py psutil pillow
}

make_env() {  # name, requirements (one per line)
  local name="$1" reqs="$2" dir="$envs/$1"
  local stamp="$dir/.kbench-requirements"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$reqs" ] && [ -x "$dir/bin/python" ]; then
    return 0  # ready: stay quiet, this runs before every scripts/kbench call
  fi
  log "$name: creating $dir (several minutes on first use)"
  rm -f "$stamp"
  [ -x "$dir/bin/python" ] || "$python_bin" -m venv "$dir"
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

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(keras3 mxnet data)
mkdir -p "$envs"
for target in "${targets[@]}"; do
  case "$target" in
    keras3) make_env keras3 "$(keras3_requirements)" ;;
    mxnet) make_env mxnet "$(mxnet_requirements)" ;;
    data) install_data ;;
    browser) install_browser ;;
    *) log "unknown target '$target'; expected keras3, mxnet, data or browser"; exit 2 ;;
  esac
done
