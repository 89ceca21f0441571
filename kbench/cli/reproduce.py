"""``kbench reproduce``: run a published study's sweep, then check its claims on the
results: the paper's figure, this machine's, and whether the finding holds here."""

from __future__ import annotations

import argparse
import logging

from kbench.cli import many_runs
from kbench.cli.arguments import (
    add_baseline_argument,
    add_quality_arguments,
    add_renamed,
    add_store_argument,
)
from kbench.studies import claims as claims_mod
from kbench.studies import published, reproduce, sweep_runs

log = logging.getLogger("kbench")

EXAMPLES = """\
examples:
  kbench reproduce --list                               the studies and their claims
  kbench reproduce keras-mxnet-laptop --reduced --dry-run   the runs, and verdicts on what
                                                        is stored; starts no run
  kbench reproduce mxnet-pytorch-resnet --reduced       run (resumable), then the verdicts
  kbench report --store results/mxnet-pytorch-resnet-reduced   HTML: "Paper vs this machine"

verdicts: holds / does not hold (on the median of per-round ratios measured here, never
on absolute figures across hardware) / not measurable here (no GPU, data not available
offline, the reduced size changes the question, runs missing).
"""


def add_command(commands) -> None:
    parser = commands.add_parser(
        "reproduce",
        help="run a published study's sweep and check its claims on this machine",
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
    )
    parser.add_argument(
        "study",
        nargs="?",
        metavar="STUDY",
        help="a study name (see --list) or the path of a study file",
    )
    parser.add_argument("--list", action="store_true", help="list the studies and their claims")
    parser.add_argument(
        "--reduced",
        action="store_true",
        help="the sweep's reduced runs: a "
        "size a CPU finishes (the study file says what that changes)",
    )
    add_store_argument(
        parser, default=None, renamed=False,
        default_text="results/SWEEP, results/SWEEP-reduced with --reduced",
    )  # fmt: skip
    dry_run = parser.add_argument(
        "--dry-run",
        action="store_true",
        help="start no run: list the runs and whether the store holds them, then check the "
        "claims on what it holds",
    )
    add_renamed(parser, "--no-run", dry_run)
    parser.add_argument(
        "--retry-failed",
        action="store_true",
        help="rerun runs whose newest result failed, ran out of memory or timed out",
    )
    add_baseline_argument(parser, "the first backend; for the sweep's closing tables")
    add_quality_arguments(parser)
    parser.set_defaults(handler=command_reproduce)


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
    print(f"study {study.name}: {study.title} ({study.document})")
    print(f"  the paper's machine: {study.hardware_text()}; {study.versions_text()}")
    if args.reduced and study.reduced_note:
        print(f"  reduced: {study.reduced_note}")
    options = many_runs.SweepOptions(
        dry_run=args.dry_run,
        retry_failed=args.retry_failed,
        busy_threshold=args.busy_threshold,
        wait_quiet_s=args.wait_quiet,
        baseline=args.baseline,
    )
    status = many_runs.show_sweep(sweep, store, options)
    results = sweep_runs.stored_results(store, sweep)
    if args.dry_run and not results:
        print(f"\nno run of {sweep.name} in {store} yet: the verdicts come once it has run")
        return status
    outcomes = reproduce.verdicts(study, sweep, store, results)
    print("\n" + claims_mod.claims_text(study, outcomes))
    try:
        markdown = reproduce.write_claims(study, outcomes, store)
        print(f"\nClaims also in {markdown}; with plots: kbench report --store {store}")
    except OSError as err:
        log.warning("%s: not written (%s); the claims are above", store / "claims.md", err.strerror)
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
