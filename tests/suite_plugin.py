"""How the suite runs: side by side, each backend on request, and keeping its promises.

- **Side by side** (``pytest -n 2 --dist loadscope``, as ``scripts/test.sh`` runs it):
  each test module is one unit of work (its module-scoped fixtures are built once, on
  one worker), and modules that share a session fixture one unit together; those that
  took longest in the last measured run (``tests/durations.json``) go first, so that no
  long one is left for the end with a core idle beside it, and the tests marked
  ``serial`` go last, as one unit (the rest of their modules run beside others: when
  whole modules went last, 80 s of ordinary tests ran there on one core, the other idle).
- **Each worker on its own cores**: a pytest-xdist worker is pinned to its share of
  the cores, and everything it starts inherits that affinity; kbench sizes a run's
  threads to the cores it may use, so two trainings side by side never run more
  threads than there are cores (which made them spin against each other, 6x slower).
  A test marked ``serial`` measures time or load, so it runs alone, on every core: it
  takes the cores exclusively (a readers-writer lock over ``flock``: every other test
  holds it shared), and the other worker waits.
- **One backend at a time**: ``KBENCH_TEST_BACKENDS=torch,jax`` skips every test that
  needs another backend (:func:`conftest.require_backends`).
- **Counted**: every process that imports a framework (:mod:`framework_processes`); the
  count is printed at the end, and a test the fast set runs (not ``slow``) that starts
  one is an error.
- **Compiled once, and quickly**: JAX's persistent compilation cache is one folder for
  the session (:func:`jax_compilation_cache`), and XLA skips LLVM's optimizations and
  uses its older CPU fusion emitters (:func:`xla_quick_compiles`).
- **Home left alone**: kbench never writes ``~/.keras``, and a test that makes it appear
  fails.
"""

from __future__ import annotations

import ast
import collections
import contextlib
import fcntl
import functools
import gc
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, FrozenSet, Iterator, List, Tuple

import framework_processes
import psutil
import pytest

LOCK_DIR_VARIABLE = "KBENCH_TEST_LOCK_DIR"
CORES_VARIABLE = "KBENCH_TEST_CORES"
KERAS_DIR = Path.home() / ".keras"


def is_controller(config) -> bool:
    """The pytest process itself, not one of pytest-xdist's workers."""
    return not hasattr(config, "workerinput")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "serial: measures time or load: runs with no other test beside it"
    )
    config.addinivalue_line(
        "markers",
        "own_processes(why): the processes this test starts are what it checks (a "
        "data-parallel rank, the user's script, a kill, a setting read as a framework "
        "starts), so they cannot share a worker: counted apart at the end of the run. A "
        "fixture's processes count for the first test that asks for it: mark every test "
        "that uses it alike",
    )
    if is_controller(config):
        config._kbench_keras_dir_before = KERAS_DIR.exists()
        scratch = Path(tempfile.mkdtemp(prefix="kbench-suite-"))
        config._kbench_scratch = scratch
        config._kbench_pth = framework_processes.install(scratch / "framework-processes.log")
        os.environ[LOCK_DIR_VARIABLE] = str(scratch)  # the xdist workers inherit it
        if hasattr(os, "sched_getaffinity"):  # every core the suite may use, for its workers
            os.environ[CORES_VARIABLE] = ",".join(map(str, sorted(os.sched_getaffinity(0))))
        # Tests that import a framework in pytest's own process (TensorFlow imports Keras,
        # which writes KERAS_HOME/keras.json) get a folder of the suite's; kbench gives
        # each of its own processes one (the guard below holds it to that).
        os.environ.setdefault("KERAS_HOME", str(scratch / "keras_home_of_pytest"))
        for name, value in {**jax_compilation_cache(scratch), **xla_quick_compiles()}.items():
            os.environ.setdefault(name, value)
        if not config._kbench_keras_dir_before:
            watch_home_keras(scratch / KERAS_WITNESS)
    else:
        pin_worker(config)
    with open(Path(os.environ[LOCK_DIR_VARIABLE]) / "pytest-pids", "a") as pids:
        pids.write(f"{os.getpid()}\n")  # pytest's own processes: they run tests, not workers


def jax_compilation_cache(scratch: Path) -> Dict[str, str]:
    """JAX's persistent compilation cache, one for the session: on a CPU, Keras 3 on JAX
    compiles every weight initializer per shape (ResNet-20: 33 compiles, 12 s of its
    build), and some 30 JAX processes of the suite build the same models; with the
    cache, the second build of ResNet-20 took 0.7 s, and parity's JAX worker 27 s instead
    of 114. Every JAX process kbench starts inherits it, and records it (results'
    ``process_env``); a test that times a compile removes it (test_distributed)."""
    return {
        "JAX_COMPILATION_CACHE_DIR": str(scratch / "jax-compilation-cache"),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }


# XLA's LLVM back end without its optimization passes, and XLA's older CPU fusion
# emitters (the suite's JAX processes only). XLA stops a process at a flag it does not
# know ("Unknown flags in XLA_FLAGS"): should a newer jaxlib drop one, drop it here.
QUICK_XLA_FLAGS = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"


def xla_quick_compiles() -> Dict[str, str]:
    """XLA_FLAGS for the suite's processes: XLA's own passes as always, LLVM's skipped,
    and each fusion emitted by XLA's older CPU fusion emitters instead of the MLIR ones
    it uses by default (a different code generator for the same fused computation).

    A JAX process of the suite spends most of its CPU compiling (each weight draw, the
    training and prediction steps of a few tiny batches); XLA's defaults are there for
    the speed of steps the suite barely runs. benchmarks/xla_compile.py (fresh
    processes, 2 steps and a prediction), CPU seconds with XLA's defaults, without
    LLVM's passes, and with the older emitters too: ResNet-20 32.2, 12.3 and 8.4 s; a
    small CNN 10.4, 4.8 and 3.8 s; ResNet-50 (64x64) 44.1, 29.4 and 23.6 s. The
    computation is the same: with and without the older emitters, the predictions of
    ResNet-50, ResNet-56, the LSTM and the small CNN were identical and their first
    training losses within 3.2e-6 (relative); ResNet-50's outputs agreed within 1.5e-8
    with and without LLVM's passes. Convolutions and matrix products are library calls
    either way. Every result records it (``process_env``: XLA_FLAGS); a test that times
    JAX's compile removes it (test_distributed), and so runs JAX as users do."""
    return {"XLA_FLAGS": QUICK_XLA_FLAGS}


def suite_cores() -> List[int]:
    """Every core the suite may use (a worker itself runs on its share of them)."""
    if os.environ.get(CORES_VARIABLE):
        return [int(core) for core in os.environ[CORES_VARIABLE].split(",")]
    return sorted(os.sched_getaffinity(0))


def pin_worker(config) -> None:
    """Pin this pytest-xdist worker to its share of the cores (worker i of n: every n-th
    core from the i-th), remembering every core for the ``serial`` tests."""
    if not hasattr(os, "sched_setaffinity"):
        return
    cores = suite_cores()
    index = int(config.workerinput["workerid"].lstrip("gw"))
    count = int(config.workerinput["workercount"])
    share = cores[index::count] or [cores[index % len(cores)]]
    config._kbench_cores = (cores, share)
    os.sched_setaffinity(0, share)


@contextlib.contextmanager
def affinity(config, every_core: bool) -> Iterator[None]:
    """A serial test (it holds the cores exclusively) runs on every core, then the
    worker goes back to its share."""
    cores, share = getattr(config, "_kbench_cores", (None, None))
    if not every_core or cores is None:
        yield
        return
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, share)


# Modules whose tests must share one pytest-xdist worker: they read one session fixture.
SHARED_WORKER = {
    "tests/test_gluon.py": "keras twins",
    "tests/test_pytorch_twins.py": "keras twins",
    "tests/test_models.py": "keras twins",
    **{
        f"tests/test_{name}.py": "shared sweep"
        for name in (
            "accuracy",
            "switches",
            "gpu_options",
            "stream",
            "zoo_training",
            "profile",
            "backends",
            "measurement",
            "hub",
        )  # fmt: skip
    },
}


DURATIONS = Path(__file__).with_name("durations.json")
RECORD_VARIABLE = "KBENCH_TEST_RECORD_DURATIONS"


SERIAL_UNIT = "serial tests"


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: the one unit of every test marked serial, else
    its module or its module's SHARED_WORKER group."""
    module, _, name = nodeid.partition("::")
    if name.partition("[")[0] in serial_tests(module):
        return SERIAL_UNIT
    return SHARED_WORKER.get(module, module)


@functools.cache
def serial_tests(module: str) -> FrozenSet[str]:
    """The tests of a module that are marked ``serial`` (``@pytest.mark.serial`` over
    their ``def``), as their ids name them after the module (``test_x``, or
    ``TestClass::test_x`` for a method), read from its source: the scheduler runs in
    pytest's own process, which has the test ids but not their marks. Only those tests
    go last: the rest of their module is an ordinary unit, run beside others (so a
    module-scoped fixture that serial and ordinary tests share is built twice)."""
    path = Path(__file__).parent.parent / module
    source = path.read_text() if path.is_file() else ""
    if "pytest.mark.serial" not in source:
        return frozenset()

    def serial(node: ast.AST) -> bool:
        return isinstance(node, ast.FunctionDef) and any(
            ast.unparse(mark).startswith("pytest.mark.serial") for mark in node.decorator_list
        )

    found = set()
    for node in ast.parse(source).body:
        if serial(node):
            found.add(node.name)
        elif isinstance(node, ast.ClassDef):
            found |= {f"{node.name}::{n.name}" for n in node.body if serial(n)}
    return frozenset(found)


def expected_seconds() -> Dict[str, float]:
    """{unit: seconds it took in the run that wrote tests/durations.json}."""
    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadscope``, every module one unit of work, the modules of
    :data:`SHARED_WORKER` one unit together, the longest units first (as measured in
    tests/durations.json; a unit not in it first, since its time is unknown), so that no
    long one is left for the end; and the tests marked ``serial`` one unit, last:
    a serial test (every core, nothing beside it) waits for the other worker's current
    test to end, which at the end of the run is a short one (first, it waited minutes
    on the parity check with a core idle).
    pytest-xdist's own ``loadgroup`` cannot be used: its marks rename node ids, which
    pytest 9 no longer lets a plugin do; and its ``loadscope`` orders units by their
    number of tests, which put a one-test module of five minutes last."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

        def _assign_work_unit(self, node) -> None:
            # The queue is whole when the first unit is assigned: order it then (the
            # nodes' collections stay as collected: a node reads indices into its own)
            if not getattr(self, "_kbench_ordered", False):
                seconds = expected_seconds()

                def order(unit: str) -> Tuple[bool, float]:
                    return unit == SERIAL_UNIT, -seconds.get(unit, float("inf"))

                units = sorted(self.workqueue.items(), key=lambda item: order(item[0]))
                self.workqueue.clear()
                self.workqueue.update(units)
                self._kbench_ordered = True
            super()._assign_work_unit(node)

    return ModuleScheduling(config, log)


def own_processes_reason(item) -> Tuple[str, str]:
    """(why, what is wrong with the mark): ``why`` is "" for a test not marked
    ``own_processes``, or marked wrongly (then the second says how)."""
    mark = item.get_closest_marker("own_processes")
    if mark is None:
        return "", ""
    why = mark.args[0] if len(mark.args) == 1 and not mark.kwargs else None
    if not isinstance(why, str) or not why.strip() or framework_processes.SEPARATOR in why:
        return "", (
            "own_processes takes one reason, a non-empty string without "
            f"'{framework_processes.SEPARATOR}', as in "
            '@pytest.mark.own_processes("a data-parallel rank"); received args '
            f"{mark.args!r}, kwargs {mark.kwargs!r}"
        )
    return why, ""


def pytest_runtest_setup(item):
    """A test marked serial that :func:`serial_tests` cannot see in its source (a mark on
    a class or a module) was scheduled as an ordinary test, beside others: it fails; and
    so does a test whose own_processes mark gives no usable reason."""
    wrong = own_processes_reason(item)[1]
    if wrong:
        pytest.fail(wrong, pytrace=False)
    if item.get_closest_marker("serial") and unit_of(item.nodeid) != SERIAL_UNIT:
        pytest.fail(
            "marked serial, but not with @pytest.mark.serial over its def, so it was "
            "scheduled beside other tests: mark the test function itself "
            "(tests/suite_plugin.py schedules by that mark)",
            pytrace=False,
        )


def pytest_runtest_logreport(report):
    """The controller adds up each unit's time (setup, call and teardown of its tests)."""
    took = _unit_seconds.setdefault(unit_of(report.nodeid), 0.0)
    _unit_seconds[unit_of(report.nodeid)] = took + (report.duration or 0.0)


_unit_seconds: Dict[str, float] = {}


def record_durations() -> None:
    """With KBENCH_TEST_RECORD_DURATIONS=1, a whole run (every unit ran) writes
    tests/durations.json for the next runs' order."""
    if os.environ.get(RECORD_VARIABLE) == "1" and _unit_seconds:
        ordered = dict(sorted(_unit_seconds.items(), key=lambda item: -item[1]))
        DURATIONS.write_text(
            json.dumps({k: round(v, 1) for k, v in ordered.items()}, indent=1) + "\n"
        )


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
    why = own_processes_reason(item)[0]
    os.environ[framework_processes.TEST_VARIABLE] = framework_processes.label(
        speed, why, item.nodeid
    )
    serial = item.get_closest_marker("serial") is not None
    with cores(exclusive=serial), affinity(item.config, every_core=serial):
        yield
    os.environ.pop(framework_processes.TEST_VARIABLE, None)


KERAS_WITNESS = "keras-dir-appeared.txt"


def watch_home_keras(witness: Path, every_s: float = 0.25) -> None:
    """Look for ``~/.keras`` four times a second; when it appears, write down (in
    ``witness``) the processes then alive that could have written it: those whose Keras
    home is ``~/.keras`` (Python, no ``KERAS_HOME``, ``HOME`` this one). The guard below can
    only say which test was running in its own pytest worker; the writer may have been
    started by the other worker's test, or be a daemon."""
    home = str(Path.home())

    def suspects() -> List[str]:
        found = []
        for process in psutil.process_iter(["pid", "ppid", "cmdline"]):
            if process.info["pid"] == os.getpid():  # pytest (KERAS_HOME set after it started)
                continue
            try:
                env = process.environ()
            except (psutil.Error, OSError):
                continue
            command = " ".join(process.info["cmdline"] or [])[:300]
            if "KERAS_HOME" in env or env.get("HOME", home) != home or "python" not in command:
                continue
            found.append(
                f"pid {process.info['pid']} (parent {process.info['ppid']}), "
                f"test {env.get(framework_processes.TEST_VARIABLE, '?')!r}: {command}"
            )
        return found

    def watch() -> None:
        while True:  # (the guard removes it, so that the next test is judged on its own)
            while not KERAS_DIR.exists():
                time.sleep(every_s)
            seen = time.strftime("%H:%M:%S")
            text = (f"{KERAS_DIR} seen at {seen}; processes then alive with it as their "
                    "Keras home:\n" + "\n".join(suspects() or ["(none)"]) + "\n")  # fmt: skip
            try:  # whole or not at all: the guard may read it at any moment
                witness.with_suffix(".part").write_text(text)
                witness.with_suffix(".part").replace(witness)
            except OSError:  # the session's folder is gone: it has ended
                return
            while KERAS_DIR.exists():
                time.sleep(every_s)

    threading.Thread(target=watch, name="home-keras-watch", daemon=True).start()


def take_witness(folder: Path, wait_s: float = 1.5) -> str:
    """What :func:`watch_home_keras` wrote of this sighting, waiting for it a moment (it
    looks four times a second, then reads every process); taken, so that a later
    failure shows its own."""
    witness = folder / KERAS_WITNESS
    deadline = time.monotonic() + wait_s
    while not witness.is_file() and time.monotonic() < deadline:
        time.sleep(0.05)
    taken = witness.with_name(f"{KERAS_WITNESS}.{os.getpid()}.{time.monotonic_ns()}")
    try:
        witness.rename(taken)  # (the other pytest worker may have taken it first)
        return taken.read_text()
    except OSError:
        return ""


@pytest.fixture(autouse=True)
def _home_keras_left_alone(request):
    yield
    before = getattr(request.config, "_kbench_keras_dir_before", None)
    if before is None:  # an xdist worker: the controller looked before the workers began
        before = os.environ.get("KBENCH_TEST_KERAS_DIR_BEFORE") == "1"
    if not before and KERAS_DIR.exists():
        found = sorted(str(p.relative_to(KERAS_DIR)) for p in KERAS_DIR.rglob("*"))
        seen = take_witness(Path(os.environ.get(LOCK_DIR_VARIABLE, "/nonexistent")))
        shutil.rmtree(KERAS_DIR, ignore_errors=True)  # the next test is judged on its own
        pytest.fail(
            f"{KERAS_DIR} appeared during this test or one beside it (holding {found}): kbench "
            "promises never to write ~/.keras, and its tests keep the promise. Give the "
            f"process that imported Keras its own KERAS_HOME.\n{seen}"
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
    config._kbench_pytest_pids = pytest_pids
    record_durations()
    keep = os.environ.get("KBENCH_TEST_KEEP_PROCESS_LOG")  # a path: where to copy the log
    if keep:
        shutil.copyfile(scratch / "framework-processes.log", keep)
    config._kbench_fast_offenders = sorted(
        {s.nodeid for s in started if s.speed == "fast" and s.pid not in pytest_pids}
    )  # fmt: skip
    if config._kbench_fast_offenders and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not is_controller(config) or not hasattr(config, "_kbench_started"):
        return
    started = config._kbench_started
    for line in framework_processes.summary(started, config._kbench_pytest_pids):
        terminalreporter.write_line(line)
    by_test = collections.Counter(s.nodeid or "(outside a test)" for s in started)
    if by_test and config.getoption("durations", None):  # with --durations: where they came from
        terminalreporter.write_line(
            "most framework processes: "
            + ", ".join(f"{test} {n}" for test, n in by_test.most_common(12))
        )
    selected = os.environ.get("KBENCH_TEST_BACKENDS", "").strip()
    if selected and selected != "cross":
        stray = framework_processes.outside(started, [b.strip() for b in selected.split(",")])
        tests = sorted({s.nodeid or "(outside a test)" for s in stray})
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
    if not is_controller(config):
        # A pytest-xdist worker has reported everything by now: its interpreter's exit
        # need not collect the garbage of a session that imported torch, matplotlib and
        # every test module (about 1 s of its exit, which the controller waits for; the
        # memory goes back with the process). Finalizers registered with atexit still run.
        gc.freeze()
