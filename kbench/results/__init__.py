"""What a run is and what it left: run configs (validated on creation), result
documents (versioned JSON, written atomically), the results store.

May import: kbench.backends, kbench.datasets, kbench_models (the names a config is
checked against), kbench.measure (the cores a run may use).
"""
