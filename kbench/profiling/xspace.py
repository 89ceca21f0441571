"""Reading the profile files TensorFlow and JAX write (``*.xplane.pb``, an XSpace).

An XSpace protocol buffer (``tsl/profiler/protobuf/xplane.proto``) holds planes (a host,
a GPU), each with lines (threads, streams) of timed events and tables of event and
statistic names. It is decoded here from the protobuf wire format, not with either
framework's generated classes, so one reader serves a JAX-only environment and a
TensorFlow one; only the fields kbench reads are decoded. :func:`hlo_op_names` reads
each HLO instruction's JAX call path from the modules JAX stores in the metadata plane.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple, Union

# field numbers, from tsl/profiler/protobuf/xplane.proto and xla/service/hlo.proto
XSPACE_PLANES = 1
PLANE_NAME, PLANE_LINES, PLANE_EVENT_METADATA, PLANE_STAT_METADATA = 2, 3, 4, 5
LINE_NAME, LINE_EVENTS = 2, 4
EVENT_METADATA_ID, EVENT_OFFSET_PS, EVENT_DURATION_PS, EVENT_STATS = 1, 2, 3, 4
METADATA_ID, METADATA_NAME, EVENT_METADATA_STATS = 1, 2, 5
STAT_METADATA_ID, STAT_DOUBLE, STAT_UINT64, STAT_INT64, STAT_STR, STAT_BYTES, STAT_REF = range(1, 8)
MAP_KEY, MAP_VALUE = 1, 2
HLO_PROTO_MODULE = 1
MODULE_COMPUTATIONS = 3
COMPUTATION_INSTRUCTIONS, COMPUTATION_ID = 2, 5
INSTRUCTION_NAME, INSTRUCTION_OPCODE, INSTRUCTION_METADATA, INSTRUCTION_CALLED = 1, 2, 7, 38
OP_METADATA_NAME = 2

Value = Union[int, bytes]


class XSpaceError(ValueError):
    """The file is not an XSpace this reader understands."""


def _varint(buf: bytes, pos: int) -> Tuple[int, int]:
    """The varint at ``pos``, and the position after it."""
    shift = result = 0
    while True:
        if pos >= len(buf):
            raise XSpaceError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> Iterator[Tuple[int, int, Value]]:
    """(field number, wire type, value) of each field of one message."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield number, wire, value
            continue
        if wire == 2:
            width, pos = _varint(buf, pos)
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
        else:
            raise XSpaceError(f"unsupported wire type {wire} in field {number}")
        if pos + width > end:
            raise XSpaceError(f"field {number} runs past the end of its message")
        yield number, wire, buf[pos : pos + width]
        pos += width


def _message(buf: bytes) -> Dict[int, List[Value]]:
    fields: Dict[int, List[Value]] = {}
    for number, _, value in _fields(buf):
        fields.setdefault(number, []).append(value)
    return fields


def _text(fields: Dict[int, List[Value]], number: int) -> str:
    value = fields.get(number, [b""])[0]
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _int(fields: Dict[int, List[Value]], number: int) -> int:
    value = fields.get(number, [0])[0]
    return value if isinstance(value, int) else 0


def _packed_ints(values: List[Value]) -> List[int]:
    """A repeated int64 field, packed or not."""
    out: List[int] = []
    for value in values:
        if isinstance(value, int):
            out.append(value)
            continue
        pos = 0
        while pos < len(value):
            number, pos = _varint(value, pos)
            out.append(number)
    return out


@dataclass
class XEvent:
    name: str
    offset_ps: int
    duration_ps: int
    stats: Dict[str, Union[int, float, str, bytes]]
    self_ps: int = 0  # duration less the events nested directly inside it on its line


@dataclass
class XLine:
    name: str
    events: List[XEvent]


@dataclass
class XPlane:
    name: str
    lines: List[XLine]
    # event metadata without events (JAX's metadata plane): name -> stats
    metadata: Dict[str, Dict[str, Union[int, float, str, bytes]]] = field(default_factory=dict)


def _stat_value(
    stat: Dict[int, List[Value]], stat_names: Dict[int, str]
) -> Union[int, float, str, bytes]:
    if STAT_STR in stat:
        return _text(stat, STAT_STR)
    if STAT_REF in stat:
        return stat_names.get(_int(stat, STAT_REF), "")
    if STAT_BYTES in stat:
        return stat[STAT_BYTES][0]
    if STAT_DOUBLE in stat:
        raw = stat[STAT_DOUBLE][0]
        return struct.unpack("<d", raw)[0] if isinstance(raw, bytes) else float(raw)
    if STAT_INT64 in stat:
        value = _int(stat, STAT_INT64)
        return value - (1 << 64) if value >= 1 << 63 else value  # two's complement
    return _int(stat, STAT_UINT64)


def _stats(
    values: List[Value], stat_names: Dict[int, str]
) -> Dict[str, Union[int, float, str, bytes]]:
    out = {}
    for raw in values:
        stat = _message(raw)
        out[stat_names.get(_int(stat, STAT_METADATA_ID), "?")] = _stat_value(stat, stat_names)
    return out


def _plane(raw: bytes) -> XPlane:
    fields = _message(raw)
    stat_names: Dict[int, str] = {}
    for entry in fields.get(PLANE_STAT_METADATA, []):
        value = _message(_message(entry).get(MAP_VALUE, [b""])[0])
        stat_names[_int(value, METADATA_ID)] = _text(value, METADATA_NAME)
    event_names: Dict[int, str] = {}
    event_stats: Dict[int, List[Value]] = {}
    for entry in fields.get(PLANE_EVENT_METADATA, []):
        value = _message(_message(entry).get(MAP_VALUE, [b""])[0])
        key = _int(value, METADATA_ID)
        event_names[key] = _text(value, METADATA_NAME)
        event_stats[key] = value.get(EVENT_METADATA_STATS, [])
    lines = []
    for raw_line in fields.get(PLANE_LINES, []):
        line = _message(raw_line)
        events = []
        for raw_event in line.get(LINE_EVENTS, []):
            event = _message(raw_event)
            key = _int(event, EVENT_METADATA_ID)
            stats = _stats(event_stats.get(key, []), stat_names)
            stats.update(_stats(event.get(EVENT_STATS, []), stat_names))
            events.append(
                XEvent(
                    name=event_names.get(key, "?"), offset_ps=_int(event, EVENT_OFFSET_PS),
                    duration_ps=_int(event, EVENT_DURATION_PS), stats=stats,
                )
            )  # fmt: skip
        _set_self_times(events)
        lines.append(XLine(name=_text(line, LINE_NAME), events=events))
    metadata = {}
    if not lines:
        metadata = {event_names[key]: _stats(event_stats[key], stat_names) for key in event_names}
    return XPlane(name=_text(fields, PLANE_NAME), lines=lines, metadata=metadata)


def _set_self_times(events: List[XEvent]) -> None:
    """Each event's time less that of the events nested directly inside it (one thread
    runs one thing at a time, so nesting is containment in time)."""
    stack: List[XEvent] = []
    for event in sorted(events, key=lambda e: (e.offset_ps, -e.duration_ps)):
        event.self_ps = event.duration_ps
        while stack and event.offset_ps >= stack[-1].offset_ps + stack[-1].duration_ps:
            stack.pop()
        if stack:
            stack[-1].self_ps -= event.duration_ps
        stack.append(event)


def read_xspace(path: Path) -> List[XPlane]:
    """The planes of an ``.xplane.pb`` file."""
    data = Path(path).read_bytes()
    try:
        return [
            _plane(raw) for raw in _message(data).get(XSPACE_PLANES, []) if isinstance(raw, bytes)
        ]
    except (IndexError, XSpaceError) as err:
        raise XSpaceError(f"{path}: not a readable XSpace profile ({err})") from err


def newest_xspace(directory: Path) -> Path:
    """The profile file a profiler session left under ``directory``."""
    found = sorted(Path(directory).rglob("*.xplane.pb"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise XSpaceError(f"the profiler wrote no *.xplane.pb under {directory}")
    return found[-1]


@dataclass(frozen=True)
class HloOp:
    path: str  # the JAX call path, "" where XLA dropped it (a rewritten fusion)
    opcode: str  # the instruction's opcode; for a fusion, its root's


def hlo_op_names(planes: List[XPlane]) -> Dict[Tuple[int, str], HloOp]:
    """(program id, HLO instruction) -> its JAX call path and opcode; a fusion without a
    path takes that of the last instruction it fuses with one, else its root's opcode."""
    names: Dict[Tuple[int, str], HloOp] = {}
    for plane in planes:
        for stats in plane.metadata.values():
            proto = stats.get("Hlo Proto")
            if not isinstance(proto, bytes):
                continue
            program = int(stats.get("program_id", 0))
            module = _message(_message(proto).get(HLO_PROTO_MODULE, [b""])[0])
            for name, op in _instruction_ops(module).items():
                names[(program, name)] = op
    return names


def _instruction_ops(module: Dict[int, List[Value]]) -> Dict[str, HloOp]:
    computations: Dict[int, List[Tuple[str, HloOp, List[int]]]] = {}
    for raw in module.get(MODULE_COMPUTATIONS, []):
        computation = _message(raw)
        instructions = []
        for raw_instruction in computation.get(COMPUTATION_INSTRUCTIONS, []):
            instruction = _message(raw_instruction)
            metadata = _message(instruction.get(INSTRUCTION_METADATA, [b""])[0])
            op = HloOp(_text(metadata, OP_METADATA_NAME), _text(instruction, INSTRUCTION_OPCODE))
            called = _packed_ints(instruction.get(INSTRUCTION_CALLED, []))
            instructions.append((_text(instruction, INSTRUCTION_NAME), op, called))
        computations[_int(computation, COMPUTATION_ID)] = instructions

    def fused(called: List[int], depth: int = 0) -> Optional[HloOp]:
        """The op standing for fused computations: the last with a path, else the root."""
        root = None
        for computation_id in called:
            # instructions are stored operands first, so the root comes last
            for _, op, inner in reversed(computations.get(computation_id, [])):
                found = op if op.path else (fused(inner, depth + 1) if depth < 4 else None)
                if found is not None and found.path:
                    return found
                if root is None and op.opcode != "parameter":
                    root = found or op
        return root

    ops: Dict[str, HloOp] = {}
    for instructions in computations.values():
        for name, op, called in instructions:
            if not op.path and called:
                inner = fused(called)
                if inner is not None:
                    op = inner if inner.path else HloOp("", inner.opcode)
            ops[name] = op
    return ops


def event_program(event: XEvent) -> Optional[int]:
    program = event.stats.get("program_id")
    return int(program) if isinstance(program, (int, float)) else None
