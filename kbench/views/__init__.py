"""Result documents turned into what people read: comparisons, tables, figures and the
HTML report, for model runs and for the distributed, ops and profiling pipelines.
Views read result documents and :mod:`kbench.results.analysis` only, and format; they
compute no figure and start no run.

May import: kbench.results, kbench.backends, kbench.distributed, kbench.ops,
kbench.profiling, kbench.measure (statistics).
"""
