"""A study's claims checked on result documents: per claim, the paper's figure, this
machine's numbers (median and range over repeats), the ratio or ordering on each side,
and a verdict.

Verdicts use only ratios measured in the same store: for each pair of sides, the
per-round ratio (round r of one over round r of the other, on the same machine), whose
median and order-statistics interval (:mod:`kbench.views.significance`) decide. The
paper's absolute figures are context, never compared with this machine's.

- **holds** / **does not hold**: the claim's test (:class:`kbench.studies.published.Claim`)
  on the median per-round ratio;
- **not measurable here**, with the reason: the claim needs a GPU and the runs had none,
  needs the real data set and the runs trained on synthetic data, the reduced size
  changes the question (the study file says why), or runs are missing (none stored, or
  none finished).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from kbench.results.result import RunResult
from kbench.results.store import host_of
from kbench.studies.published import REQUIREMENTS, Claim, Study
from kbench.views.compare import MEMORY_LABELS, UTILIZATION_LABELS, Spread, quality_flags
from kbench.views.figures import memory_by_kind, no_gpu_reason
from kbench.views.significance import RatioInterval, median_interval
from kbench.views.tables import Table

HOLDS, FAILS, UNMEASURABLE = "holds", "does not hold", "not measurable here"
MEASURED_KINDS = ("train", "inference")


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _dig(data: Any, *keys: str) -> Any:
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def _mean(values: Any) -> Optional[float]:
    values = [v for v in values or [] if _number(v) is not None]
    return sum(values) / len(values) if values else None


def _gpu_kernel_time(result: RunResult) -> Optional[float]:
    measured = _dig(result.sampler, "summary", "measured") or {}
    for name, stats in sorted(measured.items()):
        if name.startswith("gpu") and name.endswith("kernel_time_percent"):
            return _number((stats or {}).get("mean"))
    return None


def _memory(kind: str) -> Callable[[RunResult], Optional[float]]:
    return lambda r: _number(memory_by_kind(r).get(kind))


# kbench's labelled metric names a claim may read: name -> (what it is, reader)
METRICS: Dict[str, Tuple[str, Callable[[RunResult], Optional[float]]]] = {
    "images_per_sec": (
        "images per second over the measured window",
        lambda r: _number(r.metrics.get("images_per_sec")),
    ),
    "epoch_time_s": (
        "wall time per epoch, mean over the run's epochs (s)",
        lambda r: _mean(r.metrics.get("epoch_time_s")),
    ),
    "test_accuracy": (
        "accuracy on the test set after training",
        lambda r: _number(r.metrics.get("test_accuracy")),
    ),
    "scaling_efficiency": (
        "data-parallel efficiency: img/s / (workers x img/s of one worker)",
        lambda r: _number(_dig(r.metrics, "distributed", "scaling", "efficiency")),
    ),
    "comm_s": (
        "data-parallel communication time per step, mean over workers (s)",
        lambda r: _number(_dig(r.metrics, "distributed", "breakdown", "mean", "comm_s")),
    ),
    "backward_s": (
        "data-parallel backward time per step, mean over workers (s)",
        lambda r: _number(_dig(r.metrics, "distributed", "breakdown", "mean", "backward_s")),
    ),
    "gpu_kernel_time_percent": (UTILIZATION_LABELS["gpu"], _gpu_kernel_time),
    **{
        f"memory_{kind}": (label + " (bytes)", _memory(kind))
        for kind, label in MEMORY_LABELS.items()
    },
}


# selecting runs ------------------------------------------------------------------


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def matches(result: RunResult, selector: Dict[str, Any]) -> bool:
    """``selector``'s settings all equal the run's (``group``: the sweep group)."""
    for key, wanted in selector.items():
        have = (result.sweep or {}).get("group") if key == "group" else result.config.get(key)
        if _plain(have) != _plain(wanted):
            return False
    return True


def selector_text(selector: Dict[str, Any], skip: Sequence[str] = ()) -> str:
    return ", ".join(f"{k}={_plain(v)}" for k, v in selector.items() if k not in skip) or "all"


# outcomes ------------------------------------------------------------------------


@dataclass(frozen=True)
class Side:
    """One selector's runs: the metric's median and range over its finished rounds."""

    label: str
    metric: str
    spread: Optional[Spread]
    statuses: Dict[str, int]
    rounds: Dict[Tuple[str, int], float] = field(default_factory=dict)  # (host, repeat) -> value


@dataclass(frozen=True)
class Check:
    """The claim on one value of ``for_each`` (or on all runs, ``label`` empty)."""

    label: str
    verdict: str
    reason: str
    sides: List[Side]
    ratios: List[Optional[RatioInterval]]  # one per compared pair
    here: str  # this machine's ratio or ordering, in words


@dataclass(frozen=True)
class ClaimOutcome:
    claim: Claim
    verdict: str
    reason: str
    paper: str  # the paper's side, in words
    here: str  # this machine's side, in words
    checks: List[Check]


def evaluate(study: Study, results: Sequence[RunResult]) -> List[ClaimOutcome]:
    """Every claim of ``study`` on ``results`` (a store's newest result per run)."""
    measured = [r for r in results if r.kind in MEASURED_KINDS]
    return [evaluate_claim(study, claim, measured) for claim in study.claims]


def evaluate_claim(study: Study, claim: Claim, results: Sequence[RunResult]) -> ClaimOutcome:
    reduced = any((r.sweep or {}).get("reduced") for r in results)
    where = {**claim.where, **(claim.reduced_where if reduced else {})}
    pool = [r for r in results if matches(r, where)]
    values: List[Any] = [None]
    if claim.for_each:
        found = {
            repr(_plain(r.config.get(claim.for_each))): r.config.get(claim.for_each) for r in pool
        }
        values = [found[k] for k in sorted(found)] or [None]
    checks = []
    for value in values:
        extra = {} if value is None else {claim.for_each: value}
        label = "" if value is None else f"{claim.for_each}={_plain(value)}"
        members = [r for r in pool if matches(r, extra)]
        check = _check(claim, members, label, reduced)
        used = [r for r in members if r.ok and any(matches(r, s) for s in claim.selectors(reduced))]
        flags = quality_flags(used)
        if flags:  # a busy or throttled machine: the ratio may not be the engines'
            check = replace(check, here=f"{check.here} [flagged: {'; '.join(flags)}]")
        checks.append(check)
    verdict, reason = _combine(checks)
    here = "; ".join(f"{c.label}: {c.here}" if c.label else c.here for c in checks)
    return ClaimOutcome(claim, verdict, reason, paper_text(study, claim), here, checks)


def _combine(checks: Sequence[Check]) -> Tuple[str, str]:
    def labelled(c: Check) -> str:
        return f"{c.label}: {c.reason}" if c.label else c.reason

    failed = [c for c in checks if c.verdict == FAILS]
    held = [c for c in checks if c.verdict == HOLDS]
    unmeasured = [c for c in checks if c.verdict == UNMEASURABLE]
    if failed:
        return FAILS, "; ".join(labelled(c) for c in failed)
    if held:
        missing = (
            f" (not measured: {'; '.join(labelled(c) for c in unmeasured)})" if unmeasured else ""
        )
        return HOLDS, "; ".join(labelled(c) for c in held) + missing
    reasons = list(dict.fromkeys(c.reason for c in unmeasured))
    return UNMEASURABLE, "; ".join(reasons)


def _side(claim: Claim, side: Dict[str, Any], selector: Dict[str, Any], pool, shown) -> Side:
    metric = claim.side_metric(side)
    read = METRICS[metric][1]
    runs = [r for r in pool if matches(r, selector)]
    statuses: Dict[str, int] = {}
    rounds: Dict[Tuple[str, int], float] = {}
    for r in sorted(runs, key=lambda r: (r.started_at, r.run_id)):
        statuses[r.status] = statuses.get(r.status, 0) + 1
        value = read(r) if r.ok else None
        if value is not None:
            rounds[(host_of(r), int(r.config.get("repeat", 0)))] = value
    label = selector_text(selector, skip=shown)
    if metric != claim.metric:
        label += f" [{metric}]"
    return Side(label, metric, Spread.of(list(rounds.values())), statuses, rounds)


def _check(claim: Claim, pool: Sequence[RunResult], label: str, reduced: bool) -> Check:
    shown = (
        list(claim.where) + list(claim.reduced_where) + ([claim.for_each] if claim.for_each else [])
    )
    sides_spec = list(claim.items) if claim.items else [claim.numerator, claim.denominator]
    selectors = claim.selectors(reduced)
    sides = [_side(claim, spec, sel, pool, shown) for spec, sel in zip(sides_spec, selectors)]

    def unmeasurable(reason: str, ratios=()) -> Check:
        return Check(
            label, UNMEASURABLE, reason, sides, list(ratios), _here(claim, sides, list(ratios))
        )

    if not pool:
        return unmeasurable(f"runs missing: no stored run of {selector_text(claim.where)}")
    for need in claim.requires:
        if need == "gpu" and no_gpu_reason(pool) is not None:
            return unmeasurable(f"{REQUIREMENTS['gpu']} ({no_gpu_reason(pool)})")
        if need == "real_data" and any(r.data.get("synthetic") for r in pool):
            return unmeasurable(REQUIREMENTS["real_data"])
    if claim.reduced and reduced:
        pairs = _pair_ratios(claim, sides)
        return unmeasurable(f"reduced size changes the question: {claim.reduced}", pairs)
    present = [s for s in sides if s.rounds]
    absent = [s for s in sides if not s.rounds]
    ordering = claim.kind in ("ordering", "efficiency_ordering")
    if absent and not (ordering and len(present) >= 2):
        missing = "; ".join(f"{s.label} ({_statuses(s)})" for s in absent)
        return unmeasurable(f"runs missing: no finished run with {claim.metric} for {missing}")
    ratios = _pair_ratios(claim, present if ordering else sides)
    if any(r is None for r in ratios):
        return unmeasurable(
            "runs missing: the sides share no round (same repeat on the same "
            "machine), so no per-round ratio",
            ratios,
        )
    verdict, reason = _test(claim, ratios)
    if ordering and absent:
        reason += f" (items without runs: {', '.join(s.label for s in absent)})"
    return Check(
        label, verdict, reason, sides, ratios, _here(claim, present if ordering else sides, ratios)
    )


def _pair_ratios(claim: Claim, sides: Sequence[Side]) -> List[Optional[RatioInterval]]:
    """Per-round ratios: numerator over denominator, or each item over the one before."""
    pairs = [(sides[0], sides[1])] if not claim.items else list(zip(sides[1:], sides[:-1]))
    out = []
    for top, bottom in pairs:
        common = sorted(set(top.rounds) & set(bottom.rounds))
        ratios = [top.rounds[k] / bottom.rounds[k] for k in common if bottom.rounds[k]]
        out.append(median_interval(ratios))
    return out


def _test(claim: Claim, ratios: Sequence[RatioInterval]) -> Tuple[str, str]:
    if claim.kind == "ratio":
        ratio, target, tolerance = ratios[0], claim.target, claim.tolerance
        near = abs(ratio.median - target) <= tolerance
        how = "within" if near else "outside"
        return (HOLDS if near else FAILS), (
            f"x{ratio.median:.2f} is {how} {tolerance:g} of x{target:g}"
        )
    if claim.kind == "sign":
        ratio = ratios[0]
        above = ratio.median > claim.than
        ok = above if claim.expect == "greater" else ratio.median < claim.than
        side = "above" if above else "not above"
        if claim.expect == "less":
            side = "below" if ratio.median < claim.than else "not below"
        apart = ratio.low > claim.than or ratio.high < claim.than
        clear = "" if apart else f", no clear difference from x{claim.than:g} between rounds"
        if ratio.n < 2:
            clear = ", from 1 round: no spread to tell it from noise"
        return (HOLDS if ok else FAILS), f"x{ratio.median:.2f} is {side} x{claim.than:g}{clear}"
    rising = claim.direction == "increasing"
    wrong = [r for r in ratios if (r.median <= 1.0 if rising else r.median >= 1.0)]
    word = "rises" if rising else "falls"
    if wrong:
        return (
            FAILS,
            f"{claim.metric} does not {word.rstrip('s')} at every step "
            f"({len(wrong)} of {len(ratios)} steps the other way)",
        )
    return HOLDS, f"{claim.metric} {word} at every step"


def _statuses(side: Side) -> str:
    if not side.statuses:
        return "no run stored"
    return ", ".join(f"{n} {status}" for status, n in side.statuses.items())


def _value(value: float, metric: str) -> str:
    if metric.startswith("memory_"):
        return f"{value / 2**20:,.0f} MiB"
    if metric == "scaling_efficiency":
        return f"{value:.2f}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def spread_text(side: Side) -> str:
    s = side.spread
    if s is None:
        return f"{side.label}: - ({_statuses(side)})"
    span = "" if s.n < 2 else f" [{_value(s.low, side.metric)}-{_value(s.high, side.metric)}]"
    return f"{side.label}: {_value(s.median, side.metric)}{span} (n={s.n})"


def _here(claim: Claim, sides: Sequence[Side], ratios: Sequence[Optional[RatioInterval]]) -> str:
    numbers = f"{claim.metric}: " + "; ".join(spread_text(s) for s in sides)
    if not ratios or all(r is None for r in ratios):
        return numbers
    if claim.items:
        sign = " < " if claim.direction == "increasing" else " > "
        steps = ", ".join("-" if r is None else r.text() for r in ratios)
        order = sign.join(s.label for s in sides)
        return f"{order}? step ratios {steps}; {numbers}"
    ratio = ratios[0]
    return f"{'-' if ratio is None else ratio.text()}; {numbers}"


def paper_text(study: Study, claim: Claim) -> str:
    """The paper's side: its figure for the claim (or that it gives none, with its sentence),
    and the published figures the claim rests on."""
    if claim.kind in ("ordering", "efficiency_ordering"):
        sign = " < " if claim.direction == "increasing" else " > "
        head = sign.join(selector_text(item) for item in claim.items) + f" ({claim.metric})"
    elif claim.paper is not None:
        head = f"x{claim.paper:g}"
    else:
        head = "no number given"
        if claim.expected is not None:
            head += f" (checked against x{claim.expected:g})"
    figures = "; ".join(
        f"{study.figures[f].text()} ({study.figures[f].provenance.text()})" for f in claim.figures
    )
    return head + (f"; {figures}" if figures else "") + f' - "{claim.quote}"'


def claims_table(study: Study, outcomes: Sequence[ClaimOutcome]) -> Table:
    """The claims as a table: claim, paper, this machine, verdict (with the reason)."""
    rows = []
    for o in outcomes:
        statement = o.claim.statement
        if o.claim.doubt:
            statement += f" [doubt: {o.claim.doubt} Checked instead: {o.claim.instead}]"
        rows.append([o.claim.id, statement, o.paper, o.here, f"{o.verdict}: {o.reason}"])
    counts = {v: sum(o.verdict == v for o in outcomes) for v in (HOLDS, FAILS, UNMEASURABLE)}
    notes = [
        f"paper: {study.title} ({study.document}); hardware: {study.hardware_text()}; "
        f"versions: {study.versions_text()}. Its absolute figures are context; verdicts use "
        "ratios of runs measured here, round by round.",
        ", ".join(f"{n} {v}" for v, n in counts.items()),
    ]
    return Table(
        f"Paper vs this machine: {study.name}",
        ["claim", "statement", "paper", "this machine", "verdict"],
        rows,
        notes,
    )


def claims_text(study: Study, outcomes: Sequence[ClaimOutcome]) -> str:
    """The claims for a terminal: a block per claim (the table's rows are too wide)."""
    table = claims_table(study, outcomes)
    lines = [table.title, ""]
    for o in outcomes:
        lines.append(f"[{o.verdict.upper()}] {o.claim.id}: {o.claim.statement}")
        lines.append(f"  paper:        {o.paper}")
        if o.claim.doubt:
            lines.append(f"  doubt:        {o.claim.doubt}")
            lines.append(f"  checked:      {o.claim.instead}")
        if o.claim.note:
            lines.append(f"  note:         {o.claim.note}")
        lines.append(f"  this machine: {o.here}")
        lines.append(f"  verdict:      {o.verdict}: {o.reason}")
        lines.append("")
    return "\n".join(lines + [f"  {n}" for n in table.notes])
