"""`cohort follow` (the real console script) on a verl run being written, against the real server: each
step sent once it is complete; a server restart and the follower's own restart (killed, started again)
lose nothing and store nothing twice; told to stop, it finishes the run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import asgi_server_process, free_port, service_env, stop_process_group, wait_for
from tests.trainer.importers.writers import write_verl_step
from webapp.api.services import token_create
from webapp.runs.models import Rollout, Run, StepMetric

NEUTRAL = ("the follower's reading and its upload over HTTP; the external-run endpoints are tested on both "
           "backends by the web app's API tests")
pytestmark = [pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]

COHORT_COMMAND = str(Path(sys.executable).parent / "cohort")


def follower(url: str, key: str, root: Path, log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen([COHORT_COMMAND, "follow", str(root), "--format", "verl", "--task", "gsm8k",
                                 "--poll", "0.1", "--quiet", "600"],
                                env={**os.environ, "COHORT_TOKEN": key, "COHORT_URL": url},
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stored() -> list[int]:
    run = Run.objects.filter(origin="verl").first()
    if run is None:
        return []
    return list(StepMetric.objects.filter(run=run).order_by("step").values_list("step", flat=True))


def test_following_a_verl_run_survives_the_servers_restart_and_its_own(transactional_db, owner, tmp_path):
    key = token_create(user=owner, name="follow")[1]
    root = tmp_path / "verl-run"
    root.mkdir()
    env = service_env(DATABASE_CONN_MAX_AGE="0")
    port = free_port()
    log = tmp_path / "follow.log"
    with asgi_server_process(tmp_path / "daphne-1.log", env, port=port) as url:
        process = follower(url, key, root, log)  # started before verl wrote anything
        for step in (1, 2):
            write_verl_step(root, step)
        wait_for(lambda: stored() == [1, 2], 60, "steps 1 and 2 to be stored", log)
    # The server is down while verl goes on writing; it comes back only once the follower has found it down
    # (else a quick restart would fall between two of its polls, and the test would not test the outage).
    for step in (3, 4):
        write_verl_step(root, step)
    wait_for(lambda: "did not answer" in log.read_text(), 60, "the follower to find the server down", log)
    with asgi_server_process(tmp_path / "daphne-2.log", env, port=port):
        wait_for(lambda: stored() == [1, 2, 3, 4], 60, "steps 3 and 4 after the restart", log)
        wait_for(lambda: "answers again" in log.read_text(), 60, "the follower to say the server answers again", log)
        # The follower is killed outright and started again: it resumes from the server's newest step.
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)
        write_verl_step(root, 5)
        process = follower(url, key, root, log)
        try:
            wait_for(lambda: stored() == [1, 2, 3, 4, 5], 60, "step 5 from the restarted follower", log)
            run = Run.objects.get()
            assert run.state == "running" and run.name == "grpo-gsm8k"
            process.send_signal(signal.SIGTERM)
            assert process.wait(60) == 0, log.read_text()
        finally:
            stop_process_group(process)
    run.refresh_from_db()
    assert run.state == "succeeded" and StepMetric.objects.filter(run=run).count() == 5
    assert Rollout.objects.filter(run=run).count() == 5 * 6  # each step's dump, once
