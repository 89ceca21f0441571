"""What the readers of sweep and study files share: reading the YAML, and checks that
each raise ``fail(where, message)`` (the reader's own error, naming the file) with what
was expected, what was received and, for a misspelt key, the closest known one."""

from __future__ import annotations

import functools
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


class NestedTooDeep(ValueError):
    """YAML nested deeper than a YAML reader follows (hundreds of levels or more)."""

    def __init__(self) -> None:
        super().__init__(
            "expected a few levels of mappings and lists; the YAML is nested too deep to "
            "read (hundreds of levels or more). Check the brackets."
        )


def read_yaml(text: str) -> Any:
    """The document in the YAML ``text``, read by libyaml where PyYAML was built with a
    libyaml that stops at a nesting limit (about five times faster than PyYAML's own
    reader, which took most of the time to plan a study's sweep). A document that does
    not parse is read again by PyYAML's own reader, whose error quotes the line with a
    caret under the fault. libyaml accepts some tabs PyYAML's own reader refuses (``a:\t1``);
    a document both accept means the same to both. Raises ``yaml.YAMLError``, or
    :class:`NestedTooDeep`."""
    import yaml

    fast = _bounded(getattr(yaml, "CSafeLoader", None))
    if fast is not None:
        try:
            return yaml.load(text, Loader=fast)
        except yaml.YAMLError as err:
            if "nesting" in str(err):
                raise NestedTooDeep() from None
            # else read again below, for the message
        except RecursionError:  # building it: a chain of ``<<:`` merges, ~1,000 deep
            raise NestedTooDeep() from None
    try:
        return yaml.load(text, Loader=yaml.SafeLoader)
    except RecursionError:
        raise NestedTooDeep() from None


@functools.cache
def _bounded(libyaml_loader: Any) -> Any:
    """PyYAML's libyaml loader if it refuses YAML nested past a limit (libyaml 0.2.6
    stops at 1,000 levels), else None: an older libyaml follows any depth, and PyYAML's
    C code under it recurses without a guard, so a file of 100,000 brackets would crash
    the process instead of being refused."""
    import yaml

    if libyaml_loader is None:
        return None
    try:
        yaml.load("[" * 1100 + "]" * 1100, Loader=libyaml_loader)
    except yaml.YAMLError as err:
        return libyaml_loader if "nesting" in str(err) else None
    return None


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
