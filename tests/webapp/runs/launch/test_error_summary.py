"""A refused launch form says what happened at its top (issue item 6): a summary lists every refused
field in page order, each linking to its input, the form's own errors included; and a staff launch over
the launch limits (which never stop staff) comes back asking "Launch anyway" instead of passing silently.
The browser side (focus, links, the confirmation clicked) is tests/browser/test_launch_errors.py."""

import re

import pytest
from django.urls import reverse

from tests.webapp.runs.factories import make_run
from tests.webapp.runs.launch.test_launch import launch_data, toy_task  # noqa: F401 (fixture)
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db


def summary_of(response) -> str:
    page = response.content.decode()
    found = re.search(r'<div class="card error-summary[^"]*" id="error-summary" role="alert".*?</ul>', page, re.S)
    assert found, "no error summary on the page"
    return found.group(0)


def test_the_summary_lists_each_refused_field_in_page_order_linking_to_its_input(client, owner, toy_task):  # noqa: F811
    client.force_login(owner)
    # tags (the first group), then steps and learning_rate further down: not the order they were typed.
    response = client.post(reverse("runs:new"), launch_data(toy_task, learning_rate="fast", steps="many",
                                                            tags="Not a tag!"))
    assert response.status_code == 400 and not Run.objects.exists()
    summary = summary_of(response)
    assert "3 problems to fix" in summary
    links = re.findall(r'<a href="#(id_\w+)" data-target="\1">(\w+)</a>', summary)
    assert [target for target, _ in links] == ["id_tags", "id_steps", "id_learning_rate"]
    assert [label for _, label in links] == ["tags", "steps", "learning_rate"]
    assert "Enter a whole number." in summary
    # Each refused input is tied to its error for a screen reader.
    page = response.content.decode()
    steps = re.search(r'<input[^>]*name="steps"[^>]*>', page).group(0)
    assert 'aria-invalid="true"' in steps and 'aria-describedby="error-steps id_steps_helptext"' in steps
    assert 'id="error-steps"' in page and 'id="id_steps_helptext"' in page


def test_an_error_of_the_whole_form_is_in_the_summary_too(client, owner, toy_task, settings):  # noqa: F811
    settings.COHORT_LIMIT_QUEUED_RUNS_PER_USER = 1
    make_run(owner)
    client.force_login(owner)
    response = client.post(reverse("runs:new"), launch_data(toy_task))
    assert response.status_code == 400
    summary = summary_of(response)
    assert "1 problem to fix" in summary and "your limit is 1 queued runs at once." in summary
    assert "data-target" not in summary  # nothing to link to
    assert "launch-anyway" not in response.content.decode()  # a non-staff user is refused, never asked


def test_a_form_that_launches_or_is_shown_fresh_has_no_summary(client, owner, toy_task):  # noqa: F811
    client.force_login(owner)
    assert 'id="error-summary"' not in client.get(reverse("runs:new")).content.decode()


def test_a_staff_launch_over_the_limits_is_asked_to_confirm_and_launches_once_confirmed(
        client, staff, toy_task, settings):  # noqa: F811
    settings.COHORT_LIMIT_TOKENS_PER_RUN = 50_000_000
    client.force_login(staff)
    data = launch_data(toy_task, steps=1_000_000_000)
    response = client.post(reverse("runs:new"), data)
    assert response.status_code == 400 and not Run.objects.exists()
    summary = summary_of(response)
    assert "Over the launch limits" in summary and "your limit is 50,000,000" in summary
    assert '<a href="#id_steps" data-target="id_steps">steps</a>' in summary
    assert "confirm at the top" not in summary  # the limit's own words; the field's error says how
    page = response.content.decode()
    assert "confirm at the top of the form to launch anyway" in response.context["form"].errors["steps"][0]
    confirmation = response.context["form"].over_limits_confirmation
    assert (f'<button type="submit" class="primary" id="launch-anyway" name="confirm_over_limits" '
            f'value="{confirmation}">Launch anyway</button>') in page

    # A confirmation of other values over a limit asks again: it confirms what was shown, no more.
    again = client.post(reverse("runs:new"), {**data, "steps": 2_000_000_000, "confirm_over_limits": confirmation})
    assert again.status_code == 400 and not Run.objects.exists()
    assert again.context["form"].over_limits_confirmation != confirmation

    odd = client.post(reverse("runs:new"), {**data, "confirm_over_limits": "a\x00b"})  # refused in words too
    assert odd.status_code == 400 and "Null characters are not allowed." in summary_of(odd)

    launched = client.post(reverse("runs:new"), {**data, "confirm_over_limits": confirmation})
    run = Run.objects.get()
    assert launched.status_code == 302 and launched["Location"] == reverse("runs:detail", args=[run.pk])
    assert run.owner == staff and run.config["steps"] == 1_000_000_000


def test_a_staff_launch_within_the_limits_is_not_asked(client, staff, toy_task):  # noqa: F811
    client.force_login(staff)
    response = client.post(reverse("runs:new"), launch_data(toy_task, steps=3))
    assert response.status_code == 302 and Run.objects.count() == 1


def test_the_api_still_launches_a_staff_run_over_the_limits_without_asking(client, staff, toy_task, settings):  # noqa: F811
    """A script's values are deliberate, and a confirmation round trip would break it: POST /api/runs/
    launches for staff as before (docs/how-to/api.md)."""
    settings.COHORT_LIMIT_TOKENS_PER_RUN = 10_000
    client.force_login(staff)
    response = client.post("/api/runs/", {"task": "toy", "config": {"steps": 400}}, content_type="application/json")
    assert response.status_code == 201, response.json()
    assert Run.objects.get().config["steps"] == 400


def test_another_launch_button_over_the_limits_is_pressed_again_with_the_confirmation(client, staff, toy_task):  # noqa: F811
    """The Sweep button (webapp/sweeps) over the limits: "Launch anyway" is that button, and the checkbox
    carries the confirmation (a button has one name; launch-form.js ticks it)."""
    from tests.webapp.sweeps.test_launch_form import SETTINGS
    from webapp.sweeps.models import Sweep

    client.force_login(staff)
    data = {**launch_data(toy_task, steps=1_000_000_000), **SETTINGS, "sweep": "1",
            "sweep__learning_rate": "1e-5, 2e-5"}
    response = client.post(reverse("runs:new"), data)
    assert response.status_code == 400 and not Sweep.objects.exists()
    page = response.content.decode()
    confirmation = response.context["form"].over_limits_confirmation
    assert 'id="launch-anyway" name="sweep" value="1" data-confirms="id_confirm_over_limits"' in page
    assert f'name="confirm_over_limits" value="{confirmation}" id="id_confirm_over_limits"' in page
    launched = client.post(reverse("runs:new"), {**data, "confirm_over_limits": confirmation})
    assert launched.status_code == 302 and Sweep.objects.count() == 1
