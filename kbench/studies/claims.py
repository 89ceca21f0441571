"""A study's claims checked on result documents: per claim, the paper's figure, this
machine's numbers (median and range over repeats), the ratio or ordering on each side, a
verdict and the evidence behind it.

Verdicts use only ratios measured in one store: per pair of sides, the per-round ratios
(round r over round r, on one machine) and the 95% order-statistics interval on their
median (:mod:`kbench.results.analysis`). The interval decides, never the median alone:

- **holds**: the interval lies inside the claim's band (``ratio``: the paper's ratio +-
  its tolerance), wholly on the claimed side of ``than`` (``sign``), or, at every step of
  an ordering, wholly on the claimed side of x1;
- **does not hold**: it lies wholly outside the band, or on the other side;
- **inconclusive**, with the reason: it straddles an edge; fewer rounds than a 95%
  interval needs (:data:`ROUNDS_NEEDED`, 6: with fewer, the interval is the whole range,
  covering ``1 - 2 * 0.5**n``); a run behind the numbers was flagged (busy, slow clock,
  throttled, GPU shared, on battery: ``metrics.quality``); a side or ordering item has no
  finished run; a GPU claim has a side that saw no GPU (a CPU claim, one on a GPU); two
  runs of one round match one side (both named: the selector needs narrowing);
- **not measurable here**, with the reason: no GPU where the claim needs one, synthetic
  data where it needs the real set, or the reduced size changes the question.

Every verdict carries its :class:`Evidence` (size, devices, rounds, each interval with its
coverage, flags, the study's deviations); :func:`outcomes_json` is the same as JSON
(``claims.json``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from kbench.measure.stats import (
    LEVEL,
    MedianInterval,
    binomial_below,
    median_interval,
    rounds_needed,
)
from kbench.results.analysis import Spread, cpu_of, half_width, quality_flags, round_ratios
from kbench.results.readings import (
    epoch_time,
    memory_peak,
    no_gpu_reason,
    round_throughputs,
    utilization,
)
from kbench.results.result import RunResult
from kbench.results.store import host_of
from kbench.studies.published import (
    REQUIREMENTS,
    Claim,
    Study,
    in_scope,
    plain_value,
    run_matches,
    setting_of,
)
from kbench.views.tables import MEMORY_LABELS, UTILIZATION_LABELS, Table, interval_text

HOLDS, FAILS, INCONCLUSIVE = "holds", "does not hold", "inconclusive"
UNMEASURABLE = "not measurable here"
VERDICTS = (HOLDS, FAILS, INCONCLUSIVE, UNMEASURABLE)
MEASURED_KINDS = ("train", "inference", "generate")


ROUNDS_NEEDED = rounds_needed()  # 6 for 95%: 5 rounds cover 94%


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _at(*keys: str) -> Callable[[RunResult], Optional[float]]:
    """The reader of the number at ``metrics[keys[0]][keys[1]]...``."""

    def read(result: RunResult) -> Optional[float]:
        data: Any = result.metrics
        for key in keys:
            data = data.get(key) if isinstance(data, dict) else None
        return _number(data)

    return read


def _memory(kind: str) -> Callable[[RunResult], Optional[float]]:
    def largest(result: RunResult) -> Optional[float]:
        peak = memory_peak(result, kind)
        return None if peak is None else float(peak.largest)

    return largest


# kbench's labelled metric names a claim may read: name -> (what it is, reader)
METRICS: Dict[str, Tuple[str, Callable[[RunResult], Optional[float]]]] = {
    "images_per_sec": ("images per second over the measured window", _at("images_per_sec")),
    "epoch_time_s": ("wall time per epoch, mean over the run's epochs (s)", epoch_time),
    "test_accuracy": ("accuracy on the test set after training", _at("test_accuracy")),
    "scaling_efficiency": (
        "data-parallel efficiency: img/s / (workers x img/s of one worker)",
        _at("distributed", "scaling", "efficiency"),
    ),
    "comm_s": (
        "data-parallel communication time per step, mean over workers (s)",
        _at("distributed", "breakdown", "mean", "comm_s"),
    ),
    "backward_s": (
        "data-parallel backward time per step, mean over workers (s)",
        _at("distributed", "breakdown", "mean", "backward_s"),
    ),
    "gpu_kernel_time_percent": (
        UTILIZATION_LABELS["gpu"],
        lambda r: getattr(utilization(r, "gpu"), "percent", None),
    ),
    **{
        f"memory_{kind}": (label + " (bytes; of several GPUs, the largest's)", _memory(kind))
        for kind, label in MEMORY_LABELS.items()
    },
}


# selecting runs ------------------------------------------------------------------


def selector_text(selector: Dict[str, Any], skip: Sequence[str] = ()) -> str:
    return ", ".join(f"{k}={plain_value(v)}" for k, v in selector.items() if k not in skip) or "all"


def device_of(result: RunResult) -> str:
    """Where a run computed: ``GPU <name>``, or ``CPU <model (features)>``."""
    if no_gpu_reason([result]) is None:
        devices = result.environment.get("machine", {}).get("gpu", {}).get("devices") or [{}]
        return f"GPU {devices[0].get('name') or '(unnamed)'}"
    return f"CPU {cpu_of(result)}"


# outcomes ------------------------------------------------------------------------


@dataclass(frozen=True)
class Side:
    """One selector's runs: the metric's median and range over its finished rounds,
    and what may make them unfit to judge by."""

    label: str
    metric: str
    spread: Optional[Spread]
    statuses: Dict[str, int]
    rounds: Dict[Tuple[str, int], float] = field(default_factory=dict)  # (host, repeat) -> value
    duplicates: List[str] = field(default_factory=list)  # rounds that several runs matched
    devices: List[str] = field(default_factory=list)  # where its finished runs computed
    off_gpu: Optional[str] = None  # why one of its finished runs saw no GPU
    on_gpu: bool = False  # one of its finished runs computed on a GPU
    flags: List[str] = field(default_factory=list)  # its finished runs' quality flags


@dataclass(frozen=True)
class Check:
    """The claim on one value of ``for_each`` (or on all runs, ``label`` empty)."""

    label: str
    verdict: str
    reason: str
    sides: List[Side]
    ratios: List[Optional[MedianInterval]]  # one per compared pair
    here: str  # this machine's ratio or ordering, in words
    pairs: List[str] = field(default_factory=list)  # each ratio's pair: "top / bottom"
    flags: List[str] = field(default_factory=list)  # "side: flag"


@dataclass(frozen=True)
class Evidence:
    """What a verdict rests on: the size run, the devices, the rounds and each compared
    pair's interval (with its coverage), the flags, and how the runs differ from the
    paper's setting (the study file's ``deviations``)."""

    size: str  # "full" or "reduced"
    devices: List[str]
    rounds: Optional[int]  # per-round ratios behind the intervals (the fewest of any pair)
    intervals: List[Tuple[str, MedianInterval]]  # compared pair -> interval
    flags: List[str]
    deviations: List[str]
    rounds_needed: int = ROUNDS_NEEDED
    level: float = LEVEL

    def text(self) -> str:
        """``reduced size; CPU x; 1 round (a verdict needs 6); a / b: x1.00 [...]; ...``"""
        parts = [f"{self.size} size", " + ".join(self.devices) or "no finished run"]
        if self.rounds is None:
            parts.append("no ratio measured")
        else:
            parts.append(f"{_rounds(self.rounds)} (a verdict needs {self.rounds_needed})")
        parts += [f"{label}: {evidence_text(i)}" for label, i in self.intervals]
        parts.append("flagged: " + "; ".join(self.flags) if self.flags else "no run flagged")
        return "; ".join(parts)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "size": self.size,
            "devices": list(self.devices),
            "rounds": self.rounds,
            "rounds_needed": self.rounds_needed,
            "level": self.level,
            "intervals": [{"pair": label, **i.to_dict()} for label, i in self.intervals],
            "flags": list(self.flags),
            "deviations": list(self.deviations),
        }


@dataclass(frozen=True)
class ClaimOutcome:
    claim: Claim
    verdict: str
    reason: str
    paper: str  # the paper's side, in words
    here: str  # this machine's side, in words
    checks: List[Check]
    evidence: Optional[Evidence] = None

    def to_dict(self) -> Dict[str, Any]:
        return {
            "id": self.claim.id,
            "statement": self.claim.statement,
            "kind": self.claim.kind,
            "cited": self.claim.cited,
            "scope": {k: list(v) for k, v in self.claim.only.items()},
            "verdict": self.verdict,
            "reason": self.reason,
            "paper": self.paper,
            "here": self.here,
            "evidence": self.evidence.to_dict() if self.evidence else None,
            "checks": [
                {"label": c.label, "verdict": c.verdict, "reason": c.reason} for c in self.checks
            ],
        }


ORDERINGS = ("ordering", "efficiency_ordering")
Defined = Callable[[Dict[str, Any]], bool]  # whether the sweep has runs for a selector


def evaluate(
    study: Study, results: Sequence[RunResult], defined: Optional[Defined] = None
) -> List[ClaimOutcome]:
    """Every claim of ``study`` on ``results`` (a store's newest result per run).
    ``defined``: whether the sweep run has runs for a selector; an ordering's item it has
    none of is left out (and named), any other item without a finished run makes the
    claim inconclusive."""
    measured = [r for r in results if r.kind in MEASURED_KINDS]
    return [evaluate_claim(study, claim, measured, defined) for claim in study.claims]


def evaluate_claim(
    study: Study, claim: Claim, results: Sequence[RunResult],
    defined: Optional[Defined] = None,
) -> ClaimOutcome:  # fmt: skip
    reduced = any((r.sweep or {}).get("reduced") for r in results)
    if claim.cannot_run:
        reason = f"kbench cannot run this comparison: {claim.cannot_run}"
        return ClaimOutcome(claim, UNMEASURABLE, reason, paper_text(study, claim), "-", [])
    if claim.kind == "no_single_best":
        return _no_single_best(study, claim, results, defined)
    where = {**claim.where, **(claim.reduced_where if reduced else {})}
    pool = [r for r in results if run_matches(r, where) and in_scope(r, claim.only)]
    values: List[Any] = [None]
    if claim.for_each:
        found = {repr(setting_of(r, claim.for_each)): setting_of(r, claim.for_each) for r in pool}
        values = [found[k] for k in sorted(found)] or [None]
    checks = []
    for value in values:
        extra = {} if value is None else {claim.for_each: value}
        label = "" if value is None else f"{claim.for_each}={plain_value(value)}"
        members = [r for r in pool if run_matches(r, extra)]
        checks.append(_check(claim, members, label, reduced, defined))
    verdict, reason = _combine(checks)
    here = "; ".join(f"{c.label}: {c.here}" if c.label else c.here for c in checks)
    evidence = _evidence(study, claim, checks, reduced)
    return ClaimOutcome(claim, verdict, reason, paper_text(study, claim), here, checks, evidence)


def _no_single_best(
    study: Study, claim: Claim, results: Sequence[RunResult], defined: Optional[Defined]
) -> ClaimOutcome:
    """No item is the fastest at every value of ``for_each``: per item, a sign check of
    the best of the others over it at each value (:func:`_beaten`); it holds where every
    item is beaten somewhere, does not where one item is beaten nowhere (at least as fast
    as the others, clearly, at every value), else it is inconclusive."""
    outcomes = []
    for i, item in enumerate(claim.items):
        others = [other for j, other in enumerate(claim.items) if j != i]
        sub = replace(claim, kind="sign", items=(), numerator={"best_of": others},
                      denominator=item, expect="greater", than=1.0)  # fmt: skip
        outcomes.append((selector_text(item), evaluate_claim(study, sub, results, defined)))
    judged = [(label, *_beaten(o.checks)) for label, o in outcomes]
    checks = [
        replace(c, label=f"{label}; {c.label}" if c.label else label)
        for label, o in outcomes
        for c in o.checks
    ]
    unbeaten = [(label, why) for label, verdict, why in judged if verdict == FAILS]
    open_ = [(label, why) for label, verdict, why in judged if verdict == INCONCLUSIVE]
    if unbeaten:
        verdict = FAILS
        reason = "; ".join(
            f"{label} outpaces the best of the others at every value: {why}"
            for label, why in unbeaten
        )
    elif open_:
        verdict = INCONCLUSIVE
        reason = "; ".join(f"{label}: not shown beaten anywhere: {why}" for label, why in open_)
    elif all(verdict == UNMEASURABLE for _, verdict, _ in judged):
        verdict, reason = UNMEASURABLE, "; ".join(dict.fromkeys(why for _, _, why in judged))
    else:
        verdict = HOLDS
        reason = "; ".join(f"{label} is beaten at {why}" for label, v, why in judged if v == HOLDS)
    here = "; ".join(f"{c.label}: {c.here}" for c in checks)
    evidence = _evidence(study, claim, checks, any((r.sweep or {}).get("reduced") for r in results))
    return ClaimOutcome(claim, verdict, reason, paper_text(study, claim), here, checks, evidence)


def _beaten(checks: Sequence[Check]) -> Tuple[str, str]:
    """From one item's sign checks per value (the best of the others over it): HOLDS where
    it is beaten at some value (the interval wholly above x1; which values), FAILS where it
    outpaces the others at every value (wholly below x1: strictly faster; a tie is not),
    else INCONCLUSIVE (UNMEASURABLE where no value could be judged)."""
    by = {v: [c for c in checks if c.verdict == v] for v in VERDICTS}
    if by[HOLDS]:
        return HOLDS, "; ".join(f"{c.label}: {c.reason}" for c in by[HOLDS])
    outpaces = [c for c in by[FAILS] if c.ratios and c.ratios[0] and c.ratios[0].high < 1.0]
    if checks and len(outpaces) == len(checks):
        return FAILS, "; ".join(f"{c.label}: {c.reason}" for c in checks)
    if len(by[UNMEASURABLE]) == len(checks):
        return UNMEASURABLE, "; ".join(dict.fromkeys(c.reason for c in checks)) or "no value ran"
    undecided = [c for c in checks if c not in outpaces]
    return INCONCLUSIVE, "; ".join(f"{c.label}: {c.reason}" for c in undecided)


def _evidence(study: Study, claim: Claim, checks: Sequence[Check], reduced: bool) -> Evidence:
    devices = list(dict.fromkeys(d for c in checks for s in c.sides for d in s.devices))
    intervals = [
        (f"{c.label}: {pair}" if c.label else pair, ratio)
        for c in checks
        for pair, ratio in zip(c.pairs, c.ratios)
        if ratio is not None
    ]
    return Evidence(
        size="reduced" if reduced else "full",
        devices=devices,
        rounds=min((i.n for _, i in intervals), default=None),
        intervals=intervals,
        flags=list(dict.fromkeys(f for c in checks for f in c.flags)),
        deviations=study.deviations_for(reduced) + list(claim.deviations),
    )


def _combine(checks: Sequence[Check]) -> Tuple[str, str]:
    def labelled(c: Check) -> str:
        return f"{c.label}: {c.reason}" if c.label else c.reason

    by = {v: [c for c in checks if c.verdict == v] for v in VERDICTS}
    for verdict in (FAILS, INCONCLUSIVE):
        if by[verdict]:
            return verdict, "; ".join(labelled(c) for c in by[verdict])
    if by[HOLDS]:
        unmeasured = by[UNMEASURABLE]
        missing = (
            f" (not measured: {'; '.join(labelled(c) for c in unmeasured)})" if unmeasured else ""
        )
        return HOLDS, "; ".join(labelled(c) for c in by[HOLDS]) + missing
    return UNMEASURABLE, "; ".join(dict.fromkeys(c.reason for c in by[UNMEASURABLE]))


def _side(claim: Claim, side: Dict[str, Any], selector: Dict[str, Any], pool, shown) -> Side:
    metric = claim.side_metric(side)
    read = METRICS[metric][1]
    runs = sorted(
        (r for r in pool if run_matches(r, selector)), key=lambda r: (r.started_at, r.run_id)
    )
    statuses: Dict[str, int] = {}
    by_round: Dict[Tuple[str, int], List[RunResult]] = {}
    for r in runs:
        statuses[r.status] = statuses.get(r.status, 0) + 1
        by_round.setdefault((host_of(r), int(r.config.get("repeat", 0))), []).append(r)
    rounds: Dict[Tuple[str, int], float] = {}
    for (host, _), found in by_round.items():
        for r in found:  # the newest of a round last
            for round_index, value in round_values(r, metric, read).items():
                rounds[(host, round_index)] = value
    finished = [r for r in runs if r.ok]
    off = [no_gpu_reason([r]) for r in finished]
    label = selector_text(selector, skip=shown)
    if metric != claim.metric:
        label += f" [{metric}]"
    return Side(
        label, metric, Spread.of(list(rounds.values())), statuses, rounds,
        duplicates=[_duplicate(key, found) for key, found in by_round.items() if len(found) > 1],
        devices=list(dict.fromkeys(device_of(r) for r in finished)),
        off_gpu=next((why for why in off if why is not None), None),
        on_gpu=any(why is None for why in off),
        flags=quality_flags(finished),
    )  # fmt: skip


def _best_side(claim: Claim, spec: Dict[str, Any], candidates: Sequence[Side]) -> Side:
    """A ``best_of`` side: in each round its candidates all have, the highest value (the
    fastest); none where a candidate has no finished run. Its label counts each
    candidate's fastest rounds."""
    keys = [k for k in candidates[0].rounds if all(k in c.rounds for c in candidates)]
    if any(not c.rounds for c in candidates):
        keys = []
    rounds, wins = {}, {c.label: 0 for c in candidates}
    for key in keys:
        best = max(candidates, key=lambda c: c.rounds[key])
        rounds[key] = best.rounds[key]
        wins[best.label] += 1
    label = "best of " + " | ".join(c.label for c in candidates)
    if keys:
        won = ", ".join(f"{k} {n}" for k, n in wins.items() if n)
        label += f" (fastest rounds: {won})"
    missing = [c.label for c in candidates if not c.rounds]
    if missing:
        label += f" ({', '.join(missing)}: no finished run)"
    statuses: Dict[str, int] = {}
    for c in candidates:
        for status, n in c.statuses.items():
            statuses[status] = statuses.get(status, 0) + n
    return Side(
        label, claim.side_metric(spec), Spread.of(list(rounds.values())) if rounds else None,
        statuses, rounds,
        duplicates=[d for c in candidates for d in c.duplicates],
        devices=list(dict.fromkeys(d for c in candidates for d in c.devices)),
        off_gpu=next((c.off_gpu for c in candidates if c.off_gpu), None),
        on_gpu=any(c.on_gpu for c in candidates),
        flags=list(dict.fromkeys(f for c in candidates for f in c.flags)),
    )  # fmt: skip


def round_values(
    result: RunResult, metric: str, read: Callable[[RunResult], Optional[float]]
) -> Dict[int, float]:
    """``{round: value}`` of one result: its throughput by round where it is read by round
    (a warm comparison's document holds one per counted window,
    :func:`~kbench.results.readings.round_throughputs`), else its reading in its round."""
    if metric == "images_per_sec":
        return round_throughputs(result)
    value = read(result) if result.ok else None
    return {} if value is None else {int(result.config.get("repeat", 0)): value}


def _duplicate(key: Tuple[str, int], found: Sequence[RunResult]) -> str:
    """``round 1 on host: 2 runs (r1: dataset=cifar10; r2: dataset=cifar100)``: the
    settings in which the runs one selector matched differ."""
    settings = [{**r.config, "group": (r.sweep or {}).get("group")} for r in found]
    differ = [k for k in settings[0] if len({repr(s.get(k)) for s in settings}) > 1]
    runs = "; ".join(
        f"{r.run_id}: "
        + (", ".join(f"{k}={plain_value(s.get(k))}" for k in differ) or "same settings")
        for r, s in zip(found, settings)
    )
    return f"round {key[1] + 1} on {key[0]}: {len(found)} runs ({runs})"


def _check(
    claim: Claim, pool: Sequence[RunResult], label: str, reduced: bool, defined: Optional[Defined]
) -> Check:
    shown = (
        list(claim.where) + list(claim.reduced_where) + ([claim.for_each] if claim.for_each else [])
    )
    specs = claim.specs()
    selectors = [found[0] for found in claim.side_selectors(reduced)]
    sides = [
        _best_side(claim, spec, [_side(claim, spec, sel, pool, shown) for sel in found])
        if "best_of" in spec
        else _side(claim, spec, found[0], pool, shown)
        for spec, found in zip(specs, claim.side_selectors(reduced))
    ]
    left_out: List[str] = []
    if claim.kind in ORDERINGS and defined is not None:  # items this sweep never runs
        keep = [s.statuses or defined(sel) for s, sel in zip(sides, selectors)]
        left_out = [s.label for s, k in zip(sides, keep) if not k]
        sides = [s for s, k in zip(sides, keep) if k]
    ratios = _pair_ratios(claim, sides)
    pairs = _pair_labels(claim, sides)
    flags = [f"{s.label}: {f}" for s in sides for f in s.flags]

    def made(verdict: str, reason: str) -> Check:
        if left_out:
            reason += f" (items this sweep does not run, left out: {', '.join(left_out)})"
        here = _here(claim, sides, ratios)
        return Check(label, verdict, reason, sides, ratios, here, pairs, flags)

    early = _not_judged(claim, pool, sides, reduced)
    if early is not None:
        return made(*early)
    if any(r is None for r in ratios):
        return made(
            INCONCLUSIVE,
            "runs missing: the sides share no round (same repeat on the same machine), so "
            "no per-round ratio",
        )
    verdict, position = _test(claim, ratios)  # type: ignore[arg-type]
    doubts = _doubts(claim, sides, ratios)  # type: ignore[arg-type]
    if doubts:
        return made(INCONCLUSIVE, "; ".join(doubts) + f"; the interval: {position}")
    return made(verdict, position)


def _not_judged(
    claim: Claim, pool: Sequence[RunResult], sides: Sequence[Side], reduced: bool
) -> Optional[Tuple[str, str]]:
    """The verdict and reason where the runs cannot be judged at all, else None."""
    if claim.reduced and reduced:  # whether or not its runs are stored
        return UNMEASURABLE, f"reduced size changes the question: {claim.reduced}"
    if not pool:
        return INCONCLUSIVE, f"runs missing: no stored run of {selector_text(claim.where)}"
    finished = [r for r in pool if r.ok] or list(pool)
    for need in claim.requires:
        if need == "gpu" and no_gpu_reason(pool) is not None:
            return UNMEASURABLE, f"{REQUIREMENTS['gpu']} ({no_gpu_reason(pool)})"
        if need == "cpu" and all(no_gpu_reason([r]) is None for r in finished):
            return UNMEASURABLE, REQUIREMENTS["cpu"]
        if need == "real_data" and any(r.data.get("synthetic") for r in pool):
            return UNMEASURABLE, REQUIREMENTS["real_data"]
    absent = [s for s in sides if not s.rounds]
    if absent:
        missing = "; ".join(f"{s.label} ({_statuses(s)})" for s in absent)
        return INCONCLUSIVE, f"runs missing: no finished run with {claim.metric} for {missing}"
    if len(sides) < 2:
        return INCONCLUSIVE, "runs missing: fewer than two items of the ordering ran here"
    twice = [f"{s.label}: {d}" for s in sides for d in s.duplicates]
    if twice:
        return INCONCLUSIVE, (
            "two runs of one round match one side, and a ratio needs one: "
            + "; ".join(twice)
            + ". Narrow the claim's selector (where) to one of them"
        )
    return None


def _doubts(claim: Claim, sides: Sequence[Side], ratios: Sequence[MedianInterval]) -> List[str]:
    """Why a verdict the interval gives cannot be trusted: too few rounds, a side off the
    device the claim is about, flagged runs."""
    doubts = []
    n = min(r.n for r in ratios)
    if n < ROUNDS_NEEDED:
        need = f"a {LEVEL:.0%} interval needs {ROUNDS_NEEDED} rounds (--repeats {ROUNDS_NEEDED})"
        if n == 1:
            doubts.append(f"1 round: no interval; {need}")
        else:
            coverage = 1 - 2 * binomial_below(1, n)
            doubts.append(
                f"{n} rounds: the interval (the whole range) covers the median with "
                f"{coverage:.0%}; {need}"
            )
    if "gpu" in claim.requires:
        doubts += [f"a side off the GPU: {s.label} ({s.off_gpu})" for s in sides if s.off_gpu]
    if "cpu" in claim.requires:
        doubts += [
            f"a side on a GPU: {s.label} ({'; '.join(s.devices)})" for s in sides if s.on_gpu
        ]
    flags = [f"{s.label}: {f}" for s in sides for f in s.flags]
    if flags:
        doubts.append("runs flagged, the ratio may be the machine's: " + "; ".join(flags))
    return doubts


def _rounds(n: int) -> str:
    return f"{n} round{'s' if n != 1 else ''}"


def _pair_ratios(claim: Claim, sides: Sequence[Side]) -> List[Optional[MedianInterval]]:
    """Per-round ratios: numerator over denominator, or each item over the one before."""
    pairs = _pairs(claim, sides)
    return [median_interval(round_ratios(sorted(t.rounds.items()), b.rounds)) for t, b in pairs]


def _pairs(claim: Claim, sides: Sequence[Side]) -> List[Tuple[Side, Side]]:
    if len(sides) < 2:
        return []
    return [(sides[0], sides[1])] if not claim.items else list(zip(sides[1:], sides[:-1]))


def _pair_labels(claim: Claim, sides: Sequence[Side]) -> List[str]:
    return [f"{top.label} / {bottom.label}" for top, bottom in _pairs(claim, sides)]


def evidence_text(interval: MedianInterval) -> str:
    """``x0.75 [0.70-0.80, 97%, n=6]``; ``x1.20 [1 round: no interval]``."""
    if interval.n < 2:
        return f"x{interval.median:.2f} [1 round: no interval]"
    return (
        f"x{interval.median:.2f} [{interval.low:.2f}-{interval.high:.2f}, "
        f"{interval.coverage:.0%}, n={interval.n}]"
    )


def _test(claim: Claim, ratios: Sequence[MedianInterval]) -> Tuple[str, str]:
    """The verdict the intervals give, and where they lie, in words."""
    if claim.kind == "ratio":
        i, target, tolerance = ratios[0], claim.target, claim.tolerance
        low, high = target - tolerance, target + tolerance
        band = f"x{low:.2f}-x{high:.2f} (x{target:g} +- {tolerance:g})"
        if low <= i.low and i.high <= high:
            return HOLDS, f"{evidence_text(i)} lies inside {band}"
        if i.high < low or i.low > high:
            return FAILS, f"{evidence_text(i)} lies outside {band}"
        return INCONCLUSIVE, f"{evidence_text(i)} straddles an edge of {band}"
    if claim.kind == "sign":
        i, than = ratios[0], claim.than
        greater = claim.expect == "greater"
        claimed, other = ("above", "at or below") if greater else ("below", "at or above")
        if (i.low > than) if greater else (i.high < than):
            return HOLDS, f"{evidence_text(i)} lies {claimed} x{than:g}"
        if (i.high <= than) if greater else (i.low >= than):
            return FAILS, f"{evidence_text(i)} lies {other} x{than:g}, not {claimed}"
        return INCONCLUSIVE, f"{evidence_text(i)} holds x{than:g}: no clear difference"
    rising = claim.direction == "increasing"
    word = "rise" if rising else "fall"
    wrong = [r for r in ratios if (r.high <= 1.0 if rising else r.low >= 1.0)]
    clear = [r for r in ratios if (r.low > 1.0 if rising else r.high < 1.0)]
    steps = ", ".join(evidence_text(r) for r in ratios)
    if wrong:
        return FAILS, (
            f"{claim.metric} does not {word} at every step ({len(wrong)} of {len(ratios)} "
            f"steps wholly the other way: {steps})"
        )
    if len(clear) < len(ratios):
        return INCONCLUSIVE, (
            f"{claim.metric}: {len(ratios) - len(clear)} of {len(ratios)} steps' intervals "
            f"hold x1 ({steps})"
        )
    return HOLDS, f"{claim.metric} {word}s at every step, each interval clear of x1 ({steps})"


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


def _here(claim: Claim, sides: Sequence[Side], ratios: Sequence[Optional[MedianInterval]]) -> str:
    numbers = f"{claim.metric}: " + "; ".join(spread_text(s) for s in sides)
    if not ratios or all(r is None for r in ratios):
        return numbers
    if claim.items:
        sign = " < " if claim.direction == "increasing" else " > "
        steps = ", ".join("-" if r is None else interval_text(r) for r in ratios)
        order = sign.join(s.label for s in sides)
        return f"{order}? step ratios {steps}; {numbers}"
    ratio = ratios[0]
    return f"{'-' if ratio is None else interval_text(ratio)}; {numbers}"


def paper_text(study: Study, claim: Claim) -> str:
    """The paper's side: its figure for the claim (or that it gives none, with its sentence),
    and the published figures the claim rests on."""
    if claim.kind in ("ordering", "efficiency_ordering"):
        sign = " < " if claim.direction == "increasing" else " > "
        head = sign.join(selector_text(item) for item in claim.items) + f" ({claim.metric})"
    elif claim.kind == "no_single_best":
        items = " | ".join(selector_text(item) for item in claim.items)
        head = f"no one of {items} fastest at every {claim.for_each} ({claim.metric})"
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
    """The claims as a table: claim, paper, this machine, verdict (with the reason) and
    the evidence (size, devices, rounds, intervals, flags, deviations)."""
    rows = []
    for o in outcomes:
        statement = o.claim.statement
        if o.claim.doubt:
            statement += f" [doubt: {o.claim.doubt} Checked instead: {o.claim.instead}]"
        statement += _scope_text(o.claim)
        evidence = o.evidence.text() if o.evidence else ""
        if o.claim.deviations:
            evidence += "; this claim's deviations from the paper: " + "; ".join(o.claim.deviations)
        rows.append([o.claim.id, statement, o.paper, o.here, f"{o.verdict}: {o.reason}", evidence])
    size = _size(outcomes)
    return Table(
        f"Paper vs this machine: {study.name}" + (f" ({size} size)" if size else ""),
        ["claim", "statement", "paper", "this machine", "verdict", "evidence"],
        rows,
        _notes(study, outcomes),
    )


def _scope_text(claim: Claim) -> str:
    """`` [cited: ...]`` and `` [judged on model=a, b only]``, where the claim says so."""
    text = ""
    if claim.cited:
        text += f" [cited: {claim.cited}; not the study's own measurement]"
    if claim.only:
        scope = "; ".join(f"{k}={', '.join(map(str, v))}" for k, v in claim.only.items())
        text += f" [judged on {scope} only]"
    return text


def _size(outcomes: Sequence[ClaimOutcome]) -> str:
    sizes = {o.evidence.size for o in outcomes if o.evidence}
    return " and ".join(sorted(sizes))


def _notes(study: Study, outcomes: Sequence[ClaimOutcome]) -> List[str]:
    counts = {v: sum(o.verdict == v for o in outcomes) for v in VERDICTS}
    shown = study.deviations_for("reduced" in _size(outcomes))
    deviations = (
        ["How these runs differ from the paper's (every claim): " + "; ".join(shown)]
        if shown
        else []
    )
    return deviations + [
        f"paper: {study.title} ({study.document}); hardware: {study.hardware_text()}; "
        f"versions: {study.versions_text()}. Its absolute figures are context; verdicts use "
        "ratios of runs measured here, round by round.",
        f"A verdict is read off the {LEVEL:.0%} order-statistics interval on the median "
        f"per-round ratio, never the median alone: it needs {ROUNDS_NEEDED} rounds; fewer "
        "rounds, flagged runs, a side that did not run or ran off the claim's device give "
        "inconclusive.",
        ", ".join(f"{n} {v}" for v, n in counts.items()),
    ]


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
        if o.claim.cited or o.claim.only:
            lines.append(f"  scope:       {_scope_text(o.claim)}")
        lines.append(f"  this machine: {o.here}")
        lines.append(f"  verdict:      {o.verdict}: {o.reason}")
        if o.evidence:
            lines.append(f"  evidence:     {o.evidence.text()}")
        for deviation in o.claim.deviations:
            lines.append(f"  deviation:    {deviation}")
        lines.append("")
    return "\n".join(lines + [f"  {n}" for n in table.notes])


def outcomes_json(study: Study, outcomes: Sequence[ClaimOutcome]) -> Dict[str, Any]:
    """The verdicts as JSON (``claims.json``): the study, the rule, and per claim its
    verdict, reason and evidence."""
    return {
        "study": study.name,
        "title": study.title,
        "document": study.document,
        "size": _size(outcomes) or None,
        "level": LEVEL,
        "rounds_needed": ROUNDS_NEEDED,
        "deviations": study.deviations_for("reduced" in _size(outcomes)),
        "counts": {v: sum(o.verdict == v for o in outcomes) for v in VERDICTS},
        "claims": [o.to_dict() for o in outcomes],
    }


def widest_half_width(outcomes: Sequence[ClaimOutcome], level: float = LEVEL) -> Optional[float]:
    """The widest half-width, relative to its median, of the per-round ratios' intervals of
    every claim judged here (``reproduce --ratio-precision``); None while any of them is
    below ``level`` or there is none yet."""
    widths = [
        half_width(interval, level)
        for o in outcomes
        for check in o.checks
        if check.verdict != UNMEASURABLE
        for interval in check.ratios
    ]
    return None if not widths or math.inf in widths else max(widths)
