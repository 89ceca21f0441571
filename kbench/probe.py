"""``python -m kbench.probe BACKEND``: can this interpreter run BACKEND? (for ``kbench env``)

Starts the backend exactly as a worker would (threads, Keras import, backend and
format check) and prints one JSON line: interpreter, Keras and framework versions,
devices; or the error that stopped it.
"""

from __future__ import annotations

import json
import os
import platform
import sys

from kbench.backends import load_backend


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    backend_name, data_format = argv
    report = {
        "backend": backend_name,
        "python": platform.python_version(),
        "executable": sys.executable,
    }
    try:
        backend = load_backend(backend_name)(threads=os.cpu_count() or 1)
        keras = backend.start(data_format)
        report.update(ok=True, keras=keras.__version__, framework=backend.framework_info())
    except Exception as err:  # the report is the point: any failure is an answer
        report.update(ok=False, error=f"{type(err).__name__}: {err}")
    sys.stdout.write(json.dumps(report) + "\n")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
