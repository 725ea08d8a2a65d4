"""The compare page opened on a sweep (`?sweep=N`): the runs it compares are listed first and ticked
(fixed: the sweep's hidden field brings them), and a group's label rounds its numbers to 4 significant
digits unless that would make two labels read the same."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from tests.webapp.runs.seeding import make_run
from tests.webapp.sweeps.world import add_trial, make_sweep
from webapp.runs.charts.compare_groups import group_runs, readable
from webapp.runs.charts.series import config_differences

pytestmark = pytest.mark.django_db


def boxes(body: str) -> dict[int, str]:
    """Each run checkbox's tag, by run id."""
    return {int(m.group(1)): m.group(0) for m in re.finditer(r'<input type="checkbox"[^>]*value="(\d+)"[^>]*>', body)}


def test_a_sweeps_runs_are_listed_first_and_ticked(client, owner):
    sweep = make_sweep(owner, seeds=2)
    for number, rate in enumerate((0.0017692267954532756, 0.00031415926)):
        add_trial(sweep, number, params={"learning_rate": rate, "estimator": "grpo", "lora_r": 8})
    newer = [make_run(owner, name=f"newer {i}") for i in range(3)]  # newer than the sweep's runs
    client.force_login(owner)
    chosen_alone = newer[0]
    response = client.get(reverse("runs:compare"), {"sweep": sweep.pk, "runs": [chosen_alone.pk]})
    assert response.status_code == 200
    body = response.content.decode()
    compared = [r.pk for r in response.context["chosen"]]
    listed = [r.pk for r in response.context["choices"]]
    assert set(listed[:len(compared)]) == set(compared)  # the compared runs first, though others are newer
    found = boxes(body)
    for pk in compared:
        assert " checked" in found[pk], pk
    assert 'name="runs"' in found[chosen_alone.pk] and " disabled" not in found[chosen_alone.pk]
    for pk in set(compared) - {chosen_alone.pk}:  # the sweep's: ticked, fixed, not sent as runs=
        assert " disabled" in found[pk] and 'name="runs"' not in found[pk] and f"sweep {sweep.pk}" in found[pk]
    for run in newer[1:]:
        assert " checked" not in found[run.pk]
    labels = [g["label"] for g in response.context["payload"]["groups"]]
    assert labels[1:] == ["estimator=grpo, learning_rate=0.001769, lora_r=8",
                          "estimator=grpo, learning_rate=0.0003142, lora_r=8"], labels
    assert f'name="sweep" value="{sweep.pk}"' in body


def test_labels_take_more_digits_only_to_tell_groups_apart(owner):
    runs = [make_run(owner, config={"lr": lr, "seed": s}) for lr in (0.00123451, 0.00123459) for s in (0, 1)]
    assert [g.label for g in group_runs(runs, config_differences(runs))] == ["lr=0.0012345", "lr=0.0012346"]
    runs = [make_run(owner, config={"lr": lr, "seed": 0}) for lr in (0.0017692267954532756, 0.5, 2e-05, 3)]
    assert [g.label for g in group_runs(runs, config_differences(runs), group_by="lr")] == [
        "lr=0.001769", "lr=0.5", "lr=2e-05", "lr=3"]


@pytest.mark.parametrize(("text", "shown"), [("0.0017692267954532756", "0.001769"), ("1e-05", "1e-05"), ("8", "8"),
                                             ('"gdpo"', "gdpo"), ("true", "true"), ("[0.1234567, 2]", "[0.1234567, 2]"),
                                             ("", "(unset)")])
def test_a_value_reads_rounded_in_a_label(text, shown):
    assert readable(text, 4) == shown
