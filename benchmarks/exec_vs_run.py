"""Does ``kbench exec`` measure a user's script as ``kbench run`` measures its worker?

Trains the same zoo model with the same batch and step count twice per round: by
``kbench run`` (synthetic data, ``--steps``) and by a plain script
(``benchmarks/exec_user_script.py``, one ``model.fit``) under ``kbench exec``, whose
instrumentation times the batches. Rounds are interleaved (run, exec, run, exec, ...)
so that drift of the machine hits both alike. Prints each round's img/s and the
exec/run ratio: median and range. Expected near 1.0: both time the same batches
after the same warmup; exec's callback adds one event line per batch.

    envs/keras3/bin/python benchmarks/exec_vs_run.py --backend jax --model mlp --rounds 3
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
from pathlib import Path

from kbench.exec.environment import ExecConfig
from kbench.exec.runner import ExecRunner
from kbench.results.config import RunConfig
from kbench.run.runner import Runner

SCRIPT = Path(__file__).resolve().parent / "exec_user_script.py"


def busy_share(result) -> str:
    share = (result.metrics.get("quality") or {}).get("other_share")
    return "unknown" if share is None else f"{share:.0%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="jax")
    parser.add_argument("--model", default="mlp", help="mlp or small_cnn (default: mlp)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100, help="measured steps (default: 100)")
    parser.add_argument("--warmup-steps", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    total = args.warmup_steps + args.steps
    ratios, speeds = [], {"run": [], "exec": []}
    with tempfile.TemporaryDirectory() as out:
        for round_ in range(args.rounds):
            run_config = RunConfig(
                backend=args.backend, model=args.model, dataset="synthetic",
                steps=args.steps, warmup_steps=args.warmup_steps, batch_size=args.batch_size,
                train_samples=total * args.batch_size, test_samples=64, threads=args.threads,
                repeat=round_,
            )  # fmt: skip
            (ran,) = Runner(output_dir=Path(out) / "run").run_all([run_config])
            exec_config = ExecConfig(
                backend=args.backend,
                command=("python", str(SCRIPT), args.model, str(args.batch_size), str(total)),
                warmup_steps=args.warmup_steps, threads=args.threads, repeat=round_,
            )  # fmt: skip
            (execd,) = ExecRunner(output_dir=Path(out) / "exec").run_all([exec_config])
            for label, result in (("run", ran), ("exec", execd)):
                if not result.ok or result.metrics.get("images_per_sec") is None:
                    raise SystemExit(f"{label}: {result.status}: {result.reason}")
                speeds[label].append(result.metrics["images_per_sec"])
            ratios.append(speeds["exec"][-1] / speeds["run"][-1])
            busy = [busy_share(r) for r in (ran, execd)]
            print(
                f"round {round_ + 1}: run {speeds['run'][-1]:,.0f} img/s, "
                f"exec {speeds['exec'][-1]:,.0f} img/s, exec/run {ratios[-1]:.3f} "
                f"(other processes' share of the cores: run {busy[0]}, exec {busy[1]})",
                flush=True,
            )
    print(
        f"{args.backend}/{args.model}, batch {args.batch_size}, {args.steps} measured steps "
        f"after {args.warmup_steps}: exec/run img/s ratio median {statistics.median(ratios):.3f} "
        f"(range {min(ratios):.3f}-{max(ratios):.3f}, {len(ratios)} rounds); run median "
        f"{statistics.median(speeds['run']):,.0f} img/s, exec median "
        f"{statistics.median(speeds['exec']):,.0f} img/s"
    )


if __name__ == "__main__":
    main()
