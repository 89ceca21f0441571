"""``kbench ops``: operator micro-benchmarks across backends (see :mod:`kbench.ops`)."""

from __future__ import annotations

import argparse
import logging
from typing import Any, Dict, List, Optional

from kbench.cli import arguments
from kbench.ops import runner
from kbench.ops.spec import DEFAULT_SIZES, DTYPES, MIN_SWEEP_SIZE, OPS, sizes_up_to
from kbench.ops.worker import IMPLEMENTATIONS
from kbench.results.config import ConfigError
from kbench.run import environments
from kbench.views.ops import ops_tables

log = logging.getLogger("kbench")


def _op_lines() -> str:
    width = max(len(name) for name in OPS)
    lines = [f"  {name:<{width}}  size n: {spec.size_meaning}" for name, spec in OPS.items()]
    return "\n".join(lines)


DEFAULT_SIZES_TEXT = ",".join(map(str, DEFAULT_SIZES))
DESCRIPTION = """\
Time single operations on each backend: tensor creation, activations, dot product,
GEMM, flatten, normalization, 2-D convolution forward and backward, dense backward and
an LSTM cell step, over a sweep of sizes. TensorFlow, JAX and PyTorch run one
definition written with keras.ops; torch-native runs plain PyTorch; mxnet runs mx.nd
(with mx.autograd for the backward operations). Each backend runs in its own worker
process, with the thread and device settings of `kbench run`.

Before it is timed, every operation at every size is checked against a float64 numpy
reference computed from the same seeded inputs: each output must be within
rtol x scale of it (rtol grows with the number of terms summed into an output; scale
is the output's magnitude). A MISMATCH is reported and not timed. Then each operation
runs --warmup-steps times, and --calls times on the clock, each call ending only when the
device is done (block_until_ready, torch.cuda.synchronize, mx.nd.waitall, TensorFlow's
sync_devices); the table shows the median and p10-p90. GEMM, convolutions, dense
backward and the LSTM cell also get GFLOP/s and, on the CPU, their share of the
machine's measured float32 matrix-multiply peak.

One result per backend (kind "ops") goes to --store, with every call's time.
"""

EPILOG = f"""\
operations and what the size n means for each:
{_op_lines()}

examples:
  kbench ops                                        every op and backend, sizes {DEFAULT_SIZES_TEXT}
  kbench ops --backend jax,torch-native --ops gemm,conv2d --sizes 128,256
  kbench ops --max-size 2048 --max-memory 4096      powers of two from {MIN_SWEEP_SIZE} to 2048
  kbench ops --backend mxnet --device cpu --threads 1 --calls 30
  kbench ops --dtype float64 --ops gemm,dot         float64 (JAX gets JAX_ENABLE_X64=1)
"""


def add_command(commands: Any) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "ops", help="operator micro-benchmarks (GEMM, convolution, activations, ...) per backend",
        description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    arguments.add_backend_argument(
        parser, list(IMPLEMENTATIONS),
        default_text="default: every one whose environment exists",
    )  # fmt: skip
    _add_operation_arguments(parser)
    parser.add_argument(
        "--calls", type=int, default=runner.DEFAULT_REPEATS, metavar="N",
        help=f"timed calls per operation and size (default: {runner.DEFAULT_REPEATS})",
    )  # fmt: skip
    arguments.add_settings(
        parser,
        ["warmup_steps", "seed", "device", "threads"],
        defaults={"warmup_steps": runner.DEFAULT_WARMUP},
        words={"steps": "steps: calls of the operation, after the check's call",
               "seeds": "inputs"},
    )  # fmt: skip
    arguments.add_settings(
        parser,
        arguments.PRECISION_SETTINGS,
        words={"unit": "calls of each operation at each size",
               "limit": "--calls calls (the most it makes)"},
    )  # fmt: skip
    arguments.add_settings(
        parser,
        ["timeout_s"],
        defaults={"timeout_s": runner.DEFAULT_TIMEOUT_S},
        words={"process": "worker (one per backend, all its operations together)",
               "keeps": ", keeping what it finished"},
    )  # fmt: skip
    arguments.add_store_argument(parser, holds="one result JSON per backend, an index, worker logs")
    parser.set_defaults(handler=command_ops)
    return parser


def _add_operation_arguments(parser: argparse.ArgumentParser) -> None:
    """Which operations ``kbench ops`` times, at which sizes and in which dtype."""
    parser.add_argument(
        "--ops", "--op", dest="ops", default=None, metavar="NAMES",
        help="comma-separated operations, listed below (default: all)",
    )  # fmt: skip
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument(
        "--sizes", default=None, metavar="N,N,...",
        help=f"sizes to sweep (default: {','.join(map(str, DEFAULT_SIZES))}); what n means per "
        "operation is listed below",
    )  # fmt: skip
    sizes.add_argument(
        "--max-size", type=int, default=None, metavar="N",
        help=f"sweep the powers of two from {MIN_SWEEP_SIZE} up to N instead",
    )  # fmt: skip
    parser.add_argument(
        "--max-memory", type=arguments.finite, default=runner.DEFAULT_MAX_MEMORY_MB, metavar="MIB",
        help="skip an operation at a size whose estimated memory (inputs, outputs, the "
        f"float64 reference) is above MIB; it is reported SKIPPED "
        f"(default: {runner.DEFAULT_MAX_MEMORY_MB:g})",
    )  # fmt: skip
    parser.add_argument(
        "--dtype", default="float32", help=f"one of {', '.join(DTYPES)} (default: float32)"
    )


def parse_sizes(text: Optional[str], max_size: Optional[int]) -> List[Any]:
    """--max-size's powers of two, else --sizes (a word that is no integer is kept for
    :class:`~kbench.ops.runner.OpsConfig` to refuse), each once."""
    if max_size is not None:
        if max_size <= 0:
            raise ConfigError("max_size", f"expected a positive integer; received {max_size}.")
        return list(sizes_up_to(max_size))
    if text is None:
        return list(DEFAULT_SIZES)
    items = [item.strip() for item in text.split(",")]
    return list(dict.fromkeys(int(i) if i.lstrip("-").isdigit() else i for i in items))


def configs_from_args(args: argparse.Namespace) -> List[runner.OpsConfig]:
    """Validated configs, one per backend; raises ConfigError for bad input (naming
    --calls for the config's ``repeats``)."""
    backends = args.backend  # names checked, each once, by the --backend type
    if backends is None:
        runnable = environments.runnable_backends()
        backends = [name for name in IMPLEMENTATIONS if runnable.get(name, "absent") is None]
        if not backends:
            raise ConfigError(
                "backend",
                "expected at least one backend environment; none exists. Create them with "
                f"{environments.setup_command()}.",
            )
    given = ",".join(OPS) if args.ops is None else args.ops
    ops = [op.strip() for op in given.split(",") if op.strip()]
    settings: Dict[str, Any] = dict(
        ops=ops,
        sizes=parse_sizes(args.sizes, args.max_size),
        dtype=args.dtype,
        repeats=args.calls,
        max_memory_mb=args.max_memory,
        **{"warmup" if name == "warmup_steps" else name: value
           for name, value in arguments.settings_of(args).items()},
    )  # fmt: skip
    try:
        return [runner.OpsConfig(backend=backend, **settings) for backend in backends]
    except ConfigError as err:
        if err.setting != "repeats":
            raise
        raise ConfigError("calls", err.message) from None


def show_progress(config: runner.OpsConfig, event: Dict[str, Any]) -> None:
    """A line for each operation a worker finished."""
    if event.get("event") != "op":
        return
    text = f"    {config.backend}: {event['op']} {event['size']}: {event['status']}"
    if event.get("median_s") is not None:
        text += f", median {event['median_s'] * 1e3:.3g} ms"
    elif event.get("reason"):
        text += f" ({event['reason']})"
    log.info("%s", text)


def command_ops(args: argparse.Namespace) -> int:
    configs = configs_from_args(args)
    results = runner.run_ops(configs, args.store, on_progress=show_progress)
    for table in ops_tables(results):
        print(table.text())
        print()
    print(f"{len(results)} result(s) in {args.store}/, worker logs in {args.store}/logs/")
    bad = [r for r in results if not r.ok]
    for result in bad:
        print(f"  {result.config['backend']}/ops: {result.status}: {result.reason}")
    mismatched = [
        f"{r.config['backend']} {e['op']} {e['size']}"
        for r in results
        for e in r.metrics.get("ops", [])
        if e["status"] in ("mismatch", "failed")
    ]
    if mismatched:
        print(f"  mismatched or failed operations: {', '.join(mismatched)}")
    return 1 if bad or mismatched else 0
