"""Argument types and groups that several commands share."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import List, Sequence

from kbench.backends.switches import SWITCHES
from kbench.measure import quality

EXAMPLES = """\
examples:
  kbench demo                                   MLP and small CNN on every backend
  kbench run --backend jax --model small_cnn    one run, results in ./results
  kbench run --backend tensorflow,jax,torch,mxnet --model mlp --epochs 3
  kbench run --backend torch --model small_cnn --data-format channels_first
  kbench run --backend mxnet --model mlp --dataset synthetic --input-shape 32x32x3 --steps 50
  kbench run -b tensorflow,jax,torch,mxnet --model my_model.py:build --dataset npz:data.npz
                                                your own model file and arrays
  kbench env                                    what is installed, which backends run
  kbench sweep sweeps/lenet.yaml --reduced      a study declared in a file; resumable
  kbench compare --store results/lenet-reduced  backends side by side, also as Markdown
  kbench report --store results/lenet-reduced   one HTML file with the plots
"""


def comma_list(allowed: Sequence[str], what: str):
    """A comma-separated list; a name given twice is refused, not merged: it is nearly
    always a slip (torch,torch for torch,torch-native), and merging it would hide that.
    Running a backend again is what --repeats does, rounds interleaved."""

    def parse(text: str) -> List[str]:
        items = [item.strip() for item in text.split(",") if item.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"expected one or more {what}; received {text!r}")
        twice = next((item for i, item in enumerate(items) if item in items[:i]), None)
        if twice is not None:
            raise argparse.ArgumentTypeError(
                f"expected each of the {what} once; received {twice!r} twice in {text!r}. "
                "Drop the second one; to run it again, use --repeats N"
            )
        return items  # values are checked by RunConfig, which suggests close matches

    return parse


def finite(text: str) -> float:
    """A float that is a number: argparse's ``float`` takes nan and inf."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number; received {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(
            f"expected a finite number; received {text!r}, which is not one"
        )
    return value


def shape(text: str):
    try:
        return tuple(int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected HEIGHTxWIDTH or HEIGHTxWIDTHxCHANNELS, for example 32x32x3; "
            f"received {text!r}"
        ) from None


def add_output_arguments(parser: argparse.ArgumentParser, process: str = "worker") -> None:
    """Where results go and how each run's ``process`` (the worker; kbench exec: the
    script's process tree) is run, timed out, sampled and shown devices."""
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=Path("results"),
        help="where result JSON files (one per run, plus an index) and worker logs go "
        "(default: ./results)",
    )
    add_threads_argument(parser)
    parser.add_argument(
        "--timeout",
        type=finite,
        default=1800.0,
        dest="timeout_s",
        metavar="SECONDS",
        help=f"stop a run's {process} past this and record it as 'timeout' (default: 1800)",
    )
    parser.add_argument(
        "--sample-interval",
        type=finite,
        default=0.2,
        dest="sample_interval_s",
        metavar="SECONDS",
        help=f"how often the sampler reads the {process}'s CPU, memory and GPUs (NVML); "
        "0 turns it off (default: 0.2)",
    )
    parser.add_argument(
        "--device",
        default="auto",
        help=f"auto: whatever the framework picks; cpu: hide every GPU from the {process}; "
        "gpu: fail unless there is one (default: auto)",
    )


def add_memory_arguments(parser: argparse.ArgumentParser) -> None:
    memory = parser.add_argument_group("GPU memory options (recorded in every result)")
    memory.add_argument(
        "--gpu-memory-fraction",
        type=finite,
        metavar="F",
        help="cap each framework at F of GPU memory: TensorFlow logical device limit, PyTorch "
        "set_per_process_memory_fraction, JAX XLA_PYTHON_CLIENT_MEM_FRACTION, MXNet "
        "MXNET_GPU_MEM_POOL_RESERVE (approximate)",
    )
    memory.add_argument(
        "--gpu-memory-growth",
        action="store_true",
        help="allocate GPU memory on demand: TensorFlow memory growth, JAX no preallocation",
    )


def add_switch_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "optimization switches (recorded in every result; 'not applicable' where a backend "
        "has no such thing)"
    )
    for name, switch in SWITCHES.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(switch.default, bool):
            group.add_argument(flag, action="store_true", help=switch.help)
        elif switch.is_count:
            group.add_argument(
                flag, type=int, default=switch.default, metavar="N",
                help=f"{switch.help} (default: {switch.default})",
            )  # fmt: skip
        else:
            group.add_argument(
                flag,
                default=switch.default,
                metavar="|".join(switch.choices),
                help=f"{switch.help} (default: {switch.default})",
            )


def share(text: str) -> float:
    """A share above 0 and at most 1 (0.25 is a quarter)."""
    value = finite(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(
            f"expected a share above 0 and at most 1, for example 0.25 for a quarter; "
            f"received {text!r}"
        )
    return value


def seconds(text: str) -> float:
    value = finite(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more seconds; received {text!r}")
    return value


def add_quality_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "a busy machine (other processes, throttling, battery): flagged in every table"
    )
    group.add_argument(
        "--busy-threshold",
        type=share,
        default=quality.BUSY_THRESHOLD,
        metavar="SHARE",
        help="flag a run when other processes used more than this share of the cores it "
        f"was given during its measured window (default: {quality.BUSY_THRESHOLD}); the "
        "same share makes the one-second look before the first run warn",
    )
    group.add_argument(
        "--wait-quiet",
        type=seconds,
        default=0.0,
        metavar="SECONDS",
        help="if the machine is busy before the first run, wait up to this long for it to "
        "quieten (default: 0, warn and go on)",
    )


def add_warm_argument(parser: argparse.ArgumentParser, saved: str = "") -> None:
    """``--warm``, as run and sweep take it; ``saved``: when the command saves warm results."""
    parser.add_argument(
        "--warm",
        action="store_true",
        help="run the runs that can share a worker process (same backend, data format, "
        "threads, device, memory options and switches) in one, the framework imported once "
        "(each run still its own result, marked warm_worker after the first): much quicker "
        "for many models or settings; for checking that they run and compute, not for "
        f"comparing speeds, since a warm run is not measured as a fresh process{saved} "
        "(default: a fresh process per run)",
    )


def add_threads_argument(parser: argparse.ArgumentParser) -> None:
    """``--threads``, as run, sweep-like commands and ``kbench ops`` take it."""
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads for every framework (intra/inter-op, OpenMP); fewer than the "
        "cores kbench may run on also pins the worker to that many cores (default: every "
        "core of kbench's CPU affinity, e.g. as taskset or a container's cpuset set it)",
    )


def precision(text: str) -> float:
    """A relative half-width above 0 and below 1 (0.02 is +-2%)."""
    value = finite(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(
            f"expected a relative half-width above 0 and below 1, for example 0.02 for "
            f"+-2%; received {text!r}"
        )
    return value


def budget(text: str) -> float:
    value = finite(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected more than 0 seconds; received {text!r}")
    return value


def add_precision_arguments(parser: argparse.ArgumentParser, unit: str, limit: str) -> None:
    """``--target-precision`` and ``--time-budget`` (kbench.measure.precision): ``unit`` is
    what is measured, ``limit`` what bounds it without them."""
    group = parser.add_argument_group(
        "precision on request (the result records the interval reached and why it stopped)"
    )
    group.add_argument(
        "--target-precision",
        type=precision,
        metavar="P",
        help=f"keep measuring {unit} until the median throughput's 95%% confidence interval "
        "(order statistics, distribution-free) is within +-P of it, e.g. 0.02; stops "
        f"earlier when --time-budget is spent or at {limit} (default: off)",
    )
    group.add_argument(
        "--time-budget",
        type=budget,
        dest="time_budget_s",
        metavar="SECONDS",
        help=f"stop measuring {unit} after this many seconds, precision reached or not "
        "(default: none)",
    )
