"""The count the suite ends with (tests/framework_processes.py): each process labelled
with the test that started it, and the tests of a process itself (marked
``own_processes``) counted apart from those whose processes only compute."""

import os
import subprocess
import sys

import framework_processes
import pytest
from framework_processes import Started, label, summary


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


def test_a_reason_holding_the_separator_is_refused():
    with pytest.raises(ValueError, match="may not hold '|'"):
        label("slow", "a|b", "tests/test_x.py::test_y")


def test_the_summary_counts_the_tests_of_a_process_itself_apart():
    def started(pid, why, argv):
        return Started(pid, "torch", label("slow", why, f"tests/test_x.py::test_{pid}"), argv)

    lines = summary(
        [
            started(1, "", "/x/kbench/run/worker.py run.json"),
            started(2, "", "/x/kbench/run/worker.py run.json"),
            started(3, "a kill", "/x/kbench/run/worker.py run.json"),
            started(4, "a data-parallel rank", "/x/kbench/distributed/worker.py run.json"),
            started(5, "a data-parallel rank", "/x/kbench/distributed/worker.py run.json"),
            Started(6, "jax", "", "-c"),  # outside any test: computing
        ]
    )
    assert lines == [
        "framework processes started: 6 (run/worker.py 3, distributed/worker.py 2, python -c 1)",
        "  3 in tests of what runs compute, 3 in tests of a process itself (marked "
        "own_processes): a data-parallel rank 2; a kill 1",
    ]
    assert summary([]) == ["framework processes started: 0"]
