"""What a run is and what it left: run configs (validated on creation), result
documents (versioned JSON, written atomically), the results store, how every
kind of run ends in one (:mod:`kbench.results.ending`), and what the results say
(:mod:`kbench.results.analysis`, :mod:`kbench.results.readings`: read by every table,
verdict and stop rule).

May import: kbench.backends, kbench.datasets, kbench_models (the names a config is
checked against), kbench.measure (the cores a run may use; the machine a result
records, :mod:`kbench.results.ending`).
"""
