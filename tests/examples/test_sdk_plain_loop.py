"""examples/sdk_plain_loop.py, a plain PyTorch loop with the SDK, streams a run into the real server."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cohort.client import Client
from tests.conftest import ROOT
from tests.webapp.runs.factories import make_task
from webapp.api.services import token_create
from webapp.runs.models import Run

NEUTRAL = ("the example's own loop and logging; the external-run endpoints it reaches through the SDK are "
           "tested on both backends by the web app's API tests")
pytestmark = [pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]


def test_the_plain_loop_example_streams_its_run(asgi_server, owner, tmp_path):
    task = make_task()
    key = token_create(user=owner, name="example")[1]
    env = {**os.environ, "COHORT_URL": asgi_server, "COHORT_TOKEN": key}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "sdk_plain_loop.py"), "--task", task.name,
                           "--steps", "4", "--dir", str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "after 4 steps" in done.stdout and "not uploaded" not in done.stderr
    run = Run.objects.get(owner=owner)
    assert run.state == "succeeded" and run.name == "plain loop" and run.config["group_size"] == 8
    client = Client(asgi_server, key)
    metrics = client.metrics(run.pk)
    assert metrics["step"].tolist() == [1, 2, 3, 4]
    assert {"loss", "reward/mean", "reward/content", "reward/format", "zero_var_share"} <= set(metrics.columns)
    assert metrics["reward/mean"].between(0, 2).all()
    groups = client.groups(run.pk, 4)
    assert len(groups) == 4 and groups["size"].tolist() == [8, 8, 8, 8]
    rollouts = client.rollouts(run.pk, 4)
    assert len(rollouts) == 32
