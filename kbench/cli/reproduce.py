"""``kbench reproduce``: run a published study's sweep, then check its claims on the
results: the paper's figure, this machine's, and whether the finding holds here."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Tuple

from kbench.cli import arguments, many_runs
from kbench.results.config import ConfigError
from kbench.studies import claims as claims_mod
from kbench.studies import published, reproduce, rounds, sweep_runs
from kbench.studies.sweep import Sweep

log = logging.getLogger("kbench")

EXAMPLES = """\
examples:
  kbench reproduce --list                               the studies and their claims
  kbench reproduce keras-mxnet-laptop --reduced --dry-run   the runs, and verdicts on what
                                                        is stored; starts no run
  kbench reproduce mxnet-pytorch-resnet --reduced       run (resumable), then the verdicts
  kbench reproduce tf21-mxnet15-lenet --reduced --repeats 12 --ratio-precision 0.05
                                                        up to 12 rounds, fewer once precise

measured in: --reduced, a study whose claims judged here are all backend ratios on
throughput (or GPU kernel time) is measured in warm interleaved windows, each setting's
backends in one comparison (the plan says so, and why not where not); --repeats,
--target-precision or --fresh-processes keep fresh-process rounds, --windows asks for windows.
  kbench report --store results/mxnet-pytorch-resnet-reduced   HTML: "Paper vs this machine"

verdicts, from the 95% order-statistics interval on the median per-round ratio measured
here (never the median alone, never absolute figures across hardware):
  holds            the interval lies inside the claim's band (or on its side of x1)
  does not hold    the interval lies wholly outside it
  inconclusive     it straddles an edge; or fewer than 6 rounds (a 95% interval needs 6);
                   a flagged run (busy, throttled, GPU shared, battery); a side that failed
                   or is missing; a GPU claim with a side off the GPU; two runs of one round
                   matching one side
  not measurable here   no GPU, data not available offline, the reduced size changes
                   the question
Each verdict comes with its evidence (size, device, rounds, interval and coverage, flags,
deviations from the paper's setting), in the terminal, STORE/claims.md, STORE/claims.json
and the report.
"""


def add_command(commands) -> None:
    parser = commands.add_parser(
        "reproduce", help="run a published study's sweep and check its claims on this machine",
        description="Each study in studies/*.yaml holds a paper's published figures (with "
        "table or figure, row and column, units as published) and its claims as checks: a "
        "ratio with a tolerance, a sign, an ordering, an ordering of data-parallel "
        "efficiencies. reproduce runs the study's sweep through `kbench sweep` (resuming "
        "what the store holds), then prints per claim the paper's figure, this machine's "
        "median and range over repeats, the ratio or ordering on each side and a verdict. "
        "The study files say where each figure comes from and why a claim may not be "
        "measurable at the reduced size.",
        epilog=EXAMPLES
        + "\nmetrics a claim may read (studies/*.yaml, metric:):\n"
        + "\n".join(f"  {name:<24} {what}" for name, (what, _) in claims_mod.METRICS.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    parser.add_argument(
        "study", nargs="?", metavar="STUDY",
        help="a study name (see --list) or the path of a study file",
    )  # fmt: skip
    parser.add_argument("--list", action="store_true", help="list the studies and their claims")
    parser.add_argument(
        "--reduced", action="store_true",
        help="the sweep's reduced runs: a "
        "size a CPU finishes (the study file says what that changes)",
    )  # fmt: skip
    arguments.add_store_argument(
        parser, default=None,
        default_text="results/SWEEP, results/SWEEP-reduced with --reduced",
    )  # fmt: skip
    parser.add_argument(
        "--dry-run", action="store_true",
        help="start no run: list the runs and whether the store holds them, then check the "
        "claims on what it holds",
    )  # fmt: skip
    parser.add_argument(
        "--retry-failed", action="store_true",
        help="rerun runs whose newest result failed, ran out of memory or timed out",
    )  # fmt: skip
    add_rounds_arguments(parser)
    many_runs.add_windows_arguments(
        parser, " (default with --reduced for a study whose claims are backend ratios)",
        with_precision=False,
    )  # fmt: skip
    arguments.add_settings(
        parser, arguments.PRECISION_SETTINGS,
        words={"unit": "each run's steps", "limit": "the run's epochs or steps"},
    )  # fmt: skip
    arguments.add_baseline_argument(parser, "the first backend; for the sweep's closing tables")
    arguments.add_quality_arguments(parser)
    parser.set_defaults(handler=command_reproduce)


def add_rounds_arguments(parser: argparse.ArgumentParser) -> None:
    """``--repeats`` and ``--ratio-precision``, as reproduce takes them."""
    arguments.add_repeats_argument(
        parser, "the study's sweep", default=None,
        default_text=f"the sweep file's repeats, and at least {claims_mod.ROUNDS_NEEDED}: the "
        "fewest rounds whose per-round ratios give a 95%% interval; with fewer every ratio "
        "verdict is inconclusive",
    )  # fmt: skip
    arguments.add_ratio_precision_argument(
        parser,
        "stop adding rounds once every claim's per-round ratio has a 95%% interval "
        f"within +-P of its median (from {claims_mod.ROUNDS_NEEDED} rounds on), e.g. 0.05; "
        "--repeats is then the most rounds (default: off, every round runs); in windows, "
        "each comparison's stop rule (default: the sweep file's, or "
        f"{rounds.WINDOW_PRECISION:g})",
    )


def command_reproduce(args: argparse.Namespace) -> int:
    try:
        return _reproduce(args)
    except published.StudyError as err:
        log.error("kbench reproduce: error: %s", err)
        return 2


def _reproduce(args: argparse.Namespace) -> int:
    if args.list:
        return list_studies()
    if not args.study:
        raise published.StudyError(
            "reproduce",
            "",
            "expected a STUDY (kbench reproduce --list shows them) or --list; received neither.",
        )
    study, sweep = reproduce.prepare(args.study, args.reduced)
    store = args.store or sweep_runs.store_for(sweep)
    check_store(store)
    sweep, measured = sweep_as_asked(study, sweep, args)
    print(f"study {study.name}: {study.title} ({study.document})")
    print(f"  the paper's machine: {study.hardware_text()}; {study.versions_text()}")
    if args.reduced and study.reduced_note:
        print(f"  reduced: {study.reduced_note}")
    print(f"  measured in: {measured}")
    status = run_sweep(study, sweep, store, args)
    results = reproduce.sweep_results(store, sweep) if store.is_dir() else []
    if args.dry_run and not results:
        print(f"\nno run of {sweep.name} in {store} yet: the verdicts come once it has run")
        return status
    judged = reproduce.machine_verdicts(study, sweep, store, results)
    print("\n" + reproduce.verdicts_text(study, judged))
    try:
        markdown, data = reproduce.write_machine_claims(study, judged, store)
        print(f"\nClaims also in {markdown} and {data}; with plots: kbench report --store {store}")
    except OSError as err:
        log.warning("%s: not written (%s); the claims are above", store / "claims.md", err.strerror)
    return status


def check_store(store: Path) -> None:
    """Refuse a --store that names a file, before any plan is printed or run started."""
    if store.exists() and not store.is_dir():
        raise ConfigError(
            "store",
            f"expected a folder (a results store, or one to create); received {str(store)!r}, "
            "which is a file, not a folder. Name a folder, e.g. --store results/mine.",
        )


def sweep_as_asked(study, sweep: Sweep, args: argparse.Namespace) -> Tuple[Sweep, str]:
    """The study's sweep in warm windows (:func:`kbench.studies.reproduce.measure_choice`),
    or in --repeats rounds with --target-precision/--time-budget; and how, in words."""
    fresh_flag = (
        "--repeats" if args.repeats is not None
        else "--target-precision/--time-budget"
        if args.target_precision is not None or args.time_budget_s is not None
        else None
    )  # fmt: skip
    windows, measured = reproduce.measure_choice(
        study, args.reduced, many_runs.measure_windows(args), fresh_flag
    )
    if windows:
        windowed = sweep_runs.as_asked(
            sweep, True, args.window_s, args.ratio_precision, args.ratio_budget_s
        )
        assert windowed.windows is not None
        return windowed, f"{measured}\n  windows: {windowed.windows.text()}"
    sweep = sweep_runs.as_asked(sweep, False, args.window_s, None, args.ratio_budget_s)
    return fresh_sweep(sweep, args), measured


def fresh_sweep(sweep: Sweep, args: argparse.Namespace) -> Sweep:
    """The study's sweep in --repeats rounds, with --target-precision/--time-budget."""
    sweep, kept = reproduce.as_asked(
        sweep, args.repeats, args.ratio_precision, args.target_precision, args.time_budget_s
    )
    if kept:
        log.warning(
            "--target-precision/--time-budget: not taken by %d of %d runs (data-parallel runs "
            "train a fixed number of steps), e.g. %s",
            len(kept), len(sweep.runs), kept[0],
        )  # fmt: skip
    return sweep


def run_sweep(study, sweep: Sweep, store: Path, args: argparse.Namespace) -> int:
    """Run the sweep (or show it, with --dry-run); with --ratio-precision round by round,
    stopping once every claim's interval is that precise."""
    options = many_runs.SweepOptions(
        dry_run=args.dry_run, retry_failed=args.retry_failed, busy_threshold=args.busy_threshold,
        wait_quiet_s=args.wait_quiet, baseline=args.baseline,
    )  # fmt: skip
    if args.ratio_precision is None or args.dry_run or sweep.windows is not None:
        return many_runs.show_sweep(sweep, store, options)
    status, rounds = 0, reproduce.rounds_of(sweep)
    for done, one_round in enumerate(rounds, start=1):
        status = max(status, many_runs.show_sweep(one_round, store, options, sweep.varying()))
        judged = reproduce.machine_verdicts(study, sweep, store)
        widest = claims_mod.widest_half_width([o for j in judged for o in j.outcomes])
        if widest is not None and widest <= args.ratio_precision:
            print(
                f"\nrounds: {done} of at most {len(rounds)}: ratio precision reached (every "
                f"claim's 95% interval within +-{widest:.1%} of its median, target "
                f"+-{args.ratio_precision:.1%})"
            )
            break
    else:
        print(f"\nrounds: all {len(rounds)} ran; ratio precision +-{args.ratio_precision:.1%} "
              "not reached (see the intervals below)")  # fmt: skip
    return status


def list_studies() -> int:
    text, studies, errors = reproduce.study_list()
    print(text)
    for study in studies:
        print(f"\n{study.name}: {study.title}")
        for claim in study.claims:
            doubt = " [doubt]" if claim.doubt else ""
            print(f"  {claim.id}: {claim.statement}{doubt}")
    for error in errors:
        log.error("%s", error)
    return 1 if errors else 0
