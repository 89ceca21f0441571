"""The commands that work on many runs: sweep, results, compare, report."""

from __future__ import annotations

import argparse
import collections
import logging
import sys
from pathlib import Path
from typing import List, Sequence

from kbench.cli.arguments import add_quality_arguments, add_warm_argument
from kbench.cli.before_runs import look_before_runs
from kbench.cli.progress import show_progress
from kbench.results import store as store_mod
from kbench.results.config import ConfigError
from kbench.results.lock import writer_lock
from kbench.results.result import RunResult
from kbench.results.store import Filter, ResultStore
from kbench.run.runner import Runner
from kbench.studies import sweep as sweep_mod
from kbench.views import tables

log = logging.getLogger("kbench")

SWEEP_EXAMPLES = """\
examples:
  kbench sweep sweeps/lenet.yaml --reduced --dry-run   list the runs, run nothing
  kbench sweep sweeps/lenet.yaml --reduced             run them (CPU-sized)
  kbench sweep sweeps/lenet.yaml --reduced             again: resumes, skips finished runs
  kbench sweep sweeps/lenet.yaml --only backend=jax,torch
  kbench report --store results/lenet-reduced          the HTML report of what ran
"""

RESULTS_EXAMPLES = """\
examples:
  kbench results --store results/lenet-reduced --filter backend=jax --filter status=ok
  kbench results --store results/lenet-reduced --export lenet.csv   (or .parquet)
  kbench results --store all-machines --merge laptop-results gpu-box-results
  python -c "from kbench.results.store import load_frame; print(load_frame('results'))"
"""


def add_commands(commands) -> None:
    """kbench sweep, results, compare and report."""
    _add_sweep(commands)
    _add_results(commands)
    _add_compare(commands)
    _add_report(commands)


def _add_sweep(commands) -> None:
    sweep = commands.add_parser(
        "sweep",
        help="run a matrix of runs declared in a YAML file; resumable",
        description="Run every combination a sweep file declares (see sweeps/*.yaml and "
        "kbench/studies/sweep.py for the format), each in its own worker process with a timeout "
        "(with --warm, the runs that can share one). "
        "The whole file is checked before anything runs. A failed, out-of-memory or timed-out "
        "run is recorded and the sweep goes on. Results go to --output-dir (default: "
        "results/NAME, or results/NAME-reduced) as they finish, so an interrupted sweep loses "
        "only the run in progress; the same command again resumes, skipping every run that "
        "already has a result. Exits 1 if a run of this invocation failed, ran out of "
        "memory or timed out; runs of a mode this machine cannot run (unsupported, e.g. "
        "MirroredStrategy without GPUs) are listed with their reason and do not count.",
        epilog=SWEEP_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sweep.add_argument("file", type=Path, metavar="FILE.yaml", help="the sweep file")
    sweep.add_argument(
        "--reduced",
        action="store_true",
        help="apply the file's reduced sections: the study at a size a CPU finishes",
    )
    sweep.add_argument(
        "--dry-run",
        action="store_true",
        help=f"list the runs (a summary past {DRY_RUN_LISTED} runs); run nothing",
    )
    sweep.add_argument(
        "--max-runs",
        type=int,
        default=sweep_mod.MAX_RUNS,
        metavar="N",
        help="refuse a file that declares more runs than N, before building them "
        f"(default: {sweep_mod.MAX_RUNS:,})",
    )
    again = sweep.add_mutually_exclusive_group()
    again.add_argument("--force", action="store_true", help="rerun runs that have results")
    again.add_argument(
        "--retry-failed",
        action="store_true",
        help="rerun the runs whose newest result is failed, oom or timeout",
    )
    sweep.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME=VALUE[,VALUE]",
        help="run only the runs whose setting NAME is one of the values, e.g. "
        "backend=tensorflow,jax (repeatable)",
    )
    add_warm_argument(sweep, saved="; the runs of a warm worker are saved when it ends")
    sweep.add_argument("--baseline", metavar="BACKEND", help="for the closing tables")
    sweep.add_argument(
        "--output-dir",
        type=Path,
        help="the results store: one JSON per run, an index, worker logs (default: "
        "results/NAME, results/NAME-reduced with --reduced). Threads, timeouts and the "
        "sampler are settings in the file.",
    )
    add_quality_arguments(sweep)
    sweep.set_defaults(handler=command_sweep)


def _add_results(commands) -> None:
    results = commands.add_parser(
        "results",
        help="list, filter, export and merge stored results",
        description="A store is a directory of result documents (one JSON per run, as runs "
        "write them) with an index. List its runs, filter them by any setting or by status, "
        "kind, host or sweep, export them flattened to CSV or Parquet, or merge other stores "
        "(from other machines) into it. Documents of older schema versions are read; ones "
        "kbench cannot read are listed with the reason.",
        epilog=RESULTS_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_store_arguments(results)
    results.add_argument(
        "--export", type=Path, metavar="FILE", help="write the runs to FILE.csv or FILE.parquet"
    )
    results.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        metavar="STORE",
        help="copy the runs of these stores (and their logs) into --store first",
    )
    results.set_defaults(handler=command_results)


def _add_compare(commands) -> None:
    compare = commands.add_parser(
        "compare",
        help="the study tables: backends side by side, per model and setting",
        description="Throughput with its spread, the speed ratio against a baseline backend "
        "(median of per-round ratios), utilization, peak memory with its kind and accuracy, a "
        "row per model and setting and a column per backend, with OOM/FAILED/TIMEOUT where "
        "runs did not finish; operator runs and data-parallel runs (their step breakdown and "
        "scaling) in tables of their own. Printed, and written as Markdown. Of a sweep run "
        "that was rerun, only the newest result counts.",
    )
    add_store_arguments(compare, several=True)
    compare.add_argument("--baseline", metavar="BACKEND", help="default: the first backend")
    compare.add_argument(
        "--markdown", type=Path, metavar="FILE", help="default: compare.md in the first store"
    )
    compare.set_defaults(handler=command_compare)


def _add_report(commands) -> None:
    report = commands.add_parser(
        "report",
        help="one self-contained HTML file with the tables and plots",
        description="Throughput bars, a speed-ratio heatmap, throughput against batch size, "
        "memory fraction and threads, per-run timelines of utilization, memory and img/s, "
        "accuracy against epochs, the data-parallel step breakdown and scaling: whichever the "
        "stored runs call for.",
    )
    add_store_arguments(report, several=True)
    report.add_argument("--baseline", metavar="BACKEND", help="default: the first backend")
    report.add_argument(
        "--output", type=Path, metavar="FILE", help="default: report.html in the first store"
    )
    report.add_argument("--title", default=None, help="default: the store's name")
    report.set_defaults(handler=command_report)


# A dry run of more runs than this prints a summary, not a line per run.
DRY_RUN_LISTED = 50
DRY_RUN_FIRST = 10


def add_store_arguments(parser: argparse.ArgumentParser, several: bool = False) -> None:
    if several:
        parser.add_argument(
            "--store",
            type=Path,
            nargs="+",
            default=[Path("results")],
            metavar="DIR",
            help="one or more result directories, read together (default: ./results)",
        )
    else:
        parser.add_argument(
            "--store", type=Path, default=Path("results"), help="default: ./results"
        )
    parser.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="NAME=VALUE[,VALUE]",
        help="keep runs whose setting (backend, model, batch_size, ...) or status, kind, host, "
        "sweep is one of the values (repeatable)",
    )


def load(stores: Sequence[Path], filters: Sequence[str], latest_only: bool) -> List[RunResult]:
    parsed = [Filter.parse(f) for f in filters]
    results = []
    for directory in stores:
        store = ResultStore(directory)
        results += store.results(parsed, latest_only=latest_only)
        for name, why in store.unreadable:
            log.warning("%s/%s: skipped: %s", directory, name, why)
    if not results:
        raise store_mod.StoreError(
            f"store: no runs in {', '.join(map(str, stores))}"
            + (f" pass the filters {', '.join(filters)}" if filters else "")
        )
    return sorted(results, key=lambda r: (r.started_at, r.run_id))


def command_sweep(args: argparse.Namespace) -> int:
    if args.max_runs < 1:
        raise ConfigError("max_runs", f"expected a positive integer; received {args.max_runs}.")
    only = [Filter.parse(f) for f in args.only]
    sweep = sweep_mod.load_sweep(args.file, reduced=args.reduced, max_runs=args.max_runs)
    for f in only:
        if f.name not in sweep_mod.RUN_FIELDS:
            raise sweep_mod.SweepError(sweep.file, "--only", f"unknown setting {f.name!r}")
    runs = [
        run
        for run in sweep.runs
        if all(str(getattr(run.config, f.name, None)) in f.values for f in only)
    ]
    if not runs and only:
        raise sweep_mod.SweepError(sweep.file, "--only", _selects_nothing(sweep, only))
    for f in only:  # a typo beside a good value drops runs without a word otherwise
        present = {str(getattr(run.config, f.name)) for run in sweep.runs}
        for value in f.values:
            if value not in present:
                log.warning(
                    "--only %s=%s: no run of %s has %s=%s; its values: %s",
                    f.name, value, sweep.file, f.name, value, ", ".join(sorted(present)),
                )  # fmt: skip
    output_dir = args.output_dir or Path("results") / (
        sweep.name + ("-reduced" if sweep.reduced else "")
    )
    if not args.dry_run:
        # One writer per store, taken before the plan: a second sweep into this store
        # is refused here instead of running the same runs again. A dry run only reads.
        with writer_lock(store_mod.check_output_dir(output_dir)):
            return _sweep_into(args, sweep, runs, output_dir)
    return _sweep_into(args, sweep, runs, output_dir)


def _sweep_into(args: argparse.Namespace, sweep, runs, output_dir: Path) -> int:
    """Plan ``runs`` against the store at ``output_dir``, run what is not done, show
    the tables."""
    store = ResultStore(output_dir)
    done = store.done_keys() if store.exists() else {}
    for name, why in store.unreadable:
        log.warning("%s: skipped, its run counts as not done: %s", output_dir / name, why)
    selected = sweep_mod.Sweep(sweep.name, sweep.description, sweep.file, sweep.reduced, runs)
    plan = sweep_mod.plan(selected, done, args.force, args.retry_failed)
    varying = sweep.varying()
    size = "reduced" if sweep.reduced else "full size"
    print(
        f"sweep {sweep.name} ({size}): {len(runs)} runs, {len(plan.done)} already done, "
        f"{len(plan.to_run)} to run; results in {output_dir}/"
    )
    if args.dry_run and len(runs) > DRY_RUN_LISTED:
        print(dry_run_summary(runs, plan, varying))
        return 0
    if args.dry_run:
        status = {id(run): s for run, s in plan.done}
        print(
            tables.render(
                ["#", "backend", "model", *[v for v in varying if v not in ("backend", "model")],
                 "state"],
                [[str(i), run.config.backend, run.config.model,
                  *[tables.setting_cell(getattr(run.config, v)) for v in varying
                    if v not in ("backend", "model")],
                  f"done ({status[id(run)]})" if id(run) in status else "to run"]
                 for i, run in enumerate(runs, start=1)],
            )
        )  # fmt: skip
        return 0
    progress = sweep_mod.Progress(total=len(runs), skipped=len(plan.done))
    results: List[RunResult] = []
    if plan.to_run:
        look_before_runs(
            output_dir, len(plan.to_run), args.busy_threshold, args.wait_quiet, "the sweep"
        )
        runner = Runner(
            output_dir=output_dir, on_progress=show_progress, busy_threshold=args.busy_threshold
        )
        try:
            with runner.session([run.config for run in plan.to_run]) as session:
                results = sweep_mod.execute(
                    selected, plan.to_run, session, progress, warm=args.warm
                )
        except store_mod.StoreWriteError as err:
            log.error("%s", err)
            not_started = (
                "the rest were not saved (a warm worker's runs are saved as it ends)"
                if args.warm
                else f"{len(plan.to_run) - progress.done - 1} not started"
            )
            log.error(
                "sweep %s stopped: %d runs of this invocation finished and are saved, %s. "
                "Free some space, then run the same command again: it resumes, skipping the "
                "runs that are done.",
                sweep.name,
                progress.done,
                not_started,
            )
            return 1
    everything = store.results([Filter("sweep", (sweep.name,))], latest_only=True)
    if everything:
        sections = section_tables(everything)
        print(tables.study_text(everything, args.baseline))
        for table in sections:
            print("\n" + table.text())
        markdown = output_dir / "compare.md"
        text = tables.study_markdown(everything, f"Sweep {sweep.name} ({size})", args.baseline)
        try:
            markdown.write_text(text + "".join("\n" + t.markdown() + "\n" for t in sections))
            print(f"\nTables also in {markdown}; plots: kbench report --store {output_dir}")
        except OSError as err:
            log.warning("%s: not written (%s); the tables are above", markdown, err.strerror)
    for line in tables.not_ok_lines(results):
        print(line)
    return 1 if any(r.failed for r in results) else 0


def _selects_nothing(sweep: sweep_mod.Sweep, only: Sequence[Filter]) -> str:
    """Which values each --only setting has in the file, for a filter that kept no run."""
    parts = []
    for f in only:
        values = sorted({str(getattr(run.config, f.name)) for run in sweep.runs})
        shown = ", ".join(values[:20]) + (
            f" (and {len(values) - 20} more)" if len(values) > 20 else ""
        )
        parts.append(f"{f.name} has {shown}")
    given = " ".join(f"--only {f.name}={','.join(f.values)}" for f in only)
    return (
        f"expected a filter that keeps at least one of the file's {len(sweep.runs)} runs; "
        f"{given} keeps none. In this file {'; '.join(parts)}."
    )


def dry_run_summary(runs: Sequence[sweep_mod.SweepRun], plan, varying: Sequence[str]) -> str:
    """How many runs take each value of each varying setting, and the first few runs."""
    status = {id(run): s for run, s in plan.done}
    lines = []
    for name in varying:
        counts = collections.Counter(tables.setting_cell(getattr(run.config, name)) for run in runs)
        shown = ", ".join(f"{value} ({count})" for value, count in counts.most_common(12))
        more = f", and {len(counts) - 12} more values" if len(counts) > 12 else ""
        lines.append(f"  {name}: {len(counts)} values: {shown}{more}")
    first = runs[:DRY_RUN_FIRST]
    rest = [v for v in varying if v not in ("backend", "model")]
    table = tables.render(
        ["#", "backend", "model", *rest, "state"],
        [[str(i), run.config.backend, run.config.model,
          *[tables.setting_cell(getattr(run.config, v)) for v in rest],
          f"done ({status[id(run)]})" if id(run) in status else "to run"]
         for i, run in enumerate(first, start=1)],
    )  # fmt: skip
    return "\n".join(
        ["settings that vary (runs per value):", *lines, "", f"the first {len(first)} runs:",
         table, f"... and {len(runs) - len(first)} more (--only NAME=VALUE lists a part)"]
    )  # fmt: skip


def command_results(args: argparse.Namespace) -> int:
    store = ResultStore(args.store)
    if args.merge:
        summary = store.merge(args.merge)
        print(
            f"merged into {args.store}: {summary.added} runs added, {summary.already_present} "
            f"already there; machines: {', '.join(sorted(summary.hosts)) or '-'}"
        )
        for name, why in summary.unreadable:
            log.warning("%s: not merged: %s", name, why)
    if args.export:
        results = store.results([Filter.parse(f) for f in args.filter])
        for name, why in store.unreadable:
            log.warning("%s/%s: left out: %s", args.store, name, why)
        path = store_mod.export(results, args.export)
        left_out = len(store.unreadable)
        note = f"; {left_out} unreadable documents left out (see the warnings)" if left_out else ""
        print(f"{len(results)} runs written to {path}{note}")
        return 0
    entries = store.entries([Filter.parse(f) for f in args.filter])
    for name, why in store.unreadable:
        log.warning("%s/%s: unreadable, skipped: %s", args.store, name, why)
    print(
        tables.render(
            ["run", "status", "kind", "backend", "model", "dataset", "batch", "img/s", "host",
             "sweep"],
            [[e.run_id, e.status, e.kind, str(e.config.get("backend")), str(e.config.get("model")),
              str(e.config.get("dataset")), str(e.config.get("batch_size")),
              "-" if e.images_per_sec is None else f"{e.images_per_sec:,.0f}", e.host,
              e.sweep or "-"] for e in entries],
        )
    )  # fmt: skip
    print(f"\n{len(entries)} runs in {args.store}/")
    return 0


def section_tables(results: Sequence[RunResult]) -> List[tables.Table]:
    """The tables beside the study tables: operators, the data-parallel breakdown, the
    per-operator profiles of model runs."""
    from kbench.views.distributed import breakdown_tables
    from kbench.views.ops import ops_tables
    from kbench.views.profile import profile_tables

    return (
        ops_tables([r for r in results if r.kind == "ops"])
        + breakdown_tables(results)
        + profile_tables(results)
    )


def check_writable_file(setting: str, path: Path) -> None:
    """Refuse an output file whose directory is missing before any work is done."""
    if path.is_dir():
        raise ConfigError(
            setting,
            f"expected a file name; received {str(path)!r}, a directory. Name a file in it.",
        )
    parent = path.parent
    if not parent.is_dir():
        raise ConfigError(
            setting,
            f"expected a file in an existing directory; received {str(path)!r}, and "
            f"{str(parent)!r} does not exist. Create it (mkdir -p {parent}) or name another file.",
        )


def command_compare(args: argparse.Namespace) -> int:
    if args.markdown is not None:
        check_writable_file("markdown", args.markdown)
    results = load(args.store, args.filter, latest_only=True)
    sections = section_tables(results)
    print(tables.study_text(results, args.baseline))
    for table in sections:
        print("\n" + table.text())
    markdown = args.markdown or args.store[0] / "compare.md"
    title = "kbench comparison: " + ", ".join(str(s) for s in args.store)
    text = tables.study_markdown(results, title, args.baseline)
    text += "".join("\n" + table.markdown() + "\n" for table in sections)
    markdown.write_text(text)
    print(f"\nMarkdown: {markdown}", file=sys.stderr)
    return 0


def command_report(args: argparse.Namespace) -> int:
    from kbench.views import report

    results = load(args.store, args.filter, latest_only=True)
    output = args.output or args.store[0] / "report.html"
    title = args.title or "kbench report: " + ", ".join(s.name or str(s) for s in args.store)
    summary = report.write_report(results, output, title=title, baseline=args.baseline)
    print(f"{output}: {len(summary.figures)} plots from {len(results)} runs", file=sys.stderr)
    for why in summary.skipped:
        print(f"  not drawn: {why}")
    return 0
