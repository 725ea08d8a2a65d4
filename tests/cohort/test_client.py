"""`cohort.client.Client` against the real ASGI server (daphne) over HTTP, with a real token."""

import io

import numpy as np
import pandas as pd
import pytest
from django.test import Client as DjangoClient

from cohort.client import Client, CohortAPIError
from tests.webapp.runs.seeding import hover_step_event, ingest, make_run
from webapp.api.services import token_create, token_revoke
from webapp.runs.models import Group, Rollout, Run

NEUTRAL = ("cohort.client turning the API's answers into DataFrames over HTTP (daphne), following pages and "
           "raising clear errors; every endpoint and parameter it calls (config filters, state, pages, "
           "series, windows, downsampling) is tested on both backends in tests/webapp/api/test_endpoints.py, "
           "tokens in tests/webapp/api/test_tokens.py, the CSV export it is compared with in "
           "tests/webapp/runs/charts/test_series_views.py")
pytestmark = [pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]


@pytest.fixture
def resumed_run(owner):
    """Steps 1-4, then a resume (attempt 2) that re-did steps 3-4 and went on to 6; evaluations on
    some steps only, and a metric that is null at one step (NaN in both the CSV and the client)."""
    run = make_run(owner, state=Run.State.SUCCEEDED, name="resumed", config={"strategy": "grpo", "estimator": "gdpo"})
    ingest(run, [hover_step_event(s, extra={"loss": 1.0 / s, "eval/reward/mean": 0.1 * s if s % 2 else None})
                 for s in range(1, 5)])
    ingest(run, [hover_step_event(s, attempt=2, seed=9, extra={"loss": 2.0 / s if s != 5 else None,
                                                                "eval/reward/mean": 0.3 if s == 6 else None})
                 for s in range(3, 7)])
    return run


def csv_metrics(user, run) -> pd.DataFrame:
    """The run's CSV export (the page, as a logged-in browser downloads it), one row per step with the
    newest attempt's row (as the charts and the API show it), without seq/attempt/created_at."""
    browser = DjangoClient()
    browser.force_login(user)
    response = browser.get(f"/runs/{run.pk}/export/metrics.csv")
    assert response.status_code == 200
    text = b"".join(response.streaming_content).decode()
    frame = pd.read_csv(io.StringIO(text))
    frame = frame.sort_values("seq").drop_duplicates("step", keep="last").sort_values("step")
    return frame.drop(columns=["seq", "attempt", "created_at"]).reset_index(drop=True)


def test_metrics_equal_the_csv_export(asgi_server, owner, resumed_run):
    client = Client(asgi_server, token_create(user=owner, name="nb")[1])
    got = client.metrics(resumed_run.pk)
    expected = csv_metrics(owner, resumed_run)
    assert list(got.columns) == list(expected.columns) and got.columns[0] == "step"
    assert got["step"].tolist() == [1, 2, 3, 4, 5, 6]
    pd.testing.assert_frame_equal(got, expected.astype({c: "float64" for c in expected.columns if c != "step"}),
                                  check_exact=True)
    assert np.isnan(got.loc[got["step"] == 5, "loss"]).all() and got.loc[got["step"] == 4, "loss"].item() == 0.5
    assert got.loc[got["step"] == 2, "eval/reward/mean"].isna().all()


def test_metrics_series_and_downsampling(asgi_server, owner):
    run = make_run(owner)
    ingest(run, [{"type": "step", "attempt": 1, "step": s, "metrics": {"loss": (s * 37 % 11) / 10, "kl": s / 100}}
                 for s in range(1, 301)])
    client = Client(asgi_server, token_create(user=owner, name="nb")[1])
    only = client.metrics(run.pk, series=["kl"])
    assert list(only.columns) == ["step", "kl"] and len(only) == 300
    small = client.metrics(run.pk, series=["loss"], max_points=20)
    assert list(small.columns) == ["step", "loss"] and len(small) == 20 and small["step"].is_monotonic_increasing
    window = client.metrics(run.pk, from_step=10, to_step=19)
    assert window["step"].tolist() == list(range(10, 20))


def test_runs_run_rollouts_groups_shapes(asgi_server, owner, stranger, resumed_run):
    other = make_run(owner, name="other", config={"estimator": "grpo", "lora": {"rank": 4}})
    make_run(stranger, name="not mine")
    client = Client(asgi_server, token_create(user=owner, name="nb")[1])

    runs = client.runs()
    assert len(runs) == 2 and set(runs["id"]) == {resumed_run.pk, other.pk}
    for column in ("name", "state", "task", "program", "owner", "current_step", "best_reward", "last_reward_mean",
                   "last_eval_reward_mean", "attempt", "created_at", "config.estimator", "config.lora.rank"):
        assert column in runs.columns, column
    assert str(runs["created_at"].dtype).startswith("datetime64")
    row = runs.set_index("id").loc[resumed_run.pk]
    assert row["current_step"] == 6 and row["last_eval_reward_mean"] == pytest.approx(0.3)
    assert client.runs(config={"estimator": "gdpo"})["id"].tolist() == [resumed_run.pk]
    assert client.runs(config={"lora.rank": 4})["id"].tolist() == [other.pk]
    assert client.runs(state="failed").empty

    detail = client.run(resumed_run.pk)
    assert detail["config"]["estimator"] == "gdpo" and detail["summary"]["attempt"] == resumed_run.attempt

    rollouts = client.rollouts(resumed_run.pk, 3)
    stored = Rollout.objects.filter(run=resumed_run, step=3, attempt=2)
    assert len(rollouts) == stored.count() and set(rollouts["attempt"]) == {2}
    assert {"example_id", "index", "total_reward", "reward_components", "failed", "error", "calls",
            "n_calls"} <= set(rollouts.columns)
    assert rollouts["index"].tolist() == sorted(stored.values_list("index", flat=True))
    assert "prompt" not in rollouts["calls"].iloc[0][0]
    assert "prompt" in client.rollouts(resumed_run.pk, 3, attempt=1, prompts=True)["calls"].iloc[0][0]

    groups = client.groups(resumed_run.pk, 3)
    assert len(groups) == Group.objects.filter(run=resumed_run, step=3, attempt=2).count()
    assert {"module", "invocation_index", "kind", "example_id", "size", "reward_mean", "reward_var", "similarity",
            "members"} <= set(groups.columns)
    assert groups["members"].map(len).tolist() == groups["size"].tolist()


def test_pages_are_followed(asgi_server, owner, monkeypatch):
    import cohort.client

    monkeypatch.setattr(cohort.client, "PAGE_SIZE", 2)  # five runs in three pages
    made = {make_run(owner, name=f"r{i}").pk for i in range(5)}
    client = Client(asgi_server, token_create(user=owner, name="nb")[1])
    assert set(client.runs()["id"]) == made and len(client.runs()) == 5


def test_clear_errors(asgi_server, owner, stranger):
    theirs = make_run(stranger)
    token, key = token_create(user=owner, name="nb")
    client = Client(asgi_server, key)
    with pytest.raises(CohortAPIError) as missing:
        client.run(theirs.pk)
    assert missing.value.status == 404 and missing.value.message == "no such run"
    with pytest.raises(CohortAPIError) as bad:
        client.metrics(theirs.pk, max_points=1)
    assert bad.value.status == 404  # visibility first: a stranger's run never answers a 400
    mine = make_run(owner)
    with pytest.raises(CohortAPIError) as bad:
        client.metrics(mine.pk, max_points=1)
    assert bad.value.status == 400 and "max_points" in bad.value.message
    token_revoke(user=owner, token_id=token.pk)
    with pytest.raises(CohortAPIError) as rejected:
        client.runs()
    assert rejected.value.status == 401 and rejected.value.message.startswith("token rejected")
    with pytest.raises(CohortAPIError) as unknown:
        Client(asgi_server, "nope").run(mine.pk)
    assert unknown.value.status == 401
    with pytest.raises(ValueError):
        Client("localhost:8000", key)
