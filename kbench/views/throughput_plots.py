"""Throughput by backend (bars per model) and the speed against the baseline (a heatmap)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from kbench.views.figures import (
    LOG_SCALE_ABOVE,
    NOT_OK_COLOUR,
    WIDTH_IN,
    Drawn,
    Outcome,
    RunGroup,
    Skipped,
    by_model,
    colour,
    has_rate,
    log_axis,
    model_title,
    new_figure,
    not_ok_text,
    panel_grid,
    png_of,
    shared_legend,
    short_number,
)

THROUGHPUT = "Throughput by backend"
SPEED_RATIO = "Speed against the baseline"


def throughput_bars(groups: Sequence[RunGroup], backends: Sequence[str]) -> Outcome:
    if not groups:
        return Skipped(THROUGHPUT, "no training or inference run to show")
    models, unfinished = _finished_models(groups)
    if not models:
        return Skipped(THROUGHPUT, "no training or inference run finished")
    widest = max(len(g) for g in models.values())
    columns = 1 if widest > 3 else min(2, len(models))
    rows = -(-len(models) // columns)
    figure = new_figure(3.8 * rows + 0.4)
    marked: List[str] = []  # "backend, group label: statuses" of runs drawn as text, not bars
    for ax, (model, members) in zip(panel_grid(figure, len(models), columns), models.items()):
        _throughput_panel(ax, model, members, backends, marked)
    shared_legend(figure, 10)
    return Drawn(THROUGHPUT, png_of(figure), _throughput_caption(marked, unfinished))


def _finished_models(
    groups: Sequence[RunGroup],
) -> Tuple[Dict[str, List[RunGroup]], Dict[str, List[RunGroup]]]:
    models = by_model(groups)
    unfinished = {
        model: members
        for model, members in models.items()
        if not any(has_rate(row) for g in members for row in g.comparison.rows)
    }
    return {m: members for m, members in models.items() if m not in unfinished}, unfinished


@dataclass(frozen=True)
class _Scale:
    """Linear from 0, or log from below the lowest repeat past LOG_SCALE_ABOVE times."""

    top: float
    log_scale: bool
    floor: float

    @classmethod
    def of(cls, spreads: Sequence[Any]) -> _Scale:
        top = max(s.high for s in spreads)
        log_scale = top / max(min(s.low for s in spreads), 1e-9) > LOG_SCALE_ABOVE
        return cls(top, log_scale, min(s.low for s in spreads) / 3 if log_scale else 0.0)

    def above(self, value: float) -> float:
        return value * 1.12 if self.log_scale else value + self.top * 0.015


def _throughput_panel(
    ax: Any, model: str, members: List[RunGroup], backends: Sequence[str], marked: List[str]
) -> None:
    present = [b for b in backends if any(g.row(b) for g in members)]
    width = 0.8 / len(present)
    scale = _Scale.of(
        [g.row(b).images_per_sec for g in members for b in present if has_rate(g.row(b))]
    )
    for j, backend in enumerate(present):
        for i, group in enumerate(members):
            row = group.row(backend)
            if row is None:
                continue
            x = i + (j - (len(present) - 1) / 2) * width
            if row.images_per_sec is None:  # no run finished: say so where the bar would be
                marked.append(f"{backend}, {group.label}: {not_ok_text(row.statuses)}")
                ax.text(x, scale.above(scale.floor), f"{backend}: {not_ok_text(row.statuses)}",
                        rotation=90, ha="center", va="bottom", color=NOT_OK_COLOUR, fontsize=9,
                        fontweight="bold")  # fmt: skip
                continue
            _bar(ax, x, width, backend, row, scale, colour(backend, backends))
            if not row.all_ok:
                marked.append(f"{backend}, {group.label}: {not_ok_text(row.statuses)}")
    ax.set_xticks(range(len(members)))
    ax.set_xticklabels([g.setting.replace(", ", "\n") for g in members], fontsize=9)
    if scale.log_scale:
        log_axis(ax)
        ax.set_ylim(scale.floor, scale.top * 3)
        ax.set_ylabel("images per second (img/s, log scale)")
    else:
        ax.set_ylim(0, scale.top * 1.18)
        ax.set_ylabel("images per second (img/s)")
    ax.set_title(model_title(model, members), fontsize=11)
    ax.grid(axis="y", alpha=0.3)


def _bar(
    ax: Any, x: float, width: float, backend: str, row: Any, scale: _Scale, colour_: str
) -> None:
    spread = row.images_per_sec
    ax.bar(x, spread.median - scale.floor, width * 0.92, bottom=scale.floor, label=backend,
           color=colour_, yerr=[[spread.median - spread.low], [spread.high - spread.median]],
           capsize=3, ecolor="#333")  # fmt: skip
    note = short_number(spread.median)
    if not row.all_ok:
        note += f"\n+{not_ok_text(row.statuses)}"
    ax.text(x, scale.above(spread.high), note, ha="center", va="bottom", fontsize=8,
            color=NOT_OK_COLOUR if not row.all_ok else "#222")  # fmt: skip


def _throughput_caption(marked: List[str], unfinished: Dict[str, List[RunGroup]]) -> str:
    caption = (
        "Bars: median img/s over the repeats of each backend (measured window only, "
        "warmup excluded); error bars: lowest to highest repeat. A red label marks runs "
        "that did not finish (OOM: out of memory, TIMEOUT, FAILED) where their bar would be. "
        f"A panel whose values span more than {LOG_SCALE_ABOVE}x uses a log scale."
    )
    if marked:
        caption += " Marked: " + "; ".join(marked) + "."
    for model, members in unfinished.items():
        statuses = [
            f"{row.backend} {not_ok_text(row.statuses)}"
            for g in members
            for row in g.comparison.rows
        ]
        caption += f" {model}: no run finished ({', '.join(statuses)}), so it has no panel."
    return caption


def speed_heatmap(groups: Sequence[RunGroup], backends: Sequence[str], baseline: str) -> Outcome:
    from matplotlib import colormaps  # where a figure is drawn: see new_figure
    from matplotlib.colors import TwoSlopeNorm

    if len(backends) < 2:
        why = f"only one backend ran ({', '.join(backends) or 'none'}): nothing to compare"
        return Skipped(SPEED_RATIO, why)
    others = [b for b in backends if b != baseline]
    columns = [baseline] + others
    rows = [g for g in groups if any(has_rate(g.row(b)) for b in others)]
    if not any(g.row(baseline) and has_rate(g.row(baseline)) for g in rows):
        return Skipped(
            SPEED_RATIO,
            f"no model and setting has a finished run of both the baseline ({baseline}) "
            "and another backend",
        )
    values, texts = _ratio_cells(rows, columns, baseline)
    logs = np.log2(values)
    finite = np.abs(logs[np.isfinite(logs)])
    limit = max(float(finite.max()) if finite.size else 1.0, 1.0)  # colours reach 2x at least
    height = max(2.8, 1.5 + 0.6 * len(rows))
    label_in = 0.075 * max(len(g.label) for g in rows)
    figure = new_figure(height, min(WIDTH_IN, 2.2 + label_in + 1.5 * len(columns)))
    ax = figure.subplots()
    cmap = colormaps["PiYG"].with_extremes(bad="#dddddd")
    image = ax.imshow(np.ma.masked_invalid(logs), cmap=cmap, norm=TwoSlopeNorm(0.0, -limit, limit),
                      aspect="auto")  # fmt: skip
    for i in range(len(rows)):
        for j in range(len(columns)):
            inside = np.isfinite(logs[i, j]) and abs(logs[i, j]) > 0.6 * limit
            missing = NOT_OK_COLOUR if np.isnan(values[i, j]) else "#111"
            ax.text(j, i, texts[i][j], ha="center", va="center", fontsize=9,
                    color="white" if inside else missing)  # fmt: skip
    ax.set_xticks(range(len(columns)))
    ax.set_xticklabels([f"{b}\n(baseline)" if b == baseline else b for b in columns])
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([g.label for g in rows], fontsize=9)
    ax.set_xlabel("backend")
    ax.set_title(
        f"Speed against {baseline} (img/s ratio, >1 is faster);\none row per model and setting",
        fontsize=11,
    )
    _ratio_colour_bar(figure, image, ax, limit)
    caption = (
        f"Each cell: the median over rounds of (this backend's img/s in round r) / "
        f"({baseline}'s img/s in round r); below it, the lowest and highest round. Rounds "
        "pair runs made close in time, so a machine that drifts does not pick the winner. "
        "Grey cells: no ratio (the run did not finish, or the baseline did not run there)."
    )
    return Drawn(SPEED_RATIO, png_of(figure), caption)


def _ratio_cells(
    rows: Sequence[RunGroup], columns: Sequence[str], baseline: str
) -> Tuple[np.ndarray, List[List[str]]]:
    values = np.full((len(rows), len(columns)), np.nan)
    texts = [["" for _ in columns] for _ in rows]
    for i, group in enumerate(rows):
        base_ok = group.comparison.baseline == baseline and has_rate(group.row(baseline))
        for j, backend in enumerate(columns):
            row = group.row(backend)
            if row is None:
                texts[i][j] = "not run"
            elif row.images_per_sec is None:
                texts[i][j] = not_ok_text(row.statuses)
            elif not base_ok:
                texts[i][j] = f"no {baseline}\nrun"
            elif row.ratio is not None:
                values[i, j] = row.ratio.median
                texts[i][j] = f"{row.ratio.median:.3g}×"
                if row.ratio.n > 1 and backend != baseline:
                    texts[i][j] += f"\n({row.ratio.low:.3g}–{row.ratio.high:.3g})"
    return values, texts


def _ratio_colour_bar(figure: Any, image: Any, ax: Any, limit: float) -> None:
    bar = figure.colorbar(image, ax=ax, shrink=0.9)
    step = 0.5 if limit <= 2 else max(1, int(np.ceil(2 * limit / 8)))
    ticks = [t * step for t in range(-40, 41) if abs(t * step) <= limit]
    bar.set_ticks(ticks)
    bar.set_ticklabels([f"{2.0**t:.2g}×" for t in ticks])
    bar.set_label("ratio (log scale)")
