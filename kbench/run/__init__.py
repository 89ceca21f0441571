"""Called, ``kbench.run(backends=["torch", "jax"], model="mlp", steps=20, ...)`` runs
a comparison from Python and returns its results (:func:`kbench.api.run`; ``import
kbench`` makes this package callable).

As a package: one run, both sides: the parent's runner (environments, task files, supervision,
the metrics it adds) and the child's worker (trainer, inference, parity replay, probe).

May import: kbench.results, kbench.backends, kbench.datasets, kbench.measure,
kbench.profiling, kbench.setup, kbench_models. Never kbench.distributed, which builds on
this stage: a data-parallel config reaches its launcher through the runner's
``data_parallel``, which the studies give it.
"""
