"""``kbench exec``: your own training script, unchanged, under each backend."""

from __future__ import annotations

import argparse
import logging

from kbench.cli import arguments
from kbench.exec.environment import EXEC_BACKENDS, ExecConfig
from kbench.exec.runner import ExecRunner
from kbench.measure import sysinfo
from kbench.results.config import ConfigError
from kbench.run.protocol import show_progress
from kbench.views import tables

log = logging.getLogger("kbench")

DESCRIPTION = """\
Run your own command (usually `python train.py ARGS`) once per --backend, each in its
own process tree, and measure it as `kbench run` measures its worker. A leading
`python` is replaced by the backend's interpreter (envs/keras3 or envs/mxnet); the
process gets KERAS_BACKEND, a fresh KERAS_HOME with keras_configs/<backend>.json, the
thread variables and --device hiding. The sampler watches the whole tree (CPU, RSS,
GPU through NVML). Results are ordinary documents (kind "exec") that `kbench results`,
`compare` and `report` read; logs go to STORE/logs/ (--store): the first 64 MiB of
the output, then its last lines (the result's metrics.log says where it was cut).

Without any change to the script, kbench instruments Keras in the child: a
sitecustomize.py on its PYTHONPATH (kbench/exec/site) wraps Model.fit, evaluate and
predict as Keras is imported, adding kbench.callbacks.Throughput beside your own
callbacks. It reports img/s over the measured window (the first --warmup-steps
batches of the first fit excluded), step-time percentiles, epochs, the final loss and
accuracy, the parameter count and the backend Keras reported. Keras 3 (tensorflow,
jax, torch) and keras-mxnet 2.2.4 both work. A script that only predicts (or
evaluates) is measured over those batches; one that does neither is recorded with its
process figures and "no Keras training observed". Your ~/.keras/datasets (or
$KERAS_HOME/datasets) is seen read-only from the run's KERAS_HOME. Each epoch is
shown as it ends, read from the instrumentation's own events file (never from the
script's output, so Keras' progress bar and the script's prints stay as they are).

The script's time ends when its own process exits. Whatever it started is then
stopped: its process group, its session, and any process that carries the run's
token in its environment (a daemon that called setsid and closed its streams
included); the result lists them (metrics.processes_stopped). A command that is
neither python nor an existing program is refused (exit 2) before any run.

A non-zero exit is recorded as failed (exit code, the exception line of the last
traceback, log tail; what it measured before is kept, shown as partial), one past --timeout as
timeout (the whole tree killed); the other runs go on. Ctrl-C stops the tree and keeps
the finished results. Exits 1 if a run failed or timed out, 2 on bad input.
"""

EXAMPLES = """\
examples:
  kbench exec -b tensorflow,jax,torch,mxnet -- python train.py --epochs 1
  kbench exec -b jax,torch --repeats 3 --threads 4 --name mnist -- python train.py
  kbench exec -b tensorflow --device cpu --timeout 600 -- python -m mypkg.train
  kbench compare                                 the exec runs beside each other
"""


def add_command(commands) -> None:
    parser = commands.add_parser(
        "exec", help="run your own training script under each backend, measured",
        description=DESCRIPTION, epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    arguments.add_backend_argument(
        parser, list(EXEC_BACKENDS), required=True, again=arguments.AGAIN_WITH_REPEATS
    )
    arguments.add_repeats_argument(parser, "the script on each backend")
    arguments.add_output_arguments(parser, process="script's process tree")
    arguments.add_settings(parser, arguments.MEMORY_SETTINGS)
    arguments.add_settings(
        parser, ["warmup_steps"], words={"steps": "the first batches of the script's first fit"}
    )
    parser.add_argument(
        "--no-instrument", dest="instrument", action="store_false",
        help="do not wrap Keras in the script: process figures (CPU, memory, GPU, wall "
        "time, exit code) only",
    )  # fmt: skip
    parser.add_argument(
        "--name", help="the name results show for the script (default: its file name)",
    )  # fmt: skip
    parser.add_argument(
        "script_command",  # not "command": the CLI names the subcommand by that
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND ...",
        help="the command to run, after `--`: python train.py ARGS",
    )
    parser.set_defaults(handler=command_exec)


def command_exec(args: argparse.Namespace) -> int:
    command = list(args.script_command)
    if command[:1] == ["--"]:
        command = command[1:]
    if args.repeats < 1:
        raise ConfigError("repeats", f"expected a positive integer; received {args.repeats}.")
    if args.device == "gpu" and not (sysinfo.machine().get("gpu") or {}).get("devices"):
        raise ConfigError(
            "device",
            "expected a machine with an NVIDIA GPU for --device gpu; NVML lists none here. "
            "Use --device auto or cpu.",
        )
    shared = dict(
        command=tuple(command), name=args.name, instrument=args.instrument,
        **arguments.settings_of(args),
    )  # fmt: skip
    # Round by round, so that drift of the machine hits every backend alike.
    configs = [
        ExecConfig(backend=backend, repeat=repeat, **shared)
        for repeat in range(args.repeats)
        for backend in args.backend
    ]
    runner = ExecRunner(output_dir=args.store, on_progress=show_progress)
    results = runner.run_all(configs)
    print(tables.run_table(results))
    trained = [r for r in results if r.ok and r.metrics.get("images_per_sec") is not None]
    if len(trained) > 1:
        print()
        print(tables.comparison_tables(results))
    print(f"\n{len(results)} result(s) in {args.store}/, logs in {args.store}/logs/")
    for line in tables.not_ok_lines(results):
        print(line)
    return 1 if any(r.failed for r in results) else 0
