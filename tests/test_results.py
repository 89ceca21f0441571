"""Result documents: versioned, atomic, refused when from another schema."""

import json

import pytest

from kbench.results.jsonfile import write_json_atomic
from kbench.results.result import SCHEMA_VERSION, ResultError, RunResult


def sample(**changes):
    fields = dict(
        run_id="r1",
        status="ok",
        config={"backend": "jax"},
        started_at="t",
        wall_time_s=1.0,
        environment={},
        data={},
    )
    fields.update(changes)
    return RunResult(**fields)


def test_round_trip_and_schema_first(tmp_path):
    path = sample(metrics={"images_per_sec": 3.5}).save(tmp_path)
    text = path.read_text()
    assert text.lstrip("{\n ").startswith('"schema_version"')
    assert RunResult.load(path) == sample(metrics={"images_per_sec": 3.5})


def test_newer_and_unknown_schema_versions_are_refused_with_a_reason(tmp_path):
    data = sample().to_dict()
    data["schema_version"] = SCHEMA_VERSION + 1
    (tmp_path / "r.json").write_text(json.dumps(data))
    with pytest.raises(ResultError, match="newer kbench.*Upgrade kbench"):
        RunResult.load(tmp_path / "r.json")
    data["schema_version"] = 0
    (tmp_path / "r.json").write_text(json.dumps(data))
    with pytest.raises(ResultError, match="no kbench wrote"):
        RunResult.load(tmp_path / "r.json")
    (tmp_path / "r.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(ResultError, match="expected a kbench result"):
        RunResult.load(tmp_path / "r.json")


def test_version_1_documents_are_read_as_the_current_version(tmp_path):
    # A version 1 document as kbench 0.1 wrote it: no sweep field.
    data = sample(metrics={"images_per_sec": 2.0}).to_dict()
    del data["sweep"]
    data["schema_version"] = 1
    (tmp_path / "old.json").write_text(json.dumps(data))
    result = RunResult.load(tmp_path / "old.json")
    assert result.schema_version == SCHEMA_VERSION
    assert result.sweep is None and result.metrics == {"images_per_sec": 2.0}


def test_unknown_status_is_refused():
    with pytest.raises(ResultError, match="status"):
        sample(status="great")


def test_atomic_write_leaves_old_file_when_serialisation_fails(tmp_path):
    path = tmp_path / "x.json"
    write_json_atomic(path, {"a": 1})
    with pytest.raises(TypeError):
        write_json_atomic(path, {"a": object()})
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]


def test_results_get_ordinary_file_permissions(tmp_path):
    import os

    mask = os.umask(0o022)
    try:
        path = sample().save(tmp_path)
    finally:
        os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize(
    "change, message",
    [
        ({"environment": None}, "environment: expected an object; the document has null"),
        ({"metrics": [1]}, "metrics: expected an object; the document has a list"),
        ({"config": None}, "config: expected an object; the document has null"),
        ({"started_at": 17}, "started_at: expected a string; the document has a number"),
        ({"wall_time_s": "1 s"}, "wall_time_s: expected a number; the document has a string"),
        ({"metrics": {"memory": [3]}}, r"metrics.memory\[0\]: expected an object"),
        ({"environment": {"machine": []}}, "environment.machine: expected an object"),
        ({"sweep": {"run_key": 5}}, "sweep.run_key: expected a string or null"),
        ({"metrics": {"images_per_sec": True}}, "metrics.images_per_sec: expected a number"),
    ],
)
def test_every_document_is_checked_for_types_when_read(tmp_path, change, message):
    (tmp_path / "r.json").write_text(json.dumps(dict(sample().to_dict(), **change)))
    with pytest.raises(ResultError, match=message):
        RunResult.load(tmp_path / "r.json")


def test_damaged_files_are_refused_as_result_errors(tmp_path):
    path = sample().save(tmp_path)
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    with pytest.raises(ResultError, match="does not parse"):
        RunResult.load(path)
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ResultError, match="UTF-8"):
        RunResult.load(path)
    data = sample().to_dict()
    del data["environment"]
    path.write_text(json.dumps(data))
    with pytest.raises(ResultError, match="missing fields environment"):
        RunResult.load(path)
