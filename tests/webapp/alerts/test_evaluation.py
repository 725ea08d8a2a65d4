"""Each rule kind fires once per episode, through the real entry points (ingest, transitions, the
reaper's beat task), and fires again after its condition cleared."""

import datetime as dt
import threading

import pytest
from django.db import IntegrityError, connection
from django.utils import timezone

from tests.webapp.runs.factories import make_run
from webapp.alerts import services
from webapp.alerts.models import Alert, AlertRule, Kind
from webapp.alerts.services import check_stalled, rule_save, rules_defaults_for
from webapp.runs.ingest.store import step_events_ingest
from webapp.runs.models import Run
from webapp.runs.services import run_cancel, run_claim, run_finish, run_heartbeat, run_resume
from workers.tasks import reap_stale_runs_task

pytestmark = pytest.mark.django_db

NAN, INF = float("nan"), float("inf")


@pytest.fixture
def ingest(django_capture_on_commit_callbacks):
    """Stores step events like the supervisor does, running what waits for the commit (the alerts)."""

    def store(run, *steps, attempt: int = 1):
        events = [{"type": "step", "attempt": attempt, "step": step, "metrics": metrics, "rollouts": [], "groups": []}
                  for step, metrics in steps]
        with django_capture_on_commit_callbacks(execute=True):
            return step_events_ingest(run, events)

    return store


@pytest.fixture
def transitions(django_capture_on_commit_callbacks):
    """Runs a state change and what it triggers after commit (the run_state_changed receivers)."""

    def apply(operation, *args, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return operation(*args, **kwargs)

    return apply


def alerts(run, kind):
    return list(Alert.objects.filter(run=run, kind=kind).order_by("id"))


def test_every_user_starts_with_nonfinite_and_failed_defaults_in_app_only(owner):
    rules = rules_defaults_for(owner)
    assert [r.kind for r in rules] == list(Kind)
    assert {r.kind for r in rules if r.enabled} == {Kind.NONFINITE, Kind.FAILED}
    assert not any(r.email or r.webhook_url for r in rules)
    assert len(rules_defaults_for(owner)) == len(Kind)  # created once


def test_a_nonfinite_loss_fires_once_per_episode_and_again_after_a_finite_step(owner, ingest):
    run = make_run(owner, state=Run.State.RUNNING)
    ingest(run, (1, {"loss": 0.5, "grad_norm": 1.0}))
    assert alerts(run, Kind.NONFINITE) == []
    ingest(run, (2, {"loss": NAN, "grad_norm": 1.0}))  # the trainer's NaN, stored as null
    ingest(run, (3, {"loss": NAN, "grad_norm": NAN}))  # still the same episode
    [first] = alerts(run, Kind.NONFINITE)
    assert first.step == 2 and first.is_open and "loss is not finite" in first.message
    ingest(run, (4, {"loss": 0.4, "grad_norm": 1.0}))
    first.refresh_from_db()
    assert first.resolved_at is not None
    ingest(run, (5, {"loss": 0.3, "grad_norm": INF}))
    first_again, second = alerts(run, Kind.NONFINITE)
    assert second.step == 5 and second.is_open and "grad_norm is not finite" in second.message


def test_a_step_without_an_update_neither_fires_nor_clears(owner, ingest):
    run = make_run(owner, state=Run.State.RUNNING)
    ingest(run, (1, {"loss": None}))
    ingest(run, (2, {"reward/mean": 0.5}))  # no loss, no grad_norm: no update happened
    [alert] = alerts(run, Kind.NONFINITE)
    assert alert.is_open and alert.step == 1


def test_several_episodes_in_one_ingest_call_are_each_recorded(owner, ingest):
    run = make_run(owner, state=Run.State.RUNNING)
    ingest(run, (1, {"loss": NAN}), (2, {"loss": 1.0}), (3, {"loss": NAN}))
    first, second = alerts(run, Kind.NONFINITE)
    assert (first.step, first.is_open, second.step, second.is_open) == (1, False, 3, True)


def test_reward_collapse_needs_n_steps_in_a_row_and_clears_under_the_threshold(owner, ingest):
    run = make_run(owner, state=Run.State.RUNNING)
    rule_save(owner=owner, kind=Kind.REWARD_COLLAPSE, run=run, params={"threshold": 0.9, "steps": 3},
              email=False, webhook_url="", enabled=True)
    shares = [0.95, 0.95, 0.5, 0.95, 0.95]
    for step, share in enumerate(shares, start=1):  # one step per ingest: the streak spans calls
        ingest(run, (step, {"zero_var_share": share}))
    assert alerts(run, Kind.REWARD_COLLAPSE) == []  # the streak was broken at step 3
    ingest(run, (6, {"zero_var_share": 0.9}))
    ingest(run, (7, {"zero_var_share": 1.0}))
    [alert] = alerts(run, Kind.REWARD_COLLAPSE)
    assert alert.step == 6 and alert.is_open and "3 steps in a row" in alert.message
    ingest(run, (8, {"zero_var_share": 0.2}), (9, {"zero_var_share": 0.95}), (10, {"zero_var_share": 0.95}))
    alert.refresh_from_db()
    assert alert.resolved_at is not None and len(alerts(run, Kind.REWARD_COLLAPSE)) == 1
    ingest(run, (11, {"zero_var_share": 0.99}))
    assert [a.step for a in alerts(run, Kind.REWARD_COLLAPSE)] == [6, 11]


def test_reward_collapse_defaults_to_0_9_for_5_steps(owner, ingest):
    run = make_run(owner, state=Run.State.RUNNING)
    rule_save(owner=owner, kind=Kind.REWARD_COLLAPSE, run=None, params={}, email=False, webhook_url="", enabled=True)
    ingest(run, *[(s, {"zero_var_share": 0.9}) for s in range(1, 5)])
    assert alerts(run, Kind.REWARD_COLLAPSE) == []
    ingest(run, (5, {"zero_var_share": 0.92}))
    assert [a.step for a in alerts(run, Kind.REWARD_COLLAPSE)] == [5]


def test_failed_fires_when_the_run_fails_clears_on_resume_and_fires_again(owner, transitions):
    run = make_run(owner, state=Run.State.RUNNING, current_step=7)
    transitions(run_finish, run, Run.State.FAILED, error="ValueError: the reward raised")
    [alert] = alerts(run, Kind.FAILED)
    assert alert.step == 7 and "failed" in alert.message and "the reward raised" in alert.message
    transitions(run_resume, run)
    alert.refresh_from_db()
    assert alert.resolved_at is not None
    transitions(run_claim, run.pk, worker="w")
    run.refresh_from_db()
    transitions(run_finish, run, Run.State.FAILED, error="again")
    assert [a.is_open for a in alerts(run, Kind.FAILED)] == [False, True]


def test_finished_and_cancelled_fire_only_when_asked_for(owner, transitions):
    succeeded = make_run(owner, state=Run.State.RUNNING)
    transitions(run_finish, succeeded, Run.State.SUCCEEDED)
    assert Alert.objects.count() == 0  # off by default
    for kind in (Kind.FINISHED, Kind.CANCELLED):
        rule_save(owner=owner, kind=kind, run=None, params={}, email=False, webhook_url="", enabled=True)
    finished = make_run(owner, state=Run.State.RUNNING)
    transitions(run_finish, finished, Run.State.SUCCEEDED)
    cancelled = make_run(owner, state=Run.State.QUEUED)
    transitions(run_cancel, cancelled)
    assert [(a.run_id, a.kind) for a in Alert.objects.order_by("id")] == [
        (finished.pk, Kind.FINISHED), (cancelled.pk, Kind.CANCELLED)]
    assert "finished" in alerts(finished, Kind.FINISHED)[0].message


def test_stalled_fires_on_an_old_heartbeat_and_clears_on_a_fresh_one(owner, settings):
    settings.COHORT_HEARTBEAT_TIMEOUT_S = 60  # default limit: half of it
    rule_save(owner=owner, kind=Kind.STALLED, run=None, params={}, email=False, webhook_url="", enabled=True)
    run = make_run(owner, state=Run.State.RUNNING, heartbeat_at=timezone.now() - dt.timedelta(seconds=20))
    assert check_stalled() == []
    Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - dt.timedelta(seconds=40))
    [alert] = check_stalled()
    assert alert.kind == Kind.STALLED and "no heartbeat from its worker for 40 s" in alert.message
    assert check_stalled() == []  # same episode
    run_heartbeat(run.pk)
    check_stalled()
    alert.refresh_from_db()
    assert alert.resolved_at is not None
    Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - dt.timedelta(seconds=31))
    assert len(check_stalled()) == 1 and len(alerts(run, Kind.STALLED)) == 2


def test_stalled_uses_the_rules_own_limit(owner):
    run = make_run(owner, state=Run.State.RUNNING, heartbeat_at=timezone.now() - dt.timedelta(seconds=12))
    rule_save(owner=owner, kind=Kind.STALLED, run=run, params={"seconds": 10}, email=False, webhook_url="",
              enabled=True)
    assert len(check_stalled()) == 1


def test_the_reaper_task_fires_stalled_before_interrupting_and_the_alert_stays_open(owner, settings,
                                                                                    django_capture_on_commit_callbacks):
    rule_save(owner=owner, kind=Kind.STALLED, run=None, params={}, email=False, webhook_url="", enabled=True)
    run = make_run(owner, state=Run.State.RUNNING, heartbeat_at=timezone.now() - dt.timedelta(hours=1))
    with django_capture_on_commit_callbacks(execute=True):
        assert reap_stale_runs_task() == [run.pk]
    [alert] = alerts(run, Kind.STALLED)
    run.refresh_from_db()
    assert run.state == Run.State.INTERRUPTED and alert.is_open  # interrupted: still stalled
    check_stalled()
    assert Alert.objects.get(pk=alert.pk).is_open
    with django_capture_on_commit_callbacks(execute=True):
        run_cancel(run)  # interrupted -> cancelled: a final state ends the episode
    check_stalled()
    assert Alert.objects.get(pk=alert.pk).resolved_at is not None


def test_a_run_rule_replaces_the_default_of_its_kind(owner, ingest):
    muted = make_run(owner, state=Run.State.RUNNING)
    rule_save(owner=owner, kind=Kind.NONFINITE, run=muted, params={}, email=False, webhook_url="", enabled=False)
    other = make_run(owner, state=Run.State.RUNNING)
    ingest(muted, (1, {"loss": NAN}))
    ingest(other, (1, {"loss": NAN}))
    assert alerts(muted, Kind.NONFINITE) == [] and len(alerts(other, Kind.NONFINITE)) == 1


def test_a_disabled_default_fires_nothing_and_disabling_resolves_open_alerts(owner, ingest):
    run = make_run(owner, state=Run.State.RUNNING)
    ingest(run, (1, {"loss": NAN}))
    [alert] = alerts(run, Kind.NONFINITE)
    rule_save(owner=owner, kind=Kind.NONFINITE, run=None, params={}, email=False, webhook_url="", enabled=False)
    alert.refresh_from_db()
    assert alert.resolved_at is not None
    ingest(run, (2, {"loss": NAN}))
    assert len(alerts(run, Kind.NONFINITE)) == 1


def test_staff_may_watch_a_run_they_can_see_and_the_alert_is_theirs(owner, staff, stranger, ingest):
    run = make_run(owner, state=Run.State.RUNNING)
    rule_save(owner=staff, kind=Kind.NONFINITE, run=run, params={}, email=False, webhook_url="", enabled=True)
    # A user who lost sight of the run (not staff) is not alerted by a rule left on it.
    AlertRule.objects.create(owner=stranger, project=run.project, run=run, kind=Kind.NONFINITE)
    ingest(run, (1, {"loss": NAN}))
    assert sorted(a.rule.owner.username for a in alerts(run, Kind.NONFINITE)) == ["owner", "staffer"]


def test_the_database_refuses_a_second_open_alert_for_a_rule_and_run(owner):
    run = make_run(owner)
    rule = rules_defaults_for(owner)[0]
    Alert.objects.create(rule=rule, run=run, kind=rule.kind, message="one")
    with pytest.raises(IntegrityError):
        Alert.objects.create(rule=rule, run=run, kind=rule.kind, message="two")


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgresql_only(reason="two writers at once need PostgreSQL (SQLite serializes them)")
def test_concurrent_evaluations_fire_once(owner, monkeypatch):
    """Two processes evaluate the same NaN step at once: both see no open alert, both insert; the
    partial unique constraint lets one through."""
    run = make_run(owner, state=Run.State.RUNNING)
    step_events_ingest(run, [{"type": "step", "attempt": 1, "step": 1, "metrics": {"loss": None}}])
    Alert.objects.all().delete()  # the ingest's own evaluation; the test races two more
    rows = list(run.step_metrics.all())
    both_checked = threading.Barrier(2, timeout=30)
    is_open = services._is_open

    def is_open_then_wait(rule, run_):
        answer = is_open(rule, run_)
        both_checked.wait()  # neither has inserted yet when both have looked
        return answer

    monkeypatch.setattr(services, "_is_open", is_open_then_wait)
    results, errors = [], []

    def evaluate():
        try:
            results.append(services.evaluate_step_metrics(Run.objects.get(pk=run.pk), rows))
        except Exception as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=evaluate) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert sorted(len(r) for r in results) == [0, 1]
    assert Alert.objects.filter(run=run, kind=Kind.NONFINITE).count() == 1
