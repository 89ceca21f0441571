"""`kbench env` starts each backend for real; `kbench demo` falls back to synthetic data."""

import json
import sys
from pathlib import Path

import pytest
from conftest import dump, require_backends, run_kbench

from kbench import cli
from kbench.cli import run_commands
from kbench.datasets import sources
from kbench.run import environments
from kbench.studies import rounds


@pytest.mark.slow
@pytest.mark.own_processes("a probe of an environment")
def test_env_reports_every_backend_runnable(home):
    every = {"tensorflow", "jax", "torch", "torch-native", "mxnet", "mxnet-gluon", "openvino",
             "onnxruntime", "openvino-ir", "litert"}  # fmt: skip
    require_backends(*sorted(every))
    completed = run_kbench(["env", "--json"], home)
    assert completed.returncode == 0, dump(completed)
    report = json.loads(completed.stdout)
    by_name = {b["backend"]: b for b in report["backends"]}
    assert set(by_name) == every
    for name, probe in by_name.items():
        assert probe["ok"], probe
        assert probe["framework"]["name"] == name.split("-")[0]
        assert probe["framework"]["version"]
        assert "cpu" in " ".join(probe["framework"]["devices"]).lower()
    assert by_name["mxnet"]["keras"] == "2.2.4.3"
    assert by_name["mxnet"]["framework"]["features"]["DIST_KVSTORE"] in (True, False)
    assert report["machine"]["gpu"]["available"] in (True, False)
    assert not (home / ".keras").exists()


def test_without_kbench_s_environments_this_interpreter_runs_its_frameworks(tmp_path, monkeypatch):
    """Fast (no process): with no environment of kbench's own, the backends whose framework
    the interpreter kbench runs under has (the keras3 environment's, here) run there; MXNet,
    which cannot share it with Keras 3, says how to get it. ``kbench env`` from an
    installed kbench shows the same (tests/test_install.py)."""
    monkeypatch.setenv("KBENCH_ENVS_DIR", str(tmp_path / "none"))
    for backend in ("tensorflow", "jax", "torch", "torch-native", "mxnet", "mxnet-gluon"):
        monkeypatch.delenv(environments.override_variable(backend), raising=False)
    reasons = environments.runnable_backends()
    for backend in ("tensorflow", "jax", "torch", "torch-native"):
        assert reasons[backend] is None, reasons[backend]
        assert environments.interpreter_for(backend) == Path(sys.executable)
    assert "scripts/setup_envs.sh mxnet" in reasons["mxnet"]
    assert "cannot share an environment with Keras 3" in reasons["mxnet"]


@pytest.mark.slow
def test_demo_without_fashion_mnist_uses_labelled_synthetic_data(
    home, tmp_path, monkeypatch, capsys
):
    require_backends("torch-native")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("KBENCH_CACHE_DIR", str(home / "cache"))
    monkeypatch.setenv("KBENCH_OFFLINE", "1")
    monkeypatch.setattr(sources, "DEBIAN_FASHION_MNIST", tmp_path / "none")
    monkeypatch.setattr(
        run_commands,
        "DEMO_SETTINGS",
        dict(
            run_commands.DEMO_SETTINGS,
            epochs=1,
            batch_size=16,
            warmup_steps=2,
            train_samples=64,
            test_samples=32,
        ),
    )

    # its two runs (mlp, small_cnn) in one warm worker: what is checked is the fallback
    # to synthetic data and the results, not fresh-process timings
    run_once = rounds.run_once

    def warm_run_once(configs, store, **settings):
        return run_once(configs, store, **dict(settings, warm=True))

    monkeypatch.setattr(rounds, "run_once", warm_run_once)
    out = tmp_path / "out"
    code = cli.main(["demo", "--backend", "torch-native", "--store", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured
    assert "SYNTHETIC" in captured.err
    assert "mlp on synthetic (synthetic data)" in captured.out
    results = sorted(out.glob("*.json"))
    assert len(results) == 2
    for path in results:
        document = json.loads(path.read_text())
        assert document["data"]["synthetic"] is True and document["status"] == "ok"
    assert sum(bool(json.loads(p.read_text())["metrics"].get("warm_worker")) for p in results) == 1
