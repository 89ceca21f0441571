"""jax: ``keras.distribution.DataParallel`` across processes joined by ``jax.distributed``.

Each process calls ``jax.distributed.initialize`` (the coordinator binds and
advertises the run's address; CPU collectives are gloo, the default of jaxlib
0.10) before Keras starts JAX, then sets ``DataParallel`` over every process's
devices with ``auto_shard_dataset=False`` and trains with Keras ``fit`` on its own
shard: Keras assembles each global batch from the processes' local batches
(``jax.make_array_from_process_local_data``), and the train step is one XLA program
(forward, backward, the gradient all-reduce, the update).

Because that program cannot be split, forward and backward are measured apart:
after training, each worker times a local single-device jitted forward and
forward-plus-gradients on its own batches (medians of a few calls, the model's
weight penalties left out); data is the time between steps inside ``fit`` (fetching
the next local batch from the shard and distributing it). Communication is the
rest of the step: the all-reduce, waiting for the other processes, the update.
Rank 0 evaluates the test set with the same local program.

One process on one device (``--workers 1`` on a CPU host) trains with plain Keras
``fit``, no distribution: over a one-device mesh Keras leaves the variables
uncommitted (their single-device placement already matches the replicated layout),
the first step's outputs come back committed, and the train step compiles a second
time on the second call, inside the measured window of a short warmup (seen with
Keras 3.15 and JAX 0.10). One device computes the same program either way.
"""

from __future__ import annotations

import time
from typing import Any, Dict, Optional, Tuple

import numpy as np

from kbench.distributed.engines import Engine
from kbench.distributed.worker import Context, StepLog, build_model, summarize, training_reply

PROBES = 5


class JaxDataParallel(Engine):
    mode = "jax"
    method = (
        "host clock around each step inside Keras fit (callbacks; the loss read waits for "
        "the device); data: time between steps inside fit; forward and backward: medians of "
        "local single-device jitted programs timed after training on the worker's batches; "
        "comm is the rest (all-reduce, waiting, update: one XLA program with the step)"
    )

    def before_start(self, ctx: Context) -> None:
        import jax

        address = ctx.dist["endpoints"]["coordinator_address"]
        port = address.rsplit(":", 1)[1]
        jax.distributed.initialize(
            coordinator_address=address, num_processes=ctx.workers, process_id=ctx.rank,
            coordinator_bind_address=f"{ctx.dist['endpoints']['bind']}:{port}",
            initialization_timeout=int(ctx.config["timeout_s"]),
        )  # fmt: skip
        self.jax = jax

    def setup(self, ctx: Context) -> None:
        keras = ctx.backend.keras
        devices = self.jax.devices()
        self.devices = [str(d) for d in devices]
        self.distribution = None  # one device: plain fit (see the module's docstring)
        if len(devices) > 1:
            self.distribution = keras.distribution.DataParallel(
                devices=devices, auto_shard_dataset=False
            )
            keras.distribution.set_distribution(self.distribution)

    def train(self, ctx: Context) -> Dict[str, Any]:
        model = build_model(ctx, compiled=True)
        shard = ctx.shard()
        log, accuracy = self.fit(ctx, model, shard)
        forward, backward, predict = self.calibrate(ctx, model, shard)
        log.forward = [forward] * len(log)
        log.backward = [backward] * len(log)
        distribution = "none (one device: plain Keras fit)"
        engine = {
            "devices": self.devices, "process_count": self.jax.process_count(),
            "distribution": distribution if self.distribution is None else "DataParallel",
            "calibration_probes": PROBES,
        }  # fmt: skip
        summary = summarize(ctx, log, self.method, final_train_accuracy=accuracy, engine=engine)
        return training_reply(ctx, model, [summary], predict)

    def fit(self, ctx: Context, model: Any, shard: np.ndarray) -> Tuple[StepLog, Optional[float]]:
        """Keras ``fit`` over this worker's shard, one epoch at a time, with a callback
        that clocks every step: the steps (data: the time between steps; no forward or
        backward yet) and the last training accuracy Keras reported."""
        keras = ctx.backend.keras
        x_train, y_train = ctx.arrays["x_train"], ctx.arrays["y_train"]
        log = StepLog(warmup_steps=ctx.warmup_steps)
        state = {"last_end": 0.0, "begin": 0.0, "accuracy": None}

        class Batches(keras.utils.PyDataset):
            def __init__(self, steps):
                super().__init__(workers=1, use_multiprocessing=False)
                self.steps = steps

            def __len__(self):
                return len(self.steps)

            def __getitem__(self, index):
                indices = shard[self.steps[index]]
                return x_train[indices], y_train[indices]

        class Clock(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                state["begin"] = time.perf_counter()

            def on_train_batch_end(self, batch, logs=None):
                loss = float(logs["loss"])  # waits for the device
                end = time.perf_counter()
                log.add(
                    log.wall(state["begin"]), log.wall(end),
                    data=state["begin"] - state["last_end"], forward=0.0, backward=0.0, loss=loss,
                )  # fmt: skip
                state["last_end"] = end
                if len(log) == 1:
                    ctx.progress("step", step=1, steps=len(shard))
                if logs.get("accuracy") is not None:
                    state["accuracy"] = float(logs["accuracy"])

        total, per_epoch = len(shard), ctx.steps_per_epoch
        for epoch, first in enumerate(range(0, total, per_epoch)):
            steps = list(range(first, min(first + per_epoch, total)))
            state["last_end"] = time.perf_counter()
            model.fit(Batches(steps), epochs=1, shuffle=False, verbose=0, callbacks=[Clock()])
            ctx.progress(
                "epoch", epoch=epoch + 1, epochs=-(-total // per_epoch), loss=log.losses[-1],
                seconds=log.ends[-1] - log.begins[first],
            )  # fmt: skip
        return log, state["accuracy"]

    def calibrate(self, ctx: Context, model: Any, shard: np.ndarray):
        """(forward s, backward s, predict) from local single-device programs on this
        worker's weights and batches."""
        jax = self.jax
        import jax.numpy as jnp

        keras = ctx.backend.keras
        device = jax.local_devices()[0]

        def local(variables):
            return [
                jax.device_put(np.asarray(v.value.addressable_data(0)), device) for v in variables
            ]

        trainable = local(model.trainable_variables)
        fixed = local(model.non_trainable_variables)
        loss_fn = keras.losses.get(ctx.loss)
        keras.distribution.set_distribution(None)  # the local programs use no mesh
        try:

            def loss_of(trainable, fixed, x, y):
                probabilities, _ = model.stateless_call(trainable, fixed, x, training=True)
                return jnp.mean(loss_fn(y, probabilities))

            forward = jax.jit(loss_of)
            gradients = jax.jit(jax.value_and_grad(loss_of))
            infer = jax.jit(lambda t, f, x: model.stateless_call(t, f, x, training=False)[0])
            x_train, y_train = ctx.arrays["x_train"], ctx.arrays["y_train"]
            times = {"forward": [], "gradients": []}
            for probe in range(PROBES + 1):  # the first call compiles
                indices = shard[probe % len(shard)]
                x = jax.device_put(x_train[indices], device)
                y = jax.device_put(y_train[indices], device)
                for name, fn in (("forward", forward), ("gradients", gradients)):
                    began = time.perf_counter()
                    jax.block_until_ready(fn(trainable, fixed, x, y))
                    if probe:
                        times[name].append(time.perf_counter() - began)
            forward_s = float(np.median(times["forward"]))
            backward_s = max(float(np.median(times["gradients"])) - forward_s, 0.0)

            def predict(x):
                return np.asarray(infer(trainable, fixed, jax.device_put(x, device)))

        finally:
            keras.distribution.set_distribution(self.distribution)
        return forward_s, backward_s, predict
