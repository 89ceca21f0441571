"""System packages kbench can use, installed where the system allows it: Debian's
Fashion-MNIST files (``data``), headless Chromium for the report rendering test
(``browser``), a C compiler for the GPU tests' stand-in libraries (``compiler``) and
a one-node Slurm cluster's daemons for the tests of sweeps on Slurm (``slurm``).

On Linux with ``apt-get``, run as root, each is installed through apt (once: a failed
attempt is logged, never fatal). Anywhere else the log says what to install by hand,
and what kbench does without it.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Sequence, Tuple

from kbench.setup.platforms import Platform

log = logging.getLogger(__name__)

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
DATA_STAMP = ".data-checked"  # in the envs folder: apt-get is tried once per checkout


@dataclass(frozen=True)
class SystemPackage:
    """One target: what shows it is there, the Debian packages, and what to say elsewhere."""

    target: str
    debian: Tuple[str, ...]  # apt-get install these
    why: str  # what it is for, in the log line
    elsewhere: str  # what to do without apt (not root, not Debian, not Linux)


PACKAGES: Dict[str, SystemPackage] = {
    "data": SystemPackage(
        "data", ("dataset-fashion-mnist",), "Debian's dataset-fashion-mnist",
        "Fashion-MNIST comes from the Keras cache or a download",
    ),
    "browser": SystemPackage(
        "browser", ("chromium",), "Debian's chromium (for the report rendering test)",
        "install chromium to run the report rendering test",
    ),
    "compiler": SystemPackage(
        "compiler", ("gcc", "libc6-dev"),
        "Debian's gcc (the GPU tests compile stand-in NVML/CUDA libraries)",
        "install a C compiler (cc) to run the GPU tests",
    ),
    "slurm": SystemPackage(
        "slurm", ("slurm-wlm", "munge", "slurmdbd", "mariadb-server"),
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


def can_use_apt(where: Platform) -> bool:
    is_root = getattr(os, "geteuid", lambda: -1)() == 0
    return where.family == "linux" and is_root and shutil.which("apt-get") is not None


def install(target: str, envs_dir: Path, where: Platform, apt: Callable[..., bool]) -> str:
    """Install ``target`` if it is missing: ``present``, ``installed``, ``failed`` or
    ``manual`` (the log said what to install). ``apt`` runs apt-get (replaceable in tests)."""
    package = PACKAGES[target]
    if present(target, envs_dir):
        return "present"
    if target == "data":
        envs_dir.mkdir(parents=True, exist_ok=True)
        (envs_dir / DATA_STAMP).touch()  # try once per checkout, not before every command
    if not can_use_apt(where):
        on_linux = where.family == "linux"
        why = "not root or no apt-get" if on_linux else f"no apt-get on {where.label}"
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
