"""Creating kbench's environments on any system, before any of them exists: what each
platform can install (``platforms``), the virtual environments (``envs``), whether one
holds what its plan says (``check``, with the standalone ``probe``), and the
command (``python3 -m kbench.setup``, ``__main__``). Standard library only, so that it
runs under whatever Python 3.9+ the user has.

May import: nothing else in kbench.
"""
