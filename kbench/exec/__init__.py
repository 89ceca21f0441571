"""``kbench exec``: the user's own training script, run under each backend and
measured as ``kbench run`` measures its worker.

Parent side: :mod:`~kbench.exec.runner` gives each run its environment
(:mod:`~kbench.exec.environment`), watches its process tree (:mod:`~kbench.exec.watch`)
and writes an ordinary result document (``kind: "exec"``), as
:func:`~kbench.exec.runner.record` does from users' own processes. Child side:
:mod:`~kbench.exec.instrument`, loaded by ``site/sitecustomize.py``, wraps Keras'
``fit``, ``evaluate`` and ``predict`` to add the :mod:`kbench.callbacks` callback;
:func:`~kbench.exec.runner.observe` turns its events into figures.

Importing this package imports nothing: the child imports it under every backend.

May import: kbench.results, kbench.backends, kbench.measure, kbench.run (the runner's
environments and supervision), kbench.callbacks.
"""
