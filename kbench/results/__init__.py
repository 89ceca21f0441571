"""What a run is and what it left: run configs (validated on creation), result
documents (versioned JSON, written atomically), the results store, and how every
kind of run ends in one (:mod:`kbench.results.ending`).

May import: kbench.backends, kbench.datasets, kbench_models (the names a config is
checked against), kbench.measure (the cores a run may use; the machine a result
records, :mod:`kbench.results.ending`).
"""
