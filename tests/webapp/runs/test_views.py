import pytest
from django.urls import reverse

from tests.webapp.runs.factories import make_run
from webapp.runs.models import StepMetric

pytestmark = pytest.mark.django_db


@pytest.fixture
def run_with_metrics(owner):
    run = make_run(owner)
    for seq in range(1, 6):
        StepMetric.objects.create(run=run, attempt=1, step=seq, seq=seq, metrics={"reward/mean": seq / 10})
    return run


def test_anonymous_is_sent_to_login(client, run_with_metrics):
    for url in [reverse("runs:list"), reverse("runs:detail", args=[run_with_metrics.pk]),
                reverse("runs:metrics", args=[run_with_metrics.pk])]:
        response = client.get(url)
        assert response.status_code == 302
        assert response.url.startswith(reverse("login"))


def test_owner_sees_list_detail_and_metrics(client, owner, run_with_metrics):
    client.force_login(owner)
    assert str(run_with_metrics) in client.get(reverse("runs:list")).content.decode()
    assert client.get(reverse("runs:detail", args=[run_with_metrics.pk])).status_code == 200
    body = client.get(reverse("runs:metrics", args=[run_with_metrics.pk]), {"after": 3}).json()
    assert [p["seq"] for p in body["points"]] == [4, 5]
    assert body["points"][0]["metrics"] == {"reward/mean": 0.4}
    assert body["last_seq"] == 5 and body["complete"] is True


def test_after_past_the_end_returns_no_points_and_keeps_seq(client, owner, run_with_metrics):
    client.force_login(owner)
    body = client.get(reverse("runs:metrics", args=[run_with_metrics.pk]), {"after": 99}).json()
    assert body["points"] == [] and body["last_seq"] == 99


def test_other_user_gets_404_everywhere(client, stranger, run_with_metrics):
    client.force_login(stranger)
    assert client.get(reverse("runs:detail", args=[run_with_metrics.pk])).status_code == 404
    assert client.get(reverse("runs:metrics", args=[run_with_metrics.pk])).status_code == 404
    assert str(run_with_metrics) not in client.get(reverse("runs:list")).content.decode()


def test_staff_sees_other_users_run(client, staff, run_with_metrics):
    client.force_login(staff)
    assert client.get(reverse("runs:metrics", args=[run_with_metrics.pk])).status_code == 200


@pytest.mark.parametrize("after", ["-1", "abc", "1.5", ""])
def test_bad_after_is_400_with_a_message(client, owner, run_with_metrics, after):
    client.force_login(owner)
    response = client.get(reverse("runs:metrics", args=[run_with_metrics.pk]), {"after": after})
    assert response.status_code == 400
    assert "after" in response.json()["error"]


def test_missing_run_is_404(client, owner):
    client.force_login(owner)
    assert client.get("/runs/999999/metrics.json").status_code == 404
    assert client.get("/runs/999999/").status_code == 404


def test_metrics_endpoint_refuses_post(client, owner, run_with_metrics):
    client.force_login(owner)
    assert client.post(reverse("runs:metrics", args=[run_with_metrics.pk])).status_code == 405


def test_the_metrics_pages_carry_the_best_reward_for_the_live_summary(client, owner, run_with_metrics):
    run_with_metrics.best_reward = 0.5
    run_with_metrics.save(update_fields=["best_reward"])
    client.force_login(owner)
    url = reverse("runs:metrics", args=[run_with_metrics.pk])
    assert client.get(url, {"after": 0}).json()["best_reward"] == 0.5
    assert client.get(url, {"max_points": 100}).json()["best_reward"] == 0.5
    page = client.get(reverse("runs:detail", args=[run_with_metrics.pk])).content.decode()
    assert '<dd id="run-best">0.500</dd>' in page
