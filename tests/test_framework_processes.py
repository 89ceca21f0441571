"""The count the suite ends with (tests/framework_processes.py): each process labelled
with the test that started it, and the tests of a process itself (marked
``own_processes``) counted apart from those whose processes only compute."""

import os
import re
import subprocess
import sys

import framework_processes
import pytest
from framework_processes import Started, label, summary
from suite_plugin import own_processes_reason


def label_seen_by_a_child() -> Started:
    """The label as a process this test starts inherits it, read back as the counter
    reads the log."""
    code = f"import os; print(os.environ[{framework_processes.TEST_VARIABLE!r}])"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return Started(1, "torch", done.stdout.rstrip("\n"), "-c")


@pytest.mark.own_processes("a reason given by the mark")
def test_a_marked_test_labels_what_it_starts_with_its_reason(request):
    seen = label_seen_by_a_child()
    assert (seen.speed, seen.why, seen.nodeid) == (
        "fast",
        "a reason given by the mark",
        request.node.nodeid,
    )


def test_an_unmarked_test_labels_what_it_starts_as_computing(request):
    seen = label_seen_by_a_child()
    assert (seen.speed, seen.why, seen.nodeid) == ("fast", "", request.node.nodeid)
    assert framework_processes.TEST_VARIABLE in os.environ


def logged_by_a_child(tmp_path, code: str) -> list:
    """What the counter logs for a process that runs ``code`` with the counter's .pth line
    run first, as site runs it, into a log of its own (not the suite's), and a stand-in
    ``mxnet`` package first on its path: no framework is imported."""
    package = tmp_path / "path" / "mxnet"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("STAND_IN = True\n")
    log = tmp_path / "framework-processes.log"
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "path"))
    env[framework_processes.VARIABLE] = str(log)
    subprocess.run([sys.executable, "-c", framework_processes.PTH_LINE + code], env=env,
                   capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    return framework_processes.read(log) if log.exists() else []


def test_a_process_that_imports_a_framework_is_counted_one_that_looks_it_up_is_not(tmp_path):
    """Asking whether a framework is installed (as etils, under tensorflow-datasets, asks
    for TensorFlow) imports nothing; importing it, however often looked up before, is
    logged once, as its module starts to execute."""
    looked_up = "import importlib.util; assert importlib.util.find_spec('mxnet')"
    assert logged_by_a_child(tmp_path / "lookup", looked_up) == []
    imported = (
        f"{looked_up}; import mxnet, importlib; importlib.reload(mxnet); assert mxnet.STAND_IN"
    )
    (started,) = logged_by_a_child(tmp_path / "import", imported)
    assert started.framework == "mxnet" and started.pid > 0
    assert started.nodeid == os.environ[framework_processes.TEST_VARIABLE].split("|")[-1]


def test_a_reason_holding_the_separator_is_refused():
    with pytest.raises(ValueError, match=re.escape("may not hold '|' (received 'a|b')")):
        label("slow", "a|b", "tests/test_x.py::test_y")


class Marked:
    """What own_processes_reason reads of a test item: its closest mark, a real one."""

    def __init__(self, mark):
        self.mark = mark

    def get_closest_marker(self, name):
        return self.mark if self.mark is not None and self.mark.name == name else None


@pytest.mark.parametrize(
    "mark, expected",
    [
        (None, ("", "")),
        (pytest.mark.own_processes("a kill").mark, ("a kill", "")),
        (pytest.mark.own_processes().mark, ("", "received args ()")),
        (pytest.mark.own_processes(why="a kill").mark, ("", "kwargs {'why': 'a kill'}")),
        (pytest.mark.own_processes(" ").mark, ("", "a non-empty string without '|'")),
        (pytest.mark.own_processes("a|b").mark, ("", "received args ('a|b',)")),
    ],
)
def test_a_mark_without_one_usable_reason_is_said_wrong(mark, expected):
    why, wrong = own_processes_reason(Marked(mark))
    assert why == expected[0]
    assert (expected[1] in wrong) if expected[1] else wrong == ""


def test_labels_read_back_whole():
    bar = Started(1, "jax", label("slow", "a kill", "tests/t.py::test_y[a|b]"), "-c")
    assert (bar.speed, bar.why, bar.nodeid) == ("slow", "a kill", "tests/t.py::test_y[a|b]")
    plain = Started(2, "jax", label("fast", "", "tests/t.py::test_z[c|d]"), "-c")
    assert (plain.speed, plain.why, plain.nodeid) == ("fast", "", "tests/t.py::test_z[c|d]")
    outside = Started(3, "jax", "", "-c")
    assert (outside.speed, outside.why, outside.nodeid) == ("", "", "")


def test_the_summary_counts_the_tests_of_a_process_itself_apart():
    def started(pid, why, argv):
        return Started(pid, "torch", label("slow", why, f"tests/test_x.py::test_{pid}"), argv)

    processes = [
        started(1, "", "/x/kbench/run/worker.py run.json"),
        started(2, "", "/x/kbench/run/worker.py run.json"),
        started(3, "a kill", "/x/kbench/run/worker.py run.json"),
        started(4, "a data-parallel rank", "/x/kbench/distributed/worker.py run.json"),
        started(5, "a data-parallel rank", "/x/kbench/distributed/worker.py run.json"),
        started(6, "", "-c"),  # pytest's own worker, a test importing torch into it
        Started(7, "jax", "", "-c"),  # outside any test
    ]
    assert summary(processes, pytest_pids={6}) == [
        "framework processes started: 7 (run/worker.py 3, distributed/worker.py 2, python -c 2)",
        "  2 to compute (tests that could share a worker); 3 in tests of a process itself "
        "(marked own_processes: a data-parallel rank 2; a kill 1); 1 in pytest's own workers "
        "(a test importing a framework); 1 outside any test",
    ]
    assert summary(processes[:2])[1] == (
        "  2 to compute (tests that could share a worker); 0 in tests of a process itself "
        "(marked own_processes)"
    )
    assert summary([]) == ["framework processes started: 0"]
