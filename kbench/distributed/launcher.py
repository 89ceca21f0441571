"""Parent side of a data-parallel run: start every process, watch them, build one result.

:func:`run_distributed` (what :meth:`kbench.run.runner.Runner.run_one` delegates to) draws
the runner's seeded batch order at the global batch and cuts every global step into one
slice per worker (``shards.npy``), plans the mode's processes (:mod:`kbench.distributed.plan`),
starts each on the engine (:class:`kbench.run.engine.Worker`), samples them all with one
:class:`~kbench.measure.sampler.Sampler`, and watches them: the run is over when every
primary process (the workers, torchrun, the TensorFlow chief) has exited cleanly; it has
failed as soon as any process exits with an error or dies, reports an error (even if its
framework then hangs in its exit), or a worker torchrun started vanishes without a reply;
it times out at ``config.timeout_s``. Then every process it started, and anything still
running whose command line names the run's directory, is stopped, and the replies are
merged into one result (kind ``train``). A SIGTERM to kbench stops the run the same way;
if kbench is killed outright, every worker notices within a second (``KBENCH_DIST_PARENT``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import psutil

from kbench import datasets
from kbench.backends.switches import SWITCHES
from kbench.distributed import merge
from kbench.distributed.plan import Cluster, PlanError, Process, plan, ports_needed
from kbench.measure import processes, sysinfo
from kbench.measure.processes import alive, interrupt_on_sigterm
from kbench.measure.sampler import Sampler
from kbench.results import ending
from kbench.results.config import RunConfig, file_safe
from kbench.results.jsonfile import read_json, write_json_atomic
from kbench.results.result import RunResult
from kbench.results.store import ResultStore, host_of, open_log
from kbench.run import environments, leftovers
from kbench.run.engine import LogWriter, Outcome, Worker
from kbench.run.metrics import add_sampled, compute_rate
from kbench.run.protocol import WorkerReply, WorkerTask
from kbench.run.runner import batch_order

log = logging.getLogger(__name__)

POLL_S = 0.1
KILL_GRACE_S = 5.0
FAILED_GRACE_S = 2.0
HELPER_GRACE_S = 10.0  # MXNet's scheduler and server leave by themselves after the workers


def run_distributed(
    runner: Any, config: RunConfig, data: datasets.PreparedData, session_dir: Path,
    python_path: Path, sweep: Optional[Dict[str, Any]] = None,
) -> RunResult:  # fmt: skip
    """Run ``config`` on its mode's engine; save and return its result."""
    run_id = ending.new_run_id(
        config.backend, file_safe(config.model), f"{config.distributed}x{config.workers}"
    )
    run_dir = session_dir / run_id
    for sub in ("procs", "replies"):
        (run_dir / sub).mkdir(parents=True)
    begun = Begun(
        run_id, config, data, time.time(), environments.interpreter_for(config.backend), sweep
    )
    store = ResultStore(runner.output_dir)
    refused = preflight(config)
    if refused:
        return save(begun.result(ending.Verdict("unsupported", refused, None)), store, config)
    try:
        launch = prepare(begun, run_dir, python_path)
    except PlanError as err:
        return save(begun.result(ending.Verdict("failed", str(err), None)), store, config)
    log_path = open_log(Path(runner.output_dir), run_id)  # a store that cannot take it: stop
    job = Job(
        launch.procs, begun.interpreter, launch.env, run_dir, log_path, config,
        runner.on_progress, runner.nvml,
    )  # fmt: skip
    try:
        outcome = job.run()
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: say so beside the log, then stop
        leftovers.write_interrupted(log_path, run_id, config, begun.started_at, sweep)
        raise
    ended_at = time.time()
    found = {p.stem: reply_in(p) for p in sorted((run_dir / "replies").glob("*.json"))}
    replies = {name: reply for name, reply in found.items() if reply is not None}
    result = finish(begun, launch, outcome, replies, ended_at, runner.busy_threshold)
    if result.ok:
        result.metrics["distributed"]["scaling"] = merge.scaling(
            config, result.metrics["images_per_sec"], store, host_of(result)
        )
        log.info("%s", merge.breakdown_line(result))
    return save(result, store, config)


@dataclass(frozen=True)
class Begun:
    """A run as far as every one of its endings records it, however far it got."""

    run_id: str
    config: RunConfig
    data: datasets.PreparedData
    started_at: float
    interpreter: Path
    sweep: Optional[Dict[str, Any]]

    def result(
        self, verdict: ending.Verdict, ended_at: Optional[float] = None, *,
        metrics: Optional[Dict[str, Any]] = None, sampler: Optional[Dict[str, Any]] = None,
        leader: Optional[Dict[str, Any]] = None, process_env: Optional[Dict[str, str]] = None,
        keras_json: Optional[Dict[str, Any]] = None,
    ) -> RunResult:  # fmt: skip
        """The run's result (kind ``train``), ending now unless ``ended_at`` says when;
        ``leader``: the reply of the process that evaluated (its model and framework)."""
        leader = leader or {}
        return ending.run_result(
            run_id=self.run_id, kind="train", config=self.config.to_dict(), verdict=verdict,
            started_at=self.started_at, ended_at=time.time() if ended_at is None else ended_at,
            environment=ending.environment(
                self.interpreter, process_env, keras_json, leader.get("framework", {})
            ),
            data=self.data.describe(), model=leader.get("model", {}), metrics=metrics,
            sampler=sampler, sweep=self.sweep,
        )  # fmt: skip


@dataclass(frozen=True)
class Launch:
    """What a run starts: its processes, with the endpoints and ports they are told, the
    shards they train on, each training process's threads and cores, their variables."""

    cluster: Cluster
    ports: List[int]
    procs: List[Process]
    endpoints: Dict[str, Any]
    shards: np.ndarray  # (workers, steps, batch)
    pass_length: int  # positions of the global order per pass over the data
    local_trainers: int  # processes that compute on this host
    threads: int
    cores: List[List[int]]
    env: Dict[str, str]
    keras_json: Dict[str, Any]


def prepare(begun: Begun, run_dir: Path, python_path: Path) -> Launch:
    """Plan the processes (:class:`PlanError` if the hosts and ports cannot make the
    run), cut and save the shards, and write ``run.json`` that every process reads."""
    config, data = begun.config, begun.data
    cluster = Cluster.from_environment()
    ports = cluster.ports(ports_needed(config.distributed, config.workers))
    procs, endpoints = plan(
        config.distributed, config.workers, cluster, ports, str(run_dir / "run.json")
    )
    # the order every worker's shard comes from: the runner's, at the global batch
    order = batch_order(config, data.train_samples, config.batch_size * config.workers)
    shards = cut_shards(order, config.workers, config.batch_size)
    np.save(run_dir / "shards.npy", shards)
    # the processes that compute on this host (torchrun's workers counted through it)
    trainers = sum(len(p.worker_ranks) if p.role == "launcher" else 1
                   for p in procs if p.pin or p.role == "launcher") or 1  # fmt: skip
    threads, cores = core_layout(config, trainers)
    env, keras_json = environments.process_environment(
        config.backend, run_dir, python_path, threads, config.data_format, config.device
    )
    if cluster.ifname:
        env["GLOO_SOCKET_IFNAME"] = cluster.ifname
    env["KBENCH_DIST_MODE"] = config.distributed
    env["KBENCH_DIST_PARENT"] = str(os.getpid())  # workers end if this process is killed
    launch = Launch(
        cluster, ports, procs, endpoints, shards,
        pass_length=order.shape[1] if config.steps is None else data.train_samples,
        local_trainers=trainers, threads=threads, cores=cores, env=env, keras_json=keras_json,
    )  # fmt: skip
    # run.json: the worker task every process reads, and the run's distributed facts
    per_epoch = shards.shape[1] // (config.epochs or 1) if config.steps is None else shards.shape[1]
    dist = {
        "mode": config.distributed, "workers": config.workers, "steps_per_epoch": int(per_epoch),
        "shards_path": str(run_dir / "shards.npy"), "procs_dir": str(run_dir / "procs"),
        "replies_dir": str(run_dir / "replies"), "run_dir": str(run_dir), "endpoints": endpoints,
        "cluster": cluster.to_dict(), "cores": cores, "pin_workers": bool(cores),
        "threads_per_worker": threads,
    }  # fmt: skip
    task = WorkerTask(
        config=config.to_dict() | {"threads": threads}, data=data.to_dict(),
        order_path=str(run_dir / "shards.npy"), data_format=keras_json["image_data_format"],
        started_at=begun.started_at,
    )  # fmt: skip
    write_json_atomic(run_dir / "run.json", {"task": task.to_dict(), "distributed": dist})
    return launch


def finish(
    begun: Begun, launch: Launch, outcome: JobOutcome, replies: Dict[str, Dict[str, Any]],
    ended_at: float, busy_threshold: float,
) -> RunResult:  # fmt: skip
    """The run's result from how its processes ended and what they replied: the workers'
    metrics merged, what the sampler adds, the achieved FLOP/s, where the processes ran."""
    config = begun.config
    verdict = judge(outcome, replies, config)
    leader = next((r for r in replies.values() if r.get("evaluation")), None)
    metrics: Dict[str, Any] = {}
    if verdict.status == "ok":
        metrics = merge.metrics(config, replies, launch.shards, launch.pass_length)
    sampled = None
    if outcome.sampler is not None:
        cores = launch.threads * launch.local_trainers
        sampled = add_sampled(
            outcome.sampler, metrics, begun.started_at, ended_at, cores, busy_threshold,
            measured=bool(metrics),
        ).to_dict()  # fmt: skip
    if metrics and leader:
        reply = WorkerReply(
            status="ok", framework=leader.get("framework", {}), model=leader.get("model", {})
        )
        metrics["compute"] = compute_rate(config, metrics, reply)
    if metrics:
        metrics["distributed"].update(
            processes=outcome.processes, endpoints=launch.endpoints, ports=launch.ports,
            cluster=launch.cluster.to_dict(), threads_per_worker=launch.threads,
            cores=launch.cores, traffic=traffic_note(config.distributed, launch.cluster),
        )  # fmt: skip
    return begun.result(
        verdict, ended_at, metrics=metrics, sampler=sampled, leader=leader,
        process_env=environments.recorded_variables(launch.env, config.backend),
        keras_json=launch.keras_json,
    )  # fmt: skip


def preflight(config: RunConfig) -> Optional[str]:
    """Why the run cannot go ahead before anything starts, or None."""
    changed = [name for name, switch in SWITCHES.items() if getattr(config, name) != switch.default]
    if changed:
        return (
            f"--distributed {config.distributed}: the optimization switches "
            f"({', '.join(changed)}) are not wired into kbench's distributed training loops; "
            "leave them at their defaults"
        )
    if config.distributed == "tf-mirrored":
        return mirrored_gpus_missing(config)
    return None


def mirrored_gpus_missing(config: RunConfig) -> Optional[str]:
    """Why tf-mirrored cannot run here, decided without starting TensorFlow (8 s of
    import for a run that cannot happen): fewer GPUs than workers where NVML can count
    them, or none where NVIDIA's driver is not here at all; None where it may run (the
    worker then checks the GPUs TensorFlow sees)."""
    needs = (f"tf-mirrored mirrors the model over one host's GPUs, one replica per worker: "
             f"--workers {config.workers} needs {config.workers} GPUs")  # fmt: skip
    fix = "Use tf-multiworker for CPU workers."
    if config.device == "cpu":
        return f"{needs}, and --device cpu hides them. {fix}"
    info = sysinfo.gpu_info()
    if info.get("available"):
        visible = len([d for d in info["devices"] if "error" not in d])
        hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
        if hidden is not None:
            visible = min(visible, len([d for d in hidden.split(",") if d.strip()]))
        if visible < config.workers:
            return f"{needs} and NVML sees {visible} here (CUDA_VISIBLE_DEVICES counted). {fix}"
        return None
    if "not installed" in info.get("reason", ""):
        return None  # no NVML binding to ask: TensorFlow will say
    return f"{needs} and this machine has none ({info.get('reason')}). {fix}"


def cut_shards(order: np.ndarray, workers: int, batch_size: int) -> np.ndarray:
    """(epochs, steps x global batch) -> (workers, steps, batch): worker r takes the r-th
    slice of each global step, so every sample of a pass goes to exactly one worker."""
    epochs, length = order.shape
    steps = length // (batch_size * workers)
    per_step = order.reshape(epochs * steps, workers, batch_size)
    return np.ascontiguousarray(per_step.transpose(1, 0, 2))


def core_layout(config: RunConfig, local_workers: int) -> Tuple[int, List[List[int]]]:
    """Threads per training process (``--threads``, else this host's cores split evenly,
    at least one each) and the cores each is pinned to (none without affinity)."""
    available = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    count = len(available) or os.cpu_count() or 1
    threads = config.threads or max(1, count // local_workers)
    if not available:
        return threads, []
    n = len(available)
    return threads, [[available[(index * threads + i) % n] for i in range(threads)]
                     for index in range(local_workers)]  # fmt: skip


def traffic_note(mode: str, cluster: Cluster) -> str:
    where = "127.0.0.1 (loopback)" if cluster.hosts == ("127.0.0.1",) else cluster.address
    notes = {
        "torch-ddp": "gloo binds and advertises {w}; torchrun's rendezvous store (a c10d "
        "TCPStore) listens on every interface of its port: PyTorch has no bind-address "
        "option for it, and every worker connects to it on {w}",
        "tf-multiworker": "workers advertise {w} in TF_CONFIG; TensorFlow's gRPC servers "
        "listen on every interface of their ports (TensorFlow binds 0.0.0.0, not settable)",
        "tf-ps": "every task advertises {w} in TF_CONFIG; TensorFlow's gRPC servers listen on "
        "every interface of their ports (TensorFlow binds 0.0.0.0, not settable)",
        "tf-mirrored": "one process: no network traffic",
        "jax": "the coordinator binds and advertises {w} (coordinator_bind_address); gloo "
        "collectives on {w}",
        "mxnet-sync": "ps-lite: scheduler, server and workers bind and advertise {w} "
        "(DMLC_NODE_HOST, DMLC_INTERFACE)",
    }
    notes["mxnet-async"] = notes["mxnet-sync"]
    return notes[mode].format(w=where)


@dataclass
class Failure:
    name: str
    pid: int
    how: str  # one line
    returncode: Optional[int]
    by_signal: bool
    tail: List[str]


@dataclass(frozen=True)
class JobOutcome(Outcome):
    """How a run's processes ended (:class:`~kbench.run.engine.Outcome`: stopped past
    the timeout, the sampler), and more: which failed, every process started, the last
    lines of each."""

    failures: List[Failure] = field(default_factory=list)
    processes: List[Dict[str, Any]] = field(default_factory=list)
    tails: Dict[str, List[str]] = field(default_factory=dict)


@dataclass
class Job:
    """The processes of one run, each a :class:`~kbench.run.engine.Worker` without a
    channel, their output in one log (each line after its process's name): started,
    relayed, sampled by one :class:`~kbench.measure.sampler.Sampler`, watched and stopped."""

    procs: List[Process]
    interpreter: Path
    env: Dict[str, str]
    run_dir: Path
    log_path: Path
    config: RunConfig
    on_progress: Any
    nvml: Any
    specs: Dict[str, Process] = field(default_factory=dict)
    running: Dict[str, Worker] = field(default_factory=dict)
    announced: Dict[str, Dict[str, Any]] = field(default_factory=dict)

    def run(self) -> JobOutcome:
        sampler = None
        timed_out, failures = False, []
        with contextlib.closing(LogWriter.open(self.log_path)) as log_file, interrupt_on_sigterm():
            if self.config.sample_interval_s > 0:
                sampler = Sampler(
                    interval_s=self.config.sample_interval_s, nvml=self.nvml, per_process=True
                ).__enter__()
            try:
                for spec in self.procs:
                    self._start(spec, sampler, log_file)
                timed_out, failures = self._watch(sampler)
            finally:
                self._stop_all(success=not timed_out and not failures)
                if sampler is not None:
                    sampler.__exit__(None, None, None)
        tails = {name: list(w.tail) for name, w in self.running.items()}
        return JobOutcome(
            returncode=None, timed_out=timed_out, log_tail=[], sampler=sampler,
            failures=failures, processes=self._processes(), tails=tails,
        )  # fmt: skip

    def _processes(self) -> List[Dict[str, Any]]:
        """Every process of the run: those kbench started, then those torchrun did."""
        started = [
            {"name": name, "role": self.specs[name].role, "rank": self.specs[name].rank,
             "pid": w.pid, "exit_code": w.process.returncode,
             "primary": self.specs[name].primary, "started_by": "kbench"}
            for name, w in self.running.items()
        ]  # fmt: skip
        return started + [
            {"name": name, "role": a["role"], "rank": a["rank"], "pid": a["pid"],
             "exit_code": None, "primary": True, "started_by": "torchrun"}
            for name, a in self.announced.items()
            if name not in self.running
        ]  # fmt: skip

    def _start(self, spec: Process, sampler: Optional[Sampler], log_file: LogWriter) -> None:
        worker = Worker.launch(
            [str(self.interpreter), *spec.args], dict(self.env, **spec.env), self.run_dir, log_file,
            name=spec.name, progress_of=self.config, on_progress=self.on_progress,
            prefix=f"[{spec.name}] ",
        )  # fmt: skip
        self.specs[spec.name], self.running[spec.name] = spec, worker
        if sampler is not None and spec.role != "launcher":  # torchrun: its workers announce
            sampler.add(spec.name, worker.pid)

    def _discover(self, sampler: Optional[Sampler]) -> None:
        for path in (self.run_dir / "procs").glob("*.json"):
            name = path.stem
            if name in self.announced:
                continue
            try:
                record = read_json(path)
            except (OSError, ValueError):
                continue  # being written
            self.announced[name] = record
            if name not in self.running and sampler is not None:
                sampler.add(name, record["pid"])

    def _reply(self, name: str) -> Optional[Dict[str, Any]]:
        return reply_in(self.run_dir / "replies" / f"{name}.json")

    def _watch(self, sampler: Optional[Sampler]) -> Tuple[bool, List[Failure]]:
        deadline = time.monotonic() + self.config.timeout_s
        while True:
            self._discover(sampler)
            failures = []
            done = True
            for name, worker in self.running.items():
                code = worker.process.poll()
                if code is None:
                    done = done and not self.specs[name].primary
                elif code != 0:
                    failures.append(self._failure(name, worker.pid, code, worker.tail))
            for name, record in self.announced.items():
                reply = self._reply(name)
                if reply is not None and reply.get("status") != "ok":
                    # failed, even if its process is still stuck in the framework's exit
                    worker = self.running.get(name)
                    failures.append(
                        self._failure(name, record["pid"], None, worker.tail if worker else [])
                    )
                elif name not in self.running and not alive(record["pid"]) and reply is None:
                    failures.append(self._failure(name, record["pid"], None, []))
            if failures:
                return False, failures
            if done:
                return False, []
            if time.monotonic() > deadline:
                log.warning("%s: past its %g s timeout; stopping every process",
                            self.config.label(), self.config.timeout_s)  # fmt: skip
                return True, []
            time.sleep(POLL_S)

    def _failure(self, name: str, pid: int, code: Optional[int], tail) -> Failure:
        reply = self._reply(name)
        if reply is not None and reply.get("error"):
            error = reply["error"]
            how = ending.first_line(f"{name}: {error['type']}: {error['message']}")
        elif code is None:
            how = f"{name} (pid {pid}) ended without reporting a result"
        elif code < 0:
            how = f"{name} (pid {pid}) {processes.describe_exit(code)}"
        else:
            how = f"{name} (pid {pid}) exited with code {code} without reporting a result"
        by_signal = code is not None and code < 0 or (code is None and reply is None)
        return Failure(name, pid, how[:500], code, by_signal, list(tail))

    def _stop_all(self, success: bool) -> None:
        if success:  # helpers that leave by themselves get a moment to do so
            deadline = time.monotonic() + HELPER_GRACE_S
            lingering = [w for name, w in self.running.items()
                         if self.specs[name].stops_itself and w.process.poll() is None]  # fmt: skip
            while lingering and time.monotonic() < deadline:
                time.sleep(POLL_S)
                lingering = [w for w in lingering if w.process.poll() is None]
        groups = [w.pid for w in self.running.values() if w.process.poll() is None]
        strays = [a["pid"] for a in self.announced.values() if alive(a["pid"])]
        for pgid in groups:
            processes.stop_tree(pgid)
        for pid in strays:
            processes.stop_pid(pid)
        # after a failure the others are usually stuck in a collective: less grace
        deadline = time.monotonic() + (KILL_GRACE_S if success else FAILED_GRACE_S)
        while time.monotonic() < deadline and (
            any(w.process.poll() is None for w in self.running.values())
            or any(alive(pid) for pid in strays)
        ):
            time.sleep(POLL_S)
        for worker in self.running.values():
            processes.kill_tree(worker.pid)
            worker.close()  # reaped, its output read to the end
        for pid in strays:
            processes.kill_pid(pid)
        for proc in left_behind(self.run_dir):
            command = " ".join(proc.info.get("cmdline") or [])[:200]
            log.warning("stopping pid %d left behind by the run (%s)", proc.pid, command)
            processes.kill_pid(proc.pid)


def left_behind(run_dir: Path) -> List[psutil.Process]:
    """Processes still running whose command line names the run's directory: ours."""
    needle = str(run_dir)
    return [
        proc for proc in psutil.process_iter(["cmdline", "status"])
        if proc.info.get("status") != psutil.STATUS_ZOMBIE
        and any(needle in a for a in proc.info.get("cmdline") or [])
    ]  # fmt: skip


def reply_in(path: Path) -> Optional[Dict[str, Any]]:
    try:
        return read_json(path)
    except (OSError, ValueError):  # none yet, or being written
        return None


def judge(
    outcome: JobOutcome, replies: Dict[str, Dict[str, Any]], config: RunConfig
) -> ending.Verdict:
    """How the whole run ended, its processes judged together, in this order:
    ``unsupported`` if any process found that its mode cannot run here (the others then
    fail only because it left); ``timeout``, with every process's last lines; ``failed``
    (or ``oom``) from the process that caused the failure (:func:`failed`); ``failed`` if
    every process exited cleanly but no worker replied; else ``ok``."""
    unsupported = [r for r in replies.values() if r.get("status") == "unsupported"]
    if unsupported:
        error = dict(unsupported[0]["error"])
        return ending.Verdict("unsupported", ending.first_line(error["message"]), error)
    last_lines = [(n, line) for n, t in outcome.tails.items() for line in t[-10:]]
    if outcome.timed_out:
        return ending.timed_out(
            f"the run passed its {config.timeout_s:g} s timeout; every process was stopped",
            [f"[{n}] {line}" for n, line in last_lines],
        )
    if outcome.failures:
        return failed(outcome, replies)
    if not any(r.get("workers") for r in replies.values()):
        return ending.no_result(
            "NoReply", "", "no worker reported a result", [line for _, line in last_lines]
        )
    return ending.OK


def failed(outcome: JobOutcome, replies: Dict[str, Dict[str, Any]]) -> ending.Verdict:
    """The verdict of a run some of whose processes failed: the cause is a process that
    died (by a signal, or without a reply) before one that reported the error its peers'
    death gave it; its error (or ``WorkerDied``), with every other failure under
    ``others``; ``oom`` where the cause said so."""
    cause = sorted(outcome.failures, key=lambda f: not f.by_signal)[0]
    reply = replies.get(cause.name) or {}
    error = dict(
        reply.get("error") or {"type": "WorkerDied", "message": cause.how, "traceback": ""},
        process=cause.name, pid=cause.pid, returncode=cause.returncode,
        log_tail="\n".join(cause.tail or outcome.tails.get(cause.name, [])),
        others=[f.how for f in outcome.failures if f is not cause],
    )  # fmt: skip
    status = reply.get("status") if reply.get("status") in ("oom", "failed") else "failed"
    return ending.Verdict(status, cause.how, error)


def save(result: RunResult, store: ResultStore, config: RunConfig) -> RunResult:
    ending.keep(result, store, config.label())
    if not result.ok:
        log.info("%s: %s", result.run_id, result.reason)
    return result
