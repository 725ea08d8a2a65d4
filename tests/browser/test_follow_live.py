"""`cohort follow` on a verl run written by another process, watched on the run page in a real browser:
each step the writer finishes reaches the open page, charts and step counter, with its groups."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.browser.session import PASSWORD, log_in
from tests.conftest import ROOT, stop_process_group, wait_for
from tests.suites import UI_ONLY
from webapp.api.services import token_create
from webapp.runs.models import Run, StepMetric

pytestmark = [pytest.mark.browser, pytest.mark.backend_neutral(reason=UI_ONLY), pytest.mark.django_db(transaction=True)]

COHORT_COMMAND = str(Path(sys.executable).parent / "cohort")
# The trainer's stand-in: it writes verl's files for a step when told (a line on stdin), so the test
# decides when steps happen.
WRITER = """
import sys
from pathlib import Path
from tests.trainer.importers.writers import write_verl_step
root = Path(sys.argv[1])
for line in sys.stdin:
    write_verl_step(root, int(line))
    print("wrote", int(line), flush=True)
"""


def steps_of_followed() -> list[int]:
    run = Run.objects.filter(origin="verl").first()
    return [] if run is None else list(StepMetric.objects.filter(run=run).values_list("step", flat=True))


def test_a_followed_verl_run_grows_on_its_open_page(page, screenshot, asgi_server, make_user, tmp_path):
    alice = make_user("alice", password=PASSWORD)
    key = token_create(user=alice, name="follow")[1]
    root = tmp_path / "verl-run"
    root.mkdir()
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(root)], cwd=ROOT, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    log = tmp_path / "follow.log"
    with open(log, "wb") as out:
        follow = subprocess.Popen([COHORT_COMMAND, "follow", str(root), "--format", "verl", "--task", "gsm8k",
                                   "--poll", "0.1"], env={**os.environ, "COHORT_TOKEN": key, "COHORT_URL": asgi_server},
                                  stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def write(step: int) -> None:
            writer.stdin.write(f"{step}\n")
            writer.stdin.flush()
            assert writer.stdout.readline().strip() == f"wrote {step}"

        write(1)
        wait_for(lambda: steps_of_followed() == [1], 60, "step 1 to be stored", log)
        run = Run.objects.get(origin="verl")
        log_in(page, asgi_server, "alice")
        page.goto(f"{asgi_server}/runs/{run.pk}/")
        page.wait_for_function("() => document.querySelector('#chart-reward')?.dataset.points === '1'")
        assert page.inner_text("#run-origin") == "verl"
        for step in (2, 3, 4):
            write(step)
            page.wait_for_function(f"() => document.getElementById('run-step').textContent === '{step}'")
        page.wait_for_function("() => document.querySelector('#chart-reward')?.dataset.points === '4'")
        screenshot("followed-verl-run")
    finally:
        stop_process_group(follow)
        stop_process_group(writer)
