"""kbench ops: the references and the check, a wrong implementation caught as a mismatch,
bad input, and one real run of every operation on all five backends (one worker
process per backend) down to the results-store document, table and figures."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import require_backends

from kbench.cli import ops as cli_ops
from kbench.ops import OPS, sizes_up_to
from kbench.ops.runner import OpsConfig, run_ops
from kbench.ops.spec import check
from kbench.ops.worker import measure
from kbench.results.config import ConfigError
from kbench.results.result import RunResult
from kbench.results.store import ResultStore
from kbench.views.ops import ops_figures, ops_tables

ALL_BACKENDS = ("tensorflow", "jax", "torch", "torch-native", "mxnet")
SIZES = (4, 8)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kbench")
    cli_ops.add_command(parser.add_subparsers(dest="command"))
    return parser.parse_args(["ops", *argv])


# ------------------------------------------------------------ references and check


@pytest.mark.parametrize("name", list(OPS))
def test_reference_rounded_to_float32_passes_its_own_check(name):
    spec = OPS[name]
    inputs = spec.inputs(8, "float32", seed=0)
    rounded = [r.astype(np.float32) for r in spec.reference_outputs(inputs)]
    result = check(spec, 8, "float32", False, inputs, rounded)
    assert result["passed"], result


def test_check_names_what_is_wrong():
    spec = OPS["gemm"]
    inputs = spec.inputs(16, "float32", seed=0)
    (good,) = spec.reference_outputs(inputs)
    off = check(spec, 16, "float32", False, inputs, [(good * 1.001).astype(np.float32)])
    assert not off["passed"] and off["max_abs_diff"] > off["tolerance"] > 0
    transposed = check(spec, 16, "float32", False, inputs, [good.T.astype(np.float32)])
    assert not transposed["passed"]
    shape = check(spec, 16, "float32", False, inputs, [good[:4].astype(np.float32)])
    assert "expected shape [16, 16]; got [4, 16]" in shape["reason"]
    nan = good.astype(np.float32)
    nan[0, 0] = np.nan
    assert "NaN" in check(spec, 16, "float32", False, inputs, [nan])["reason"]
    dtype = check(spec, 16, "float32", False, inputs, [good])
    assert "expected dtype float32; got float64" in dtype["reason"]


def test_tolerances_grow_with_the_terms_summed_and_allow_tf32_on_a_gpu():
    gemm = OPS["gemm"]
    assert gemm.rtols(400, "float32", False)[0] == pytest.approx(
        2 * gemm.rtols(100, "float32", False)[0]
    )
    assert gemm.rtols(64, "float32", True)[0] == pytest.approx(4 * 2**-10)
    assert OPS["relu"].rtols(64, "float32", True) == [0.0]
    assert OPS["tanh"].rtols(64, "float64", False)[0] < 1e-13


def test_inputs_are_seeded_per_op_and_size():
    a = OPS["gemm"].inputs(8, "float32", seed=0)
    assert all(np.array_equal(a[k], v) for k, v in OPS["gemm"].inputs(8, "float32", 0).items())
    assert not np.array_equal(a["a"], OPS["gemm"].inputs(8, "float32", seed=1)["a"])
    assert a["a"].dtype == np.float32 and a["a"].shape == (8, 8)


def test_sizes_up_to():
    assert sizes_up_to(512) == (64, 128, 256, 512)
    assert sizes_up_to(700) == (64, 128, 256, 512)
    assert sizes_up_to(32) == (32,)
    assert sizes_up_to(16, min_size=4) == (4, 8, 16)


# --------------------------------------- a real framework, a wrong implementation


@pytest.fixture(scope="module")
def torch_ops():
    pytest.importorskip("torch")
    from kbench.ops.torch_ops import TorchOps

    class Wrong(TorchOps):
        def op_sigmoid(self, x):
            """torch.sigmoid, scaled by 1.001 (deliberately wrong)"""
            return self._forward(lambda: self.torch.sigmoid(x) * 1.001)

        def op_gemm(self, a, b):
            """torch.matmul of the wrong operands (deliberately wrong)"""
            return self._forward(lambda: self.torch.matmul(b, a))

        def op_tanh(self, x):
            """raises"""
            raise RuntimeError("simulated failure")

        op_relu = None  # this backend "has no" relu

    return TorchOps(gpu=False, dtype="float32"), Wrong(gpu=False, dtype="float32")


def test_a_wrong_implementation_is_a_mismatch_and_is_not_timed(torch_ops):
    right, wrong = torch_ops
    settings = dict(dtype="float32", seed=0, warmup=1, repeats=2)
    for name in ("sigmoid", "gemm"):
        ok = measure(right, OPS[name], 8, **settings)
        assert ok["status"] == "ok" and ok["check"]["passed"] and ok["median_s"] > 0
        bad = measure(wrong, OPS[name], 8, **settings)
        assert bad["status"] == "mismatch", bad
        assert not bad["check"]["passed"] and "median_s" not in bad and "times_s" not in bad
        assert "from the float64 reference" in bad["reason"] and "tolerance" in bad["reason"]
        assert bad["impl"].endswith("(deliberately wrong)")
    failed = measure(wrong, OPS["tanh"], 8, **settings)
    assert failed["status"] == "failed" and failed["reason"] == "RuntimeError: simulated failure"
    unsupported = measure(wrong, OPS["relu"], 8, **settings)
    assert unsupported["status"] == "unsupported"
    skipped = measure(right, OPS["conv2d"], 64, max_memory_bytes=2**20, **settings)
    assert skipped["status"] == "skipped" and "--max-memory" in skipped["reason"]


# --------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "argv, setting, words",
    [
        (["--ops", "gemm,convolution"], "ops", ["expected one of", "'convolution'", "conv2d"]),
        (["--sizes", "64,0"], "sizes", ["positive integers", "received 0"]),
        (["--sizes", "64,big"], "sizes", ["positive integers", "received 'big'"]),
        (["--max-size", "-8"], "max_size", ["positive integer", "received -8"]),
        (["--dtype", "int8"], "dtype", ["float32", "received 'int8'"]),
        (["--calls", "0"], "calls", ["positive integer", "received 0"]),
        (["--warmup-steps", "-1"], "warmup_steps", ["received -1"]),
        (["--device", "tpu"], "device", ["auto, cpu, gpu", "received 'tpu'"]),
    ],
)
def test_bad_input_names_the_setting_expected_and_received(argv, setting, words):
    with pytest.raises(ConfigError) as caught:
        cli_ops.configs_from_args(parse("--backend", "jax", *argv))
    assert caught.value.setting == setting
    for word in words:
        assert word in caught.value.message


def test_an_unknown_backend_is_refused_as_the_flag_is_read(capsys):
    with pytest.raises(SystemExit) as caught:
        parse("--backend", "jax,pytorch")
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "expected one of" in err and "'pytorch'" in err


def test_bad_input_exits_2_through_the_kbench_command(capsys):
    from kbench import cli

    with pytest.raises(SystemExit) as caught:
        cli.main(["ops", "--backend", "jax", "--sizes", "-1"])
    assert caught.value.code == 2
    assert "kbench ops: error: --sizes: expected positive integers" in capsys.readouterr().err


# ------------------------------------------------ every op on all five backends


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One `kbench ops` (in this process; one worker per backend) shared by the tests below."""
    require_backends(*ALL_BACKENDS)
    output = tmp_path_factory.mktemp("ops") / "results"
    args = parse("--backend", ",".join(ALL_BACKENDS), "--sizes", ",".join(map(str, SIZES)),
                 "--calls", "2", "--warmup-steps", "1", "--store", str(output))  # fmt: skip
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = args.handler(args)
    return code, printed.getvalue(), output


@pytest.mark.slow
def test_every_op_passes_its_check_and_is_timed_on_every_backend(run):
    code, printed, output = run
    results = ResultStore(output).results()
    assert code == 0, printed + json.dumps([r.error for r in results if r.error], indent=1)
    assert sorted(r.config["backend"] for r in results) == sorted(ALL_BACKENDS)
    digests = {}
    for result in results:
        assert result.ok and result.kind == "ops", result.reason
        entries = result.metrics["ops"]
        assert [(e["op"], e["size"]) for e in entries] == [(o, n) for o in OPS for n in SIZES]
        for e in entries:
            where = f"{result.config['backend']} {e['op']} {e['size']}"
            assert e["status"] == "ok" and e["check"]["passed"], (where, e)
            assert e["check"]["max_abs_diff"] <= e["check"]["tolerance"], where
            assert 0 < e["p10_s"] <= e["median_s"] <= e["p90_s"], where
            assert e["n"] == len(e["times_s"]) == 2 and all(t > 0 for t in e["times_s"]), where
            if e["op"] in ("gemm", "conv2d", "conv2d_backward"):
                assert e["gflops_per_sec"] > 0, where
                assert "peak_fraction" in e, where
            digests.setdefault((e["op"], e["size"]), set()).add(e["inputs_sha1"])
    assert all(len(d) == 1 for d in digests.values()), "every backend had the same inputs"


@pytest.mark.slow
def test_the_results_store_document(run):
    _, _, output = run
    entries = ResultStore(output).entries()
    assert len(entries) == 5 and {e.kind for e in entries} == {"ops"}
    assert (output / "index.jsonl").is_file()
    for entry in entries:
        document = json.loads((output / entry.file).read_text())
        assert document["schema_version"] == RunResult.from_dict(document).schema_version
        config = document["config"]
        for key in ("backend", "ops", "sizes", "dtype", "repeats", "device", "threads"):
            assert key in config
        assert config["sizes"] == list(SIZES) and config["dtype"] == "float32"
        environment = document["environment"]
        assert environment["process_env"]["KERAS_BACKEND"] == config["backend"]
        assert environment["keras_json"]["backend"] == config["backend"]
        assert environment["framework"]["threads"]["requested"] == config["threads"]
        assert document["metrics"]["device"] == "cpu"
        assert (output / "logs" / f"{document['run_id']}.log").is_file()


@pytest.mark.slow
def test_the_printed_table_and_the_views(run):
    _, printed, output = run
    assert "Operator time (median, p10-p90)" in printed and "5/5 pass" in printed
    for backend in ALL_BACKENDS:
        assert backend in printed.splitlines()[0] + printed
    results = ResultStore(output).results()
    times, rates = ops_tables(results)
    assert times.headers == ["op", "size", *ALL_BACKENDS, "check"]
    assert len(times.rows) == len(OPS) * len(SIZES)
    assert all(row[-1].startswith("5/5 pass") for row in times.rows)
    assert [row[0] for row in rates.rows if row[1] == "4"] == [
        name for name, spec in OPS.items() if spec.flops
    ]


# ------------------------------------------- a worker that crashes or hangs


def fake_interpreter(tmp_path: Path, body: str) -> str:
    path = tmp_path / "fake-python"
    path.write_text("#!/bin/bash\n" + body + "\n")  # bash: a descriptor above 9
    path.chmod(0o755)
    return str(path)


@pytest.mark.slow
def test_a_crash_and_a_timeout_are_recorded_and_the_next_backend_runs(tmp_path, monkeypatch):
    require_backends("torch-native")
    partial = {"status": "running", "framework": {}, "model": {}, "error": None,
               "metrics": {"device": "cpu", "ops": [{"op": "relu", "size": 4, "status": "ok",
                                                    "median_s": 1e-5, "p10_s": 1e-5,
                                                    "p90_s": 1e-5}]}}  # fmt: skip
    answer = json.dumps({"event": "op", "reply": partial})  # after its first operation
    hang = f"echo '{answer}' >&\"$KBENCH_REPLY_FD\"; sleep 60"  # on the reply pipe
    monkeypatch.setenv("KBENCH_PYTHON_JAX", fake_interpreter(tmp_path, hang))
    crash_dir = tmp_path / "crash"
    crash_dir.mkdir()
    monkeypatch.setenv(
        "KBENCH_PYTHON_MXNET", fake_interpreter(crash_dir, "echo 'simulated crash' >&2; exit 3")
    )
    timeouts = {"jax": 3, "mxnet": 60, "torch-native": 120}
    configs = [OpsConfig(backend, ops=("relu",), sizes=(4,), repeats=1, warmup=0, timeout_s=limit)
               for backend, limit in timeouts.items()]  # fmt: skip
    hung, crashed, ok = run_ops(configs, tmp_path / "results")
    assert hung.status == "timeout" and "3 s timeout" in hung.reason
    assert hung.metrics["ops"][0]["op"] == "relu", "what the worker finished is kept"
    assert crashed.status == "failed" and "exited with code 3" in crashed.reason
    assert "simulated crash" in crashed.error["log_tail"]
    assert ok.ok and ok.metrics["ops"][0]["status"] == "ok"
    (row,) = ops_tables([hung, crashed, ok])[0].rows  # columns in backend order
    assert row[:3] == ["relu", "4", "10 us (10-10)"]
    # flagged ("[busy: ...]") where the machine was busy while it ran
    assert re.fullmatch(r"[\d.,]+ (ns|us|ms|s) \([\d.,]+-[\d.,]+\)( \[.+\])?", row[3]), row
    assert row[4] == "FAILED" and row[5].startswith("1/1 pass")
    ((title, png),) = ops_figures([hung, crashed, ok])
    assert title == "relu: time against size" and png.startswith(b"\x89PNG")
