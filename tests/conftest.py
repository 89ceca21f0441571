"""Shared test helpers: run the real CLI, in a subprocess or in this process, with a
throwaway HOME."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

from kbench.results.result import RunResult
from kbench.results.store import REPORT_NAMES
from kbench.run import environments

# pytest's rewritten test modules kept in tests/__pycache__ even where
# PYTHONDONTWRITEBYTECODE is set (as here and on CI): a pytest process's collection took
# 5.4 s of CPU rewriting them, 2.0 s reading them back (each pytest-xdist worker collects
# every module). Only this process: the variable still holds for what it starts.
sys.dont_write_bytecode = False

ROOT = Path(__file__).resolve().parent.parent
# No one-second look at the machine before each CLI run (test_quality checks it itself).
os.environ.setdefault("KBENCH_SKIP_PREFLIGHT", "1")
# side by side, backend selection, framework processes counted, ~/.keras left alone
pytest_plugins = ["suite_plugin"]


def selected_backends() -> Optional[List[str]]:
    """``KBENCH_TEST_BACKENDS=torch,jax``: only tests that need no other backend run;
    ``cross``: only tests that need two backends or more (and those that need none)."""
    chosen = os.environ.get("KBENCH_TEST_BACKENDS", "").strip()
    return [name.strip() for name in chosen.split(",") if name.strip()] if chosen else None


def require_backends(*backends: str) -> None:
    """Skip when KBENCH_TEST_BACKENDS leaves a backend out; skip (or fail, under
    scripts/test.sh) when a backend's environment is missing."""
    selected = selected_backends()
    if selected == ["cross"] and len(set(backends)) < 2:
        pytest.skip(f"needs {backends[0]} alone; KBENCH_TEST_BACKENDS=cross runs the others")
    left_out = [b for b in backends if selected not in (None, ["cross"]) and b not in selected]
    if left_out:
        chosen = ",".join(selected or [])
        pytest.skip(f"needs {', '.join(left_out)}, not in KBENCH_TEST_BACKENDS={chosen}")
    for backend in backends:
        try:
            environments.interpreter_for(backend)
        except environments.EnvironmentMissing as err:
            if os.environ.get("KBENCH_REQUIRE_ALL_BACKENDS") == "1":
                pytest.fail(str(err))
            pytest.skip(str(err))


def fused_rnn_refused(model: str, backend: str) -> bool:
    """Whether ``backend`` refuses ``model`` as unsupported in this suite's environment:
    Gluon's fused LSTM where MXNET_MKLDNN_ENABLED=0 (the suite's workers inherit it) turns
    off the only CPU path MXNet 1.9's RNN operator has (kbench.backends.mxnet_gluon)."""
    from kbench.backends.mxnet_gluon import FUSED_RNN_MODELS

    off = os.environ.get("MXNET_MKLDNN_ENABLED") == "0"
    return off and backend == "mxnet-gluon" and model in FUSED_RNN_MODELS


def keep_out_unused(backend: str) -> str:
    """Source lines that start a test's own Keras 3 helper process (``python -c``) as
    kbench starts a worker: what Keras imports for features the helper never uses
    (``kbench.backends.keras3.OPTIONAL_IMPORTS``), and TensorFlow, which
    ``keras.utils.set_random_seed`` imports to seed it, are kept out unless ``backend``
    is theirs, for the whole of the helper process (a worker keeps them out only
    while Keras loads and seeds). A Keras-on-torch helper took 13-14 s of CPU with them, 5.3-5.5 s
    without."""
    from kbench.backends.keras3 import OPTIONAL_IMPORTS

    unused = [m for m in (*OPTIONAL_IMPORTS, "tensorflow") if m != backend]
    return f"import sys\nfor _m in {unused!r}:\n    sys.modules.setdefault(_m, None)\n"


@dataclass
class Completed:
    returncode: int
    stdout: str
    stderr: str
    output_dir: Path

    def results(self) -> List[RunResult]:
        paths = sorted(p for p in self.output_dir.glob("*.json") if p.name not in REPORT_NAMES)
        return sorted((RunResult.load(p) for p in paths), key=lambda r: (r.started_at, r.run_id))


def _command_line(args: List[str], home: Path, output_dir: Optional[Path]):
    """The arguments (with ``--store`` where a run command would write under the
    working directory), where the results go, and the HOME-bound variables."""
    if "--store" in args:
        output_dir = Path(args[args.index("--store") + 1])
    output_dir = output_dir or home / "results"
    if args and args[0] in ("run", "demo", "max-batch") and "--store" not in args:
        args = [*args, "--store", str(output_dir)]
    return args, output_dir, {"HOME": str(home), "KBENCH_CACHE_DIR": str(home / "cache")}


def run_kbench(
    args: List[str],
    home: Path,
    output_dir: Optional[Path] = None,
    env: Optional[Dict[str, str]] = None,
    timeout: float = 900,
) -> Completed:
    """``python -m kbench ARGS`` with HOME pointed at ``home`` (so ~/.keras is ``home/.keras``)."""
    args, output_dir, home_env = _command_line(args, home, output_dir)
    full_env = dict(os.environ, **home_env)
    full_env.update(env or {})
    done = subprocess.run(
        [sys.executable, "-m", "kbench", *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Completed(done.returncode, done.stdout, done.stderr, output_dir)


@contextlib.contextmanager
def cli_state_kept() -> Iterator[None]:
    """What ``kbench.cli.main`` changes in its process, put back after: the "kbench"
    logger (its handler, bound to the stderr of the moment, its level, no propagation)
    and the SIGTERM handler (None: one set outside Python, which stays)."""
    logger = logging.getLogger("kbench")
    handlers, level, propagate = logger.handlers[:], logger.level, logger.propagate
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate
        if sigterm is not None:
            signal.signal(signal.SIGTERM, sigterm)


class CallTookTooLong(Exception):
    """A :func:`kbench_here` call past its timeout (not an OSError, which kbench's file
    code may catch)."""


@contextlib.contextmanager
def _interrupted_after(seconds: float, what: str) -> Iterator[None]:
    def too_long(signum, frame):
        raise CallTookTooLong(f"{what}: still running after {seconds} s")

    before = signal.signal(signal.SIGALRM, too_long)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before if before is not None else signal.SIG_DFL)


def kbench_here(
    args: List[str],
    home: Path,
    output_dir: Optional[Path] = None,
    env: Optional[Dict[str, str]] = None,
    timeout: float = 300,
) -> Completed:
    """``kbench ARGS`` called in this process (``kbench.cli.main``) as :func:`run_kbench`
    calls it in a new one: the same exit status, output and store, without an
    interpreter's start and kbench's import (0.6-1 s of CPU each). For commands that read
    or write a store, not for what a process of its own is the point of (a worker, a
    signal, the interpreter's exit). The environment, the working directory and what
    :func:`cli_state_kept` keeps are put back after it; a call that takes more than
    ``timeout`` seconds is interrupted (SIGALRM) and fails the test."""
    from kbench import cli

    args, output_dir, home_env = _command_line(args, home, output_dir)
    environ, cwd = dict(os.environ), os.getcwd()
    out, err = io.StringIO(), io.StringIO()
    os.environ.update(home_env, **(env or {}))
    os.chdir(ROOT)
    try:
        with (
            cli_state_kept(),
            _interrupted_after(timeout, f"kbench {' '.join(args)}"),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            try:
                code = cli.main(args)
            except SystemExit as stop:  # as the interpreter ends on sys.exit(code)
                code = stop.code
                if isinstance(code, str):
                    print(code, file=sys.stderr)
                    code = 1
    finally:
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(cwd)
    return Completed(code or 0, out.getvalue(), err.getvalue(), output_dir)


def spinning_loops() -> List[subprocess.Popen]:
    """A busy loop on every core the suite may use, each pinned to its core: the whole
    machine loaded whichever core the test itself runs on, so a run beside them is busy
    by any count (a loop left on the test's own core would share it with the run, and
    count as busy only with another test on the other core). Kill them when done."""
    from suite_plugin import suite_cores  # (imported here: pytest loads it as a plugin)

    loops = []
    for core in suite_cores():
        loop = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(loop.pid, {core})
        loops.append(loop)
    return loops


@pytest.fixture(autouse=True)
def _kbench_logger_put_back():
    """Every test leaves what :func:`cli_state_kept` keeps as it found it: a test that
    called ``kbench.cli.main`` in this process through a helper of its own left kbench's
    handler writing to that test's captured stderr, closed once it ended, so kbench's
    records in the tests after it on the same worker each printed "--- Logging error ---"
    with a traceback (seen in review)."""
    with cli_state_kept():
        yield


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


def dump(completed: Completed) -> str:
    """Everything needed to see why a CLI call went wrong, for assertion messages."""
    parts = [f"exit {completed.returncode}", completed.stdout[-3000:], completed.stderr[-3000:]]
    for result in completed.results():
        if not result.ok:
            parts.append(json.dumps(result.error, indent=1)[-3000:])
    return "\n".join(parts)


@pytest.fixture(scope="session")
def keras_twin_files(tmp_path_factory) -> Dict[str, Path]:
    """The Keras side of test_pytorch_twins (every model in each data format, one
    process), run once per session: test_gluon replays its channels_first results, and
    test_models reads the ResNet-50 census it makes in channels_last.

    {data format: pickle path}; each module loads what it needs and lets it go.
    """
    import test_pytorch_twins

    return test_pytorch_twins.run_keras(tmp_path_factory.mktemp("keras_twins"))


@pytest.fixture(scope="session")
def shared_sweep(tmp_path_factory):
    """The runs test_accuracy, test_switches, test_gpu_options, test_stream,
    test_zoo_training, test_profile, test_backends and test_measurement read: one
    ``kbench sweep --warm``, one worker per backend (tests/shared_sweep.py)."""
    import shared_sweep as shared

    return shared.run_shared_sweep(tmp_path_factory.mktemp("shared_sweep"))
