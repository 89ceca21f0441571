"""Creating kbench's environments on any system, before any of them exists: what each
platform can install (``platforms``), the virtual environments built with ``venv`` and
``pip`` (``envs``), the system packages the tests use (``system``), and the command
that runs them (``python3 -m kbench.setup``). Standard library only, so that it runs
under whatever Python 3.9+ the user has.

May import: nothing else in kbench.
"""
