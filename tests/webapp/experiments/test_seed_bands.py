"""An experiment's seeds as bands (issue 44): the compare page opens on an experiment's runs
(`?experiment=<id>`, the "experiment" run source registered by webapp/experiments/apps.py), each kind of
run one mean curve with its band; strangers get 404; and Table 1 shows each arm's IQM and 95% bootstrap
CI beside its mean and spread."""

import pytest
from django.urls import reverse

from tests.webapp.runs.factories import make_task
from tests.webapp.runs.seeding import ingest, make_run
from webapp.experiments.models import Experiment, ExperimentRun
from webapp.experiments.selectors import experiment_table
from webapp.projects.services import personal_project_ensure
from webapp.runs.charts.aggregates import bootstrap_ci, iqm

pytestmark = pytest.mark.django_db


def make_experiment(owner, scores):
    """An experiment whose runs stored their step-0 and last-step evaluations: {(kind, seed): (before, after)}."""
    experiment = Experiment.objects.create(owner=owner, project=personal_project_ensure(owner), task=make_task(), seeds=len({s for _, s in scores}),
                                           config={"steps": 4}, name="table 1")
    for (kind, seed), (before, after) in scores.items():
        optimizer = "none" if kind == "weights" else "mipro_light"
        run = make_run(owner, config={"seed": seed, "prompt_optimizer": optimizer, "eval_before": True},
                       name=f"table 1 · {kind} · seed {seed}")
        ExperimentRun.objects.create(experiment=experiment, run=run, kind=kind, seed=seed)
        ingest(run, [{"type": "step", "attempt": 1, "step": step, "metrics": {"eval/reward/mean": value}}
                     for step, value in ((0, before), (run.total_steps, after))])
    return experiment


SCORES = {("weights", 0): (0.10, 0.30), ("weights", 1): (0.20, 0.50), ("weights", 2): (0.15, 0.90),
          ("both", 0): (0.25, 0.55), ("both", 1): (0.35, 0.60), ("both", 2): (0.30, 0.65)}


def test_the_compare_page_opens_on_an_experiment_with_a_band_per_kind_of_run(client, owner):
    experiment = make_experiment(owner, SCORES)
    client.force_login(owner)
    page = client.get(reverse("experiments:detail", args=[experiment.pk]))
    url = page.context["compare_url"]
    assert url == f"/runs/compare?experiment={experiment.pk}&metrics=eval/reward/mean"
    response = client.get(url)
    assert response.status_code == 200 and response.context["experiments"] == [experiment]
    assert len(response.context["chosen"]) == 6 and response.context["sources"] == [("experiment", str(experiment.pk))]
    payload = response.context["payload"]
    assert [(g["label"], len(g["runs"])) for g in payload["groups"]] == [
        ("prompt_optimizer=mipro_light", 3), ("prompt_optimizer=none", 3)]  # seed 0's "both" run comes first
    bands = payload["metrics"][0]["bands"]
    weights = bands["1"]
    assert weights["x"] == [0, 4] and weights["mean"] == pytest.approx([0.15, (0.3 + 0.5 + 0.9) / 3], abs=1e-5)
    assert weights["low"][1] == pytest.approx(0.3, abs=1e-5) and weights["high"][1] == pytest.approx(0.9, abs=1e-5)
    assert payload["metrics"][0]["traces"] == {}


def test_only_who_reads_the_experiment_opens_it(client, owner, stranger):
    experiment = make_experiment(owner, SCORES)
    url = reverse("runs:compare")
    client.force_login(stranger)
    assert client.get(url, {"experiment": experiment.pk}).status_code == 404
    assert client.get(url, {"experiment": 10**30}).status_code == 404
    assert client.get(url, {"experiment": 0}).status_code == 404
    bad = client.get(url, {"experiment": "one"})
    assert bad.status_code == 400 and bad.context["message"] == "'experiment': an experiment is named by its id, not 'one'"
    client.logout()
    assert client.get(url, {"experiment": experiment.pk}).status_code == 302  # to the login page


def test_table_1_shows_each_arms_iqm_and_bootstrap_ci(client, owner):
    experiment = make_experiment(owner, SCORES)
    _, rows = experiment_table(experiment)
    mmgrpo = next(row for row in rows if row.arm == "mmgrpo")
    assert mmgrpo.summary["n"] == 3 and mmgrpo.summary["iqm"] == iqm([0.3, 0.5, 0.9])
    # Three seeds: 1/27 of the resamples are all the lowest seed, more than 2.5%: the CI spans the seeds,
    # as the compare page's band at that step does.
    assert (mmgrpo.summary["ci_low"], mmgrpo.summary["ci_high"]) == (0.3, 0.9)
    assert bootstrap_ci([0.3, 0.5, 0.9]) == pytest.approx((0.3, 0.9), abs=0.02)  # its Monte Carlo estimate
    assert mmgrpo.summary["mean"] == pytest.approx(mmgrpo.mean)
    client.force_login(owner)
    html = client.get(reverse("experiments:detail", args=[experiment.pk])).content.decode()
    assert '<th title="Interquartile mean:' in html and ">IQM</th>" in html and ">95% CI</th>" in html
    assert "[0.300, 0.900]" in html


def test_an_arm_of_one_seed_has_no_interval(client, owner):
    experiment = make_experiment(owner, {("weights", 0): (0.1, 0.2), ("both", 0): (0.3, 0.4)})
    _, rows = experiment_table(experiment)
    assert all(row.summary["ci_low"] is None and row.summary["iqm"] is not None for row in rows)
    client.force_login(owner)
    page = client.get(reverse("experiments:detail", args=[experiment.pk]))
    assert page.status_code == 200 and '<td class="num ci">—</td>' in page.content.decode()
