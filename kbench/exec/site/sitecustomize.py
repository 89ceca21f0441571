"""Loaded by Python at start-up in a ``kbench exec`` child (this folder is first on
its PYTHONPATH): pins the process to the cores kbench was asked for, and, unless
``--no-instrument``, installs kbench's Keras instrumentation (kbench.exec.instrument).

kbench is imported from its own files, not through the links of the run's temporary
import folder (the mxnet environment has no kbench installed): a traceback through
kbench's wrapper then names a file that still exists after the run.

Whatever fails here is written to the events file and the script goes on; the
interpreter's own ``sitecustomize``, which this one shadows, runs afterwards.
"""


def _real_kbench() -> None:
    """Import ``kbench`` from the folder its link on the path points to."""
    import importlib.machinery
    import importlib.util
    import os
    import sys

    if "kbench" in sys.modules:
        return
    spec = importlib.machinery.PathFinder.find_spec("kbench")
    if spec is None or not spec.origin:
        return
    real = os.path.realpath(spec.origin)
    if real == spec.origin:
        return
    spec = importlib.util.spec_from_file_location(
        "kbench", real, submodule_search_locations=[os.path.dirname(real)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["kbench"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["kbench"]
        raise


def _kbench_start() -> None:
    import os

    try:
        _real_kbench()
        from kbench.exec import instrument

        instrument.start()
    except Exception as err:  # never stop the user's script
        path = os.environ.get("KBENCH_EVENTS")
        if path:
            import json
            import time

            text = f"{type(err).__name__}: {err}"
            event = {"event": "error", "t": time.time(), "where": "start-up", "message": text}
            with open(path, "a") as events:
                events.write(json.dumps(event) + "\n")


def _chain() -> None:
    """Run the sitecustomize this file shadows, if the interpreter has one."""
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_kbench_start()
_chain()
