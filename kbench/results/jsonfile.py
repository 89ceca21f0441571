"""JSON files written atomically: a reader sees the old file or the whole new one.

Standard library only: the workers import it under every backend's interpreter. No
file is written through a symbolic link (:func:`refuse_link`): a store received from
someone else may hold one planted to lead outside it (``compare.md -> ~/.bashrc``).
"""

from __future__ import annotations

import errno
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, List, Tuple


class LinkRefused(OSError):
    """A file kbench would write is a symbolic link; the message names it."""

    def __str__(self) -> str:
        return self.strerror


def refuse_link(path: Path) -> Path:
    """``path``, unless it is a symbolic link: then :class:`LinkRefused`, naming it."""
    if os.path.islink(path):
        raise LinkRefused(
            errno.ELOOP,
            f"{path} is a symbolic link (to {os.readlink(path)}): kbench writes no file "
            "through a link, which could lead outside the store. Remove the link (or "
            "choose another file) and run this again",
        )
    return Path(path)


def write_json_atomic(path: Path, data: Any, allow_nan: bool = True) -> None:
    """:func:`write_text_atomic` of JSON; a value JSON cannot hold (NaN with
    ``allow_nan=False``) raises before any file is touched."""
    write_text_atomic(path, json.dumps(data, indent=2, allow_nan=allow_nan) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) so that ``path`` holds either the old file or the whole
    new one: a temporary file beside it, synced, then renamed over it. Whatever goes
    wrong (a full disk), the temporary file is removed and ``path`` is untouched. A
    ``path`` that is a symbolic link is refused (:func:`refuse_link`)."""
    path = refuse_link(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; ours are ordinary files
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass  # already gone, or the file system refuses even that
        raise


def finite(data: Any, path: str = "") -> Tuple[Any, List[str]]:
    """``data`` with every NaN or infinity replaced by None, and the dotted paths of
    the values replaced (``metrics.final_train_loss``, ``metrics.losses[3]``)."""
    if isinstance(data, float) and not math.isfinite(data):
        return None, [path or "."]
    if isinstance(data, dict):
        out, where = {}, []
        for key, value in data.items():
            out[key], found = finite(value, f"{path}.{key}" if path else str(key))
            where += found
        return out, where
    if isinstance(data, (list, tuple)):
        items = [finite(value, f"{path}[{i}]") for i, value in enumerate(data)]
        return [v for v, _ in items], [p for _, found in items for p in found]
    return data, []


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def read_json(path: Path) -> Any:
    with open(path) as handle:
        return json.load(handle)
