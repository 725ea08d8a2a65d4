"""What a run's page and its row in the runs table say of its steps, its duration and its adapter,
for a run of Cohort's worker and for one trained elsewhere (the SDK): an SDK run says "3" steps (its
total when it gave one), lasts until its trainer's last post, and offers no adapter it cannot have."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.utils import timezone

from tests.webapp.runs.factories import make_run
from webapp.runs.ingest.external import external_run_finish, external_run_start, external_steps_log
from webapp.runs.models import Run
from webapp.runs.selectors import run_elapsed, run_list_filtered
from webapp.runs.services import run_directory
from webapp.runs.table.views import duration_text

pytestmark = pytest.mark.django_db


def sdk_run(owner, *, total_steps=0, seconds=95.0, finish=True) -> Run:
    run, _ = external_run_start(owner, client_id=f"c-{total_steps}-{finish}", task="toy-task", name="sdk loop",
                                total_steps=total_steps)
    external_steps_log(run, [{"step": step, "metrics": {"loss": 1.0 / step}} for step in (1, 2, 3)])
    started = timezone.now() - dt.timedelta(seconds=seconds)
    Run.objects.filter(pk=run.pk).update(started_at=started, heartbeat_at=started + dt.timedelta(seconds=seconds - 30))
    if finish:
        external_run_finish(run, state="succeeded")
        Run.objects.filter(pk=run.pk).update(finished_at=started + dt.timedelta(seconds=seconds))
    run.refresh_from_db()
    return run


def fact(body: str, name: str) -> str:
    """The text of a `<dt>name</dt><dd>...</dd>` fact, tags removed."""
    found = re.search(rf"<dt>{name}</dt><dd[^>]*>(.*?)</dd>", body, re.S)
    assert found, name
    return re.sub(r"<[^>]+>", "", found.group(1)).strip()


def row_cells(body: str, run: Run) -> list[str]:
    row = re.search(rf'<tr data-run="{run.pk}".*?</tr>', body, re.S).group(0)
    return [re.sub(r"<[^>]+>|\s+", " ", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]


def test_an_sdk_run_page_says_its_steps_and_duration_and_offers_no_adapter(client, owner):
    run = sdk_run(owner)
    client.force_login(owner)
    body = client.get(f"/runs/{run.pk}/").content.decode()
    assert fact(body, "Step") == "3"  # not "3 / 0", and no attempt: Cohort never restarts it
    assert fact(body, "Duration") == "1m 35s"
    assert 'id="adapter-download"' not in body and "Adapter (zip)" not in body
    assert client.get(f"/runs/{run.pk}/adapter.zip").status_code == 404  # what the link would have led to


def test_an_sdk_run_with_a_total_says_both(client, owner):
    run = sdk_run(owner, total_steps=10)
    client.force_login(owner)
    assert fact(client.get(f"/runs/{run.pk}/").content.decode(), "Step") == "3 / 10"


def test_a_running_sdk_run_lasts_until_its_trainers_last_post(client, owner):
    run = sdk_run(owner, seconds=400, finish=False)  # its last post was 30 s ago
    assert run_elapsed(run) == dt.timedelta(seconds=370)
    client.force_login(owner)
    body = client.get(f"/runs/{run.pk}/").content.decode()
    assert fact(body, "Duration") == "6m 10s to its trainer's last post"
    [row] = [r for r in run_list_filtered(owner) if r.pk == run.pk]
    assert row.elapsed == dt.timedelta(seconds=370)  # the table's column, in SQL, says the same


def test_the_runs_table_shows_an_sdk_runs_steps_and_duration(client, owner):
    sdk = sdk_run(owner)
    cohort = make_run(owner, state=Run.State.RUNNING, current_step=2, started_at=timezone.now() - dt.timedelta(seconds=5))
    client.force_login(owner)
    body = client.get("/runs/").content.decode()
    sdk_cells, cohort_cells = row_cells(body, sdk), row_cells(body, cohort)
    assert "3" in sdk_cells and "3 / 0" not in sdk_cells and "1m 35s" in sdk_cells
    assert "2 / 4" in cohort_cells


def test_a_succeeded_cohort_run_offers_its_adapter_only_when_it_is_there(client, owner):
    run = make_run(owner, state=Run.State.SUCCEEDED)
    client.force_login(owner)
    assert 'id="adapter-download"' not in client.get(f"/runs/{run.pk}/").content.decode()
    adapter = run_directory(run.pk) / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text("{}")
    assert 'id="adapter-download"' in client.get(f"/runs/{run.pk}/").content.decode()


@pytest.mark.parametrize(("seconds", "text"), [(None, "—"), (0, "0s"), (0.05, "<1s"), (12, "12s"), (249, "4m 09s"),
                                               (3900, "1h 05m"), (183600, "2d 3h")])
def test_durations_read_as_the_table_shows_them(seconds, text):
    assert duration_text(None if seconds is None else dt.timedelta(seconds=seconds)) == text
