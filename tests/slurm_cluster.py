"""A one-node Slurm cluster on this machine, for the tests that submit sweeps to it.

Debian's ``slurm-wlm`` and ``munge`` (``scripts/setup_envs.sh slurm``, as root) run
slurmctld and slurmd on localhost with a config written here, their state, spool and
logs in a temporary folder; with ``slurmdbd`` and ``mariadb-server`` also installed,
a MariaDB server and slurmdbd in the same folder give the cluster accounting (sacct).
munged listens on its default socket (``/run/munge/munge.socket.2``): Slurm 22.05
reaches slurmdbd through the default socket whatever ``AuthInfo`` says. A munged
already answering there is used and left running.

:func:`start` returns the cluster, or raises :class:`Unavailable` with the reason (not
root, a program missing, a daemon that did not come up); the fixture in
``tests/test_slurm.py`` skips with it, except under CI (``CI`` set), where it fails
(:func:`running`, a fixture's body).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List

DAEMONS = ("munged", "slurmctld", "slurmd")
ACCOUNTING = ("slurmdbd", "mariadbd", "mariadb-install-db", "sacctmgr")
MUNGE_SOCKET = Path("/run/munge/munge.socket.2")


class Unavailable(RuntimeError):
    """The cluster cannot start here; the message says why."""


@dataclass
class Cluster:
    root: Path
    accounting: bool
    pids: List[Path] = field(default_factory=list)  # pid files of the daemons started here

    @property
    def env(self) -> Dict[str, str]:
        return dict(os.environ, SLURM_CONF=str(self.root / "slurm.conf"))

    def tool(self, *command: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            command, env=self.env, capture_output=True, text=True, check=check, timeout=60
        )

    def stop(self) -> None:
        for pid_file in reversed(self.pids):
            try:
                os.kill(int(pid_file.read_text().split()[0]), signal.SIGTERM)
            except (OSError, ValueError):
                pass
        time.sleep(1)

    def log_tail(self) -> str:
        return "".join(
            f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:])
            for p in sorted((self.root / "log").glob("*.log"))
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(what: str, ready, seconds: float, cluster: Cluster) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.5)
    raise Unavailable(f"{what} did not come up in {seconds:.0f}s:\n{cluster.log_tail()}")


def _munge(cluster: Cluster) -> None:
    probe = "munge -n | unmunge >/dev/null 2>&1"
    if MUNGE_SOCKET.exists() and subprocess.run(probe, shell=True).returncode == 0:
        return  # a munged answers: every daemon uses it
    key = cluster.root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    MUNGE_SOCKET.parent.mkdir(parents=True, exist_ok=True)
    pid = cluster.root / "munged.pid"
    subprocess.run(["munged", "-f", f"--key-file={key}", f"--pid-file={pid}",
                    f"--log-file={cluster.root}/log/munged.log",
                    f"--seed-file={cluster.root}/munged.seed"], check=True)  # fmt: skip
    cluster.pids.append(pid)
    _wait("munged", lambda: subprocess.run(probe, shell=True).returncode == 0, 10, cluster)


def _database(cluster: Cluster, dbd_port: int) -> str:
    """MariaDB and slurmdbd in the cluster's folder; the slurm.conf lines that use them."""
    root, db_port = cluster.root, _free_port()
    subprocess.run(["mariadb-install-db", f"--datadir={root}/db", "--user=root",
                    "--auth-root-authentication-method=normal"],
                   check=True, capture_output=True)  # fmt: skip
    subprocess.Popen(
        ["mariadbd", f"--datadir={root}/db", "--user=root", f"--socket={root}/mysql.sock",
         f"--port={db_port}", "--bind-address=127.0.0.1", f"--pid-file={root}/mysql.pid",
         f"--log-error={root}/log/mysql.log"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    cluster.pids.insert(0, root / "mysql.pid")  # stopped last
    sql = ["mariadb", f"--socket={root}/mysql.sock", "-uroot"]
    _wait(
        "MariaDB",
        lambda: subprocess.run([*sql, "-e", "select 1"], capture_output=True).returncode == 0,
        30,
        cluster,
    )
    grant = " ".join(
        f"CREATE USER IF NOT EXISTS 'slurm'@'{h}' IDENTIFIED BY 'kbench'; "
        f"GRANT ALL ON slurm_acct_db.* TO 'slurm'@'{h}';"
        for h in ("localhost", "127.0.0.1")
    )
    subprocess.run([*sql, "-e", grant], check=True, capture_output=True)
    conf = root / "slurmdbd.conf"
    conf.write_text(
        f"AuthType=auth/munge\nDbdHost=localhost\nDbdPort={dbd_port}\nSlurmUser=root\n"
        f"LogFile={root}/log/slurmdbd.log\nPidFile={root}/slurmdbd.pid\n"
        f"StorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\n"
        f"StoragePort={db_port}\nStorageUser=slurm\nStoragePass=kbench\n"
        "StorageLoc=slurm_acct_db\n"
    )
    conf.chmod(0o600)
    return (
        "AccountingStorageType=accounting_storage/slurmdbd\n"
        f"AccountingStorageHost=localhost\nAccountingStoragePort={dbd_port}\n"
    )


def start(root: Path) -> Cluster:
    """Start the cluster in ``root`` (or raise :class:`Unavailable`)."""
    if os.geteuid() != 0:
        raise Unavailable("the one-node Slurm cluster runs its daemons as root; not root")
    missing = [p for p in DAEMONS + ("sbatch", "munge") if shutil.which(p) is None]
    if missing:
        raise Unavailable(
            f"{', '.join(missing)} not installed: scripts/setup_envs.sh slurm (as root) "
            "installs Debian's slurm-wlm and munge"
        )
    cluster = Cluster(root, accounting=all(shutil.which(p) for p in ACCOUNTING))
    for sub in ("log", "state", "spool"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    try:
        _munge(cluster)
        dbd_port = _free_port()
        accounting = _database(cluster, dbd_port) if cluster.accounting else ""
        cpus = os.cpu_count() or 1
        # batch_sched_delay=0: a batch job (an array task freed by another's end, a
        # resubmission) is scheduled at once, not up to 3 s later (Slurm's default, for
        # clusters that take thousands of submissions a second): 2.6-2.9 s -> 0.9 s here
        (root / "slurm.conf").write_text(
            f"ClusterName=kbench\nSlurmctldHost=localhost\nSlurmUser=root\nSlurmdUser=root\n"
            "AuthType=auth/munge\nCredType=cred/munge\nProctrackType=proctrack/linuxproc\n"
            "TaskPlugin=task/none\nSwitchType=switch/none\nMpiDefault=none\n"
            f"SlurmctldPidFile={root}/slurmctld.pid\nSlurmdPidFile={root}/slurmd.pid\n"
            f"SlurmdSpoolDir={root}/spool\nStateSaveLocation={root}/state\n"
            f"SlurmctldPort={_free_port()}\nSlurmdPort={_free_port()}\n"
            f"SlurmctldLogFile={root}/log/slurmctld.log\nSlurmdLogFile={root}/log/slurmd.log\n"
            "SchedulerType=sched/backfill\nSchedulerParameters=batch_sched_delay=0\nSelectType=select/cons_tres\n"
            "SelectTypeParameters=CR_Core\nReturnToService=2\nJobCompType=jobcomp/none\n"
            "JobAcctGatherType=jobacct_gather/none\nMinJobAge=600\nKillWait=5\n"
            f"InactiveLimit=0\n{accounting}"
            f"NodeName=localhost CPUs={cpus} RealMemory=1000 State=UNKNOWN\n"
            "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP\n"
        )
        if cluster.accounting:
            subprocess.run(["slurmdbd"], env=cluster.env, check=True)
            cluster.pids.append(root / "slurmdbd.pid")
            _wait("slurmdbd", lambda: cluster.tool("sacctmgr", "-i", "add", "cluster",
                                                   "kbench", check=False).returncode == 0,
                  30, cluster)  # fmt: skip
        subprocess.run(["slurmctld", "-i"], env=cluster.env, check=True)
        cluster.pids.append(root / "slurmctld.pid")
        subprocess.run(["slurmd", "-N", "localhost"], env=cluster.env, check=True)
        cluster.pids.append(root / "slurmd.pid")
        _wait(
            "the node",
            lambda: "idle" in cluster.tool("sinfo", "-h", "-o", "%T", check=False).stdout,
            30,
            cluster,
        )
    except (OSError, subprocess.CalledProcessError, Unavailable) as err:
        cluster.stop()
        raise Unavailable(f"the Slurm cluster did not start: {err}") from None
    return cluster


def running(root: Path) -> Iterator[Cluster]:
    """A fixture's body (``yield from running(root)``): the cluster started in ``root``
    and stopped after, or the test skipped with the reason (under CI, which must run the
    Slurm tests, failed)."""
    import pytest

    try:
        cluster = start(root)
    except Unavailable as err:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the Slurm tests: {err}")
        pytest.skip(str(err))
    yield cluster
    cluster.stop()
