"""TensorFlow's strategies with the Keras 3 model in a custom loop.

Keras 3 ``model.fit`` fails under MultiWorkerMirroredStrategy and
ParameterServerStrategy (kbench does not patch Keras), so every mode here runs the
model in its own loop: a ``tf.function`` around ``strategy.run`` of one replica step
(forward under a ``GradientTape``, the gradients, ``optimizer.apply_gradients``).
The replica step stamps ``tf.timestamp()`` inside the graph as its input is ready,
as the loss is computed and as the last gradient is, which splits forward from
backward; the Keras optimizer all-reduces (sums) the gradients and updates in
``apply_gradients``, so that exchange and the update are the communication part.
TensorFlow may start gradient ops before the loss op finishes; the split is where
the loss and the last gradient became available.

- ``tf-multiworker``: ``MultiWorkerMirroredStrategy`` from ``TF_CONFIG``, one worker
  per process, the loss scaled by the global batch (``tf.nn.compute_average_loss``).
- ``tf-mirrored``: ``MirroredStrategy`` over this host's GPUs in one process, one
  replica per worker; without that many GPUs the run is ``unsupported``.
- ``tf-ps``: ``ParameterServerStrategy``, asynchronous: the chief (coordinator)
  schedules steps with a ``ClusterCoordinator``; each worker server reads batches from
  its own shard file (``create_per_worker_dataset``, the worker's index picks the
  file) and every step's timestamps come back with its result. The variables live on
  one parameter server, so a worker's forward also reads them over the network.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import numpy as np

from kbench.distributed.engines import Engine
from kbench.distributed.worker import (
    Context,
    StepLog,
    StepOut,
    Unsupported,
    build_model,
    host_loop,
    own_reply,
    summarize,
    training_reply,
)

INTER_OP_MIN = 4
METHOD = (
    "in-graph tf.timestamp(): forward from the input being ready to the loss, backward to "
    "the last gradient; data is gathering the batch on the host{data}; comm is the rest "
    "(Keras' apply_gradients: the all-reduce and the update{extra})"
)


def replica_step(tf: Any, keras: Any, model: Any, optimizer: Any, loss: str, batch: int):
    """One replica's step: (mean loss, correct answers, t_input, t_loss, t_gradients). The
    loss is summed over the replica's examples and divided by ``batch`` (the global batch
    under a synchronous strategy): summed over replicas by the optimizer's all-reduce, the
    gradient is that of the global batch's mean."""
    loss_fn = keras.losses.get(loss)
    binary = loss == "binary_crossentropy"

    def step(x, y):
        with tf.control_dependencies([x, y]):
            t_input = tf.timestamp()
        with tf.GradientTape() as tape:
            probabilities = model(x, training=True)
            per_example = loss_fn(y, probabilities)
            scaled = tf.nn.compute_average_loss(per_example, global_batch_size=batch)
            penalty = tf.add_n(model.losses) if model.losses else tf.constant(0.0)
            scaled += tf.nn.scale_regularization_loss(penalty)
        with tf.control_dependencies([scaled]):
            t_loss = tf.timestamp()
        variables = model.trainable_variables
        grads = tape.gradient(scaled, variables)
        with tf.control_dependencies([g for g in grads if g is not None]):
            t_grads = tf.timestamp()
        optimizer.apply_gradients(zip(grads, variables))
        if binary:
            guess = tf.cast(probabilities > 0.5, y.dtype)
            hits = tf.reduce_sum(
                tf.cast(tf.equal(guess, tf.reshape(y, tf.shape(guess))), tf.float32)
            )
        else:
            guess = tf.argmax(probabilities, axis=-1, output_type=tf.int64)
            hits = tf.reduce_sum(
                tf.cast(tf.equal(guess, tf.cast(tf.reshape(y, [-1]), tf.int64)), tf.float32)
            )
        return tf.reduce_mean(per_example) + penalty, hits, t_input, t_loss, t_grads

    return step


def build_under(strategy: Any, ctx: Context) -> Tuple[Any, Any]:
    """The model and its optimizer, created under ``strategy``'s scope."""
    with strategy.scope():
        model = build_model(ctx)
        optimizer = ctx.backend.make_optimizer(ctx.config["optimizer"], ctx.config["learning_rate"])
        # its slots now, under the strategy, not lazily inside the traced step
        optimizer.build(model.trainable_variables)
    return model, optimizer


def predictor(tf: Any, model: Any) -> Callable[[np.ndarray], np.ndarray]:
    """The model's probabilities for a batch of inputs, in a ``tf.function``."""
    call = tf.function(lambda x: model(x, training=False))
    return lambda x: call(tf.constant(x)).numpy()


class MultiWorker(Engine):
    mode = "tf-multiworker"
    method = METHOD.format(data=" and converting it to tensors", extra="")

    def make_strategy(self, ctx: Context) -> Any:
        import tensorflow as tf

        return tf.distribute.MultiWorkerMirroredStrategy()

    def setup(self, ctx: Context) -> None:
        import tensorflow as tf

        self.tf = tf
        # created before any TensorFlow op runs, as collective ops require
        self.strategy = self.make_strategy(ctx)
        replicas = self.strategy.num_replicas_in_sync
        if replicas != ctx.workers:
            raise RuntimeError(
                f"{self.mode}: the strategy has {replicas} replicas; the run asked for "
                f"{ctx.workers} workers"
            )

    def build(self, ctx: Context) -> Tuple[Any, Any]:
        """The model, and one step of every replica in a ``tf.function``: its outputs
        per replica (mean loss, correct answers, the in-graph stamps)."""
        tf, strategy = self.tf, self.strategy
        model, optimizer = build_under(strategy, ctx)
        replica = replica_step(tf, ctx.backend.keras, model, optimizer, ctx.loss, ctx.global_batch)

        @tf.function
        def distributed_step(x, y):
            return strategy.run(replica, args=(x, y))

        return model, distributed_step

    def train(self, ctx: Context) -> Dict[str, Any]:
        tf, strategy = self.tf, self.strategy
        model, distributed_step = self.build(ctx)

        def step(x, y) -> StepOut:
            outputs = distributed_step(x, y)  # returns when the whole step is done
            loss, hits, t_input, t_loss, t_grads = (
                float(strategy.experimental_local_results(o)[0].numpy()) for o in outputs
            )
            return StepOut(
                loss=loss, forward=t_loss - t_input, backward=t_grads - t_loss, hits=hits
            )

        steps = host_loop(ctx, lambda x, y: (tf.constant(x), tf.constant(y)), step)
        engine = {
            "strategy": type(strategy).__name__, "replicas_in_sync": strategy.num_replicas_in_sync,
        }  # fmt: skip
        return own_reply(ctx, model, steps, self.method, predictor(tf, model), engine)

    def finish(self, ctx: Context) -> None:
        # the other workers wait here while rank 0 evaluates: no worker leaves early
        tf, strategy = self.tf, self.strategy

        @tf.function
        def barrier():
            ones = strategy.run(lambda: tf.constant(1.0))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, ones, axis=None)

        barrier()


class Mirrored(MultiWorker):
    """One process, one replica per GPU; ``workers`` is the number of GPUs mirrored."""

    mode = "tf-mirrored"
    method = METHOD.format(data=" (all replicas' batches, one process)", extra="")

    def make_strategy(self, ctx: Context) -> Any:
        import tensorflow as tf

        gpus = tf.config.list_logical_devices("GPU")
        if len(gpus) < ctx.workers:
            raise Unsupported(
                f"tf-mirrored mirrors the model over one host's GPUs, one replica per worker: "
                f"--workers {ctx.workers} needs {ctx.workers} GPUs and TensorFlow sees "
                f"{len(gpus)} here. Use tf-multiworker for CPU workers."
            )
        return tf.distribute.MirroredStrategy(devices=[g.name for g in gpus[: ctx.workers]])

    def train(self, ctx: Context) -> Dict[str, Any]:
        tf, strategy = self.tf, self.strategy
        model, distributed_step = self.build(ctx)
        shards = [ctx.shard(r) for r in range(ctx.workers)]
        x_train, y_train = ctx.arrays["x_train"], ctx.arrays["y_train"]
        logs = [StepLog(warmup_steps=ctx.warmup_steps) for _ in shards]
        for index in range(len(shards[0])):
            begin = time.perf_counter()
            xs = [tf.constant(x_train[s[index]]) for s in shards]
            ys = [tf.constant(y_train[s[index]]) for s in shards]
            x = strategy.experimental_distribute_values_from_function(
                lambda c, xs=xs: xs[c.replica_id_in_sync_group]
            )
            y = strategy.experimental_distribute_values_from_function(
                lambda c, ys=ys: ys[c.replica_id_in_sync_group]
            )
            loaded = time.perf_counter()
            outputs = [strategy.experimental_local_results(o) for o in distributed_step(x, y)]
            values = [[float(v.numpy()) for v in per_replica] for per_replica in outputs]
            end = time.perf_counter()
            for r, log in enumerate(logs):
                loss, hits, t_input, t_loss, t_grads = (v[r] for v in values)
                log.add(
                    log.wall(begin), log.wall(end), data=loaded - begin, forward=t_loss - t_input,
                    backward=t_grads - t_loss, loss=loss, hits=hits,
                )  # fmt: skip
        workers = [
            summarize(ctx, log, self.method, rank=r, engine={"replica": r})
            for r, log in enumerate(logs)
        ]
        return training_reply(ctx, model, workers, predictor(tf, model))  # one process: leader

    def finish(self, ctx: Context) -> None:
        pass


class ParameterServer(Engine):
    mode = "tf-ps"
    method = METHOD.format(
        data=" (here: inside the worker's graph, next() on its own shard's dataset)",
        extra=" on the parameter server; steps are asynchronous",
    ).replace("data is gathering the batch on the host", "data is reading the next batch")

    def trains(self, role: str) -> bool:
        return role == "chief"

    def serve(self, ctx: Context) -> None:
        """A worker server (it computes the steps the chief schedules) or the parameter
        server; it runs until the parent stops it."""
        import tensorflow as tf

        from kbench.distributed.worker import pin_cores

        if ctx.role == "worker":
            pin_cores(ctx.dist, ctx.local_index)
        threads = int(ctx.dist["threads_per_worker"])
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        # at least INTER_OP_MIN inter-op threads: with one (TensorFlow's default on a worker
        # pinned to one core) a step that waits on the parameter server deadlocks
        config = tf.compat.v1.ConfigProto(
            intra_op_parallelism_threads=threads,
            inter_op_parallelism_threads=max(threads, INTER_OP_MIN),
        )
        server = tf.distribute.Server(
            resolver.cluster_spec(), job_name=ctx.role, task_index=ctx.rank, protocol="grpc",
            config=config, start=True,
        )  # fmt: skip
        server.join()

    def setup(self, ctx: Context) -> None:
        import tensorflow as tf

        self.tf = tf
        # the chief's session config travels to the workers: one inter-op thread (what
        # --threads 1 sets) deadlocks a step that waits on the parameter server
        tf.config.threading.set_inter_op_parallelism_threads(0)
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        self.strategy = tf.distribute.ParameterServerStrategy(resolver)
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(self.strategy)

    def write_shards(self, ctx: Context) -> Path:
        """Each worker's samples in its step order, raw, for its dataset to read."""
        directory = Path(ctx.dist["run_dir"]) / "tf-ps-shards"
        directory.mkdir(parents=True, exist_ok=True)
        x_train, y_train = ctx.arrays["x_train"], ctx.arrays["y_train"]
        for rank in range(ctx.workers):
            indices = ctx.shard(rank).reshape(-1)
            np.ascontiguousarray(x_train[indices]).tofile(directory / f"{rank}.x")
            np.ascontiguousarray(y_train[indices]).tofile(directory / f"{rank}.y")
        return directory

    def train(self, ctx: Context) -> Dict[str, Any]:
        tf = self.tf
        directory = self.write_shards(ctx)
        model, optimizer = build_under(self.strategy, ctx)
        replica = replica_step(tf, ctx.backend.keras, model, optimizer, ctx.loss, ctx.batch_size)
        dataset = self.coordinator.create_per_worker_dataset(self.dataset_fn(ctx, directory))
        rows = self.run_steps(ctx, self.step_fn(model, replica), iter(dataset))
        workers, idle = self.summaries(ctx, step_logs(ctx, rows))
        # the chief is the leader: it evaluates
        return training_reply(ctx, model, workers, predictor(tf, model), idle_workers=idle)

    def dataset_fn(self, ctx: Context, directory: Path) -> Callable[[], Any]:
        """Each worker server's dataset: batches of its own shard file, round and round
        (a worker faster than the others may take more steps)."""
        tf, batch = self.tf, ctx.batch_size
        x_dtype = tf.as_dtype(ctx.arrays["x_train"].dtype)
        y_dtype = tf.as_dtype(ctx.arrays["y_train"].dtype)
        x_shape = [-1, *ctx.input_shape]
        y_shape = [-1, *ctx.arrays["y_train"].shape[1:]]

        def dataset_fn():
            index = tf.distribute.coordinator.experimental_get_current_worker_index()
            prefix = tf.strings.join([str(directory) + "/", tf.strings.as_string(index)])
            x = tf.reshape(tf.io.decode_raw(tf.io.read_file(prefix + ".x"), x_dtype), x_shape)
            y = tf.reshape(tf.io.decode_raw(tf.io.read_file(prefix + ".y"), y_dtype), y_shape)
            return (
                tf.data.Dataset.from_tensor_slices((x, y))
                .batch(batch, drop_remainder=True)
                .repeat()
            )

        return dataset_fn

    def step_fn(self, model: Any, replica: Callable) -> Any:
        """One scheduled step on a worker server: its outputs and in-graph stamps, and
        the index of the worker that ran it."""
        tf, strategy = self.tf, self.strategy

        @tf.function
        def step(iterator):
            t_begin = tf.timestamp()
            x, y = next(iterator)
            with tf.control_dependencies([x, y]):
                t_data = tf.timestamp()
            loss, hits, t_input, t_loss, t_grads = strategy.run(replica, args=(x, y))
            # after every variable has its update on the parameter server
            reads = [v.value.read_value() for v in model.trainable_variables]
            with tf.control_dependencies(reads + [t_grads]):
                t_end = tf.timestamp()
            worker = tf.distribute.coordinator.experimental_get_current_worker_index()
            return loss, hits, t_begin, t_data, t_loss, t_grads, t_end, worker

        return step

    def run_steps(self, ctx: Context, step: Any, iterator: Any) -> List[List[float]]:
        """Schedule every worker's steps and wait for them all: one row of
        :meth:`step_fn`'s outputs per step."""
        coordinator = self.coordinator
        total = ctx.workers * len(ctx.shard(0))
        started = time.perf_counter()
        results = [coordinator.schedule(step, args=(iterator,)) for _ in range(total)]
        results[0].fetch()  # waits for the first step only; the others run on
        ctx.progress("step", step=1, steps=total)
        coordinator.join()
        ctx.timings["coordinator_wall_s"] = time.perf_counter() - started
        return [[np.asarray(v).item() for v in r.fetch()] for r in results]

    def summaries(
        self, ctx: Context, logs: Dict[int, StepLog]
    ) -> Tuple[List[Dict[str, Any]], Dict[str, int]]:
        """Each worker's summary, and the workers that took no measured step (with the
        steps they took): the chief measured them all."""
        summaries: List[Dict[str, Any]] = []
        idle = {}
        for rank in range(ctx.workers):
            log = logs.get(rank)
            if log is None or len(log) <= ctx.warmup_steps:
                idle[str(rank)] = 0 if log is None else len(log)
                continue
            host = ctx.dist["endpoints"]["cluster"]["worker"][rank].rsplit(":", 1)[0]
            summaries.append(
                summarize(
                    ctx, log, self.method, rank=rank, host=host, pid=None, memory=[],
                    time_to_first_step_s=log.ends[0] - ctx.task.started_at,
                    engine={"steps_taken": len(log), "asynchronous": True},
                )
            )  # fmt: skip
        return summaries, idle


def step_logs(ctx: Context, rows: List[List[float]]) -> Dict[int, StepLog]:
    """The scheduled steps' rows as each worker's step log, in the order they began."""
    logs: Dict[int, StepLog] = {}
    for loss, hits, t_begin, t_data, t_loss, t_grads, t_end, worker in sorted(
        rows, key=lambda row: row[2]
    ):
        log = logs.setdefault(int(worker), StepLog(warmup_steps=ctx.warmup_steps))
        log.add(
            t_begin, t_end, data=t_data - t_begin, forward=t_loss - t_data,
            backward=t_grads - t_loss, loss=loss, hits=hits,
        )  # fmt: skip
    return logs
