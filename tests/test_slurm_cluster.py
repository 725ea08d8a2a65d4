"""The real Slurm that tests/slurm_cluster.py starts: that it answers as a real cluster does where the
Slurm scheduling (webapp/scheduling/slurm) cares (GPUs, refusals, time limits, requeue, an unreachable
controller), and that it leaves nothing running. Needs Debian's slurm-wlm and munge; CI installs them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.slurm_cluster import SlurmCluster, SlurmCommandError, require_slurm

ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}


@pytest.fixture(scope="module")
def cluster():
    require_slurm()
    with SlurmCluster() as started:
        yield started


def cancel(cluster: SlurmCluster, job_id: int) -> None:
    cluster.run("scancel", str(job_id), check=True)
    cluster.wait_job(job_id, ENDED)


def test_sinfo_shows_the_cpu_and_gpu_partitions_with_two_gpus(cluster):
    rows = cluster.run("sinfo", "-h", "-o", "%P %G %l %T", check=True).stdout.split("\n")
    assert sorted(filter(None, rows)) == ["cpu* gpu:2 1:00:00 idle", "gpu gpu:2 30:00 idle"]


def test_a_job_given_both_gpus_sees_them_in_cuda_visible_devices(cluster):
    job_id = cluster.sbatch(None, "--wrap", "echo $CUDA_VISIBLE_DEVICES", "--gres=gpu:2")
    assert cluster.wait_job(job_id, ENDED)["JobState"] == "COMPLETED"
    assert cluster.output(job_id) == "0,1\n"


def test_more_gpus_than_a_node_has_is_refused_at_submission(cluster):
    with pytest.raises(SlurmCommandError) as refused:
        cluster.sbatch(None, "--wrap", "true", "--gres=gpu:3")
    assert "Requested node configuration is not available" in refused.value.stderr


def test_a_time_over_the_partition_limit_pends_with_reason_partition_time_limit(cluster):
    """Slurm's default (EnforcePartLimits=NO) accepts the job and leaves it pending for ever: Reason is
    PartitionConfig at submission, PartitionTimeLimit once the scheduler has looked at it (within 1 s)."""
    job_id = cluster.sbatch(None, "--wrap", "true", "--time=120", "-p", "gpu")
    assert cluster.job(job_id)["Reason"] in {"PartitionConfig", "PartitionTimeLimit"}
    fields = wait_for(
        lambda: (f := cluster.job(job_id))["Reason"] == "PartitionTimeLimit" and f, 10, "the reason"
    )
    assert (fields["JobState"], fields["TimeLimit"]) == ("PENDING", "02:00:00")
    cancel(cluster, job_id)


def test_with_enforce_part_limits_a_time_over_the_limit_is_refused_at_submission():
    with SlurmCluster(extra_conf="EnforcePartLimits=ALL") as strict:
        with pytest.raises(SlurmCommandError) as refused:
            strict.sbatch(None, "--wrap", "true", "--time=120", "-p", "gpu")
    assert "Requested time limit is invalid (missing or exceeds some limit)" in refused.value.stderr


def test_a_requeued_job_runs_again_with_restart_count_one(cluster):
    job_id = cluster.sbatch("#!/bin/sh\necho run ${SLURM_RESTART_COUNT:-0}\nexec sleep 300\n")
    cluster.wait_job(job_id, {"RUNNING"})
    first_run = wait_for(lambda: cluster.job_pids(job_id), 30, "the job's processes")

    cluster.run("scontrol", "requeue", str(job_id), check=True)
    # The job pends (Reason=BeginTime) for AuthInfo's cred_expire (5 s here) before it may run again.
    fields = wait_for(
        lambda: (f := cluster.job(job_id))["JobState"] == "RUNNING" and f["Restarts"] == "1" and f, 30,
        "the requeued job to run again")
    assert fields["Requeue"] == "1"
    wait_for(lambda: cluster.output(job_id) == "run 1\n", 30, "second run's output")  # StdOut truncated
    assert not set(first_run) & set(cluster.job_pids(job_id))
    cancel(cluster, job_id)


def test_two_nodes_run_one_task_each():
    with SlurmCluster(nodes=2) as two:
        assert two.node_names == ["n1", "n2"]
        script = "#!/bin/sh\nsrun sh -c 'echo $SLURM_PROCID $SLURMD_NODENAME'\n"
        job_id = two.sbatch(script, "-N2", "-n2")
        fields = two.wait_job(job_id, ENDED)
        assert (fields["JobState"], fields["NodeList"]) == ("COMPLETED", "n[1-2]")
        assert sorted(two.output(job_id).splitlines()) == ["0 n1", "1 n2"]


def test_a_stopped_controller_is_unreachable_and_its_restart_recovers_the_jobs(cluster):
    done = cluster.sbatch(None, "--wrap", "true")
    cluster.wait_job(done, ENDED)
    running = cluster.sbatch(None, "--wrap", "sleep 300")
    cluster.wait_job(running, {"RUNNING"})

    cluster.stop_controller()
    try:
        squeue = cluster.run("squeue")
        assert squeue.returncode != 0
        assert "Unable to contact slurm controller" in squeue.stderr
        assert cluster.job_pids(running), "the job outlives its controller"
    finally:
        cluster.start_controller()

    assert cluster.job(done)["JobState"] == "COMPLETED"
    assert cluster.job(running)["JobState"] == "RUNNING"
    assert str(running) in cluster.run("squeue", "-h", "-o", "%i %T", check=True).stdout
    cancel(cluster, running)


def test_stop_leaves_nothing_of_the_cluster_running():
    cluster = SlurmCluster(nodes=2).start()
    directory = cluster.dir
    try:
        job_id = cluster.sbatch("#!/bin/sh\nsrun sleep 300\n", "-N2", "-n2")
        cluster.wait_job(job_id, {"RUNNING"})
        running = wait_for(lambda: (p := cluster.processes()) and len(_named(p, "bin/sleep 300")) == 2 and p, 30,
                           "a task on each node")
        for program in ("slurmctld", "slurmd -D -N n1", "slurmd -D -N n2", "slurmstepd: [", "munged"):
            assert _named(running, program), f"{program} not found among {running}"
    finally:
        cluster.stop()
    assert cluster.processes() == {}
    assert not any(Path(f"/proc/{pid}").exists() and _state(pid) != "Z" for pid in running)
    assert not directory.exists()


def _named(processes: dict[int, str], text: str) -> list[int]:
    return [pid for pid, command in processes.items() if text in command]


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"
