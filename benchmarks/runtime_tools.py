"""kbench's warm batch-1 latency beside each runtime's own tool, at the same settings.

onnxruntime, OpenVINO IR and LiteRT, each on the same file, threads and batch as kbench,
in interleaved rounds. The model is exported once through kbench's own path (a short
``kbench run`` of the three runtimes: the exporter's worker writes the files into
kbench's export cache, or the cache already has them); every measurement then runs that
one file, ``--threads`` threads (each process pinned to the same first cores, as kbench
pins its worker), batch 1, ``--warmup`` passes apart, for about ``--duration`` seconds:

  kbench            ``kbench run -b RUNTIME --mode inference --batch-size 1``: its p50
  own tool          onnxruntime: a bare ``InferenceSession.run`` loop, timed per call with
                    ``perf_counter`` (the wheel's ``onnxruntime_test`` has no thread
                    setting and gives only a mean without warmup); OpenVINO:
                    ``benchmark_app`` (sync API, one stream, float32, the data shape kbench
                    feeds), its median of OpenVINO's own per-request latency; LiteRT:
                    ``litert-benchmark`` (CompiledModel API, CPU), its median (printed to
                    0.01 ms)
  bare Python loop  OpenVINO IR and LiteRT: the runtime's Python call kbench makes
                    (``InferRequest.infer``; ``set_tensor``, ``invoke``, ``get_tensor``),
                    timed per call, without kbench around it

Each round runs every measurement once, in an order rotated from round to round (so
whatever favours the first or last of a round cancels out). The table gives each one's
median over rounds and kbench / own tool, kbench / bare: the median of the per-round
ratios with their range. A tool that is missing or fails is shown with the reason.

    envs/keras3/bin/python benchmarks/runtime_tools.py --model small_cnn --rounds 4
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from kbench.backends.runtimes import openvino_config
from kbench.results.config import RunConfig
from kbench.run import environments
from kbench.run.runner import Runner

RUNTIMES = ("onnxruntime", "openvino-ir", "litert")
TOOL_NAMES = {
    "onnxruntime": "bare InferenceSession.run loop",
    "openvino-ir": "benchmark_app",
    "litert": "litert-benchmark",
}  # fmt: skip

# the runtime's own Python call, timed per call: argv runtime, file, threads, warmup,
# seconds, OpenVINO's compile config (JSON); prints the median latency in ms
BARE_LOOP = r"""
import json, statistics, sys, time
import numpy as np
runtime, path, threads, warmup, seconds, ov_config = sys.argv[1:7]
threads, warmup, seconds = int(threads), int(warmup), float(seconds)
if runtime == "onnxruntime":
    import onnxruntime
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    first = session.get_inputs()[0]
    feed = {first.name: np.random.rand(*[d if isinstance(d, int) else 1 for d in first.shape])
            .astype(np.float32)}
    call = lambda: session.run(None, feed)
elif runtime == "openvino-ir":
    import openvino
    core = openvino.Core()
    model = core.read_model(path)
    shape = [d.get_length() if d.is_static else 1 for d in model.inputs[0].get_partial_shape()]
    request = core.compile_model(model, "CPU", json.loads(ov_config)).create_infer_request()
    x = np.random.rand(*shape).astype(np.float32)
    call = lambda: request.infer({0: x})
else:
    from ai_edge_litert.interpreter import Interpreter
    interpreter = Interpreter(model_path=path, num_threads=threads)
    interpreter.allocate_tensors()
    given, wanted = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    x = np.random.rand(*given["shape"]).astype(np.float32)
    def call():
        interpreter.set_tensor(given["index"], x)
        interpreter.invoke()
        interpreter.get_tensor(wanted["index"])
for _ in range(warmup):
    call()
times, started = [], time.perf_counter()
while time.perf_counter() - started < seconds:
    begin = time.perf_counter()
    call()
    times.append(time.perf_counter() - begin)
print(json.dumps({"median_ms": statistics.median(times) * 1000, "calls": len(times)}))
"""


class ToolFailed(Exception):
    """A tool that is missing or did not give a figure: the reason, shown in the table."""


def kbench_config(runtime: str, args: argparse.Namespace, seconds: float) -> RunConfig:
    return RunConfig(
        backend=runtime, model=args.model, dataset="synthetic", mode="inference",
        batch_size=1, threads=args.threads, duration_s=seconds, warmup_steps=args.warmup,
        train_samples=64, test_samples=64,
    )  # fmt: skip


def export_once(runner: Runner, args: argparse.Namespace) -> Dict[str, Dict[str, Any]]:
    """Each runtime's exported file and facts, from a short kbench run of all three (the
    exporter's worker makes whatever kbench's export cache lacks)."""
    results = runner.run_all([kbench_config(r, args, 0.5) for r in RUNTIMES])
    found = {}
    for result in results:
        if not result.ok:
            sys.exit(f"{result.config['backend']}: {result.status}: {result.reason}")
        export = result.metrics["export"]
        framework = result.environment["framework"]
        found[result.config["backend"]] = {
            "path": export["path"], "reused": export["reused"], "bytes": export["file_bytes"],
            "p50_ms": result.metrics["latency_ms"]["p50"],
            "version": f"{framework['name']} {framework['version']}",
        }  # fmt: skip
    return found


def pinned(threads: int) -> Optional[Callable[[], None]]:
    """What pins a tool's process to the first ``threads`` allowed cores, as kbench pins
    its worker (None where the system has no affinity call: not pinned)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))[:threads]
    return lambda: os.sched_setaffinity(0, cores)


def run_tool(command: List[str], runtime: str, threads: int, tmp: Path) -> Tuple[str, str]:
    """``command``'s stdout and stderr, run with the environment kbench gives ``runtime``'s
    worker."""
    env, _ = environments.process_environment(
        runtime, tmp, environments.import_root(tmp / "pythonpath"), threads, None
    )
    try:
        done = subprocess.run(
            command, env=env, cwd=tmp, capture_output=True, text=True, timeout=300,
            preexec_fn=pinned(threads),
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ToolFailed(f"{Path(command[0]).name}: {type(err).__name__}: {err}") from err
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise ToolFailed(f"{Path(command[0]).name} exit {done.returncode}: {' | '.join(tail)}")
    return done.stdout, done.stderr


def tool_in_environment(name: str, runtime: str) -> str:
    folder = environments.interpreter_for(runtime).parent
    found = shutil.which(name, path=str(folder))
    if found is None:
        raise ToolFailed(f"{name} is not in {folder} (its package does not ship it here)")
    return found


def bare(runtime: str, export: Dict[str, Any], args: argparse.Namespace, tmp: Path) -> float:
    python = str(environments.interpreter_for(runtime))
    config = json.dumps(openvino_config(args.threads))
    output, _ = run_tool(
        [python, "-c", BARE_LOOP, runtime, export["path"], str(args.threads), str(args.warmup),
         str(args.duration), config],
        runtime, args.threads, tmp,
    )  # fmt: skip
    return json.loads(output.strip().splitlines()[-1])["median_ms"]


def benchmark_app(export: Dict[str, Any], args: argparse.Namespace, tmp: Path) -> float:
    """OpenVINO's ``benchmark_app`` compiled as kbench compiles (one stream, ``--threads``,
    float32), fed the shape kbench feeds; its median of OpenVINO's per-request latency."""
    command = [
        tool_in_environment("benchmark_app", "openvino-ir"), "-m", export["path"], "-d", "CPU",
        "-hint", "none", "-nstreams", "1", "-nireq", "1", "-api", "sync",
        "-nthreads", str(args.threads), "-infer_precision", "f32",
        "-data_shape", "[" + ",".join(map(str, export["input_shape"])) + "]",
        "-t", str(max(1, round(args.duration))),  # whole seconds only
    ]  # fmt: skip
    found = re.search(r"Median:\s+([\d.]+)\s*(us|ms)", "".join(run_tool(
        command, "openvino-ir", args.threads, tmp)))  # fmt: skip
    if found is None:
        raise ToolFailed("benchmark_app printed no 'Median:' latency")
    return float(found.group(1)) / (1000.0 if found.group(2) == "us" else 1.0)


def litert_benchmark(export: Dict[str, Any], args: argparse.Namespace, tmp: Path) -> float:
    """LiteRT's ``litert-benchmark`` on the CPU, as many runs as fill ``--duration`` at
    kbench's latency; its median (the tool writes it to 0.01 ms)."""
    runs = max(100, int(args.duration * 1000 / max(export["p50_ms"], 1e-3)))
    command = [
        tool_in_environment("litert-benchmark", "litert"), "--model", export["path"],
        "--num_threads", str(args.threads), "--num_runs", str(runs),
        "--warmup_runs", str(args.warmup), "--result_json", str(tmp / "litert.json"),
    ]  # fmt: skip
    run_tool(command, "litert", args.threads, tmp)
    return float(json.loads((tmp / "litert.json").read_text())["latency"]["median_ms"])


OWN_TOOLS = {
    "onnxruntime": lambda export, args, tmp: bare("onnxruntime", export, args, tmp),
    "openvino-ir": benchmark_app,
    "litert": litert_benchmark,
}  # fmt: skip


def measure_one(
    kind: str, runtime: str, exports: Dict[str, Any], runner: Runner, args: argparse.Namespace
) -> float:
    """One measurement's median latency in ms (``kind``: kbench, tool or bare)."""
    if kind == "kbench":
        (result,) = runner.run_all([kbench_config(runtime, args, args.duration)])
        if not result.ok:
            raise ToolFailed(f"kbench: {result.status}: {result.reason}")
        return result.metrics["latency_ms"]["p50"]
    with tempfile.TemporaryDirectory(prefix="runtime-tools-") as tmp:
        if kind == "tool":
            return OWN_TOOLS[runtime](exports[runtime], args, Path(tmp))
        return bare(runtime, exports[runtime], args, Path(tmp))


def rounds(
    runner: Runner, exports: Dict[str, Any], args: argparse.Namespace
) -> Tuple[Dict[Tuple[str, str], List[Optional[float]]], Dict[Tuple[str, str], str]]:
    """{(runtime, kind): [ms per round, None where it failed]} and why each failed."""
    plan = [(r, "kbench") for r in RUNTIMES] + [(r, "tool") for r in RUNTIMES]
    plan += [(r, "bare") for r in RUNTIMES if r != "onnxruntime"]  # its tool is the bare loop
    plan.sort(key=lambda item: RUNTIMES.index(item[0]))
    figures: Dict[Tuple[str, str], List[Optional[float]]] = {item: [] for item in plan}
    failures: Dict[Tuple[str, str], str] = {}
    for index in range(args.rounds):
        shift = index % len(plan)  # rotate, so order effects cancel
        for item in plan[shift:] + plan[:shift]:
            try:
                figures[item].append(measure_one(item[1], item[0], exports, runner, args))
            except ToolFailed as err:
                figures[item].append(None)
                failures[item] = str(err)
        shown = ", ".join(f"{r} {k} {v[-1]:.3f}" for (r, k), v in figures.items() if v[-1])
        print(f"round {index + 1} of {args.rounds} (ms): {shown}", flush=True)
    return figures, failures


def ratio_text(top: List[Optional[float]], bottom: List[Optional[float]]) -> str:
    pairs = [a / b for a, b in zip(top, bottom) if a and b]
    if not pairs:
        return "-"
    return f"x{statistics.median(pairs):.2f} (x{min(pairs):.2f}-x{max(pairs):.2f})"


def median_text(values: List[Optional[float]]) -> str:
    kept = [v for v in values if v]
    return f"{statistics.median(kept):.3f}" if kept else "-"


def table(figures: Dict, failures: Dict) -> List[str]:
    """The table's lines: per runtime kbench's p50, its own tool's and the bare loop's
    medians (ms) and the ratios; then why a tool failed, where one did."""
    rows = [("runtime", "kbench p50", "own tool", "tool", "kbench/tool", "bare loop",
             "kbench/bare")]  # fmt: skip
    for runtime in RUNTIMES:
        ours, tool = figures[(runtime, "kbench")], figures[(runtime, "tool")]
        loop = figures.get((runtime, "bare"))
        rows.append((
            runtime, median_text(ours), TOOL_NAMES[runtime], median_text(tool),
            ratio_text(ours, tool), "(the tool)" if loop is None else median_text(loop),
            "-" if loop is None else ratio_text(ours, loop),
        ))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    lines += [f"  {runtime} {kind} failed: {why}" for (runtime, kind), why in failures.items()]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="small_cnn", help="a zoo model (default small_cnn)")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds (default 4)")
    parser.add_argument("--duration", type=float, default=2.0,
                        help="seconds each measurement runs (default 2)")  # fmt: skip
    parser.add_argument("--warmup", type=int, default=20, help="passes before timing (20)")
    parser.add_argument("--threads", type=int, default=1, help="every runtime's threads (1)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="runtime-tools-store-") as out:
        runner = Runner(output_dir=Path(out))
        exports = export_once(runner, args)
        input_shape = with_input_shape(exports["openvino-ir"])
        for runtime, export in exports.items():
            made = "from the cache" if export["reused"] else "exported now"
            print(f"{runtime}: {export['version']}, {export['path']} ({export['bytes']:,} "
                  f"bytes, {made})")  # fmt: skip
        figures, failures = rounds(runner, exports, args)
    print(
        f"\n{args.model}, batch 1 (input {input_shape}), {args.threads} thread(s), float32, "
        f"{args.rounds} interleaved rounds of about {args.duration:g} s per measurement; "
        "latency in ms, medians over rounds; ratios: median of the per-round ratios (range)"
    )
    print("\n".join(table(figures, failures)))


def with_input_shape(export: Dict[str, Any]) -> List[int]:
    """The batch-1 input shape of the exported IR (its batch dimension may be dynamic),
    kept in ``export`` for benchmark_app's ``-data_shape``."""
    import openvino  # the keras3 environment's, which runs this script

    shape = openvino.Core().read_model(export["path"]).inputs[0].get_partial_shape()
    export["input_shape"] = [d.get_length() if d.is_static else 1 for d in shape]
    return export["input_shape"]


if __name__ == "__main__":
    main()
