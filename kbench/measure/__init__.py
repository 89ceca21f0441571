"""What reads the machine and the process, and starts and stops workers: the sampler
and its sources (psutil, NVML, RAPL, Jetson sysfs, macOS powermetrics), process control
(``processes``), system facts, model FLOPs, statistics of step times and their
precision, the events of an instrumented Keras script.

May import: nothing else in kbench.
"""


def sample(pid=None, interval_s: float = 0.2, nvml=None):
    """``with kbench.measure.sample() as s: ...``: sample this process (or ``pid``) and
    its children while the block runs; then ``s.series``, ``s.summary``, ``s.result()``.
    See :mod:`kbench.measure.usersample`. (Imported here only when called, so that
    importing this package stays free of psutil and NVML.)"""
    from kbench.measure.usersample import sample as start

    return start(pid, interval_s, nvml)
