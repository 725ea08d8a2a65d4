"""The dataset admin: staff only; upload -> preview -> confirm -> queued import with progress;
size limits before and while reading the body; deletion refused while a task uses the dataset."""

import json
import time

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from webapp.datasets.models import Dataset
from webapp.datasets.services import IMPORT_TASK, ImportOptions, SourceFile, dataset_import, upload_dir
from webapp.projects.services import personal_project_ensure
from webapp.runs.launch.catalog import programs_sync
from webapp.runs.models import Program, Run, Task

pytestmark = pytest.mark.django_db

UPLOAD = "admin:datasets_dataset_upload"
ROWS = "".join(json.dumps({"id": f"q{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
               for i in range(30))


@pytest.fixture
def admin_user(django_user_model):
    return django_user_model.objects.create_superuser("boss", password="pw-for-tests-1")


@pytest.fixture
def admin_client(client, admin_user):
    client.force_login(admin_user)
    return client


def upload(client, content=ROWS, name="math.jsonl", **fields):
    from django.core.files.uploadedfile import SimpleUploadedFile

    data = {"file": SimpleUploadedFile(name, content.encode() if isinstance(content, str) else content),
            "kind": "math", "name": "sums", "split": "none", **fields}
    return client.post(reverse(UPLOAD) + fields.pop("query", ""), data)


def endpoints(dataset):
    return [reverse(UPLOAD), reverse("admin:datasets_dataset_preview", args=["0" * 32]),
            reverse("admin:datasets_dataset_progress", args=[dataset.pk]),
            reverse("admin:datasets_dataset_change", args=[dataset.pk]),
            reverse("admin:datasets_dataset_changelist"), reverse("admin:runs_task_changelist")]


@pytest.mark.parametrize("who", ["anonymous", "user"])
def test_non_staff_cannot_reach_the_admin_or_the_upload_endpoints(client, make_user, who, tmp_path):
    if who == "user":
        client.force_login(make_user("plain"))
    dataset = Dataset.objects.create(name="d", kind="math")
    for url in endpoints(dataset):
        response = client.get(url)
        assert response.status_code == 302 and "login/?next=" in response["Location"], url
    response = upload(client)
    assert response.status_code == 302 and "login/?next=" in response["Location"]
    assert not upload_dir().exists() or not any(upload_dir().iterdir())  # nothing was staged


def test_staff_without_dataset_permissions_is_refused(client, staff):
    client.force_login(staff)
    assert client.get(reverse(UPLOAD)).status_code == 403
    staff.user_permissions.add(Permission.objects.get(codename="add_dataset"))
    assert client.get(reverse(UPLOAD)).status_code == 200


def test_upload_needs_the_csrf_token(csrf_client, admin_user):
    csrf_client.force_login(admin_user)
    assert upload(csrf_client).status_code == 403
    assert not upload_dir().exists() or not any(upload_dir().iterdir())


@pytest.mark.django_db(transaction=True)
def test_upload_preview_confirm_then_a_real_worker_imports_it(admin_client, celery_worker_process):
    response = upload(admin_client, mapping="", description="sums")
    assert response.status_code == 302
    preview = admin_client.get(response["Location"])
    body = preview.content.decode()
    assert preview.status_code == 200 and 'id="preview-ok"' in body and 'id="preview-import"' in body
    assert "What is 0 + 1?" in body and "What is 9 + 1?" in body and "What is 10 + 1?" not in body  # first 10 rows
    staged = upload_dir() / response["Location"].rstrip("/").rsplit("/", 1)[-1]
    assert staged.is_dir()

    confirmed = admin_client.post(response["Location"], {"confirm": "Import"})
    dataset = Dataset.objects.get(name="sums")
    assert confirmed["Location"] == reverse("admin:datasets_dataset_change", args=[dataset.pk])
    assert dataset.uploaded_by.username == "boss" and dataset.status in ("queued", "importing", "ready")

    # The Celery worker (default queue) imports it; the JSON endpoint the page polls follows it.
    progress_url = reverse("admin:datasets_dataset_progress", args=[dataset.pk])
    deadline = time.monotonic() + 60
    while (progress := admin_client.get(progress_url).json())["active"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert progress | {"errors": None} == {
        "id": dataset.pk, "name": "sums", "status": "ready", "active": False, "progress": 100,
        "note": "imported 30 rows", "rows": 30, "train": 30, "dev": 0, "version": 1, "error_count": 0, "errors": None}
    page = admin_client.get(reverse("admin:datasets_dataset_change", args=[dataset.pk])).content.decode()
    assert 'id="dataset-status">ready<' in page and "<strong>30</strong> rows" in page
    assert not staged.exists()  # the staged upload is removed after the import
    # A preview that was imported cannot be confirmed twice.
    again = admin_client.post(response["Location"], {"confirm": "Import"})
    assert again["Location"] == reverse(UPLOAD)


def test_import_task_is_routed_to_the_default_queue():
    from webapp.celery import app

    assert app.amqp.router.route({}, IMPORT_TASK)["queue"].name == "default"


def test_change_page_lists_the_first_50_errors_with_line_numbers(admin_client, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps({"id": str(i), "question": "q"}) + "\n" for i in range(70)))
    dataset = Dataset.objects.create(name="bad", kind="math")
    dataset_import(dataset, [SourceFile(str(path), "bad.jsonl")], ImportOptions(kind="math"))
    page = admin_client.get(reverse("admin:datasets_dataset_change", args=[dataset.pk])).content.decode()
    assert "70 problems; the first 50 are listed. Nothing was imported." in page
    assert "<td>bad.jsonl</td><td>50</td><td>answer</td><td>missing (required number)</td>" in page
    assert "<td>51</td>" not in page


def test_preview_of_a_bad_file_shows_errors_and_no_import_button(admin_client):
    response = upload(admin_client, content='{"id": "a", "question": "q", "answer": "x"}\n{"id": "a"\n')
    body = admin_client.get(response["Location"]).content.decode()
    assert "math.jsonl, line 1, field &#x27;answer&#x27;: expected a number" in body
    assert "math.jsonl, line 2: is not valid JSON" in body
    assert 'id="preview-import"' not in body


@pytest.mark.parametrize("name, content, message", [
    ("data.xlsx", "x", "unsupported file type (.xlsx)"),
    ("data.jsonl", "", "The submitted file is empty."),
])
def test_upload_form_refuses_wrong_type_and_empty_file(admin_client, name, content, message):
    response = upload(admin_client, content=content, name=name)
    assert response.status_code == 200 and message in response.content.decode()


def test_over_size_upload_is_refused_from_its_content_length_before_reading(admin_client, settings):
    settings.COHORT_DATASET_MAX_BYTES = 1000
    from webapp.datasets.admin import FORM_OVERHEAD_BYTES

    response = admin_client.generic("POST", reverse(UPLOAD), b"", content_type="multipart/form-data; boundary=x",
                                    CONTENT_LENGTH=str(1000 + FORM_OVERHEAD_BYTES + 1))
    assert response.status_code == 413
    assert "over the limit of 0 MiB (COHORT_DATASET_MAX_BYTES); nothing was read." in response.content.decode()


def test_over_size_upload_is_stopped_while_streaming(admin_client, settings):
    settings.COHORT_DATASET_MAX_BYTES = 1000  # Content-Length passes (form overhead), the file does not
    response = upload(admin_client, content=ROWS * 2)
    assert response.status_code == 413 and "it was not stored" in response.content.decode()
    assert not upload_dir().exists() or not any(upload_dir().iterdir())


def test_reupload_while_importing_is_refused(admin_client):
    dataset = Dataset.objects.create(name="busy", kind="math", status="importing")
    response = upload(admin_client, query=f"?dataset={dataset.pk}")
    assert response.status_code == 200 and "importing already" in response.content.decode()


def test_delete_is_refused_while_a_task_uses_the_dataset(admin_client, admin_user, tmp_path):
    programs_sync()
    used = Dataset.objects.create(name="used", kind="math")
    corpus = Dataset.objects.create(name="passages", kind="corpus")
    free = Dataset.objects.create(name="free", kind="math")
    task = Task.objects.create(name="gsm", title="gsm", program=Program.objects.get(name="math"), dataset=used)
    Task.objects.create(name="search", title="s", program=Program.objects.get(name="search"), corpus=corpus)
    Run.objects.create(owner=admin_user, project=personal_project_ensure(admin_user), task=task, config={})
    for dataset, user in ((used, "task “gsm” (uses it as its dataset, with 1 run)"),
                          (corpus, "task “search” (uses it as its retrieval corpus)")):
        url = reverse("admin:datasets_dataset_delete", args=[dataset.pk])
        page = admin_client.get(url).content.decode()
        assert "would require deleting the following protected related objects" in page and user in page
        response = admin_client.post(url, {"post": "yes"})
        assert response.status_code == 200 and Dataset.objects.filter(pk=dataset.pk).exists()
    # The bulk action too.
    response = admin_client.post(reverse("admin:datasets_dataset_changelist"),
                                 {"action": "delete_selected", "_selected_action": [used.pk, free.pk], "post": "yes"})
    assert response.status_code == 200 and Dataset.objects.filter(pk=free.pk).exists()
    # A dataset no task uses is deleted with its rows.
    path = tmp_path / "f.jsonl"
    path.write_text(ROWS)
    dataset_import(free, [SourceFile(str(path), "f.jsonl")], ImportOptions(kind="math"))
    page = admin_client.get(reverse("admin:datasets_dataset_delete", args=[free.pk])).content.decode()
    assert "Dataset: free (30 rows)" in page
    response = admin_client.post(reverse("admin:datasets_dataset_delete", args=[free.pk]), {"post": "yes"})
    assert response.status_code == 302 and not Dataset.objects.filter(pk=free.pk).exists()


def test_add_goes_to_the_upload_page(admin_client):
    response = admin_client.get(reverse("admin:datasets_dataset_add"))
    assert response["Location"] == reverse(UPLOAD)
    assert 'id="upload-dataset"' in admin_client.get(reverse("admin:datasets_dataset_changelist")).content.decode()
