"""Fixtures of the API tests: tokens, a client per kind of user, and a seeded run."""

import pytest
from django.test import Client

from tests.webapp.runs.seeding import hover_step_event, ingest, make_run
from webapp.api.services import token_create
from webapp.runs.models import Run


@pytest.fixture
def token_for():
    """token_for(user) -> a fresh key of a new token of `user`."""

    def make(user, name: str = "tests") -> str:
        return token_create(user=user, name=name)[1]

    return make


@pytest.fixture
def api_client(token_for):
    """api_client(user or None) -> a test client sending `Authorization: Bearer <key>` (none for None)."""

    def make(user) -> Client:
        if user is None:
            return Client()
        return Client(headers={"Authorization": f"Bearer {token_for(user)}"})

    return make


@pytest.fixture
def seeded_run(owner):
    """A GRPO run with two HoVer-style steps (rollouts, calls, groups); step 1 has an evaluation."""
    run = make_run(owner, state=Run.State.RUNNING, name="hover seeded",
                   config={"strategy": "grpo", "estimator": "gdpo", "group_size": 5, "lora": {"rank": 8}})
    ingest(run, [hover_step_event(1, extra={"eval/reward/mean": 0.25}), hover_step_event(2, seed=1)])
    run.refresh_from_db()
    return run


@pytest.fixture
def users(owner, stranger, staff):
    return {"owner": owner, "stranger": stranger, "staff": staff, "anonymous": None}
