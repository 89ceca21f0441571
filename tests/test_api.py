"""The Python API (kbench.api): results of stored documents, their frame and tables,
the comparison `kbench compare` prints, the settings checked as the CLI checks them, the
same rounds as `kbench run`; and examples/quickstart.ipynb executed on the real
backends (slow)."""

from __future__ import annotations

import inspect
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, require_backends

import kbench
from kbench import api as kbench_api
from kbench.cli import run_commands
from kbench.cli.app import build_parser, main
from kbench.results.config import WINDOW_S, ConfigError, RunConfig
from kbench.results.result import RunResult
from kbench.results.store import ResultStore, StoreError
from kbench.studies import rounds

_ids = itertools.count()


def result(backend: str, repeat: int, ips: float, status: str = "ok", **settings: Any):
    """A result document as the runner writes one, its config built by RunConfig."""
    settings = {"model": "mlp", "dataset": "synthetic", "batch_size": 32, **settings}
    config = RunConfig.from_dict({"backend": backend, "repeat": repeat, **settings}).to_dict()
    n = next(_ids)
    ok = status == "ok"
    return RunResult(
        run_id=f"r{n:04d}-{backend}",
        status=status,
        config=config,
        started_at=f"2026-11-26T10:{n // 60:02d}:{n % 60:02d}Z",
        wall_time_s=2.5,
        environment={"machine": {"hostname": "box", "gpu": {"available": False}}},
        data={"synthetic": True},
        metrics={
            "images_per_sec": ips,
            "step_time_s": {"p50": 0.004},
            "test_accuracy": 0.125,
            "memory": [],
        }
        if ok
        else {},
        reason=None if ok else "<b>it broke</b> & stopped",
    )


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """Two rounds of torch and jax, and a third backend that failed."""
    found = ResultStore(tmp_path / "store")
    for repeat, (a, b) in enumerate([(100.0, 300.0), (120.0, 330.0)]):
        found.add(result("torch", repeat, a))
        found.add(result("jax", repeat, b))
    found.add(result("tensorflow", 0, 0.0, status="failed"))
    return tmp_path / "store"


def test_import_kbench_is_light_and_run_is_both_the_api_and_the_stage(tmp_path: Path) -> None:
    code = (
        "import sys, kbench\n"
        "heavy = ['pandas', 'numpy', 'matplotlib', 'keras', 'tensorflow', 'jax', 'torch',"
        " 'kbench.api']\n"
        "print([m for m in heavy if m in sys.modules])\n"
        "import kbench.run.runner\n"
        "print(callable(kbench.run), kbench.run.runner.Runner.__name__)\n"
        "import inspect; print(list(inspect.signature(kbench.run).parameters)[:2])\n"
    )
    env = dict(os.environ, KERAS_HOME=str(tmp_path / "keras"))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "True Runner", "['backends', 'model']"]


def test_load_gives_a_sequence_a_frame_and_a_table(store: Path) -> None:
    results = kbench.load(store)
    assert len(results) == 5 and isinstance(results, kbench.Results)
    assert [r.config["backend"] for r in results][:2] == ["torch", "jax"]
    assert isinstance(results[0], RunResult) and isinstance(results[1:3], kbench.Results)
    assert len(results[1:3]) == 2 and results.store == store
    frame = results.frame()
    assert list(frame["backend"]) == ["torch", "jax", "torch", "jax", "tensorflow"]
    assert list(frame["status"]) == ["ok"] * 4 + ["failed"]
    assert frame["images_per_sec"].tolist()[:4] == [100.0, 300.0, 120.0, 330.0]
    assert results.to_frame().equals(frame)
    text = repr(results)
    assert text.startswith(f"kbench.Results: 5 runs, 4 ok in {store}")
    assert "torch #2" in text and "4.00" in text and "0.125" in text  # repeat, ms, accuracy
    page = results._repr_html_()
    assert page.count("<tr>") == 6 and "<td>jax</td>" in page
    assert "&lt;b&gt;it broke&lt;/b&gt; &amp; stopped" in page and "<b>it" not in page
    ok = kbench.load(store, filters=["status=ok", "backend=jax"])
    assert [r.metrics["images_per_sec"] for r in ok] == [300.0, 330.0]


def test_load_of_no_runs_says_so(tmp_path: Path, store: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        kbench.load(tmp_path / "nothing")
    with pytest.raises(StoreError, match="no runs in .* pass the filters backend=mxnet"):
        kbench.load(store, filters=["backend=mxnet"])


def test_compare_is_what_the_cli_prints_and_writes(store: Path, capsys) -> None:
    markdown = store.parent / "compare.md"
    assert main(["compare", "--store", str(store), "--output", str(markdown)]) == 0
    printed = capsys.readouterr().out
    for given in (str(store), store, kbench.load(store), list(kbench.load(store))):
        comparison = kbench.compare(given)
        assert comparison.text() + "\n" == printed
    assert comparison.markdown(f"kbench comparison: {store}") == markdown.read_text()
    assert [t.title.split(":")[0] for t in comparison.tables] == [
        "Throughput, images/s",
        "Speed against torch",
        "Peak memory",
        "Test accuracy after training",
    ]
    ratios = comparison.tables[1].rows[0][1:]
    assert ratios == ["x1.00", "x2.88 (2.75-3.00, 50% interval, n=2)", "FAILED"]
    assert "FAILED" in comparison.tables[0].rows[0]
    assert repr(comparison) == comparison.text()


def test_compare_baseline_filters_and_html(store: Path) -> None:
    results = kbench.load(store)
    against_jax = results.compare(baseline="jax")
    assert against_jax.tables[1].title.startswith("Speed against jax")
    only = kbench.compare(results, filters=["backend=torch,jax"])
    assert "tensorflow" not in only.text()
    assert only.text() == kbench.compare(store, filters=["backend=torch,jax"]).text()
    for given in (results, store):  # a misspelt name is refused, not an empty comparison
        with pytest.raises(StoreError, match="unknown field 'backnd'"):
            kbench.compare(given, filters=["backnd=jax"])
    page = kbench.compare(results)._repr_html_()
    assert page.count("<table>") == 4 and "<th>torch</th>" in page and "<th>jax</th>" in page
    assert "&lt;b&gt;it broke&lt;/b&gt;" in page and "<b>it" not in page
    assert "Nothing to compare" in kbench.compare([])._repr_html_()
    with pytest.raises(TypeError, match="received a list holding int"):
        kbench.compare([results[0], 3])


def test_an_unknown_setting_names_itself_the_accepted_ones_and_the_closest() -> None:
    with pytest.raises(TypeError) as raised:
        kbench.run(backends=["torch"], btach_size=32)
    message = str(raised.value)
    assert message.startswith(
        "btach_size: expected a run setting, one of: model_args, dataset, batch_size"
    )
    assert message.endswith("received 'btach_size'. Did you mean 'batch_size'?")
    assert isinstance(raised.value, ConfigError)  # the CLI's kind of error too
    with pytest.raises(TypeError, match="Did you mean 'backends'"):
        kbench.run(backends=["torch"], backend="jax")
    with pytest.raises(ConfigError, match="repeats: expected a positive integer; received 0"):
        rounds.plan_rounds(["torch"], ["mlp"], 0)
    with pytest.raises(ConfigError, match="expected each backend once; received jax"):
        rounds.plan_rounds(["jax", "torch", "jax"], ["mlp"])
    with pytest.raises(ConfigError, match="batch_size: expected a positive integer"):
        kbench.run(backends="torch", batch_size=0)  # RunConfig's own checks


def cli_plan(*argv: str) -> rounds.Plan:
    """What ``kbench run ARGV`` plans, nothing started."""
    return run_commands.plan_of(build_parser().parse_args(["run", *argv]))


def test_the_cli_and_the_api_plan_the_same_rounds() -> None:
    flags = ["--dataset", "synthetic", "--steps", "3", "--batch-size", "16", "--repeats", "2"]
    models = ["mlp", "small_cnn"]
    cli = cli_plan("--backend", "torch,jax", "--model", ",".join(models), *flags,
                   "--threads", "1", "--seed", "7")  # fmt: skip
    api = kbench_api.plan(
        backends=["torch", "jax"], model=models, dataset="synthetic", steps=3, batch_size=16,
        repeats=2, threads=1, seed=7,
    )  # fmt: skip
    assert cli == api
    assert [[(c.backend, c.model, c.repeat) for c in r] for r in api.rounds] == [
        [(b, m, repeat) for m in models for b in ("torch", "jax")] for repeat in (0, 1)
    ]
    assert {(c.steps, c.epochs, c.batch_size, c.threads) for r in api.rounds for c in r} == {
        (3, None, 16, 1)
    }
    assert not api.measure.windows and api.measure.reason == "--repeats"


def test_the_cli_and_the_api_share_their_defaults() -> None:
    """Nothing said but the backends: the same plan from ``kbench run -b torch,jax`` and
    ``kbench.run(["torch", "jax"])``, each run with RunConfig's defaults (Fashion-MNIST),
    in warm windows; one backend, repeats or warm in fresh processes, alike."""
    both = cli_plan("-b", "torch,jax"), kbench_api.plan(["torch", "jax"])
    assert both[0] == both[1]
    plan = both[1]
    assert plan.measure.windows and plan.repeats == 1
    assert (plan.baseline, plan.ratio_precision, plan.ratio_budget_s) == (
        "torch", rounds.WINDOW_PRECISION, rounds.WINDOW_BUDGET_S,
    )  # fmt: skip
    assert {c.model for c in plan.rounds[0]} == {rounds.DEFAULT_MODEL}
    defaults = RunConfig(backend="torch", model="mlp", window_s=WINDOW_S)
    assert plan.rounds[0][0] == defaults and defaults.dataset == "fashion_mnist"
    for argv, keywords in (
        (["-b", "jax"], {"backends": "jax"}),
        (["-b", "torch,jax", "--repeats", "1"], {"backends": ["torch", "jax"], "repeats": 1}),
        (["-b", "torch,jax", "--warm"], {"backends": ["torch", "jax"], "warm": True}),
        (["-b", "torch,jax", "--mode", "inference"],
         {"backends": ["torch", "jax"], "mode": "inference"}),
    ):  # fmt: skip
        cli, api = cli_plan(*argv), kbench_api.plan(**keywords)
        assert cli == api and not api.measure.windows, argv
    assert kbench_api.plan("jax").measure.reason == "one backend (jax)"
    signature = inspect.signature(kbench_api.run).parameters
    assert signature["model"].default == rounds.DEFAULT_MODEL
    parser = build_parser()._subparsers._group_actions[0].choices["run"]
    assert parser.get_default("model") == [rounds.DEFAULT_MODEL]
    options = inspect.signature(rounds.plan_comparison).parameters  # the one set of defaults
    for name in ("repeats", "warm", "baseline", "ratio_precision", "ratio_budget_s"):
        assert options[name].default == parser.get_default(name), name
    assert options["check_parity"].default == parser.get_default("parity_check")


NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"


def test_the_committed_notebook_has_no_outputs() -> None:
    notebook = json.loads(NOTEBOOK.read_text())
    code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    assert code and all(not c["outputs"] and c["execution_count"] is None for c in code)


# --------------------------------------------------------------------------- slow


def cell_output(notebook, starts: str, kind: str) -> str:
    """The ``kind`` output (``text/html``, ``text/plain``) of the code cell whose source
    starts with ``starts``."""
    [cell] = [c for c in notebook.cells if c.cell_type == "code" and c.source.startswith(starts)]
    found = [o["data"][kind] for o in cell.outputs if kind in o.get("data", {})]
    assert found, f"no {kind} output of the cell {starts!r}: {cell.outputs}"
    return found[-1]


@pytest.mark.slow
def test_the_quickstart_notebook_runs(tmp_path: Path, monkeypatch) -> None:
    """examples/quickstart.ipynb, every cell, on torch and jax; everything it and its
    kernel write stays in tmp_path."""
    require_backends("torch", "jax")
    import nbclient
    import nbformat

    dirs = {
        "KERAS_HOME": "keras", "IPYTHONDIR": "ipython", "JUPYTER_CONFIG_DIR": "jupyter/config",
        "JUPYTER_DATA_DIR": "jupyter/data", "JUPYTER_RUNTIME_DIR": "jupyter/runtime",
        "MPLCONFIGDIR": "matplotlib", "TMPDIR": "tmp",
    }  # fmt: skip
    for name, folder in dirs.items():
        (tmp_path / folder).mkdir(parents=True)
        monkeypatch.setenv(name, str(tmp_path / folder))  # this process's jupyter_client too
    env = dict(os.environ, KBENCH_CACHE_DIR=str(tmp_path / "cache"))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    )
    client.execute(env=env)

    frame = cell_output(notebook, "frame = results.frame()", "text/plain")
    rows = frame.splitlines()[1:]
    assert len(rows) == 2 and all(" ok " in row for row in rows), frame
    assert {row.split()[1] for row in rows} == {"torch", "jax"}
    runs = cell_output(notebook, "results = kbench.run(", "text/html")
    assert "2 runs, 2 ok" in runs
    compared = cell_output(notebook, "kbench.compare(results", "text/html")
    assert "<th>torch</th>" in compared and "<th>jax</th>" in compared
    assert "Speed against torch" in compared
    assert cell_output(notebook, "stored = kbench.load(", "text/plain") == "(2, ['jax', 'torch'])"
    [store] = (tmp_path / "tmp").glob("kbench-quickstart-*")
    assert len(list(store.glob("*.json"))) == 2
