"""The sweep page, its JSON and its Cancel button, and the Studies page (issue 44, part 3): members of the
sweep's project read it, strangers get 404 and anonymous browsers the login page; only the owner, a
project admin or staff cancel it; the payload holds what the page draws, from Trial rows, within a few
queries, with the parameter importance cached."""

import json
import time
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core.cache import cache
from django.urls import reverse

from tests.webapp.sweeps.world import add_trial, bulk_sweep, make_sweep, params_of
from webapp.experiments.models import Experiment
from webapp.projects.models import Role
from webapp.projects.services import member_add, personal_project_ensure, project_create
from webapp.runs.launch.config_link import ConfigLinkError, config_link_token, config_link_values
from webapp.runs.models import Run
from webapp.sweeps.models import Sweep, Trial

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _empty_cache():
    cache.clear()  # the importance cache is keyed by sweep id, which a new test database reuses
    yield
    cache.clear()


@pytest.fixture
def lab(make_user, owner):
    """Project lab-p: ada (admin), the owner and mo (members), vi (a viewer); the owner's sweep there."""
    admin = make_user("ada")
    project = project_create(creator=admin, name="lab-p")
    people = {"admin": admin, "owner": owner, "member": make_user("mo"), "viewer": make_user("vi")}
    for caller, role in (("owner", Role.MEMBER), ("member", Role.MEMBER), ("viewer", Role.VIEWER)):
        member_add(project, user=people[caller], role=role)
    sweep = make_sweep(owner, project=project)
    return {"project": project, "people": people, "sweep": sweep}


def finished_sweep(owner, **fields) -> Sweep:
    """Four complete trials with distinct values, one pruned, one failed and one running."""
    sweep = make_sweep(owner, **fields)
    for number in range(4):
        add_trial(sweep, number)
    add_trial(sweep, 4, state=Trial.State.PRUNED, reason="Pruned by the median pruner at step 2: below the median.")
    add_trial(sweep, 5, state=Trial.State.FAILED, reason="run 9 failed: out of memory")
    add_trial(sweep, 6, state=Trial.State.RUNNING, steps=2)
    return sweep


def page_payload(response) -> dict:
    html = response.content.decode()
    start = html.index('<script id="sweep-data" type="application/json">') + len('<script id="sweep-data" type="application/json">')
    return json.loads(html[start:html.index("</script>", start)])


# --- who reads and who changes ----------------------------------------------------------------------------


@pytest.mark.parametrize("caller", ["owner", "member", "viewer", "admin"])
def test_every_member_of_the_project_reads_the_page_and_its_json(client, lab, caller):
    client.force_login(lab["people"][caller])
    sweep = lab["sweep"]
    page = client.get(reverse("sweeps:detail", args=[sweep.pk]))
    assert page.status_code == 200
    assert page_payload(page)["sweep"]["id"] == sweep.pk
    assert b'id="parcoords-chart"' in page.content and b"js/sweep.js" in page.content
    assert f'href="/runs/compare?sweep={sweep.pk}"'.encode() in page.content
    data = client.get(reverse("sweeps:data", args=[sweep.pk]))
    assert data.status_code == 200 and data["Content-Type"] == "application/json"
    # The Cancel button is offered to those who may press it.
    assert (b'id="cancel-form"' in page.content) == (caller in ("owner", "admin"))


def test_a_stranger_gets_404_everywhere(client, lab, stranger):
    client.force_login(stranger)
    sweep = lab["sweep"]
    assert client.get(reverse("sweeps:detail", args=[sweep.pk])).status_code == 404
    assert client.get(reverse("sweeps:data", args=[sweep.pk])).status_code == 404
    assert client.post(reverse("sweeps:cancel", args=[sweep.pk])).status_code == 404
    assert Sweep.objects.get(pk=sweep.pk).state == Sweep.State.RUNNING


def test_staff_read_any_sweep(client, lab, staff):
    client.force_login(staff)
    assert client.get(reverse("sweeps:detail", args=[lab["sweep"].pk])).status_code == 200


def test_anonymous_browsers_are_sent_to_log_in(client, lab):
    for name in ("sweeps:detail", "sweeps:data"):
        response = client.get(reverse(name, args=[lab["sweep"].pk]))
        assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    response = client.post(reverse("sweeps:cancel", args=[lab["sweep"].pk]))
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    assert client.get(reverse("studies")).status_code == 302


def test_a_missing_sweep_is_a_404_and_a_bad_id_never_a_500(client, owner):
    client.force_login(owner)
    assert client.get("/sweeps/999999/").status_code == 404
    assert client.get("/sweeps/999999/data.json").status_code == 404
    assert client.get("/sweeps/abc/").status_code == 404
    assert client.get("/sweeps/1e3/data.json").status_code == 404


@pytest.mark.parametrize(("caller", "status"), [("member", 403), ("viewer", 403), ("admin", 302), ("owner", 302)])
def test_cancel_is_for_the_owner_and_the_projects_admins(client, lab, caller, status):
    sweep = lab["sweep"]
    trial = add_trial(sweep, 0, state=Trial.State.RUNNING)
    client.force_login(lab["people"][caller])
    response = client.post(reverse("sweeps:cancel", args=[sweep.pk]))
    assert response.status_code == status
    sweep.refresh_from_db()
    if status == 403:
        assert sweep.state == Sweep.State.RUNNING
        reason = response.content.decode()
        assert ("viewer" in reason) if caller == "viewer" else ("only its owner or an admin" in reason)
    else:
        assert response["Location"] == reverse("sweeps:detail", args=[sweep.pk])
        assert sweep.state == Sweep.State.CANCELLED
        states = set(Run.objects.filter(sweep_member__trial=trial).values_list("state", flat=True))
        assert states == {Run.State.CANCELLING}  # running runs stop at their next step boundary


def test_cancelling_an_ended_sweep_is_a_409_and_cancel_takes_no_get(client, lab):
    sweep = lab["sweep"]
    Sweep.objects.filter(pk=sweep.pk).update(state=Sweep.State.FINISHED)
    client.force_login(lab["people"]["owner"])
    assert client.get(reverse("sweeps:cancel", args=[sweep.pk])).status_code == 405
    response = client.post(reverse("sweeps:cancel", args=[sweep.pk]))
    assert response.status_code == 409 and "already finished" in response.content.decode()


def test_cancel_needs_the_csrf_token(csrf_client, lab):
    sweep = lab["sweep"]
    csrf_client.force_login(lab["people"]["owner"])
    assert csrf_client.post(reverse("sweeps:cancel", args=[sweep.pk])).status_code == 403
    page = csrf_client.get(reverse("sweeps:detail", args=[sweep.pk]))
    token = page.content.decode().split('name="csrfmiddlewaretoken" value="')[1].split('"')[0]
    assert csrf_client.post(reverse("sweeps:cancel", args=[sweep.pk]), {"csrfmiddlewaretoken": token}).status_code == 302
    assert Sweep.objects.get(pk=sweep.pk).state == Sweep.State.CANCELLED


# --- what the page draws ----------------------------------------------------------------------------------


def test_the_json_holds_trials_importance_and_the_best(client, owner):
    sweep = finished_sweep(owner)
    client.force_login(owner)
    data = client.get(reverse("sweeps:data", args=[sweep.pk])).json()
    assert set(data) == {"sweep", "dimensions", "trials", "importance", "best"}
    assert data["sweep"]["counts"] == {"running": 1, "complete": 4, "pruned": 1, "failed": 1}
    assert data["sweep"]["objective"] == "reward/mean"

    dims = {d["name"]: d for d in data["dimensions"]}
    assert dims["learning_rate"]["log"] is True and dims["learning_rate"]["low"] == 1e-5
    assert dims["estimator"]["categorical"] is True and dims["estimator"]["values"] == ["grpo", "gdpo"]
    assert dims["lora_r"]["categorical"] is False and dims["lora_r"]["values"] == [8, 16, 32]

    trials = data["trials"]
    assert [t["number"] for t in trials] == list(range(7))
    first = trials[0]
    assert first["params"] == params_of(0) and first["state"] == "complete" and first["steps"] == 4
    assert [r["seed"] for r in first["runs"]] == [0, 1, 2]
    assert all(r["url"] == reverse("runs:detail", args=[r["id"]]) for r in first["runs"])
    seeds = first["seeds"]
    assert seeds["n"] == 3 and seeds["mean"] == pytest.approx(first["value"])
    assert seeds["ci_low"] <= seeds["mean"] <= seeds["ci_high"] and seeds["iqm"] == pytest.approx(first["value"])
    pruned, failed, running = trials[4], trials[5], trials[6]
    assert pruned["state"] == "pruned" and pruned["reason"].startswith("Pruned by the median") and pruned["value"] is None
    assert failed["reason"] == "run 9 failed: out of memory" and failed["seeds"] is None
    assert running["steps"] == 2 and running["seeds"] is None

    importance = data["importance"]  # 4 complete: too few to rank (tests/webapp/sweeps/test_importance.py)
    assert importance["ready"] is False and importance["complete"] == 4 and importance["values"] == []

    complete = [t for t in trials if t["state"] == "complete"]
    best = max(complete, key=lambda t: t["value"])
    assert data["best"]["number"] == best["number"] and data["best"]["params"] == best["params"]


def test_the_page_embeds_the_same_payload(client, owner):
    sweep = finished_sweep(owner)
    client.force_login(owner)
    embedded = page_payload(client.get(reverse("sweeps:detail", args=[sweep.pk])))
    assert embedded == client.get(reverse("sweeps:data", args=[sweep.pk])).json()


def test_a_minimizing_sweep_picks_the_lowest(client, owner):
    sweep = finished_sweep(owner, direction=Sweep.Direction.MINIMIZE)
    client.force_login(owner)
    data = client.get(reverse("sweeps:data", args=[sweep.pk])).json()
    values = [t["value"] for t in data["trials"] if t["state"] == "complete"]
    assert data["best"]["value"] == pytest.approx(min(values))


def test_launch_this_opens_the_launch_form_with_the_base_settings_and_the_best_values(client, owner):
    sweep = finished_sweep(owner, config={"steps": 4, "seed": 3, "group_size": 4, "train_data": "/tmp/x.jsonl"})
    client.force_login(owner)
    best = client.get(reverse("sweeps:data", args=[sweep.pk])).json()["best"]
    url = urlsplit(best["launch_url"])
    assert url.path == reverse("runs:new")
    query = parse_qs(url.query)
    assert query["task"] == [str(sweep.task_id)] and query["project"] == [sweep.project.name]
    values = config_link_values(query["config"][0])
    assert {k: values[k] for k in best["params"]} == best["params"]
    assert values["group_size"] == 4 and values["steps"] == 4 and values["seed"] == 3
    assert "train_data" not in values  # the task fills it: the form has no such field


def test_the_config_link_refuses_what_it_did_not_write():
    assert config_link_values(config_link_token({"learning_rate": 1e-4, "program": "toy"})) == {"learning_rate": 1e-4}
    for token in ("%%%", config_link_token({})[:0] + "W10", "x" * 20_000,
                  config_link_token({"learning_rate": 1})[:-2]):
        with pytest.raises(ConfigLinkError):
            config_link_values(token)
    import base64

    unknown = base64.urlsafe_b64encode(b'{"no_such_setting": 1}').decode().rstrip("=")
    with pytest.raises(ConfigLinkError, match="no_such_setting"):
        config_link_values(unknown)


def test_an_empty_sweep_draws_nothing_and_says_so(client, owner):
    sweep = make_sweep(owner)
    client.force_login(owner)
    data = client.get(reverse("sweeps:data", args=[sweep.pk])).json()
    assert data["trials"] == [] and data["best"] is None and data["importance"]["ready"] is False


def test_the_importance_ranks_the_setting_that_decides_on_enough_trials(client, owner):
    sweep = make_sweep(owner, seeds=1, n_trials=20)
    for number in range(14):
        add_trial(sweep, number)
    client.force_login(owner)
    importance = client.get(reverse("sweeps:data", args=[sweep.pk])).json()["importance"]
    assert importance["ready"] is True and importance["complete"] == 14
    assert [name for name, _ in importance["values"]][0] == "learning_rate"
    assert {name for name, _ in importance["values"]} == {"learning_rate", "estimator", "lora_r"}


def test_odd_rows_never_break_the_page(client, owner):
    """A trial whose params miss a field, odd intermediate keys, a space entry RunConfig no longer has."""
    sweep = make_sweep(owner, space={"learning_rate": {"low": 1e-5, "high": 1e-3, "log": True},
                                     "retired_setting": {"values": ["a", "b"]}})
    add_trial(sweep, 0, params={"learning_rate": 1e-4})
    Trial.objects.filter(sweep=sweep).update(intermediate={"x": 1.0, "3": 0.5})
    client.force_login(owner)
    data = client.get(reverse("sweeps:data", args=[sweep.pk])).json()
    assert data["trials"][0]["steps"] == 3
    assert {d["name"]: d["categorical"] for d in data["dimensions"]} == {"learning_rate": False, "retired_setting": True}
    assert client.get(reverse("sweeps:detail", args=[sweep.pk])).status_code == 200


def test_any_objective_has_per_seed_statistics(client, owner):
    sweep = finished_sweep(owner, objective="eval/accuracy")  # a metric no Run column keeps
    client.force_login(owner)
    trial = client.get(reverse("sweeps:data", args=[sweep.pk])).json()["trials"][0]
    assert trial["seeds"]["n"] == sweep.seeds and trial["seeds"]["mean"] == pytest.approx(trial["value"])


def test_a_200_trial_sweep_reads_a_few_queries_and_answers_fast(client, owner, django_assert_max_num_queries):
    """Trials and their runs in one query each, whatever the number of trials (issue 44: p95 < 300 ms;
    benchmarks measure it against a server, this keeps the query count from growing with the trials)."""
    sweep = bulk_sweep(owner, trials=200, seeds=3, steps=100)
    client.force_login(owner)
    client.get(reverse("sweeps:data", args=[sweep.pk]))  # fills the importance cache
    with django_assert_max_num_queries(8):
        data = client.get(reverse("sweeps:data", args=[sweep.pk])).json()
    assert len(data["trials"]) == 200 and all(len(t["runs"]) == 3 for t in data["trials"])
    assert all(t["steps"] == 100 for t in data["trials"])
    timings = []
    for name in ("sweeps:data", "sweeps:detail") * 5:
        started = time.perf_counter()
        assert client.get(reverse(name, args=[sweep.pk])).status_code == 200
        timings.append(time.perf_counter() - started)
    print(f"200-trial sweep page and data.json: max {max(timings) * 1000:.0f} ms over {len(timings)}")
    assert max(timings) < 1.5  # a loose ceiling for a busy CI machine; the benchmark holds the 300 ms


# --- the Studies page -------------------------------------------------------------------------------------


def test_studies_lists_the_visible_sweeps_and_experiments_newest_first(client, lab, stranger):
    owner = lab["people"]["owner"]
    sweep = lab["sweep"]
    add_trial(sweep, 0)
    experiment = Experiment.objects.create(owner=owner, project=lab["project"], task=sweep.task, seeds=2, config={},
                                           name="table one")
    hidden = make_sweep(stranger, name="strangers sweep")
    hidden_experiment = Experiment.objects.create(owner=stranger, project=personal_project_ensure(stranger), task=sweep.task, seeds=1, config={}, name="theirs")
    client.force_login(lab["people"]["viewer"])
    response = client.get(reverse("studies"))
    assert response.status_code == 200
    html = response.content.decode()
    assert reverse("sweeps:detail", args=[sweep.pk]) in html
    assert reverse("experiments:detail", args=[experiment.pk]) in html
    assert reverse("sweeps:detail", args=[hidden.pk]) not in html and "strangers sweep" not in html
    assert reverse("experiments:detail", args=[hidden_experiment.pk]) not in html
    assert html.index("table one") < html.index("lr sweep")  # the experiment is newer
    assert "1 of 12 trials (1 complete) · 3 runs" in html
    assert 'id="studies-link"' in html  # the top bar


def test_studies_says_when_there_is_nothing(client, stranger):
    client.force_login(stranger)
    response = client.get(reverse("studies"))
    assert response.status_code == 200 and b'id="studies-empty"' in response.content
    assert client.post(reverse("studies")).status_code == 405


# --- the launch form's side of "Launch this" (needs runs:new to read `?config=`: see the report) ----------


def test_the_launch_form_fills_in_a_config_link_and_refuses_a_damaged_one(client, owner):
    from webapp.runs.launch.catalog import catalog_sync
    from webapp.runs.models import Task

    catalog_sync()
    task = Task.objects.get(name="toy")
    client.force_login(owner)
    token = config_link_token({"learning_rate": 0.0004, "estimator": "gdpo", "lora_r": 8})
    page = client.get(reverse("runs:new"), {"task": task.pk, "config": token})
    assert page.status_code == 200
    form = page.context["form"]
    assert (form["learning_rate"].value(), form["estimator"].value(), form["lora_r"].value()) == (0.0004, "gdpo", 8)
    damaged = client.get(reverse("runs:new"), {"task": task.pk, "config": token[:-3] + "!!!"})
    assert damaged.status_code == 302 and damaged["Location"] == f"{reverse('runs:new')}?task={task.pk}"
    assert "damaged" in client.get(damaged["Location"]).content.decode()


def test_a_pruned_runs_page_links_its_sweep_and_says_why_it_was_pruned(client, owner):
    sweep = make_sweep(owner)
    trial = add_trial(sweep, 0, state=Trial.State.PRUNED, reason="Pruned by the median pruner at step 2: ...")
    run = trial.members.first().run
    Run.objects.filter(pk=run.pk).update(pruned_reason=trial.reason)
    client.force_login(owner)
    page = client.get(reverse("runs:detail", args=[run.pk])).content.decode()
    assert f'href="{reverse("sweeps:detail", args=[sweep.pk])}" id="run-sweep"' in page
    note = page[page.index('id="pruned-note"'):]
    assert not note.startswith('id="pruned-note" hidden') and "median pruner at step 2" in note[:300]
