"""What the launch form's scripts read from the page: each field's condition, the programs' DSPy
flag, the reward registry and the model picker (webapp/runs/launch/widgets.py, templates/runs/new.html)."""

import html
import json
import re

import pytest
from django.urls import reverse

from trainer.config import RunConfig
from webapp.runs.launch.catalog import catalog_sync
from webapp.runs.launch.widgets import program_option_attrs, reward_registry, shown_when
from webapp.runs.models import Task

NEUTRAL = ("what the launch form embeds for its scripts (each field's condition, the programs' DSPy flag, "
           "the reward registry, the model picker), computed in Python from RunConfig and the registries; "
           "catalog_sync and the launch form's queries are tested on both backends in "
           "tests/webapp/runs/launch/test_launch.py")
pytestmark = [pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db]


@pytest.fixture
def page(client, owner):
    catalog_sync()
    client.force_login(owner)
    return client.get(reverse("runs:new"), {"task": Task.objects.get(name="toy").pk}).content.decode()


def test_every_conditional_field_wrapper_carries_its_condition(page):
    for name, condition in RunConfig.field_conditions().items():
        found = re.search(rf'id="field-{name}" data-shown-when="([^"]+)"', page)
        assert found, name
        assert json.loads(html.unescape(found.group(1))) == condition
    assert 'id="field-strategy" data-shown-when' not in page and shown_when("strategy") is None


def test_program_options_say_whether_they_are_dspy_programs(page):
    assert program_option_attrs("toy") == {"data-optimizes-prompts": "false"}
    assert program_option_attrs("no-such-program") == {"data-optimizes-prompts": "false"}
    assert re.search(r'<option value="toy"[^>]* data-optimizes-prompts="false"', page)


def test_the_reward_registry_is_plain_json_with_typed_parameters(page):
    registry = reward_registry()
    json.dumps(registry, allow_nan=False)  # JSON.parse refuses Infinity: the penalties' -inf must not leak
    rewards = {r["name"]: r for r in registry["rewards"]}
    assert rewards["exact_match"]["builtin"] and rewards["exact_match"]["distribution"] == "cohort"
    assert rewards["mhgpo_penalty_answerer"]["value_range"] == ["-inf", 0.0]
    params = {p["name"]: p for p in rewards["length"]["params"]}
    assert params["limit"] == {"name": "limit", "type": "number", "default": 4000, "integer": True}
    assert params["module"]["type"] == "optional" and params["source"]["type"] == "str"
    assert params["count_tokens"] == {"name": "count_tokens", "type": "code", "default": "whitespace_token_count"}
    assert {p["name"]: p["type"] for p in rewards["label_match"]["params"]}["strict"] == "bool"
    embedded = re.search(r'<script id="reward-registry" type="application/json">(.*?)</script>', page, re.S).group(1)
    assert json.loads(embedded) == json.loads(json.dumps(registry))


def test_the_page_loads_the_scripts_and_the_model_picker(page):
    assert re.search(r'<link rel="stylesheet" href="[^"]*css/launch-form\.css">', page)
    assert re.search(r'<script src="[^"]*js/launch-form\.js" defer>', page)
    assert re.search(r'<script src="[^"]*js/reward-editor\.js" defer>', page)
    assert re.search(r'<div class="model-picker" id="model-picker" hidden>', page)
    assert 'data-model="builtin:tiny"' in page


def test_sampler_gpus_is_in_view_only_where_a_worker_has_two_gpus(client, owner):
    from webapp.scheduling.services import worker_report

    catalog_sync()
    client.force_login(owner)

    def form_page() -> str:
        return client.get(reverse("runs:new"), {"task": Task.objects.get(name="toy").pk}).content.decode()

    worker_report("gpu1@a", host="a", gpu_name="NVIDIA H100", gpu_memory_gb=79.6, devices="0", gpu_count=1)
    alone = form_page()
    assert 'id="field-sampler_gpus"' not in alone
    assert re.search(r'<input type="hidden" name="sampler_gpus" value="0"', alone)  # still posted, as it was
    worker_report("gpu2@b", host="b", gpu_name="NVIDIA H100", gpu_memory_gb=79.6, devices="0,1", gpu_count=2)
    assert 'id="field-sampler_gpus"' in form_page()
