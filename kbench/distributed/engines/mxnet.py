"""mxnet-sync / mxnet-async: MXNet's distributed KVStore (ps-lite), roles started directly.

The parent starts a scheduler, one server and the workers with ``DMLC_ROLE`` and the
``DMLC_*`` variables on the run's address (never MXNet's bundled ``launch.py``). A
scheduler or server only imports ``mxnet``, which serves until the workers are done
and then exits. Each worker creates the kvstore (``dist_sync``: the server sums the
workers' gradients and applies one update per step; ``dist_async``: it applies each
worker's gradients as they arrive) and the optimizer runs on the server.

kbench drives the kvstore itself, the same way for both backends: the optimizer is
set on the kvstore first (``dist_async`` requires it before any key exists), every
trainable parameter is initialised in one ``init`` (rank 0's values), rank 0 pulls
them back (so the server has stored them: MXNet's own per-key init can lose the race
to a fast worker's first pull and abort the server, "init N first", apache/mxnet#7893),
all workers meet at a barrier and pull the initial weights; then each step pushes
the gradients and pulls the updated weights. The optimizer is a plain
``mx.optimizer`` (Adam or SGD with the run's learning rate; keras-mxnet's own
optimizer classes are local to a function and cannot be pickled to the server); the
loss is the batch mean, so under ``dist_sync`` the summed gradients are rescaled by
1/workers.

- ``mxnet`` (keras-mxnet): keras-mxnet trains through an ``mx.mod`` module bound to the
  Keras model's symbols. kbench runs that module step by step as keras-mxnet's own
  train function does (forward, backward, then the BatchNorm statistics), with the
  module's gradient and parameter arrays exchanged through the kvstore in place of
  ``module.update()``. This uses keras-mxnet internals (``_adjust_module``,
  ``_module``, ``_update``, ``_train_updates``).
- ``mxnet-gluon``: the Gluon twin, forward and backward as the backend runs them, its
  parameters' gradients and data exchanged through the kvstore (no ``gluon.Trainer``).

Phases: data (gather, conversion to NDArrays), forward, backward, each ended by
``mx.nd.waitall()``; communication is the rest: the push, the update on the server,
the pull.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List

from kbench.backends.base import NativePort
from kbench.distributed.engines import Engine
from kbench.distributed.worker import Context, StepOut, build_model, host_loop, own_reply


class KVStoreSync(Engine):
    mode = "mxnet-sync"
    kv_type = "dist_sync"
    synchronous = True  # the server sums the workers' gradients: rescaled by 1/workers
    method = (
        "host clock per phase, each ended by mx.nd.waitall(); data includes the conversion "
        "to NDArrays; comm is the rest: push, the update on the server, pull"
    )
    keys: List[int] = []

    def serve(self, ctx: Context) -> None:
        import mxnet  # noqa: F401 - as DMLC_ROLE is scheduler or server, this serves, then exits

    def setup(self, ctx: Context) -> None:
        import mxnet as mx

        self.mx = mx
        self.kv = mx.kv.create(self.kv_type)
        if self.kv.num_workers != ctx.workers:
            raise RuntimeError(
                f"{self.mode}: the kvstore has {self.kv.num_workers} workers; the run asked "
                f"for {ctx.workers}"
            )

    def optimizer(self, ctx: Context, epsilon: float) -> Any:
        """A plain MXNet optimizer for the server, with the backend's settings."""
        rescale = 1.0 / ctx.workers if self.synchronous else 1.0
        lr = ctx.config["learning_rate"]
        if ctx.config["optimizer"] == "adam":
            return self.mx.optimizer.Adam(
                learning_rate=lr, beta1=0.9, beta2=0.999, epsilon=epsilon, rescale_grad=rescale
            )
        return self.mx.optimizer.SGD(learning_rate=lr, momentum=0.0, rescale_grad=rescale)

    def train(self, ctx: Context) -> Dict[str, Any]:
        model = build_model(ctx, compiled=True)
        if isinstance(ctx.backend, NativePort):  # mxnet-gluon: the Gluon twin
            convert, step = self._gluon(ctx, model)
        else:  # keras-mxnet: the Keras model's own module
            convert, step = self._keras(ctx, model)
        engine = {
            "kvstore": self.kv.type, "kvstore_rank": self.kv.rank,
            "num_workers": self.kv.num_workers, "keys": len(self.keys),
        }  # fmt: skip
        steps = host_loop(ctx, convert, step)
        return own_reply(
            ctx, model, steps, self.method, lambda x: ctx.backend.predict(model, x), engine
        )

    def share(self, optimizer: Any, params: List[Any]) -> None:
        """Put the parameters in the kvstore, rank 0's values, and start from them."""
        mx, kv = self.mx, self.kv
        kv.set_optimizer(optimizer)  # before any key: dist_async needs its updater
        self.keys = list(range(len(params)))
        # through plain copies: a Gluon weight that an inference-mode forward left in
        # MKL-DNN layout cannot go through the kvstore ("We can't generate TBlob for
        # MKLDNN data")
        staged = [mx.nd.array(p.asnumpy(), ctx=p.context, dtype=p.dtype) for p in params]
        kv.init(self.keys, staged)
        if kv.rank == 0:
            kv.pull(self.keys, out=staged)  # answered only once the server stored them
            mx.nd.waitall()
        kv._barrier()
        kv.pull(self.keys, out=staged)
        for param, value in zip(params, staged):
            param[:] = value
        mx.nd.waitall()

    def exchange(self, grads: List[Any], params: List[Any]) -> None:
        """Push the gradients; the server updates; pull the new weights."""
        self.kv.push(self.keys, grads)
        self.kv.pull(self.keys, out=params)
        self.mx.nd.waitall()

    def _keras(self, ctx: Context, model: Any):
        mx = self.mx
        model._kvstore = None  # the module updates nothing itself: kbench exchanges

        def convert(x, y):
            xs, ys, weights = model._standardize_user_data(x, y)
            ins = xs + ys + weights + ([1.0] if model._uses_dynamic_learning_phase() else [])
            data, label, _, data_shapes, label_shapes = model._adjust_module(ins, "train")
            batch = mx.io.DataBatch(
                data=data, label=label, bucket_key="train", provide_data=data_shapes,
                provide_label=label_shapes,
            )  # fmt: skip
            return (batch,)

        exchanged: Dict[str, List[Any]] = {}

        def step(batch) -> StepOut:
            module = model._module
            if not exchanged:  # the first batch bound the module: its arrays exist now
                group = module._curr_module._exec_group
                pairs = [
                    (p[0], g[0])
                    for p, g in zip(group.param_arrays, group.grad_arrays)
                    if g[0] is not None
                ]
                exchanged["params"] = [p for p, _ in pairs]
                exchanged["grads"] = [g for _, g in pairs]
                self.share(self.optimizer(ctx, epsilon=1e-8), exchanged["params"])
            begin = time.perf_counter()
            module.forward(batch, is_train=True)
            mx.nd.waitall()
            forwarded = time.perf_counter()
            module.backward()
            mx.nd.waitall()
            backwarded = time.perf_counter()
            self.exchange(exchanged["grads"], exchanged["params"])
            module._params_dirty = True  # get_params() reads the pulled weights
            model._update(model._train_updates)  # BatchNorm statistics, as keras-mxnet does
            model._weights_dirty = True
            outputs = module.get_outputs()[: model._ntrain]
            loss = float(outputs[0].asnumpy().mean())  # waits for the device
            accuracy = float(outputs[1].asnumpy().mean()) if len(outputs) > 1 else None
            return StepOut(
                loss=loss, forward=forwarded - begin, backward=backwarded - forwarded,
                hits=None if accuracy is None else accuracy * ctx.batch_size,
            )  # fmt: skip

        return convert, step

    def _gluon(self, ctx: Context, model: Any):
        mx, backend = self.mx, ctx.backend
        trained = [p for p in model.collect_params().values() if p.grad_req != "null"]
        params = [p.data(backend.context) for p in trained]
        grads = [p.grad(backend.context) for p in trained]
        self.share(self.optimizer(ctx, epsilon=1e-7), params)  # the backend's Keras epsilon

        def step(inputs, labels) -> StepOut:
            begin = time.perf_counter()
            with mx.autograd.record():
                probabilities = model(inputs)
                total = backend._loss(model, probabilities, labels)
                if model.kbench_penalties:
                    total = total + backend.twins.regularization_loss(model, model.kbench_penalties)
            mx.nd.waitall()
            forwarded = time.perf_counter()
            total.backward()
            mx.nd.waitall()
            backwarded = time.perf_counter()
            self.exchange(grads, params)
            loss = float(total.asscalar())
            hits = float(backend._hits(model, probabilities, labels).asscalar())
            return StepOut(
                loss=loss, forward=forwarded - begin, backward=backwarded - forwarded, hits=hits
            )

        return backend._arrays, step


class KVStoreAsync(KVStoreSync):
    mode = "mxnet-async"
    kv_type = "dist_async"
    synchronous = False
