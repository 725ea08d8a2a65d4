"""The generic dataset kind of a plugin program (`fields:<name>,...` from its example_fields): an
admin uploads rows for the test plugin's `demo_echo` with no code in Cohort, and a row missing a
field gets a row-numbered error like any other kind's."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.urls import reverse

from trainer.programs import program_info
from webapp.datasets.kinds import program_dataset_kind, upload_schemas
from webapp.datasets.models import Dataset
from webapp.datasets.schemas import generic_kind, get_schema
from webapp.datasets.services import ImportOptions, SourceFile, dataset_import

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("test_plugins")]

KIND = "fields:question,answer"
ROWS = [{"question": "say apple", "answer": "apple"}, {"question": "say river", "answer": "river", "id": "r"},
        {"question": "say stone", "answer": "stone", "extra": [1, 2]}]


@pytest.fixture
def admin_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("boss", password="pw-for-tests-1"))
    return client


def test_a_plugin_program_without_a_known_kind_reads_the_generic_kind_of_its_fields():
    assert program_dataset_kind(program_info("demo_echo")) == KIND == generic_kind(["question", "answer"])
    assert program_dataset_kind(program_info("toy")) is None  # generates its examples
    assert program_dataset_kind(program_info("search")) == "qa"
    assert program_dataset_kind({"dataset_kind": "unknown-to-cohort", "example_fields": ["q"]}) == "fields:q"
    schema = get_schema(KIND)
    assert schema.required == ["question", "answer"] and schema.optional == []
    assert {"demo_echo", "demo_factory"} <= set([s for s in upload_schemas() if s.kind == KIND][0].programs)
    for bad in ("fields:", "fields:a,,b", "fields:a,a", "nope"):
        with pytest.raises(ValueError):
            get_schema(bad)


@pytest.mark.parametrize("name, content", [
    ("rows.jsonl", None),
    ("rows.csv", "question,answer\nsay apple,apple\nsay river,river\n"),
])
def test_rows_of_the_generic_kind_import(tmp_path, write_jsonl, name, content):
    if content is None:
        path = write_jsonl(ROWS, name)
    else:
        path = tmp_path / name
        path.write_text(content)
    dataset = Dataset.objects.create(name="demo", kind=KIND)
    result = dataset_import(dataset, [SourceFile(str(path), name)], ImportOptions(kind=KIND))
    assert result.ok, result.problems
    dataset.refresh_from_db()
    assert (dataset.status, dataset.kind, dataset.version) == ("ready", KIND, 1)
    rows = list(dataset.rows.order_by("line_number").values_list("ext_id", "data"))
    first = "line-1" if content is None else "line-2"  # a CSV's line 1 is its header
    assert rows[0] == (first, {"id": first, "question": "say apple", "answer": "apple"})
    if content is None:
        assert rows[1][0] == "r" and rows[2][1]["extra"] == [1, 2]  # own ids and extra fields are kept


def test_a_row_missing_a_field_gets_a_row_numbered_error(write_jsonl, admin_client):
    path = write_jsonl([ROWS[0], {"question": "say river"}, ROWS[2], {"answer": "cloud"}], "demo.jsonl")
    dataset = Dataset.objects.create(name="demo", kind=KIND)
    result = dataset_import(dataset, [SourceFile(str(path), "demo.jsonl")], ImportOptions(kind=KIND))
    assert not result.ok and dataset.rows.count() == 0
    assert [str(p) for p in result.problems] == [
        "demo.jsonl, line 2, field 'answer': missing (required any value)",
        "demo.jsonl, line 4, field 'question': missing (required any value)"]
    page = admin_client.get(reverse("admin:datasets_dataset_change", args=[dataset.pk])).content.decode()
    assert "<td>demo.jsonl</td><td>2</td><td>answer</td><td>missing (required any value)</td>" in page


def test_the_admin_upload_offers_the_generic_kind_and_previews_it(admin_client):
    page = admin_client.get(reverse("admin:datasets_dataset_upload")).content.decode()
    assert f'<option value="{KIND}">{KIND}: Fields question, answer</option>' in page
    assert "demo_echo, demo_factory" in page  # the kinds table names the programs that read it
    rows = "".join(f'{{"question": "q{i}", "answer": "a{i}"}}\n' for i in range(3)) + '{"question": "q"}\n'
    response = admin_client.post(reverse("admin:datasets_dataset_upload"), {
        "file": SimpleUploadedFile("demo.jsonl", rows.encode()), "kind": KIND, "name": "demo", "split": "none"})
    assert response.status_code == 302
    preview = admin_client.get(response["Location"]).content.decode()
    assert "q2" in preview and "answer: missing (required any value)" in preview


def test_import_dataset_command_takes_a_generic_kind(write_jsonl):
    path = write_jsonl(ROWS)
    call_command("import_dataset", str(path), "--kind", KIND, "--name", "demo-cli")
    assert Dataset.objects.get(name="demo-cli").row_count == 3
