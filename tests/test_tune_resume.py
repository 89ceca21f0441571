"""``kbench tune`` resumes: a backend whose search finished in the store is not searched
again by the same tune (issue 28: "resumable like a sweep")."""

from __future__ import annotations

import json

import pytest
from conftest import require_backends, run_kbench

from kbench.results.config import RunConfig
from kbench.studies import tune as studies_tune


def identity(**changes):
    base = RunConfig(backend="jax", model="mlp", dataset="synthetic", **changes)
    return studies_tune.tune_identity(base, 0.02, False, None)


def test_only_a_tune_of_the_same_settings_is_resumed(tmp_path, caplog):
    path = tmp_path / studies_tune.PROGRESS_NAME
    report = {"backend": "jax", "best": "jit_compile=off", "best_changes": {"jit_compile": "off"}}
    path.write_text(json.dumps({"identity": identity(), "reports": [report]}))
    assert studies_tune.resumed_reports(path, identity()) == {"jax": report}
    assert studies_tune.resumed_reports(path, identity(), fresh=True) == {}
    assert studies_tune.resumed_reports(path, identity(batch_size=32)) == {}
    assert "other settings (batch_size)" in caplog.text
    path.write_text("{not json")
    assert studies_tune.resumed_reports(path, identity()) == {}
    assert "unreadable" in caplog.text


@pytest.mark.slow
@pytest.mark.serial
def test_the_same_tune_again_searches_no_backend_twice(home):
    require_backends("mxnet", "mxnet-gluon")
    store = home / "store"
    args = ["tune", "-b", "mxnet,mxnet-gluon", "-m", "mlp", "--budget", "20s",
            "--try", "hybridize,threads", "--window", "0.2", "--batch-size", "32",
            "--train-samples", "256", "--json", "--store", str(store)]  # fmt: skip
    first = run_kbench(args, home)
    assert first.returncode in (0, 1), first.stderr
    progress = json.loads((store / studies_tune.PROGRESS_NAME).read_text())
    assert [r["backend"] for r in progress["reports"]] == ["mxnet", "mxnet-gluon"]
    before = set(store.glob("2*.json"))  # the result documents (named by their start)
    again = run_kbench(args, home)
    assert again.returncode == first.returncode, again.stderr
    report = json.loads(again.stdout)
    assert all(b.get("resumed") for b in report["backends"])
    assert "searched before in this store" in again.stderr
    # only the default and best of each backend measured again, for the comparison
    settings = {
        json.loads(p.read_text())["metrics"].get("tune", {}).get("setting")
        for p in set(store.glob("2*.json")) - before
    }
    assert settings <= {"default", *(b["best"] for b in report["backends"])}, settings
