"""How the suite runs: side by side, each backend on request, and keeping its promises.

- **Side by side** (``pytest -n 2 --dist loadscope``, as ``scripts/test.sh`` runs it):
  each test module is one unit of work (its module-scoped fixtures are built once, on
  one worker), and modules that share a session fixture one unit together. A test
  marked ``serial`` measures time or load, so it runs alone: it takes the cores
  exclusively (a readers-writer lock over ``flock``: every other test holds it
  shared), and the other worker waits.
- **One backend at a time**: ``KBENCH_TEST_BACKENDS=torch,jax`` skips every test that
  needs another backend (:func:`conftest.require_backends`).
- **Counted**: every process that imports a framework (:mod:`framework_processes`); the
  count is printed at the end, and a test the fast set runs (not ``slow``) that starts
  one is an error.
- **Home left alone**: kbench never writes ``~/.keras``, and a test that makes it appear
  fails.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import framework_processes
import pytest

LOCK_DIR_VARIABLE = "KBENCH_TEST_LOCK_DIR"
KERAS_DIR = Path.home() / ".keras"


def is_controller(config) -> bool:
    """The pytest process itself, not one of pytest-xdist's workers."""
    return not hasattr(config, "workerinput")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "serial: measures time or load: runs with no other test beside it"
    )
    if is_controller(config):
        config._kbench_keras_dir_before = KERAS_DIR.exists()
        scratch = Path(tempfile.mkdtemp(prefix="kbench-suite-"))
        config._kbench_scratch = scratch
        config._kbench_pth = framework_processes.install(scratch / "framework-processes.log")
        os.environ[LOCK_DIR_VARIABLE] = str(scratch)  # the xdist workers inherit it
        # Tests that import a framework in pytest's own process (TensorFlow imports Keras,
        # which writes KERAS_HOME/keras.json) get a folder of the suite's; kbench gives
        # each of its own processes one (the guard below holds it to that).
        os.environ.setdefault("KERAS_HOME", str(scratch / "keras_home_of_pytest"))
    with open(Path(os.environ[LOCK_DIR_VARIABLE]) / "pytest-pids", "a") as pids:
        pids.write(f"{os.getpid()}\n")  # pytest's own processes: they run tests, not workers


# Modules whose tests must share one pytest-xdist worker: they read one session fixture.
SHARED_WORKER = {"tests/test_gluon.py": "keras twins", "tests/test_pytorch_twins.py": "keras twins"}


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadscope``, every module one unit of work, and the modules of
    :data:`SHARED_WORKER` one unit together. (pytest-xdist's own ``loadgroup`` cannot be
    used: its marks rename node ids, which pytest 9 no longer lets a plugin do.)"""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return SHARED_WORKER.get(module, module)

    return ModuleScheduling(config, log)


@contextlib.contextmanager
def cores(exclusive: bool) -> Iterator[None]:
    """Shared (an ordinary test) or exclusive (a ``serial`` one) hold on the cores.

    A fair readers-writer lock from two ``flock`` files: whoever wants the lock passes
    the turnstile first, and a writer keeps it until it is done, so that a stream of
    readers cannot starve it. Without pytest-xdist there is nobody to share with.
    """
    folder = os.environ.get(LOCK_DIR_VARIABLE)
    if not folder or not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    with (
        open(Path(folder) / "turnstile", "a") as turnstile,
        open(Path(folder) / "cores", "a") as held,
    ):
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(held, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            if not exclusive:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
            if exclusive:
                fcntl.flock(turnstile, fcntl.LOCK_UN)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    speed = "slow" if item.get_closest_marker("slow") else "fast"
    os.environ[framework_processes.TEST_VARIABLE] = f"{speed}|{item.nodeid}"
    with cores(exclusive=item.get_closest_marker("serial") is not None):
        yield
    os.environ.pop(framework_processes.TEST_VARIABLE, None)


@pytest.fixture(autouse=True)
def _home_keras_left_alone(request):
    yield
    before = getattr(request.config, "_kbench_keras_dir_before", None)
    if before is None:  # an xdist worker: the controller looked before the workers began
        before = os.environ.get("KBENCH_TEST_KERAS_DIR_BEFORE") == "1"
    if not before and KERAS_DIR.exists():
        found = sorted(str(p.relative_to(KERAS_DIR)) for p in KERAS_DIR.rglob("*"))
        shutil.rmtree(KERAS_DIR, ignore_errors=True)  # the next test is judged on its own
        pytest.fail(
            f"{KERAS_DIR} appeared during this test (holding {found}): kbench promises never "
            "to write ~/.keras, and its tests keep the promise. Give the process that "
            "imported Keras its own KERAS_HOME."
        )


def pytest_sessionstart(session):
    config = session.config
    if is_controller(config):
        os.environ["KBENCH_TEST_KERAS_DIR_BEFORE"] = "1" if config._kbench_keras_dir_before else "0"


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if not is_controller(config):
        return
    scratch = config._kbench_scratch
    started = framework_processes.read(scratch / "framework-processes.log")
    pytest_pids = {int(line) for line in (scratch / "pytest-pids").read_text().split()}
    config._kbench_started = started
    config._kbench_fast_offenders = sorted(
        {s.test.partition("|")[2] for s in started
         if s.test.startswith("fast|") and s.pid not in pytest_pids}
    )  # fmt: skip
    if config._kbench_fast_offenders and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not is_controller(config) or not hasattr(config, "_kbench_started"):
        return
    started = config._kbench_started
    counted = framework_processes.count(started)
    detail = ", ".join(f"{name} {n}" for name, n in sorted(counted.items(), key=lambda i: -i[1]))
    terminalreporter.write_line(
        f"framework processes started: {len(started)}" + (f" ({detail})" if detail else "")
    )
    by_test = collections.Counter(s.test.partition("|")[2] or "(outside a test)" for s in started)
    if by_test and config.getoption("durations", None):  # with --durations: where they came from
        terminalreporter.write_line(
            "most framework processes: "
            + ", ".join(f"{test} {n}" for test, n in by_test.most_common(12))
        )
    selected = os.environ.get("KBENCH_TEST_BACKENDS", "").strip()
    if selected and selected != "cross":
        stray = framework_processes.outside(started, [b.strip() for b in selected.split(",")])
        tests = sorted({s.test.partition("|")[2] or "(outside a test)" for s in stray})
        terminalreporter.write_line(
            f"KBENCH_TEST_BACKENDS={selected}: {len(stray)} framework process(es) for other "
            "backends" + (f", started by {', '.join(tests)}" if tests else ""),
            yellow=bool(stray),
        )
    if config._kbench_fast_offenders:
        terminalreporter.write_line(
            "ERROR: tests outside the slow set started framework processes (mark them "
            "@pytest.mark.slow, or keep them off the frameworks): "
            + ", ".join(config._kbench_fast_offenders),
            red=True,
        )


def pytest_unconfigure(config):
    if is_controller(config) and hasattr(config, "_kbench_scratch"):
        framework_processes.remove(config._kbench_pth)
        shutil.rmtree(config._kbench_scratch, ignore_errors=True)
