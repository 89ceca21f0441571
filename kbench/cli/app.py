"""``kbench``: the top-level parser, logging, and the errors that end a command."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from typing import Optional, Sequence

from kbench.cli import (
    exec_command,
    many_runs,
    ops,
    reproduce,
    run_commands,
    setup_command,
    tune_command,
)
from kbench.cli.arguments import EXAMPLES
from kbench.datasets import DataUnavailable
from kbench.facts import VERSION
from kbench.results.config import ConfigError, flag_for
from kbench.results.jsonfile import LinkRefused
from kbench.results.store import LockError, StoreError, StoreWriteError
from kbench.run import environments
from kbench.studies.slurm import SlurmError
from kbench.studies.sweep import SweepError

log = logging.getLogger("kbench")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kbench",
        description="Train the same Keras model under TensorFlow, JAX, PyTorch or MXNet, "
        "each in its own process, and compare throughput, accuracy and memory.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    parser.add_argument("--version", action="version", version=f"kbench {VERSION}")
    parser.add_argument("-v", "--verbose", action="store_true", help="show debug logging")
    parser.add_argument("-q", "--quiet", action="store_true", help="show only warnings, tables")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    run_commands.add_commands(commands)
    many_runs.add_commands(commands)
    ops.add_command(commands)
    reproduce.add_command(commands)
    exec_command.add_command(commands)
    tune_command.add_command(commands)
    setup_command.add_command(commands)
    return parser


def configure_logging(verbose: bool, quiet: bool) -> None:
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    root = logging.getLogger("kbench")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.verbose, args.quiet)
    # `kill` stops a command as Ctrl-C does: its worker is stopped, finished results stay.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return args.handler(args)
    except ConfigError as err:
        parser.exit(2, f"kbench {args.command}: error: {flag_for(err.setting)}: {err.message}\n")
    except (
        environments.EnvironmentMissing,
        DataUnavailable,
        SweepError,
        StoreError,
        LockError,  # another kbench writes to the same store
        LinkRefused,  # a link planted in a store
        SlurmError,  # sbatch or squeue failed, or answered what is no job id
    ) as err:
        parser.exit(2, f"kbench {args.command}: error: {err}\n")
    except StoreWriteError as err:  # a full disk: stop, having kept what finished
        log.error("kbench %s: stopped: %s", args.command, err)
        return 1
    except KeyboardInterrupt:
        log.warning(
            "interrupted: every run that finished is saved (a warm worker's too); those in "
            "progress were stopped and marked interrupted under logs/"
        )
        return 130
