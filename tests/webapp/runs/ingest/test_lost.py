"""Runs trained elsewhere whose trainer vanished (webapp/runs/ingest/lost.py): the reaper marks them lost
after COHORT_EXTERNAL_STALE_AFTER without a post, their page says since when, a later post reopens
them and their trainer's finish still ends them. Against the real server, the real SDK in a process
of its own that is killed with SIGKILL, and the real `cohort sync` command."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client
from django.utils import dateformat, timezone

import cohort
from tests.conftest import asgi_server_process, free_port, service_env
from tests.webapp.runs.factories import make_task
from webapp.api.services import token_create
from webapp.runs.ingest.external import (
    ExternalConflict,
    external_run_finish,
    external_run_start,
    external_steps_log,
)
from webapp.runs.ingest.lost import external_runs_mark_lost
from webapp.runs.models import Run, StepMetric
from workers.tasks import reap_stale_runs_task

COHORT_COMMAND = str(Path(sys.executable).parent / "cohort")

# Logs steps 1-3 and waits for their upload; then (the test stops the server) logs 4 and 5, says so,
# and waits for the SIGKILL that the test sends: a trainer killed mid-run, its last steps in its folder.
KILLED_TRAINER = """
import sys, cohort
run = cohort.init(sys.argv[1], task=sys.argv[2], dir=sys.argv[3])
for step in range(1, 4):
    run.log({"loss": 1 / step}, step=step)
run.flush()
assert run.wait(60)
print(run.folder, flush=True)
sys.stdin.readline()
for step in (4, 5):
    run.log({"loss": 1 / step}, step=step)
run.flush()
print("logged", flush=True)
sys.stdin.readline()
"""


def steps_of(run_id: int) -> list[int]:
    return list(StepMetric.objects.filter(run_id=run_id).order_by("step").values_list("step", flat=True))


@pytest.mark.django_db(transaction=True)
@pytest.mark.filterwarnings("ignore:cohort. (cannot upload|reached):cohort.sdk.run.CohortWarning")
def test_a_killed_trainers_run_is_lost_until_it_posts_again_and_a_live_one_still_finishes(owner, tmp_path, settings):
    task = make_task("toy_format")
    key = token_create(user=owner, name="lost")[1]
    env, port = service_env(), free_port()
    with asgi_server_process(tmp_path / "daphne-1.log", env, port=port) as url:
        trainer = subprocess.Popen([sys.executable, "-c", KILLED_TRAINER, url, task.name, str(tmp_path / "killed")],
                                   env={**os.environ, "COHORT_TOKEN": key}, stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        folder = trainer.stdout.readline().strip()
        assert folder, trainer.communicate(timeout=60)
        alive = cohort.init(url, key, task=task.name, dir=tmp_path / "alive")  # a trainer that only paused
        alive.log({"loss": 1.0}, step=1)
        alive.flush()
        assert alive.wait(60)
    trainer.stdin.write("go\n")
    trainer.stdin.flush()
    assert trainer.stdout.readline().strip() == "logged", trainer.stderr.read()
    trainer.send_signal(signal.SIGKILL)  # its steps 4 and 5 never reached the server
    trainer.wait(30)
    killed = Run.objects.get(external_id=Path(folder).name)
    assert (killed.state, steps_of(killed.pk)) == ("running", [1, 2, 3])

    settings.COHORT_EXTERNAL_STALE_AFTER = 0  # the reaper's beat, an hour later
    assert sorted(reap_stale_runs_task()) == sorted([killed.pk, alive.id])
    killed.refresh_from_db()
    assert killed.state == "lost"
    browser = Client()
    browser.force_login(owner)
    page = browser.get(f"/runs/{killed.pk}/").content.decode()
    last_post = dateformat.format(timezone.localtime(killed.heartbeat_at), "c")
    assert 'id="lost-note">Lost: its trainer has posted nothing since' in page and f'datetime="{last_post}"' in page
    assert 'class="state state-lost"' in page

    with asgi_server_process(tmp_path / "daphne-2.log", env, port=port):
        done = subprocess.run([COHORT_COMMAND, "sync", folder], env={**os.environ, "COHORT_TOKEN": key},
                              capture_output=True, text=True, timeout=120)
        alive.log({"loss": 0.5}, step=2)  # the paused trainer posts again, then finishes
        alive.finish(timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 steps: 2 steps uploaded, 0 already there; not finished" in done.stdout  # from its watermark
    killed.refresh_from_db()
    assert (killed.state, steps_of(killed.pk)) == ("running", [1, 2, 3, 4, 5])  # reopened by the upload
    assert 'id="lost-note" hidden' in browser.get(f"/runs/{killed.pk}/").content.decode()
    assert alive.wait(0) and Run.objects.get(pk=alive.id).state == "succeeded" and steps_of(alive.id) == [1, 2]


@pytest.mark.django_db
def test_lost_marks_only_silent_running_runs_trained_elsewhere_and_a_lost_run_can_finish(owner):
    make_task("toy_format")
    silent, _ = external_run_start(owner, client_id="silent", task="toy_format")
    recent, _ = external_run_start(owner, client_id="recent", task="toy_format")
    ended, _ = external_run_start(owner, client_id="ended", task="toy_format")
    external_run_finish(ended, state="succeeded")
    hour_ago = timezone.now() - dt.timedelta(hours=2)
    Run.objects.filter(pk__in=[silent.pk, ended.pk]).update(heartbeat_at=hour_ago)
    assert external_runs_mark_lost(stale_after=dt.timedelta(hours=1)) == [silent.pk]
    assert external_runs_mark_lost(stale_after=dt.timedelta(hours=1)) == []  # once
    silent.refresh_from_db()
    assert silent.state == "lost" and not silent.is_active  # it no longer counts against its owner's limit
    assert external_steps_log(silent, [{"step": 1, "metrics": {}, "rollouts": []}]) == {"stored": [1], "skipped": []}
    silent.refresh_from_db()
    assert silent.state == "running" and silent.heartbeat_at > hour_ago
    Run.objects.filter(pk=silent.pk).update(state="lost")
    assert external_run_finish(silent, state="failed", error="killed").state == "failed"
    with pytest.raises(ExternalConflict, match="already ended failed"):
        external_run_finish(silent, state="succeeded")
