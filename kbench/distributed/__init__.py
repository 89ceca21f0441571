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

Parent side: :mod:`~kbench.distributed.launcher` (start, watch, stop, one result),
:mod:`~kbench.distributed.plan` (processes, hosts, ports), :mod:`~kbench.distributed.sampling`
(every process sampled), :mod:`~kbench.distributed.merge` (metrics, scaling),
:mod:`~kbench.distributed.views` (tables and figures for the log, compare and report).
Worker side: :mod:`~kbench.distributed.worker` (every process's entry point) and
:mod:`~kbench.distributed.engines` (one class per engine); both sides share
:mod:`~kbench.distributed.breakdown` (data, forward, backward, update, communication).
"""

from __future__ import annotations

from typing import Any


def run_distributed(
    runner: Any, config: Any, data: Any, session_dir: Any, python_path: Any, sweep: Any = None
) -> Any:
    """See :func:`kbench.distributed.launcher.run_distributed`."""
    from kbench.distributed.launcher import run_distributed as run

    return run(runner, config, data, session_dir, python_path, sweep)
