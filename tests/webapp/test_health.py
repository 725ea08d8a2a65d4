import pytest

from tests.conftest import free_port

pytestmark = pytest.mark.django_db


def test_healthz_ok_when_database_and_redis_answer(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "redis": "ok"}


def test_healthz_needs_no_login(client):
    assert client.get("/healthz").status_code == 200


def test_healthz_is_503_naming_redis_when_redis_is_down(client, settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["failing"] == ["redis"]
    assert body["database"] == "ok"
    assert body["redis"].startswith("error: ConnectionError")


def test_healthz_is_503_naming_the_database_when_it_fails(client, monkeypatch):
    from django.db import OperationalError

    from webapp import health

    def broken_cursor(*args, **kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(health.connection, "cursor", broken_cursor)
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["failing"] == ["database"]
    assert response.json()["redis"] == "ok"
