"""``kbench tune`` resumes: a backend whose search finished in the store is not searched
again by the same tune (issue 28: "resumable like a sweep"). The whole tune run again is
tests/test_tune.py::test_the_same_tune_again_searches_no_backend_twice (it reruns that
module's tune)."""

from __future__ import annotations

import json

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
