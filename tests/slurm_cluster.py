"""A real, private Slurm for the tests, started from the distribution's packages (Debian: slurm-wlm, munge).

Why a real one: the Slurm scheduling (webapp/scheduling/slurm) drives `sbatch`, `squeue` and `scontrol`,
and what matters (a refused `--gres`, a partition time limit, a requeue, an unreachable controller) is
what Slurm itself answers. Each `SlurmCluster` has a temporary directory of its own: slurm.conf (given to
every command as SLURM_CONF), state, spool and logs, free ports, a cluster name, and a `munged` of its own
on a private socket with a fresh key (`AuthInfo=socket=`), so it neither needs nor disturbs a system
munge or another Slurm on the machine, and stop() can end it all. Starting typically takes under a second.

    with SlurmCluster(nodes=2) as cluster:
        job_id = cluster.sbatch("#!/bin/sh\\nsrun hostname\\n", "-N2")
        cluster.wait_job(job_id, {"COMPLETED"})

The daemons run in the foreground (`-D`) as children of this process, each in a session the kernel kills
if this process dies. slurmstepd detaches from slurmd, so stop() finds it and the jobs' processes by their
environment: the daemons run with SLURM_TEST_CLUSTER=<name>, which slurmstepd inherits, and jobs carry
SLURM_CLUSTER_NAME=<name>. (After a crash, a running job's processes outlive the cluster until they end.)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Collection
from pathlib import Path

MARKER = "SLURM_TEST_CLUSTER"
_SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin"])  # daemons: sbin


def slurm_installed() -> bool:
    """Whether this machine has Slurm's controller (and so, presumably, the rest: slurm-wlm, munge)."""
    return shutil.which("slurmctld", path=_SEARCH_PATH) is not None


def require_slurm() -> None:
    """Fails the test when Slurm is missing: `make test` installs it (`make slurm`), so a missing Slurm is a
    broken install, never a reason to pass without the Slurm tests."""
    if not slurm_installed():
        import pytest

        pytest.fail("Slurm is not installed: `make slurm` (Debian's slurm-wlm and munge) installs it, and "
                    "`make test` runs it first")


def _program(name: str) -> str:
    path = shutil.which(name, path=_SEARCH_PATH)
    if path is None:
        raise FileNotFoundError(f"{name} not found (Debian: apt-get install slurm-wlm munge)")
    return path


class SlurmCommandError(subprocess.CalledProcessError):
    """A Slurm command failed; unlike CalledProcessError, str() includes what it said on stderr."""

    def __str__(self) -> str:
        return f"{super().__str__()}: {(self.stderr or '').strip()}"


def _free_ports(count: int) -> list[int]:
    """Ports the kernel says are free now (all held open together, so they are distinct)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _die_with_parent() -> None:
    """preexec_fn: a session of its own, killed by the kernel when the thread that started it ends
    (PR_SET_PDEATHSIG), so a crashed test run leaves no daemons. Like webapp.processes.die_with_parent, copied so this module needs neither Django nor Celery."""
    import ctypes

    os.setsid()
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


def _stop(process: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM to the daemon's session group, SIGKILL after `grace_s`."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=wait_s)
            return


def _environ_of(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # gone, or not ours to read
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def _pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit() and int(entry) != os.getpid()]


class SlurmCluster:
    """A private Slurm: one slurmctld and `nodes` slurmd on this machine (one node: named after this
    host; more: n1, n2, ... each slurmd started with `-N`, which Debian's build allows).

    Partitions `cpu` (default, MaxTime 60 min) and `gpu` (MaxTime 30 min) over all nodes; each node has
    os.cpu_count() CPUs and `gpu:2` backed by /dev/tty0 and /dev/tty1, which stand in for GPU devices
    (Slurm only sets CUDA_VISIBLE_DEVICES from them). `extra_conf` lines are appended to slurm.conf.
    """

    def __init__(
        self, nodes: int = 1, kill_wait_s: int = 5, extra_conf: str = "", start_timeout_s: float = 30
    ):
        if nodes < 1:
            raise ValueError("nodes must be at least 1")
        self.nodes, self.kill_wait_s, self.extra_conf = nodes, kill_wait_s, extra_conf
        self.start_timeout_s = start_timeout_s
        self.name = "t" + uuid.uuid4().hex[:8]  # ClusterName: lowercase, short (it names state files)
        self.host = socket.gethostname().split(".")[0]
        self.node_names = [self.host] if nodes == 1 else [f"n{i}" for i in range(1, nodes + 1)]
        self.dir: Path | None = None
        self._munged: subprocess.Popen | None = None
        self._slurmctld: subprocess.Popen | None = None
        self._slurmds: list[subprocess.Popen] = []

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> SlurmCluster:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def start(self) -> SlurmCluster:
        """Write the configuration, start munged, slurmctld and the slurmds; return once every node is idle."""
        try:
            self.dir = Path(tempfile.mkdtemp(prefix=f"slurm-{self.name}-"))
            self.dir.chmod(0o755)  # munged refuses a socket in a directory others cannot traverse
            for sub in ("state", "log", "jobs", *(f"spool/{node}" for node in self.node_names)):
                (self.dir / sub).mkdir(parents=True)
            self._write_config()
            self._start_munged()
            self.start_controller()
            for node in self.node_names:
                self._slurmds.append(self._daemon("slurmd", "-D", "-N", node))
            self._wait(self._nodes_idle, "every node idle")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """End every daemon this cluster started and every process of its jobs; remove its directory.
        The daemons get SIGTERM; slurmstepd and the jobs, which detach from slurmd, SIGKILL afterwards."""
        for process in [*self._slurmds, self._slurmctld, self._munged]:
            if process is not None:
                _stop(process, grace_s=5)
        self._slurmds, self._slurmctld, self._munged = [], None, None
        for _ in range(100):
            if not (leftovers := self.processes()):
                break
            for pid in leftovers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def stop_controller(self) -> None:
        """Stop slurmctld only (it saves its state first): commands then fail as with an unreachable controller."""
        if self._slurmctld is not None:
            _stop(self._slurmctld, grace_s=10)
            self._slurmctld = None

    def start_controller(self) -> None:
        """(Re)start slurmctld, which recovers jobs and nodes from StateSaveLocation (no `-c`)."""
        assert self.dir is not None and self._slurmctld is None
        self._slurmctld = self._daemon("slurmctld", "-D")
        self._wait(lambda: self.run("scontrol", "ping").stdout.count("is UP") == 1, "slurmctld answering")

    # -- commands --------------------------------------------------------------------------------

    @property
    def environ(self) -> dict[str, str]:
        """The environment for a process that must use this cluster: os.environ plus SLURM_CONF and a PATH
        with the Slurm commands (minus SLURM_* variables from any enclosing job)."""
        assert self.dir is not None, "cluster not started"
        env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM_")}
        path = os.pathsep.join([env.get("PATH", "/usr/bin:/bin"), os.path.dirname(_program("sbatch"))])
        return {**env, "SLURM_CONF": str(self.dir / "slurm.conf"), "PATH": path}

    def run(
        self, *argv: str, check: bool = False, timeout: float = 30, **kwargs
    ) -> subprocess.CompletedProcess:
        """Run a Slurm command (`squeue`, `scontrol show node`...) against this cluster; text output."""
        completed = subprocess.run(
            argv,
            env=self.environ,
            cwd=self.dir / "jobs",
            capture_output=True,
            text=True,
            timeout=timeout,
            **kwargs,
        )
        if check and completed.returncode:
            raise SlurmCommandError(completed.returncode, argv, completed.stdout, completed.stderr)
        return completed

    def sbatch(self, script_text: str | None, *args: str) -> int:
        """Submit a batch script (given as text; None when `args` hold `--wrap`) and return its job id.
        Output lands in the cluster's jobs/ directory (see `output`). Raises SlurmCommandError on refusal."""
        completed = self.run("sbatch", "--parsable", *args, input=script_text, check=True)
        return int(completed.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        """`scontrol show job -o <id>` as a dict (JobState, Reason, Restarts, NodeList, StdOut...)."""
        line = self.run("scontrol", "show", "job", "-o", str(job_id), check=True).stdout.strip()
        fields: dict[str, str] = {}
        key = ""
        for token in line.split(" "):  # a value may hold spaces (JobName=, Command=): glue it back
            name, sep, value = token.partition("=")
            if sep and name[:1].isupper():
                key, fields[name] = name, value
            elif key:
                fields[key] += " " + token
        return fields

    def wait_job(self, job_id: int, states: Collection[str], timeout: float = 30) -> dict[str, str]:
        """Poll until the job's JobState is one of `states`; return its fields (TimeoutError after `timeout`)."""
        deadline = time.monotonic() + timeout
        while True:
            fields = self.job(job_id)
            if fields.get("JobState") in states:
                return fields
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} not in {sorted(states)} after {timeout}s: {fields}")
            time.sleep(0.1)

    def output(self, job_id: int) -> str:
        """What the job wrote to its StdOut file so far."""
        return Path(self.job(job_id)["StdOut"]).read_text()

    def processes(self) -> dict[int, str]:
        """This cluster's live processes on this machine, pid -> command line: the daemons and slurmstepd
        (which run with SLURM_TEST_CLUSTER=<name>) and the jobs' processes (SLURM_CLUSTER_NAME=<name>)."""
        found = {}
        for pid in _pids():
            environ = _environ_of(pid)  # empty for a zombie: it no longer runs
            if self.name in (environ.get(MARKER), environ.get("SLURM_CLUSTER_NAME")):
                try:
                    found[pid] = (
                        Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
                    )
                except OSError:
                    pass
        return found

    def job_pids(self, job_id: int) -> list[int]:
        """Pids of this machine's processes that run the job's code: the batch shell and its children, srun
        and the tasks. slurmstepd itself is not included: its environment is slurmd's, not the job's."""
        wanted = {"SLURM_JOB_ID": str(job_id), "SLURM_CLUSTER_NAME": self.name}
        return sorted(pid for pid in _pids() if wanted.items() <= _environ_of(pid).items())

    # -- internals -------------------------------------------------------------------------------

    def _daemon(self, program: str, *args: str) -> subprocess.Popen:
        """Start a Slurm daemon in the foreground. It logs to its LogFile and, with -D, to stderr too: kept
        in log/<daemon>.out, which alone shows what kills a daemon before it opens its LogFile."""
        assert self.dir is not None
        name = f"{program}-{args[-1]}" if program == "slurmd" else program
        with open(self.dir / "log" / f"{name}.out", "ab") as log:
            return subprocess.Popen(
                [_program(program), *args], env={**self.environ, MARKER: self.name}, cwd=self.dir,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent,
            )  # fmt: skip

    def _start_munged(self) -> None:
        """A munged of our own: a fresh key and a socket in our directory, so nothing system-wide is needed."""
        assert self.dir is not None
        key = self.dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        socket_path = self.dir / "munge.socket"
        self._munged = subprocess.Popen(
            [_program("munged"), "--foreground", f"--key-file={key}", f"--socket={socket_path}",
             f"--pid-file={self.dir}/munged.pid", f"--seed-file={self.dir}/munged.seed",
             f"--log-file={self.dir}/log/munged.log"],
            env={**os.environ, MARKER: self.name}, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent,  # it logs to --log-file
        )  # fmt: skip
        self._wait(socket_path.exists, "munged's socket")

    def _write_config(self) -> None:
        assert self.dir is not None
        d = self.dir
        ctld_port, *node_ports = _free_ports(1 + self.nodes)
        if self.nodes == 1:  # the real host name, as on a one-node cluster
            nodes = [f"NodeName={self.host} NodeAddr=127.0.0.1 Port={node_ports[0]}"]
        else:  # several slurmd on one host: each its own node name, port, and (%n) spool, pid and log
            nodes = [f"NodeName={n} NodeHostname={self.host} NodeAddr=127.0.0.1 Port={p}"
                     for n, p in zip(self.node_names, node_ports, strict=True)]  # fmt: skip
        node_list = ",".join(self.node_names)
        lines = [
            f"ClusterName={self.name}",
            f"SlurmctldHost={self.host}(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={node_ports[0]}",
            "SlurmUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            # cred_expire: also how long a requeued job waits before it may start again (default 120 s)
            f"AuthInfo=socket={d}/munge.socket,cred_expire=5",
            f"StateSaveLocation={d}/state",
            f"SlurmdSpoolDir={d}/spool/%n",
            f"SlurmctldPidFile={d}/slurmctld.pid",
            f"SlurmdPidFile={d}/spool/%n.pid",
            f"SlurmctldLogFile={d}/log/slurmctld.log",
            f"SlurmdLogFile={d}/log/slurmd-%n.log",
            f"PlugStackConfig={d}/plugstack.conf",  # not /etc/slurm's
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",  # Debian ships mpi/pmix without libpmix: a harmless error in every log
            "MailProg=/bin/true",  # Debian's default, /bin/mail, is absent: an error in slurmctld's log
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/backfill",
            # Schedule on every event and at least every second: a requeued job runs again at once.
            "SchedulerParameters=bf_interval=1,sched_interval=1,sched_min_interval=0",
            "SchedulerTimeSlice=5",
            "JobRequeue=1",
            "MinJobAge=300",  # ended jobs stay in `scontrol show job` for 5 minutes
            f"KillWait={self.kill_wait_s}",
            "ReturnToService=2",
            "SlurmdTimeout=10",
            "MessageTimeout=2",
            "SlurmdParameters=config_overrides",  # each node claims all CPUs, whatever slurmd detects
            "GresTypes=gpu",
            *(f"{node} CPUs={os.cpu_count()} RealMemory=1000 Gres=gpu:2 State=UNKNOWN" for node in nodes),
            f"PartitionName=cpu Nodes={node_list} Default=YES MaxTime=60 State=UP",
            f"PartitionName=gpu Nodes={node_list} MaxTime=30 State=UP",
            self.extra_conf,
        ]
        (d / "slurm.conf").write_text("\n".join(lines) + "\n")
        (d / "gres.conf").write_text("Name=gpu File=/dev/tty[0-1]\n")
        (d / "plugstack.conf").write_text("")

    def _nodes_idle(self) -> bool:
        states = self.run("sinfo", "-h", "-N", "-p", "cpu", "-o", "%N %T").stdout.split()
        return len(states) == 2 * self.nodes and set(states[1::2]) == {"idle"}

    def _wait(self, condition, what: str) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while not condition():
            if time.monotonic() > deadline:
                logs = [
                    f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted((self.dir / "log").iterdir())
                ]
                raise TimeoutError(
                    "\n".join([f"cluster {self.name}: no {what} in {self.start_timeout_s}s", *logs])
                )
            time.sleep(0.05)
