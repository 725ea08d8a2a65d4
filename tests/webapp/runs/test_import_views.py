"""The runs page's "Import runs" form: real W&B and verl files uploaded, stored whole as imported runs;
a bad record, a zip escaping its folder and an upload over the limit refused beside the field, with
nothing stored."""

from __future__ import annotations

import io
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from tests.trainer.importers.writers import write_verl_run, write_wandb_run
from webapp.runs.models import Rollout, Run, StepMetric

NEUTRAL = "the readers and the external-run services read the same on both backends"
pytestmark = [pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db]


def zipped(folder, base) -> SimpleUploadedFile:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in folder.rglob("*"):
            if path.is_file():
                archive.write(path, path.relative_to(base).as_posix())
    return SimpleUploadedFile("run.zip", buffer.getvalue(), content_type="application/zip")


@pytest.fixture
def logged_in(client, owner):
    client.force_login(owner)
    return client


def test_the_runs_page_links_the_form_and_a_zipped_wandb_run_is_imported_whole(logged_in, tmp_path):
    assert reverse("runs:import") in logged_in.get(reverse("runs:list")).content.decode()
    write_wandb_run(tmp_path, steps=10)
    answer = logged_in.post(reverse("runs:import"), {"files": zipped(tmp_path / "wandb", tmp_path), "task": "toy_format",
                                                     "tags": "trl, imported"})
    run = Run.objects.get()
    assert answer.status_code == 302 and answer["Location"] == reverse("runs:detail", args=[run.pk])
    assert (run.origin, run.state, run.tags, run.task.name) == ("wandb", "succeeded", ["trl", "imported"], "toy_format")
    assert run.config["_import"]["source"].startswith("upload: wandb/offline-run-")
    assert StepMetric.objects.filter(run=run).count() == 10 and Rollout.objects.filter(run=run).count() == 12


def test_a_bad_line_is_named_beside_the_field_and_nothing_is_stored(logged_in, tmp_path):
    root = write_verl_run(tmp_path / "verl", steps=3)
    (root / "rollouts" / "2.jsonl").write_text('{"output": "no input", "score": 1}\n')
    answer = logged_in.post(reverse("runs:import"), {"files": zipped(root, tmp_path), "task": "gsm8k"})
    assert answer.status_code == 400
    assert "verl/rollouts/2.jsonl: line 1: no &#x27;input&#x27;" in answer.content.decode()
    assert Run.objects.count() == 0 and StepMetric.objects.count() == 0
    kept = logged_in.post(reverse("runs:import"), {"files": zipped(root, tmp_path), "task": "gsm8k", "skip_bad": "on"})
    assert kept.status_code == 302 and StepMetric.objects.count() == 3


def test_a_zip_member_leaving_its_folder_is_refused(logged_in):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("../../evil.jsonl", '{"step": 1, "data": {}}\n')
    answer = logged_in.post(reverse("runs:import"), {"files": SimpleUploadedFile("x.zip", buffer.getvalue()),
                                                     "task": "t"})
    assert answer.status_code == 400 and "would unpack outside its folder" in answer.content.decode()


def test_an_upload_over_the_limit_gets_a_clear_message(logged_in, settings, tmp_path):
    settings.COHORT_IMPORT_MAX_UPLOAD_MB = 0
    log = write_verl_run(tmp_path / "verl", steps=2) / "grpo-gsm8k.jsonl"
    answer = logged_in.post(reverse("runs:import"), {"files": SimpleUploadedFile(log.name, log.read_bytes()),
                                                     "task": "t"})
    assert answer.status_code in (400, 413) and "the limit is 0 MB" in answer.content.decode()
    assert Run.objects.count() == 0


def test_a_zipped_tensorboard_folder_is_one_run_named_after_it_and_uploading_it_again_stores_nothing_twice(
        logged_in, tmp_path):
    from tests.trainer.importers.writers import write_tensorboard_log

    logdir = write_tensorboard_log(tmp_path / "seed-1", steps=6)
    for _ in range(2):
        answer = logged_in.post(reverse("runs:import"), {"files": zipped(logdir, tmp_path), "task": "t"})
        assert answer.status_code == 302
    run = Run.objects.get()
    assert run.name == "seed-1" and "train/reward" in StepMetric.objects.get(run=run, step=3).metrics
    assert StepMetric.objects.filter(run=run).count() == 6


@pytest.mark.parametrize("field, value, words", [
    ("task", "bad name!", "Enter a valid value"),
    ("tags", "ok, not ok!", "Tags are letters, digits"),
    ("tags", "x" * 60, "at most"),
])
def test_a_bad_task_or_tag_is_refused_beside_its_field(logged_in, tmp_path, field, value, words):
    log = write_verl_run(tmp_path / "verl", steps=2) / "grpo-gsm8k.jsonl"
    data = {"files": SimpleUploadedFile(log.name, log.read_bytes()), "task": "gsm8k", field: value}
    answer = logged_in.post(reverse("runs:import"), data)
    assert answer.status_code == 400 and words in answer.content.decode() and f'id="{field}-errors"' in answer.content.decode()
    assert Run.objects.count() == 0
