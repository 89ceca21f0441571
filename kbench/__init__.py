"""kbench: compare Keras backends on the same model and data."""

__version__ = "0.1.0"


def record(store="results", name=None, **kwargs):
    """Write a kbench result document of training done in your own code into the
    store ``store``, for ``kbench results``, ``compare`` and ``report``; returns its
    path. See :func:`kbench.exec.record.record` for the arguments."""
    from kbench.exec.record import record as write

    return write(store, name=name, **kwargs)
