"""Long-run series (downsampling, zoom ranges), heatmaps, run comparison and exports."""

import csv
import datetime
import io
import json
import math

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tests.webapp.runs.seeding import hover_step_event, ingest, make_run, with_token_details
from webapp.runs.charts.series import Series, config_differences, downsample_indices, series_payload
from webapp.runs.models import ModuleCall, Rollout, StepMetric

pytestmark = pytest.mark.django_db


def metric_events(steps, *, attempt=1, spike_at=None):
    for step in steps:
        value = math.sin(step / 50.0)
        if step == spike_at:
            value = 40.0
        yield {"type": "step", "attempt": attempt, "step": step,
               "metrics": {"reward/mean": value, "kl": None if step % 7 == 0 else step / 1000,
                           "group_var/create_query": (step % 5) / 10, "group_var/summarize": 0.2,
                           "zero_var_share/create_query": (step % 3) / 2, "zero_var_share": 0.5}}


@pytest.fixture
def long_run(owner):
    run = make_run(owner)
    ingest(run, metric_events(range(1, 3001), spike_at=1234))
    return run


def metrics(client, run, **params):
    return client.get(reverse("runs:metrics", args=[run.pk]), params)


@pytest.mark.parametrize("key", ["-1", "0", "01", "a.b", "x__gt"])
def test_a_metric_key_that_reads_as_a_number_or_a_lookup_is_a_key(client, owner, key):
    """Issue 35: `series=-1` answered 500 on SQLite (`$[-1]` is no JSON path there), on the page's
    metrics and the API's."""
    run = make_run(owner)
    ingest(run, [{"type": "step", "attempt": 1, "step": 1, "metrics": {key: 0.5, "reward/mean": 1.0}}])
    client.force_login(owner)
    page = metrics(client, run, series=key)
    api = client.get(f"/api/runs/{run.pk}/metrics/", {"series": key})
    assert page.status_code == 200 and api.status_code == 200, (page.content[:500], api.content[:500])
    assert page.json()["series"][key]["y"] == [0.5]
    assert api.json()["series"][key]["y"] == [0.5]


# --- downsampling ---------------------------------------------------------------------------------


def test_downsampling_keeps_ends_and_spikes():
    steps = np.arange(1, 10_001)
    values = np.sin(steps / 100.0)
    values[[4321, 8000]] = [25.0, -30.0]
    idx = downsample_indices(steps, values, 500)
    assert idx.size == 500 and idx[0] == 0 and idx[-1] == steps.size - 1
    assert {4321, 8000} <= set(idx.tolist())
    assert np.all(np.diff(idx) > 0)


def test_short_series_come_back_whole_and_gaps_stay_null():
    payload = series_payload(Series(np.arange(5), np.array([0.0, np.nan, 2.0, 3.0, 4.0])), 100)
    assert payload == {"x": [0, 1, 2, 3, 4], "y": [0.0, None, 2.0, 3.0, 4.0], "total": 5, "downsampled": False}


def test_overview_is_downsampled_per_series(client, owner, long_run):
    client.force_login(owner)
    body = metrics(client, long_run, max_points=300).json()
    assert {"run", "state", "current_step", "last_seq", "complete", "points", "series"} <= set(body)
    assert body["last_seq"] == 3000 and body["points"] == []
    reward = body["series"]["reward/mean"]
    assert reward["downsampled"] and len(reward["x"]) == 300 and reward["total"] == 3000
    assert reward["x"][0] == 1 and reward["x"][-1] == 3000 and 40.0 in reward["y"]  # ends and the spike
    assert body["series"]["group_var/summarize"]["total"] == 3000


def test_zoom_returns_the_range_at_full_resolution(client, owner, long_run):
    client.force_login(owner)
    body = metrics(client, long_run, series="reward/mean,kl", from_step=1000, to_step=1250, max_points=300).json()
    assert set(body["series"]) == {"reward/mean", "kl"}
    reward, kl = body["series"]["reward/mean"], body["series"]["kl"]
    assert reward["x"] == list(range(1000, 1251)) and not reward["downsampled"]
    assert kl["y"][kl["x"].index(1001)] is None  # a null stays a gap
    assert reward["y"][reward["x"].index(1234)] == 40.0


def test_a_resumed_step_shows_the_newest_attempt(client, owner):
    run = make_run(owner)
    ingest(run, metric_events(range(1, 6)))
    ingest(run, [{"type": "step", "attempt": 2, "step": 4, "metrics": {"reward/mean": 9.0}}])
    client.force_login(owner)
    body = metrics(client, run, series="reward/mean").json()
    assert body["series"]["reward/mean"]["x"] == [1, 2, 3, 4, 5]
    assert body["series"]["reward/mean"]["y"][3] == 9.0 and body["last_seq"] == 6


def test_after_keeps_its_contract(client, owner, long_run):
    client.force_login(owner)
    body = metrics(client, long_run, after=2990).json()
    assert set(body) == {"run", "state", "current_step", "best_reward", "last_seq", "complete", "points", "axes"}
    assert [p["seq"] for p in body["points"]] == list(range(2991, 3001))


@pytest.mark.parametrize("params", [
    {"max_points": "5"}, {"max_points": "x"}, {"max_points": "999999"}, {"from_step": "-1"},
    {"series": ",".join(f"k{i}" for i in range(100))},
    {"series": "reward/mean", "after": "3"}, {"to_step": "1.5"},
])
def test_bad_series_params_are_400(client, owner, long_run, params):
    client.force_login(owner)
    response = metrics(client, long_run, **params)
    assert response.status_code == 400 and response.json()["error"]


def test_a_window_that_ends_before_it_starts_is_empty_not_an_error(client, owner, long_run):
    client.force_login(owner)
    response = metrics(client, long_run, series="reward/mean", from_step=9, to_step=3)
    assert response.status_code == 200 and response.json()["series"] == {}


def test_series_query_count_does_not_grow_with_steps(client, owner):
    small, large = make_run(owner), make_run(owner)
    ingest(small, metric_events(range(1, 11)))
    ingest(large, metric_events(range(1, 2001)))
    client.force_login(owner)
    counts = []
    for run in (small, large):
        with CaptureQueriesContext(connection) as overview:
            assert metrics(client, run, max_points=100).status_code == 200
        with CaptureQueriesContext(connection) as zoom:
            assert metrics(client, run, series="reward/mean", from_step=2, to_step=9).status_code == 200
        with CaptureQueriesContext(connection) as heat:
            assert client.get(reverse("runs:heatmap", args=[run.pk]), {"max_columns": 50}).status_code == 200
        counts.append((len(overview), len(zoom), len(heat)))
    assert counts[0] == counts[1]


# --- x axes: wall time and tokens seen -----------------------------------------------------------


def token_events(steps, *, attempt=1, tokens=lambda step: 100 * step):
    for step in steps:
        metrics = {"reward/mean": step / 10, "lr": 0.002}
        if tokens(step) is not None:
            metrics["completion_tokens"] = tokens(step)
        yield {"type": "step", "attempt": attempt, "step": step, "metrics": metrics}


def stamp(run, seconds_by_step):
    """Gives the stored rows of each step a known created_at (seconds after a fixed start)."""
    start = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)
    for step, seconds in seconds_by_step.items():
        StepMetric.objects.filter(run=run, step=step).update(created_at=start + datetime.timedelta(seconds=seconds))


def test_series_carry_wall_time_and_tokens_seen(client, owner):
    run = make_run(owner)
    ingest(run, token_events(range(1, 6)))
    stamp(run, {1: 0, 2: 30, 3: 95.5, 4: 200, 5: 3600})
    client.force_login(owner)
    body = metrics(client, run, max_points=100).json()
    axes = body["axes"]
    assert axes["step"] == [1, 2, 3, 4, 5] == body["series"]["reward/mean"]["x"]
    assert axes["t"] == [0.0, 30.0, 95.5, 200.0, 3600.0]
    assert axes["tokens"] == [100, 300, 600, 1000, 1500]  # cumulative completion tokens
    assert axes["now_t"] > 3600  # the present, on the same clock


def test_a_zoomed_range_counts_the_tokens_before_it(client, owner):
    run = make_run(owner)
    ingest(run, token_events(range(1, 11), tokens=lambda step: None if step == 3 else 10))
    client.force_login(owner)
    axes = metrics(client, run, series="reward/mean", from_step=5, to_step=7).json()["axes"]
    assert axes["step"] == [5, 6, 7]
    assert axes["tokens"] == [40, 50, 60]  # steps 1-4 seen before the range; step 3 reported none


def test_axes_follow_the_newest_attempt_and_the_downsampled_points(client, owner, long_run):
    resumed = make_run(owner)
    ingest(resumed, token_events(range(1, 5)))
    stamp(resumed, {1: 0, 2: 10, 3: 20, 4: 30})
    ingest(resumed, token_events([3, 4], attempt=2, tokens=lambda step: 1000))
    stamp(resumed, {3: 500, 4: 510})  # both attempts' rows; the newest seq wins below
    StepMetric.objects.filter(run=resumed, attempt=1, step__in=[3, 4]).update(
        created_at=datetime.datetime(2025, 1, 1, 0, 0, 20, tzinfo=datetime.UTC))
    client.force_login(owner)
    axes = metrics(client, resumed, max_points=100).json()["axes"]
    assert axes["t"] == [0.0, 10.0, 500.0, 510.0] and axes["tokens"] == [100, 300, 1300, 2300]
    body = metrics(client, long_run, max_points=300).json()  # no completion_tokens in this run
    drawn = sorted({x for p in body["series"].values() for x in p["x"]})
    assert body["axes"]["step"] == drawn and body["axes"]["tokens"] is None
    assert len(body["axes"]["t"]) == len(drawn)


def test_after_pages_carry_the_axes_of_their_points(client, owner):
    run = make_run(owner)
    ingest(run, token_events(range(1, 8)))
    stamp(run, {s: 60 * (s - 1) for s in range(1, 8)})
    client.force_login(owner)
    axes = metrics(client, run, after=4).json()["axes"]
    assert axes["step"] == [5, 6, 7] and axes["t"] == [240.0, 300.0, 360.0] and axes["tokens"] == [1500, 2100, 2800]
    empty = metrics(client, run, after=7).json()["axes"]
    assert empty["step"] == [] and empty["now_t"] > 360
    assert metrics(client, make_run(owner), after=0).json()["axes"] == {"step": [], "t": [], "tokens": [], "now_t": None}


def test_compare_traces_carry_wall_time_and_tokens(client, owner):
    a, b = make_run(owner), make_run(owner)
    ingest(a, token_events(range(1, 4)))
    ingest(b, token_events(range(1, 3), tokens=lambda step: None))
    stamp(a, {1: 0, 2: 60, 3: 180})
    client.force_login(owner)
    # band=none: each run drawn alone (with their equal configs they would be one group of seeds).
    payload = client.get(reverse("runs:compare"), {"runs": [a.pk, b.pk], "metrics": ["reward/mean"], "band": "none"}
                         ).context["payload"]
    traces = payload["metrics"][0]["traces"]
    assert traces[str(a.pk)]["t"] == [0.0, 60.0, 180.0] and traces[str(a.pk)]["tokens"] == [100, 300, 600]
    assert traces[str(b.pk)]["tokens"] is None and len(traces[str(b.pk)]["t"]) == 2


# --- heatmap --------------------------------------------------------------------------------------


def test_heatmap_rows_are_modules_and_long_runs_are_binned(client, owner, long_run):
    client.force_login(owner)
    body = client.get(reverse("runs:heatmap", args=[long_run.pk]), {"family": "group_var", "max_columns": 300}).json()
    assert body["modules"] == ["create_query", "summarize"] and body["bin"] == 10
    assert len(body["x"]) == 300 and body["x"][:2] == [1, 11]
    assert body["z"][0][0] == pytest.approx(np.mean([(s % 5) / 10 for s in range(1, 11)]))
    assert body["z"][1] == pytest.approx([0.2] * 300)
    zero = client.get(reverse("runs:heatmap", args=[long_run.pk]), {"family": "zero_var_share"}).json()
    assert zero["modules"] == ["create_query"]  # the run-wide `zero_var_share` is not a module


def test_heatmap_bad_family_is_400(client, owner, long_run):
    client.force_login(owner)
    assert client.get(reverse("runs:heatmap", args=[long_run.pk]), {"family": "loss"}).status_code == 400
    assert client.get(reverse("runs:heatmap", args=[long_run.pk]), {"max_columns": "0"}).status_code == 400


# --- comparison -----------------------------------------------------------------------------------


def test_config_differences_list_only_what_differs(owner):
    a = make_run(owner, config={"lr": 1e-5, "estimator": "grpo", "lora": {"r": 16, "alpha": 64}})
    b = make_run(owner, config={"lr": 1e-5, "estimator": "gdpo", "lora": {"r": 8, "alpha": 64}, "seed": 3})
    assert config_differences([a, b]) == [("estimator", ['"grpo"', '"gdpo"']), ("lora.r", ["16", "8"]),
                                          ("seed", ["", "3"])]


def test_compare_overlays_runs_and_lists_differences(client, owner):
    a = make_run(owner, config={"estimator": "grpo"})
    b = make_run(owner, config={"estimator": "gdpo"})
    ingest(a, metric_events(range(1, 30)))
    ingest(b, metric_events(range(1, 20)))
    client.force_login(owner)
    response = client.get(reverse("runs:compare"), {"runs": [a.pk, b.pk], "metrics": ["reward/mean", "kl"]})
    assert response.status_code == 200
    payload = response.context["payload"]
    assert [m["key"] for m in payload["metrics"]] == ["reward/mean", "kl"]
    traces = payload["metrics"][0]["traces"]
    assert len(traces[str(a.pk)]["x"]) == 29 and len(traces[str(b.pk)]["x"]) == 19
    assert response.context["differences"] == [("estimator", ['"grpo"', '"gdpo"'])]
    assert "reward/mean" in response.context["keys"] and "group_var/summarize" in response.context["keys"]


def test_compare_scopes_runs_and_rejects_bad_input(client, owner, stranger, staff):
    mine, theirs = make_run(owner), make_run(stranger)
    client.force_login(owner)
    assert client.get(reverse("runs:compare"), {"runs": [mine.pk, theirs.pk]}).status_code == 404
    assert client.get(reverse("runs:compare"), {"runs": ["x"]}).status_code == 400
    assert client.get(reverse("runs:compare"), {"runs": list(range(1, 30))}).status_code == 400
    assert client.get(reverse("runs:compare")).status_code == 200  # the empty chooser
    client.force_login(staff)
    assert client.get(reverse("runs:compare"), {"runs": [mine.pk, theirs.pk]}).status_code == 200
    client.logout()
    assert client.get(reverse("runs:compare")).status_code == 302


def test_compare_query_count_does_not_grow_with_steps(client, owner):
    counts = []
    for n in (10, 800):
        a, b = make_run(owner), make_run(owner)
        ingest(a, metric_events(range(1, n)))
        ingest(b, metric_events(range(1, n)))
        client.force_login(owner)
        with CaptureQueriesContext(connection) as queries:
            client.get(reverse("runs:compare"), {"runs": [a.pk, b.pk], "metrics": ["reward/mean", "kl"]})
        counts.append(len(queries))
    assert counts[0] == counts[1]


# --- exports --------------------------------------------------------------------------------------


def consume(response) -> tuple[str, int]:
    chunks = [c.decode() if isinstance(c, bytes) else c for c in response.streaming_content]
    return "".join(chunks), len(chunks)


def test_metrics_csv_streams_every_step(client, owner, long_run):
    client.force_login(owner)
    response = client.get(reverse("runs:export_metrics", args=[long_run.pk]))
    assert response.streaming and response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    text, chunks = consume(response)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 3000 and chunks >= 3000 // 500
    assert rows[1233]["reward/mean"] == "40.0" and rows[6]["kl"] == ""  # step 1234's spike; step 7's null
    assert list(rows[0])[:4] == ["seq", "attempt", "step", "created_at"]


def test_rollouts_jsonl_has_every_rollout_with_its_calls(client, owner):
    run = make_run(owner)
    ingest(run, [hover_step_event(s, examples=3, rollouts=4) for s in (1, 2, 3)])
    client.force_login(owner)
    response = client.get(reverse("runs:export_rollouts", args=[run.pk]))
    assert response.streaming
    text, _ = consume(response)
    lines = [json.loads(line) for line in text.splitlines()]
    assert len(lines) == Rollout.objects.filter(run=run).count() == 36
    stored = Rollout.objects.filter(run=run).order_by("pk").first()
    first = lines[0]
    assert (first["step"], first["index"], first["example_id"]) == (stored.step, stored.index, stored.example_id)
    assert [c["position"] for c in first["calls"]] == list(range(stored.calls.count()))
    assert first["calls"][0]["prompt"].startswith("Claim:")
    assert sum(len(line["calls"]) for line in lines) == ModuleCall.objects.filter(rollout__run=run).count()
    assert all("tokens" not in c for line in lines for c in line["calls"])  # the run stored none


def test_rollouts_jsonl_carries_each_call_s_token_details(client, owner):
    run = make_run(owner)
    events = [with_token_details(hover_step_event(s, examples=2, rollouts=3), seed=s) for s in (1, 2)]
    ingest(run, events)
    client.force_login(owner)
    lines = [json.loads(line) for line in consume(client.get(reverse("runs:export_rollouts", args=[run.pk])))[0].splitlines()]
    sent = {(e["step"], i, p): c["tokens"] for e in events for i, t in enumerate(e["rollouts"]) for p, c in enumerate(t["calls"])}
    for line in lines:
        for call in line["calls"]:
            details = sent[(line["step"], line["index"], call["position"])]
            assert call["tokens"]["pieces"] == details["pieces"]
            assert call["tokens"]["entropy"] == pytest.approx(details["entropy"], abs=1e-3)
            assert call["tokens"]["topk"] == details["topk"]


def test_exports_stream_with_a_constant_number_of_queries(client, owner):
    client.force_login(owner)
    counts = []
    for steps, examples in ((1, 1), (6, 6)):
        run = make_run(owner)
        ingest(run, [hover_step_event(s, examples=examples, rollouts=6, group_size=6) for s in range(1, steps + 1)])
        ingest(run, metric_events(range(steps + 1, steps * 300)))
        per_export, chunks = [], []
        for name in ("runs:export_metrics", "runs:export_rollouts"):
            with CaptureQueriesContext(connection) as queries:
                chunks.append(consume(client.get(reverse(name, args=[run.pk])))[1])
            per_export.append(len(queries))
        counts.append(tuple(per_export))
    # The large run: 1,799 steps and 216 rollouts come in several pieces, with the same queries.
    assert StepMetric.objects.filter(run=run).count() > 1000 and Rollout.objects.filter(run=run).count() == 216
    assert chunks[0] > 3 and chunks[1] > 2
    assert counts[0] == counts[1]


def test_exports_are_scoped(client, owner, stranger, long_run):
    for user, status in ((stranger, 404), (owner, 200)):
        client.force_login(user)
        for name in ("runs:export_metrics", "runs:export_rollouts"):
            assert client.get(reverse(name, args=[long_run.pk])).status_code == status
    client.logout()
    assert client.get(reverse("runs:export_metrics", args=[long_run.pk])).status_code == 302


def test_series_and_heatmap_are_scoped(client, owner, stranger, staff, long_run):
    urls = [reverse("runs:heatmap", args=[long_run.pk]), reverse("runs:metrics", args=[long_run.pk]) + "?max_points=50"]
    for user, status in ((stranger, 404), (owner, 200), (staff, 200)):
        client.force_login(user)
        for url in urls:
            assert client.get(url).status_code == status, (user, url)
    client.logout()
    for url in urls:
        assert client.get(url).status_code == 302
