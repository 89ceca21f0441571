"""``python3 -m kbench.setup [TARGET ...]``: create kbench's environments and the system
packages its tests use, on Linux, macOS or Windows, with nothing installed beforehand.
Every entry point calls it (``scripts/setup_envs.sh``, ``scripts/kbench`` and their
Windows ``.cmd`` twins), from the checkout, under any Python 3.9+; ``kbench setup`` (an
installed kbench, no checkout) calls :func:`set_up`.

The system packages (:data:`PACKAGES`) are installed through apt on Linux with
``apt-get``, as root (once: a failed attempt is logged, never fatal); anywhere else the
log says what to install by hand, and what kbench does without it.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from kbench.setup import check, envs
from kbench.setup.platforms import (
    ENVIRONMENTS,
    KERAS3_CUDA_FRAMEWORKS,
    MXNET_CUDA_WHEELS,
    Platform,
)

log = logging.getLogger(__name__)

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
DATA_STAMP = ".data-checked"  # in the envs folder: apt-get is tried once per checkout


@dataclass(frozen=True)
class SystemPackage:
    """One target: the Debian packages, and what to say elsewhere."""

    debian: Tuple[str, ...]  # apt-get install these
    why: str  # what it is for, in the log line
    elsewhere: str  # what to do without apt (not root, not Debian, not Linux)


PACKAGES: Dict[str, SystemPackage] = {
    "data": SystemPackage(
        ("dataset-fashion-mnist",), "Debian's dataset-fashion-mnist",
        "Fashion-MNIST comes from the Keras cache or a download",
    ),
    "browser": SystemPackage(
        ("chromium",), "Debian's chromium (for the report rendering test)",
        "install chromium to run the report rendering test",
    ),
    "compiler": SystemPackage(
        ("gcc", "libc6-dev"),
        "Debian's gcc (the GPU tests compile stand-in NVML/CUDA libraries)",
        "install a C compiler (cc) to run the GPU tests",
    ),
    "slurm": SystemPackage(
        ("slurm-wlm", "munge", "slurmdbd", "mariadb-server"),
        "Debian's slurm-wlm and munge, slurmdbd and MariaDB for sacct (the tests of sweeps "
        "on Slurm start a one-node cluster)",
        "install slurm-wlm and munge (and slurmdbd with MariaDB) to run the tests of sweeps "
        "on Slurm; they skip without",
    ),
}  # fmt: skip
SLURM_PROGRAMS = ("slurmctld", "slurmd", "munged", "slurmdbd", "mariadbd")


def present(target: str, envs_dir: Path) -> bool:
    """Whether ``target`` needs nothing done (for data: apt was tried once already)."""
    if target == "data":
        return DEBIAN_FASHION_MNIST.is_dir() or (envs_dir / DATA_STAMP).is_file()
    if target == "browser":
        return bool(shutil.which("chromium") or shutil.which("chromium-browser"))
    if target == "slurm":
        return all(shutil.which(program) for program in SLURM_PROGRAMS)
    return bool(shutil.which("cc") or shutil.which("gcc"))


def install(target: str, envs_dir: Path, where: Platform, apt: Callable[..., bool]) -> str:
    """Install ``target`` if missing with ``apt``: ``present``, ``installed``, ``failed`` or
    ``manual`` (the log said what to install)."""
    package = PACKAGES[target]
    if present(target, envs_dir):
        return "present"
    if target == "data":
        envs_dir.mkdir(parents=True, exist_ok=True)
        (envs_dir / DATA_STAMP).touch()  # try once per checkout, not before every command
    is_root = getattr(os, "geteuid", lambda: -1)() == 0
    if not (where.family == "linux" and is_root and shutil.which("apt-get")):
        why = (
            "not root or no apt-get" if where.family == "linux" else f"no apt-get on {where.label}"
        )
        log.info("%s: %s; %s", target, why, package.elsewhere)
        return "manual"
    log.info("%s: installing %s", target, package.why)
    if apt(package.debian):
        return "installed"
    fallback = "; runs fall back to synthetic data" if target == "data" else ""
    log.info("%s: apt-get could not install %s%s", target, " ".join(package.debian), fallback)
    return "failed"


def apt_get_install(packages: Sequence[str]) -> bool:
    """``apt-get install -y`` (after ``apt-get update`` if the first try fails)."""
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    command = ["apt-get", "install", "-y", "-qq", *packages]
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    if subprocess.run(command, **quiet).returncode == 0:
        return True
    subprocess.run(["apt-get", "update", "-qq"], **quiet)
    return subprocess.run(command, **quiet).returncode == 0


TARGETS = ENVIRONMENTS + tuple(PACKAGES)
DEFAULT_TARGETS = ("keras3", "mxnet", "data")

EPILOG = f"""\
targets:
  keras3    Keras 3 with TensorFlow, JAX and PyTorch (2.13.0; CUDA builds: 2.10.0), the
            harness and the tests, and kbench itself (editable), in <envs>/keras3
  mxnet     MXNet 1.9.1 with keras-mxnet 2.2.4.3 and numpy<1.24 (CUDA builds: with PyPI's
            CUDA 11 libraries on its workers' library path), in <envs>/mxnet
  data      Debian's dataset-fashion-mnist (apt-get, as root on Linux)
  browser   headless Chromium, for the report rendering test (apt-get, as root on Linux)
  compiler  a C compiler, for the GPU tests' stand-in libraries (apt-get, as root on Linux)
  slurm     slurm-wlm, munge, slurmdbd and MariaDB, for the tests that submit sweeps to a
            one-node Slurm cluster (apt-get, as root on Linux)
  (default: {" ".join(DEFAULT_TARGETS)})

A finished environment is marked by a stamp file holding its requirements: a second
call does nothing. What a platform cannot have (MXNet on Apple Silicon, CUDA builds on
macOS) is skipped with the reason.

settings (environment variables):
  KBENCH_PYTHON         interpreter to build the venvs from (default: python3.11 on the
                        PATH, else the one running this)
  KBENCH_GPU=1          CUDA builds, one CUDA per environment: keras3 CUDA 12
                        ({", ".join(KERAS3_CUDA_FRAMEWORKS)}),
                        mxnet CUDA 11 (mxnet-cu112 and PyPI's CUDA 11 libraries);
                        KBENCH_GPU=0 CPU builds; unset: each environment keeps its kind, a
                        new one follows the environments beside it, else the machine (CUDA
                        builds where an NVIDIA driver is installed). An environment of the
                        other kind is deleted and built afresh. A GPU build ends with
                        --check's checks of it and fails with the reason if they fail.
  KBENCH_MXNET_WHEEL    with KBENCH_GPU=1, MXNet's CUDA build for your CUDA (default
                        mxnet-cu112; {MXNET_CUDA_WHEELS[0]} to {MXNET_CUDA_WHEELS[-1]})
  KBENCH_ENVS_DIR       where the environments live (default: envs/ in the checkout)
  KBENCH_SETUP_DRY_RUN=1  say what would be done to each environment and the packages it
                        would install; change nothing
  KBENCH_SETUP_CHECK=0  no check of a GPU environment after its build

examples:
  python3 -m kbench.setup                          # keras3, mxnet, data
  KBENCH_GPU=1 python3 -m kbench.setup keras3      # CUDA builds
  KBENCH_SETUP_DRY_RUN=1 python3 -m kbench.setup   # what would happen
  python3 -m kbench.setup --check                  # what each environment holds (exit 1:
                                                   # something is wrong, and why)
"""


def parse(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python3 -m kbench.setup",
        description="Create kbench's Python environments (venv + pip) and the system "
        "packages its tests use, idempotently, on Linux, macOS or Windows.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    parser.add_argument("targets", nargs="*", metavar="TARGET", help="what to set up (below)")
    parser.add_argument(
        "--check", action="store_true",
        help="build nothing: check each environment that exists (or those named) against "
        "its plan (framework builds, the CUDA and cuDNN each was built for and loads, files "
        "owned by two packages, unresolved shared libraries, the driver needed); exit 1 "
        "on anything wrong",
    )  # fmt: skip
    args = parser.parse_args(argv)
    unknown = [t for t in args.targets if t not in TARGETS]
    if unknown:
        parser.error(
            f"unknown target {unknown[0]!r}; expected {', '.join(TARGETS[:-1])} or {TARGETS[-1]}"
        )
    return args


def main(argv: Optional[List[str]] = None) -> int:
    args = parse(argv)
    logging.basicConfig(level=logging.INFO, format="[setup] %(message)s", stream=sys.stderr)
    return set_up(args.targets, check_only=args.check)


def set_up(
    targets: Sequence[str], check_only: bool = False, dry_run: bool = False,
    environ: Optional[Mapping[str, str]] = None,
) -> int:  # fmt: skip
    """Set up ``targets`` (default :data:`DEFAULT_TARGETS`) with the settings of
    ``environ`` (default ``os.environ``), or only check the environments among them; the
    exit code (1: something failed or is wrong; 2: a setting is wrong). What
    ``python3 -m kbench.setup`` and ``kbench setup`` do."""
    try:
        options = envs.SetupOptions.from_environ(os.environ if environ is None else environ)
        if dry_run:
            options = replace(options, dry_run=True)
        if check_only:
            return print_check(options, [t for t in targets if t in ENVIRONMENTS])
        if not options.dry_run:
            options.envs_dir.mkdir(parents=True, exist_ok=True)
        for target in targets or DEFAULT_TARGETS:
            if target in ENVIRONMENTS:
                envs.make_environment(target, options)
            elif options.dry_run:
                log.info("%s: not checked in a dry run", target)
            else:
                install(target, options.envs_dir, options.platform, apt_get_install)
    except (ValueError, envs.SetupError) as err:  # ValueError: KBENCH_GPU, KBENCH_MXNET_WHEEL
        log.error("%s", err)
        return 2 if isinstance(err, ValueError) else 1
    except KeyboardInterrupt:
        log.error("interrupted; run it again to finish (stamps mark what is done)")
        return 130
    return 0


def print_check(options: envs.SetupOptions, names: Sequence[str]) -> int:
    """Print what each environment in ``names`` (default: all) holds; 1 when anything is
    wrong."""
    verdict = check.check(options.envs_dir, envs.existing_kind, options.platform,
                          options.mxnet_wheel, names or ENVIRONMENTS)  # fmt: skip
    print("\n".join(verdict.lines))
    if verdict.problems:
        print(f"check: {len(verdict.problems)} problem(s):")
        print("\n".join(f"  - {problem}" for problem in verdict.problems))
        return 1
    print("check: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
