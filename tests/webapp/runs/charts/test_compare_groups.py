"""Seeds as bands on the compare page (issue 44): runs that differ only in their seed are one group,
drawn as its mean with a band computed on the server; `group_by` groups by one setting; a run alone
in its group is the line it always was; `band=none` draws every run; the run sources registry
(`?<source>=<value>`); bad parameters are 400s with a message."""

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tests.webapp.runs.seeding import ingest, make_run
from webapp.runs.charts import sources as run_sources
from webapp.runs.charts.aggregates import band_from_matrix
from webapp.runs.charts.compare_groups import group_runs
from webapp.runs.charts.series import config_differences

pytestmark = pytest.mark.django_db


def close(expected):
    """A band's numbers come rounded to 6 significant digits of its largest (compare_series.py)."""
    return pytest.approx(expected, abs=1e-5)


def curve(run, offset, steps=range(1, 11), **extra):
    """reward/mean = offset + step / 10 at each step, plus `extra` metrics."""
    ingest(run, ({"type": "step", "attempt": 1, "step": s,
                  "metrics": {"reward/mean": offset + s / 10, "completion_tokens": 100, **extra}} for s in steps))
    return run


def seeds(owner, config, offsets, **fields):
    return [curve(make_run(owner, config={**config, "seed": i}, name=f"{config} s{i}", **fields), offset)
            for i, offset in enumerate(offsets)]


def compare(client, runs, **params):
    return client.get(reverse("runs:compare"), {"runs": [r.pk for r in runs], "metrics": ["reward/mean"], **params})


@pytest.fixture
def world(owner):
    """4 runs = 2 configurations x 2 seeds, and a fifth run alone in its configuration."""
    a = seeds(owner, {"learning_rate": 0.01, "group_size": 4}, [0.0, 0.2])
    b = seeds(owner, {"learning_rate": 0.001, "group_size": 4}, [1.0, 1.6])
    alone = seeds(owner, {"learning_rate": 0.01, "group_size": 8}, [0.5])
    return {"a": a, "b": b, "alone": alone[0]}


def test_runs_that_differ_only_in_their_seed_are_one_band(client, owner, world):
    client.force_login(owner)
    response = compare(client, [*world["a"], *world["b"]])
    assert response.status_code == 200
    payload = response.context["payload"]
    assert payload["band"] == "ci"
    assert [g["runs"] for g in payload["groups"]] == [[r.pk for r in world["a"]], [r.pk for r in world["b"]]]
    assert payload["groups"][0]["label"] == "learning_rate=0.01"
    metric = payload["metrics"][0]
    assert metric["traces"] == {}  # no run drawn alone
    band = metric["bands"]["1"]
    assert band["x"] == list(range(1, 11)) and band["total"] == 10 and band["downsampled"] is False
    assert band["mean"] == close([1.3 + s / 10 for s in range(1, 11)])
    # Two runs: resamples (lo, lo), (lo, hi), (hi, lo), (hi, hi), so the CI runs from one run to the other.
    assert band["low"] == close([1.0 + s / 10 for s in range(1, 11)])
    assert band["high"] == close([1.6 + s / 10 for s in range(1, 11)])
    assert band["tokens"] == [100 * s for s in range(1, 11)] and len(band["t"]) == 10
    assert [r["id"] for r in payload["runs"]] == [r.pk for r in [*world["a"], *world["b"]]]
    assert all("step_url" not in r for r in payload["runs"])  # a group's mean opens no one run's step
    # The differences table: a column per group, the seeds that vary inside each listed.
    assert response.context["columns"] == ["learning_rate=0.01 · 2 runs", "learning_rate=0.001 · 2 runs"]
    assert dict(response.context["differences"]) == {"learning_rate": ["0.01", "0.001"], "seed": ["0, 1", "0, 1"]}
    assert response.context["group_choices"] == ["learning_rate", "seed"]


def test_a_run_alone_in_its_group_is_drawn_as_its_own_line(client, owner, world):
    client.force_login(owner)
    payload = compare(client, [*world["a"], world["alone"]]).context["payload"]
    assert [len(g["runs"]) for g in payload["groups"]] == [2, 1]
    metric = payload["metrics"][0]
    assert list(metric["bands"]) == ["0"]
    alone = metric["traces"][str(world["alone"].pk)]
    assert alone["x"] == list(range(1, 11)) and alone["y"] == pytest.approx([0.5 + s / 10 for s in range(1, 11)])
    assert payload["runs"][-1]["step_url"] == reverse("runs:step", args=[world["alone"].pk, 0])


def test_group_by_a_setting(client, owner, world):
    client.force_login(owner)
    runs = [*world["a"], *world["b"], world["alone"]]
    payload = compare(client, runs, group_by="learning_rate").context["payload"]
    groups = payload["groups"]
    assert [g["label"] for g in groups] == ["learning_rate=0.01", "learning_rate=0.001"]
    assert groups[0]["runs"] == [world["a"][0].pk, world["a"][1].pk, world["alone"].pk]  # group_size apart
    band = payload["metrics"][0]["bands"]["0"]
    assert band["mean"][0] == close(np.mean([0.1, 0.3, 0.6]))
    by_size = compare(client, runs, group_by="group_size").context["payload"]["groups"]
    assert [len(g["runs"]) for g in by_size] == [4, 1]
    shared = compare(client, world["a"], group_by="group_size").context["payload"]["groups"]
    assert [g["label"] for g in shared] == ["group_size=4"]  # a setting every run shares: one group


@pytest.mark.parametrize("kind", ["minmax", "std", "ci"])
def test_band_kinds(client, owner, kind):
    runs = seeds(owner, {"learning_rate": 0.01}, [0.0, 0.3, 0.9])
    client.force_login(owner)
    band = compare(client, runs, band=kind).context["payload"]["metrics"][0]["bands"]["0"]
    values = np.array([[o + s / 10 for s in range(1, 11)] for o in (0.0, 0.3, 0.9)])
    mean, low, high = band_from_matrix(values, kind, seed=0)
    assert band["mean"] == close(mean.tolist()) and band["low"] == close(low.tolist())
    assert band["high"] == close(high.tolist())
    if kind == "minmax":
        assert band["low"] == close(values.min(axis=0).tolist())
    if kind == "std":
        assert band["high"][0] == close(values[:, 0].mean() + values[:, 0].std(ddof=1))


def test_band_none_draws_every_run_as_before(client, owner, world):
    client.force_login(owner)
    response = compare(client, world["a"], band="none")
    payload = response.context["payload"]
    assert payload["groups"] is None and set(payload["metrics"][0]["traces"]) == {str(r.pk) for r in world["a"]}
    assert payload["metrics"][0]["bands"] == {}
    assert response.context["columns"] == [str(r) for r in world["a"]]


def test_uneven_runs_a_resumed_attempt_and_a_metric_one_group_lacks(client, owner):
    short, long = seeds(owner, {"learning_rate": 0.01}, [0.0, 1.0])
    curve(long, 1.0, steps=range(11, 16))
    for run in (short, long):  # a step where neither run has a number: no point there
        ingest(run, [{"type": "step", "attempt": 1, "step": 20, "metrics": {"reward/mean": None, "kl": 0.5}}])
    ingest(short, [{"type": "step", "attempt": 2, "step": 3, "metrics": {"reward/mean": 9.0}}])  # the newest row wins
    client.force_login(owner)
    payload = compare(client, [short, long], metrics=["reward/mean", "kl", "absent"]).context["payload"]
    band = payload["metrics"][0]["bands"]["0"]
    assert band["x"] == list(range(1, 16))
    assert band["mean"][2] == close((9.0 + 1.3) / 2)
    assert band["low"][10:] == [None] * 5 and band["mean"][10:] == close([1.0 + s / 10 for s in range(11, 16)])
    assert band["total"] == 15 and band["downsampled"] is False
    kl = payload["metrics"][1]["bands"]["0"]
    assert kl["x"] == [20] and kl["mean"] == [0.5] and kl["low"] == [0.5]
    assert payload["metrics"][2] == {"key": "absent", "traces": {}, "bands": {}}


def test_long_bands_are_downsampled_and_a_sweep_sized_page_reads_no_axes(client, owner, monkeypatch):
    from webapp.runs.charts import compare as compare_series
    from webapp.runs.charts import views as compare_views

    runs = [curve(make_run(owner, config={"seed": s}), 0.1 * s, steps=range(1, 81)) for s in (0, 1)]
    client.force_login(owner)
    monkeypatch.setattr(compare_views, "MAX_POINTS", 20)
    band = compare(client, runs).context["payload"]["metrics"][0]["bands"]["0"]
    assert len(band["x"]) <= 20 and band["x"][0] == 1 and band["x"][-1] == 80
    assert band["total"] == 80 and band["downsampled"] is True and len(band["low"]) == len(band["x"])
    assert band["t"] is not None and band["tokens"][-1] == 8000
    monkeypatch.setattr(compare_series, "AXES_MAX_RUNS", 1)
    band = compare(client, runs).context["payload"]["metrics"][0]["bands"]["0"]
    assert band["t"] is None and band["tokens"] is None and band["total"] == 80


def test_groups_without_stored_steps_draw_nothing(client, owner):
    runs = [make_run(owner, config={"seed": s}) for s in (0, 1)]  # queued: no step stored yet
    client.force_login(owner)
    response = compare(client, runs)
    assert response.status_code == 200
    assert response.context["payload"]["metrics"][0] == {"key": "reward/mean", "traces": {}, "bands": {}}


def test_bad_parameters_are_400_with_a_message(client, owner, world):
    client.force_login(owner)
    bad_band = compare(client, world["a"], band="iqr")
    assert bad_band.status_code == 400
    assert bad_band.context["message"] == "'band' must be one of ci, minmax, std, none, not 'iqr'."
    bad_key = compare(client, world["a"], group_by="no_such_setting")
    assert bad_key.status_code == 400
    assert bad_key.context["message"] == "No compared run has the setting 'no_such_setting'; group by one of: seed."
    assert compare(client, world["a"], band="none", group_by="nope").status_code == 400  # checked with no bands too
    assert compare(client, world["a"], group_by="", band="").status_code == 200  # the form's empty choices
    odd_keys = compare(client, world["a"], metrics=['a"b', "a.b", "[0]", "%s", "x" * 300])  # read in the database
    assert odd_keys.status_code == 200 and all(m["bands"] == {} for m in odd_keys.context["payload"]["metrics"])
    too_many = compare(client, world["a"], metrics=[f"m{i}" for i in range(13)])
    assert too_many.status_code == 400 and too_many.context["message"] == "Choose at most 12 metrics."


def test_query_count_does_not_grow_with_runs_or_groups(client, owner):
    client.force_login(owner)
    counts = []
    for n in (2, 6):
        runs = [r for g in range(n) for r in seeds(owner, {"learning_rate": g, "n": n}, [0.0, 0.5])]
        with CaptureQueriesContext(connection) as queries:
            assert compare(client, runs).status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1]


def test_group_runs_without_the_page(owner):
    runs = [make_run(owner, config={"lr": lr, "seed": s}) for lr in (1, 2) for s in (0, 1)]
    groups = group_runs(runs, config_differences(runs))
    assert [[r.pk for r in g.runs] for g in groups] == [[runs[0].pk, runs[1].pk], [runs[2].pk, runs[3].pk]]
    assert [g.label for g in groups] == ["lr=1", "lr=2"]
    same = [make_run(owner, config={"lr": 1, "seed": s}) for s in (0, 1)]
    assert [g.label for g in group_runs(same, config_differences(same))] == ["2 runs"]


# --- run sources --------------------------------------------------------------------------------


@pytest.fixture
def tagged_source(monkeypatch):
    """A source of its own: `?tagged=<tag>`, the user's runs with that tag."""
    from django.http import Http404

    from webapp.runs.selectors import run_list_for_user

    def resolve(user, value):
        if value == "secret":
            raise Http404("No such tag.")
        if not value.isalnum():
            raise ValueError("a tag is letters and digits")
        return [r for r in run_list_for_user(user).order_by("pk") if value in r.tags]

    monkeypatch.setattr(run_sources, "_sources", dict(run_sources._sources))
    run_sources.register_run_source("tagged", resolve)


def test_a_registered_source_brings_its_runs(client, owner, tagged_source):
    runs = [*seeds(owner, {"learning_rate": 0.1}, [0.0, 0.1], tags=["sweep7"]), make_run(owner, tags=["other"])]
    client.force_login(owner)
    response = client.get(reverse("runs:compare"), {"tagged": "sweep7", "metrics": ["reward/mean"]})
    assert response.status_code == 200
    assert [r.pk for r in response.context["chosen"]] == [runs[0].pk, runs[1].pk]
    assert list(response.context["payload"]["metrics"][0]["bands"]) == ["0"]
    assert response.context["sources"] == [("tagged", "sweep7")] and response.context["from_sources"] == 2
    assert 'type="hidden" name="tagged" value="sweep7"' in response.content.decode()
    both = client.get(reverse("runs:compare"), {"tagged": "sweep7", "runs": [runs[2].pk]})
    assert [r.pk for r in both.context["chosen"]] == [runs[2].pk, runs[0].pk, runs[1].pk]
    assert client.get(reverse("runs:compare"), {"tagged": "secret"}).status_code == 404
    bad = client.get(reverse("runs:compare"), {"tagged": "a b"})
    assert bad.status_code == 400 and bad.context["message"] == "'tagged': a tag is letters and digits"
    client.logout()
    assert client.get(reverse("runs:compare"), {"tagged": "secret"}).status_code == 302  # log in first


def test_a_source_may_bring_more_runs_than_the_chooser_but_not_unboundedly(client, owner, tagged_source, monkeypatch):
    from webapp.runs.charts import views as compare_views

    runs = [make_run(owner, tags=["big"], config={"seed": i}) for i in range(compare_views.COMPARE_MAX_RUNS + 5)]
    client.force_login(owner)
    response = client.get(reverse("runs:compare"), {"tagged": "big"})
    assert response.status_code == 200 and len(response.context["chosen"]) == len(runs)
    assert "share-compare" not in response.content.decode()  # a share link holds at most 20 runs
    monkeypatch.setattr(compare_views, "COMPARE_SOURCE_MAX_RUNS", 10)
    refused = client.get(reverse("runs:compare"), {"tagged": "big"})
    assert refused.status_code == 400 and "compare at most 10 at once" in refused.context["message"]


def test_the_registry_refuses_names_the_page_reads_itself(monkeypatch):
    monkeypatch.setattr(run_sources, "_sources", {})
    for name in ("runs", "metrics", "band", "group_by", "not a name"):
        with pytest.raises(ValueError):
            run_sources.register_run_source(name, lambda user, value: [])
    run_sources.register_run_source("mine", resolve := (lambda user, value: []))
    assert run_sources.run_source("mine") is resolve and run_sources.run_source_names() == ["mine"]
    with pytest.raises(KeyError):
        run_sources.run_source("theirs")
