"""The ``kbench`` command: argument parsers and commands, the only stage that prints.

May import: every other stage. Nothing imports it (``python -m kbench`` and the
``kbench`` console script start here).
"""

from kbench.cli.app import main

__all__ = ["main"]
