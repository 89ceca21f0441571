"""``kbench run``, ``demo``, ``max-batch``, ``parity`` and ``env`` (sweep, results,
compare and report are in :mod:`kbench.cli.many_runs`; ops in :mod:`kbench.cli.ops`)."""

from __future__ import annotations

import argparse
import functools
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, List, Optional

from kbench.backends import BACKENDS
from kbench.backends.switches import SWITCHES
from kbench.cli.arguments import (
    AGAIN_WITH_REPEATS,
    EXAMPLES,
    add_backend_argument,
    add_baseline_argument,
    add_batch_size_argument,
    add_memory_arguments,
    add_model_argument,
    add_output_arguments,
    add_parity_check_argument,
    add_precision_arguments,
    add_quality_arguments,
    add_ratio_budget_argument,
    add_ratio_precision_argument,
    add_repeats_argument,
    add_seed_argument,
    add_store_argument,
    add_switch_arguments,
    add_timeout_argument,
    add_warm_argument,
    add_warmup_argument,
    add_window_argument,
    finite,
    shape,
)
from kbench.datasets import DataUnavailable
from kbench.facts import VERSION
from kbench.measure import sysinfo
from kbench.results.analysis import cpu_text
from kbench.results.config import (
    DATA_FORMATS,
    DATASETS,
    DISTRIBUTED,
    OPTIMIZERS,
    ConfigError,
    RunConfig,
)
from kbench.results.result import RunResult
from kbench.run import environments
from kbench.run.progress import show_progress
from kbench.run.runner import Runner
from kbench.studies import rounds as studies_rounds
from kbench.views import tables
from kbench.views import windows as windows_view
from kbench.views.tables import parameter_mismatches
from kbench_models import MODELS

log = logging.getLogger("kbench")

DEMO_SETTINGS = dict(
    dataset="fashion_mnist",
    epochs=2,
    batch_size=64,
    warmup_steps=10,
    train_samples=12000,
    test_samples=2000,
)


def add_commands(commands) -> None:
    add_run_command(commands)
    add_demo_command(commands)
    add_max_batch_command(commands)
    add_parity_command(commands)
    add_env_command(commands)


def add_run_command(commands) -> None:
    run = commands.add_parser(
        "run",
        help="train models on backends, one process per run",
        description="Train each --model under each --backend, one after another, each in a "
        "fresh worker process with its own KERAS_HOME. Throughput counts only the steps after "
        "--warmup-steps. Ends with a table per run and a comparison per model; exits 1 if a run "
        "failed, ran out of memory or timed out (not for a mode this machine cannot run, "
        "recorded as unsupported), 2 on bad input.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_workload_arguments(run)
    add_round_arguments(run)
    add_memory_arguments(run)
    add_switch_arguments(run)
    add_quality_arguments(run)
    add_precision_arguments(
        run,
        "training steps (inference passes with --mode inference)",
        "the end of the data and epochs (inference: of --duration, unless a budget is given)",
    )
    add_parallel_and_profile_arguments(run)
    add_output_arguments(run, inter_op=True)
    run.set_defaults(handler=command_run)


def add_workload_arguments(run) -> None:
    """What ``kbench run`` trains or infers: backends, models, data and how long."""
    add_backend_argument(run, list(BACKENDS), required=True, again=AGAIN_WITH_REPEATS)
    add_model_argument(
        run,
        list(MODELS),
        default=["mlp"],
        default_text="default: mlp",
        again=AGAIN_WITH_REPEATS,
        own="or your own model: path/to/file.py:build (or package.module:build), a function "
        "build(input_shape, num_classes) returning a Keras model (see examples/my_model.py), "
        "or a Keras 3 saved model path/to/model.keras (its saved weights on tensorflow, jax "
        "and torch)",
    )
    add_data_arguments(run)
    add_batch_size_argument(run)
    length = run.add_mutually_exclusive_group()
    length.add_argument("--epochs", type=int, default=1, help="passes over the training set")
    length.add_argument(
        "--steps", type=int, help="measured steps instead of epochs (after the warmup steps)"
    )
    add_warmup_argument(
        run, 5, "training steps, or forward passes with --mode inference: tracing, compilation"
    )
    run.add_argument(
        "--data-format",
        metavar="FORMAT",
        help=f"override the backend's image_data_format: {' or '.join(DATA_FORMATS)} "
        "(defaults: keras_configs/<backend>.json)",
    )
    run.add_argument("--optimizer", default="adam", help=f"{' or '.join(OPTIMIZERS)}")
    run.add_argument("--learning-rate", type=finite, default=1e-3)
    add_seed_argument(run)
    run.add_argument(
        "--mode",
        default="train",
        help="train (default) or inference: forward passes of one batch for --duration "
        "seconds after the warmup passes; reports latency p50/p90/p99",
    )
    run.add_argument(
        "--duration",
        type=finite,
        default=10.0,
        dest="duration_s",
        metavar="SECONDS",
        help="inference: measured seconds of forward passes (default: 10)",
    )


def add_data_arguments(run) -> None:
    """Which data ``kbench run`` trains on, and how much of it."""
    run.add_argument(
        "--dataset",
        default="fashion_mnist",
        help=f"one of: {', '.join(DATASETS)} (default: fashion_mnist); or your own arrays: "
        "npz:path/to/data.npz holding x_train, y_train, x_test, y_test (integer labels, "
        "images channels last, uint8 or floats in [0, 1]); folder:path/to/images, one "
        "folder of images per class (PATH/train/ and PATH/val/, else 10%% of each class held "
        "out; resized to --image-size or the model's input); tfds:NAME[/CONFIG][:VERSION], "
        "a tensorflow-datasets image set tfds has prepared. Real data is read "
        "from --data-dir, the Keras cache (~/.keras/datasets, read only), kbench's cache, "
        "Debian's dataset-fashion-mnist, prepared tensorflow-datasets, else downloaded; "
        "synthetic data is labelled so in every result",
    )
    run.add_argument(
        "--data-dir",
        help="a directory holding the data set's files as published (mnist.npz, "
        "cifar-10-python.tar.gz, the Fashion-MNIST idx files, imdb.npz, ...)",
    )
    run.add_argument("--train-samples", type=int, help="use only the first N training samples")
    run.add_argument("--test-samples", type=int, help="use only the first N test samples")
    run.add_argument(
        "--input-shape",
        type=shape,
        metavar="HxWxC",
        help="synthetic data only: HxWxC images (channels last), STEPSxFEATURES for lstm, "
        "STEPS for lstm_embedding (default: the model's own)",
    )
    run.add_argument(
        "--num-classes",
        type=int,
        help="synthetic data (default: the model's own), or npz: data (default: the "
        "largest label + 1)",
    )
    run.add_argument(
        "--image-size",
        type=shape,
        metavar="HxW",
        help="resize real images (bilinear), e.g. 64x64 for alexnet on CIFAR",
    )


def add_round_arguments(run) -> None:
    """How ``kbench run`` repeats its runs and compares them round by round."""
    add_repeats_argument(
        run,
        shows="; tables show medians, ranges and per-round ratios. Without it, several "
        "backends are compared in warm interleaved windows (--window)",
        default=None,
        default_text="1 for one backend; none for several, which are measured in windows",
    )
    add_window_argument(
        run,
        None,
        "several backends, no --repeats, training: one warm worker per backend builds "
        "and compiles once, then the backends measure windows of about this many seconds "
        "in turn (A B C, B C A, ...), round after round, until every ratio to the baseline "
        "has its 95%% interval within --ratio-precision or --ratio-budget is spent; a round "
        "with a window flagged busy is dropped, and said. --steps N: windows of N steps "
        f"instead (default: {studies_rounds.WINDOW_S:g} s)",
    )
    add_warm_argument(run)
    add_baseline_argument(run, "the first in --backend")
    add_parity_check_argument(run)
    add_ratio_precision_argument(
        run,
        "stop adding rounds once every backend's per-round speed ratio to the baseline "
        "has a 95%% interval within +-P of its median (order statistics: from 6 rounds on), "
        "e.g. 0.05; with --repeats N, N is then the most rounds (default: "
        f"{studies_rounds.WINDOW_PRECISION:g} for windows; with --repeats, off: every round runs)",
    )
    add_ratio_budget_argument(
        run,
        "start no round after this many seconds (windows: counted from the workers' "
        f"start; default {studies_rounds.WINDOW_BUDGET_S:g}; with --repeats and "
        "--ratio-precision: default none)",
    )


def add_parallel_and_profile_arguments(run) -> None:
    """``kbench run``'s data-parallel training and profiler options."""
    parallel = run.add_argument_group("data-parallel training (each framework's own engine)")
    parallel.add_argument(
        "--distributed",
        default="none",
        metavar="MODE",
        help=f"one of: {', '.join(DISTRIBUTED)} (default: none). --batch-size is per worker; "
        "the global batch is batch size x workers",
    )
    parallel.add_argument("--workers", type=int, default=1, help="worker processes (default: 1)")
    profiling = run.add_argument_group("where the time goes (the framework's own profiler)")
    profiling.add_argument(
        "--profile",
        action="store_true",
        help="after the measured run, run --profile-steps more steps under the framework's "
        "profiler (torch.profiler, TensorFlow's profiler, JAX's trace) and record time per "
        "phase (data, forward, backward, update) and the top operators, with the "
        "`kbench ops` name where one fits; throughput is measured without the profiler. "
        "MXNet's wheel has no profiler: recorded as unsupported",
    )
    profiling.add_argument(
        "--profile-steps",
        type=int,
        default=10,
        metavar="N",
        help="steps (forward passes with --mode inference) to profile (default: 10)",
    )


def add_demo_command(commands) -> None:
    demo = commands.add_parser(
        "demo",
        help="MLP and small CNN on Fashion-MNIST across every runnable backend",
        description="The main job on an embedded default: MLP and small CNN trained for "
        f"{DEMO_SETTINGS['epochs']} epochs on {DEMO_SETTINGS['train_samples']} Fashion-MNIST "
        "images (synthetic images of the same shape if the real files are absent, and said "
        "so) under every backend whose environment exists, then a comparison table.",
    )
    add_backend_argument(demo, list(BACKENDS), default_text="default: every runnable one")
    add_output_arguments(demo)
    demo.set_defaults(handler=command_demo)


def add_max_batch_command(commands) -> None:
    max_batch = commands.add_parser(
        "max-batch",
        help="the largest batch that trains without running out of memory",
        description="Doubling from --start, then bisection: each probe trains a few steps on "
        "synthetic data in a fresh worker process (recorded in --store like any run). A "
        "batch does not fit when the run ends 'oom' or the worker is killed by SIGKILL. On a "
        "machine without a GPU the probes use host memory: keep --limit within what the "
        "machine can spare.",
    )
    add_backend_argument(max_batch, list(BACKENDS), required=True, single=True)
    add_model_argument(max_batch, list(MODELS), single=True)
    max_batch.add_argument("--start", type=int, default=1, help="first batch tried (default: 1)")
    max_batch.add_argument(
        "--limit", type=int, default=4096, help="largest batch tried (default: 4096)"
    )
    max_batch.add_argument("--steps", type=int, default=2, help="measured steps per probe")
    max_batch.add_argument(
        "--input-shape", type=shape, metavar="HxWxC", help="default: the model's own"
    )
    add_memory_arguments(max_batch)
    add_output_arguments(max_batch, inter_op=True)
    max_batch.set_defaults(handler=command_max_batch)


def add_parity_command(commands) -> None:
    parity = commands.add_parser(
        "parity",
        help="prove the backends compute the same thing (same weights, same batches)",
        description="For each model the first backend (the reference, a Keras backend) builds "
        "it and exports its initial weights; every other backend, torch-native included, "
        "loads them, computes the outputs of one batch, and trains --steps steps of plain "
        "SGD on the same seeded mini-batches. Reports the largest output difference and "
        "the loss drift per backend; exits 1 when one passes its tolerance. Default "
        "tolerances: outputs within 1e-4 absolute (correct implementations agree to about "
        "1e-6 in float32), losses within 1e-2 relative at every step (float32 rounding "
        "grows through SGD steps: up to 5.2e-3 on VGG-16 between correct implementations "
        "on a 2-core CPU, whose float64 gradients agree to 3e-14), or within 10 times "
        "the model's noise floor where that is larger: "
        "the reference also retrains from its weights nudged by 1e-7, and how far those "
        "losses drift is what rounding alone does to this model (deep BatchNorm networks "
        "amplify it a thousandfold per step). Known differences of a backend are noted "
        "beside its numbers.",
    )
    add_model_argument(
        parity, list(MODELS), default=list(MODELS), default_text="default: every zoo model"
    )
    add_backend_argument(
        parity, list(BACKENDS),
        default_text="the first is the reference; default: every runnable backend, "
        "tensorflow first",
    )  # fmt: skip
    parity.add_argument("--steps", type=int, default=3, help="SGD steps compared (default: 3)")
    add_batch_size_argument(parity, 8)
    parity.add_argument(
        "--learning-rate", type=finite, default=1e-3,
        help="default: 0.001 (larger rates make deep BatchNorm models chaotic: rounding "
        "differences then grow a thousandfold per step)",
    )  # fmt: skip
    parity.add_argument("--dataset", default="synthetic", help="default: synthetic")
    parity.add_argument(
        "--input-shape", type=shape, metavar="SHAPE",
        help="synthetic data only: the input shape for every model given (default: each "
        "model's own), e.g. 64x64x3 to check resnet50 faster",
    )  # fmt: skip
    add_seed_argument(parity, "weights nudged for the noise floor and synthetic data")
    parity.add_argument("--output-atol", type=finite, default=1e-4, metavar="TOL")
    parity.add_argument("--loss-rtol", type=finite, default=1e-2, metavar="TOL")
    add_store_argument(parity)
    add_timeout_argument(parity)
    parity.set_defaults(handler=command_parity)


def add_env_command(commands) -> None:
    env = commands.add_parser(
        "env",
        help="what is installed per environment and which backends can run",
        description="Starts each backend the way a run would (its interpreter, KERAS_HOME, "
        "Keras import, backend check) and reports versions and devices.",
    )
    env.add_argument("--json", action="store_true", help="print the report as JSON")
    env.set_defaults(handler=command_env)


def report(results: List[RunResult], output_dir: Path, baseline: Optional[str] = None) -> int:
    print(tables.run_table(results))
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
    if args.baseline is not None and args.baseline not in args.backend:
        raise ConfigError(
            "baseline",
            f"expected one of the backends run ({', '.join(args.backend)}); "
            f"received {args.baseline!r}.",
        )
    windowed = in_windows(args)
    if not windowed and not args.parity_check:
        raise ConfigError(
            "no_parity_check",
            "expected it only with warm windows (several backends, no --repeats, training), "
            "whose warm-up it skips; fresh-process runs make no such check (kbench parity "
            "does). Drop --no-parity-check.",
        )
    settings = run_settings(args)
    baseline = args.baseline
    if windowed:
        baseline = args.baseline or args.backend[0]  # never a backend whose worker failed
        settings["window_s"] = args.window_s or studies_rounds.WINDOW_S
        if args.ratio_precision is None:
            args.ratio_precision = studies_rounds.WINDOW_PRECISION
        if args.ratio_budget_s is None:
            args.ratio_budget_s = studies_rounds.WINDOW_BUDGET_S
    rounds = studies_rounds.plan_rounds(args.backend, args.model, args.repeats or 1, **settings)
    stop = None
    if args.ratio_precision is not None:
        if not windowed:
            check_ratio_precision(args)
        stop = functools.partial(
            studies_rounds.ratio_stop, args.ratio_precision, args.ratio_budget_s, baseline
        )
    elif args.ratio_budget_s is not None:
        raise ConfigError("ratio_budget", "expected it only with --ratio-precision.")
    results, stopped = studies_rounds.run_rounds(
        rounds,
        args.store,
        busy_threshold=args.busy_threshold,
        wait_quiet_s=args.wait_quiet,
        stop=stop,
        warm=args.warm,
        on_progress=show_progress,
        baseline=baseline,
        check_parity=args.parity_check,
    )
    if windowed:
        return report_windows(results, args.store, baseline, stopped)
    code = report(results, args.store, args.baseline)
    if stop is not None:
        ran = len({r.config.get("repeat", 0) for r in results})
        print(f"rounds: {ran} of at most {args.repeats or 1}: {stopped or 'every round ran'}")
    return code


def in_windows(args: argparse.Namespace) -> bool:
    """Whether ``kbench run`` measures warm interleaved windows: several backends, no
    --repeats, training in one process each. ``--window`` anywhere else is refused."""
    fresh_only = (
        "--repeats" if args.repeats is not None
        else "--warm" if args.warm
        else "one backend" if len(args.backend) < 2
        else "--mode inference" if args.mode != "train"
        else f"--distributed {args.distributed}" if args.distributed != "none"
        else "--profile" if args.profile
        else "--target-precision/--time-budget"
        if args.target_precision is not None or args.time_budget_s is not None
        else None
    )  # fmt: skip
    if fresh_only is None and args.sample_interval_s == 0:
        log.warning(
            "--sample-interval 0: no window can be checked for a busy machine, so no round "
            "is dropped; the ratios may carry other processes' load"
        )
    if fresh_only is not None and args.window_s is not None:
        raise ConfigError(
            "window",
            f"expected --window only for warm windows (several backends, no --repeats, "
            f"training in one process each); received it with {fresh_only}. Drop --window, "
            "or the option that needs fresh processes.",
        )
    return fresh_only is None


def report_windows(
    results: List[RunResult], output_dir: Path, baseline: Optional[str], stopped: Optional[str]
) -> int:
    """The end of a comparison in warm windows: the comparison (its per-round ratios and
    their intervals), the windows per backend, and why measuring stopped."""
    counted = [r for r in results if not r.dropped]
    print(tables.comparison_tables(counted, baseline))
    print()
    print(windows_view.windows_table(results))
    print(f"\nmeasuring stopped: {stopped}")
    print(f"{len(results)} window result(s) in {output_dir}/, worker logs in {output_dir}/logs/")
    return ending_lines(results)


def run_settings(args: argparse.Namespace) -> Dict[str, Any]:
    """``kbench run``'s flags as the run settings of :func:`studies.rounds.plan_rounds`."""
    return dict(
        dataset=args.dataset, batch_size=args.batch_size, epochs=args.epochs, steps=args.steps,
        warmup_steps=args.warmup_steps, data_format=args.data_format, optimizer=args.optimizer,
        learning_rate=args.learning_rate, train_samples=args.train_samples,
        test_samples=args.test_samples, input_shape=args.input_shape,
        num_classes=args.num_classes, image_size=args.image_size, data_dir=args.data_dir,
        threads=args.threads, inter_op_threads=args.inter_op_threads,
        seed=args.seed, timeout_s=args.timeout_s, mode=args.mode, duration_s=args.duration_s,
        sample_interval_s=args.sample_interval_s, device=args.device,
        gpu_memory_fraction=args.gpu_memory_fraction, gpu_memory_growth=args.gpu_memory_growth,
        **{name: getattr(args, name) for name in SWITCHES},
        distributed=args.distributed, workers=args.workers,
        profile=args.profile, profile_steps=args.profile_steps,
        target_precision=args.target_precision, time_budget_s=args.time_budget_s,
    )  # fmt: skip


def check_ratio_precision(args: argparse.Namespace) -> None:
    if len(args.backend) < 2:
        raise ConfigError(
            "ratio_precision",
            f"expected at least two backends to compare; received {', '.join(args.backend)}. "
            "For one backend's own precision use --target-precision.",
        )
    if (args.repeats or 1) < 6:
        raise ConfigError(
            "ratio_precision",
            f"expected --repeats of at least 6 (the most rounds to run: a 95% interval on a "
            f"median needs 6); received --repeats {args.repeats or 1}.",
        )


def command_max_batch(args: argparse.Namespace) -> int:
    from kbench.studies import maxbatch

    for setting, value in (("start", args.start), ("limit", args.limit)):
        if value < 1:
            raise ConfigError(setting, f"expected a positive integer; received {value}.")
    if args.start > args.limit:
        raise ConfigError("start", f"expected at most --limit {args.limit}; received {args.start}.")
    template = RunConfig(
        backend=args.backend, model=args.model, dataset="synthetic", steps=args.steps,
        warmup_steps=1, input_shape=args.input_shape, threads=args.threads,
        inter_op_threads=args.inter_op_threads, timeout_s=args.timeout_s,
        sample_interval_s=args.sample_interval_s, device=args.device,
        gpu_memory_fraction=args.gpu_memory_fraction, gpu_memory_growth=args.gpu_memory_growth,
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
        print(
            f"\n{label}: largest batch that fits: {found.largest_fit} "
            f"({found.first_failure} does not)"
        )
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
    for setting in ("steps", "batch_size"):
        if getattr(args, setting) < 1:
            raise ConfigError(setting, f"expected a positive integer; received "
                                       f"{getattr(args, setting)}.")  # fmt: skip
    tolerance = parity.Tolerance(output_atol=args.output_atol, loss_rtol=args.loss_rtol)
    runner = Runner(output_dir=args.store, on_progress=show_progress)
    rows = parity.check_models(
        runner, {model: backends for model in args.model}, steps=args.steps,
        batch_size=args.batch_size, learning_rate=args.learning_rate, dataset=args.dataset,
        seed=args.seed, tolerance=tolerance, timeout_s=args.timeout_s,
        input_shapes={model: args.input_shape for model in args.model},
    )  # fmt: skip

    print(parity.rows_table(rows))
    for note in sorted({note for r in rows for note in r.notes}):
        backends = sorted({r.backend for r in rows if note in r.notes})
        print(f"note ({', '.join(backends)}): {note}")
    print(
        f"\nTolerance: {tolerance.describe()}; {args.steps} SGD steps, batch {args.batch_size}, "
        f"learning rate {args.learning_rate:g}, {args.dataset} data."
    )
    failed = [r for r in rows if not r.passed]
    if failed:
        print(f"{len(failed)} of {len(rows)} backend/model pairs do not match.")
    return 1 if failed else 0


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
            f"no backend can run: create the environments with {environments.SETUP_SCRIPT}"
        )

    def configs(dataset: str) -> List[RunConfig]:
        settings = dict(DEMO_SETTINGS, dataset=dataset)
        return [
            RunConfig(
                backend=b,
                model=m,
                threads=args.threads,
                timeout_s=args.timeout_s,
                sample_interval_s=args.sample_interval_s,
                device=args.device,
                **settings,
            )  # fmt: skip
            for m in ("mlp", "small_cnn")
            for b in backends
        ]

    try:
        results = studies_rounds.run_once(
            configs("fashion_mnist"), args.store, on_progress=show_progress
        )
    except DataUnavailable as err:
        log.warning("demo: Fashion-MNIST is not available (%s)", err)
        log.warning("demo: using SYNTHETIC images of the same shape; accuracy is not comparable")
        results = studies_rounds.run_once(
            configs("synthetic"), args.store, on_progress=show_progress
        )
    return report(results, args.store)


def command_env(args: argparse.Namespace) -> int:
    with ThreadPoolExecutor(max_workers=2) as pool:
        probes = list(pool.map(environments.probe, BACKENDS))
    machine = sysinfo.machine()
    if args.json:
        print(
            json.dumps(
                {"kbench": sysinfo.kbench_info(), "machine": machine, "backends": probes}, indent=2
            )
        )
        return 0
    gpu = machine["gpu"]
    gpus = ", ".join(d["name"] for d in gpu.get("devices", [])) or f"none ({gpu.get('reason')})"
    print(
        f"kbench {VERSION}  {cpu_text(machine)}, {machine['cpu_logical_cores']} cores, GPUs: {gpus}"
    )
    print(tables.environments_table(probes))
    for p in probes:
        if not p["ok"]:
            print(f"  {p['backend']}: {p['error']}")
    return 0 if all(p["ok"] for p in probes) else 1
