"""The flags of kbench's commands, each defined once and used by every command.

A run setting's flag is its :class:`~kbench.results.config.RunConfig` field's:
:func:`add_settings` builds it from the field's metadata and :func:`settings_of` copies
what was parsed back by the same names, so a flag, its setting and the flag an error
names (:func:`kbench.results.config.flag_for`) cannot drift apart. Every other concept
that several commands share (``--store``, ``--filter``, ``--backend``, ...) has one
helper here.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from kbench.backends.switches import SWITCHES
from kbench.measure import quality
from kbench.results.config import (
    TextError,
    default_of,
    did_you_mean,
    flag_for,
    parse_half_width,
    parse_number,
    parse_seconds,
    settings,
)
from kbench_models.user import split_references

EXAMPLES = """\
examples:
  kbench demo                                   MLP and small CNN on every backend
  kbench run --backend jax --model small_cnn    one run, results in ./results
  kbench run --backend tensorflow,jax,torch,mxnet --model mlp
                                                compared in warm windows, ratios with intervals
  kbench run -b tensorflow,jax --model mlp --repeats 3 --epochs 2
                                                3 fresh runs of 2 epochs each, round by round
  kbench run --backend torch --model small_cnn --data-format channels_first
  kbench run --backend mxnet --model mlp --dataset synthetic --input-shape 32x32x3 --steps 50
  kbench run -b tensorflow,jax,torch,mxnet --model my_model.py:build --dataset npz:data.npz
                                                your own model file and arrays
  kbench env                                    what is installed, which backends run
  kbench sweep sweeps/lenet_epochs.yaml --reduced      a study declared in a file; resumable
  kbench compare --store results/lenet-epochs-reduced  backends side by side, also as Markdown
  kbench report --store results/lenet-epochs-reduced   one HTML file with the plots
"""


# The hint for a name given twice, in the commands that have --repeats.
AGAIN_WITH_REPEATS = "to run it again, use --repeats N"


def comma_list(
    allowed: Sequence[str], what: str, *, check: bool = False, single: bool = False,
    again: Optional[str] = None, split: Optional[Callable[[str], List[str]]] = None,
):  # fmt: skip
    """A comma-separated list (``split``: how to cut it, where a comma may belong to a
    name). A name given twice is refused, not merged: it is nearly always a slip
    (torch,torch for torch,torch-native), and running a backend again is what --repeats
    does. ``check``: each name must be one of ``allowed`` (not models: a path names the
    user's own); ``single``: exactly one name, returned as a string."""

    def parse(text: str):
        pieces = split(text) if split else text.split(",")
        items = [item.strip() for item in pieces if item.strip()]
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


# Where results go and how each run's process is run, timed out, sampled and shown
# devices; the memory options; the switches; precision on request.
OUTPUT_SETTINGS = ("threads", "timeout_s", "sample_interval_s", "device")
MEMORY_SETTINGS = ("gpu_memory_fraction", "gpu_memory_growth")
SWITCH_SETTINGS = tuple(SWITCHES)
PRECISION_SETTINGS = ("target_precision", "time_budget_s")
# The attribute of a command's parsed arguments that lists its run settings.
SETTING_NAMES = "run_settings"


def text_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """``parse`` as an argparse type: its :class:`~kbench.results.config.TextError`
    shown as argparse shows a bad value; ``int`` left as it is (argparse says "invalid
    int value")."""
    if parse in (int, str):
        return parse

    def typed(text: str) -> Any:
        try:
            return parse(text)
        except TextError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    typed.__name__ = parse.__name__
    return typed


finite = text_type(parse_number)
precision = text_type(parse_half_width)
budget = text_type(parse_seconds)


def add_settings(
    parser, names: Sequence[str], *, defaults: Optional[Mapping[str, Any]] = None,
    helps: Optional[Mapping[str, str]] = None, words: Optional[Mapping[str, str]] = None,
) -> None:  # fmt: skip
    """The flags of the run settings ``names`` (:class:`~kbench.results.config.RunConfig`
    fields), each as its field's :class:`~kbench.results.config.Setting` says, in the
    section it names (``parser`` may be an argument group: the flags go in it).
    ``defaults`` and ``helps``: where a command means its own by a setting (kbench
    parity's 3 SGD steps; a help that says "(default" says its own); ``words`` fill the
    ``{word}``s of the helps. The names are recorded on the parser for
    :func:`settings_of`."""
    defaults, helps = defaults or {}, helps or {}
    exclusive: Dict[str, Any] = {}
    for name in names:
        about = settings()[name]
        if about.help is None:
            raise ValueError(f"add_settings: {name} has no flag of its own")
        default = defaults.get(name, default_of(name))
        where = _section(parser, about.group)
        if about.exclusive is not None:
            if about.exclusive not in exclusive:
                exclusive[about.exclusive] = where.add_mutually_exclusive_group()
            where = exclusive[about.exclusive]
        text = helps.get(name, about.help).format_map({**dict(about.words), **(words or {})})
        options: Dict[str, Any] = {"dest": name, "default": default}
        if isinstance(default_of(name), bool):
            where.add_argument(flag_for(name), action="store_true", help=text, **options)
            continue
        shown = about.default_text if name not in defaults else None
        shown = shown or (f"{default:g}" if isinstance(default, float) else default)
        if shown is not None and "(default" not in text:  # else the help says its own
            text += f" (default: {shown})"
        parse = about.parse or str
        where.add_argument(
            flag_for(name), type=text_type(parse), metavar=about.metavar, help=text, **options
        )
    recorded = parser.get_default(SETTING_NAMES) or ()  # a group's are its parser's
    parser.set_defaults(**{SETTING_NAMES: (*recorded, *names)})


def _section(parser, title: Optional[str]):
    """The argument group titled ``title`` of ``parser``, made once; ``parser`` itself
    for no title (or when it is a group already)."""
    if title is None or not isinstance(parser, argparse.ArgumentParser):
        return parser
    found = [g for g in parser._action_groups if g.title == title]
    return found[0] if found else parser.add_argument_group(title)


def settings_of(args: argparse.Namespace) -> Dict[str, Any]:
    """The run settings a command's flags gave, by setting name (the copy of parsed
    flags into a config: ``RunConfig(backend=..., model=..., **settings_of(args))``)."""
    return {name: getattr(args, name) for name in getattr(args, SETTING_NAMES, ())}


def add_output_arguments(
    parser: argparse.ArgumentParser, process: str = "worker", inter_op: bool = False
) -> None:
    """Where results go and how each run's ``process`` (the worker; kbench exec: the
    script's process tree) is run, timed out, sampled and shown devices; ``inter_op``:
    with ``--inter-op-threads`` (commands whose runs choose their backends' settings)."""
    add_store_argument(parser)
    names = OUTPUT_SETTINGS[:1] + ("inter_op_threads",) * inter_op + OUTPUT_SETTINGS[1:]
    add_settings(parser, names, words={"process": process})


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
        "--busy-threshold", type=share, default=quality.BUSY_THRESHOLD, metavar="SHARE",
        help="flag a run when other processes used more than this share of the cores it "
        f"was given during its measured window (default: {quality.BUSY_THRESHOLD}); the "
        "same share makes the one-second look before the first run warn",
    )  # fmt: skip
    group.add_argument(
        "--wait-quiet", type=seconds, default=0.0, metavar="SECONDS",
        help="if the machine is busy before the first run, wait up to this long for it to "
        "quieten (default: 0, warn and go on)",
    )  # fmt: skip


def add_warm_argument(parser: argparse.ArgumentParser, saved: str = "") -> None:
    """``--warm``, as run and sweep take it; ``saved``: when the command saves warm results."""
    parser.add_argument(
        "--warm", action="store_true",
        help="run the runs that can share a worker process (same backend, data format, "
        "threads, device, memory options and start-up switches --onednn, --tf32, "
        "--mxnet-gpus; the other switches are each run's own) in one, the framework imported "
        "once "
        "(each run still its own result, marked warm_worker after the first): much quicker "
        "for many models or settings; for checking that they run and compute, not for "
        f"comparing speeds, since a warm run is not measured as a fresh process{saved} "
        "(default: a fresh process per run)",
    )  # fmt: skip


def add_parity_check_argument(parser: argparse.ArgumentParser) -> None:
    """``--no-parity-check``: skip the check at warm-up that warm windows' backends compute
    the same thing (kbench.run.windows.plan_parity)."""
    parser.add_argument(
        "--no-parity-check", dest="parity_check", action="store_false",
        help="warm windows: skip the check that each backend computes what the baseline "
        "does (at warm-up, every Keras backend and native port starts from the baseline's "
        "initial weights and trains on the same batches; outputs and losses are compared "
        "with kbench parity's tolerance; default: checked, a backend that differs is "
        "measured and flagged)",
    )  # fmt: skip


MAX_DURATION_S = 7 * 86400.0  # a week: past it, a typo (or 1e308h, which is infinite)


def duration(text: str) -> float:
    """Seconds, written ``90``, ``90s``, ``10m`` or ``1h``, at most :data:`MAX_DURATION_S`."""
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
    if not value <= MAX_DURATION_S:  # the product checked: 1e308 hours is infinite
        raise argparse.ArgumentTypeError(
            f"expected at most a week ({MAX_DURATION_S:g} s); received {text!r} ({value:g} s)"
        )
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


def add_backend_argument(
    parser, allowed: Sequence[str], *, required: bool = False, single: bool = False,
    default_text: str = "", again: Optional[str] = None,
) -> argparse.Action:  # fmt: skip
    """``--backend``/``-b``: names checked against the command's ``allowed`` backends,
    each at most once; ``single``: exactly one, given as a string; ``again``: what a
    name given twice should be instead (:data:`AGAIN_WITH_REPEATS` where the command
    has ``--repeats``)."""
    names = ", ".join(allowed)
    return parser.add_argument(
        "--backend", "-b",
        type=comma_list(list(allowed), "backends", check=True, single=single, again=again),
        required=required, default=None, metavar="B" if single else "B[,B...]",
        help=(f"one of: {names}" if single else f"one or more of: {names}, comma-separated")
        + (f" ({default_text})" if default_text else ""),
    )  # fmt: skip


def add_model_argument(
    parser, allowed: Sequence[str], *, default=None, single: bool = False, default_text: str = "",
    own: str = "or your own: path/to/file.py:build", again: Optional[str] = None,
) -> argparse.Action:  # fmt: skip
    """``--model``/``-m``: zoo names or the user's own (a path), each at most once."""
    names = ", ".join(allowed)
    parse = comma_list(list(allowed), "models", single=single, again=again, split=split_references)
    return parser.add_argument(
        "--model", "-m", type=parse,
        required=default is None, default=default, metavar="M" if single else "M[,M...]",
        help=(f"one of: {names}" if single else f"one or more of: {names}")
        + (f" ({default_text})" if default_text else "")
        + f"; {own}",
    )  # fmt: skip


def add_store_argument(
    parser, *, default=Path("results"), default_text: str = "./results", several: bool = False,
    holds: str = "one result JSON per run, an index, worker logs",
) -> argparse.Action:  # fmt: skip
    """``--store DIR``: the results store a command writes, or reads (``several``: one or
    more read together)."""
    if several:
        help = f"one or more result directories, read together (default: {default_text})"
    else:
        help = f"the results store: {holds} (default: {default_text})"
    return parser.add_argument(
        "--store", type=Path, nargs="+" if several else None,
        default=[default] if several else default, metavar="DIR", help=help,
    )  # fmt: skip


def add_filter_argument(parser, *, planned: bool = False) -> argparse.Action:
    """``--filter NAME=VALUE[,VALUE]`` (repeatable): runs selected by their settings,
    stored runs also by status, kind, host and sweep. ``planned``: the runs of a sweep
    file (kbench sweep)."""
    return parser.add_argument(
        "--filter", action="append", default=[], metavar="NAME=VALUE[,VALUE]",
        help=f"{'run' if planned else 'keep'} only the runs whose setting NAME (backend, "
        f"model, batch_size, ...{'' if planned else '; or status, kind, host, sweep'}) is "
        "one of the values, e.g. backend=tensorflow,jax (repeatable: every filter must hold; "
        "default: every run)",
    )  # fmt: skip


def add_output_file_argument(parser, what: str, default_text: str) -> argparse.Action:
    """``--output FILE``: the file a command writes."""
    return parser.add_argument(
        "--output", type=Path, metavar="FILE", help=f"{what} (default: {default_text})"
    )


def add_repeats_argument(
    parser, each: str = "everything", shows: str = "", default: Optional[int] = 1, default_text=""
) -> argparse.Action:
    """``--repeats N``: fresh-process rounds, interleaved."""
    return parser.add_argument(
        "--repeats", type=int, default=default, metavar="N",
        help=f"run {each} N times, each time in a fresh process, interleaved round by round "
        f"(A B C A B C ...){shows} (default: {default_text or default})",
    )  # fmt: skip


def add_baseline_argument(parser, default_text: str = "the first backend") -> argparse.Action:
    return parser.add_argument(
        "--baseline", metavar="BACKEND",
        help=f"the backend speed ratios are against (default: {default_text})",
    )  # fmt: skip
