"""What every sampler source shares: how it says it cannot be read."""

from __future__ import annotations


class SourceUnavailable(RuntimeError):
    """A source cannot be read on this machine; the message says why."""


def error_text(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"
