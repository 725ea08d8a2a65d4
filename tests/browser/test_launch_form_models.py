"""The launch form's model help in a real browser (issue 24's model picker, first form): the models a
task's program has measured settings for are chips that fill the form with those settings, and the
model box offers the server's models as suggestions while taking free text."""

import pytest

from tests.browser.session import log_in
from trainer.programs import program_info
from webapp.runs.launch.catalog import catalog_sync
from webapp.runs.models import Task

NEUTRAL = ("the launch form's model chips and model suggestions in a real browser; the settings a chip's "
           "link fills in and the model offer (ordered allow-list rows) are tested on both backends in "
           "tests/webapp/runs/launch/test_launch.py and tests/webapp/runs/launch/test_model_offer.py")
pytestmark = [pytest.mark.browser, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]

SMOL = "builtin:smollm2-135m-instruct"


def test_a_model_chip_fills_the_programs_measured_settings(page, screenshot, asgi_server, make_user):
    catalog_sync()
    task = Task.objects.get(program__name="arith_format")
    suggested = program_info("arith_format")["model_suggestions"][SMOL]
    make_user("alice", password="a-long-test-password")
    log_in(page, asgi_server, "alice")
    page.goto(f"{asgi_server}/runs/new?task={task.pk}")
    assert "active" not in page.get_attribute(f"a.chip:has-text('{SMOL}')", "class")  # the task's defaults
    options = page.eval_on_selector_all("#model-choices option", "os => os.map(o => o.value)")
    assert SMOL in options and "builtin:tiny" in options
    assert page.get_attribute("#id_model", "list") == "model-choices"

    page.click(f"a.chip:has-text('{SMOL}')")
    page.wait_for_url(f"**/runs/new?task={task.pk}&model=*")
    assert page.input_value("#id_model") == SMOL
    for name in ("max_new_tokens", "group_size", "learning_rate"):
        if name in suggested:
            assert float(page.input_value(f"#id_{name}")) == float(suggested[name]), name
    assert "active" in page.get_attribute(f"a.chip:has-text('{SMOL}')", "class")
    screenshot("launch-form-model-chip")

    page.fill("#id_model", "my-lab/any-model")  # free text stays possible (the allow-list decides at launch)
    assert page.input_value("#id_model") == "my-lab/any-model"
