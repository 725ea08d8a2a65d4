"""The queue page in a real browser: fair order with positions, the worker and GPU of a running run,
an owner cancelling their queued run, staff moving a run to the front."""

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.browser.session import PASSWORD, log_in
from tests.webapp.runs.factories import make_run
from webapp.runs.models import Run
from webapp.scheduling.models import Worker
from webapp.scheduling.services import claim_next

NEUTRAL = ("the queue page's order, cancel and move-to-front buttons in a real browser; the fair order, "
           "claim_next and the queue page's views are tested on both backends in "
           "tests/webapp/scheduling/test_queue.py and tests/webapp/scheduling/test_queue_views.py")
pytestmark = [pytest.mark.browser, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]


def _queued(owner, name, seconds_ago):
    run = make_run(owner, name=name)
    Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(seconds=seconds_ago))
    return run


def _order(page) -> list[str]:
    return [row.get_attribute("data-run") for row in page.locator("#queued-runs tr.queued-run").all()]


def test_queue_page_order_cancel_and_move_to_front(page, screenshot, asgi_server, make_user):
    ann, bob = make_user("ann", password=PASSWORD), make_user("bob", password=PASSWORD)
    make_user("boss", password=PASSWORD, staff=True)
    Worker.objects.create(name="gpu0@node1", host="node1", gpu_name="NVIDIA A100-SXM4-80GB", gpu_memory_gb=79.2,
                          devices="0", seen_at=timezone.now())
    running = _queued(bob, "bob-running", 60)
    assert claim_next("gpu0@node1", 79.2).pk == running.pk
    a1, a2 = _queued(ann, "ann-1", 50), _queued(ann, "ann-2", 40)
    b1 = _queued(bob, "bob-1", 30)

    log_in(page, asgi_server, "ann")
    page.click("#queue-link")
    page.wait_for_url(f"{asgi_server}/queue/")
    # bob was just served, so ann goes first; then the turns alternate
    assert _order(page) == [str(a1.pk), str(b1.pk), str(a2.pk)]
    active = page.locator(f'#active-runs tr[data-run="{running.pk}"]').inner_text()
    assert "gpu0@node1" in active and "NVIDIA A100-SXM4-80GB (79.2 GB) · device 0" in active
    assert page.locator("button.front").count() == 0
    screenshot("queue-page")

    page.locator(f'tr[data-run="{a1.pk}"] button.cancel').click()
    page.wait_for_url(f"{asgi_server}/queue/")
    assert f"Run {a1.pk} cancelled." in page.inner_text(".messages")
    assert _order(page) == [str(a2.pk), str(b1.pk)]  # ann still has not been served
    assert Run.objects.get(pk=a1.pk).state == Run.State.CANCELLED

    page.click("form.logout button")
    log_in(page, asgi_server, "boss")
    page.goto(f"{asgi_server}/queue/")
    page.locator(f'tr[data-run="{b1.pk}"] button.front').click()
    page.wait_for_url(f"{asgi_server}/queue/")
    assert _order(page) == [str(b1.pk), str(a2.pk)]
    assert "front" in page.locator(f'tr[data-run="{b1.pk}"] td').first.inner_text()
    screenshot("queue-page-staff")
