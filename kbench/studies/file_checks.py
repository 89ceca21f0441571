"""Checks shared by the readers of sweep and study files: each raises ``fail(where,
message)`` (the reader's own error, naming the file) with what was expected, what was
received and, for a misspelt key, the closest known one."""

from __future__ import annotations

from typing import Any, Dict, Sequence

from kbench.results.config import did_you_mean


def expect_mapping(value: Any, where: str, expected: str, fail) -> Dict[str, Any]:
    """``value`` if it is a mapping, {} if absent; else ``fail`` saying ``expected``."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise fail(where, f"expected {expected}; received {type(value).__name__} {value!r}.")
    return value


def known_keys(section: Dict[str, Any], allowed: Sequence[str], prefix: str, fail) -> None:
    """Refuse a key of ``section`` that is not ``allowed``, naming the closest one."""
    for key in section:
        if key not in allowed:
            raise fail(
                f"{prefix}{key}",
                f"unknown key; expected one of: {', '.join(allowed)}."
                f"{did_you_mean(str(key), allowed)}",
            )


MAX_DEPTH = 32  # far deeper than any sweep or study; YAML nested past it is refused


def check_depth(document: Any, fail, limit: int = MAX_DEPTH) -> None:
    """Refuse a document nested deeper than ``limit`` (read without recursion, so that a
    file of 100,000 nested lists is an error that names the depth, not a crash)."""
    stack = [(document, 1, "")]
    while stack:
        value, depth, where = stack.pop()
        if depth > limit:
            raise fail(
                where,
                f"expected settings nested at most {limit} deep; this file nests deeper "
                "here. A study or sweep file is a few levels of mappings and lists: check "
                "the brackets.",
            )
        if isinstance(value, dict):
            stack += [(v, depth + 1, f"{where}.{k}" if where else str(k)) for k, v in value.items()]
        elif isinstance(value, list):
            stack += [(v, depth + 1, f"{where}[{i}]") for i, v in enumerate(value)]
