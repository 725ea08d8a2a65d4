"""Fixtures of the runs app's tests."""

import datetime as dt

import pytest
from django.utils import timezone

from tests.webapp.runs.seeding import make_run
from tests.webapp.runs.table_world import config
from webapp.runs.models import Run


@pytest.fixture
def table(owner):
    """Four runs of one owner with different rewards, configs and tags."""
    now = timezone.now()
    return {
        "a": make_run(owner, name="alpha", best_reward=0.2, last_reward=0.1, tags=["baseline"],
                      config=config(estimator="gdpo", learning_rate=0.001)),
        "b": make_run(owner, name="beta", best_reward=None, tags=["baseline-v2", "sweep"],
                      config=config(strategy="mhgpo")),
        "c": make_run(owner, name="gamma", best_reward=0.9, last_eval_reward=0.7, state=Run.State.SUCCEEDED,
                      started_at=now - dt.timedelta(hours=3), finished_at=now, gpus=2,
                      config=config(rewards=[{"name": "f1", "weight": 1.0}])),
        "d": make_run(owner, name="delta sweep", best_reward=0.5, state=Run.State.FAILED,
                      started_at=now - dt.timedelta(hours=1), finished_at=now, config=config(group_size=8)),
    }
