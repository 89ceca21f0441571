"""The package's own facts, for every stage: its version, the checkout it runs from and
its cache folder.

A leaf: it imports nothing of kbench, so a stage that needs the version (a result's
environment, ``--version``) or the checkout (``keras_configs/``, ``envs/``, the git
revision) reads it here instead of importing the root package (whose ``__init__``
is the Python API's front door).
"""

import os
import sys
from pathlib import Path

VERSION = "0.1.0"
# The folder that holds kbench/ and models/: the checkout, or site-packages when installed.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
# Run from a checkout (scripts/, keras_configs/ beside kbench/), or installed by pip.
IN_CHECKOUT = (PROJECT_ROOT / "keras_configs").is_dir() and (PROJECT_ROOT / "scripts").is_dir()


def shared_folder(name: str) -> Path:
    """A folder of the checkout kbench reads (``keras_configs``, ``studies``, ``sweeps``):
    in the checkout, else where ``pip install`` put it, ``<prefix>/share/kbench/NAME``."""
    return PROJECT_ROOT / name if IN_CHECKOUT else Path(sys.prefix) / "share" / "kbench" / name


def cache_dir() -> Path:
    """kbench's cache (downloaded data sets, results a store could not take):
    ``$KBENCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/kbench``, else ``~/.cache/kbench``."""
    if os.environ.get("KBENCH_CACHE_DIR"):
        return Path(os.environ["KBENCH_CACHE_DIR"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "kbench"
    return Path.home() / ".cache" / "kbench"
