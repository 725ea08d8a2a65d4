"""The runs page's "Import runs" form in a real browser: verl's files uploaded land as a run with its
groups; a bad line is named beside the file field, and nothing is stored."""

from __future__ import annotations

import zipfile

import pytest

from tests.browser.session import PASSWORD, log_in
from tests.suites import UI_ONLY
from tests.trainer.importers.writers import write_verl_run
from webapp.runs.models import Run

pytestmark = [pytest.mark.browser, pytest.mark.backend_neutral(reason=UI_ONLY), pytest.mark.django_db(transaction=True)]


def zipped(folder, target):
    with zipfile.ZipFile(target, "w") as archive:
        for path in folder.rglob("*"):
            if path.is_file():
                archive.write(path, path.relative_to(folder.parent).as_posix())
    return target


def test_a_verl_run_uploaded_from_the_runs_page_lands_with_its_groups(page, screenshot, asgi_server, make_user,
                                                                     tmp_path):
    make_user("alice", password=PASSWORD)
    root = write_verl_run(tmp_path / "grpo-run", steps=4)
    log_in(page, asgi_server, "alice")
    page.goto(f"{asgi_server}/runs/")
    page.click("#import-runs")
    page.set_input_files("#id_files", str(zipped(root, tmp_path / "grpo-run.zip")))
    page.fill("#id_task", "gsm8k")
    screenshot("import-runs-form")
    page.click("#import-form button[type=submit]")
    page.wait_for_selector("#run-origin")
    run = Run.objects.get()
    assert page.url == f"{asgi_server}/runs/{run.pk}/" and page.inner_text("#run-origin") == "verl"
    assert "Imported 1 run(s): grpo-gsm8k." in page.content()
    page.wait_for_function("() => document.querySelector('#chart-reward')?.dataset.points === '4'")

    # A line that is not JSON: named beside the field, the form kept, nothing stored.
    with (root / "grpo-gsm8k.jsonl").open("a") as log:
        log.write("{oops\n")
    page.goto(f"{asgi_server}/runs/import")
    page.set_input_files("#id_files", str(zipped(root, tmp_path / "bad.zip")))
    page.fill("#id_task", "gsm8k2")
    page.click("#import-form button[type=submit]")
    error = page.inner_text("#files-errors")
    assert "grpo-run/grpo-gsm8k.jsonl: line 5: not JSON" in error and "Nothing was imported" in error
    assert page.input_value("#id_task") == "gsm8k2" and Run.objects.count() == 1
    screenshot("import-runs-refused")
