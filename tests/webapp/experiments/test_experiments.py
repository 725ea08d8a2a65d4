"""The Experiment page (issue 26, item 3): one button queues the task's four arms x N seeds through the
fair queue (two runs per seed, all or nothing), and the page shows each arm's stored dev score per
seed, with the mean and spread; strangers get 404; the compare and run pages link to it."""

import pytest
from django.urls import reverse

from tests.webapp.runs.factories import make_multihop_task
from tests.webapp.runs.launch.test_launch import launch_data, toy_task  # noqa: F401 (fixture)
from webapp.experiments.models import Experiment, ExperimentRun
from webapp.experiments.selectors import experiment_reward_means, experiment_table
from webapp.runs.ingest.store import step_events_ingest
from webapp.runs.models import Run

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("test_plugins")]


@pytest.fixture
def multihop(tmp_path):
    return make_multihop_task(tmp_path)


def launch(client, task, seeds=2, **changes):
    data = launch_data(task, **{"steps": 3, "max_new_tokens": 8, "eval_every": 0, **changes})
    return client.post(reverse("runs:new"), {**data, "experiment": "1", "experiment_seeds": str(seeds)})


def test_one_button_queues_two_runs_per_seed_that_measure_the_four_arms(client, owner, multihop):
    client.force_login(owner)
    response = launch(client, multihop, seeds=2, seed=7, name="table-1")
    experiment = Experiment.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("experiments:detail", args=[experiment.pk])
    members = list(experiment.members.select_related("run"))
    assert [(m.kind, m.seed) for m in members] == [("both", 7), ("weights", 7), ("both", 8), ("weights", 8)]
    for member in members:
        config = member.run.config
        assert member.run.owner == owner and member.run.state == Run.State.QUEUED
        assert config["seed"] == member.seed and config["eval_before"] is True and config["eval_every"] == 3
        assert config["prompt_optimizer"] == ("none" if member.kind == "weights" else "mipro_light")
        assert f"exp-{experiment.pk}" in member.run.tags
    assert experiment.seeds == 2 and experiment.name == "table-1"


def test_an_experiment_is_refused_as_a_whole(client, owner, multihop, toy_task, settings):  # noqa: F811
    client.force_login(owner)
    settings.COHORT_LIMIT_QUEUED_RUNS_PER_USER = 3
    response = launch(client, multihop, seeds=2)  # the fourth run would be over the queued limit
    assert response.status_code == 400
    error = response.context["form"].non_field_errors()[0]
    assert error == ("The experiment was not launched: run 4 of 4 (both, seed 1): You already have 3 queued runs; "
                     "your limit is 3 queued runs at once.")
    assert not Run.objects.exists() and not Experiment.objects.exists()
    for seeds in ("many", "0", "11"):
        bad = client.post(reverse("runs:new"), {**launch_data(multihop), "experiment": "1", "experiment_seeds": seeds})
        assert bad.status_code == 400 and "Choose between 1 and 10 seeds" in bad.context["form"].non_field_errors()[0]
    refused = launch(client, toy_task, seeds=1)  # the toy program is not a DSPy program
    assert refused.status_code == 400 and "is not a DSPy program" in refused.context["form"].non_field_errors()[0]
    assert b"Launch experiment" not in client.get(reverse("runs:new") + f"?task={toy_task.pk}").content
    assert b"Launch experiment" in client.get(reverse("runs:new") + f"?task={multihop.pk}").content


def store_eval(run, step, value, attempt=1):
    step_events_ingest(run, [{"type": "step", "attempt": attempt, "step": step, "metrics": {"eval/reward/mean": value},
                              "rollouts": [], "groups": []}])


def test_the_table_shows_each_arms_score_per_seed_with_mean_and_spread(client, owner, stranger, multihop):
    client.force_login(owner)
    launch(client, multihop, seeds=2)
    experiment = Experiment.objects.get()
    runs = {(m.kind, m.seed): m.run for m in experiment.members.select_related("run")}
    # (before, after) per run: weights = (unadapted, MMGRPO), both = (PO, BetterTogether)
    scores = {("weights", 0): (0.10, 0.30), ("weights", 1): (0.20, 0.50), ("both", 0): (0.25, 0.55),
              ("both", 1): (0.35, None)}
    for key, (before, after) in scores.items():
        store_eval(runs[key], 0, before)
        store_eval(runs[key], 1, 0.99)  # an evaluation before the last step is not the arm's score
        if after is not None:
            store_eval(runs[key], 3, after)
    store_eval(runs[("weights", 0)], 3, 0.40, attempt=2)  # a resumed attempt's evaluation wins

    seeds, rows = experiment_table(experiment)
    table = {row.arm: [c.value for c in row.cells] for row in rows}
    assert seeds == [0, 1]
    assert table == {"unadapted": [0.10, 0.20], "po": [0.25, 0.35], "mmgrpo": [0.40, 0.50],
                     "bettertogether": [0.55, None]}
    means = {row.arm: row.mean for row in rows}
    assert means["mmgrpo"] == pytest.approx(0.45) and means["bettertogether"] == pytest.approx(0.55)
    spread = {row.arm: row.spread for row in rows}
    assert spread["unadapted"] == pytest.approx(0.0707107, rel=1e-5) and spread["bettertogether"] is None

    page = client.get(reverse("experiments:detail", args=[experiment.pk]))
    html = page.content.decode()
    assert page.status_code == 200 and 'data-arm="bettertogether"' in html and "(one seed)" in html
    assert page.context["compare_url"] == f"/runs/compare?experiment={experiment.pk}&metrics=eval/reward/mean"
    assert client.get(page.context["compare_url"]).context["experiments"] == [experiment]
    assert client.get(reverse("runs:detail", args=[runs[("both", 0)].pk])).context["experiments"] == [experiment]
    client.force_login(stranger)
    assert client.get(reverse("experiments:detail", args=[experiment.pk])).status_code == 404
    assert ExperimentRun.objects.count() == 4


def test_each_arm_shows_what_its_score_is_made_of_and_its_change_from_the_unadapted_program(client, owner, multihop):
    client.force_login(owner)
    launch(client, multihop, seeds=2)
    experiment = Experiment.objects.get()
    # (format, correct) of each run's step-0 and last-step evaluation; the mean is their sum
    parts = {("weights", 0): ((0.0, 0.1), (0.5, 0.2)), ("weights", 1): ((0.1, 0.1), (0.7, 0.2)),
             ("both", 0): ((0.8, 0.2), (0.9, 0.3)), ("both", 1): ((0.6, 0.2), (1.0, 0.1))}
    for member in experiment.members.select_related("run"):
        for step, (fmt, correct) in zip((0, 3), parts[(member.kind, member.seed)], strict=True):
            step_events_ingest(member.run, [{"type": "step", "attempt": 1, "step": step, "rollouts": [], "groups": [],
                                             "metrics": {"eval/reward/mean": fmt + correct, "eval/reward/fmt": fmt,
                                                         "eval/reward/correct": correct, "reward/mean": 9.0}}])
    means = experiment_reward_means(experiment)
    assert means["unadapted"] == pytest.approx({"correct": 0.1, "fmt": 0.05})
    assert means["bettertogether"] == pytest.approx({"correct": 0.2, "fmt": 0.95})

    page = client.get(reverse("experiments:detail", args=[experiment.pk]))
    table = {entry["row"].arm: entry for entry in page.context["table"]}
    assert page.context["reward_names"] == ["correct", "fmt"]
    assert table["unadapted"]["gain"] is None and table["po"]["gain"] == pytest.approx(0.9 - 0.15)
    assert table["mmgrpo"]["rewards"] == pytest.approx([0.2, 0.6])
    assert '<td class="num gain">+0.750</td>' in page.content.decode()
