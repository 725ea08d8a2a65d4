"""The runs table fits a 1,400 px window: no sideways scrolling of the table or the page with every
column a busy lab's rows fill (long names, tags, projects, SDK badges, durations, storage)."""

import datetime as dt

import pytest
from django.utils import timezone

from tests.browser.session import PASSWORD, log_in
from tests.webapp.runs.seeding import make_run
from webapp.projects.models import Role
from webapp.projects.services import member_add, project_create
from webapp.runs.ingest.external import external_run_start
from webapp.runs.models import Run

NEUTRAL = "the table's layout in a real browser; its rows' queries are tested on both backends in tests/webapp/runs"
pytestmark = [pytest.mark.browser, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]


def busy_lab(make_user):
    owner = make_user("alexandra", password=PASSWORD)
    project = project_create(creator=owner, name="vision-rl-lab")
    member_add(project, user=make_user("mo"), role=Role.MEMBER)
    started = timezone.now() - dt.timedelta(hours=2, minutes=5)
    for i in range(6):
        run = make_run(owner, project=project, name=f"gdpo two rewards lr=3e-5 seed {i} (rerun)", state=Run.State.SUCCEEDED,
                 config={"strategy": "mmgrpo", "estimator": "gdpo", "learning_rate": 3e-5}, tags=["baseline", "paper",
                 "gdpo-sweep"], current_step=1200, best_reward=0.734512, last_reward=0.70312,
                 last_eval_reward=0.6875, gpus=4, storage_bytes=123_456_789, started_at=started,
                 finished_at=started + dt.timedelta(hours=26, minutes=3))
        Run.objects.filter(pk=run.pk).update(total_steps=1200)
    external_run_start(owner, client_id="trl-1", task="hotpotqa_multihop_long_task", name="trl grpo on hotpotqa",
                       origin="trl", project=project, tags=["trl"])
    return owner


def test_the_runs_table_fits_1400_px(browser, asgi_server, make_user, tmp_path):
    busy_lab(make_user)
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    try:
        log_in(page, asgi_server, "alexandra")
        page.wait_for_selector("#runs-table tbody tr")
        sizes = page.evaluate("""() => {
            const wrap = document.querySelector('#runs-table').parentElement;
            return {table: document.querySelector('#runs-table').scrollWidth, wrap: wrap.clientWidth,
                    page: document.documentElement.scrollWidth, window: document.documentElement.clientWidth,
                    least: (() => { const t = document.querySelector('#runs-table'); t.style.width = 'min-content';
                                    const w = t.offsetWidth; t.style.width = ''; return w; })()};
        }""")
        page.screenshot(path=str(tmp_path / "runs-table-1400.png"), full_page=True)
        print("runs table at 1400 px:", sizes)
        assert sizes["table"] <= sizes["wrap"], sizes
        assert sizes["page"] <= sizes["window"], sizes
    finally:
        context.close()
