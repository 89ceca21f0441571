"""Creating kbench's environments on any system, before any of them exists: what each
platform can install and where an environment's libraries are (``platforms``), the
virtual environments built with ``venv`` and ``pip`` (``envs``), whether one holds what
its plan says (``check``, with the CUDA facts of ``cuda`` and the standalone ``probe``),
and the command that runs them and installs the system packages the tests use
(``python3 -m kbench.setup``, ``__main__``). Standard library only, so that it runs
under whatever Python 3.9+ the user has.

May import: nothing else in kbench.
"""
