#!/usr/bin/env bash
# The test command: creates what it needs on a fresh machine (environments, data),
# lints, then runs the tests. Extra arguments go to pytest (e.g. -m "not slow").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/setup_envs.sh keras3 mxnet data browser compiler
py=envs/keras3/bin/python
echo "[test] ruff" >&2
"$py" -m ruff check kbench models tests benchmarks examples
"$py" -m ruff format --check kbench models tests benchmarks examples
echo "[test] pytest" >&2
# Every backend must run here: a missing environment fails the tests instead of skipping them.
export KBENCH_REQUIRE_ALL_BACKENDS=1
# The slowest tests are listed at the end, so a slow-down shows where it came from.
exec "$py" -m pytest -q -p no:cacheprovider --durations=20 "$@"
