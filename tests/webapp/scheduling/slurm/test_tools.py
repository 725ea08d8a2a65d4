"""Slurm's tools as the slurm queue's worker calls them (webapp/scheduling/slurm/tools.py): the time and
gres strings sinfo prints, parsed on strings; sinfo's partitions, sbatch's refusals, an unknown job and an
unreachable controller, asked of a real, private Slurm (tests/slurm_cluster.py)."""

from __future__ import annotations

import pytest

from tests.conftest import wait_for
from webapp.scheduling.slurm import tools


@pytest.fixture
def slurm_env(cluster, monkeypatch):
    """The tools of this process talk to the test cluster (as `slurm_site` does, without a server)."""
    monkeypatch.setenv("SLURM_CONF", cluster.environ["SLURM_CONF"])
    monkeypatch.setenv("PATH", cluster.environ["PATH"])
    return cluster


def nodes_idle(cluster) -> bool:
    states = cluster.run("sinfo", "-h", "-N", "-p", "cpu", "-o", "%T").stdout.split()
    return bool(states) and set(states) == {"idle"}


@pytest.mark.parametrize(("text", "minutes"), [
    ("infinite", None), ("UNLIMITED", None), ("", None),
    ("30:00", 30), ("1:00:00", 60), ("2-00:00:00", 2 * 24 * 60), ("45", 45),
    ("1:30", 2),  # 1 min 30 s: seconds round up to a whole minute
    ("0:01", 1), ("1-02:03:04", 24 * 60 + 2 * 60 + 3 + 1),
    ("2-12", 2 * 24 * 60 + 12 * 60), ("2-12:30", 2 * 24 * 60 + 12 * 60 + 30),  # days-hours, days-hours:minutes
])
def test_time_minutes_reads_slurms_times_in_whole_minutes_rounded_up(text, minutes):
    assert tools.time_minutes(text) == minutes


@pytest.mark.parametrize(("gres", "gpus"), [
    ("gpu:2", 2), ("gpu:h100:8(S:0-1)", 8), ("(null)", 0), ("", 0), ("gpu:a:2,gpu:b:1", 3),
    ("gpu:2(S:0)", 2), ("shard:4", 0), ("gpu:a100:4,shard:8", 4),
])
def test_gpu_count_sums_the_gpus_per_node_of_a_gres_string(gres, gpus):
    assert tools.gpu_count(gres) == gpus


def test_partitions_are_read_from_sinfo_with_their_gpus_nodes_and_time_limits(slurm_env):
    found = tools.partitions()
    assert set(found) == {"cpu", "gpu", "lab", "closed"}
    limits = {name: partition.time_limit_min for name, partition in found.items()}
    assert limits == {"cpu": 60, "gpu": 30, "lab": 60, "closed": None}  # closed has no MaxTime: infinite
    for partition in found.values():
        assert (partition.gpus_per_node, partition.nodes, partition.gres) == (2, 1, "gpu:2"), partition
        assert partition.gpus == 2
    assert found["gpu"].idle_nodes == 1
    assert (found["gpu"].time_label, found["cpu"].time_label, found["closed"].time_label) == (
        "30 min", "1 h 00 min", "no time limit")


@pytest.mark.slow  # Slurm's clients retry for seconds, and the node takes seconds to be idle again
def test_a_stopped_controller_is_unreachable_not_a_refusal(slurm_env):
    cluster = slurm_env
    cluster.stop_controller()
    try:
        with pytest.raises(tools.SlurmUnreachable, match="Unable to contact slurm controller"):
            tools.partitions()
        with pytest.raises(tools.SlurmUnreachable):
            tools.job("1")  # not None: a job Slurm cannot be asked about is not a job it forgot
    finally:
        cluster.start_controller()
        wait_for(lambda: nodes_idle(cluster), 60, "the node to be idle again after the controller's restart")
    assert set(tools.partitions()) == {"cpu", "gpu", "lab", "closed"}


def test_sbatch_refusing_a_job_is_slurm_refused_in_slurms_words(slurm_env, tmp_path):
    cases = [("--partition=nosuch", "Invalid partition name specified"),
             ("--partition=gpu --time=45", "Requested time limit is invalid"),
             ("--partition=lab --account=nobody", "Invalid account or account/partition combination")]
    for options, words in cases:
        script = tmp_path / "job.sbatch"
        script.write_text("#!/bin/bash\n" + "".join(f"#SBATCH {o}\n" for o in options.split()) + "true\n")
        with pytest.raises(tools.SlurmRefused) as refused:
            tools.submit(str(script), workdir=str(tmp_path))
        assert words in str(refused.value), (options, str(refused.value))
        assert "sbatch: error:" not in str(refused.value)  # the tool's prefix is dropped, Slurm's words kept
    assert tools.jobs_named("cohort-run-refused") == []


def test_a_submitted_job_is_found_by_id_and_name_and_an_unknown_id_is_none(slurm_env, tmp_path):
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --job-name=cohort-tools-test\n#SBATCH --partition=closed\nsleep 60\n")
    job_id = tools.submit(str(script), workdir=str(tmp_path))
    try:
        assert job_id.isdigit()
        fields = tools.job(job_id)
        assert fields is not None and fields["JobId"] == job_id and fields["JobState"] == "PENDING"
        assert fields["Partition"] == "closed" and fields["JobName"] == "cohort-tools-test"
        assert tools.jobs_named("cohort-tools-test") == [job_id]
    finally:
        tools.cancel(job_id)
    assert tools.job("999999") is None  # "Invalid job id specified": Slurm does not know it
    tools.cancel("999999")  # scancel of a job Slurm no longer knows says nothing: cancelling is idempotent


def test_a_missing_tool_is_unreachable(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no Slurm client here
    with pytest.raises(tools.SlurmUnreachable, match="sinfo is not installed"):
        tools.partitions()
