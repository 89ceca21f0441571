"""What kbench makes of GPU traces, on records taken from the first real GPU it ran on.

On an NVIDIA H100 (driver 580.159.04, JAX 0.11.2 with its CUDA 13 plugin, 2026-11-27),
``kbench run -b jax -m small_cnn --device gpu --profile`` said the step's operators ran
0.4 ms forward, 1.0 ms backward and 693 ms "other", 100% of it one ``copy`` without a
call path. The raw trace (KBENCH_PROFILE_TRACE_DIR) held, on the GPU's one compute
stream, a 4-byte asynchronous device-to-device copy recorded as 1,114 ms: from before the
train step's compilation to the end of the trace, across the step's kernels on the same
in-order stream. The events below are that trace's, with their recorded offsets and
durations; the XSpace is written with TensorFlow's own protobuf classes.
"""

from __future__ import annotations

import pytest
from test_profile import write_xspace

from kbench.profiling import summarize, xspace
from kbench.profiling.captures import JaxCapture

STREAM = "Stream #14(Compute,MemcpyD2D,Memset)"
PS = 10**6  # picoseconds in a microsecond


def recorded(name, offset_us, duration_us, hlo_op, program):
    return (name, int(offset_us * PS), int(duration_us * PS),
            {"hlo_op": hlo_op, "program_id": program})  # fmt: skip


# (offset, duration) in microseconds, as recorded on the H100 (some rounded to 0.1 us)
H100_STREAM = [
    recorded("MemcpyD2D", 4358.8, 1.1, "copy.1", 1325),
    recorded("MemcpyD2D", 7100.025, 1114338.706, "copy.1", 1325),  # the impossible one
    recorded("MemcpyD2D", 1094302.9, 0.9, "copy.40", 226149),
    recorded("loop_add_divide_fusion", 1094305.2, 1.3, "loop_add_divide_fusion", 226149),
    # a kernel that starts 32 ns before its predecessor ends, and ends after it: the
    # overlap 87 of that stream's 250 events had, kept
    recorded(
        "loop_add_subtract_fusion_2", 1096181.965, 1.376, "loop_add_subtract_fusion.2", 226149
    ),  # fmt: skip
    recorded("input_transpose_fusion", 1096183.309, 3.232, "input_transpose_fusion", 226149),
]


def test_an_event_that_outlasts_the_next_on_its_stream_is_left_out_and_said(tmp_path):
    path = write_xspace(
        tmp_path / "h100.xplane.pb",
        {
            "/device:GPU:0": ({STREAM: H100_STREAM, "Stream #15(MemcpyH2D)": []}, {}),
        },
    )
    capture = JaxCapture("adam")
    ops = capture.ops(xspace.read_xspace(path))
    assert len(ops) == len(H100_STREAM) - 1  # the 1,114 ms copy alone is left out
    assert sum(op.seconds for op in ops) == pytest.approx((1.1 + 0.9 + 1.3 + 1.376 + 3.232) * 1e-6)
    (note,) = capture.notes
    assert note.startswith("1 GPU event(s) left out") and "copy.1, 1,114.3 ms" in note
    top = summarize(ops, 1)["top_ops"][0]
    assert top.seconds < 1e-5  # before: the copy, 1.114 s, 100% of the operator time


def test_a_cpu_trace_is_read_as_before(tmp_path):
    """The rule is for CUDA streams only: on a host thread an event that ends after the
    next one is its parent, and keeps its self time."""
    events = [recorded("conv.3", 0, 3.0, "conv.3", 3), recorded("add.9", 1.0, 1.0, "add.9", 3)]
    path = write_xspace(tmp_path / "cpu.xplane.pb", {"/host:CPU": ({"tf_XLAEigen/1": events}, {})})
    capture = JaxCapture("adam")
    ops = capture.ops(xspace.read_xspace(path))
    assert [op.seconds for op in ops] == pytest.approx([2e-6, 1e-6]) and not capture.notes
