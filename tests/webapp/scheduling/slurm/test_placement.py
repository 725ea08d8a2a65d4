"""Where a run trains, checked against Slurm's own figures (webapp/scheduling/slurm/placement.py) at every
launch door: a partition the server does not offer or sinfo does not report, more GPUs than it holds, a
time limit over its limit or the server's; an unreachable Slurm keeps the offered names. Asked of a
real, private Slurm (tests/slurm_cluster.py), and through `POST /api/runs/` and `manage.py launch_run`."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from tests.conftest import wait_for
from tests.webapp.runs.launch.test_launch import toy_task  # noqa: F401 (fixture)
from webapp.api.services import token_create
from webapp.runs.launch.check import LaunchRefused, placement_checked
from webapp.runs.models import Run
from webapp.scheduling.slurm import placement

RUNS = "/api/runs/"


@pytest.fixture
def offered(cluster, settings, monkeypatch):
    """This server offering the test cluster's partitions (as `slurm_site` does, without a server)."""
    monkeypatch.setenv("SLURM_CONF", cluster.environ["SLURM_CONF"])
    monkeypatch.setenv("PATH", cluster.environ["PATH"])
    settings.COHORT_SLURM_PARTITIONS = ["cpu", "gpu", "lab", "closed"]
    settings.COHORT_SLURM_DEFAULT_TIME_MIN = 60
    settings.COHORT_SLURM_MAX_TIME_MIN = 24 * 60
    placement.forget_partitions()
    yield cluster
    placement.forget_partitions()


def errors(result) -> dict[str, list[str]]:
    return result[1]


def test_the_offered_partitions_are_labelled_with_sinfos_figures(offered, settings):
    labels = dict(placement.offered())
    assert labels["gpu"] == "gpu: gpu:2 per node, 1 of 1 node free, 30 min"
    assert labels["cpu"] == "cpu: gpu:2 per node, 1 of 1 node free, 1 h 00 min"
    assert labels["closed"].endswith("no time limit")
    settings.COHORT_SLURM_PARTITIONS = ["gpu", "ghost"]
    assert [name for name, _ in placement.offered()] == ["gpu"]  # a name sinfo does not report is not offered


def test_a_partition_not_offered_or_unknown_to_sinfo_is_refused_on_partition(offered, settings):
    settings.COHORT_SLURM_PARTITIONS = ["cpu", "ghost"]
    assert placement.check("gpu", None, 1) == (None, {"partition": [
        "Partition 'gpu' is not offered here (offered: cpu, ghost)."]})
    assert placement.check("ghost", None, 1) == (None, {"partition": [
        "Slurm reports no partition 'ghost' (sinfo lists closed, cpu, gpu, lab)."]})
    settings.COHORT_SLURM_PARTITIONS = []
    assert "none: Slurm is not configured on this server" in errors(placement.check("cpu", None, 1))["partition"][0]


def test_more_gpus_than_the_partition_holds_are_refused_naming_its_gres_and_nodes(offered):
    assert placement.check("gpu", None, 2) == (30, {})
    minutes, found = placement.check("gpu", 10, 3)
    assert minutes is None and list(found) == ["partition"]
    assert found["partition"] == ["The run needs 3 GPUs (one per process, num_processes), and partition gpu has "
                                  "gpu:2 per node on 1 node: 2 GPUs at most."]
    both = errors(placement.check("gpu", 45, 3))  # every error at once
    assert set(both) == {"partition", "time_limit"}


def test_a_time_limit_over_the_partitions_limit_or_the_servers_is_refused_saying_whose(offered, settings):
    assert placement.check("gpu", 30, 1) == (30, {})
    assert placement.check("gpu", 45, 1) == (None, {"time_limit": [
        "45 minutes is over partition gpu's limit (sinfo) of 30 minutes."]})
    settings.COHORT_SLURM_MAX_TIME_MIN = 20
    assert placement.check("gpu", 25, 1) == (None, {"time_limit": [
        "25 minutes is over this server's limit (COHORT_SLURM_MAX_TIME_MIN) of 20 minutes."]})
    settings.COHORT_SLURM_MAX_TIME_MIN = 24 * 60
    assert placement.check("closed", 24 * 60, 1) == (24 * 60, {})  # no MaxTime: the server's limit alone
    assert placement.check("closed", 24 * 60 + 1, 1) == (None, {"time_limit": [
        "1441 minutes is over this server's limit (COHORT_SLURM_MAX_TIME_MIN) of 1440 minutes."]})
    for minutes in (0, -5):
        assert placement.check("cpu", minutes, 1) == (None, {"time_limit": ["A time limit is at least 1 minute."]})


def test_the_default_time_limit_is_the_servers_within_the_partitions_limit(offered, settings):
    assert placement.check("cpu", None, 1) == (60, {})
    assert placement.check("gpu", None, 1) == (30, {})  # a short partition gets its limit
    settings.COHORT_SLURM_DEFAULT_TIME_MIN = 15
    assert placement.check("gpu", None, 1) == (15, {})
    settings.COHORT_SLURM_DEFAULT_TIME_MIN = 3000
    assert placement.check("closed", None, 1) == (24 * 60, {})  # and within the server's


@pytest.mark.slow  # Slurm's clients retry for a second, and the node takes seconds to be idle again
def test_an_unreachable_slurm_keeps_the_offered_names_and_checks_the_servers_limit_only(offered, settings):
    cluster = offered
    settings.COHORT_SLURM_MAX_TIME_MIN = 120
    cluster.stop_controller()
    try:
        assert placement.check("cpu", 90, 1) == (90, {})  # over cpu's 60: unknown while Slurm is away
        assert placement.check("gpu", None, 8) == (60, {})  # the GPUs are Slurm's to refuse when it answers
        assert "COHORT_SLURM_MAX_TIME_MIN" in errors(placement.check("cpu", 121, 1))["time_limit"][0]
        assert "not offered" in errors(placement.check("nosuch", None, 1))["partition"][0]
        assert dict(placement.offered()) == {name: f"{name} (Slurm does not answer now)"
                                             for name in ("cpu", "gpu", "lab", "closed")}
        assert placement.cluster_partitions().startswith("Slurm did not answer: ")
    finally:
        cluster.start_controller()
        wait_for(lambda: set(cluster.run("sinfo", "-h", "-N", "-p", "cpu", "-o", "%T").stdout.split()) == {"idle"},
                 60, "the node to be idle again after the controller's restart")
        placement.forget_partitions()
    assert placement.check("cpu", 90, 1)[1] == {"time_limit": [
        "90 minutes is over partition cpu's limit (sinfo) of 60 minutes."]}


def test_sinfos_answer_is_kept_for_a_few_seconds(offered, monkeypatch):
    first = placement.cluster_partitions()
    monkeypatch.setenv("PATH", "/nonexistent")  # sinfo cannot be started now
    assert placement.cluster_partitions() is first
    placement.forget_partitions()
    assert "sinfo is not installed" in placement.cluster_partitions()


def test_the_launch_check_refuses_a_time_limit_off_slurm_and_one_that_is_not_a_whole_number(offered):
    assert placement_checked("", None, 1) is None
    assert placement_checked("gpu", 20, 2) == 20
    cases = [("", 10, "time_limit", "applies to a run on a Slurm partition"),
             ("cpu", 1.5, "time_limit", "whole number of minutes"),
             ("cpu", True, "time_limit", "whole number of minutes"),
             ("cpu", "10", "time_limit", "whole number of minutes"),
             (["cpu"], None, "partition", "named by a string"),
             ("gpu", 45, "time_limit", "over partition gpu's limit")]
    for partition, time_limit, field, words in cases:
        with pytest.raises(LaunchRefused) as refused:
            placement_checked(partition, time_limit, 1)
        assert words in " ".join(refused.value.errors.get(field, [])), (partition, time_limit, refused.value.errors)


# --- the doors: the API and manage.py launch_run --------------------------------------------------
def token_client(user, *, can_write: bool = True) -> Client:
    """A client with a new API token of `user`, read and write by default (as tests/webapp/api's `api_client`)."""
    key = token_create(user=user, name="tests", can_write=can_write)[1]
    return Client(headers={"Authorization": f"Bearer {key}"})


def post(client: Client, body):
    return client.post(RUNS, body, content_type="application/json")


@pytest.mark.django_db
def test_the_api_refuses_a_bad_placement_beside_its_field_and_queues_nothing(offered, owner, toy_task):  # noqa: F811
    placed = {"task": "toy", "partition": "cpu"}
    assert post(Client(), placed).status_code == 401
    assert post(Client(headers={"Authorization": "Bearer not-a-token"}), placed).status_code == 401
    read_only = post(token_client(owner, can_write=False), placed)
    assert read_only.status_code == 403 and "read-only" in read_only.json()["detail"]
    client = token_client(owner)
    cases = [({"partition": "nosuch"}, "partition", "is not offered here"),
             ({"partition": 3}, "partition", "must be a Slurm partition's name"),
             ({"partition": "cpu", "time_limit": "ten"}, "time_limit", "whole number of minutes"),
             ({"partition": "cpu", "time_limit": 1.5}, "time_limit", "whole number of minutes"),
             ({"time_limit": 10}, "time_limit", "applies to a run on a Slurm partition"),
             ({"partition": "gpu", "time_limit": 45}, "time_limit", "over partition gpu's limit (sinfo) of 30"),
             ({"partition": "gpu", "config": {"num_processes": 3, "examples_per_step": 6}}, "partition",
              "2 GPUs at most")]
    for changes, field, words in cases:
        response = post(client, {"task": "toy", "config": {"steps": 2}, **changes})
        assert response.status_code == 400, (changes, response.content)
        body = response.json()
        assert body["detail"].startswith("The run was not created"), body
        assert words in " ".join(body["errors"].get(field, [])), (changes, body)
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_the_api_queues_a_run_on_a_partition_with_its_time_limit(offered, owner, toy_task):  # noqa: F811
    client = token_client(owner)
    response = post(client, {"task": "toy", "config": {"steps": 2}, "partition": "cpu", "time_limit": 10})
    assert response.status_code == 201, response.json()
    assert response.json()["partition"] == "cpu"
    run = Run.objects.get(pk=response.json()["id"])
    assert (run.partition, run.time_limit_min, run.state, run.owner) == ("cpu", 10, Run.State.QUEUED, owner)
    short = post(client, {"task": "toy", "config": {"steps": 2}, "partition": "gpu"})  # the default, within 30
    assert short.status_code == 201, short.json()
    assert Run.objects.get(pk=short.json()["id"]).time_limit_min == 30
    plain = post(client, {"task": "toy", "config": {"steps": 2}, "partition": "", "time_limit": None})
    assert plain.status_code == 201 and plain.json()["partition"] == ""
    assert Run.objects.get(pk=plain.json()["id"]).time_limit_min is None


@pytest.mark.django_db
def test_launch_run_queues_a_run_on_a_partition_and_refuses_a_bad_one_in_the_checks_words(
        offered, owner, toy_task):  # noqa: F811
    out = io.StringIO()
    call_command("launch_run", "--task", "toy", "--owner", "owner", "--set", "steps=2", "--partition", "cpu",
                 "--time-limit", "10", stdout=out)
    run = Run.objects.get()
    assert (run.partition, run.time_limit_min, run.state) == ("cpu", 10, Run.State.QUEUED)
    assert out.getvalue().strip().endswith("for Slurm partition cpu.") and f"Queued run {run.pk} " in out.getvalue()
    refusals = [(["--partition", "gpu", "--time-limit", "45"],
                 "The run was not created: time_limit: 45 minutes is over partition gpu's limit (sinfo) of 30 minutes."),
                (["--partition", "nosuch"], "partition: Partition 'nosuch' is not offered here"),
                (["--time-limit", "10"], "time_limit: A time limit applies to a run on a Slurm partition")]
    for arguments, words in refusals:
        with pytest.raises(CommandError) as refused:
            call_command("launch_run", "--task", "toy", "--owner", "owner", *arguments, stdout=io.StringIO())
        assert words in str(refused.value), (arguments, str(refused.value))
    assert Run.objects.count() == 1
