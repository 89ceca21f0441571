"""The import guards of kbench.backends.keras3, on a module of the test's own: a module
kept out while Keras loads, and one seeded when it is first imported."""

import importlib
import importlib.util
import sys

import pytest

from kbench.backends.keras3 import AfterFirstImport, kept_out


@pytest.fixture
def module_dir(tmp_path, monkeypatch):
    (tmp_path / "guarded_mod.py").write_text("LOADED_BY = __loader__\nVALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("guarded_mod", None)
    AfterFirstImport.disarm_all()


def test_kept_out_refuses_the_import_only_inside(module_dir):
    with kept_out(["guarded_mod"]) as skipped:
        assert skipped == ["guarded_mod"]
        with pytest.raises(ImportError):
            importlib.import_module("guarded_mod")
    assert importlib.import_module("guarded_mod").VALUE == 1
    with kept_out(["guarded_mod"]) as skipped:  # already imported: left alone
        assert skipped == [] and importlib.import_module("guarded_mod").VALUE == 1


def test_after_first_import_calls_once_with_the_module_its_own_loader_ran(module_dir):
    calls = []
    finder = AfterFirstImport("guarded_mod", lambda module: calls.append(module.VALUE))
    sys.meta_path.insert(0, finder)
    importlib.import_module("json.tool")  # another module: not its business
    assert calls == [] and finder in sys.meta_path
    module = importlib.import_module("guarded_mod")
    assert calls == [1] and finder not in sys.meta_path  # one shot
    assert type(module.LOADED_BY).__name__ == "SourceFileLoader"  # its code saw its own
    assert module.__spec__.loader is module.__loader__ is module.LOADED_BY
    sys.modules.pop("guarded_mod")
    importlib.import_module("guarded_mod")
    assert calls == [1]


def test_a_lookup_without_an_import_leaves_it_armed(module_dir):
    """Libraries ask whether a module is installed with importlib.util.find_spec: that
    is not its import, which must still be followed by the call."""
    calls = []
    finder = AfterFirstImport("guarded_mod", lambda module: calls.append(module.VALUE))
    sys.meta_path.insert(0, finder)
    assert importlib.util.find_spec("guarded_mod") is not None
    assert calls == [] and finder in sys.meta_path
    importlib.import_module("guarded_mod")
    assert calls == [1] and finder not in sys.meta_path


def test_a_failing_call_does_not_fail_the_import(module_dir, caplog):
    def boom(module):
        raise RuntimeError("no seed today")

    sys.meta_path.insert(0, AfterFirstImport("guarded_mod", boom))
    assert importlib.import_module("guarded_mod").VALUE == 1
    assert "after importing guarded_mod: RuntimeError: no seed today" in caplog.text


def test_disarm_all_takes_every_armed_finder_away(module_dir):
    calls = []
    for _ in range(2):
        sys.meta_path.insert(0, AfterFirstImport("guarded_mod", calls.append))
    AfterFirstImport.disarm_all()
    assert not any(isinstance(f, AfterFirstImport) for f in sys.meta_path)
    importlib.import_module("guarded_mod")
    assert calls == []
