"""Which processes a data-parallel run starts on this host, with which addresses and ports.

On one machine (the default) every process binds and advertises ``127.0.0.1`` and the
ports are free ones picked when the run starts. Across machines every host runs the
same ``kbench run`` command with the same flags and three variables set
(see docs/guides/distributed.md):

``KBENCH_DIST_HOSTS``
    the hosts' addresses, comma-separated, the same list on every host; the first one
    holds the coordinator (the torch rendezvous store, the JAX coordinator, the
    MXNet scheduler and server; tf-ps and tf-mirrored run on one host only)
``KBENCH_DIST_NODE``
    this host's index in that list
``KBENCH_DIST_PORT``
    the first of a block of ports, the same on every host (the block's size is
    :func:`ports_needed`); without it the run is refused, since hosts cannot agree on
    ports picked at random

and optionally ``KBENCH_DIST_IFNAME`` (the network interface gloo and ps-lite use,
``lo`` on one machine). Workers are split over the hosts in contiguous blocks of
ranks, the same number per host. :func:`plan` is pure: the tests check it without
starting anything.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

LOOPBACK = "127.0.0.1"

# role names of the processes a run may start
WORKER, SERVER, SCHEDULER, PS, CHIEF, LAUNCHER = (
    "worker", "server", "scheduler", "ps", "chief", "launcher",
)  # fmt: skip


class PlanError(ValueError):
    """The hosts, ports or worker count cannot make a run; the message says how to fix it."""


@dataclass(frozen=True)
class Cluster:
    """The hosts of a run and which one this is."""

    hosts: Tuple[str, ...] = (LOOPBACK,)
    node: int = 0
    base_port: Optional[int] = None  # None: free ports picked at run time (one host only)
    ifname: str = "lo"

    @classmethod
    def from_environment(cls, env: Mapping[str, str] = os.environ) -> Cluster:
        hosts_text = env.get("KBENCH_DIST_HOSTS", "").strip()
        if not hosts_text:
            return cls()
        hosts = tuple(h.strip() for h in hosts_text.split(",") if h.strip())
        node_text = env.get("KBENCH_DIST_NODE", "")
        port_text = env.get("KBENCH_DIST_PORT", "")
        try:
            node = int(node_text)
        except ValueError:
            raise PlanError(
                f"KBENCH_DIST_NODE: expected this host's index in KBENCH_DIST_HOSTS "
                f"(0 to {len(hosts) - 1}); received {node_text!r}."
            ) from None
        if not 0 <= node < len(hosts):
            raise PlanError(
                f"KBENCH_DIST_NODE: expected 0 to {len(hosts) - 1} for {len(hosts)} hosts; "
                f"received {node}."
            )
        try:
            port = int(port_text)
        except ValueError:
            port = None
        if len(hosts) > 1 and (port is None or not 1024 <= port <= 65000):
            raise PlanError(
                f"KBENCH_DIST_PORT: expected the first of a block of free ports, the same on "
                f"every host (1024 to 65000); received {port_text!r}."
            )
        return cls(
            hosts, node, port, env.get("KBENCH_DIST_IFNAME", "lo" if len(hosts) == 1 else "")
        )

    def ports(self, count: int) -> List[int]:
        """The run's ports: KBENCH_DIST_PORT and the ones after it, or free ones."""
        if self.base_port is None:
            return free_ports(count, self.address)
        return list(range(self.base_port, self.base_port + count))

    @property
    def address(self) -> str:
        """What this host binds and advertises."""
        return self.hosts[self.node]

    @property
    def coordinator(self) -> str:
        return self.hosts[0]

    def to_dict(self) -> Dict[str, object]:
        return {
            "hosts": list(self.hosts), "node": self.node, "base_port": self.base_port,
            "ifname": self.ifname,
        }  # fmt: skip


def ports_needed(mode: str, workers: int) -> int:
    """How many ports a mode uses: its block starts at KBENCH_DIST_PORT."""
    return {
        "tf-multiworker": workers,  # one gRPC server per worker
        "tf-ps": workers + 2,  # chief, parameter server, one per worker
    }.get(mode, 1)  # torch store, JAX coordinator, MXNet scheduler; tf-mirrored: unused


def free_ports(count: int, host: str = LOOPBACK) -> List[int]:
    """``count`` distinct ports nothing listens on now (bound, then released)."""
    sockets, ports = [], []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            sockets.append(sock)
            ports.append(sock.getsockname()[1])
    finally:
        for sock in sockets:
            sock.close()
    return ports


def worker_ranks(workers: int, hosts: int, node: int) -> range:
    """The global ranks of the workers that run on host ``node``."""
    if workers % hosts:
        raise PlanError(
            f"workers: expected a multiple of the {hosts} hosts in KBENCH_DIST_HOSTS, the "
            f"same number on each; received {workers}."
        )
    per_host = workers // hosts
    return range(node * per_host, (node + 1) * per_host)


@dataclass(frozen=True)
class Process:
    """One process to start: its role, its index in the role, its arguments and variables."""

    role: str
    rank: int
    args: Tuple[str, ...]  # after the interpreter
    env: Dict[str, str] = field(default_factory=dict)
    primary: bool = True  # the run is done when every primary process has exited cleanly
    worker_ranks: Tuple[int, ...] = ()  # the training workers it is, or starts
    pin: bool = False  # give it its own cores (it computes)
    stops_itself: bool = False  # a helper that exits by itself once the workers are done

    @property
    def name(self) -> str:
        return f"{self.role}{self.rank}"


@dataclass(frozen=True)
class Site:
    """What planning one mode's processes on this host starts from."""

    workers: int
    cluster: Cluster
    ports: Sequence[int]
    entry: Tuple[str, ...]  # the arguments after the interpreter: the worker module
    local: range  # the global ranks of this host's workers

    @property
    def hosts(self) -> Tuple[str, ...]:
        return self.cluster.hosts

    @property
    def coordinator(self) -> str:
        return self.cluster.coordinator

    def host_of(self, rank: int) -> str:
        return self.hosts[rank // (self.workers // len(self.hosts))]

    def one_host(self, refusal: str) -> None:
        """Refuse a mode that runs on one host only, saying what to do instead."""
        if len(self.hosts) > 1:
            raise PlanError(refusal)


def role_env(role: str, rank: int) -> Dict[str, str]:
    return {"KBENCH_DIST_ROLE": role, "KBENCH_DIST_RANK": str(rank)}


def plan(
    mode: str, workers: int, cluster: Cluster, ports: Sequence[int], run_json: str,
) -> Tuple[List[Process], Dict[str, object]]:  # fmt: skip
    """The processes to start on this host, and the endpoints every worker is told. Every
    process runs ``python -m kbench.distributed.worker RUN_JSON`` (torchrun runs it for
    torch-ddp) and learns its role and rank from ``KBENCH_DIST_ROLE`` and
    ``KBENCH_DIST_RANK`` (torchrun's ``RANK`` for torch-ddp)."""
    local = worker_ranks(workers, len(cluster.hosts), cluster.node)
    site = Site(workers, cluster, ports, ("-m", "kbench.distributed.worker", run_json), local)
    if mode not in PLANNERS:
        raise PlanError(f"distributed: no launcher for mode {mode!r}")
    endpoints: Dict[str, object] = {"coordinator": cluster.coordinator, "bind": cluster.address}
    return PLANNERS[mode](site, endpoints), endpoints


def _torch_ddp(site: Site, endpoints: Dict[str, object]) -> List[Process]:
    """torchrun, which starts this host's workers; its rendezvous store on the
    coordinator's port."""
    cluster, port = site.cluster, site.ports[0]
    endpoints["master"] = f"{site.coordinator}:{port}"
    args = (
        "-m", "torch.distributed.run", "--nnodes", str(len(site.hosts)), "--node-rank",
        str(cluster.node), "--nproc-per-node", str(len(site.local)), "--master-addr",
        site.coordinator, "--master-port", str(port), "--local-addr", cluster.address,
        "--max-restarts", "0", "--monitor-interval", "0.5", *site.entry,
    )  # fmt: skip
    return [
        Process(
            LAUNCHER, cluster.node, args, {"KBENCH_DIST_ROLE": WORKER},
            worker_ranks=tuple(site.local), pin=False,
        )
    ]  # fmt: skip


def _tf_multiworker(site: Site, endpoints: Dict[str, object]) -> List[Process]:
    """One worker per process, each with its gRPC port in ``TF_CONFIG``."""
    addresses = [f"{site.host_of(r)}:{site.ports[r]}" for r in range(site.workers)]
    endpoints["workers"] = addresses
    procs = []
    for rank in site.local:
        tf_config = {
            "cluster": {"worker": addresses}, "task": {"type": "worker", "index": rank},
        }  # fmt: skip
        env = dict(role_env(WORKER, rank), TF_CONFIG=json.dumps(tf_config))
        procs.append(Process(WORKER, rank, site.entry, env, worker_ranks=(rank,), pin=True))
    return procs


def _tf_ps(site: Site, endpoints: Dict[str, object]) -> List[Process]:
    """The parameter server, the worker servers, then the chief that schedules steps."""
    site.one_host(
        "tf-ps runs on one host here: a TensorFlow worker server never exits and "
        "cannot learn when the chief is done, so kbench on another host could not end "
        "its part of the run. Use tf-multiworker across hosts, or unset "
        "KBENCH_DIST_HOSTS."
    )
    coordinator, ports = site.coordinator, site.ports
    cluster_spec = {
        "chief": [f"{coordinator}:{ports[0]}"], "ps": [f"{coordinator}:{ports[1]}"],
        "worker": [f"{coordinator}:{ports[2 + r]}" for r in range(site.workers)],
    }  # fmt: skip
    endpoints["cluster"] = cluster_spec

    def tf_env(role: str, index: int) -> Dict[str, str]:
        config = {"cluster": cluster_spec, "task": {"type": role, "index": index}}
        return dict(role_env(role, index), TF_CONFIG=json.dumps(config))

    entry = site.entry
    procs = [Process(PS, 0, entry, tf_env(PS, 0), primary=False)]
    for rank in site.local:  # worker servers: they run the steps the chief schedules
        procs.append(
            Process(
                WORKER, rank, entry, tf_env(WORKER, rank), primary=False, worker_ranks=(rank,),
                pin=True,
            )
        )  # fmt: skip
    # last: it connects to the others; the run is done when it is
    procs.append(
        Process(CHIEF, 0, entry, tf_env(CHIEF, 0), worker_ranks=tuple(range(site.workers)))
    )
    return procs


def _tf_mirrored(site: Site, endpoints: Dict[str, object]) -> List[Process]:
    """One process that mirrors the model over this host's GPUs."""
    site.one_host(
        "tf-mirrored mirrors over one host's GPUs; it does not span hosts. Use "
        "tf-multiworker across hosts, or unset KBENCH_DIST_HOSTS."
    )
    workers = tuple(range(site.workers))
    return [Process(WORKER, 0, site.entry, role_env(WORKER, 0), worker_ranks=workers)]


def _jax(site: Site, endpoints: Dict[str, object]) -> List[Process]:
    """One worker per process; rank 0's host holds the coordinator."""
    endpoints["coordinator_address"] = f"{site.coordinator}:{site.ports[0]}"
    return [
        Process(WORKER, rank, site.entry, role_env(WORKER, rank), worker_ranks=(rank,), pin=True)
        for rank in site.local
    ]


def _mxnet(site: Site, endpoints: Dict[str, object]) -> List[Process]:
    """The ps-lite scheduler and server (on the coordinator's host), then the workers."""
    cluster, coordinator, port = site.cluster, site.coordinator, site.ports[0]
    dmlc = {
        "DMLC_PS_ROOT_URI": coordinator, "DMLC_PS_ROOT_PORT": str(port), "DMLC_NUM_SERVER": "1",
        "DMLC_NUM_WORKER": str(site.workers), "DMLC_NODE_HOST": cluster.address,
    }  # fmt: skip
    if cluster.ifname:
        dmlc["DMLC_INTERFACE"] = cluster.ifname
    endpoints["scheduler"] = f"{coordinator}:{port}"
    procs = []
    if cluster.node == 0:  # the coordinator's host
        for role in (SCHEDULER, SERVER):
            env = dict(dmlc, DMLC_ROLE=role, **role_env(role, 0))
            procs.append(Process(role, 0, site.entry, env, primary=False, stops_itself=True))
    for rank in site.local:
        env = dict(dmlc, DMLC_ROLE="worker", **role_env(WORKER, rank))
        procs.append(Process(WORKER, rank, site.entry, env, worker_ranks=(rank,), pin=True))
    return procs


# mode -> the processes of this host (and the endpoints they add)
PLANNERS: Dict[str, Callable[[Site, Dict[str, object]], List[Process]]] = {
    "torch-ddp": _torch_ddp, "tf-multiworker": _tf_multiworker, "tf-ps": _tf_ps,
    "tf-mirrored": _tf_mirrored, "jax": _jax, "mxnet-sync": _mxnet, "mxnet-async": _mxnet,
}  # fmt: skip
