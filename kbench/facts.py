"""The package's own facts, for every stage: its version, the checkout it runs from and
its cache folder.

A leaf: it imports nothing of kbench, so a stage that needs the version (a result's
environment, ``--version``) or the checkout (``keras_configs/``, ``envs/``, the git
revision) reads it here instead of importing the root package (whose ``__init__``
is the Python API's front door).
"""

import os
from pathlib import Path

VERSION = "0.1.0"
# The folder that holds kbench/ and models/: the checkout, or site-packages when installed.
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def cache_dir() -> Path:
    """kbench's cache (downloaded data sets, results a store could not take):
    ``$KBENCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/kbench``, else ``~/.cache/kbench``."""
    if os.environ.get("KBENCH_CACHE_DIR"):
        return Path(os.environ["KBENCH_CACHE_DIR"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "kbench"
    return Path.home() / ".cache" / "kbench"
