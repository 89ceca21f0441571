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
