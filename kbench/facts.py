"""The package's own facts, for every stage: its version and the checkout it runs from.

A leaf: it imports nothing of kbench, so a stage that needs the version (a result's
environment, ``--version``) or the checkout (``keras_configs/``, ``envs/``, the git
revision) reads it here instead of importing the root package (whose ``__init__``
is the Python API's front door).
"""

from pathlib import Path

VERSION = "0.1.0"
# The folder that holds kbench/ and models/: the checkout, or site-packages when installed.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
