"""A sweep over per-run switches: one warm worker per backend against a worker per run.

A warm worker applies each run's own per-run switches (jit_compile, run_eagerly,
torch_compile, mixed_precision, hybridize: ``Switch.per_run``) and puts them back for its
next run, so runs that differ only in them share one worker; until they were per-run,
each switch setting started a worker of its own, as each run does without ``--warm``.

For each backend, the runs of its switch settings (the defaults, then each switch on in
turn, then the defaults again: ``SETTINGS``), round after round in two ways, interleaved
(each way first in every other round): ``warm`` (``Runner(warm=True)``, one worker
process for the backend's runs) and ``fresh`` (a worker per run). Reported per backend:
worker processes per round, each way's median wall and CPU seconds (the workers' user
and system time) and the CPU ratio; and whether both ways computed the same: each run's
switch record (what the backend did with every switch) and its final training loss, warm
against fresh, run by run. A switch left on for the next run (a dtype policy, a compiled
model) shows there.

    envs/keras3/bin/python benchmarks/warm_switches.py --rounds 3
    envs/keras3/bin/python benchmarks/warm_switches.py --backend torch-native --model small_cnn
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

from kbench.backends.switches import SWITCHES
from kbench.results.config import RunConfig
from kbench.results.result import RunResult
from kbench.run import environments
from kbench.run.runner import Runner, shared_workers

# Each backend's per-run switches, as settings in the order its runs take them: every
# switch on, and between them the defaults, so that a switch left on would show.
SETTINGS: Dict[str, List[Dict[str, Any]]] = {
    "tensorflow": [{}, {"jit_compile": "on"}, {"run_eagerly": True},
                   {"mixed_precision": "bfloat16"}, {}],
    "jax": [{}, {"jit_compile": "off"}, {"mixed_precision": "bfloat16"}, {}],
    "torch": [{}, {"jit_compile": "on"}, {"mixed_precision": "bfloat16"}, {}],
    "torch-native": [{}, {"mixed_precision": "bfloat16"}, {"torch_compile": True}, {}],
    "mxnet-gluon": [{}, {"hybridize": True}, {}],
}  # fmt: skip


def configs_for(backend: str, args: argparse.Namespace, round_index: int) -> List[RunConfig]:
    common = dict(
        backend=backend, model=args.model, dataset="synthetic", steps=args.steps,
        warmup_steps=1, batch_size=16, train_samples=64, test_samples=16,
        sample_interval_s=0, threads=args.threads, repeat=round_index,
    )  # fmt: skip
    return [RunConfig(**common, **switches) for switches in SETTINGS[backend]]


def timed(runner: Runner, configs: List[RunConfig]) -> Tuple[float, float, List[RunResult]]:
    """(wall seconds, the workers' CPU seconds, results) of one way's runs."""
    before, began = os.times(), time.perf_counter()
    results = runner.run_all(configs)
    wall, after = time.perf_counter() - began, os.times()
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return wall, cpu, results


def same_computation(warm: List[RunResult], fresh: List[RunResult]) -> List[str]:
    """Where a warm run did not compute or record what its fresh twin did."""
    found = []
    for index, (w, f) in enumerate(zip(warm, fresh)):
        changed = [f"{k}={w.config[k]}" for k, s in SWITCHES.items()
                   if s.per_run and w.config.get(k, s.default) != s.default]  # fmt: skip
        label = f"run {index + 1} ({', '.join(changed) or 'defaults'})"
        if not (w.ok and f.ok):
            found.append(f"{label}: warm {w.status} {w.reason or ''}, fresh {f.status}")
            continue
        switches = (w.environment["framework"]["switches"], f.environment["framework"]["switches"])
        if switches[0] != switches[1]:
            differing = [k for k in switches[0] if switches[0][k] != switches[1].get(k)]
            found.append(f"{label}: switch records differ in {differing}")
        losses = (w.metrics["final_train_loss"], f.metrics["final_train_loss"])
        if abs(losses[0] - losses[1]) > 1e-5 * max(abs(losses[1]), 1e-12):
            found.append(f"{label}: final loss {losses[0]!r} warm, {losses[1]!r} fresh")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default=",".join(SETTINGS), help="comma-separated")
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    runnable = {b for b, missing in environments.runnable_backends().items() if missing is None}
    backends = [b for b in args.backend.split(",") if b in runnable]
    skipped = sorted(set(args.backend.split(",")) - set(backends))
    ways = {"warm": {b: ([], []) for b in backends}, "fresh": {b: ([], []) for b in backends}}
    problems: Dict[str, List[str]] = {b: [] for b in backends}
    with tempfile.TemporaryDirectory() as out:
        runners = {"warm": Runner(output_dir=Path(out), warm=True),
                   "fresh": Runner(output_dir=Path(out))}  # fmt: skip
        for round_index in range(args.rounds):
            for backend in backends:
                configs = configs_for(backend, args, round_index)
                order = ["warm", "fresh"][:: 1 if round_index % 2 == 0 else -1]
                results = {}
                for way in order:
                    wall, cpu, results[way] = timed(runners[way], configs)
                    ways[way][backend][0].append(wall)
                    ways[way][backend][1].append(cpu)
                problems[backend] += same_computation(results["warm"], results["fresh"])
    print(
        f"{args.model}, {args.steps} steps of batch 16, {args.threads} thread(s), synthetic "
        f"data, {args.rounds} interleaved rounds; medians; CPU: the workers' user + system"
    )
    header = (
        f"{'backend':13s} {'runs':>4s} {'workers warm/fresh':>18s} {'wall s warm/fresh':>18s} "
        f"{'CPU s warm/fresh':>17s} {'CPU ratio':>9s}  same computation"
    )
    print(header)
    print("-" * len(header))
    for backend in backends:
        configs = configs_for(backend, args, 0)
        workers = f"{len(shared_workers(configs))}/{len(configs)}"
        (w_wall, w_cpu), (f_wall, f_cpu) = (
            [statistics.median(v) for v in ways[way][backend]] for way in ("warm", "fresh")
        )
        same = "yes" if not problems[backend] else "NO: " + "; ".join(problems[backend][:3])
        print(
            f"{backend:13s} {len(configs):4d} {workers:>18s} {w_wall:8.1f}/{f_wall:<9.1f} "
            f"{w_cpu:8.1f}/{f_cpu:<8.1f} x{w_cpu / f_cpu:8.2f}  {same}"
        )
    if skipped:
        print(f"not runnable here: {', '.join(skipped)}")


if __name__ == "__main__":
    main()
