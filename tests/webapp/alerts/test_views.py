"""Alert pages: the badge, the list, "mark all seen", default rules, and rules on a run's page.
Bad input is a form error (400) next to its field, a stranger's run or rule a 404."""

import pytest
from django.test import RequestFactory
from django.urls import reverse

from tests.webapp.runs.factories import make_run
from webapp.alerts.context_processors import alert_badge
from webapp.alerts.models import Alert, AlertRule, Kind
from webapp.alerts.services import rules_defaults_for

pytestmark = pytest.mark.django_db


def fire(user, run, *, kind=Kind.NONFINITE, message="loss is not finite at step 2.", **fields) -> Alert:
    rule = next(r for r in rules_defaults_for(user) if r.kind == kind)
    return Alert.objects.create(rule=rule, run=run, kind=kind, message=message, step=2, **fields)


@pytest.fixture
def logged_in(client, owner):
    client.force_login(owner)
    return client


def test_alert_pages_need_a_login(client):
    for name in ("alerts:list", "alerts:rules"):
        response = client.get(reverse(name))
        assert response.status_code == 302 and "/login/" in response["Location"]


def test_the_badge_counts_unseen_open_alerts_in_one_query(owner, django_assert_num_queries):
    run = make_run(owner)
    fire(owner, run)
    fire(owner, make_run(owner), seen=True)
    fire(owner, make_run(owner), resolved_at="2026-01-01T00:00:00Z")
    request = RequestFactory().get("/")
    request.user = owner
    with django_assert_num_queries(1):
        assert int(str(alert_badge(request)["alert_badge"])) == 1


def test_the_topbar_shows_the_badge_linking_to_the_list(logged_in, owner):
    fire(owner, make_run(owner))
    page = logged_in.get(reverse("runs:list")).content.decode()
    assert 'id="alert-badge"' in page and f'href="{reverse("alerts:list")}"' in page
    assert '<span class="badge bad alert-badge" id="alert-badge" title="unseen open alerts">1</span>' in page


def test_no_badge_without_unseen_alerts(logged_in):
    assert 'id="alert-badge"' not in logged_in.get(reverse("runs:list")).content.decode()


def test_the_list_shows_own_alerts_newest_first_with_run_links_and_delivery(logged_in, owner, stranger):
    run = make_run(owner, name="my-run")
    older = fire(owner, run, message="older one")
    older.resolved_at = older.fired_at
    older.save()
    fire(owner, run, message="newer one", webhook_status=Alert.Webhook.FAILED, webhook_attempts=1,
         webhook_last_error="HTTP 404 Not Found")
    fire(stranger, make_run(stranger), message="not yours")
    response = logged_in.get(reverse("alerts:list"))
    page = response.content.decode()
    assert response.status_code == 200
    assert page.index("newer one") < page.index("older one") and "not yours" not in page
    assert reverse("runs:detail", args=[run.pk]) in page and "my-run" in page
    assert "webhook: failed (1 attempt)" in page and "HTTP 404 Not Found" in page


def test_mark_all_seen_clears_the_badge_and_is_post_only(logged_in, owner):
    fire(owner, make_run(owner))
    assert logged_in.get(reverse("alerts:mark_seen")).status_code == 405
    response = logged_in.post(reverse("alerts:mark_seen"), {"next": "https://evil.example/"})
    assert response.status_code == 302 and response["Location"] == reverse("alerts:list")
    assert not Alert.objects.filter(seen=False).exists()
    assert 'id="alert-badge"' not in logged_in.get(reverse("alerts:list")).content.decode()


def test_the_run_page_shows_the_runs_alerts_and_the_rule_form(logged_in, owner):
    run = make_run(owner)
    fire(owner, run, message="loss is not finite (NaN or inf) at step 2.")
    page = logged_in.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert 'id="alerts"' in page and "loss is not finite (NaN or inf) at step 2." in page
    assert reverse("alerts:run_rule_add", args=[run.pk]) in page and 'name="webhook_url"' in page


def test_a_rule_is_added_to_a_run_and_shown_on_its_page(logged_in, owner):
    run = make_run(owner)
    response = logged_in.post(reverse("alerts:run_rule_add", args=[run.pk]), {
        "kind": "reward_collapse", "threshold": "0.8", "steps": "3", "webhook_url": "https://93.184.216.34/x",
        "enabled": "on"})
    assert response.status_code == 302 and response["Location"] == reverse("runs:detail", args=[run.pk]) + "#alerts"
    rule = AlertRule.objects.get(run=run)
    assert (rule.owner, rule.kind, rule.params, rule.webhook_url) == (
        owner, "reward_collapse", {"threshold": 0.8, "steps": 3}, "https://93.184.216.34/x")
    assert "threshold=0.8" in logged_in.get(reverse("runs:detail", args=[run.pk])).content.decode()
    # The same kind again replaces it.
    logged_in.post(reverse("alerts:run_rule_add", args=[run.pk]), {"kind": "reward_collapse", "steps": "9"})
    rule = AlertRule.objects.get(run=run)
    assert rule.params == {"steps": 9} and not rule.enabled


@pytest.mark.parametrize(("field", "value", "error"), [
    ("webhook_url", "ftp://example.org/x", "Enter an http:// or https:// URL."),
    ("webhook_url", "not a url", "Enter an http:// or https:// URL."),
    ("threshold", "1.5", "less than or equal to 1.0"),
    ("steps", "0", "greater than or equal to 1"),
    ("seconds", "1", "greater than or equal to 5"),
    ("kind", "explode", "Select a valid choice"),
    ("email", "on", "Your account has no email address"),
])
def test_bad_rule_input_is_a_400_with_the_error_next_to_its_field(logged_in, owner, field, value, error):
    run = make_run(owner)
    data = {"kind": "nonfinite", "enabled": "on", field: value}
    response = logged_in.post(reverse("alerts:run_rule_add", args=[run.pk]), data)
    page = response.content.decode()
    assert response.status_code == 400 and 'id="rule-error-' + field + '"' in page and error in page
    assert not AlertRule.objects.filter(run=run).exists()


def test_a_strangers_run_is_a_404_for_rules(logged_in, stranger):
    run = make_run(stranger)
    assert logged_in.post(reverse("alerts:run_rule_add", args=[run.pk]), {"kind": "failed"}).status_code == 404
    assert logged_in.get(reverse("alerts:run_rule_add", args=[run.pk])).status_code == 404


def test_removing_a_run_rule_is_for_its_owner_only(logged_in, owner, stranger):
    mine_run, their_run = make_run(owner), make_run(stranger)
    mine = AlertRule.objects.create(owner=owner, project=mine_run.project, run=mine_run, kind=Kind.FAILED)
    theirs = AlertRule.objects.create(owner=stranger, project=their_run.project, run=their_run, kind=Kind.FAILED)
    default = rules_defaults_for(owner)[0]
    assert logged_in.post(reverse("alerts:rule_delete", args=[theirs.pk])).status_code == 404
    assert logged_in.post(reverse("alerts:rule_delete", args=[default.pk])).status_code == 404
    assert logged_in.post(reverse("alerts:rule_delete", args=[mine.pk])).status_code == 302
    assert set(AlertRule.objects.filter(run__isnull=False)) == {theirs}


def defaults_post(changes: dict) -> dict:
    data = {}
    for kind in Kind:
        data[f"{kind}-kind"] = kind
        if kind in ("nonfinite", "failed"):
            data[f"{kind}-enabled"] = "on"
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def test_the_defaults_page_lists_one_rule_per_kind_and_saves_them(logged_in, owner):
    page = logged_in.get(reverse("alerts:rules")).content.decode()
    assert all(f'id="rule-{kind}"' in page for kind in Kind)
    response = logged_in.post(reverse("alerts:rules"), defaults_post({
        "nonfinite-enabled": None, "stalled-enabled": "on", "stalled-seconds": "20",
        "finished-enabled": "on", "finished-webhook_url": "http://93.184.216.34:9/h"}))
    assert response.status_code == 302
    rules = {r.kind: r for r in rules_defaults_for(owner)}
    assert not rules["nonfinite"].enabled and rules["failed"].enabled
    assert rules["stalled"].enabled and rules["stalled"].params == {"seconds": 20}
    assert rules["finished"].webhook_url == "http://93.184.216.34:9/h"


def test_a_bad_default_is_a_400_and_saves_nothing(logged_in, owner):
    response = logged_in.post(reverse("alerts:rules"), defaults_post({"reward_collapse-threshold": "-1",
                                                                      "failed-enabled": None}))
    page = response.content.decode()
    assert response.status_code == 400 and 'id="reward_collapse-error-threshold"' in page
    assert next(r for r in rules_defaults_for(owner) if r.kind == "failed").enabled


def test_a_tampered_kind_on_the_defaults_page_is_refused(logged_in, owner):
    response = logged_in.post(reverse("alerts:rules"), defaults_post({"failed-kind": "nonfinite"}))
    assert response.status_code == 400 and "kind was changed" in response.content.decode()


def _queries(client, url) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


def test_the_list_and_the_run_page_read_a_fixed_number_of_queries(logged_in, owner):
    """The alerts list and a run page's alerts panel cost the same queries with 2 or 40 alerts."""
    small, large = make_run(owner, name="few"), make_run(owner, name="many")
    for i in range(2):
        fire(owner, make_run(owner), message=f"few {i}")
        fire(owner, small, message=f"on the run {i}", resolved_at="2026-01-01T00:00:00Z")
    list_small = _queries(logged_in, reverse("alerts:list"))
    run_small = _queries(logged_in, reverse("runs:detail", args=[small.pk]))
    for i in range(38):
        fire(owner, make_run(owner), message=f"many {i}")
        fire(owner, large, message=f"on the run {i}", resolved_at="2026-01-01T00:00:00Z")
    fire(owner, large, message="open one")
    assert _queries(logged_in, reverse("alerts:list")) == list_small
    assert _queries(logged_in, reverse("runs:detail", args=[large.pk])) == run_small
