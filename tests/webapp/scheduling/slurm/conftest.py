"""A real Slurm (tests/slurm_cluster.py) and this server configured to offer its partitions: the
partitions `cpu` and `gpu` (two stand-in GPUs), `lab` (only account `lab` may use it) and `closed` (down:
a job there stays PENDING). The slurm queue's tick runs in the test process when a test calls `tick()`,
so the test decides when Slurm is asked; the job posts its events to the real ASGI server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.slurm_cluster import SlurmCluster, require_slurm
from trainer.run.gate import StepGate

EXTRA = "EnforcePartLimits=ALL\nPartitionName=lab Nodes=ALL MaxTime=60 AllowAccounts=lab State=UP\nPartitionName=closed Nodes=ALL State=DOWN\n"


@pytest.fixture(scope="session")
def cluster():
    require_slurm()
    with SlurmCluster(nodes=1, kill_wait_s=5, extra_conf=EXTRA) as running:
        yield running


@pytest.fixture(scope="session")
def two_node_cluster():
    """Two slurmd on this machine as nodes n1 and n2 (each its own port, NodeAddr 127.0.0.1)."""
    require_slurm()
    with SlurmCluster(nodes=2, kill_wait_s=5) as running:
        yield running


@pytest.fixture
def site_cluster(request):
    """The one-node cluster; `@pytest.mark.parametrize("site_cluster", ["two nodes"], indirect=True)`: two."""
    return request.getfixturevalue("two_node_cluster" if getattr(request, "param", "") == "two nodes" else "cluster")


@pytest.fixture
def slurm_site(site_cluster, settings, asgi_server, tmp_path, model_cache_dir, monkeypatch):
    """This server offering the cluster's partitions; `.gate`: the step gate of the jobs' trainers."""
    from webapp.scheduling.slurm import placement

    cluster = site_cluster
    gate = StepGate(tmp_path / "step-gate")
    monkeypatch.setenv("SLURM_CONF", cluster.environ["SLURM_CONF"])
    monkeypatch.setenv("PATH", cluster.environ["PATH"])
    settings.COHORT_SLURM_PARTITIONS = ["cpu", "gpu", "lab", "closed"]
    settings.COHORT_SLURM_RUNS_DIR = tmp_path / "slurm-runs"
    settings.COHORT_SLURM_SERVER_URL = asgi_server
    settings.COHORT_MODEL_CACHE = model_cache_dir
    settings.COHORT_SLURM_SIGNAL_S = 300
    settings.COHORT_SLURM_SETUP = f"export COHORT_STEP_GATE={gate.path}\nexport OMP_NUM_THREADS=1"
    placement.forget_partitions()
    yield Site(cluster, gate, Path(settings.COHORT_SLURM_RUNS_DIR))
    placement.forget_partitions()
    # The cluster outlives the test: whatever job a test left (a failed assertion before its cancel) must
    # not hold the node for the next one.
    cluster.run("scancel", "--full", "--user", "root")
    wait_for(lambda: not cluster.run("squeue", "--noheader", "--format=%i").stdout.split(), 60,
             "the test's jobs to leave Slurm's queue")


class Site:
    def __init__(self, cluster: SlurmCluster, gate: StepGate, runs_dir: Path):
        self.cluster, self.gate, self.runs_dir = cluster, gate, runs_dir

    def tick(self) -> dict:
        from webapp.scheduling.slurm.services import slurm_tick

        return slurm_tick()

    def until(self, predicate, what: str, run=None, timeout_s: float = 120.0):
        """Ticks until `predicate()` holds; the failure shows the job's output."""
        def ticked():
            self.tick()
            return predicate()
        try:
            return wait_for(ticked, timeout_s, what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.outputs(run)}") from None

    def outputs(self, run) -> str:
        if run is None:
            return ""
        folder = self.runs_dir / f"run-{run.pk}"
        texts = [f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(folder.glob("slurm-*.out"))]
        return "\n".join(texts) or f"(no job output in {folder})"


def job_environ(pid: int) -> dict[str, str]:
    """The process's environment ({} once it has exited)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return {}
    return dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)


__all__ = ["job_environ", "os"]
