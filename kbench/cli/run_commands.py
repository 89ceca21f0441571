"""``kbench run``, ``demo``, ``max-batch``, ``parity`` and ``env`` (sweep, results,
compare and report are in :mod:`kbench.cli.many_runs`; ops in :mod:`kbench.cli.ops`)."""

from __future__ import annotations

import argparse
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import List, Optional

from kbench.backends import BACKENDS
from kbench.cli import arguments
from kbench.datasets import DataUnavailable
from kbench.facts import VERSION
from kbench.measure import sysinfo
from kbench.results import edge
from kbench.results.analysis import cpu_text
from kbench.results.config import ConfigError, RunConfig, check_setting
from kbench.results.result import RunResult
from kbench.run import environments
from kbench.run.protocol import show_progress
from kbench.run.runner import Runner
from kbench.studies import rounds as studies_rounds
from kbench.views import runtimes as runtimes_view
from kbench.views import tables
from kbench.views import windows as windows_view
from kbench.views.tables import parameter_mismatches
from kbench_models import MODELS

log = logging.getLogger("kbench")

DEMO_SETTINGS = dict(
    dataset="fashion_mnist", epochs=2, batch_size=64, warmup_steps=10, train_samples=12000,
    test_samples=2000,
)  # fmt: skip
# What kbench run trains or infers, and on which data: its settings' own flags.
WORKLOAD_SETTINGS = (
    "dataset", "data_dir", "train_samples", "test_samples", "input_shape", "num_classes",
    "image_size", "batch_size", "epochs", "steps", "warmup_steps", "data_format", "optimizer",
    "learning_rate", "seed", "mode", "duration_s", "precision", "max_new_tokens",
)  # fmt: skip
PARALLEL_AND_PROFILE_SETTINGS = ("distributed", "workers", "profile", "profile_steps")


def add_commands(commands) -> None:
    add_run_command(commands)
    add_demo_command(commands)
    add_max_batch_command(commands)
    add_parity_command(commands)
    add_env_command(commands)


def add_run_command(commands) -> None:
    run = commands.add_parser(
        "run", help="train models on backends, one process per run",
        description="Train each --model under each --backend, one after another, each in a "
        "fresh worker process with its own KERAS_HOME; several backends are compared in "
        "warm interleaved windows instead (see --window). Throughput counts only the steps "
        "after --warmup-steps. Ends with a table per run and a comparison per model; exits 1 "
        "if a run failed, ran out of memory or timed out (not for a mode this machine cannot "
        "run, recorded as unsupported), 2 on bad input. kbench.run() in Python plans the "
        "same runs with the same defaults.",
        epilog=arguments.EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    arguments.add_backend_argument(
        run, list(BACKENDS), required=True, again=arguments.AGAIN_WITH_REPEATS
    )
    arguments.add_model_argument(
        run, list(MODELS), default=[studies_rounds.DEFAULT_MODEL],
        default_text=f"default: {studies_rounds.DEFAULT_MODEL}", again=arguments.AGAIN_WITH_REPEATS,
        own="or your own model: path/to/file.py:build (or package.module:build), a function "
        "build(input_shape, num_classes) returning a Keras model (see examples/my_model.py), "
        "or a Keras 3 saved model path/to/model.keras (its saved weights on tensorflow, jax "
        "and torch)",
    )  # fmt: skip
    arguments.add_settings(run, WORKLOAD_SETTINGS)
    add_round_arguments(run)
    arguments.add_settings(run, arguments.MEMORY_SETTINGS + arguments.SWITCH_SETTINGS)
    arguments.add_quality_arguments(run)
    arguments.add_settings(run, arguments.PRECISION_SETTINGS + PARALLEL_AND_PROFILE_SETTINGS)
    arguments.add_output_arguments(run, inter_op=True)
    run.set_defaults(handler=command_run)


def add_round_arguments(run) -> None:
    """How ``kbench run`` repeats its runs and compares them round by round."""
    arguments.add_repeats_argument(
        run,
        shows="; tables show medians, ranges and per-round ratios. Without it, several "
        "backends are compared in warm interleaved windows (--window)",
        default=None,
        default_text="1 for one backend; none for several, which are measured in windows",
    )
    arguments.add_settings(run, ["window_s"])
    arguments.add_warm_argument(run)
    arguments.add_baseline_argument(run, "the first in --backend")
    arguments.add_parity_check_argument(run)
    arguments.add_ratio_precision_argument(
        run,
        "stop adding rounds once every backend's per-round speed ratio to the baseline "
        "has a 95%% interval within +-P of its median (order statistics: from 6 rounds on), "
        "e.g. 0.05; with --repeats N, N is then the most rounds (default: "
        f"{studies_rounds.WINDOW_PRECISION:g} for windows; with --repeats, off: every round runs)",
    )
    arguments.add_ratio_budget_argument(
        run,
        "start no round after this many seconds (windows: counted from the workers' "
        f"start; default {studies_rounds.WINDOW_BUDGET_S:g}; with --repeats and "
        "--ratio-precision: default none)",
    )


def add_demo_command(commands) -> None:
    demo = commands.add_parser(
        "demo", help="MLP and small CNN on Fashion-MNIST across every runnable backend",
        description="The main job on an embedded default: MLP and small CNN trained for "
        f"{DEMO_SETTINGS['epochs']} epochs on {DEMO_SETTINGS['train_samples']} Fashion-MNIST "
        "images (synthetic images of the same shape if the real files are absent, and said "
        "so) under every backend whose environment exists, then a comparison table.",
    )  # fmt: skip
    arguments.add_backend_argument(demo, list(BACKENDS), default_text="default: every runnable one")
    arguments.add_output_arguments(demo)
    demo.set_defaults(handler=command_demo)


def add_max_batch_command(commands) -> None:
    max_batch = commands.add_parser(
        "max-batch", help="the largest batch that trains without running out of memory",
        description="Doubling from --start, then bisection: each probe trains a few steps on "
        "synthetic data in a fresh worker process (recorded in --store like any run). A "
        "batch does not fit when the run ends 'oom' or the worker is killed by SIGKILL. On a "
        "machine without a GPU the probes use host memory: keep --limit within what the "
        "machine can spare.",
    )  # fmt: skip
    arguments.add_backend_argument(max_batch, list(BACKENDS), required=True, single=True)
    arguments.add_model_argument(max_batch, list(MODELS), single=True)
    max_batch.add_argument("--start", type=int, default=1, help="first batch tried (default: 1)")
    max_batch.add_argument(
        "--limit", type=int, default=4096, help="largest batch tried (default: 4096)"
    )
    arguments.add_settings(
        max_batch, ["steps", "input_shape"], defaults={"steps": 2},
        helps={"steps": "measured steps per probe", "input_shape": "the probes' input"},
    )  # fmt: skip
    arguments.add_settings(max_batch, arguments.MEMORY_SETTINGS)
    arguments.add_output_arguments(max_batch, inter_op=True)
    max_batch.set_defaults(handler=command_max_batch)


def add_parity_command(commands) -> None:
    parity = commands.add_parser(
        "parity", help="prove the backends compute the same thing (same weights, same batches)",
        description="For each model the first backend (the reference, a Keras backend) builds "
        "it and exports its initial weights; every other backend, torch-native included, "
        "loads them, computes the outputs of one batch, and trains --steps steps of plain "
        "SGD on the same seeded mini-batches. Reports the largest output difference and "
        "the loss drift per backend; exits 1 when one exceeds its tolerance, fails, or "
        "cannot run a model (shown as 'unsupported', with the reason, apart from the "
        "mismatches: parity is then incomplete). Default "
        "tolerances: outputs within 1e-4 absolute (correct implementations agree to about "
        "1e-6 in float32), losses within 1e-2 relative at every step (float32 rounding "
        "grows through SGD steps: up to 5.2e-3 on VGG-16 between correct implementations "
        "on a 2-core CPU, whose float64 gradients agree to 3e-14), or within 10 times "
        "the model's noise floor where that is larger: "
        "the reference also retrains from its weights nudged by 1e-7, and how far those "
        "losses drift is what rounding alone does to this model (deep BatchNorm networks "
        "amplify it a thousandfold per step). Known differences of a backend are noted "
        "beside its numbers.",
    )  # fmt: skip
    arguments.add_model_argument(
        parity, list(MODELS), default=list(MODELS), default_text="default: every zoo model"
    )
    arguments.add_backend_argument(
        parity, list(BACKENDS),
        default_text="the first is the reference; default: every runnable backend, "
        "tensorflow first",
    )  # fmt: skip
    arguments.add_settings(
        parity, ["steps", "batch_size", "learning_rate", "dataset", "input_shape", "seed"],
        defaults={"steps": 3, "batch_size": 8, "dataset": "synthetic"},
        helps={
            "steps": "SGD steps compared",
            "learning_rate": "the SGD steps' learning rate (larger rates make deep "
            "BatchNorm models chaotic: rounding differences then grow a thousandfold per "
            "step)",
            "dataset": "the data the backends are checked on: synthetic, or any of kbench "
            "run's --dataset",
            "input_shape": "synthetic data only: the input shape for every model given, "
            "e.g. 64x64x3 to check resnet50 faster",
        },
        words={"seeds": "weights nudged for the noise floor and synthetic data"},
    )  # fmt: skip
    parity.add_argument("--output-atol", type=arguments.finite, default=1e-4, metavar="TOL")
    parity.add_argument("--loss-rtol", type=arguments.finite, default=1e-2, metavar="TOL")
    arguments.add_store_argument(parity)
    arguments.add_settings(parity, ["timeout_s"])
    parity.set_defaults(handler=command_parity)


def add_env_command(commands) -> None:
    env = commands.add_parser(
        "env", help="what is installed per environment and which backends can run",
        description="Starts each backend the way a run would (its interpreter, KERAS_HOME, "
        "Keras import, backend check) and reports versions and devices.",
    )  # fmt: skip
    env.add_argument("--json", action="store_true", help="print the report as JSON")
    env.set_defaults(handler=command_env)


def report(results: List[RunResult], output_dir: Path, baseline: Optional[str] = None) -> int:
    print(tables.run_table(results))
    if runtimes_view.shown(results):
        print()
        against = edge.float_speedups(results, output_dir)
        print(runtimes_view.runtimes_table(results, against).text())
    if runtimes_view.generation_shown(results):
        print()
        print(runtimes_view.generation_table(results).text())
    if len(results) > 1:
        print()
        print(tables.comparison_tables(results, baseline))
    print(f"\n{len(results)} result(s) in {output_dir}/, worker logs in {output_dir}/logs/")
    return ending_lines(results)


def ending_lines(results: List[RunResult]) -> int:
    """Print what did not go right (runs not ok, backends that built different models);
    the exit code: 1 when either happened."""
    for line in tables.not_ok_lines(results):
        print(line)
    mismatched = parameter_mismatches(results)
    for line in mismatched:
        print(line)
    return 1 if mismatched or any(r.failed for r in results) else 0


def command_run(args: argparse.Namespace) -> int:
    plan = plan_of(args)
    if plan.measure.windows:
        print(f"measuring in {plan.windows_text()}")
    results, stopped = studies_rounds.run_plan(
        plan, args.store, busy_threshold=args.busy_threshold, wait_quiet_s=args.wait_quiet,
        on_progress=show_progress,
    )  # fmt: skip
    if plan.measure.windows:
        return report_windows(results, args.store, plan, stopped)
    code = report(results, args.store, plan.baseline)
    if plan.ratio_precision is not None:
        ran = len({r.config.get("repeat", 0) for r in results})
        print(f"rounds: {ran} of at most {plan.repeats}: {stopped or 'every round ran'}")
    return code


def plan_of(args: argparse.Namespace) -> studies_rounds.Plan:
    """What ``kbench run``'s flags ask for: the comparison :func:`kbench.run` plans from
    the same arguments (:func:`kbench.studies.rounds.plan_comparison`)."""
    return studies_rounds.plan_comparison(
        args.backend, args.model, repeats=args.repeats, warm=args.warm, baseline=args.baseline,
        ratio_precision=args.ratio_precision, ratio_budget_s=args.ratio_budget_s,
        check_parity=args.parity_check, **arguments.settings_of(args),
    )  # fmt: skip


def report_windows(
    results: List[RunResult], output_dir: Path, plan: studies_rounds.Plan,
    stopped: Optional[str],
) -> int:  # fmt: skip
    """The end of a comparison in warm windows: the comparison (its per-round ratios and
    their intervals), the windows per backend, how they measured and why they stopped."""
    counted = [r for r in results if not r.superseded]  # (none: measured just now)
    print(tables.comparison_tables(counted, plan.baseline))
    print()
    print(windows_view.windows_table(results))
    print(f"\nmeasured in {plan.windows_text()}")
    print(f"measuring stopped: {stopped}")
    windows = len(windows_view.windows_of(results))
    print(f"{len(results)} result(s), one per backend, holding {windows} windows, in "
          f"{output_dir}/; worker logs in {output_dir}/logs/")  # fmt: skip
    return ending_lines(results)


def command_max_batch(args: argparse.Namespace) -> int:
    from kbench.studies import maxbatch

    for setting, value in (("start", args.start), ("limit", args.limit)):
        if value < 1:
            raise ConfigError(setting, f"expected a positive integer; received {value}.")
    if args.start > args.limit:
        raise ConfigError("start", f"expected at most --limit {args.limit}; received {args.start}.")
    template = RunConfig(
        backend=args.backend, model=args.model, dataset="synthetic", warmup_steps=1,
        **arguments.settings_of(args),
    )  # fmt: skip
    runner = Runner(output_dir=args.store, on_progress=show_progress)
    try:
        found, runs = maxbatch.find_max_batch(runner, template, args.start, args.limit)
    except maxbatch.ProbeFailed as err:
        log.error("max-batch: %s", err)
        return 1
    print(maxbatch.probes_table(runs))
    label = f"{args.backend}/{args.model}"
    if found.largest_fit is None:
        print(f"\n{label}: not even batch {args.start} fits")
        return 1
    if found.first_failure is None:
        print(f"\n{label}: every batch up to the limit {args.limit} fits (raise --limit)")
    else:
        print(f"\n{label}: largest batch that fits: {found.largest_fit} "
              f"({found.first_failure} does not)")  # fmt: skip
    return 0


def command_parity(args: argparse.Namespace) -> int:
    from kbench.studies import parity

    backends = args.backend or [
        name for name, missing in environments.runnable_backends().items() if missing is None
    ]
    if backends and not BACKENDS[backends[0]].exports_weights:
        raise ConfigError(
            "backend",
            "expected a Keras backend first (the reference that exports the initial weights); "
            f"received {backends[0]} first. Put it later in the list.",
        )
    settings = {
        name: check_setting(name, value) for name, value in arguments.settings_of(args).items()
    }
    input_shape = settings.pop("input_shape")  # checked against each model's input there
    tolerance = parity.Tolerance(output_atol=args.output_atol, loss_rtol=args.loss_rtol)
    runner = Runner(output_dir=args.store, on_progress=show_progress)
    rows = parity.check_models(
        runner, {model: backends for model in args.model}, tolerance=tolerance,
        input_shapes={model: input_shape for model in args.model}, **settings,
    )  # fmt: skip

    print(parity.rows_table(rows))
    for note in sorted({note for r in rows for note in r.notes}):
        backends = sorted({r.backend for r in rows if note in r.notes})
        print(f"note ({', '.join(backends)}): {note}")
    print(f"\nTolerance: {tolerance.describe()}; {args.steps} SGD steps, batch "
          f"{args.batch_size}, learning rate {args.learning_rate:g}, {args.dataset} "
          "data.")  # fmt: skip
    failed = [r for r in rows if not r.passed and r.status != "unsupported"]
    if failed:
        print(f"{len(failed)} of {len(rows)} backend/model pairs do not match.")
    unsupported = len([r for r in rows if r.status == "unsupported"])
    if unsupported:
        print(f"{unsupported} of {len(rows)} backend/model pairs are unsupported: not compared "
              "(the backend cannot run the model, its reason in the row), so parity is "
              "incomplete.")  # fmt: skip
    return 1 if failed or unsupported else 0


def command_demo(args: argparse.Namespace) -> int:
    runnable = environments.runnable_backends()
    backends = args.backend or [name for name, missing in runnable.items() if missing is None]
    for name, missing in runnable.items():
        if missing and name in backends:
            raise environments.EnvironmentMissing(missing)
        if missing:
            log.warning("demo: skipping %s: %s", name, missing)
    if not backends:
        raise environments.EnvironmentMissing(
            f"no backend can run: create the environments with {environments.setup_command()}"
        )

    def run(dataset: str) -> List[RunResult]:
        settings = dict(arguments.settings_of(args), **dict(DEMO_SETTINGS, dataset=dataset))
        configs = [RunConfig(backend=b, model=m, **settings) for m in ("mlp", "small_cnn")
                   for b in backends]  # fmt: skip
        return studies_rounds.run_once(configs, args.store, on_progress=show_progress)

    try:
        results = run("fashion_mnist")
    except DataUnavailable as err:
        log.warning("demo: Fashion-MNIST is not available (%s)", err)
        log.warning("demo: using SYNTHETIC images of the same shape; accuracy is not comparable")
        results = run("synthetic")
    return report(results, args.store)


def command_env(args: argparse.Namespace) -> int:
    with ThreadPoolExecutor(max_workers=2) as pool:
        probes = list(pool.map(environments.probe, BACKENDS))
    machine = sysinfo.machine()
    if args.json:
        found = {"kbench": sysinfo.kbench_info(), "machine": machine, "backends": probes}
        print(json.dumps(found, indent=2))
        return 0
    gpu = machine["gpu"]
    gpus = ", ".join(d["name"] for d in gpu.get("devices", [])) or f"none ({gpu.get('reason')})"
    cores = machine["cpu_logical_cores"]
    print(f"kbench {VERSION}  {cpu_text(machine)}, {cores} cores, GPUs: {gpus}")
    print(tables.environments_table(probes))
    for p in probes:
        if not p["ok"]:
            print(f"  {p['backend']}: {p['error']}")
    return 0 if all(p["ok"] for p in probes) else 1
