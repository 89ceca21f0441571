"""Commands built from many runs, and what they decide: sweeps declared in files (their
plan against a store, their runs), comparisons run round by round and when they stop,
published studies (their files, claims and verdicts), parity across backends, the
largest batch that fits. The CLI calls these and prints what they return; views render
their results.

May import: kbench.run, kbench.distributed (its launcher, which the studies give the runner
for data-parallel runs), kbench.results, kbench.views, kbench.backends, kbench.datasets,
kbench.measure, kbench_models.
"""
