"""The comparison of a set of runs (:class:`Comparison`: the tables ``kbench compare``
prints and :func:`kbench.api.compare` returns), and one self-contained HTML report from
result documents, whose summary is those tables: figures as base64 PNG, CSS in a
``<style>`` element, and one small script that counts the images that loaded
(``document.body.dataset.imagesLoaded``, for tests). No external resources.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from kbench.results.analysis import kernels_text, row_named
from kbench.results.jsonfile import write_text_atomic
from kbench.results.result import RunResult
from kbench.results.store import host_of
from kbench.views import figures, setting_plots, throughput_plots, timeline_plots
from kbench.views.figures import Drawn, RunGroup, Skipped
from kbench.views.machines import hardware_text, mixed_note, several_machines
from kbench.views.tables import (
    Cell,
    Markup,
    Table,
    bytes_text,
    esc,
    markdown_text,
    model_label,
    not_ok_lines,
    study_tables,
)

log = logging.getLogger(__name__)

NO_FIGURES = "<p>No figure applies to these results; see “Not drawn”.</p>"
NO_RUNS = "<p>No training or inference run.</p>"

CSS = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d2329;
       margin: 0; background: #f4f5f7; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 32px 64px; background: #fff; }
h1 { font-size: 28px; margin: 0 0 4px; }
h2 { font-size: 21px; margin: 40px 0 10px; padding-bottom: 4px; border-bottom: 2px solid #e3e6ea; }
h3 { font-size: 17px; margin: 28px 0 6px; }
.meta { color: #5b6670; margin: 0 0 16px; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin: 16px 0; }
.card { border: 1px solid #e3e6ea; border-radius: 8px; padding: 10px 16px; min-width: 130px; }
.card b { display: block; font-size: 24px; }
.card span { color: #5b6670; font-size: 13px; }
.card.bad b { color: #c0392b; }
.banner { background: #fff4d6; border: 1px solid #f0c36d; border-radius: 8px;
          padding: 10px 14px; margin: 12px 0; }
.badge { display: inline-block; font-size: 11px; font-weight: 700; letter-spacing: .04em;
         padding: 1px 7px; border-radius: 9px; vertical-align: middle; margin-left: 6px;
         white-space: nowrap; }
.badge.synthetic { background: #f0c36d; color: #5a3d00; }
.badge.bad { background: #fadbd8; color: #922b21; }
.badge.setup { background: #d6e4f5; color: #1f4e79; }
table { border-collapse: collapse; width: 100%; margin: 8px 0 4px; font-size: 14px; }
th, td { text-align: left; padding: 5px 10px; border-bottom: 1px solid #eceef1;
         vertical-align: top; }
th { background: #f7f8fa; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.muted { color: #7b8691; }
.flag { color: #922b21; font-size: 12px; white-space: normal; }
figure { margin: 14px 0 28px; }
figure img { max-width: 100%; height: auto; border: 1px solid #eceef1; border-radius: 6px; }
figcaption { color: #4a545e; font-size: 14px; margin-top: 6px; max-width: 70em; }
ul.skipped li { margin: 4px 0; }
details pre { background: #f7f8fa; padding: 8px; overflow-x: auto; font-size: 12px;
              max-height: 320px; }
nav a { margin-right: 14px; }
"""

# The only script: counts images that loaded, for a headless browser test to read.
SCRIPT = """
window.addEventListener("load", function () {
  var loaded = 0;
  document.querySelectorAll("img").forEach(function (img) {
    if (img.complete && img.naturalWidth > 0) { loaded += 1; }
  });
  document.body.dataset.imagesLoaded = String(loaded);
});
"""


@dataclass(frozen=True)
class Comparison:
    """The study tables and the tables beside them (:func:`section_tables`), as text,
    Markdown or HTML.

    >>> comparison = kbench.compare("results")
    >>> print(comparison.text())            # as the terminal shows it
    >>> comparison.tables[0].rows           # the cells, as text
    """

    results: Tuple[RunResult, ...]
    baseline: Optional[str]
    study: Tuple[Table, ...]
    sections: Tuple[Table, ...]

    @classmethod
    def of(cls, results: Sequence[RunResult], baseline: Optional[str] = None) -> Comparison:
        study = tuple(study_tables(results, baseline))
        return cls(tuple(results), baseline, study, tuple(section_tables(results)))

    @property
    def tables(self) -> List[Table]:
        return [*self.study, *self.sections]

    def text(self) -> str:
        return "\n\n".join(t.text() for t in self.study) + "".join(
            "\n\n" + t.text() for t in self.sections
        )

    def markdown(self, title: str = "kbench comparison") -> str:
        failed = [r for r in self.results if not r.ok]
        lines = [f"# {markdown_text(title)}", ""]
        lines += [f"{len(self.results)} runs, {len(failed)} without a result.", ""]
        lines += [t.markdown() + "\n" for t in self.study]
        if failed:
            rows = [[r.run_id, r.status, (r.reason or "").replace("|", "/")] for r in failed]
            headers = ["run", "status", "reason"]
            lines.append(Table("Runs without a result", headers, rows, []).markdown())
        text = "\n".join(lines).rstrip() + "\n"
        return text + "".join("\n" + t.markdown() + "\n" for t in self.sections)

    def __repr__(self) -> str:
        return self.text() or f"<kbench.Comparison: nothing to compare in {len(self.results)} runs>"

    def _repr_html_(self) -> str:
        if not self.tables:
            return f"<p>Nothing to compare in {len(self.results)} runs.</p>"
        lines = [f"<li>{esc(line.strip())}</li>" for line in not_ok_lines(self.results)]
        failed = f"<p>Runs without a result:</p><ul>{''.join(lines)}</ul>" if lines else ""
        return "".join(t.html() for t in self.tables) + failed


def section_tables(results: Sequence[RunResult]) -> List[Table]:
    """Operators, the data-parallel breakdown, the per-operator profiles of model runs,
    generation (time to first token, per token, the greedy tokens' agreement)."""
    from kbench.views.distributed import breakdown_tables
    from kbench.views.ops import ops_tables, profile_tables
    from kbench.views.runtimes import generation_shown, generation_table

    generation = [generation_table(results)] if generation_shown(results) else []
    return ops_tables(results) + breakdown_tables(results) + profile_tables(results) + generation


@dataclass(frozen=True)
class ReportSummary:
    path: Path
    figures: List[str] = field(default_factory=list)  # titles of the figures drawn
    skipped: List[str] = field(default_factory=list)  # one sentence per figure not drawn
    notes: List[str] = field(default_factory=list)  # what else was left out, and why


@dataclass(frozen=True)
class Section:
    """A section another stage adds after the summary (a study's "Paper vs this machine")."""

    id: str  # the HTML anchor
    heading: str
    intro: str = ""  # plain text, escaped
    tables: Sequence[Table] = ()
    outcomes: Sequence[Any] = ()  # Drawn / Skipped figures


@dataclass(frozen=True)
class MachineRuns:
    host: str
    runs: List[RunResult]
    groups: List[RunGroup]
    backends: List[str]
    baseline: str  # the report's baseline backend, or this machine's first where it lacks it


def write_report(
    results: Sequence[RunResult], path: Path, *, title: str = "kbench report",
    baseline: Optional[str] = None, sections: Sequence[Section] = (),
) -> ReportSummary:  # fmt: skip
    """Write one HTML file about ``results`` to ``path``; return what it holds."""
    results = list(results)
    if not results:
        raise ValueError(
            "write_report: expected at least one result document; got none. Run "
            "`kbench run ...` and pass the results it wrote (RunResult.load on each JSON file)."
        )
    measured = measured_runs(results)
    backends = figures.backend_order(measured)
    base = report_baseline(backends, baseline)
    groups = figures.group_runs(measured, base)
    machines = machine_groups(measured, base)
    outcomes = report_figures(groups, backends, base, machines, measured)
    picked, timeline_notes = timeline_plots.pick_timeline_runs(groups, backends)
    notes = left_out_notes(results, measured) + timeline_notes
    timelines = [timeline_plots.timeline(group, run, backends) for group, run in picked]
    if not timelines:
        reason = "no run has sampler series" + (
            " (the sampler was off: --sample-interval 0)" if measured else ""
        )
        outcomes.append(Skipped(timeline_plots.TIMELINES, reason))
    outcomes += operator_figures([r for r in results if r.kind == "ops"])
    own, own_outcomes = distributed_section(results)
    edge, edge_outcomes = edge_section(results)
    others = edge + [_section_html(s) for s in sections] + own + profile_section(results)
    everything = outcomes + own_outcomes + edge_outcomes + [o for s in sections for o in s.outcomes]
    drawn = [o for o in everything if isinstance(o, Drawn)] + timelines
    skipped = [o for o in everything if isinstance(o, Skipped)]
    summary = summary_html(measured, base, machines)
    shown = "".join(figure_html(o) for o in outcomes if isinstance(o, Drawn))
    page = [("summary", "Summary", summary), ("figures", "Figures", shown or NO_FIGURES), *others]
    if timelines or skipped or notes:
        body = "".join(figure_html(f) for f in timelines)
        page.append(("timelines", "Per-run timelines", body or "<p>None drawn.</p>"))
    page += [
        ("not-drawn", "Not drawn", skipped_html(skipped, notes)),
        ("failures", "Runs that did not finish", failures_table([r for r in results if not r.ok])),
        ("environment", "Environment", environment_html(results)),
    ]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(
        path, render_page(title, header_html(results, measured, backends, base, machines), page)
    )
    log.info("report: %s (%d figures, %d skipped)", path, len(drawn), len(skipped))
    return ReportSummary(path, [d.title for d in drawn], [s.sentence for s in skipped], notes)


def measured_runs(results: Sequence[RunResult]) -> List[RunResult]:
    measured = [r for r in results if r.kind in ("train", "inference")]
    return measured + [r for r in results if r.kind == "exec" and r.metrics.get("images_per_sec")]


def left_out_notes(results: Sequence[RunResult], measured: Sequence[RunResult]) -> List[str]:
    notes: List[str] = []
    parity = sum(r.kind == "parity" for r in results)
    if parity:
        notes.append(
            f"{parity} parity run(s) are listed under failures if they failed, but not "
            "plotted: they compare numbers between backends, not speed."
        )
    busy = [r for r in measured if (r.metrics.get("window") or {}).get("every_round_dropped")]
    flagged = {id(r) for r in busy}
    windows = [w for r in measured if not r.superseded and id(r) not in flagged
               for w in (r.metrics.get("windows") or {}).get("list") or []]  # fmt: skip
    dropped = sum(1 for w in windows if w.get("dropped"))
    superseded = sum(1 for r in measured if r.superseded)
    parts = [f"{dropped} window(s) dropped (measured while the machine was busy or its GPU "
             "shared)"] if dropped > 0 else []  # fmt: skip
    if busy:
        notes.append(
            f"{len(busy)} comparison document(s) had every round dropped: their figures are "
            "of every window, measured while the machine was busy, and flagged so."
        )
    if superseded:
        parts.append(f"{superseded} comparison document(s) superseded by a later measuring")
    if parts:
        notes.append(" and ".join(parts) + " are left out of the figures; kbench compare says why.")
    return notes


def report_figures(
    groups: Sequence[RunGroup], backends: Sequence[str], baseline: str,
    machines: Sequence[MachineRuns], measured: Sequence[RunResult],
) -> List[Any]:  # fmt: skip
    return [
        throughput_plots.throughput_bars(groups, backends),
        *speed_heatmaps(groups, backends, baseline, machines),
        setting_plots.batch_size_plot(groups, backends),
        setting_plots.memory_fraction_plot(groups, backends, measured),
        setting_plots.threads_plot(groups, backends),
        setting_plots.accuracy_plot(groups, backends),
        setting_plots.runtime_accuracy_plot(groups, backends),
    ]


def operator_figures(operators: Sequence[RunResult]) -> List[Any]:
    if not operators:
        return []
    from kbench.views.ops import ops_figures

    return [
        Drawn(
            f"Operator: {name}",
            png,
            "Median time per call against size (log-log; what size means for this "
            "operation is in `kbench ops --help`), p10-p90 as error bars; only checked "
            "results are timed.",
        )
        for name, png in ops_figures(operators)
    ]


def report_baseline(backends: Sequence[str], baseline: Optional[str]) -> str:
    """``baseline`` (a backend, or ``backend @ host``), else the first that ran."""
    if baseline is None:
        return backends[0] if backends else ""
    found = row_named(backends, baseline)
    if found is None:
        raise ValueError(
            f"baseline: expected one of the backends that ran ({', '.join(backends)}); "
            f"got {baseline!r}"
        )
    return found


def machine_groups(measured: Sequence[RunResult], baseline: str) -> List[MachineRuns]:
    machines = several_machines(measured)
    if machines is None:
        return []
    wanted = baseline.split(" @ ")[0]
    out = []
    for host, runs in machines.items():
        backends = figures.backend_order(runs)
        own = wanted if wanted in backends else backends[0]
        out.append(MachineRuns(host, runs, figures.group_runs(runs, own), backends, own))
    return out


def speed_heatmaps(
    groups: Sequence[RunGroup], backends: Sequence[str], baseline: str,
    machines: Sequence[MachineRuns],
) -> List[Any]:  # fmt: skip
    if not machines:
        return [throughput_plots.speed_heatmap(groups, backends, baseline)]
    found = [
        (m, throughput_plots.speed_heatmap(m.groups, m.backends, m.baseline)) for m in machines
    ]
    return [replace(f, title=f"{f.title}, on {m.host}") for m, f in found]


def summary_html(measured: Sequence[RunResult], base: str, machines: Sequence[MachineRuns]) -> str:
    """The tables ``kbench compare`` prints (:func:`study_tables`), as HTML; per machine,
    under what it ran on, where the runs come from several."""
    if not machines:
        return tables_html(study_tables(measured, base)) or NO_RUNS
    asked, body = base.split(" @ ")[0], ""
    for m in machines:
        lacks = (
            f" No {asked} run on this machine: its ratios are against {m.baseline}."
            if asked and m.baseline != asked
            else ""
        )
        body += (
            f"<h3>On {esc(m.host)}</h3>"
            f'<p class="muted">{esc(hardware_text(m.runs))}.{esc(lacks)}</p>'
            + tables_html(study_tables(m.runs, m.baseline))
        )
    return body


def tables_html(found: Sequence[Table]) -> str:
    """Tables as the report shows them, their columns of backends aligned as numbers."""
    return "".join(
        t.html(i for i, h in enumerate(t.headers) if h not in ("model", "setting")) for t in found
    )


def render_page(title: str, header: str, sections: Sequence[Tuple[str, str, str]]) -> str:
    """``sections``: (id, heading, HTML), each linked from the top."""
    nav = "".join(f'<a href="#{key}">{esc(name)}</a>' for key, name, _ in sections)
    content = "".join(
        f'<section id="{key}"><h2>{esc(name)}</h2>{body}</section>' for key, name, body in sections
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head>\n"
        f"<body><main><h1>{esc(title)}</h1>{header}<nav>{nav}</nav>{content}</main>"
        f"<script>{SCRIPT}</script></body></html>\n"
    )


def header_html(
    results: Sequence[RunResult], measured: Sequence[RunResult], backends: Sequence[str],
    baseline: str, machines: Sequence[MachineRuns] = (),
) -> str:  # fmt: skip
    started = sorted(r.started_at[:16].replace("T", " ") for r in results)
    span = started[0] + (f" to {started[-1]}" if started[-1] != started[0] else "")
    generated = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    ok = sum(r.ok for r in results)
    models = list(dict.fromkeys(model_label(r.config.get("model", "?")) for r in results))
    hosts = [m.host for m in machines]
    cards = [
        (len(results), "runs", False), (ok, "finished", False),
        (len(results) - ok, "did not finish", len(results) > ok),
        (len(backends), "backends: " + ", ".join(backends), False),
        (len(models), "models: " + ", ".join(models), False),
    ] + [(len(hosts), "machines: " + ", ".join(hosts), False)] * bool(hosts)  # fmt: skip
    if hosts:
        against = (
            f"Speed ratios are against <b>{esc(baseline.split(' @ ')[0])}</b> on each machine."
        )
    else:
        against = f"Speed ratios are against <b>{esc(baseline)}</b>." if baseline else ""
    out = (
        f'<p class="meta">Runs from {esc(span)} (UTC); report written {esc(generated)}. '
        f'{against}</p><div class="cards">'
        + "".join(
            f'<div class="card{" bad" if bad else ""}"><b>{n}</b><span>{esc(t)}</span></div>'
            for n, t, bad in cards
        )
        + "</div>"
    )
    if hosts:
        note = mixed_note(hosts, "a summary table and a speed-ratio heatmap per machine")
        out += (
            f'<div class="banner"><span class="badge setup">{len(hosts)} MACHINES</span> '
            f"{esc(note)}. Figures that set them side by side (throughput bars, timelines) "
            "name each row backend @ host.</div>"
        )
    synthetic = [r for r in measured if r.data.get("synthetic")]
    if synthetic:
        names = sorted({r.data.get("name") or r.config.get("dataset") for r in synthetic})
        out += (
            '<div class="banner"><span class="badge synthetic">SYNTHETIC DATA</span> '
            f"{len(synthetic)} of {len(measured)} runs trained on generated data "
            f"({esc(', '.join(names))}): their speed is real, their accuracy says nothing "
            "about a real data set.</div>"
        )
    return out


def figure_html(figure: Drawn) -> str:
    data = base64.b64encode(figure.png).decode("ascii")
    return (
        f"<figure><h3>{esc(figure.title)}</h3>"
        f'<img src="data:image/png;base64,{data}" alt="{esc(figure.title)}">'
        f"<figcaption>{esc(figure.caption)}</figcaption></figure>"
    )


def skipped_html(skipped: Sequence[Skipped], notes: Sequence[str]) -> str:
    if not skipped and not notes:
        return "<p>Every figure was drawn.</p>"
    items = "".join(f"<li><b>{esc(s.title)}</b>: {esc(s.reason)}.</li>" for s in skipped) + "".join(
        f"<li>{esc(n)}</li>" for n in notes
    )
    return f'<ul class="skipped">{items}</ul>'


def device_text(device: Dict[str, Any]) -> str:
    if device.get("error"):
        return f"GPU {device.get('index', '?')}: not readable ({device['error']})"
    total = device.get("memory_total_bytes")
    return f"{device.get('name')} ({bytes_text(total) if total else 'memory unknown'})"


def distributed_section(
    results: Sequence[RunResult],
) -> Tuple[List[Tuple[str, str, str]], List[Any]]:
    from kbench.views.distributed import breakdown_figures, breakdown_tables, numeric_columns

    found = breakdown_tables(results)
    if not found:
        return [], []
    outcomes = breakdown_figures(results)
    body = "".join(t.html(numeric_columns(t)) for t in found)
    body += "".join(figure_html(o) for o in outcomes if isinstance(o, Drawn))
    return [("distributed", "Data-parallel training", body)], outcomes


def edge_section(results: Sequence[RunResult]) -> Tuple[List[Tuple[str, str, str]], List[Any]]:
    """The edge question (:mod:`kbench.views.edge`), where a run was on an inference runtime."""
    from kbench.results.edge import edge_groups
    from kbench.views.edge import HEADING, edge_html, edge_outcomes

    groups = edge_groups(results)
    if not groups:
        return [], []
    outcomes = edge_outcomes(groups)
    body = edge_html(groups) + "".join(figure_html(o) for o in outcomes if isinstance(o, Drawn))
    return [("edge", HEADING, body)], outcomes


def _section_html(section: Section) -> Tuple[str, str, str]:
    body = f"<p>{esc(section.intro)}</p>" if section.intro else ""
    body += "".join(t.html() for t in section.tables)
    body += "".join(figure_html(o) for o in section.outcomes if isinstance(o, Drawn))
    return section.id, section.heading, body


def profile_section(results: Sequence[RunResult]) -> List[Tuple[str, str, str]]:
    from kbench.views.ops import profile_tables

    found = profile_tables(results)
    if not found:
        return []

    def number(cell: str) -> bool:
        return cell.rstrip("%").replace(".", "", 1).isdigit()

    body = "".join(
        t.html(i for i in range(len(t.headers)) if t.rows and all(number(r[i]) for r in t.rows))
        for t in found
    )
    return [("profiles", "Where the time goes: operators (--profile)", body)]


def failures_table(failed: Sequence[RunResult]) -> str:
    if not failed:
        return "<p>Every run finished.</p>"
    rows = []
    for run in failed:
        error = run.error or {}
        tail = str(error.get("log_tail") or "").strip().splitlines()[-25:]
        detail = esc(run.reason or "no reason recorded")
        if tail:
            detail += (
                f"<details><summary>last {len(tail)} lines of the worker log</summary>"
                f"<pre>{esc(chr(10).join(tail))}</pre></details>"
            )
        config = run.config
        model = f"{model_label(config.get('model', '?'))}, batch {config.get('batch_size', '?')}"
        rows.append([run.run_id, config.get("backend", "?"), model,
                     Cell(run.status.upper(), css="badge bad"), Markup(detail)])  # fmt: skip
    return Table("", ["run", "backend", "model", "status", "reason"], rows, []).html()


def environment_html(results: Sequence[RunResult]) -> str:
    machines: Dict[str, List[Any]] = {}
    software: Dict[str, List[Any]] = {}
    for run in results:
        env = run.environment
        row = machine_row(env.get("machine", {}))
        machines.setdefault(repr(row), row)
        kbench_info = env.get("kbench", {})
        git = kbench_info.get("git") or {}
        sha = (git.get("sha") or "unknown")[:12] + (
            " (uncommitted changes)" if git.get("dirty") else ""
        )
        row = [kbench_info.get("version", "?"), sha, env.get("interpreter", "?")]
        software.setdefault(repr(row), row)
    return (
        "<h3>Machine</h3>"
        + Table("", ["host", "CPU", "cores", "memory", "GPU"], list(machines.values()), []).html()
        + "<h3>kbench</h3>"
        + Table("", ["version", "git commit", "interpreter"], list(software.values()), []).html()
        + "<h3>Frameworks</h3>"
        + frameworks_html(results)
    )


def machine_row(machine: Dict[str, Any]) -> List[Any]:
    gpu = machine.get("gpu", {})
    devices = gpu.get("devices") or []
    if gpu.get("available") and devices:
        gpu_text = (
            "; ".join(device_text(d) for d in devices)
            + f"; driver {gpu.get('driver', '?')}, CUDA {gpu.get('cuda_driver_version', '?')}"
        )
    else:
        gpu_text = f"none ({gpu.get('reason', 'not recorded')})"
    memory = machine.get("memory_total_bytes")
    cores = (f"{machine.get('cpu_logical_cores', '?')} logical / "
             f"{machine.get('cpu_physical_cores', '?')} physical")  # fmt: skip
    return [machine.get("hostname", "?"), machine.get("cpu_model", "?"), cores,
            bytes_text(memory) if memory else "?", gpu_text]  # fmt: skip


def frameworks_html(results: Sequence[RunResult]) -> str:
    several = several_machines(results) is not None
    frameworks: Dict[str, List[Any]] = {}
    for run in results:
        framework = run.environment.get("framework") or {}
        if not framework:
            continue
        threads = (framework.get("threads") or {}).get("requested")
        row = [
            run.config.get("backend", "?"),
            f"{framework.get('name', '?')} {framework.get('version', '?')}",
            framework.get("keras_version") or "—", framework.get("image_data_format") or "—",
            ", ".join(str(d) for d in framework.get("devices") or []) or "—",
            "all cores" if threads is None else str(threads),
        ]  # fmt: skip
        if several:
            row = [host_of(run), *row, kernels_text(framework)]
        frameworks.setdefault(repr(row), row)
    if not frameworks:
        return "<p>No worker reported its framework.</p>"
    headers = ["backend", "framework", "Keras", "image format", "devices", "threads"]
    if several:
        headers = ["host", *headers, "CPU kernels"]
    return Table("", headers, list(frameworks.values()), []).html()
