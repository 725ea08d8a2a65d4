"""The read API endpoints: who sees what, what each returns, 400 on every bad parameter, and a
query count that does not grow with the data."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.webapp.runs.factories import make_program
from tests.webapp.runs.seeding import hover_step_event, ingest, make_run
from webapp.runs.charts import series
from webapp.runs.ingest.texts import fill_call_texts
from webapp.runs.models import Group, GroupMember, ModuleCall, Rollout, Run, Task

pytestmark = pytest.mark.django_db


def endpoints(run) -> list[str]:
    return [
        f"/api/runs/{run.pk}/",
        f"/api/runs/{run.pk}/metrics/",
        f"/api/runs/{run.pk}/metrics/?series=reward/mean&max_points=10",
        f"/api/runs/{run.pk}/steps/1/rollouts/",
        f"/api/runs/{run.pk}/steps/1/groups/",
    ]


# --- ownership: the same rule as the pages ---------------------------------------------------------


@pytest.mark.parametrize("who, status", [("owner", 200), ("stranger", 404), ("anonymous", 401), ("staff", 200)])
def test_every_run_endpoint_follows_ownership(api_client, users, seeded_run, who, status):
    client = api_client(users[who])
    for url in endpoints(seeded_run):
        response = client.get(url)
        assert response.status_code == status, (url, response.content[:200])
        assert response["Content-Type"].startswith("application/json")
        if status != 200:
            assert response.json()["detail"]


@pytest.mark.parametrize("who, status, listed", [
    ("owner", 200, True), ("stranger", 200, False), ("anonymous", 401, False), ("staff", 200, True)])
def test_run_list_follows_ownership(api_client, users, seeded_run, who, status, listed):
    response = api_client(users[who]).get("/api/runs/")
    assert response.status_code == status
    if status == 200:
        ids = [r["id"] for r in response.json()["results"]]
        assert (seeded_run.pk in ids) is listed


def test_session_login_reads_the_api_too(client, owner, seeded_run):
    client.force_login(owner)
    assert client.get(f"/api/runs/{seeded_run.pk}/").status_code == 200


def test_missing_run_and_unstored_step_are_404(api_client, owner, seeded_run):
    client = api_client(owner)
    assert client.get("/api/runs/999999/").status_code == 404
    assert client.get("/api/runs/999999/metrics/").status_code == 404
    assert client.get(f"/api/runs/{seeded_run.pk}/steps/9/rollouts/").status_code == 404
    assert client.get(f"/api/runs/{seeded_run.pk}/steps/1/groups/?attempt=2").status_code == 404


# --- content ------------------------------------------------------------------------------------


def test_run_detail_has_config_and_summary(api_client, owner, seeded_run):
    body = api_client(owner).get(f"/api/runs/{seeded_run.pk}/").json()
    assert body["id"] == seeded_run.pk and body["name"] == "hover seeded" and body["state"] == "running"
    assert body["task"] == seeded_run.task.name and body["program"] == seeded_run.task.program.name
    assert body["owner"] == "owner" and body["config"] == seeded_run.config
    summary = body["summary"]
    last = seeded_run.step_metrics.order_by("-seq").first().metrics
    assert summary["current_step"] == 2 and summary["total_steps"] == seeded_run.total_steps
    assert summary["best_reward"] == pytest.approx(seeded_run.best_reward)
    assert summary["last_reward_mean"] == pytest.approx(last["reward/mean"])
    assert summary["last_eval_reward_mean"] == 0.25  # from step 1: step 2 did not evaluate
    assert summary["attempt"] == 1 and summary["error"] == ""
    assert summary["created_at"] and summary["started_at"] is None and summary["finished_at"] is None


def test_run_list_filters(api_client, owner, staff, stranger):
    other_program = make_program("search", modules=("query", "answer"))
    other_task = Task.objects.create(name="hotpot", title="Hotpot", program=other_program)
    a = make_run(owner, name="gdpo baseline", config={"estimator": "gdpo", "group_size": 8, "lora": {"rank": 8},
                                                      "contains": "x"})
    b = make_run(owner, name="grpo try", state=Run.State.SUCCEEDED, config={"estimator": "grpo", "group_size": 12})
    c = make_run(owner, name="hotpot gdpo", config={"estimator": "gdpo", "group_size": "8"})
    Run.objects.filter(pk=c.pk).update(task=other_task)
    d = make_run(stranger, name="stranger gdpo", config={"estimator": "gdpo"})
    Run.objects.filter(pk=a.pk).update(tags=["paper", "sweep-2"])
    Run.objects.filter(pk=b.pk).update(tags=["paper-draft"])
    client = api_client(owner)

    def ids(**params):
        response = client.get("/api/runs/", params)
        assert response.status_code == 200, response.content
        return {r["id"] for r in response.json()["results"]}

    assert ids() == {a.pk, b.pk, c.pk}
    assert ids(state="succeeded") == {b.pk}
    assert ids(task="hotpot") == {c.pk}
    assert ids(program="search") == {c.pk}
    assert ids(q="GDPO") == {a.pk, c.pk}
    assert ids(config="estimator=gdpo") == {a.pk, c.pk}
    assert ids(config="group_size=8") == {a.pk}  # a JSON number: the string "8" does not match
    assert ids(config='group_size="8"') == {c.pk}
    assert ids(config=["estimator=gdpo", "group_size=8"]) == {a.pk}
    assert ids(config="lora.rank=8") == {a.pk}
    assert ids(config="contains=x") == {a.pk}  # a key named like a lookup stays a key
    assert ids(owner="stranger") == set()  # not visible to the owner anyway
    assert ids(tag="paper") == {a.pk}  # a whole tag, not a part of one
    assert ids(tag="PAPER-draft") == {b.pk}
    assert ids(tag=["paper", "sweep-2"], config="estimator=gdpo") == {a.pk}
    assert ids(tag=["paper", "paper-draft"]) == set()
    client = api_client(staff)
    response = client.get("/api/runs/", {"owner": "stranger", "config": "estimator=gdpo"})
    assert {r["id"] for r in response.json()["results"]} == {d.pk}


@pytest.mark.parametrize("key", ["steps.gt", "x.regex", "x.isnull", "exact", "lora.rank.lt", "iexact.contains"])
def test_a_config_key_named_like_a_lookup_is_a_key(api_client, owner, key):
    """Issue 35: `config=steps.gt=1` became the ORM lookup `config__steps__gt` and answered 500."""
    path = key.split(".")
    nested: object = 1
    for part in reversed(path):
        nested = {part: nested}
    match = make_run(owner, name="has it", config=nested)
    make_run(owner, name="other", config={"steps": 5, "x": "y", "lora": {"rank": 8}})
    response = api_client(owner).get("/api/runs/", {"config": f"{key}=1"})
    assert response.status_code == 200, response.content
    assert [r["id"] for r in response.json()["results"]] == [match.pk]


def test_numeric_config_keys_are_keys_and_whole_numbers_index_lists(api_client, owner):
    """Issue 35: `config=-9.a=1` answered 500 on SQLite (`$[-9]` is no JSON path there)."""
    negative = make_run(owner, config={"-9": {"a": 1}})
    padded = make_run(owner, config={"extra": {"01": "x", "1": "y"}})
    listed = make_run(owner, config={"rewards": [{"name": "f1"}, {"name": "em"}]})
    client = api_client(owner)

    def ids(config):
        response = client.get("/api/runs/", {"config": config})
        assert response.status_code == 200, response.content
        return {r["id"] for r in response.json()["results"]}

    assert ids("-9.a=1") == {negative.pk}
    assert ids("extra.01=x") == {padded.pk}  # `01` is a key, never list index 1
    assert ids("rewards.1.name=em") == {listed.pk}
    assert ids("rewards.-1.name=em") == set()  # a key no list has, not "the last one"
    assert ids("99999999999999999999=1") == set()


def test_a_config_value_that_is_no_json_number_is_text(api_client, owner):
    """Issue 35: `config=x=-Infinity` became a float PostgreSQL's jsonb refuses (a 500); NaN and
    ±Infinity are no JSON, so they are compared as text."""
    text = make_run(owner, config={"x": "-Infinity", "y": ["NaN"]})
    make_run(owner, config={"x": 1.0})
    client = api_client(owner)
    for config, expected in (("x=-Infinity", [text.pk]), ("x=NaN", []), ("y=[NaN]", []), ("x=Infinity", [])):
        response = client.get("/api/runs/", {"config": config})
        assert response.status_code == 200, (config, response.content[:300])
        assert [r["id"] for r in response.json()["results"]] == expected, config


def test_run_list_pages(api_client, owner):
    runs = [make_run(owner, name=f"run {i}") for i in range(7)]
    client = api_client(owner)
    first = client.get("/api/runs/", {"limit": 3}).json()
    assert first["count"] == 7 and len(first["results"]) == 3 and first["previous"] is None
    assert [r["id"] for r in first["results"]] == [r.pk for r in reversed(runs)][:3]  # newest first
    seen = [r["id"] for r in first["results"]]
    page = first
    while page["next"]:
        page = client.get(page["next"]).json()
        seen += [r["id"] for r in page["results"]]
    assert sorted(seen) == sorted(r.pk for r in runs) and len(seen) == 7
    assert page["previous"] and "offset=3" in page["previous"]


def test_metrics_full_series_match_metric_series(api_client, owner, seeded_run):
    body = api_client(owner).get(f"/api/runs/{seeded_run.pk}/metrics/").json()
    expected, _ = series.metric_series(seeded_run)
    assert body["run"] == seeded_run.pk and set(body["series"]) == set(expected)
    for key, s in expected.items():
        got = body["series"][key]
        assert got["x"] == s.steps.tolist() and got["total"] == s.steps.size and got["downsampled"] is False
        assert got["y"] == [None if v != v else v for v in s.values.tolist()]
    assert body["series"]["eval/reward/mean"] == {"x": [1], "y": [0.25], "total": 1, "downsampled": False}


def test_metrics_newest_attempt_wins_a_step(api_client, owner):
    run = make_run(owner)
    ingest(run, [hover_step_event(s, extra={"loss": float(s)}) for s in (1, 2, 3)])
    ingest(run, [hover_step_event(s, attempt=2, extra={"loss": 10.0 + s}) for s in (3, 4)])  # resumed at 2
    body = api_client(owner).get(f"/api/runs/{run.pk}/metrics/", {"series": "loss"}).json()
    assert body["series"] == {"loss": {"x": [1, 2, 3, 4], "y": [1.0, 2.0, 13.0, 14.0], "total": 4,
                                       "downsampled": False}}


def test_metrics_downsampled_and_windowed(api_client, owner):
    run = make_run(owner)
    ingest(run, [{"type": "step", "attempt": 1, "step": s, "metrics": {"loss": (s * 7919 % 101) / 100, "kl": s}}
                 for s in range(1, 501)])
    client = api_client(owner)
    body = client.get(f"/api/runs/{run.pk}/metrics/", {"series": "loss", "max_points": 50}).json()
    loss = body["series"]["loss"]
    assert list(body["series"]) == ["loss"] and loss["total"] == 500 and loss["downsampled"] is True
    assert len(loss["x"]) == 50 and loss["x"][0] == 1 and loss["x"][-1] == 500
    window = client.get(f"/api/runs/{run.pk}/metrics/", {"from_step": 100, "to_step": 109}).json()
    assert window["series"]["kl"]["x"] == list(range(100, 110)) and window["series"]["kl"]["y"] == list(range(100, 110))
    # A window that ends before it starts holds no step (issue 35: the schema calls it valid, so no 400).
    inverted = client.get(f"/api/runs/{run.pk}/metrics/", {"from_step": 109, "to_step": 100})
    assert inverted.status_code == 200 and inverted.json()["series"] == {}


def test_rollouts_with_calls_prompts_on_request(api_client, owner, seeded_run):
    client = api_client(owner)
    body = client.get(f"/api/runs/{seeded_run.pk}/steps/1/rollouts/").json()
    stored = list(Rollout.objects.filter(run=seeded_run, step=1).order_by("index"))
    assert body["count"] == len(stored) and [r["index"] for r in body["results"]] == [r.index for r in stored]
    first = body["results"][0]
    assert first["example_id"] == stored[0].example_id and first["total_reward"] == stored[0].total_reward
    assert first["reward_components"] == stored[0].reward_components and first["failed"] == stored[0].failed
    assert first["final_output"] == stored[0].final_output and first["error"] == stored[0].error
    calls = list(ModuleCall.objects.filter(rollout=stored[0]).order_by("position"))
    fill_call_texts(calls)
    assert [c["module"] for c in first["calls"]] == [c.module for c in calls]
    assert [c["invocation_index"] for c in first["calls"]] == [c.invocation_index for c in calls]
    assert [c["completion"] for c in first["calls"]] == [c.completion for c in calls]
    assert [c["advantage"] for c in first["calls"]] == [c.advantage for c in calls]
    assert {"parsed_ok", "module", "completion"} <= set(first["calls"][0]) and "prompt" not in first["calls"][0]
    with_prompts = client.get(f"/api/runs/{seeded_run.pk}/steps/1/rollouts/", {"prompts": 1}).json()
    assert with_prompts["results"][0]["calls"][0]["prompt"] == calls[0].prompt


def test_rollouts_page_and_attempt(api_client, owner):
    run = make_run(owner)
    ingest(run, [hover_step_event(1, examples=2, rollouts=4)])
    ingest(run, [hover_step_event(1, examples=1, rollouts=3, attempt=2, seed=4)])
    client = api_client(owner)
    newest = client.get(f"/api/runs/{run.pk}/steps/1/rollouts/").json()
    assert newest["count"] == 3 and {r["attempt"] for r in newest["results"]} == {2}
    older = client.get(f"/api/runs/{run.pk}/steps/1/rollouts/", {"attempt": 1, "limit": 5, "offset": 5}).json()
    assert older["count"] == 8 and [r["index"] for r in older["results"]] == [5, 6, 7] and older["next"] is None


def test_groups_with_members(api_client, owner, seeded_run):
    body = api_client(owner).get(f"/api/runs/{seeded_run.pk}/steps/1/groups/").json()
    stored = list(Group.objects.filter(run=seeded_run, step=1).order_by("index"))
    assert body["count"] == len(stored)
    group = body["results"][0]
    for field in ("module", "invocation_index", "kind", "example_id", "size", "reward_mean", "reward_var", "similarity"):
        assert group[field] == getattr(stored[0], field), field
    members = list(GroupMember.objects.filter(group=stored[0]).select_related("call__rollout").order_by("position"))
    assert [m["position"] for m in group["members"]] == [m.position for m in members]
    assert [m["call"] for m in group["members"]] == [m.call_id for m in members]
    assert [m["rollout_index"] for m in group["members"]] == [m.call.rollout.index for m in members]
    for got, member in zip(group["members"], members, strict=True):
        assert got["advantage"] == member.advantage and got["reward"] == member.reward
        assert got["component_advantages"] == member.component_advantages
        assert (got["padded"], got["duplicated"]) == (member.padded, member.duplicated)
    module = stored[-1].module
    only = api_client(owner).get(f"/api/runs/{seeded_run.pk}/steps/1/groups/", {"module": module}).json()
    assert only["count"] == sum(g.module == module for g in stored) and {g["module"] for g in only["results"]} == {module}


# --- bad parameters: 400 with a message, never a 500 ------------------------------------------------


BAD = [
    ("runs", {"state": "sleeping"}), ("runs", {"limit": "0"}), ("runs", {"limit": "501"}), ("runs", {"limit": "x"}),
    ("runs", {"offset": "-1"}), ("runs", {"offset": "1.5"}), ("runs", {"config": "estimator"}),
    ("runs", {"config": "=gdpo"}), ("runs", {"config": "a__b=1"}), ("runs", {"config": "a..b=1"}),
    ("runs", {"config": "lora rank=1"}), ("runs", {"config": [f"k{i}=1" for i in range(17)]}),
    ("runs", {"q": "x" * 201}), ("runs", {"tag": "t" * 41}), ("runs", {"tag": [f"t{i}" for i in range(17)]}),
    ("runs", {"tag": ["t", *[""] * 16]}),  # the schema's maxItems counts empty ones too
    ("runs", {"tag": " " * 41}), ("runs", {"q": " " * 201}),  # and its maxLength counts spaces
    ("runs", {"limit": ""}), ("runs", {"offset": ""}), ("metrics", {"max_points": ""}),  # no integer
    ("metrics", {"from_step": ""}), ("rollouts", {"attempt": ""}), ("runs", {"task": "t" * 201}),
    ("metrics", {"max_points": "x"}), ("metrics", {"max_points": "5"}), ("metrics", {"max_points": "1000001"}),
    ("metrics", {"from_step": "x"}), ("metrics", {"to_step": "-1"}),
    ("metrics", {"series": ",".join(f"k{i}" for i in range(257))}), ("metrics", {"series": "k" * 201}),
    ("rollouts", {"attempt": "0"}), ("rollouts", {"attempt": "x"}), ("rollouts", {"prompts": "maybe"}),
    ("rollouts", {"limit": "1000"}), ("rollouts", {"offset": "x"}),
    ("groups", {"attempt": "-2"}), ("groups", {"module": "m" * 101}), ("groups", {"limit": "0"}),
    ("groups", {"offset": "-5"}),
]


@pytest.mark.parametrize("endpoint, params", BAD, ids=[f"{e}-{'-'.join(p)}" for e, p in BAD])
def test_bad_parameters_are_400(api_client, owner, seeded_run, endpoint, params):
    url = {"runs": "/api/runs/", "metrics": f"/api/runs/{seeded_run.pk}/metrics/",
           "rollouts": f"/api/runs/{seeded_run.pk}/steps/1/rollouts/",
           "groups": f"/api/runs/{seeded_run.pk}/steps/1/groups/"}[endpoint]
    response = api_client(owner).get(url, params)
    assert response.status_code == 400, response.content[:300]
    assert isinstance(response.json()["detail"], str) and response.json()["detail"]


# --- query counts: constant at two sizes -------------------------------------------------------------


def count_queries(client, url, params=None) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url, params or {})
    assert response.status_code == 200, response.content[:300]
    return len(queries.captured_queries)


def test_run_list_and_detail_query_counts_do_not_grow(client, owner):
    client.force_login(owner)
    counts = []
    for n in (3, 30):
        Run.objects.all().delete()
        runs = [make_run(owner, name=f"r{i}") for i in range(n)]
        ingest(runs[0], [hover_step_event(s, examples=1, rollouts=2, extra={"eval/reward/mean": 0.5})
                         for s in range(1, n + 1)])
        counts.append((count_queries(client, "/api/runs/", {"limit": 500}),
                       count_queries(client, "/api/runs/", {"config": "steps=4", "state": "queued"}),
                       count_queries(client, f"/api/runs/{runs[0].pk}/")))
    assert counts[0] == counts[1]


def test_step_endpoints_query_counts_do_not_grow(client, owner):
    small, large = make_run(owner), make_run(owner)
    ingest(small, [hover_step_event(s, examples=1, rollouts=2, group_size=2) for s in (1, 2)])
    ingest(large, [hover_step_event(s, examples=5, rollouts=4, group_size=5, seed=2) for s in range(1, 21)])
    assert Rollout.objects.filter(run=large, step=1).count() == 10 * Rollout.objects.filter(run=small, step=1).count()
    client.force_login(owner)
    counts = []
    for run in (small, large):
        counts.append((
            count_queries(client, f"/api/runs/{run.pk}/metrics/"),
            count_queries(client, f"/api/runs/{run.pk}/metrics/", {"series": "reward/mean", "max_points": 10}),
            count_queries(client, f"/api/runs/{run.pk}/steps/1/rollouts/"),
            count_queries(client, f"/api/runs/{run.pk}/steps/1/rollouts/", {"prompts": 1}),
            count_queries(client, f"/api/runs/{run.pk}/steps/1/groups/"),
        ))
    assert counts[0] == counts[1]
