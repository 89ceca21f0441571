"""``kbench exec``: the user's own training script, run under each backend and
measured as ``kbench run`` measures its worker.

The parent side (:mod:`~kbench.exec.runner`) gives each run its environment (the
backend's interpreter, ``KERAS_BACKEND``, a fresh ``KERAS_HOME``, threads, device
hiding, memory variables), watches the process tree (:mod:`~kbench.exec.watch`: the
sampler, the timeout, a capped log, epochs from the events file, and everything the
script started stopped at the end), and writes an ordinary result document
(``kind: "exec"``). The child side
(:mod:`~kbench.exec.instrument`, loaded by ``site/sitecustomize.py``) wraps Keras'
``fit``, ``evaluate`` and ``predict`` to add the :mod:`kbench.callbacks` callback;
:mod:`~kbench.exec.figures` turns its events into training or inference figures;
:func:`~kbench.exec.runner.record` writes result documents from users' own processes.

Importing this package imports nothing: the child imports it under every backend.

May import: kbench.results, kbench.backends, kbench.measure, kbench.run (the runner's
environments and supervision), kbench.callbacks.
"""
