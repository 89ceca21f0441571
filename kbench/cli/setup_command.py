"""``kbench setup``: kbench's own environments for a kbench installed with pip, the same
plans as ``scripts/setup_envs.sh`` in a checkout (:mod:`kbench.setup`), built where the
runner and ``kbench env`` look for them."""

from __future__ import annotations

import argparse

from kbench.setup import __main__ as setup_main
from kbench.setup.envs import default_envs_dir

DESCRIPTION = """\
Create kbench's own virtual environments (venv + pip) and, as root on Debian, the system
packages its tests use, idempotently: what `scripts/setup_envs.sh` does in a checkout,
for a kbench installed with pip. You need them only for backends the Python kbench runs
under lacks: keras-mxnet (Keras 2.2.4) never shares an environment with Keras 3, so the
mxnet backends need `kbench setup mxnet`; the Keras 3 backends can also run from your own
environment (`pip install 'kbench[tensorflow,jax,torch]'`). A finished environment is
left alone; what this platform cannot have is skipped with the reason. On Linux the CPU
builds take torch from PyTorch's CPU wheel index, not PyPI's CUDA build.

The environments go to KBENCH_ENVS_DIR, else envs/ in a checkout, else the user's data
folder ($XDG_DATA_HOME/kbench/envs, ~/.local/share/kbench/envs; %LOCALAPPDATA%\\kbench\\envs
on Windows); a worker finds them there. The settings of `python3 -m kbench.setup --help`
apply: KBENCH_GPU=1 for CUDA builds (0: CPU builds), KBENCH_MXNET_WHEEL, KBENCH_PYTHON
(the Python the venvs are built from), KBENCH_SETUP_CHECK=0.
"""

EXAMPLES = """\
targets:
  keras3    Keras 3 with TensorFlow, JAX and PyTorch, the harness and the tests' tools
  mxnet     MXNet 1.9.1 with keras-mxnet 2.2.4.3 (the mxnet and mxnet-gluon backends)
  data, browser, compiler, slurm   the tests' system packages (apt-get, as root)
  (default: keras3 mxnet data)

examples:
  kbench setup mxnet                     the mxnet backends' own environment
  kbench setup --dry-run                 what would be done and installed; nothing changes
  KBENCH_GPU=1 kbench setup keras3       CUDA builds
  kbench setup --check                   what each environment holds (exit 1: wrong, why)
"""


def target(word: str) -> str:
    """A set-up target, checked: an unknown one is refused with the known ones."""
    if word not in setup_main.TARGETS:
        raise argparse.ArgumentTypeError(
            f"unknown target {word!r}; expected {', '.join(setup_main.TARGETS)}"
        )
    return word


def add_command(commands) -> None:
    setup = commands.add_parser(
        "setup", help="create kbench's own environments (keras3, mxnet) for an installed kbench",
        description=DESCRIPTION, epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    setup.add_argument("targets", nargs="*", type=target, metavar="TARGET",
                       help="what to set up (below)")  # fmt: skip
    setup.add_argument(
        "--check", action="store_true",
        help="build nothing: check each environment that exists (or those named) against "
        "its plan (CPU or CUDA builds, the CUDA each was built for, files owned by two "
        "packages, unresolved shared libraries); exit 1 on anything wrong",
    )  # fmt: skip
    setup.add_argument(
        "--dry-run", action="store_true",
        help="say what would be done to each environment and what it would install "
        "(KBENCH_SETUP_DRY_RUN=1); change nothing",
    )  # fmt: skip
    setup.set_defaults(handler=command_setup)


def command_setup(args: argparse.Namespace) -> int:
    print(f"kbench's environments: {default_envs_dir()}")
    return setup_main.set_up(args.targets, check_only=args.check, dry_run=args.dry_run)
