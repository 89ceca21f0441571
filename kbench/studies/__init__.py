"""Commands built from many runs: sweeps declared in files, parity across backends,
the largest batch that fits.

May import: kbench.run, kbench.results, kbench.views, kbench.backends, kbench.datasets,
kbench.measure, kbench_models.
"""
