"""Data-parallel training on each framework's own engine (``--distributed MODE --workers N``).

=================  ==========================  =============================================
mode               backends                    engine
=================  ==========================  =============================================
``torch-ddp``      torch, torch-native         DistributedDataParallel, torchrun, gloo/NCCL
``tf-multiworker`` tensorflow                  MultiWorkerMirroredStrategy, TF_CONFIG
``tf-mirrored``    tensorflow                  MirroredStrategy over one host's GPUs
``tf-ps``          tensorflow                  ParameterServerStrategy + ClusterCoordinator
``jax``            jax                         keras.distribution.DataParallel, jax.distributed
``mxnet-sync``     mxnet, mxnet-gluon          KVStore dist_sync (ps-lite roles started here)
``mxnet-async``    mxnet, mxnet-gluon          KVStore dist_async
=================  ==========================  =============================================

``--batch-size`` is per worker; the global batch is batch size x workers. Every
worker trains on its own slice of each global step of the runner's seeded order.

Parent side: :mod:`~kbench.distributed.launcher` (start, watch, stop, one result, on
:mod:`kbench.run.engine`), :mod:`~kbench.distributed.plan` (processes, hosts, ports),
:mod:`~kbench.distributed.merge` (metrics, scaling, a run's row and log line; the tables
and figures are :mod:`kbench.views.distributed`'s).
Worker side: :mod:`~kbench.distributed.worker` (every process's entry point, its step
log: data, forward, backward, update, communication) and
:mod:`~kbench.distributed.engines` (one class per engine).

May import: kbench.run (its engine, protocol and worker, which the data-parallel worker
starts its backend and model with), kbench.results, kbench.backends, kbench.datasets,
kbench.measure, kbench_models.
"""
