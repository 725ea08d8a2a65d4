"""The queue page: order and positions, the worker and GPU of active runs, owner cancel, staff
move-to-front, and a query count that does not grow with the queue."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from tests.webapp.runs.factories import make_run
from webapp.runs.models import Run
from webapp.scheduling.models import Worker
from webapp.scheduling.services import claim_next

pytestmark = pytest.mark.django_db


@pytest.fixture
def users():
    make = get_user_model().objects.create_user
    return make("ann", password="x"), make("bob", password="x"), make("boss", password="x", is_staff=True)


def _queued(owner, name, *, seconds_ago, config=None):
    run = make_run(owner, name=name)
    Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(seconds=seconds_ago),
                                         config=config or {"steps": 4})
    return Run.objects.get(pk=run.pk)


def _positions(html: str, runs) -> list[int]:
    return sorted(runs, key=lambda r: html.index(f'data-run="{r.pk}" data-position'))


def test_page_lists_queued_runs_in_fair_order_with_size_and_owner(client, users):
    ann, bob, _ = users
    a1 = _queued(ann, "a1", seconds_ago=30)
    a2 = _queued(ann, "a2", seconds_ago=20)
    b1 = _queued(bob, "b1", seconds_ago=10, config={"steps": 4, "min_gpu_memory_gb": 80})
    client.force_login(ann)
    html = client.get(reverse("scheduling:queue")).content.decode()
    assert _positions(html, [a1, a2, b1]) == [a1, b1, a2]
    assert f'data-run="{b1.pk}" data-position="2"' in html
    # 4 steps x 4 examples x 8 rollouts x 256 new tokens (the config defaults) = 32,768
    assert 'title="32768 tokens">32.8k<' in html
    assert "needs a GPU with 80 GB; the largest worker has no GPU" in html
    # ann sees her own runs' names and a cancel button for them only; bob's run is "run <id>"
    assert f'href="/runs/{a1.pk}/"' in html and f'href="/runs/{b1.pk}/"' not in html
    assert html.count('class="cancel"') == 2 and 'class="front"' not in html


def test_active_runs_show_their_worker_host_and_gpu(client, users):
    ann, _, _ = users
    Worker.objects.create(name="gpu1@node7", host="node7", gpu_name="NVIDIA H100 80GB HBM3", gpu_memory_gb=79.6,
                          devices="1", seen_at=timezone.now())
    _queued(ann, "a1", seconds_ago=5)
    run = claim_next("gpu1@node7", 79.6)
    client.force_login(ann)
    html = client.get(reverse("scheduling:queue")).content.decode()
    assert f'data-run="{run.pk}" data-worker="gpu1@node7"' in html
    assert "NVIDIA H100 80GB HBM3 (79.6 GB) · device 1" in html
    assert "node7" in html and "Nothing is waiting." in html


def test_owner_cancels_their_queued_run_and_it_is_never_claimed(client, users):
    ann, bob, _ = users
    mine = _queued(ann, "a1", seconds_ago=5)
    client.force_login(ann)
    response = client.post(reverse("scheduling:cancel", args=[mine.pk]))
    assert response.status_code == 302
    mine.refresh_from_db()
    assert mine.state == Run.State.CANCELLED
    assert claim_next("gpu0@h") is None
    # someone else's run: not found for a stranger, as every scoped view answers, and it stays queued
    theirs = _queued(bob, "b1", seconds_ago=1)
    assert client.post(reverse("scheduling:cancel", args=[theirs.pk])).status_code == 404
    assert Run.objects.get(pk=theirs.pk).state == Run.State.QUEUED
    assert client.post(reverse("scheduling:cancel", args=[999999])).status_code == 404


def test_staff_move_to_front_and_others_cannot(client, users):
    ann, bob, boss = users
    a1 = _queued(ann, "a1", seconds_ago=30)
    b1 = _queued(bob, "b1", seconds_ago=20)
    a2 = _queued(ann, "a2", seconds_ago=10)
    client.force_login(ann)
    assert client.post(reverse("scheduling:front", args=[a2.pk])).status_code == 403
    client.force_login(boss)
    assert client.post(reverse("scheduling:front", args=[a2.pk])).status_code == 302
    html = client.get(reverse("scheduling:queue")).content.decode()
    assert _positions(html, [a1, b1, a2]) == [a2, a1, b1]
    assert html.count('class="front"') == 3 and html.count('class="cancel"') == 3
    assert claim_next("gpu0@h").pk == a2.pk


def test_query_count_does_not_grow_with_the_queue(client, users):
    ann, bob, boss = users
    for i in range(2):
        Worker.objects.create(name=f"gpu{i}@n", host="n", gpu_name="L4", gpu_memory_gb=22.5, devices=str(i),
                              seen_at=timezone.now())
    client.force_login(boss)

    def queries_with(queued: int) -> int:
        for i in range(queued):
            _queued(ann if i % 2 else bob, f"r{queued}-{i}", seconds_ago=1000 - i)
        for i in range(2):
            claim_next(f"gpu{i}@n", 22.5)  # each worker runs one more
        with CaptureQueriesContext(connection) as queries:
            assert client.get(reverse("scheduling:queue")).status_code == 200
        return len(queries)

    small = queries_with(3)
    assert queries_with(40) == small, "the queue page's query count grew with the queue"
