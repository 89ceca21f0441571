"""Argument types and the flag of each concept, defined once and used by every command.

One concept, one flag: the results store is ``--store`` in every command, run selection
``--filter``, untimed warm-up iterations ``--warmup-steps``, and so on (:data:`CONCEPTS`).
A flag that was spelled otherwise keeps its old spelling for one release: hidden from
--help, parsed into the same place, with a warning naming the new one (:class:`Renamed`).
"""

from __future__ import annotations

import argparse
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

from kbench.backends.switches import SWITCHES
from kbench.measure import quality
from kbench.results.config import did_you_mean
from kbench_models.user import split_references

log = logging.getLogger(__name__)

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
  kbench sweep sweeps/lenet_epochs.yaml --reduced      a study declared in a file; resumable
  kbench compare --store results/lenet-epochs-reduced  backends side by side, also as Markdown
  kbench report --store results/lenet-epochs-reduced   one HTML file with the plots
"""


@dataclass(frozen=True)
class Concept:
    """A concept's one flag, the ``args`` attributes it fills (one per command family,
    kept as the commands read them), and its old spellings, accepted for one release."""

    flag: str
    dests: Tuple[str, ...]
    old: Tuple[str, ...] = ()


CONCEPTS = {
    "results store": Concept("--store", ("store",), ("--output-dir",)),
    "runs selected by settings": Concept("--filter", ("filter",), ("--only",)),
    "output file": Concept("--output", ("output",), ("--markdown",)),
    "fresh-process rounds": Concept("--repeats", ("repeats",)),
    "warm window length": Concept("--window", ("window_s",)),
    "settings tried": Concept("--try", ("only",)),
    "timed calls per operation": Concept("--calls", ("calls",), ("--repeats",)),
    "untimed warm-up iterations": Concept("--warmup-steps", ("warmup_steps",), ("--warmup",)),
    "backends": Concept("--backend", ("backend",)),
    "models": Concept("--model", ("model",)),
    "timeout": Concept("--timeout", ("timeout_s",)),
    "device": Concept("--device", ("device",)),
    "CPU threads": Concept("--threads", ("threads",)),
    "inter-op threads": Concept("--inter-op-threads", ("inter_op_threads",)),
    "sampler interval": Concept("--sample-interval", ("sample_interval_s",)),
    "seed": Concept("--seed", ("seed",)),
    "batch size": Concept("--batch-size", ("batch_size",)),
    "baseline backend": Concept("--baseline", ("baseline",)),
    "start no run": Concept("--dry-run", ("dry_run",), ("--no-run",)),
}


def renamed_warning(old: str, new: str) -> str:
    return f"{old} is renamed {new}; the old spelling goes in the next release"


class Renamed(argparse.Action):
    """The old spelling of a flag, accepted for one release: hidden from --help, it does
    what the new flag's action does (same type, same ``args`` attribute) and logs, once
    per command line, that it is renamed. Add it with :func:`add_renamed`."""

    def __init__(self, option_strings, dest, target: argparse.Action, **kwargs) -> None:
        kwargs.update(help=argparse.SUPPRESS, default=argparse.SUPPRESS)
        super().__init__(option_strings, dest, **kwargs)
        self.target = target
        self.new = target.option_strings[0]
        self._warned_for: Optional[argparse.Namespace] = None

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if self._warned_for is not namespace:
            self._warned_for = namespace
            log.warning("%s", renamed_warning(option_string or self.option_strings[0], self.new))
        self.target(parser, namespace, values, self.new)


def add_renamed(parser, old: str, target: argparse.Action) -> argparse.Action:
    """Accept ``old`` for the flag of ``target`` (an action ``add_argument`` returned)."""
    return parser.add_argument(
        old,
        action=Renamed,
        target=target,
        dest=target.dest,
        type=target.type,
        nargs=target.nargs,
        metavar=target.metavar,
    )


# The hint for a name given twice, in the commands that have --repeats.
AGAIN_WITH_REPEATS = "to run it again, use --repeats N"


def comma_list(
    allowed: Sequence[str],
    what: str,
    *,
    check: bool = False,
    single: bool = False,
    again: Optional[str] = None,
    split: Optional[Callable[[str], List[str]]] = None,
):
    """A comma-separated list (``split``: how to cut it, where a comma may belong to a
    name); a name given twice is refused, not merged: it is nearly
    always a slip (torch,torch for torch,torch-native), and merging it would hide that.
    Running a backend again is what --repeats does, rounds interleaved. ``check``: each
    name must be one of ``allowed`` (models are not checked: a path names the user's
    own); ``single``: exactly one name, returned as a string."""

    def parse(text: str):
        items = [item.strip() for item in (split or _commas)(text) if item.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"expected one or more {what}; received {text!r}")
        twice = next((item for i, item in enumerate(items) if item in items[:i]), None)
        if twice is not None:
            raise argparse.ArgumentTypeError(
                f"expected each of the {what} once; received {twice!r} twice in {text!r}. "
                "Drop the second one" + (f"; {again}" if again else "")
            )
        unknown = [item for item in items if check and item not in allowed]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"expected one of {', '.join(allowed)}; received {unknown[0]!r}."
                + did_you_mean(unknown[0], allowed)
            )
        if single and len(items) > 1:
            raise argparse.ArgumentTypeError(
                f"expected one of the {what}; received {len(items)} in {text!r}. "
                "This command takes one at a time: run it once for each"
            )
        return items[0] if single else items

    return parse


def _commas(text: str) -> List[str]:
    return text.split(",")


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


def add_output_arguments(
    parser: argparse.ArgumentParser, process: str = "worker", inter_op: bool = False
) -> None:
    """Where results go and how each run's ``process`` (the worker; kbench exec: the
    script's process tree) is run, timed out, sampled and shown devices; ``inter_op``:
    with ``--inter-op-threads`` (commands whose runs choose their backends' settings)."""
    add_store_argument(parser)
    add_threads_argument(parser)
    if inter_op:
        add_inter_op_threads_argument(parser)
    add_timeout_argument(parser, process=process)
    add_sample_interval_argument(parser, process)
    add_device_argument(parser, process)


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
        "threads, device, memory options and start-up switches --onednn, --tf32, "
        "--mxnet-gpus; the other switches are each run's own) in one, the framework imported "
        "once "
        "(each run still its own result, marked warm_worker after the first): much quicker "
        "for many models or settings; for checking that they run and compute, not for "
        f"comparing speeds, since a warm run is not measured as a fresh process{saved} "
        "(default: a fresh process per run)",
    )


def add_parity_check_argument(parser: argparse.ArgumentParser) -> None:
    """``--no-parity-check``: skip the check at warm-up that warm windows' backends compute
    the same thing (kbench.run.windows.plan_parity)."""
    parser.add_argument(
        "--no-parity-check",
        dest="parity_check",
        action="store_false",
        help="warm windows: skip the check that each backend computes what the baseline "
        "does (at warm-up, every Keras backend and native port starts from the baseline's "
        "initial weights and trains on the same batches; outputs and losses are compared "
        "with kbench parity's tolerance; default: checked, a backend that differs is "
        "measured and flagged)",
    )


def add_threads_argument(parser: argparse.ArgumentParser) -> None:
    """``--threads``, as run, sweep-like commands and ``kbench ops`` take it."""
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="CPU threads for every framework (intra/inter-op, OpenMP); fewer than the "
        "cores kbench may run on also pins the worker to that many cores (default: every "
        "core of kbench's CPU affinity, e.g. as taskset or a container's cpuset set it)",
    )


def add_inter_op_threads_argument(parser: argparse.ArgumentParser) -> None:
    """``--inter-op-threads``, as the commands that build run settings take it."""
    parser.add_argument(
        "--inter-op-threads",
        type=int,
        default=None,
        metavar="N",
        help="the framework's inter-op pool apart from --threads (TensorFlow "
        "set_inter_op_parallelism_threads, torch set_num_interop_threads; refused for jax "
        "and mxnet, which have no such pool to set) (default: --threads)",
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


def duration(text: str) -> float:
    """Seconds, written ``90``, ``90s``, ``10m`` or ``1h``."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    number, unit = (text[:-1], text[-1]) if text[-1:].lower() in units else (text, "s")
    try:
        value = finite(number) * units[unit.lower()]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 90, 90s, 10m or 1h; received {text!r}"
        ) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected more than 0 seconds; received {text!r}")
    return value


def add_ratio_precision_argument(
    parser, shows: str, default: Optional[float] = None
) -> argparse.Action:
    """``--ratio-precision P``: stop adding rounds once every per-round ratio's 95%
    interval is within +-P (kbench run, reproduce and tune; ``shows``: the rest of the help)."""
    return parser.add_argument(
        "--ratio-precision", type=precision, metavar="P", default=default, help=shows
    )


def add_ratio_budget_argument(parser, shows: str) -> argparse.Action:
    """``--ratio-budget SECONDS``: start no round after this many seconds (kbench run,
    sweep and reproduce; ``shows``: the rest of the help)."""
    return parser.add_argument(
        "--ratio-budget", type=budget, dest="ratio_budget_s", metavar="SECONDS", help=shows
    )


def add_window_argument(parser, default: Optional[float], shows: str) -> argparse.Action:
    """``--window SECONDS``: how long a warm worker's measuring window is (kbench run's
    interleaved windows, kbench tune's trials)."""
    return parser.add_argument(
        "--window",
        type=budget,
        dest="window_s",
        default=default,
        metavar="SECONDS",
        help=shows,
    )


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


def add_backend_argument(
    parser,
    allowed: Sequence[str],
    *,
    required: bool = False,
    single: bool = False,
    default_text: str = "",
    again: Optional[str] = None,
) -> argparse.Action:
    """``--backend``/``-b``: names checked against the command's ``allowed`` backends,
    each at most once; ``single``: exactly one, given as a string; ``again``: what a
    name given twice should be instead (:data:`AGAIN_WITH_REPEATS` where the command
    has ``--repeats``)."""
    names = ", ".join(allowed)
    return parser.add_argument(
        "--backend",
        "-b",
        type=comma_list(list(allowed), "backends", check=True, single=single, again=again),
        required=required,
        default=None,
        metavar="B" if single else "B[,B...]",
        help=(f"one of: {names}" if single else f"one or more of: {names}, comma-separated")
        + (f" ({default_text})" if default_text else ""),
    )


def add_model_argument(
    parser,
    allowed: Sequence[str],
    *,
    default=None,
    single: bool = False,
    default_text: str = "",
    own: str = "or your own: path/to/file.py:build",
    again: Optional[str] = None,
) -> argparse.Action:
    """``--model``/``-m``: zoo names or the user's own (a path), each at most once."""
    names = ", ".join(allowed)
    return parser.add_argument(
        "--model",
        "-m",
        type=comma_list(
            list(allowed), "models", single=single, again=again, split=split_references
        ),
        required=default is None,
        default=default,
        metavar="M" if single else "M[,M...]",
        help=(f"one of: {names}" if single else f"one or more of: {names}")
        + (f" ({default_text})" if default_text else "")
        + f"; {own}",
    )


def add_store_argument(
    parser,
    *,
    default=Path("results"),
    default_text: str = "./results",
    several: bool = False,
    holds: str = "one result JSON per run, an index, worker logs",
    renamed: bool = True,
) -> argparse.Action:
    """``--store DIR``: the results store a command writes, or reads (``several``: one or
    more read together). ``renamed``: the command spelled it ``--output-dir`` before,
    still accepted (the commands that write a store)."""
    if several:
        help = f"one or more result directories, read together (default: {default_text})"
    else:
        help = f"the results store: {holds} (default: {default_text})"
    action = parser.add_argument(
        "--store",
        type=Path,
        nargs="+" if several else None,
        default=[default] if several else default,
        metavar="DIR",
        help=help,
    )
    if renamed:
        add_renamed(parser, "--output-dir", action)
    return action


def add_filter_argument(parser, *, planned: bool = False) -> argparse.Action:
    """``--filter NAME=VALUE[,VALUE]`` (repeatable): runs selected by their settings,
    stored runs also by status, kind, host and sweep. ``planned``: the runs of a sweep
    file (kbench sweep, which spelled it ``--only`` before, still accepted)."""
    action = parser.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="NAME=VALUE[,VALUE]",
        help=f"{'run' if planned else 'keep'} only the runs whose setting NAME (backend, "
        f"model, batch_size, ...{'' if planned else '; or status, kind, host, sweep'}) is "
        "one of the values, e.g. backend=tensorflow,jax (repeatable: every filter must hold; "
        "default: every run)",
    )
    if planned:
        add_renamed(parser, "--only", action)
    return action


def add_output_file_argument(
    parser, what: str, default_text: str, *, renamed: bool = False
) -> argparse.Action:
    """``--output FILE``: the file a command writes (``renamed``: kbench compare, which
    spelled it ``--markdown`` before, still accepted)."""
    action = parser.add_argument(
        "--output", type=Path, metavar="FILE", help=f"{what} (default: {default_text})"
    )
    if renamed:
        add_renamed(parser, "--markdown", action)
    return action


def add_repeats_argument(
    parser, each: str = "everything", shows: str = "", default: Optional[int] = 1, default_text=""
) -> argparse.Action:
    """``--repeats N``: fresh-process rounds, interleaved."""
    return parser.add_argument(
        "--repeats",
        type=int,
        default=default,
        metavar="N",
        help=f"run {each} N times, each time in a fresh process, interleaved round by round "
        f"(A B C A B C ...){shows} (default: {default_text or default})",
    )


def add_calls_argument(parser, default: int) -> argparse.Action:
    """``--calls N``: timed calls of an operation (kbench ops; it was --repeats there)."""
    action = parser.add_argument(
        "--calls",
        type=int,
        default=default,
        metavar="N",
        help=f"timed calls per operation and size (default: {default})",
    )
    add_renamed(parser, "--repeats", action)
    return action


def add_warmup_argument(
    parser, default: int, steps: str, *, renamed: bool = False
) -> argparse.Action:
    """``--warmup-steps N``: untimed warm-up iterations; ``steps`` says what a step is
    here; ``renamed``: also accept --warmup (kbench ops spelled it so)."""
    action = parser.add_argument(
        "--warmup-steps",
        type=int,
        default=default,
        metavar="N",
        help=f"untimed warm-up steps before the timed ones ({steps}) (default: {default})",
    )
    if renamed:
        add_renamed(parser, "--warmup", action)
    return action


def add_timeout_argument(
    parser, *, default: float = 1800.0, process: str = "worker", keeps: str = ""
) -> argparse.Action:
    """``--timeout SECONDS`` for a run's ``process``."""
    return parser.add_argument(
        "--timeout",
        type=finite,
        default=default,
        dest="timeout_s",
        metavar="SECONDS",
        help=f"stop a run's {process} past this and record it as 'timeout'{keeps} "
        f"(default: {default:g})",
    )


def add_device_argument(parser, process: str = "worker") -> argparse.Action:
    return parser.add_argument(
        "--device",
        default="auto",
        metavar="auto|cpu|gpu",
        help=f"auto: whatever the framework picks; cpu: hide every GPU from the {process}; "
        "gpu: fail unless there is one (default: auto)",
    )


def add_sample_interval_argument(parser, process: str = "worker") -> argparse.Action:
    return parser.add_argument(
        "--sample-interval",
        type=finite,
        default=0.2,
        dest="sample_interval_s",
        metavar="SECONDS",
        help=f"how often the sampler reads the {process}'s CPU, memory and GPUs (NVML); "
        "0 turns it off (default: 0.2)",
    )


def add_seed_argument(parser, seeds: str = "data order and synthetic data") -> argparse.Action:
    return parser.add_argument(
        "--seed", type=int, default=0, metavar="N", help=f"seed of the {seeds} (default: 0)"
    )


def add_batch_size_argument(parser, default: int = 64, extra: str = "") -> argparse.Action:
    return parser.add_argument(
        "--batch-size",
        type=int,
        default=default,
        metavar="N",
        help=f"samples per step{extra} (default: {default})",
    )


def add_baseline_argument(parser, default_text: str = "the first backend") -> argparse.Action:
    return parser.add_argument(
        "--baseline",
        metavar="BACKEND",
        help=f"the backend speed ratios are against (default: {default_text})",
    )
