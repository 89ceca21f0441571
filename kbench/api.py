"""The Python API, for notebooks: :func:`run`, :func:`compare`, :func:`load`.

The same stage functions the CLI calls, with nothing of the CLI in between. Progress
goes to the ``kbench`` loggers, never to print (``logging.basicConfig(level=logging.INFO)``
shows it); pandas and the HTML renderer are imported only when a frame or a table is
asked for.

    >>> import kbench
    >>> results = kbench.run(backends=["torch", "jax"], model="mlp", steps=20,
    ...                      dataset="synthetic", repeats=1)
    >>> results.frame()[["backend", "status", "images_per_sec"]]
    >>> kbench.compare(results)
"""

from __future__ import annotations

import os
from collections.abc import Sequence as SequenceABC
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, List, Optional, Sequence, Union, overload

from kbench.results import store as store_mod
from kbench.results.result import RunResult
from kbench.results.store import Filter, IndexEntry
from kbench.run.protocol import show_progress
from kbench.studies import rounds as studies_rounds
from kbench.views import machines, tables
from kbench.views.report import Comparison

StorePath = Union[str, "os.PathLike[str]"]
PATHS = (str, os.PathLike)


def _refused(name: str, wanted: str, value: Any) -> TypeError:
    """A wrong-typed argument: its name, what it must be and what it was (``repr``)."""
    return TypeError(
        f"{name} must be {wanted}, received {repr(value)[:200]} ({type(value).__name__})"
    )


def _all_of(value: Any, kinds: tuple) -> bool:
    """Whether ``value`` is one of ``kinds``, or a sequence (not a string) of them."""
    items = [value] if isinstance(value, kinds) else value
    return (
        isinstance(items, SequenceABC)
        and not isinstance(items, str)
        and all(isinstance(item, kinds) for item in items)
    )


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
        """One row per run, as ``kbench run`` lists them (:func:`kbench.views.tables.runs_table`),
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
    model: Union[str, Sequence[str]] = studies_rounds.DEFAULT_MODEL, store: StorePath = "results",
    **options: Any,
) -> Results:  # fmt: skip
    """Train (or infer with) ``model`` under each of ``backends``, every result written to
    ``store`` as it finishes: what ``kbench run`` does with the same arguments, planned
    by the same function with the same defaults
    (:func:`kbench.studies.rounds.plan_comparison`: several backends training in warm
    interleaved windows until every ratio to the baseline is within ``ratio_precision``
    or ``ratio_budget_s`` is spent; one backend, ``repeats``, ``warm``, inference,
    data-parallel, profiled or precision runs in a fresh process per run).

    ``model`` is a zoo name, a list of them, or your own (``path/file.py:build``,
    ``model.keras``). ``options``: ``repeats``, ``warm``, ``baseline``,
    ``ratio_precision``, ``ratio_budget_s``, ``check_parity``, and the run settings,
    :class:`~kbench.results.config.RunConfig` fields with their defaults (``dataset``
    ``"fashion_mnist"``, ``"synthetic"`` for no download; ``epochs=1``,
    ``batch_size=64``, ``steps``, ``threads``, ``mode``, ...); an unknown one raises a
    TypeError that names it.

    >>> results = kbench.run(backends=["torch", "jax"], model="mlp", steps=20,
    ...                      batch_size=32, train_samples=2000, dataset="synthetic")
    >>> results.frame()
    """
    if not isinstance(store, PATHS):
        raise _refused("store", "a path (str or os.PathLike)", store)
    planned = plan(backends, model, **options)
    runs, _ = studies_rounds.run_plan(planned, Path(store), on_progress=show_progress)
    return Results(runs, store)


def plan(
    backends: Union[str, Sequence[str]],
    model: Union[str, Sequence[str]] = studies_rounds.DEFAULT_MODEL, **options: Any,
) -> studies_rounds.Plan:  # fmt: skip
    """What :func:`run` would run, planned and checked, nothing started: the rounds of
    configs and how they are measured (``plan(...).measure.windows``). ``options``:
    :func:`run`'s keywords and settings."""
    for name, value in (("backends", backends), ("model", model)):
        if not _all_of(value, (str,)):
            raise _refused(name, "a name or a list of names (str)", value)
    repeats = options.get("repeats")
    if repeats is not None and (isinstance(repeats, bool) or not isinstance(repeats, int)):
        raise _refused("repeats", "an int", repeats)
    return studies_rounds.plan_comparison(backends, model, **options)


def load(
    store: Union[StorePath, Sequence[StorePath]], filters: Sequence[str] = (),
    latest_only: bool = True,
) -> Results:  # fmt: skip
    """The runs of one store (or several read together), oldest first: of a sweep run
    that was rerun, only the newest on each machine (``latest_only=False``: every one).
    ``filters`` are ``kbench results --filter`` expressions (``"backend=jax,torch"``,
    ``"status=ok"``). A document kbench cannot read is logged and left out; no run at all
    is an error.

    >>> results = kbench.load("results/lenet-epochs-reduced", filters=["status=ok"])
    """
    if not _all_of(store, PATHS):
        raise _refused("store", "a path or a list of paths (str or os.PathLike)", store)
    if isinstance(filters, str) or not _all_of(filters, (str,)):
        raise _refused("filters", "a list of filter expressions (str)", filters)
    stores = [Path(store)] if isinstance(store, (str, os.PathLike)) else [Path(s) for s in store]
    if latest_only:  # the newest of each run on each machine (stores merged from several)
        runs = machines.load_per_machine(stores, filters)
    else:
        runs = store_mod.load_runs(stores, filters, latest_only=False)
    return Results(runs, stores[0] if len(stores) == 1 else None)


def compare(
    results_or_store: Union[Results, Sequence[RunResult], StorePath, Sequence[StorePath]],
    baseline: Optional[str] = None, filters: Sequence[str] = (),
) -> Comparison:  # fmt: skip
    """The tables ``kbench compare`` prints, of :class:`Results`, a list of
    :class:`~kbench.results.result.RunResult`, or a store path (or several, read as
    :func:`load` reads them). ``baseline``: the backend ratios are taken against
    (default: the first of each comparison); ``filters`` keep the runs they accept.
    In Jupyter the comparison shows as HTML tables.

    >>> kbench.compare(results)
    >>> kbench.compare("results", baseline="jax", filters=["batch_size=64"])
    """
    given = results_or_store
    if not isinstance(given, (SequenceABC, *PATHS)):
        raise _refused("results_or_store", "Results, a list of RunResult or a store path", given)
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
