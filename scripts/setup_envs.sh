#!/usr/bin/env bash
# Creates kbench's Python environments (envs/keras3, envs/mxnet) and the system packages
# its tests use, idempotently: a thin wrapper around `python3 -m kbench.setup`, which
# does the same on Linux, macOS and Windows (scripts\setup_envs.cmd).
#
# Usage: scripts/setup_envs.sh [keras3] [mxnet] [data] [browser] [compiler] [slurm]
#        (default: keras3 mxnet data)
# Settings: KBENCH_PYTHON, KBENCH_GPU, KBENCH_MXNET_WHEEL, KBENCH_ENVS_DIR,
# KBENCH_SETUP_DRY_RUN; `scripts/setup_envs.sh --help` says what each does.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Any Python 3.9+ runs the set-up (standard library only); KBENCH_PYTHON builds the venvs.
python="$(command -v python3.11 || command -v python3 || command -v python)" || {
  echo "[setup] no python3 on the PATH: install Python 3.9 or newer (3.11 is tested)" >&2
  exit 2
}
PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" exec "$python" -m kbench.setup "$@"
