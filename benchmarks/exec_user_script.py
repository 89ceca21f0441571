"""A plain user training script, as ``benchmarks/exec_vs_run.py`` runs it under
``kbench exec``: a zoo model trained with one ``model.fit`` on synthetic arrays, the
same shapes, batch and step count as the ``kbench run`` it is compared with. It knows
nothing of kbench beyond borrowing the model's definition.

usage: python exec_user_script.py MODEL BATCH STEPS
"""

import sys

import keras
import numpy as np

import kbench_models

name, batch, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
spec = kbench_models.spec_for(name)
height, width, channels = spec.input_shape
shape = (height, width, channels)
if keras.backend.image_data_format() == "channels_first":
    shape = (channels, height, width)
rng = np.random.RandomState(0)
x = rng.rand(batch * steps, *shape).astype("float32")
y = rng.randint(0, spec.num_classes, size=batch * steps)
model = kbench_models.build(name, shape, spec.num_classes)
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
print("trained", name, "on", keras.backend.backend())
