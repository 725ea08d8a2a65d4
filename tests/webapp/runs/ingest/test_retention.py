"""Retention: a run that keeps the rollouts of its newest N steps and every k-th step drops exactly
the other steps' rollout rows after each ingest, keeps every metric, and says so in the inspector and
the export; `Run.storage_bytes` follows what is stored and shows in the runs table."""

import json
from html import unescape

import pytest
from django.urls import reverse

from tests.webapp.runs.seeding import hover_step_event, ingest, make_run, mhgpo_step_event
from webapp.runs.ingest.retention import Retention, retention_apply, storage_label, storage_recount
from webapp.runs.models import Group, GroupMember, ModuleCall, Rollout, Run, StepMetric

pytestmark = pytest.mark.django_db

KEEP = {"keep_rollouts_last_steps": 3, "keep_rollouts_every": 4}


def _steps_with(model, run) -> set[int]:
    field = "rollout__step" if model is ModuleCall else "step"
    query = model.objects.filter(**({"rollout__run": run} if model is ModuleCall else {"run": run}))
    return set(query.values_list(field, flat=True))


def test_the_window_keeps_the_newest_n_and_every_kth_step():
    retention = Retention(last_steps=3, every=4)
    assert [s for s in range(1, 13) if retention.keeps(s, 12)] == [4, 8, 10, 11, 12]
    assert all(Retention(0, 4).keeps(s, 12) for s in range(1, 13))  # 0: keep everything


def test_a_retention_run_drops_exactly_the_configured_steps_and_keeps_every_metric(owner):
    run = make_run(owner, config=KEEP)
    reference = make_run(owner, config={})
    for step in range(1, 13):  # one ingest per step, as the worker ships them
        ingest(run, [hover_step_event(step, examples=2, rollouts=3)])
        ingest(reference, [hover_step_event(step, examples=2, rollouts=3)])
    kept = {4, 8, 10, 11, 12}
    assert _steps_with(Rollout, run) == _steps_with(ModuleCall, run) == _steps_with(Group, run) == kept
    assert not GroupMember.objects.filter(group__run=run, group__step__in=set(range(1, 13)) - kept).exists()
    assert _steps_with(Rollout, reference) == set(range(1, 13))
    # Every metric of every step, identical to the run without retention.
    metrics = list(StepMetric.objects.filter(run=run).order_by("seq").values_list("step", "metrics"))
    assert metrics == list(StepMetric.objects.filter(run=reference).order_by("seq").values_list("step", "metrics"))
    assert [s for s, _ in metrics] == list(range(1, 13))
    # A kept step's rows are whole: the same counts as without retention.
    for model in (Rollout, Group):
        assert model.objects.filter(run=run, step=10).count() == model.objects.filter(run=reference, step=10).count()


def test_forked_rollouts_are_dropped_with_their_parents(owner):
    run = make_run(owner, config={"strategy": "mhgpo", "keep_rollouts_last_steps": 1})
    ingest(run, [mhgpo_step_event(1), mhgpo_step_event(2)])
    assert _steps_with(Rollout, run) == {2}
    assert retention_apply(run) == []  # nothing more to drop


def test_the_inspector_says_what_was_dropped(client, owner):
    run = make_run(owner, config=KEEP)
    ingest(run, [hover_step_event(s, examples=2, rollouts=3) for s in range(1, 7)])
    client.force_login(owner)
    page = unescape(client.get(reverse("runs:step", args=[run.pk, 2])).content.decode())
    assert ("The rollout text of step 2 was dropped by this run's retention (keeps the rollouts of the newest 3 "
            "steps and every 4th step); its metrics are kept.") in page
    assert "reward/mean" in page  # the step's metrics are still there
    kept = client.get(reverse("runs:step", args=[run.pk, 4])).content.decode()
    assert "rollouts-dropped" not in kept and 'id="examples"' in kept
    example = Rollout.objects.filter(run=run, step=4).first().example_id
    response = client.get(reverse("runs:trajectories", args=[run.pk, 2]), {"example": example})
    assert response.status_code == 410 and "The rollout text of step 2 was dropped" in response.content.decode()
    shown = client.get(reverse("runs:trajectories", args=[run.pk, 4]), {"example": example})
    rows = shown.content.decode().count('<tr class="rollout')
    assert shown.status_code == 200 and rows == Rollout.objects.filter(run=run, step=4, example_id=example).count() > 0


def test_the_rollouts_export_lists_the_steps_without_rollouts(client, owner):
    from tests.webapp.runs.charts.test_series_views import consume

    run = make_run(owner, config=KEEP)
    ingest(run, [hover_step_event(s, examples=2, rollouts=3) for s in range(1, 7)])
    client.force_login(owner)
    text, _ = consume(client.get(reverse("runs:export_rollouts", args=[run.pk])))
    header, *rollouts = [json.loads(line) for line in text.splitlines()]
    assert header == {"type": "retention", "keep_rollouts_last_steps": 3, "keep_rollouts_every": 4,
                      "steps_without_rollouts": [1, 2, 3]}
    assert {r["step"] for r in rollouts} == {4, 5, 6} and len(rollouts) == Rollout.objects.filter(run=run).count()


def test_storage_grows_with_ingest_shrinks_with_retention_and_matches_a_recount(owner):
    run = make_run(owner, config={"keep_rollouts_last_steps": 2})
    ingest(run, [hover_step_event(1, examples=2, rollouts=3)])
    run.refresh_from_db()
    one_step = run.storage_bytes
    assert one_step > 1000
    ingest(run, [hover_step_event(2, examples=2, rollouts=3)])
    run.refresh_from_db()
    two_steps = run.storage_bytes
    assert two_steps > one_step
    ingest(run, [hover_step_event(3, examples=2, rollouts=3)])  # step 1's rollouts go
    run.refresh_from_db()
    assert run.storage_bytes < two_steps + (two_steps - one_step)
    counted = run.storage_bytes
    # pg_column_size of a row image may differ by a few bytes between a fresh row and a re-read one
    assert abs(storage_recount(run) - counted) <= counted / 1000


def test_the_runs_table_shows_and_sorts_by_storage(client, owner):
    small, big = make_run(owner, config={}, name="small"), make_run(owner, config={}, name="big")
    Run.objects.filter(pk=small.pk).update(storage_bytes=2_500)
    Run.objects.filter(pk=big.pk).update(storage_bytes=3_400_000)
    client.force_login(owner)
    page = client.get(reverse("runs:list"), {"sort": "-storage"}).content.decode()
    assert page.index('data-name="big"') < page.index('data-name="small"')
    assert "3.4 MB" in page and "2.5 kB" in page
    assert storage_label(0) == "0 B" and storage_label(12_300_000_000) == "12.3 GB"


def test_the_example_history_lists_only_the_kept_steps_of_an_example(client, owner):
    run = make_run(owner, config=KEEP)
    ingest(run, [hover_step_event(s, examples=2, rollouts=3) for s in range(1, 7)])
    example = Rollout.objects.filter(run=run, step=4).first().example_id
    client.force_login(owner)
    response = client.get(reverse("runs:example_history", args=[run.pk, example]))
    assert response.status_code == 200
    page = response.content.decode()
    for step in (4, 5, 6):  # its inspector links exist for the kept steps only
        assert f"/steps/{step}/" in page
    assert "/steps/2/" not in page
