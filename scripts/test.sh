#!/usr/bin/env bash
# The test command: creates what it needs on a fresh machine (environments, data),
# lints, then runs the tests. Extra arguments go to pytest (e.g. -m "not slow").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# KBENCH_TEST_BACKENDS=torch,jax (default: every backend) runs only the tests those
# backends need, and sets up only their environments (keras3 always: it runs the harness).
envs="keras3 mxnet"
case ",${KBENCH_TEST_BACKENDS:-mxnet}," in
  *,mxnet,*|*,mxnet-gluon,*|*,cross,*) ;;
  *) envs="keras3" ;;
esac
scripts/setup_envs.sh $envs data browser compiler slurm
py=envs/keras3/bin/python
echo "[test] ruff" >&2
"$py" -m ruff check kbench models tests benchmarks examples
"$py" -m ruff format --check kbench models tests benchmarks examples
echo "[test] pytest" >&2
# Bytecode for kbench, its models and the tests, written once: where PYTHONDONTWRITEBYTECODE
# is set (as on CI), every process (the CLI, each worker, pytest's own) would otherwise
# compile kbench's modules from source at each start (the CLI's import: 0.95 s, 0.63 s
# from bytecode); Python still reads bytecode that exists.
"$py" -m compileall -q kbench models tests > /dev/null \
  || echo "[test] bytecode not (all) written: those modules compile from source at each start" >&2
# Every backend must run here: a missing environment fails the tests instead of skipping them.
export KBENCH_REQUIRE_ALL_BACKENDS=1
# Side by side on the cores (pytest-xdist; at most 4 workers, KBENCH_TEST_WORKERS to
# choose, 0 for one process): each test module stays on one worker, and a test marked
# serial (it measures time or load) runs with nothing beside it (tests/suite_plugin.py).
workers="${KBENCH_TEST_WORKERS:-$("$py" -c 'import os; print(min(os.cpu_count() or 1, 4))')}"
# The slowest tests are listed at the end, so a slow-down shows where it came from; so
# is the number of processes that imported a framework.
exec "$py" -m pytest -q -p no:cacheprovider --durations=20 -n "$workers" --dist loadscope "$@"
