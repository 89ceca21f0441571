"""``kbench tune``: each backend at its best, then the backends compared at their best."""

from __future__ import annotations

import argparse
import json

from kbench.backends import BACKENDS
from kbench.cli import arguments
from kbench.results.config import RunConfig
from kbench.studies import rounds as studies_rounds
from kbench.studies import tune as studies_tune
from kbench.views import tune as tune_view
from kbench_models import MODELS

DESCRIPTION = """\
For each --backend, search the settings that apply to it on this machine (XLA or
jit_compile on and off, eager, TensorFlow's oneDNN kernels, the other data format,
bfloat16 where the CPU computes it, Gluon's hybridize, torch.compile, half the threads,
one inter-op thread for TensorFlow and torch; the batch size only with
--allow-batch-size) for the fastest one that computes the same thing: each setting
starts from the default's initial weights, and its outputs and warmup losses must lie
within the parity tolerance of the default's. Each setting
is a warm worker; the settings measure windows in turn, round after round, and from
6 rounds on a setting clearly slower than the best is dropped, so the budget goes to
the close contenders. The changes that were clearly faster are then tried together.
Then the backends, each at its best, measure windows in turn for the ratios between
them. Every window is a result in --store; the report is printed and written as
STORE/tune.json. Exits 1 when a backend's default setting could not run, 2 on bad input.
"""

EXAMPLES = """\
examples:
  kbench tune -b tensorflow,jax,torch,mxnet -m small_cnn --dataset synthetic --budget 10m
  kbench tune -b torch -m resnet20 --dataset cifar10 --budget 5m --allow-batch-size
"""


def add_command(commands) -> None:
    parser = commands.add_parser(
        "tune",
        help="each backend's fastest settings that compute the same, then the backends compared",
        description=DESCRIPTION, epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    arguments.add_backend_argument(parser, list(BACKENDS), required=True)
    arguments.add_model_argument(
        parser, list(MODELS), default="mlp", single=True, default_text="default: mlp"
    )
    arguments.add_settings(
        parser,
        ["dataset", "data_dir", "train_samples", "batch_size", "warmup_steps", "seed"],
        defaults={"dataset": "synthetic", "train_samples": 2048},
        helps={"dataset": "as kbench run's --dataset", "data_dir": "as kbench run's --data-dir",
               "train_samples": "training samples the windows cycle through"},
        words={"steps": "training steps before measuring; their losses are compared"},
    )  # fmt: skip
    parser.add_argument(
        "--budget", type=arguments.duration, default=600.0, dest="budget_s", metavar="DURATION",
        help="the whole search's time: 90s, 10m, 1h (default: 10m; at most a week); a "
        "quarter of it goes to comparing the backends at their best. Each phase (a "
        f"backend's search, the final comparison) ends after {studies_tune.MAX_ROUNDS} "
        "rounds at most, whatever is left",
    )  # fmt: skip
    parser.add_argument(
        "--allow-batch-size", action="store_true",
        help="also try half and twice --batch-size (it changes the training: their losses "
        "are not compared, only the outputs before training)",
    )  # fmt: skip
    arguments.add_settings(
        parser, ["window_s"], defaults={"window_s": studies_tune.WINDOW_S},
        helps={"window_s": "seconds each setting's window measures (a search needs 8 or "
               "more rounds of up to a dozen settings to call one faster)"},
    )  # fmt: skip
    arguments.add_ratio_precision_argument(
        parser,
        "a search settles when every ratio's 95%% interval is within +-P "
        f"(default: {studies_rounds.WINDOW_PRECISION:g})",
        default=studies_rounds.WINDOW_PRECISION,
    )
    parser.add_argument(
        "--try", dest="only", metavar="SETTING[,...]",
        type=arguments.comma_list(studies_tune.TUNABLE, "settings", check=True),
        help=f"try only these settings: {', '.join(studies_tune.TUNABLE)} (default: every "
        "one that applies to the backend here)",
    )  # fmt: skip
    parser.add_argument(
        "--fresh", action="store_true",
        help="search every backend again; without it, a backend whose search the same tune "
        "finished in --store (STORE/tune-progress.json) is not searched again: its default "
        "and best only join the comparison of the backends",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    arguments.add_output_arguments(parser, inter_op=True)
    parser.set_defaults(handler=command_tune)


def command_tune(args: argparse.Namespace) -> int:
    base = RunConfig(
        backend=args.backend[0], model=args.model, epochs=1, **arguments.settings_of(args)
    )
    report = studies_tune.tune(
        args.backend, base, args.store, budget_s=args.budget_s, target=args.ratio_precision,
        allow_batch_size=args.allow_batch_size, only=args.only, fresh=args.fresh,
    )  # fmt: skip
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(tune_view.tune_text(report))
        print(f"\nevery window in {args.store}/; this report in {args.store}/tune.json; "
              f"kbench report --store {args.store} draws it")  # fmt: skip
    return 1 if any(b["best"] is None for b in report["backends"]) else 0
