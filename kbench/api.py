"""The Python API, for notebooks: :func:`run`, :func:`compare`, :func:`load`.

The same functions the CLI calls, with nothing of the CLI in between: :func:`run`
plans the rounds ``kbench run`` plans (:func:`kbench.studies.rounds.plan_rounds`) and
runs them, one fresh worker process per run, into a store; :func:`compare` builds the
tables ``kbench compare`` prints. Progress goes to the ``kbench`` loggers, never to
print: ``logging.basicConfig(level=logging.INFO)`` shows it. pandas and the HTML
renderer are imported only when a frame or a table is asked for.

    >>> import kbench
    >>> results = kbench.run(backends=["torch", "jax"], model="mlp", steps=20)
    >>> results.frame()[["backend", "status", "images_per_sec"]]
    >>> kbench.compare(results)
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence as SequenceABC
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, List, Optional, Sequence, Union, overload

from kbench.results import store as store_mod
from kbench.results.result import RunResult
from kbench.results.store import Filter, IndexEntry
from kbench.run.progress import show_progress
from kbench.studies import rounds as studies_rounds
from kbench.views import machines, tables
from kbench.views.comparison import Comparison

log = logging.getLogger(__name__)

StorePath = Union[str, "os.PathLike[str]"]

# kbench.run's own parameters, for the close match of a misspelt setting.
RUN_PARAMETERS = ("backends", "model", "dataset", "store", "repeats", "warm")


class Results(SequenceABC):
    """The result documents (:class:`~kbench.results.result.RunResult`) of
    :func:`run` or :func:`load`: a sequence (``len``, ``results[0]``, ``for r in
    results``), a DataFrame with :meth:`frame`, a table in Jupyter.

    >>> results.frame()        # one row per run
    >>> results.compare()      # the comparison tables
    >>> results[0].metrics["images_per_sec"]
    """

    def __init__(self, runs: Iterable[RunResult], store: Optional[StorePath] = None) -> None:
        self.runs: List[RunResult] = list(runs)
        self.store: Optional[Path] = None if store is None else Path(store)

    @overload
    def __getitem__(self, index: int) -> RunResult: ...

    @overload
    def __getitem__(self, index: slice) -> Results: ...

    def __getitem__(self, index):
        if isinstance(index, slice):
            return Results(self.runs[index], self.store)
        return self.runs[index]

    def __len__(self) -> int:
        return len(self.runs)

    def frame(self):
        """A pandas DataFrame, one row per run: the settings, then what was measured
        (:func:`kbench.results.store.flatten` names the columns)."""
        return store_mod.to_frame(self.runs)

    to_frame = frame

    def compare(self, baseline: Optional[str] = None) -> Comparison:
        """The comparison tables of these runs (:func:`compare`)."""
        return compare(self, baseline)

    def table(self) -> tables.Table:
        """One row per run, as ``kbench run`` lists them (:func:`kbench.views.tables.runs_table`:
        backend, ``#2`` for a repeat, model, mode, format, device, status, img/s and its
        spread, the median step or latency in ms, first step, test accuracy, parameters),
        with the runs that gave no numbers below."""
        ok = sum(r.ok for r in self.runs)
        where = f" in {self.store}" if self.store else ""
        found = tables.runs_table(self.runs, f"{len(self.runs)} runs, {ok} ok{where}")
        return replace(found, notes=found.notes + tables.not_ok_lines(self))

    def __repr__(self) -> str:
        return f"kbench.Results: {self.table().text()}"

    def _repr_html_(self) -> str:
        return self.table().html(numeric=tables.RUN_NUMERIC)


def run(
    backends: Union[str, Sequence[str]],
    model: Union[str, Sequence[str]] = "mlp",
    dataset: str = "synthetic",
    store: StorePath = "results",
    repeats: int = 1,
    warm: bool = False,
    **settings: Any,
) -> Results:
    """Train (or infer with) ``model`` under each of ``backends``, as ``kbench run``
    does: round by round, each run in a fresh worker process, every result written to
    ``store`` as it finishes; progress (each epoch) goes to the ``kbench`` loggers.
    ``model`` is a zoo name, a list of them, or your own (``path/file.py:build``,
    ``model.keras``); ``repeats`` rounds; ``warm``: one worker
    per backend for the runs that can share it. ``settings`` are
    :class:`~kbench.results.config.RunConfig` fields (``batch_size``, ``steps``,
    ``epochs``, ``warmup_steps``, ``train_samples``, ``threads``, ``timeout_s``,
    ``mode``, ``device``, ...); an unknown one raises a TypeError that names it.
    ``window_s=1.0`` (several backends, training): warm interleaved windows instead of
    fresh processes, as ``kbench run`` measures several backends by default, until every
    ratio's 95% interval is within +-2% or 100 s are spent.

    >>> results = kbench.run(backends=["torch", "jax"], model="mlp", steps=20,
    ...                      batch_size=32, train_samples=2000, store="results")
    >>> results.frame()
    """
    studies_rounds.check_settings(settings, RUN_PARAMETERS)
    planned = studies_rounds.plan_rounds(backends, model, repeats, dataset=dataset, **settings)
    runs, _ = studies_rounds.run_rounds(planned, Path(store), warm=warm, on_progress=show_progress)
    return Results(runs, store)


def load(
    store: Union[StorePath, Sequence[StorePath]],
    filters: Sequence[str] = (),
    latest_only: bool = True,
) -> Results:
    """The runs of one store (or several read together), oldest first: of a sweep run
    that was rerun, only the newest on each machine (``latest_only=False``: every one).
    ``filters`` are ``kbench results --filter`` expressions (``"backend=jax,torch"``,
    ``"status=ok"``). A document kbench cannot read is logged and left out; no run at all
    is an error.

    >>> results = kbench.load("results/lenet-epochs-reduced", filters=["status=ok"])
    """
    stores = [Path(store)] if isinstance(store, (str, os.PathLike)) else [Path(s) for s in store]
    if latest_only:  # the newest of each run on each machine (stores merged from several)
        runs = machines.load_per_machine(stores, filters)
    else:
        runs = store_mod.load_runs(stores, filters, latest_only=False)
    return Results(runs, stores[0] if len(stores) == 1 else None)


def compare(
    results_or_store: Union[Results, Sequence[RunResult], StorePath, Sequence[StorePath]],
    baseline: Optional[str] = None,
    filters: Sequence[str] = (),
) -> Comparison:
    """The tables ``kbench compare`` prints, of :class:`Results`, a list of
    :class:`~kbench.results.result.RunResult`, or a store path (or several, read as
    :func:`load` reads them). ``baseline``: the backend ratios are taken against
    (default: the first of each comparison); ``filters`` keep the runs they accept.
    In Jupyter the comparison shows as HTML tables.

    >>> kbench.compare(results)
    >>> kbench.compare("results", baseline="jax", filters=["batch_size=64"])
    """
    given = results_or_store
    if isinstance(given, (str, os.PathLike)) or (
        isinstance(given, SequenceABC) and given and not isinstance(given[0], RunResult)
    ):
        return Comparison.of(load(given, filters), baseline)
    runs = list(given)
    wrong = [type(r).__name__ for r in runs if not isinstance(r, RunResult)]
    if wrong:
        raise TypeError(
            "compare: expected kbench Results, a list of RunResult or a store path; "
            f"received a list holding {wrong[0]}."
        )
    parsed = [Filter.parse(f) for f in filters]
    entries = [IndexEntry.of(r, "") for r in runs]
    store_mod.check_filters(parsed, entries)  # a misspelt name is refused, as in a store
    runs = [r for r, e in zip(runs, entries) if all(f.accepts(e) for f in parsed)]
    return Comparison.of(runs, baseline)
