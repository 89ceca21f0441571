"""The results page's blocks (``<!-- begin: results STORE -->``): one store of the
checkout as the page shows it, read from its result documents only, so the page cannot
drift from what was measured: the machine (as ``kbench compare`` names it, with cores,
memory and driver), the software (kbench's revision, each backend's framework and
Keras), the runs (when, how measured), the command that measures it again (the
settings that differ from ``kbench run``'s defaults, as its flags), and ``kbench
compare``'s tables as Markdown.

Read-only: the store gets no index and no ``compare.md``. Imports kbench's results
and views (numpy), no framework.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Dict, List, Sequence

ROOT = Path(__file__).resolve().parents[2]
# what a store's runs share that is not a run setting, or is said otherwise
NOT_FLAGS = ("backend", "model", "repeat")


def load(relative: str) -> List[Any]:
    """The result documents of the store ``relative`` (to the checkout), oldest first."""
    from kbench.results.store import ResultStore
    from kbench.views.machines import newest_per_machine

    store = ResultStore(ROOT / relative, read_only=True)
    results = sorted(store.results(), key=lambda r: (r.started_at, r.run_id))
    if not results or store.unreadable:
        raise ValueError(f"<!-- begin: results {relative} -->: no result, or unreadable ones "
                         f"({store.unreadable})")  # fmt: skip
    return newest_per_machine(results)  # what `kbench compare` shows of them


def run_parser() -> argparse.ArgumentParser:
    from kbench.cli import app

    parser = app.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return commands.choices["run"]


def flag_text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "x".join(str(part) for part in value)
    return str(value)


def command(results: Sequence[Any]) -> List[str]:
    """``kbench run`` with the backends, models and every setting the runs share that is
    not the command's default, as words."""
    from kbench.cli.arguments import SETTING_NAMES

    parser = run_parser()
    names = parser.get_default(SETTING_NAMES)
    backends = list(dict.fromkeys(r.config["backend"] for r in results))
    models = list(dict.fromkeys(r.config["model"] for r in results))
    words = ["kbench", "run", "-b", ",".join(backends), "-m", ",".join(models)]
    repeats = len({r.config.get("repeat") for r in results})
    for name in names:
        values = {repr(r.config.get(name)) for r in results}
        value = results[0].config.get(name)
        if name in NOT_FLAGS or len(values) > 1 or value in (None, parser.get_default(name)):
            continue  # None: a setting the run left to kbench (the default's own rule)
        flag = next(a for a in parser._actions if a.dest == name).option_strings[-1]
        words += [flag] if value is True else [flag, flag_text(value)]
    fresh = results[0].config.get("window_s") is None
    if fresh and repeats > 1:
        words += ["--repeats", str(repeats)]
    return words


def varying(results: Sequence[Any]) -> List[str]:
    """The settings that differ between the runs (each its own row in the tables)."""
    names = sorted({k for r in results for k in r.config} - set(NOT_FLAGS))
    return [n for n in names if len({repr(r.config.get(n)) for r in results}) > 1]


def machine_text(results: Sequence[Any]) -> str:
    from kbench.views.machines import hardware_text

    machine = results[0].environment.get("machine") or {}
    cores = machine.get("cpu_logical_cores")
    memory = machine.get("memory_total_bytes")
    gpu = machine.get("gpu") or {}
    parts = [hardware_text(results)]
    if cores:
        parts.append(f"{cores} logical cores")
    if memory:
        parts.append(f"{memory / 2**30:.0f} GiB memory")
    if gpu.get("driver"):
        parts.append(f"NVIDIA driver {gpu['driver']} (CUDA {gpu.get('cuda_driver_version')})")
    return "; ".join(parts)


def software_text(results: Sequence[Any]) -> str:
    kbench = results[0].environment.get("kbench") or {}
    sha = ((kbench.get("git") or {}).get("sha") or "")[:7]
    seen: Dict[str, str] = {}
    for r in results:
        framework = r.environment.get("framework") or {}
        text = f"{framework.get('name')} {framework.get('version')}"
        if framework.get("keras_version"):
            text += f" (Keras {framework['keras_version']})"
        seen.setdefault(r.config["backend"], f"{r.config['backend']}: {text}")
    head = f"kbench {kbench.get('version')}" + (f" at {sha}" if sha else "")
    return head + "; " + "; ".join(seen.values())


def runs_text(results: Sequence[Any]) -> str:
    days = sorted({r.started_at[:10] for r in results})
    window = results[0].config.get("window_s")
    how = (
        f"warm windows of {window:g} s, interleaved round by round"
        if window
        else "fresh processes, one per run"
    )
    ok = sum(1 for r in results if r.ok)
    text = f"{len(results)} runs ({ok} ok) on {', '.join(days)}, {how}"
    differ = varying(results)
    return text + (f"; the rows differ in {', '.join(differ)}" if differ else "")


def results_block(relative: str) -> str:
    """The block of the store ``relative``: what it ran on and with, then its tables."""
    from kbench.views.tables import study_tables

    results = load(relative)
    lines = [
        f"- **Machine**: {machine_text(results)}.",
        f"- **Software**: {software_text(results)}.",
        f"- **Runs**: {runs_text(results)}; the documents: `{relative}/`.",
        f"- **Measure it again**: `{' '.join(command(results))}`",
        "",
    ]
    for table in study_tables(results):
        lines += [table.markdown(), ""]
    return "\n".join(lines)
