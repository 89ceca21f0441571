"""--profile: the XSpace reader, operator names and phases, and real profiles of model
runs on every backend (MXNet's wheel has no profiler: unsupported, run still ok)."""

from __future__ import annotations

import html
import importlib
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import shared_sweep

from kbench.profiling import (
    OpTime,
    ProfilerUnsupported,
    common_name,
    profile_model,
    summarize,
    xspace,
)
from kbench.profiling.captures import JaxCapture, TensorFlowCapture
from kbench.results.config import ConfigError, RunConfig
from kbench.views import report
from kbench.views.report import section_tables

PROFILED = ("tensorflow", "jax", "torch", "torch-native")


class PlaneWriter:
    """Names to ids in one XPlane's metadata tables, as a profiler fills them."""

    def __init__(self, plane):
        self.plane = plane

    def stat_id(self, name):
        return self._id(self.plane.stat_metadata, name)

    def event_id(self, name):
        return self._id(self.plane.event_metadata, name)

    @staticmethod
    def _id(table, name):
        found = [key for key, meta in table.items() if meta.name == name]
        if found:
            return found[0]
        key = len(table) + 1
        table[key].id, table[key].name = key, name
        return key


def tensorflow_protos(*names):
    """TensorFlow's own generated protobuf modules (``tsl.profiler.protobuf.xplane_pb2``),
    without TensorFlow's import (8-10 s in a test worker, which counted as a framework
    process): while they load, a bare package stands in for ``tensorflow`` (their own
    imports are of one another, below empty ``__init__.py`` files), and it is taken away
    after, so that a later ``import tensorflow`` in this process is the real one."""
    if "tensorflow" in sys.modules:
        return [importlib.import_module(f"tensorflow.{name}") for name in names]
    # (found by hand: importlib's finders would count this process as TensorFlow's)
    folders = [Path(entry) / "tensorflow" for entry in sys.path]
    found = [f for f in folders if (f / "__init__.py").is_file()]
    if not found:
        raise ModuleNotFoundError(f"no tensorflow package on this Python's path ({sys.path})")
    stand_in = types.ModuleType("tensorflow")
    stand_in.__path__ = [str(found[0])]
    sys.modules["tensorflow"] = stand_in
    try:
        return [importlib.import_module(f"tensorflow.{name}") for name in names]
    finally:
        for name in [n for n in sys.modules if n == "tensorflow" or n.startswith("tensorflow.")]:
            del sys.modules[name]


def write_xspace(path, planes):
    """An XSpace written with TensorFlow's own protobuf classes: the reader must agree
    with the real format, not with a hand-made encoder. ``planes``: name -> (lines,
    metadata events); lines: name -> [(event name, offset ps, duration ps, stats)]."""
    (xplane_pb2,) = tensorflow_protos("tsl.profiler.protobuf.xplane_pb2")
    space = xplane_pb2.XSpace()
    for plane_name, (lines, metadata) in planes.items():
        plane = space.planes.add(name=plane_name)
        ids = PlaneWriter(plane)
        for name, stats in metadata.items():
            meta = plane.event_metadata[ids.event_id(name)]
            for stat_name, value in stats.items():
                stat = meta.stats.add(metadata_id=ids.stat_id(stat_name))
                if isinstance(value, bytes):
                    stat.bytes_value = value
                else:
                    stat.int64_value = value
        for line_name, events in lines.items():
            line = plane.lines.add(name=line_name)
            for name, offset, duration, stats in events:
                event = line.events.add(
                    metadata_id=ids.event_id(name), offset_ps=offset, duration_ps=duration
                )
                for stat_name, value in stats.items():
                    stat = event.stats.add(metadata_id=ids.stat_id(stat_name))
                    if isinstance(value, str):
                        stat.ref_value = ids.stat_id(value)  # strings by reference, as XLA does
                    else:
                        stat.int64_value = value
    path.write_bytes(space.SerializeToString())
    return path


def hlo_module():
    """A train step's HLO: a convolution with its JAX path, and a fusion without one
    whose fused root has a backward path."""
    (hlo_pb2,) = tensorflow_protos("compiler.xla.service.hlo_pb2")
    proto = hlo_pb2.HloProto()
    module = proto.hlo_module
    fused = module.computations.add(name="fused_computation", id=7)
    fused.instructions.add(name="param_0", opcode="parameter")
    fused.instructions.add(
        name="reduce.1", opcode="reduce"
    ).metadata.op_name = "jit(train_step)/transpose(jvp(dense))/reduce_sum"
    rewritten = module.computations.add(name="fused_computation.1", id=8)
    rewritten.instructions.add(name="param_0.1", opcode="parameter")
    rewritten.instructions.add(name="convolution.1", opcode="convolution")
    main = module.computations.add(name="main", id=9)
    main.instructions.add(
        name="conv.3", opcode="convolution"
    ).metadata.op_name = "jit(train_step)/jvp(conv2d)/conv_general_dilated"
    main.instructions.add(name="loop_fusion", opcode="fusion", called_computation_ids=[7])
    main.instructions.add(name="ynn_fusion.1", opcode="fusion", called_computation_ids=[8])
    main.instructions.add(name="add.9", opcode="add").metadata.op_name = "jit(train_step)/adam/add"
    return proto.SerializeToString()


def test_the_reader_gives_names_stats_and_self_times_of_nested_events(tmp_path):
    write_xspace(
        tmp_path / "host.xplane.pb",
        {
            "/host:CPU": (
                {
                    "tf_Compute/1": [
                        ("ExecutorState::Process", 0, 1000, {}),
                        ("model/dense/MatMul:MatMul", 100, 600, {}),
                        ("MemoryAllocation", 200, 50, {}),
                        ("gradient_tape/model/dense/MatMul:MatMul", 800, 150, {"hlo_op": "dot.1"}),
                    ]
                },
                {},
            )
        },
    )
    [plane] = xspace.read_xspace(xspace.newest_xspace(tmp_path))
    events = {e.name: e for e in plane.lines[0].events}
    assert plane.name == "/host:CPU" and plane.lines[0].name == "tf_Compute/1"
    assert events["ExecutorState::Process"].self_ps == 1000 - 600 - 150
    assert events["model/dense/MatMul:MatMul"].self_ps == 600 - 50
    assert events["gradient_tape/model/dense/MatMul:MatMul"].stats == {"hlo_op": "dot.1"}


def test_a_file_that_is_not_a_profile_is_refused(tmp_path):
    with pytest.raises(xspace.XSpaceError, match="no \\*.xplane.pb"):
        xspace.newest_xspace(tmp_path)
    bad = tmp_path / "bad.xplane.pb"
    bad.write_bytes(b"\x0a\xff\xff\xff\xff\x0f")  # a length far past the end
    with pytest.raises(xspace.XSpaceError, match="not a readable XSpace"):
        xspace.read_xspace(bad)


def test_jax_instructions_take_phase_and_layer_from_their_call_path(tmp_path):
    event = lambda name, offset: (name, offset, 100, {"hlo_op": name, "program_id": 3})  # noqa: E731
    path = write_xspace(
        tmp_path / "jax.xplane.pb",
        {
            "/host:metadata": (
                {},
                {"jit_train_step(3)": {"Hlo Proto": hlo_module(), "program_id": 3}},
            ),
            "/host:CPU": (
                {
                    "tf_XLAEigen/1": [
                        event("conv.3", 0),
                        event("loop_fusion", 200),
                        event("ynn_fusion.1", 400),
                        event("add.9", 600),
                        ("ThunkExecutor::Execute", 800, 100, {}),  # not an instruction
                    ]
                },
                {},
            ),
        },
    )
    ops = JaxCapture("adam").ops(xspace.read_xspace(path))
    assert [(o.op, o.phase, o.layer) for o in ops] == [
        ("conv_general_dilated", "forward", "conv2d"),
        ("reduce_sum", "backward", "dense"),  # the fusion takes its root's path
        ("convolution (no call path)", "other", None),  # XLA dropped it: said so
        ("add", "update", None),
    ]
    assert all(o.seconds == pytest.approx(1e-10) for o in ops)


def test_tensorflow_node_names_give_phase_and_layer_even_when_scopes_are_numbered():
    capture = TensorFlowCapture(model_name="small_cnn", optimizer_name="adam")
    assert capture.phase("small_cnn_1/conv2d_3/Relu") == ("forward", "conv2d_3")
    assert capture.phase("gradient_tape/small_cnn_1/conv2d_3/Conv2DBackpropInput") == (
        "backward",
        "conv2d_3",
    )
    assert capture.phase("adam_2/Sqrt_4") == ("update", None)
    assert capture.phase("compile_loss/sparse/Sum") == ("forward", "loss")
    assert capture.phase("AssignAddVariableOp_2") == ("other", None)
    assert capture.phase("small_cnnx/dense/MatMul")[0] == "other"  # a prefix is not a scope


@pytest.mark.parametrize(
    "op, phase, layer, expected",
    [
        ("_MklNativeConv2DBackpropFilterWithBias", "backward", None, "conv2d_backward"),
        ("aten::mkldnn_convolution", "forward", None, "conv2d"),
        ("convert_element_type", "forward", None, None),  # not a convolution
        ("aten::addmm", "forward", None, "gemm"),
        ("dot_general", "backward", "dense", "dense_backward"),
        ("Mul", "forward", "batch_normalization_2", "batch_norm"),
        ("aten::threshold_backward", "backward", None, "relu"),
        ("aten::mul", "update", None, None),  # the optimizer's maths
        ("convolution (no call path)", "other", None, None),  # phase unknown: not named
    ],
)
def test_framework_operators_map_to_kbench_ops_names(op, phase, layer, expected):
    assert common_name(op, phase, layer) == expected


def test_summary_adds_up_and_ranks_operators_by_time():
    ops = [
        OpTime("aten::mm", "forward", 0.002),
        OpTime("aten::mm", "backward", 0.006, layer="dense"),
        OpTime("aten::mm", "backward", 0.004, layer="dense_1"),
        OpTime("aten::add_", "update", 0.001),
        OpTime("kbench::data", "data", 0.001),
    ]
    summary = summarize(ops, steps=2, top=3)
    assert summary["op_time_s"] == pytest.approx(0.014)
    assert summary["phases_s"] == pytest.approx(
        {"data": 0.001, "forward": 0.002, "backward": 0.010, "update": 0.001, "other": 0.0}
    )
    assert summary["common_ops_s"] == pytest.approx({"dense_backward": 0.010, "gemm": 0.002})
    first = summary["top_ops"][0]
    assert (first.op, first.phase, first.common) == ("aten::mm", "backward", "dense_backward")
    assert first.share == pytest.approx(10 / 14) and first.calls_per_step == 1.0
    assert first.layers == ["dense", "dense_1"]
    assert len(summary["top_ops"]) == 3


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"profile_steps": 0}, "profile_steps: expected a positive integer; received 0"),
        ({"profile": "yes"}, "profile: expected true or false"),
        (
            {"profile": True, "distributed": "torch-ddp", "workers": 2, "backend": "torch"},
            "profiles one process; received --distributed torch-ddp",
        ),
    ],
)
def test_bad_profile_settings_are_refused(settings, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig(**{"backend": "jax", "model": "mlp", **settings})


@pytest.fixture(scope="module")
def profiled_runs(request):
    """The shared sweep's "profile" group: small_cnn on 12x12x1 synthetic data, 2 steps
    profiled, on every backend (tests/shared_sweep.py's PROFILED)."""
    return shared_sweep.group(request, "profile", *PROFILED, "mxnet")


@pytest.mark.slow
def test_every_profiler_attributes_a_cnns_time_to_its_convolutions(profiled_runs):
    by_backend = {r.config["backend"]: r for r in profiled_runs.results()}
    assert sorted(by_backend) == sorted(PROFILED + ("mxnet",))
    for backend in PROFILED:
        profile = by_backend[backend].metrics["profile"]
        assert profile["status"] == "ok", (backend, profile)
        assert profile["steps"] == 2 and profile["op_time_s"] > 0
        phases = profile["phases_s"]
        assert phases["forward"] > 0 and phases["backward"] > 0, (backend, phases)
        assert phases["update"] > 0, (backend, phases)
        assert sum(phases.values()) == pytest.approx(profile["op_time_s"])
        assert "conv2d" in profile["common_ops_s"] or backend == "jax", (backend, profile)
        assert "conv2d_backward" in profile["common_ops_s"], (backend, profile["common_ops_s"])
        shares = [entry["share"] for entry in profile["top_ops"]]
        assert shares == sorted(shares, reverse=True) and 0 < sum(shares) <= 1 + 1e-9


@pytest.mark.slow
def test_mxnet_says_its_profiler_is_compiled_out_and_the_run_stands(profiled_runs):
    [mxnet] = [r for r in profiled_runs.results() if r.config["backend"] == "mxnet"]
    assert mxnet.ok and mxnet.metrics["images_per_sec"] > 0
    assert mxnet.metrics["profile"]["status"] == "unsupported"
    assert "PROFILER off" in mxnet.metrics["profile"]["reason"]


@pytest.mark.slow
def test_compare_and_report_show_the_profiles(profiled_runs, tmp_path):
    results = profiled_runs.results()
    titles = [t.title for t in section_tables(results)]
    assert titles[0].startswith("Profiled operator time by phase")
    assert "small_cnn: ms per step in each common operator (kbench ops names)" in titles
    assert sum(t.startswith("Top operators: small_cnn") for t in titles) == len(PROFILED)
    [phases] = [t for t in section_tables(results) if t.title.startswith("Profiled")]
    assert any("mxnet" in note and "unsupported" in note for note in phases.notes)
    page = tmp_path / "report.html"
    report.write_report(results, page)
    text = html.unescape(page.read_text())
    assert "Where the time goes: operators (--profile)" in text
    assert "aten::convolution_backward" in text  # a torch top operator, by name


class BrokenProfilerBackend:
    """Only what profile_model asks of a backend before it profiles."""

    gpus = 0

    def __init__(self, error):
        self.error = error

    def op_profiler(self, model, training):
        raise self.error


@pytest.mark.parametrize(
    "error, status, reason",
    [
        (ProfilerUnsupported("mxnet: PROFILER off"), "unsupported", "mxnet: PROFILER off"),
        (AttributeError("no optimizer"), "failed", "AttributeError: no optimizer"),
    ],
)
def test_a_profiler_that_cannot_start_is_reported_and_never_raises(error, status, reason):
    arrays = {"x_train": np.zeros((4, 2)), "y_train": np.zeros(4)}
    summary = profile_model(
        BrokenProfilerBackend(error), None, arrays, mode="train", batch_size=2, steps=1
    )
    assert (summary["status"], summary["reason"]) == (status, reason)
