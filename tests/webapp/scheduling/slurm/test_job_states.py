"""What an ended Slurm job means for its run (webapp/scheduling/slurm/services.py `job_ended`): the
trainer's final status in its event log wins; otherwise Slurm's words decide: a time limit after progress
submits the run again as its next attempt, before any step it is interrupted, a cancel cancels (pruned
for a sweep's pruned run), any other end fails it with the job's output. The token is revoked once the
run ended. `job_follow` is asked of a real, private Slurm (tests/slurm_cluster.py) with real jobs."""

from __future__ import annotations

import json

import pytest

from tests.webapp.runs.factories import make_run
from webapp.runs.models import Run, StepMetric
from webapp.scheduling.models import SlurmJob
from webapp.scheduling.slurm import services, tools

pytestmark = pytest.mark.django_db

TOKEN = services.token_hash("the-jobs-key")


@pytest.fixture(autouse=True)
def slurm_runs_dir(settings, tmp_path):
    settings.COHORT_SLURM_RUNS_DIR = tmp_path / "slurm-runs"
    return settings.COHORT_SLURM_RUNS_DIR


def slurm_run(owner, *, state: str = Run.State.RUNNING, job_id: str = "4242", start_step: int = 0,
              **fields) -> tuple[Run, SlurmJob]:
    run = make_run(owner, state=state, partition="cpu", time_limit_min=10, **fields)
    job = SlurmJob.objects.create(run=run, job_id=job_id, state="RUNNING", token_hash=TOKEN, start_step=start_step)
    services.run_directory(run.pk, on_slurm=True).mkdir(parents=True)
    return run, job


def event_log(run: Run, *events: dict, torn: str = "") -> None:
    """The run's events.jsonl on the shared filesystem, as its trainer wrote it (`torn`: a cut last line)."""
    path = services.run_directory(run.pk, on_slurm=True) / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events) + torn)


def step(number: int, attempt: int = 1) -> dict:
    return {"type": "step", "attempt": attempt, "step": number, "metrics": {"reward/mean": number / 10}}


def status(state: str, attempt: int = 1, step_: int = 0, **extra) -> dict:
    return {"type": "status", "state": state, "attempt": attempt, "step": step_, **extra}


def settled(run: Run, job: SlurmJob, fields: dict[str, str]) -> tuple[Run, SlurmJob]:
    services.job_ended(run, job, fields)
    run.refresh_from_db()
    job.refresh_from_db()
    return run, job


def steps_of(run: Run) -> list[tuple[int, int]]:
    return list(StepMetric.objects.filter(run=run).order_by("step", "attempt").values_list("step", "attempt"))


# --- job_ended, with Slurm's fields as scontrol gives them -----------------------------------------
def test_a_failed_job_without_the_trainers_word_fails_the_run_with_slurms_words_and_its_output(owner):
    run, job = slurm_run(owner)
    output = services.run_directory(run.pk, on_slurm=True) / "slurm-4242.out"
    output.write_text("x" * 5000 + "\nTraceback (most recent call last):\nRuntimeError: boom\n")
    run, job = settled(run, job, {"JobState": "FAILED", "ExitCode": "1:0", "NodeList": "n1"})
    assert run.state == Run.State.FAILED and run.finished_at is not None
    head, tail = run.error.split("\n", 1)
    assert head == "Slurm: FAILED, exit code 1:0, on n1"
    assert tail.endswith("Traceback (most recent call last):\nRuntimeError: boom") and len(tail) <= 3000
    assert (job.state, job.token_hash) == ("FAILED", "") and job.ended


def test_a_job_that_ended_before_the_tick_saw_it_run_fails_its_queued_run(owner):
    run, job = slurm_run(owner, state=Run.State.QUEUED)
    run, job = settled(run, job, {"JobState": "OUT_OF_MEMORY", "ExitCode": "0:125", "NodeList": "(null)"})
    assert (run.state, run.error) == (Run.State.FAILED, "Slurm: OUT_OF_MEMORY, exit code 0:125")  # no output file
    assert run.started_at is not None and job.token_hash == ""


def test_a_time_limit_after_progress_submits_the_run_again_as_its_next_attempt(owner):
    run, job = slurm_run(owner, start_step=1, current_step=3)
    run, job = settled(run, job, {"JobState": "TIMEOUT", "ExitCode": "0:15", "NodeList": "n1"})
    assert (run.state, run.attempt, run.error, run.finished_at) == (Run.State.QUEUED, 2, "", None)
    assert job.state == "TIMEOUT" and job.ended  # so the next tick submits it (queued, its job ended)
    assert services.slurm_runs().filter(pk=run.pk).exists()


@pytest.mark.parametrize("slurm_state", ["PREEMPTED", "NODE_FAIL"])
def test_a_preemption_or_a_lost_node_after_progress_submits_it_again_too(owner, slurm_state):
    run, job = slurm_run(owner, start_step=0, current_step=1)
    run, _ = settled(run, job, {"JobState": slurm_state, "ExitCode": "0:0"})
    assert (run.state, run.attempt) == (Run.State.QUEUED, 2)


def test_a_time_limit_before_any_step_of_the_job_interrupts_the_run(owner):
    run, job = slurm_run(owner, start_step=2, current_step=2)
    run, job = settled(run, job, {"JobState": "TIMEOUT", "ExitCode": "0:15", "NodeList": "n1"})
    assert run.state == Run.State.INTERRUPTED and run.attempt == 1
    assert run.error == "Slurm: TIMEOUT, exit code 0:15, on n1, before any step of this job; resume to submit it again"
    assert job.token_hash == ""
    queued, queued_job = slurm_run(owner, state=Run.State.QUEUED)  # never seen running: nothing to resume
    queued, _ = settled(queued, queued_job, {"JobState": "TIMEOUT", "ExitCode": "0:15"})
    assert queued.state == Run.State.FAILED and "before any step of this job" in queued.error


def test_the_trainers_final_status_in_the_event_log_wins_over_slurms_state(owner):
    run, job = slurm_run(owner)
    event_log(run, status("running"), step(1), step(2), step(3), status("succeeded", step_=3),
              torn='{"type": "st')
    run, job = settled(run, job, {"JobState": "FAILED", "ExitCode": "1:0", "NodeList": "n1"})
    assert (run.state, run.error) == (Run.State.SUCCEEDED, "")
    assert steps_of(run) == [(1, 1), (2, 1), (3, 1)]  # what the job could not post is read from the log
    assert run.current_step == 3 and job.token_hash == "" and job.state == "FAILED"


def test_the_trainers_failure_is_kept_in_its_words_and_a_suspend_after_progress_resubmits(owner):
    failed, failed_job = slurm_run(owner, state=Run.State.QUEUED)
    event_log(failed, status("running"), status("failed", error="CUDA out of memory"))
    failed, _ = settled(failed, failed_job, {"JobState": "COMPLETED", "ExitCode": "0:0"})
    assert (failed.state, failed.error) == (Run.State.FAILED, "CUDA out of memory")
    suspended, suspended_job = slurm_run(owner)
    event_log(suspended, status("running"), step(1), status("suspended", step_=1))
    suspended, _ = settled(suspended, suspended_job, {"JobState": "COMPLETED", "ExitCode": "0:0"})
    assert (suspended.state, suspended.attempt) == (Run.State.QUEUED, 2)


def test_a_final_status_of_an_earlier_attempt_does_not_settle_the_newest(owner):
    run, job = slurm_run(owner, attempt=2, start_step=3, current_step=3)
    event_log(run, status("running"), step(1), step(2), step(3), status("succeeded", step_=3))
    run, _ = settled(run, job, {"JobState": "FAILED", "ExitCode": "2:0", "NodeList": "n1"})
    assert (run.state, run.error) == (Run.State.FAILED, "Slurm: FAILED, exit code 2:0, on n1")


def test_catching_up_after_a_resumed_attempt_stores_every_step_once(owner):
    from webapp.runs.ingest.trainer_events import trainer_events_record

    run, job = slurm_run(owner, start_step=1)
    first = [status("running"), step(1), step(2), step(3)]  # attempt 1 checkpointed at step 1 only
    second = [status("running", attempt=2, step_=1), step(2, attempt=2), step(3, attempt=2)]
    trainer_events_record(run, first)  # what the jobs posted as they trained
    trainer_events_record(run, second)
    assert steps_of(run) == [(1, 1), (2, 2), (3, 2)]
    event_log(run, *first, *second, status("succeeded", attempt=2, step_=3))
    Run.objects.filter(pk=run.pk).update(attempt=2)
    run.refresh_from_db()
    run, _ = settled(run, job, {"JobState": "COMPLETED", "ExitCode": "0:0"})
    assert run.state == Run.State.SUCCEEDED
    assert steps_of(run) == [(1, 1), (2, 2), (3, 2)]


def test_a_job_cancelled_while_its_run_was_queued_cancels_the_run_in_slurms_words(owner):
    run, job = slurm_run(owner, state=Run.State.QUEUED)
    run, job = settled(run, job, {"JobState": "CANCELLED by 0", "ExitCode": "0:0"})
    assert (run.state, run.error) == (Run.State.CANCELLED, "Slurm: CANCELLED, exit code 0:0")
    assert job.state == "CANCELLED" and job.token_hash == ""


def test_a_job_cancelled_outside_cohort_cancels_its_running_run(owner):
    run, job = slurm_run(owner)
    run, job = settled(run, job, {"JobState": "CANCELLED by 1000", "ExitCode": "0:15", "NodeList": "n1"})
    assert job.token_hash == "" and job.ended
    assert (run.state, run.error) == (Run.State.CANCELLED, "Slurm: CANCELLED, exit code 0:15, on n1")


@pytest.mark.parametrize(("pruned_reason", "ends"), [("", Run.State.CANCELLED), ("below the median", Run.State.PRUNED)])
@pytest.mark.parametrize("slurm_state", ["CANCELLED", "COMPLETED", "TIMEOUT"])
def test_a_cancelling_run_ends_cancelled_or_pruned_whatever_slurms_state(owner, pruned_reason, ends, slurm_state):
    run, job = slurm_run(owner, state=Run.State.CANCELLING, pruned_reason=pruned_reason, current_step=2)
    run, job = settled(run, job, {"JobState": slurm_state, "ExitCode": "0:15", "NodeList": "n1"})
    assert (run.state, run.error) == (ends, "")
    assert job.token_hash == ""


def test_a_run_that_ended_by_its_posts_or_was_interrupted_is_left_as_it_is(owner):
    for state in (Run.State.SUCCEEDED, Run.State.INTERRUPTED):
        run, job = slurm_run(owner, state=state, error="as it was")
        run, job = settled(run, job, {"JobState": "FAILED", "ExitCode": "1:0"})
        assert (run.state, run.error) == (state, "as it was")
        assert job.token_hash == "" and job.state == "FAILED" and job.ended


# --- job_follow, asking a real Slurm about real jobs ----------------------------------------------
@pytest.fixture
def slurm_env(cluster, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", cluster.environ["SLURM_CONF"])
    monkeypatch.setenv("PATH", cluster.environ["PATH"])
    return cluster


@pytest.fixture
def submit(slurm_env, tmp_path):
    """submit(partition) -> the id of a real job sleeping there; every one is cancelled after the test."""
    submitted = []

    def sleeper(partition: str = "cpu") -> str:
        script = tmp_path / f"sleeper-{len(submitted)}.sbatch"
        script.write_text(f"#!/bin/bash\n#SBATCH --partition={partition}\n#SBATCH --requeue\n"
                          f"#SBATCH --output={tmp_path}/slurm-%j.out\nsleep 300\n")
        submitted.append(tools.submit(str(script), workdir=str(tmp_path)))
        return submitted[-1]

    yield sleeper
    for job_id in submitted:
        tools.cancel(job_id)


def follow(run: Run, job: SlurmJob) -> tuple[Run, SlurmJob]:
    services.job_follow(run, job)
    run.refresh_from_db()
    job.refresh_from_db()
    return run, job


def test_a_pending_job_keeps_its_run_queued_with_slurms_reason(owner, submit):
    run, job = slurm_run(owner, state=Run.State.QUEUED, job_id=submit("closed"))
    run, job = follow(run, job)
    assert (job.state, job.reason, job.nodes, job.restarts) == ("PENDING", "PartitionDown", "", 0)
    assert job.checked_at is not None and not job.ended
    assert run.state == Run.State.QUEUED and job.token_hash == TOKEN


def test_a_running_job_runs_its_run_and_slurms_requeue_queues_it_for_the_same_attempt(owner, submit, slurm_env):
    job_id = submit("cpu")
    slurm_env.wait_job(int(job_id), {"RUNNING"})
    run, job = slurm_run(owner, state=Run.State.QUEUED, job_id=job_id)
    run, job = follow(run, job)
    assert run.state == Run.State.RUNNING and run.started_at is not None
    assert job.state == "RUNNING" and job.nodes == slurm_env.node_names[0]
    assert run.worker == f"slurm job {job_id} on {slurm_env.node_names[0]}"
    slurm_env.run("scontrol", "requeue", job_id, check=True)
    slurm_env.wait_job(int(job_id), {"PENDING"})
    run, job = follow(run, job)
    assert (job.state, job.restarts) == ("PENDING", 1)
    assert (run.state, run.attempt) == (Run.State.QUEUED, 1)  # the job's next start posts its own attempt
    assert job.token_hash == TOKEN and not job.ended


def test_a_cancelling_run_gets_its_stop_file_and_one_scancel_and_ends_when_the_job_did(owner, submit, slurm_env):
    job_id = submit("cpu")
    slurm_env.wait_job(int(job_id), {"RUNNING"})
    run, job = slurm_run(owner, state=Run.State.CANCELLING, job_id=job_id)
    run, job = follow(run, job)
    assert (services.run_directory(run.pk, on_slurm=True) / "STOP").exists()
    sent = job.cancel_sent_at
    assert sent is not None and run.state == Run.State.CANCELLING
    slurm_env.wait_job(int(job_id), {"CANCELLED"})
    run, job = follow(run, job)
    assert job.cancel_sent_at == sent  # scancel once
    assert run.state == Run.State.CANCELLED and job.state == "CANCELLED" and job.ended and job.token_hash == ""


def test_a_job_slurm_no_longer_knows_settles_its_run_by_the_trainers_log(owner, slurm_env):
    run, job = slurm_run(owner, job_id="999999")
    event_log(run, status("running"), step(1), status("succeeded", step_=1))
    run, job = follow(run, job)
    assert run.state == Run.State.SUCCEEDED and steps_of(run) == [(1, 1)]
    assert job.ended and job.state == "COMPLETED" and job.token_hash == ""


def test_slurms_words_about_an_ended_job():
    from webapp.scheduling.slurm.jobs import job_state, job_words

    assert job_state({"JobState": "CANCELLED by 0"}) == "CANCELLED"
    assert job_state({"JobState": "running+completing"}) == "RUNNING"
    assert job_words({"JobState": "TIMEOUT", "ExitCode": "0:15", "NodeList": "n1"}) == "TIMEOUT, exit code 0:15, on n1"
    assert job_words({"JobState": "FAILED", "NodeList": "(null)"}) == "FAILED"


def test_a_job_without_a_state_is_said_as_unknown():
    from webapp.scheduling.slurm.jobs import job_state, job_words

    assert job_state({}) == ""
    assert job_words({"ExitCode": "0:0"}) == "?, exit code 0:0"
