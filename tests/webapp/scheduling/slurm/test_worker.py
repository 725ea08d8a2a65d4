"""The slurm queue's own Celery worker (on a cluster's login node): a launch onto a partition wakes it,
it submits the job with sbatch and, once the run is cancelled, scancels it; the beat wakes it every
COHORT_SLURM_POLL_S seconds only where Slurm is configured."""

from __future__ import annotations

import json

import pytest

from tests.conftest import celery_worker, service_env, wait_for
from tests.webapp.scheduling.slurm.test_slurm_runs import job_of, launch
from tests.webapp.test_settings import run_python
from webapp.runs.models import Run
from webapp.runs.services import run_cancel
from webapp.scheduling.models import SlurmJob

NEUTRAL = ("a real worker on the slurm queue against a real Slurm; the tick's queries are tested on both backends "
           "by tests/webapp/scheduling/slurm/test_job_states.py")


@pytest.mark.slow
@pytest.mark.backend_neutral(reason=NEUTRAL)
@pytest.mark.django_db(transaction=True)
def test_a_launch_wakes_the_slurm_queues_worker_which_submits_and_later_cancels_the_job(slurm_site, owner, tmp_path,
                                                                                       settings):
    from webapp.celery import app

    cluster = slurm_site.cluster
    env = service_env(SLURM_CONF=cluster.environ["SLURM_CONF"], PATH=cluster.environ["PATH"],
                      COHORT_SLURM_PARTITIONS="cpu,closed", COHORT_SLURM_RUNS_DIR=str(settings.COHORT_SLURM_RUNS_DIR),
                      COHORT_SLURM_SERVER_URL=settings.COHORT_SLURM_SERVER_URL, COHORT_SLURM_POLL_S="3600")
    app.control.purge()
    with celery_worker(tmp_path / "slurm-worker.log", env, app=app, queues="slurm", name="slurm") as worker:
        run = launch(owner, partition="closed", steps=2)  # a down partition: the job waits, PENDING
        wait_for(lambda: SlurmJob.objects.filter(run=run).exclude(job_id="").exists(), 60,
                 "the slurm queue's worker to submit the job", worker.log_path)
        job = job_of(run)
        assert cluster.job(int(job.job_id))["JobState"] == "PENDING"
        run_cancel(run)
        run.refresh_from_db()
        assert run.state == Run.State.CANCELLED  # a queued run stops at once; its job is Slurm's to end
        def ticked_and_ended():  # the beat's wake-ups, sent by the test: one scancels, a later one sees it ended
            app.send_task("workers.tasks.slurm_tick_task", queue="slurm")
            return job_of(run).ended

        wait_for(ticked_and_ended, 60, "the worker to scancel the job", worker.log_path)
        assert cluster.job(int(job.job_id))["JobState"] == "CANCELLED"


def test_the_beat_wakes_the_slurm_queue_only_where_slurm_is_configured():
    code = ("import django, json; django.setup(); from django.conf import settings; "
            "print(json.dumps({k: v['schedule'] for k, v in settings.CELERY_BEAT_SCHEDULE.items()}))")
    offered = run_python(code, COHORT_SLURM_PARTITIONS="cpu,gpu", COHORT_SLURM_POLL_S="7")
    assert offered.returncode == 0, offered.stderr
    assert json.loads(offered.stdout.strip().splitlines()[-1])["slurm-tick"] == 7.0
    off = run_python(code)
    assert "slurm-tick" not in json.loads(off.stdout.strip().splitlines()[-1])
