"""Runs on a real Slurm: launched from the form onto a partition, trained as real batch jobs whose
steps reach the database over HTTP only, requeued and resumed, signalled before their time limit,
cancelled with scancel, and refused in Slurm's words. The test decides when steps happen (the step
gate) and when Slurm is asked (`tick()`); it never sleeps to guess."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.conftest import wait_for
from tests.webapp.runs.factories import make_task
from tests.webapp.runs.launch.test_launch import launch_data
from tests.webapp.scheduling.slurm.conftest import job_environ
from tests.workers.test_run_train import toy_config
from webapp.runs.launch.catalog import catalog_sync
from webapp.runs.launch.check import launch_check
from webapp.runs.models import Run, StepMetric, Task
from webapp.runs.services import run_cancel, run_create
from webapp.scheduling.models import SlurmJob

NEUTRAL = ("runs through a real Slurm: Slurm's side reads the same on either backend, and the ingest and state "
           "changes they drive are those of every run, tested on both backends elsewhere")
pytestmark = [pytest.mark.slow, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]


def job_of(run: Run) -> SlurmJob:
    return SlurmJob.objects.get(run=run)


def steps_of(run: Run) -> list[tuple[int, int]]:
    return list(StepMetric.objects.filter(run=run).order_by("step").values_list("step", "attempt"))


def launch(owner, partition: str = "cpu", time_limit: int | None = None, **config) -> Run:
    checked = launch_check(owner, task=make_task(), values=toy_config(**config).to_dict(), partition=partition,
                           time_limit=time_limit)
    return run_create(checked)


def state_is(run: Run, *states: str):
    return lambda: (run.refresh_from_db(), run.state in states)[1]


def test_a_run_launched_from_the_form_trains_as_a_job_posts_over_http_and_resumes_after_a_requeue(
        slurm_site, client, owner):
    cluster, gate = slurm_site.cluster, slurm_site.gate
    catalog_sync()
    toy = Task.objects.get(name="toy")
    gate.allow(1)
    client.force_login(owner)
    form = client.get(reverse("runs:new")).content.decode()
    assert 'name="partition"' in form and "cpu: gpu:2 per node" in form and "1 of 1 node free" in form
    # Slurm is away at the first tick: the run waits, queued, with the reason, and nothing is lost.
    cluster.stop_controller()
    response = client.post(reverse("runs:new"), launch_data(toy, steps=4, checkpoint_every=1, group_size=4,
                                                            rollouts_per_example=4, eval_every=0, partition="cpu",
                                                            time_limit="20"))
    assert response.status_code == 302, response.content.decode()[:3000]
    run = Run.objects.get()
    assert (run.partition, run.time_limit_min, run.state) == ("cpu", 20, Run.State.QUEUED)
    slurm_site.tick()
    job = job_of(run)
    assert not job.job_id and "Slurm is unreachable" in job.message and "Unable to contact" in job.message
    run.refresh_from_db()
    assert run.state == Run.State.QUEUED
    cluster.start_controller()
    slurm_site.until(lambda: job_of(run).job_id, "the job to be submitted once Slurm answers", run)
    job = job_of(run)
    assert job.message == "" and "#SBATCH --partition=cpu" in job.script and "#SBATCH --time=20" in job.script
    assert "--export=NONE" in job.script and "--requeue" in job.script
    squeue = cluster.run("squeue", "--noheader", "--format=%i %j").stdout
    assert f"{job.job_id} cohort-run-{run.pk}" in squeue
    # Running, held by the gate after step 1: its steps came over HTTP from a process with no database.
    slurm_site.until(lambda: StepMetric.objects.filter(run=run).count() == 1, "step 1 to be stored", run)
    run.refresh_from_db()
    assert run.state == Run.State.RUNNING and run.worker.startswith(f"slurm job {job.job_id} on ")
    pids = cluster.job_pids(int(job.job_id))
    assert pids
    for pid in pids:
        env = job_environ(pid)
        assert "DATABASE_URL" not in env and "REDIS_URL" not in env
    # An admin's `scontrol requeue`: the attempt stops, the job comes back and resumes from its checkpoint.
    cluster.run("scontrol", "requeue", job.job_id, check=True)
    slurm_site.until(lambda: job_of(run).restarts >= 1 or state_is(run, Run.State.QUEUED)(), "Slurm to requeue", run)
    gate.allow(100)
    slurm_site.until(state_is(run, Run.State.SUCCEEDED, Run.State.FAILED), "the run to end", run, timeout_s=180)
    assert run.state == Run.State.SUCCEEDED, f"{run.error}\n{slurm_site.outputs(run)}"
    steps = steps_of(run)
    assert [step for step, _ in steps] == [1, 2, 3, 4]  # every step stored once
    assert run.attempt == 2 and {attempt for step, attempt in steps if step > 1} == {2}
    assert job_of(run).token_hash == ""  # revoked with the trainer's final status
    adapter = client.get(reverse("runs:adapter", args=[run.pk]))  # read from the shared filesystem
    assert adapter.status_code == 200 and adapter["Content-Type"] == "application/zip"
    slurm_site.until(lambda: job_of(run).ended, "Slurm to say the job ended", run)
    job = job_of(run)
    assert job.state == "COMPLETED" and job.restarts == 1


def test_a_cancelled_job_is_scancelled_and_leaves_no_process(slurm_site, owner):
    gate = slurm_site.gate
    gate.allow(1)
    run = launch(owner, steps=5)
    slurm_site.until(lambda: StepMetric.objects.filter(run=run).count() == 1, "step 1 to be stored", run)
    job = job_of(run)
    assert slurm_site.cluster.job_pids(int(job.job_id))
    run_cancel(run)
    run.refresh_from_db()
    assert run.state == Run.State.CANCELLING
    slurm_site.until(state_is(run, Run.State.CANCELLED), "the run to be cancelled", run)
    assert job_of(run).ended and job_of(run).state in ("CANCELLED", "COMPLETED")  # cancelling until Slurm said so
    wait_for(lambda: not slurm_site.cluster.job_pids(int(job.job_id)), 30, "the job's processes to end")
    assert steps_of(run) == [(1, 1)]


def test_before_its_time_limit_a_job_checkpoints_is_requeued_and_the_run_finishes(slurm_site, owner, settings):
    gate = slurm_site.gate
    settings.COHORT_SLURM_SIGNAL_S = 55  # a 1-minute job is warned about 5 s after it starts
    gate.allow(1)
    run = launch(owner, time_limit=1, steps=3)
    folder = slurm_site.runs_dir / f"run-{run.pk}"
    slurm_site.until(lambda: StepMetric.objects.filter(run=run).count() == 1, "step 1 to be stored", run)
    # Slurm's warning reaches the job: the trainer, held before step 2, checkpoints and stops; Slurm requeues.
    slurm_site.until(lambda: job_of(run).restarts >= 1, "the warned job to be requeued", run, timeout_s=150)
    assert "suspended at a checkpoint" in slurm_site.outputs(run) or (folder / "events.jsonl").read_text().count(
        '"suspended"') >= 1
    gate.allow(100)
    slurm_site.until(state_is(run, Run.State.SUCCEEDED, Run.State.FAILED), "the run to end", run, timeout_s=180)
    assert run.state == Run.State.SUCCEEDED, f"{run.error}\n{slurm_site.outputs(run)}"
    assert [step for step, _ in steps_of(run)] == [1, 2, 3] and run.attempt >= 2


def test_slurm_refusals_are_said_beside_the_field_or_fail_the_run_in_slurms_words(slurm_site, client, owner,
                                                                                  settings):
    catalog_sync()
    toy = Task.objects.get(name="toy")
    client.force_login(owner)
    cases = [({"partition": "nosuch"}, "partition", "is not offered here"),
             ({"partition": "gpu", "num_processes": "3", "examples_per_step": "6"}, "partition", "has gpu:2 per node on 1 node: 2 GPUs at most"),
             ({"partition": "gpu", "time_limit": "45"}, "time_limit", "over partition gpu's limit (sinfo) of 30"),
             ({"time_limit": "10"}, "time_limit", "applies to a run on a Slurm partition")]
    for changes, field, words in cases:
        response = client.post(reverse("runs:new"), launch_data(toy, **changes))
        assert response.status_code == 400, (changes, response.status_code)
        errors = response.context["form"].errors
        assert words in " ".join(errors.get(field, [])), (changes, errors)
    assert not Run.objects.exists()
    # Two GPUs fit the gpu partition and are scheduled for real; sbatch refusing an account fails the run.
    slurm_site.gate.allow(0)
    two = launch(owner, partition="gpu", num_processes=2, steps=1)
    slurm_site.until(lambda: job_of(two).state == "RUNNING", "the two-GPU job to start", two)
    assert "#SBATCH --gres=gpu:2" in job_of(two).script

    def devices() -> set[str]:  # the job's processes once its batch script started them
        pids = slurm_site.cluster.job_pids(int(job_of(two).job_id))
        return {env["CUDA_VISIBLE_DEVICES"] for env in map(job_environ, pids) if "CUDA_VISIBLE_DEVICES" in env}

    assert wait_for(devices, 60, "the two-GPU job's processes") == {"0,1"}  # Slurm gave it both of the node's GPUs
    run_cancel(two)
    settings.COHORT_SLURM_ACCOUNT = "nobody"
    refused = launch(owner, partition="lab", steps=1)
    slurm_site.tick()
    refused.refresh_from_db()
    assert refused.state == Run.State.FAILED and "Slurm refused the job (sbatch)" in refused.error
    assert "account" in refused.error.lower() or "permission" in refused.error.lower(), refused.error
    slurm_site.until(state_is(two, Run.State.CANCELLED), "the two-GPU run's cancel", two)


@pytest.mark.parametrize("site_cluster", ["two nodes"], indirect=True)
def test_two_ranks_train_one_run_through_srun_one_on_each_of_two_nodes(slurm_site, owner, settings):
    # The site's template spreads a CPU run's processes over nodes (a later #SBATCH line wins).
    settings.COHORT_SLURM_SBATCH_LINES = "--nodes=2\n#SBATCH --ntasks-per-node=1"
    run = launch(owner, steps=2, num_processes=2)
    slurm_site.until(state_is(run, Run.State.SUCCEEDED, Run.State.FAILED), "the two-rank run to end", run,
                     timeout_s=240)
    assert run.state == Run.State.SUCCEEDED, f"{run.error}\n{slurm_site.outputs(run)}"
    job = job_of(run)
    assert "#SBATCH --ntasks=2" in job.script and "#SBATCH --ntasks-per-node=1" in job.script
    assert job.nodes == "n[1-2]" and job.state == "COMPLETED" or slurm_site.until(
        lambda: job_of(run).nodes == "n[1-2]", "the job's nodes", run)
    assert [step for step, _ in steps_of(run)] == [1, 2]
    events = (slurm_site.runs_dir / f"run-{run.pk}" / "events.jsonl").read_text()
    assert '"processes": 2' in events  # rank 0 reported a world of two


def test_a_job_submitted_by_a_tick_that_died_before_storing_its_id_is_adopted_not_submitted_twice(slurm_site, owner):
    run = launch(owner, partition="closed", steps=1)
    SlurmJob.objects.create(run=run)
    # What sbatch took before the tick died: a job of the run's name that the database never heard of.
    orphan = slurm_site.cluster.sbatch(None, "--parsable", "--partition=closed", f"--job-name=cohort-run-{run.pk}",
                                       "--wrap", "true")
    slurm_site.tick()
    assert job_of(run).job_id == str(orphan)
    named = slurm_site.cluster.run("squeue", "--noheader", f"--name=cohort-run-{run.pk}", "--format=%i").stdout.split()
    assert named == [str(orphan)]
    run_cancel(run)
    slurm_site.until(lambda: job_of(run).ended, "the adopted job to be scancelled", run)
