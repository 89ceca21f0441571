"""``kbench reproduce``: run a published study's sweep, then check its claims on the
results: the paper's figure, this machine's, and whether the finding holds here."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from kbench.cli import many_runs
from kbench.cli.arguments import add_quality_arguments
from kbench.results.store import Filter, ResultStore, StoreError
from kbench.studies import reproduce
from kbench.studies.sweep import MAX_RUNS
from kbench.views import claims as claims_mod
from kbench.views import published
from kbench.views.tables import render

log = logging.getLogger("kbench")

EXAMPLES = """\
examples:
  kbench reproduce --list                               the studies and their claims
  kbench reproduce keras-mxnet-laptop --reduced --dry-run   the runs it would make
  kbench reproduce mxnet-pytorch-resnet --reduced       run (resumable), then the verdicts
  kbench reproduce mxnet-pytorch-resnet --reduced --no-run   verdicts on what is stored
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
    parser.add_argument(
        "--store",
        type=Path,
        metavar="DIR",
        help="the results store (default: results/SWEEP, results/SWEEP-reduced with --reduced)",
    )
    parser.add_argument("--dry-run", action="store_true", help="list the runs; run nothing")
    parser.add_argument(
        "--no-run",
        action="store_true",
        help="check the claims on what the store holds; start no run",
    )
    parser.add_argument(
        "--retry-failed",
        action="store_true",
        help="rerun runs whose newest result failed, ran out of memory or timed out",
    )
    parser.add_argument("--baseline", metavar="BACKEND", help="for the sweep's closing tables")
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
    study = published.load_study(published.find_study(args.study))
    problems = reproduce.check_study(study)
    if problems:
        raise published.StudyError(
            study.file, "", "does not fit its sweep:\n  " + "\n  ".join(problems)
        )
    sweep = reproduce.study_sweep(study, args.reduced)
    store = args.store or Path("results") / (sweep.name + ("-reduced" if args.reduced else ""))
    print(f"study {study.name}: {study.title} ({study.document})")
    print(f"  the paper's machine: {study.hardware_text()}; {study.versions_text()}")
    if args.reduced and study.reduced_note:
        print(f"  reduced: {study.reduced_note}")
    status = 0
    if not args.no_run:
        only = [
            f"{k}={','.join(str(v) for v in values)}" for k, values in study.reduced_only.items()
        ]
        sweep_args = argparse.Namespace(
            file=study.sweep_path(),
            reduced=args.reduced,
            dry_run=args.dry_run,
            max_runs=MAX_RUNS,
            force=False,
            retry_failed=args.retry_failed,
            only=only if args.reduced else [],
            baseline=args.baseline,
            output_dir=store,
            busy_threshold=args.busy_threshold,
            wait_quiet=args.wait_quiet,
        )
        status = many_runs.command_sweep(sweep_args)
        if args.dry_run:
            return status
    results = ResultStore(store).results([Filter("sweep", (sweep.name,))], latest_only=True)
    if not results:
        raise StoreError(
            f"store: no runs of the sweep {sweep.name} in {store}; run "
            f"kbench reproduce {study.name}{' --reduced' if args.reduced else ''}"
        )
    outcomes = claims_mod.evaluate(study, results)
    print("\n" + claims_mod.claims_text(study, outcomes))
    markdown = store / "claims.md"
    try:
        markdown.write_text(claims_mod.claims_table(study, outcomes).markdown() + "\n")
        print(f"\nClaims also in {markdown}; with plots: kbench report --store {store}")
    except OSError as err:
        log.warning("%s: not written (%s); the claims are above", markdown, err.strerror)
    return status


def list_studies() -> int:
    rows, errors = [], []
    for path in published.study_files():
        try:
            study = published.load_study(path)
        except published.StudyError as err:
            errors.append(str(err))
            continue
        rows.append(
            [
                study.name,
                study.document,
                study.sweep,
                str(len(study.figures)),
                str(len(study.claims)),
            ]
        )
    print(render(["study", "document", "sweep", "published figures", "claims"], rows))
    for path in published.study_files():
        try:
            study = published.load_study(path)
        except published.StudyError:
            continue
        print(f"\n{study.name}: {study.title}")
        for claim in study.claims:
            doubt = " [doubt]" if claim.doubt else ""
            print(f"  {claim.id}: {claim.statement}{doubt}")
    for error in errors:
        log.error("%s", error)
    return 1 if errors else 0
