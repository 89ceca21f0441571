"""kbench: compare Keras backends on the same model and data.

The Python API (:mod:`kbench.api`), for notebooks::

    import kbench
    results = kbench.run(backends=["torch", "jax"], model="mlp", dataset="synthetic")
    results.frame()               # a pandas DataFrame, one row per run
    kbench.compare(results)       # the comparison tables (HTML in Jupyter)
    kbench.load("results")        # the runs of a store a sweep or a run wrote

``import kbench`` stays light (worker processes import it in every environment): the
API, pandas and the frameworks are imported on first use.
"""

import types

from kbench import run as _run_stage
from kbench.facts import VERSION

__version__ = VERSION

_API = ("compare", "load", "Results", "Comparison")  # from kbench.api on first use (PEP 562)


class _CallableRunStage(types.ModuleType):
    """``kbench.run`` is both the stage package (runner and worker) and the API's
    :func:`kbench.api.run`: the package is callable, so ``kbench.run(...)`` runs and
    ``kbench.run.runner`` stays the runner, however the two are imported."""

    def __call__(self, *args, **kwargs):
        """:func:`kbench.api.run`: ``kbench.run(backends, model="mlp", store="results",
        **options)`` -> Results."""
        from kbench.api import run

        return run(*args, **kwargs)

    @property
    def __signature__(self):
        import inspect

        from kbench.api import run

        return inspect.signature(run)


_run_stage.__class__ = _CallableRunStage


def __getattr__(name):
    if name in _API:
        from kbench import api

        return getattr(api, name)
    raise AttributeError(f"module 'kbench' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_API])


def record(store="results", name=None, **kwargs):
    """Write a kbench result document of training done in your own code into the
    store ``store``, for ``kbench results``, ``compare`` and ``report``; returns its
    path. See :func:`kbench.exec.runner.record` for the arguments."""
    from kbench.exec.runner import record as write

    return write(store, name=name, **kwargs)
