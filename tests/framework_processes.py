"""Counts the processes the suite starts that import a framework, whatever starts them.

A one-line ``.pth`` file in each backend environment's site-packages (written when the
session starts, removed when it ends) installs, only while ``KBENCH_TEST_PROCESS_LOG``
names a file, an import hook that appends one line to that file the first time a
process imports keras, tensorflow, jax, torch or mxnet: ``pid<TAB>framework<TAB>test<TAB>argv``
(``keras/BACKEND`` when KERAS_BACKEND is set),
where ``test`` is ``KBENCH_TEST_ID`` as the suite set it for the test that was running
(:func:`label`: its speed, why its processes are its subject where it is marked
``own_processes``, its node id), inherited by whatever it started.
Counting at the import catches every entry point (run and ops workers, probes,
data-parallel workers, ``kbench exec`` children, the tests' own helper processes).
The summary at the end of the run (:func:`summary`) prints the count, what started
them, and how many the tests of a process itself started (a data-parallel rank, the
user's script, a kill, a setting read as a framework starts) apart from those that
only compute.
"""

from __future__ import annotations

import collections
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Dict, List

import psutil

from kbench.run import environments

VARIABLE = "KBENCH_TEST_PROCESS_LOG"
TEST_VARIABLE = "KBENCH_TEST_ID"
PTH_PATTERN = "kbench_test_process_log_*.pth"
FRAMEWORKS = ("keras", "tensorflow", "jax", "torch", "mxnet")

# What the .pth line runs: an import hook that writes one line, then stays out of the way.
# It records a framework's import as the module starts executing, not its lookup: a
# process that only asks whether a framework is installed (etils, under
# tensorflow-datasets, calls importlib.util.find_spec("tensorflow")) imports nothing.
_HOOK_SOURCE = f"""
class _KbenchCountFrameworkImport:
    seen = False

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if cls.seen or name not in {FRAMEWORKS!r}:
            return None
        try:
            return cls.recording_spec(name, path, target)
        except Exception:  # never in the way of the process: the finders after this one
            return None

    @classmethod
    def recording_spec(cls, name, path, target):
        # the spec the finders after this one give, as they give it, its loader
        # recording this process when it executes the module (an import)
        after = sys.meta_path[sys.meta_path.index(cls) + 1 :] if cls in sys.meta_path else []
        for finder in after:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        execute = getattr(spec.loader, "exec_module", None)
        if execute is None:
            return spec

        def record_then_execute(module):
            if not cls.seen:
                cls.seen = True
                try:
                    cls.record(name)
                except Exception:  # never in the way of the process
                    pass
            return execute(module)

        spec.loader.exec_module = record_then_execute  # this spec's loader only
        return spec

    @staticmethod
    def record(name):
        test = os.environ.get({TEST_VARIABLE!r}, "")
        if name == "keras" and os.environ.get("KERAS_BACKEND"):
            name = "keras/" + os.environ["KERAS_BACKEND"]
        argv = " ".join(sys.argv)[:300].replace("\\t", " ").replace("\\n", " ")
        line = "%d\\t%s\\t%s\\t%s\\n" % (os.getpid(), name, test, argv)
        fd = os.open(os.environ[{VARIABLE!r}], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, line.encode())
        os.close(fd)


# (a venv's lib64 is a link to lib: site may read this .pth twice)
if not any(getattr(f, "__name__", "") == "_KbenchCountFrameworkImport" for f in sys.meta_path):
    sys.meta_path.insert(0, _KbenchCountFrameworkImport)
"""
# site.py executes a .pth line that starts with "import"; the whole hook is that one line,
# run in a namespace of its own (site's locals would hide its names from one another).
PTH_LINE = (
    f"import os, sys; exec({_HOOK_SOURCE!r}, {{'os': os, 'sys': sys}}) "
    f"if os.environ.get({VARIABLE!r}) else None\n"
)


def site_packages() -> List[Path]:
    """Every backend environment's site-packages folder that exists here."""
    found = []
    for name in ("keras3", "mxnet"):
        found += sorted((environments.envs_dir() / name).glob("lib/python*/site-packages"))
    return found


def install(log_path: Path) -> List[Path]:
    """Write this session's .pth (named after its pid, so that sessions side by side
    never remove each other's), removing those of sessions that are gone."""
    os.environ[VARIABLE] = str(log_path)
    written = []
    for folder in site_packages():
        for old in folder.glob(PTH_PATTERN):
            pid = old.stem.rpartition("_")[2]
            if pid.isdigit() and not psutil.pid_exists(int(pid)):
                old.unlink(missing_ok=True)
        path = folder / PTH_PATTERN.replace("*", str(os.getpid()))
        path.write_text(PTH_LINE)
        written.append(path)
    return written


def remove(written: List[Path]) -> None:
    for path in written:
        path.unlink(missing_ok=True)


SEPARATOR = "|"  # between a label's fields; a reason may not hold it (a node id may)


def label(speed: str, why: str, nodeid: str) -> str:
    """KBENCH_TEST_ID of a test: ``speed|why|node id`` (``why`` empty where the test's
    processes only compute)."""
    if SEPARATOR in why:
        raise ValueError(f"own_processes: the reason may not hold '{SEPARATOR}' (received {why!r})")
    return SEPARATOR.join((speed, why, nodeid))


@dataclass(frozen=True)
class Started:
    pid: int
    framework: str
    test: str  # KBENCH_TEST_ID (:func:`label`), or "" outside a test
    argv: str

    @property
    def speed(self) -> str:
        """``slow`` or ``fast`` (the test's mark); "" outside a test."""
        return self.test.split(SEPARATOR, 2)[0]

    @property
    def why(self) -> str:
        """Why this process is what its test checks (its ``own_processes`` mark); "" for
        a process that only computes."""
        fields = self.test.split(SEPARATOR, 2)
        return fields[1] if len(fields) == 3 else ""

    @property
    def nodeid(self) -> str:
        return self.test.split(SEPARATOR, 2)[-1] if self.test else ""


def read(log_path: Path) -> List[Started]:
    """One entry per process, in the order they first imported a framework."""
    found: Dict[int, Started] = {}
    if not log_path.exists():
        return []
    for line in log_path.read_text(errors="replace").splitlines():
        fields = line.split("\t", 3)
        if len(fields) == 4 and fields[0].isdigit() and int(fields[0]) not in found:
            found[int(fields[0])] = Started(int(fields[0]), *fields[1:])
    return list(found.values())


# what a process that imported FRAMEWORK (keras/BACKEND for Keras) may be running
FRAMEWORK_BACKENDS = {
    "tensorflow": {"tensorflow"},
    "keras/tensorflow": {"tensorflow"},
    "jax": {"jax"},
    "keras/jax": {"jax"},
    "torch": {"torch", "torch-native"},
    "keras/torch": {"torch"},
    "mxnet": {"mxnet", "mxnet-gluon"},
    "keras/mxnet": {"mxnet"},
}


def outside(started: List[Started], backends: List[str]) -> List[Started]:
    """The processes whose framework serves none of ``backends`` (keras with no
    KERAS_BACKEND: Keras 3's default, tensorflow)."""
    chosen = set(backends)
    return [s for s in started if not FRAMEWORK_BACKENDS.get(s.framework, {"tensorflow"}) & chosen]


def count(started: List[Started]) -> Dict[str, int]:
    """{what started it: processes}."""
    return dict(collections.Counter(entry_point(s.argv) for s in started))


def summary(started: List[Started], pytest_pids: Collection[int] = ()) -> List[str]:
    """The lines the run ends with: how many processes imported a framework and what they
    ran; then which could have shared a worker (started by tests of what runs compute)
    and which not (by tests of a process itself, by reason), apart from pytest's own
    workers (``pytest_pids``: a test importing a framework into pytest's process) and
    processes started outside any test."""
    detail = ", ".join(f"{name} {n}" for name, n in _most_first(count(started)))
    lines = [f"framework processes started: {len(started)}" + (f" ({detail})" if detail else "")]
    if not started:
        return lines
    in_pytest = [s for s in started if s.pid in pytest_pids]
    outside = [s for s in started if s.pid not in pytest_pids and not s.test]
    in_tests = [s for s in started if s.pid not in pytest_pids and s.test]
    own = collections.Counter(s.why for s in in_tests if s.why)
    reasons = "; ".join(f"{why} {n}" for why, n in _most_first(own))
    parts = [
        f"{len(in_tests) - sum(own.values())} to compute (tests that could share a worker)",
        f"{sum(own.values())} in tests of a process itself (marked own_processes"
        + (f": {reasons})" if reasons else ")"),
    ]
    if in_pytest:
        parts.append(f"{len(in_pytest)} in pytest's own workers (a test importing a framework)")
    if outside:
        parts.append(f"{len(outside)} outside any test")
    lines.append("  " + "; ".join(parts))
    return lines


def _most_first(counted: Dict[str, int]) -> List[tuple]:
    return sorted(counted.items(), key=lambda item: (-item[1], item[0]))


def entry_point(argv: str) -> str:
    """``run/worker.py`` for ``-m kbench.run.worker run.json`` (what ``sys.argv[0]`` holds)."""
    first = argv.split(" ", 1)[0]
    if first in ("-c", ""):
        return "python -c"
    return "/".join(Path(first).parts[-2:])
