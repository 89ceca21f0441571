"""The commands that work on many runs: sweep, results, compare, report."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence

from kbench.cli import arguments
from kbench.measure import quality
from kbench.results import store as store_mod
from kbench.results.config import WINDOW_S, ConfigError
from kbench.results.jsonfile import LinkRefused, write_text_atomic
from kbench.results.result import RunResult
from kbench.results.store import Filter, ResultStore
from kbench.run.protocol import show_progress
from kbench.studies import rounds, slurm, sweep_runs
from kbench.studies import sweep as sweep_mod
from kbench.views import edge as edge_view
from kbench.views import machines, tables
from kbench.views.report import Comparison

log = logging.getLogger("kbench")

SWEEP_EXAMPLES = """\
examples:
  kbench sweep sweeps/lenet_epochs.yaml --reduced --dry-run   list the runs, run nothing
  kbench sweep sweeps/lenet_epochs.yaml --reduced             run them (CPU-sized)
  kbench sweep sweeps/lenet_epochs.yaml --reduced             again: resumes, skips finished runs
  kbench sweep sweeps/lenet_epochs.yaml --filter backend=jax,torch
  kbench sweep sweeps/lenet_epochs.yaml --reduced --windows   each setting's backends in
                                                        warm interleaved windows
  kbench sweep sweeps/lenet_epochs.yaml --executor slurm --partition gpu --max-parallel 8 \
      --sbatch "--gres=gpu:1 --time=00:30:00"   one job array; again: follows and resumes it
  kbench report --store results/lenet-epochs-reduced          the HTML report of what ran
"""

RESULTS_EXAMPLES = """\
examples:
  kbench results --store results/lenet-epochs-reduced --filter backend=jax --filter status=ok
  kbench results --store results/lenet-epochs-reduced --export lenet.csv   (or .parquet)
  kbench results --store all-machines --merge laptop-results gpu-box-results
  python -c "import kbench; print(kbench.load('results').frame())"
"""


def add_commands(commands) -> None:
    """kbench sweep, results, compare and report."""
    _add_sweep(commands)
    _add_results(commands)
    _add_compare(commands)
    _add_report(commands)


def _add_sweep(commands) -> None:
    sweep = commands.add_parser(
        "sweep", help="run a matrix of runs declared in a YAML file; resumable",
        description="Run every combination a sweep file declares (see sweeps/*.yaml and "
        "kbench/studies/sweep.py for the format), each in its own worker process with a timeout "
        "(with --warm, the runs that can share one). "
        "The whole file is checked before anything runs. A failed, out-of-memory or timed-out "
        "run is recorded and the sweep goes on. Results go to --store (default: "
        "results/NAME, or results/NAME-reduced) as they finish, so an interrupted sweep loses "
        "only the run in progress; the same command again resumes, skipping every run that "
        "already has a result. Exits 1 if a run of this invocation failed, ran out of "
        "memory or timed out; runs of a mode this machine cannot run (unsupported, e.g. "
        "MirroredStrategy without GPUs) are listed with their reason and do not count.",
        epilog=SWEEP_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    sweep.add_argument("file", type=Path, metavar="FILE.yaml", help="the sweep file")
    sweep.add_argument(
        "--reduced", action="store_true",
        help="apply the file's reduced sections: the study at a size a CPU finishes",
    )  # fmt: skip
    sweep.add_argument(
        "--dry-run", action="store_true",
        help=f"list the runs (a summary past {tables.PLAN_LISTED} runs); run nothing",
    )  # fmt: skip
    sweep.add_argument(
        "--max-runs", type=int, default=sweep_mod.MAX_RUNS, metavar="N",
        help="refuse a file that declares more runs than N, before building them "
        f"(default: {sweep_mod.MAX_RUNS:,})",
    )  # fmt: skip
    again = sweep.add_mutually_exclusive_group()
    again.add_argument("--force", action="store_true", help="rerun runs that have results")
    again.add_argument(
        "--retry-failed", action="store_true",
        help="rerun the runs whose newest result is failed, oom or timeout",
    )  # fmt: skip
    arguments.add_filter_argument(sweep, planned=True)
    arguments.add_warm_argument(sweep, saved="; the runs of a warm worker are saved when it ends")
    arguments.add_baseline_argument(sweep, "the first backend; for the closing tables")
    arguments.add_store_argument(
        sweep, default=None,
        default_text="results/NAME, results/NAME-reduced with --reduced; threads, timeouts "
        "and the sampler are settings in the file",
    )  # fmt: skip
    arguments.add_quality_arguments(sweep)
    add_windows_arguments(sweep)
    _add_executor_arguments(sweep)
    sweep.set_defaults(handler=command_sweep)


def add_windows_arguments(
    parser: argparse.ArgumentParser, what: str = "", with_precision: bool = True
) -> None:
    """``--windows`` / ``--fresh-processes`` and the windows' settings (kbench sweep and reproduce:
    ``what`` says when each applies; ``with_precision``: add --ratio-precision too)."""
    group = parser.add_argument_group(
        "warm interleaved windows (a sweep file's measure: windows, or --windows)"
    )
    how = group.add_mutually_exclusive_group()
    how.add_argument(
        "--windows", action="store_true",
        help="compare each setting's backends in warm interleaved windows, as kbench run "
        "does: one warm worker per backend, windows in turn (A B, B A, ...) until every "
        "ratio to the baseline has a 95%% interval within --ratio-precision or "
        "--ratio-budget is spent; the window rounds take the place of the file's repeats. "
        "A setting of one backend, inference, data-parallel, --profile or "
        f"--target-precision runs stays in fresh processes (the plan says which){what}",
    )  # fmt: skip
    how.add_argument(
        "--fresh-processes", action="store_true",
        help="each run in a fresh process, repeats times, even where the file asks for "
        f"windows{what}",
    )  # fmt: skip
    arguments.add_settings(
        group, ["window_s"],
        helps={"window_s": f"the windows' length (default: the file's window:, or {WINDOW_S:g})"},
    )  # fmt: skip
    if with_precision:
        arguments.add_ratio_precision_argument(
            group,
            "windows: stop a comparison once every ratio's 95%% interval is within +-P of "
            f"its median (default: the file's ratio_precision:, or {rounds.WINDOW_PRECISION:g})",
        )
    arguments.add_ratio_budget_argument(
        group,
        "windows: stop a comparison after this many seconds from its workers' start "
        f"(default: the file's ratio_budget:, or {rounds.WINDOW_BUDGET_S:g})",
    )


def _add_executor_arguments(sweep: argparse.ArgumentParser) -> None:
    """Where the sweep's runs run: here, or as the tasks of one Slurm job array."""
    where = sweep.add_argument_group("running on a Slurm cluster (--executor slurm)")
    where.add_argument(
        "--executor", choices=("local", "slurm"), default="local",
        help="local: run here, one run after another (default); slurm: the runs to do "
        "become the tasks of one sbatch --array job, each running kbench on its node into "
        "the store (the checkout, its environments and the store on a filesystem every "
        "node shares); this command shows their progress until all end. Ctrl-C leaves the "
        "job running; the same command again follows it, records what Slurm ended without "
        "a result (with Slurm's reason) and submits what failed in Slurm or never ran",
    )  # fmt: skip
    where.add_argument("--partition", metavar="P", help="sbatch --partition (default: Slurm's)")
    where.add_argument(
        "--max-parallel", type=int, metavar="N", help="at most N tasks at a time (--array=...%%N)"
    )
    where.add_argument(
        "--sbatch", metavar='"ARGS"',
        help='more sbatch options, quoted as one argument: --sbatch "--gres=gpu:1 --time=00:30:00" '
        "(one option alone: --sbatch=--gres=gpu:1)",
    )  # fmt: skip
    where.add_argument(
        "--per-task", choices=slurm.PER_TASK, default="comparison",
        help="comparison: one setting and repeat with every backend per task, so that "
        "their ratios are taken on one node (default; in warm windows, a comparison's "
        "windows on its node); run: one run per task (with --warm, one warm worker's runs)",
    )  # fmt: skip
    where.add_argument(
        "--poll", type=float, default=10.0, metavar="S", help="look at the queue every S seconds"
    )


def _add_results(commands) -> None:
    results = commands.add_parser(
        "results", help="list, filter, export and merge stored results",
        description="A store is a directory of result documents (one JSON per run, as runs "
        "write them) with an index. List its runs, filter them by any setting or by status, "
        "kind, host or sweep, export them flattened to CSV or Parquet, or merge other stores "
        "(from other machines) into it. Documents of older schema versions are read; ones "
        "kbench cannot read are listed with the reason.",
        epilog=RESULTS_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    add_store_arguments(results)
    results.add_argument(
        "--export", type=Path, metavar="FILE", help="write the runs to FILE.csv or FILE.parquet"
    )
    results.add_argument(
        "--merge", nargs="+", type=Path, metavar="STORE",
        help="copy the runs of these stores (and their logs) into --store first; where "
        "the store then holds runs of several machines, a table per machine and backend "
        "follows the list (ratios only within a machine)",
    )  # fmt: skip
    arguments.add_baseline_argument(results, "the first backend; for the --merge table")
    results.set_defaults(handler=command_results)


def _add_compare(commands) -> None:
    compare = commands.add_parser(
        "compare", help="the study tables: backends side by side, per model and setting",
        description="Throughput with its spread, the speed ratio against a baseline backend "
        "(median of per-round ratios), utilization, peak memory with its kind and accuracy, a "
        "row per model and setting and a column per backend, with OOM/FAILED/TIMEOUT where "
        "runs did not finish; operator runs and data-parallel runs (their step breakdown and "
        "scaling) in tables of their own. Printed, and written as Markdown. Of a sweep run "
        "that was rerun, only the newest result counts.",
    )  # fmt: skip
    add_store_arguments(compare, several=True)
    arguments.add_baseline_argument(compare)
    arguments.add_output_file_argument(
        compare, "the Markdown file of the tables", "compare.md in the first store"
    )
    compare.set_defaults(handler=command_compare)


def _add_report(commands) -> None:
    report = commands.add_parser(
        "report", help="one self-contained HTML file with the tables and plots",
        description="Throughput bars, a speed-ratio heatmap, throughput against batch size, "
        "memory fraction and threads, per-run timelines of utilization, memory and img/s, "
        "accuracy against epochs, the data-parallel step breakdown and scaling: whichever the "
        "stored runs call for.",
    )  # fmt: skip
    add_store_arguments(report, several=True)
    arguments.add_baseline_argument(report)
    arguments.add_output_file_argument(report, "the HTML file", "report.html in the first store")
    report.add_argument("--title", default=None, help="default: the store's name")
    report.set_defaults(handler=command_report)


def add_store_arguments(parser: argparse.ArgumentParser, several: bool = False) -> None:
    """The stores a reading command reads, and the runs it keeps."""
    arguments.add_store_argument(parser, several=several)
    arguments.add_filter_argument(parser)


def command_sweep(args: argparse.Namespace) -> int:
    if args.max_runs < 1:
        raise ConfigError("max_runs", f"expected a positive integer; received {args.max_runs}.")
    options = SweepOptions.of(args)
    sweep = sweep_mod.load_sweep(args.file, reduced=args.reduced, max_runs=args.max_runs)
    selected = sweep_runs.as_asked(
        sweep_runs.select_runs(sweep, args.filter),
        measure_windows(args), args.window_s, args.ratio_precision, args.ratio_budget_s,
    )  # fmt: skip
    sweep_runs.check_warm(selected, options.warm)
    if selected.windows is not None and options.slurm is not None:
        slurm.check_windows(options.slurm)
    if options.slurm is not None and not args.dry_run:
        slurm.check_tools()
    return show_sweep(
        selected, args.store or sweep_runs.store_for(sweep), options, varying=sweep.varying(),
    )  # fmt: skip


def measure_windows(args: argparse.Namespace) -> Optional[bool]:
    """--windows (True), --fresh-processes (False) or neither (None: as the file says)."""
    return True if args.windows else False if args.fresh_processes else None


@dataclass(frozen=True)
class SweepOptions:
    """How ``kbench sweep`` and ``kbench reproduce`` run a sweep and show it
    (:meth:`of`: ``kbench sweep``'s flags)."""

    dry_run: bool = False
    force: bool = False
    retry_failed: bool = False
    warm: bool = False
    busy_threshold: float = quality.BUSY_THRESHOLD
    wait_quiet_s: float = 0.0
    baseline: Optional[str] = None
    slurm: Optional[slurm.SlurmOptions] = None  # None: run here
    max_runs: int = sweep_mod.MAX_RUNS

    @classmethod
    def of(cls, args: argparse.Namespace) -> SweepOptions:
        return cls(
            slurm=_slurm_options(args), max_runs=args.max_runs, dry_run=args.dry_run,
            force=args.force, retry_failed=args.retry_failed, warm=args.warm,
            busy_threshold=args.busy_threshold, wait_quiet_s=args.wait_quiet,
            baseline=args.baseline,
        )  # fmt: skip


def _slurm_options(args: argparse.Namespace) -> Optional[slurm.SlurmOptions]:
    """--executor slurm's settings; its flags refused with --executor local."""
    if args.executor == "local":
        flags = (("--partition", args.partition), ("--max-parallel", args.max_parallel),
                 ("--sbatch", args.sbatch))  # fmt: skip
        given = [flag for flag, value in flags if value]
        if given:
            raise ConfigError(
                "executor",
                f"expected {given[0]} with --executor slurm only; received it with the local "
                "executor. Add --executor slurm, or drop it.",
            )
        return None
    return slurm.SlurmOptions(
        partition=args.partition, max_parallel=args.max_parallel,
        sbatch=slurm.SlurmOptions.parse_sbatch(args.sbatch), per_task=args.per_task,
        poll_s=args.poll,
    )  # fmt: skip


def show_sweep(
    sweep: sweep_mod.Sweep, store: Path, options: SweepOptions,
    varying: Optional[Sequence[str]] = None,
) -> int:  # fmt: skip
    """Plan ``sweep`` against ``store``, print the plan, run what is not done (unless a dry
    run), then print the store's tables of the sweep."""
    with sweep_runs.planned_sweep(
        sweep, store, varying=varying, force=options.force, retry_failed=options.retry_failed,
        lock=not options.dry_run,
    ) as planned:  # fmt: skip
        size = "reduced" if sweep.reduced else "full size"
        to_run = len(planned.plan.to_run)
        if options.slurm is not None:  # a run a Slurm task left without a result is to do
            to_run = len(slurm.runs_to_do(sweep, store, options.force, options.retry_failed))
        print(
            f"sweep {sweep.name} ({size}): {len(sweep.runs)} runs{_windows_note(sweep)}, "
            f"{len(sweep.runs) - to_run} already done, {to_run} to run; results in {store}/"
        )
        if options.dry_run:
            print(_plan_text(planned))
            return 0
        try:
            results = _run_sweep(planned, options)
        except sweep_runs.SweepStopped as err:
            log.error("%s", err)
            return 1
        except KeyboardInterrupt:
            if options.slurm is None:
                raise
            print(f"\nleft the Slurm job(s) running; `kbench sweep {sweep.file} --executor "
                  "slurm` with the same options follows them, records what ended without a "
                  "result and submits what remains")  # fmt: skip
            return 130
        everything = sweep_runs.stored_results(store, sweep)
    if everything:
        _show_tables(everything, store, f"Sweep {sweep.name} ({size})", options.baseline)
    for line in tables.not_ok_lines(results):
        print(line)
    return 1 if any(r.failed for r in results) else 0


def _windows_note(sweep: sweep_mod.Sweep) -> str:
    """`` in 2 comparisons in warm windows``, for a sweep measured so."""
    if sweep.windows is None:
        return ""
    count = len(sweep_mod.comparisons_of(sweep.runs))
    return f" in {count} comparison{'s' if count != 1 else ''} in warm windows"


def _plan_text(planned: sweep_runs.PlannedSweep) -> str:
    """A dry run's plan: each run, or (in windows) each comparison."""
    states = planned.states()
    if planned.sweep.windows is not None:
        by_key = {run.key: state for run, state in zip(planned.sweep.runs, states)}
        return sweep_runs.plan_text(planned.sweep, by_key, planned.varying)
    configs = [run.config for run in planned.sweep.runs]
    return tables.plan_text(configs, states, planned.varying)


def _run_sweep(planned: sweep_runs.PlannedSweep, options: SweepOptions) -> List[RunResult]:
    """Run the plan here, or (``options.slurm``) as one Slurm job array."""
    if options.slurm is None:
        return sweep_runs.run_planned(
            planned, warm=options.warm, busy_threshold=options.busy_threshold,
            wait_quiet_s=options.wait_quiet_s, on_progress=show_progress, baseline=options.baseline,
        )  # fmt: skip
    return slurm.run_on_slurm(
        planned.sweep, planned.store, options.slurm, force=options.force,
        retry_failed=options.retry_failed, warm=options.warm,
        settings={"max_runs": options.max_runs, "busy_threshold": options.busy_threshold,
                  "baseline": options.baseline},
    )  # fmt: skip


def _show_tables(results: Sequence[RunResult], store: Path, title: str, baseline) -> None:
    """The comparison tables of ``results``, printed and kept in the store's compare.md."""
    comparison = Comparison.of(results, baseline)
    print(comparison.text())
    for line in edge_view.verdicts(results):  # the edge question, where a runtime ran
        print(f"\n{line}")
    markdown = store / "compare.md"
    try:
        write_text_atomic(markdown, comparison.markdown(title))
        print(f"\nTables also in {markdown}; plots: kbench report --store {store}")
    except OSError as err:
        log.warning("%s: not written (%s); the tables are above", markdown, err.strerror or err)


def command_results(args: argparse.Namespace) -> int:
    store = ResultStore(args.store)
    store.check_is_store()  # a folder of other JSON files: refused, nothing written to it
    filters = [Filter.parse(f) for f in args.filter]
    if args.merge:
        summary = store.merge(args.merge)
        refused = f"; {len(summary.refused)} refused (see the warnings)" if summary.refused else ""
        print(
            f"merged into {args.store}: {summary.added} runs added, {summary.already_present} "
            f"already there{refused}; machines: {', '.join(sorted(summary.hosts)) or '-'}"
        )
        for name, why in summary.unreadable + summary.refused:
            log.warning("%s: not merged: %s", name, why)
    if args.export:
        results = store.results(filters)
        for name, why in store.unreadable:
            log.warning("%s/%s: left out: %s", args.store, name, why)
        path = store_mod.export(results, args.export)
        left_out = len(store.unreadable)
        note = f"; {left_out} unreadable documents left out (see the warnings)" if left_out else ""
        print(f"{len(results)} runs written to {path}{note}")
        return 0
    entries = store.entries(filters)
    for name, why in store.unreadable:
        log.warning("%s/%s: unreadable, skipped: %s", args.store, name, why)
    print(tables.store_index(entries))
    print(f"\n{len(entries)} runs in {args.store}/")
    if args.merge:  # the headline figures per machine and backend, where there are several
        found = machines.newest_per_machine(store.results(filters))
        table = machines.machine_table(found, args.baseline)
        if table is not None:
            print("\n" + table.text())
    return 0


def check_writable_file(setting: str, path: Path, made: bool = False) -> None:
    """Refuse an output file whose directory is missing (``made``: it is made when the
    file is written) or not writable (a read-only store) before any work is done."""
    if path.is_dir():
        raise ConfigError(
            setting,
            f"expected a file name; received {str(path)!r}, a directory. Name a file in it.",
        )
    parent = path.parent
    if not parent.is_dir() and not made:
        raise ConfigError(
            setting,
            f"expected a file in an existing directory; received {str(path)!r}, and "
            f"{str(parent)!r} does not exist. Create it (mkdir -p {parent}) or name another file.",
        )
    existing = next(p for p in (parent, *parent.parents) if p.exists())
    if not os.access(existing, os.W_OK):
        raise ConfigError(
            setting,
            f"expected a file in a directory kbench may write; {str(existing)!r} is not "
            "writable (read-only?). Name a file elsewhere with --output FILE.",
        )


def command_compare(args: argparse.Namespace) -> int:
    if args.output is not None:
        check_writable_file("output", args.output)
    comparison = Comparison.of(machines.load_per_machine(args.store, args.filter), args.baseline)
    print(comparison.text())
    markdown = args.output or args.store[0] / "compare.md"
    title = "kbench comparison: " + ", ".join(str(s) for s in args.store)
    try:
        write_text_atomic(markdown, comparison.markdown(title))
    except LinkRefused:
        raise
    except OSError as err:  # a read-only store: the tables are above
        log.warning("%s: not written (%s); --output FILE writes it elsewhere", markdown,
                    err.strerror)  # fmt: skip
        return 0
    print(f"\nMarkdown: {markdown}", file=sys.stderr)
    return 0


def command_report(args: argparse.Namespace) -> int:
    from kbench.studies.reproduce import paper_section
    from kbench.views import report

    results = machines.load_per_machine(args.store, args.filter)  # each machine's newest
    output = args.output or args.store[0] / "report.html"
    check_writable_file("output", output, made=True)
    title = args.title or "kbench report: " + ", ".join(s.name or str(s) for s in args.store)
    study = paper_section(results)  # a published study's store: its claims and plots
    sections = [study] if study else []
    searched = args.store[0] / "tune.json"  # a kbench tune store: its search
    if searched.is_file():
        from kbench.views.tune import tune_section

        try:
            sections.append(tune_section(json.loads(searched.read_text())))
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as err:
            log.warning("%s: unreadable (%s: %s); the report leaves the tune section out",
                        searched, type(err).__name__, err)  # fmt: skip
    summary = report.write_report(results, output, title=title, baseline=args.baseline,
                                  sections=sections)  # fmt: skip
    print(f"{output}: {len(summary.figures)} plots from {len(results)} runs", file=sys.stderr)
    for why in summary.skipped:
        print(f"  not drawn: {why}")
    return 0
