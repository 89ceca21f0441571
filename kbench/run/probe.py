"""``python -m kbench.run.probe BACKEND FORMAT[,FORMAT...] [MODEL[:HxWxC[:CLASSES]] ...]``

Starts the backend as a worker would (in the first FORMAT) and prints one JSON line:
interpreter, Keras and framework versions, devices, and each MODEL's parameter count and
output shape, or the error that stopped it. With several formats the image models are
built in each in the same process (``models_by_format``); a sequence model only in the
first (``{"same_as": FORMAT}``: keras-mxnet's unrolled LSTMs took 30 of its 45 s per
format). Used through :func:`kbench.run.environments.probe`.
"""

from __future__ import annotations

import json
import platform
import sys
import traceback
from typing import Optional

from kbench.backends import load_backend
from kbench.measure.processes import usable_cores


def census(backend, models, data_format: str, built_in: Optional[str] = None):
    """{model: its size, or its error} in ``data_format`` (``built_in``: images only)."""
    import kbench_models

    built = {}
    for text in models:
        try:
            name, _, rest = text.partition(":")
            shape_text, _, classes = rest.partition(":")
            shape = tuple(int(d) for d in shape_text.split("x")) if shape_text else None
            spec = kbench_models.MODELS[name]
            if built_in and spec.input_kind != "image":
                built[text] = {"same_as": built_in}
                continue
            shape = shape or spec.input_shape
            if data_format == "channels_first" and spec.input_kind == "image":
                shape = (shape[-1],) + tuple(shape[:-1])
            with backend.initial_values_unused():  # a zoo model: only its size is read
                model = backend.build(name, shape, int(classes or spec.num_classes))
            built[text] = {
                "params": backend.count_params(model), "output_shape": backend.output_shape(model),
            }  # fmt: skip
        except Exception as err:  # report per model: one broken model must not hide others
            built[text] = {
                "error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc(),
            }  # fmt: skip
    return built


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    backend_name, formats, *models = argv
    data_format, *other_formats = dict.fromkeys(formats.split(","))  # each format once
    report = {
        "backend": backend_name, "python": platform.python_version(), "executable": sys.executable,
    }  # fmt: skip
    try:
        backend = load_backend(backend_name)(threads=usable_cores())
        backend.start(data_format)
        framework = backend.describe()
        report.update(ok=True, keras=framework.get("keras_version"), framework=framework)
        if models:
            report["models"] = census(backend, models, data_format)
            report["models_by_format"] = {data_format: report["models"]}
            keras = getattr(backend, "keras", None)  # Keras reads it as a layer is built
            if other_formats and keras is None:
                raise ValueError(
                    f"{backend.name} is not a Keras backend: it builds in one data format"
                )
            for other in other_formats:
                keras.backend.set_image_data_format(other)
                report["models_by_format"][other] = census(backend, models, other, data_format)
    except Exception as err:  # the report is the point: any failure is an answer
        report.update(ok=False, error=f"{type(err).__name__}: {err}")
    sys.stdout.write(json.dumps(report) + "\n")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
