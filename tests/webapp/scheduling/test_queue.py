"""Fair queue order on the database: round-robin over owners, staff move-to-front, claim_next skips
cancelled runs and runs needing more GPU memory than the worker has."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from tests.webapp.runs.factories import make_run
from webapp.runs.models import Run
from webapp.scheduling.models import Worker
from webapp.scheduling.selectors import queue_order
from webapp.scheduling.services import claim_next, queue_move_to_front, worker_report

pytestmark = pytest.mark.django_db


def _users(*names):
    return [get_user_model().objects.create_user(name, password="x") for name in names]


def _queue(owners):
    """Creates one queued run per owner in the given order, with strictly increasing created_at."""
    base = timezone.now() - timedelta(hours=1)
    runs = []
    for i, owner in enumerate(owners):
        run = make_run(owner, name=f"{owner.username}-{i}")
        Run.objects.filter(pk=run.pk).update(created_at=base + timedelta(seconds=i))
        runs.append(Run.objects.get(pk=run.pk))
    return runs


def test_three_users_are_served_round_robin_each_in_fifo_order():
    a, b, c = _users("ann", "bob", "cat")
    # ann floods the queue first; bob and cat arrive later.
    runs = _queue([a, a, a, b, b, c])
    order = [(pos, run.name) for pos, run in queue_order()]
    assert order == [(1, "ann-0"), (2, "bob-3"), (3, "cat-5"), (4, "ann-1"), (5, "bob-4"), (6, "ann-2")]
    assert len(runs) == 6


def test_least_recently_served_owner_goes_first():
    a, b = _users("ann", "bob")
    make_run(a, state=Run.State.RUNNING, started_at=timezone.now())  # ann was just served
    _queue([a, b])
    assert [run.name for _, run in queue_order()] == ["bob-1", "ann-0"]


def test_move_to_front_beats_fair_order_and_newest_mark_first():
    a, b = _users("ann", "bob")
    runs = _queue([a, a, b, b])
    assert queue_move_to_front(runs[3]) is True
    assert queue_move_to_front(runs[1]) is True
    assert [run.name for _, run in queue_order()] == ["ann-1", "bob-3", "ann-0", "bob-2"]
    # claiming a fronted run clears its mark
    assert claim_next("gpu0@h").pk == runs[1].pk
    assert not hasattr(Run.objects.get(pk=runs[1].pk), "queue_priority")


def test_move_to_front_refuses_a_run_that_is_not_queued():
    (a,) = _users("ann")
    run = make_run(a, state=Run.State.RUNNING)
    assert queue_move_to_front(run) is False


def test_claim_next_takes_the_fairest_run_and_never_a_cancelled_one():
    a, b = _users("ann", "bob")
    runs = _queue([a, a, b])
    Run.objects.filter(pk=runs[0].pk).update(state=Run.State.CANCELLED)
    first = claim_next("gpu0@h")
    assert first.pk == runs[1].pk  # ann's oldest still-queued run is older than bob's
    assert first.state == Run.State.RUNNING and first.worker == "gpu0@h"
    assert claim_next("gpu1@h").pk == runs[2].pk
    assert claim_next("gpu0@h") is None
    assert Run.objects.get(pk=runs[0].pk).state == Run.State.CANCELLED


def test_worker_with_too_little_gpu_memory_skips_the_run_and_leaves_it_queued():
    a, b = _users("ann", "bob")
    big, small = _queue([a, b])
    Run.objects.filter(pk=big.pk).update(config={"steps": 4, "min_gpu_memory_gb": 40})
    assert claim_next("gpu0@h", gpu_mem_gb=24).pk == small.pk
    assert claim_next("gpu0@h", gpu_mem_gb=24) is None
    assert claim_next("cpu@h") is None  # no GPU at all: a run with a minimum never fits
    assert Run.objects.get(pk=big.pk).state == Run.State.QUEUED
    assert claim_next("gpu1@h", gpu_mem_gb=80).pk == big.pk


def test_queue_order_query_count_is_constant(django_assert_max_num_queries):
    users = _users("ann", "bob", "cat")
    _queue(users)
    with django_assert_max_num_queries(2):
        assert len(queue_order()) == 3
    _queue(users * 5)
    with django_assert_max_num_queries(2):
        assert len(queue_order()) == 18


def test_a_run_cancelled_after_the_order_was_read_is_not_claimed(monkeypatch):
    """The owner cancels between the worker reading the order and claiming: the locked state check wins."""
    import webapp.scheduling.services as services

    a, b = _users("ann", "bob")
    runs = _queue([a, b])
    stale = queue_order()
    Run.objects.filter(pk=runs[0].pk).update(state=Run.State.CANCELLED)
    monkeypatch.setattr(services, "queue_order", lambda: stale)
    assert claim_next("gpu0@h").pk == runs[1].pk
    assert Run.objects.get(pk=runs[0].pk).state == Run.State.CANCELLED


def test_worker_report_stores_and_refreshes_one_row_per_name(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    first = worker_report("gpu1@h", host="h", gpu_name="NVIDIA H100", gpu_memory_gb=79.6)
    again = worker_report("gpu1@h", host="h", gpu_name="NVIDIA H100", gpu_memory_gb=79.6)
    assert again.pk == first.pk and again.devices == "1" and again.seen_at >= first.seen_at
    assert Worker.objects.count() == 1


def test_cpu_worker_reports_no_gpu(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr("webapp.scheduling.services.local_gpu", lambda: ("", None))
    worker = worker_report("cpu@h")
    assert (worker.gpu_name, worker.gpu_memory_gb, worker.devices) == ("", None, "")
