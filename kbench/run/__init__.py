"""Called, ``kbench.run(backends=["torch", "jax"], model="mlp", steps=20, ...)`` runs
a comparison from Python (:func:`kbench.api.run`). As a package: one run, both sides,
the parent's runner and the child's worker.

May import: kbench.results, kbench.backends, kbench.datasets, kbench.measure,
kbench.profiling, kbench.setup, kbench_models. Never kbench.distributed: a data-parallel
config reaches its launcher through the runner's ``data_parallel``.
"""
