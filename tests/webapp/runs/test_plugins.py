"""Plugin programs and rewards in the web app, with the real test plugins installed
(tests/plugins): mirrored by `sync_programs`, offered by the launch form and the task admin like
built-ins; a broken plugin shown disabled with its error and refused beside the field; every page
of the built-ins still works."""

import io
import json

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from tests.webapp.runs.launch.test_launch import launch_data
from webapp.datasets.models import Dataset
from webapp.datasets.services import ImportOptions, SourceFile, dataset_import
from webapp.runs.launch.defaults import config_defaults
from webapp.runs.models import Program, Run, Task

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("test_plugins")]

KIND = "fields:question,answer"
BROKEN_ERROR = "cohort-broken-plugin 0.1.0: RuntimeError: broken on purpose"


@pytest.fixture
def synced():
    out = io.StringIO()
    call_command("sync_programs", stdout=out)
    return out.getvalue()


@pytest.fixture
def demo_task(synced, tmp_path):
    path = tmp_path / "demo.jsonl"
    path.write_text("".join(json.dumps({"question": f"say {w}", "answer": w}) + "\n" for w in ("apple", "river")))
    dataset = Dataset.objects.create(name="demo", kind=KIND)
    assert dataset_import(dataset, [SourceFile(str(path), "demo.jsonl")], ImportOptions(kind=KIND)).ok
    return Task.objects.create(name="demo", title="Demo", program=Program.objects.get(name="demo_echo"),
                               dataset=dataset, rewards=[{"name": "demo_overlap", "weight": 1.0, "params": {}},
                                                         {"name": "demo_len", "weight": 1.0, "params": {"limit": 8}}])


@pytest.fixture
def admin_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("boss", password="pw-for-tests-1"))
    return client


def test_sync_programs_mirrors_plugin_programs_and_reports_the_unavailable_ones(synced):
    demo = Program.objects.get(name="demo_echo")
    assert (demo.title, demo.modules, demo.is_active) == ("Demo: answer in one word (test plugin)", ["echo"], True)
    broken = Program.objects.get(name="broken_program")
    assert not broken.is_active and broken.modules == []
    assert Program.objects.get(name="toy").is_active and Program.objects.get(name="toy").title == "Toy: repeat the word"
    assert f"Unavailable plugin program 'broken_program': {BROKEN_ERROR}" in synced
    assert "Unavailable plugin program 'toy': program name 'toy' of cohort-clash-plugin 0.1.0 clashes" in synced
    assert synced.count("Unavailable plugin reward 'twin'") == 2
    call_command("sync_programs", stdout=io.StringIO())  # idempotent
    assert Program.objects.filter(name__in=["demo_echo", "broken_program"]).count() == 2


def test_the_launch_form_lists_plugin_programs_and_shows_a_broken_one_disabled_with_its_error(client, owner,
                                                                                           demo_task):
    client.force_login(owner)
    page = client.get(reverse("runs:new"), {"task": demo_task.pk}).content.decode()
    # data-optimizes-prompts: whether the launch form shows the DSPy-only fields for it (launch-form.js)
    assert ('<option value="demo_echo" selected data-optimizes-prompts="false">Demo: answer in one word (test '
            'plugin)</option>') in page
    assert (f'<option value="broken_program" data-optimizes-prompts="false" disabled title="{BROKEN_ERROR}">'
            f"broken_program — unavailable: {BROKEN_ERROR}</option>") in page
    assert 'name="steps" value="3"' in page  # the plugin program's suggested settings


def test_a_launch_that_picks_the_broken_program_gets_the_error_beside_the_field(client, owner, demo_task):
    client.force_login(owner)
    response = client.post(reverse("runs:new"), launch_data(demo_task, program="broken_program"))
    assert response.status_code == 400
    assert response.context["form"].errors["program"] == [f"Program 'broken_program' is unavailable: {BROKEN_ERROR}"]
    assert 'id="error-program"' in response.content.decode() and not Run.objects.exists()


def test_a_run_of_the_plugin_program_with_its_rewards_is_launched_from_the_form(client, owner, demo_task):
    client.force_login(owner)
    response = client.post(reverse("runs:new"), launch_data(demo_task, name="plugin run"))
    run = Run.objects.get()
    assert response.status_code == 302 and response.url == reverse("runs:detail", args=[run.pk])
    assert run.config["program"] == "demo_echo" and run.config["steps"] == 3
    assert [(r["name"], r["params"]) for r in run.config["rewards"]] == [("demo_overlap", {}), ("demo_len", {"limit": 8})]
    assert client.get(reverse("runs:detail", args=[run.pk])).status_code == 200


@pytest.mark.parametrize("rewards, message", [
    ('[{"name": "demo_len", "params": {"limt": 3}}]', "unknown parameter(s) limt for reward 'demo_len'; accepted: limit"),
    ('[{"name": "twin"}]', "reward 'twin' is unavailable: reward name 'twin' is declared by both cohort-broken-plugin"),
])
def test_plugin_rewards_are_validated_like_built_ins(client, owner, demo_task, rewards, message):
    client.force_login(owner)
    response = client.post(reverse("runs:new"), launch_data(demo_task, rewards=rewards))
    assert response.status_code == 400 and message in response.context["form"].errors["rewards"][0]


def test_the_task_admin_takes_a_plugin_program_with_its_generic_dataset(admin_client, demo_task):
    from tests.webapp.datasets.test_commands_and_export import task_form

    page = admin_client.get(reverse("admin:runs_task_add")).content.decode()
    assert 'demo_len {"limit": 20}' in page and '<option value="demo_len">' in page
    demo = Program.objects.get(name="demo_echo")
    response = admin_client.post(reverse("admin:runs_task_add"), task_form(demo, demo_task.dataset, rewards=[
        {"name": "demo_len", "params": '{"limit": 4}'}]))
    assert response.status_code == 302, response.content.decode()[-2000:]
    qa = Dataset.objects.create(name="qa", kind="qa")
    refused = admin_client.post(reverse("admin:runs_task_add"), task_form(demo, qa, rewards=[{"name": "demo_len"}]))
    assert f"reads a {KIND} dataset, and &#x27;qa&#x27; is qa" in refused.content.decode()
    broken = admin_client.post(reverse("admin:runs_task_add"), task_form(
        Program.objects.get(name="broken_program"), rewards=[{"name": "exact_match"}]))
    assert f"program &#x27;broken_program&#x27; is unavailable: {BROKEN_ERROR}" in broken.content.decode()


def test_the_program_admin_shows_where_each_program_comes_from_and_why_a_plugin_is_unavailable(admin_client, synced):
    page = admin_client.get(reverse("admin:runs_program_changelist")).content.decode()
    assert '<td class="field-distribution">cohort-demo-plugin 0.1.0</td>' in page
    assert '<td class="field-distribution">cohort</td>' in page
    assert f'<td class="field-availability">unavailable: {BROKEN_ERROR}</td>' in page
    # Entries without a row of their own (a name the built-in kept, a reward) are listed above.
    assert "Unavailable plugin program &#x27;toy&#x27;: program name &#x27;toy&#x27; of cohort-clash-plugin" in page
    assert "Unavailable plugin reward &#x27;twin&#x27;" in page


def test_every_page_of_the_built_ins_still_loads_with_a_broken_plugin_installed(admin_client, owner, synced):
    client = Client()
    client.force_login(owner)
    toy = Task.objects.get(name="toy")
    assert config_defaults(toy)["program"] == "toy"
    for url in (reverse("runs:list"), reverse("runs:new"), f"{reverse('runs:new')}?task={toy.pk}"):
        assert client.get(url).status_code == 200, url
    for name in ("admin:index", "admin:runs_program_changelist", "admin:runs_task_changelist", "admin:runs_task_add",
                 "admin:datasets_dataset_changelist", "admin:datasets_dataset_upload"):
        assert admin_client.get(reverse(name)).status_code == 200, name
    response = client.post(reverse("runs:new"), launch_data(toy, steps=5))
    assert response.status_code == 302 and Run.objects.get().config["program"] == "toy"
