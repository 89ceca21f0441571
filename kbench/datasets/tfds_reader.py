"""Read a prepared tensorflow-datasets data set into an ``.npz`` file (a child process).

``python -m kbench.datasets.tfds_reader NAME OUT.npz [BATCH]``: started by
:func:`kbench.datasets.sources.from_tfds` with every GPU hidden, so that TensorFlow,
which tensorflow-datasets imports, never starts in the long-lived parent. Exit code 0
and the arrays in ``OUT.npz`` (``x_train``, ``y_train``, ``x_test``, ``y_test``), or
exit code 1 and one line on stderr saying why.
"""

from __future__ import annotations

import sys
from typing import List, Optional

import numpy as np

from kbench.datasets.sources import read_tfds


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    name, out = argv[0], argv[1]
    batch = int(argv[2]) if len(argv) > 2 else 4096
    try:
        arrays = read_tfds(name, batch)
    except Exception as err:  # not installed, not prepared: the parent tries elsewhere
        message = " ".join(str(err).split())[:300]
        sys.stderr.write(f"{type(err).__name__}: {message}\n")
        return 1
    with open(out, "wb") as handle:
        np.savez(handle, **arrays)
    return 0


if __name__ == "__main__":
    sys.exit(main())
