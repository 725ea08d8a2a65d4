"""A dataset upload in a real browser through the real admin page: choose the file and options,
see the preview of the first rows, confirm, watch the progress bar, see the result (real Celery
worker, real ASGI server)."""

import pytest
from playwright.sync_api import expect

from tests.conftest import SHARED_DATA
from webapp.datasets.models import Dataset

NEUTRAL = ("the admin upload page's preview, progress bar and result in a real browser; the import itself "
           "(COPY on PostgreSQL, batched INSERT on SQLite, gsm8k's real files included) and a real worker "
           "importing an upload while the progress endpoint is polled are tested on both backends in "
           "tests/webapp/datasets/test_services.py and tests/webapp/datasets/test_admin.py")
pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]


def test_admin_uploads_gsm8k_sees_preview_progress_and_result(page, screenshot, asgi_server, celery_worker_process,
                                                               django_user_model):
    django_user_model.objects.create_superuser("root", password="a-long-test-password")
    page.goto(f"{asgi_server}/admin/login/")
    page.fill("#id_username", "root")
    page.fill("#id_password", "a-long-test-password")
    page.click("input[type=submit]")
    page.goto(f"{asgi_server}/admin/datasets/dataset/")
    page.click("#upload-dataset")
    page.wait_for_url(f"{asgi_server}/admin/datasets/dataset/upload/")

    page.set_input_files("#id_file", str(SHARED_DATA / "gsm8k" / "train.jsonl"))
    page.set_input_files("#id_dev_file", str(SHARED_DATA / "gsm8k" / "test.jsonl"))
    page.select_option("#id_kind", "math")
    page.fill("#id_name", "gsm8k-browser")
    screenshot("dataset-upload-form")
    page.click("#upload-preview")

    page.wait_for_selector("#preview-table")
    assert page.is_visible("#preview-ok")
    assert "Natalia sold clips" in page.inner_text("#preview-table")  # the first row of train.jsonl
    assert page.locator("#preview-table tbody tr").count() == 20  # 10 first rows of each file
    screenshot("dataset-upload-preview")
    page.click("#preview-import")

    page.wait_for_url(f"{asgi_server}/admin/datasets/dataset/*/change/")
    # The bar is on the page before and after the reload that ends an import (progress.js); a check
    # that does not wait could land in that reload when the import is quick and the browser slow.
    expect(page.locator("#dataset-progress")).to_be_visible()
    screenshot("dataset-upload-progress")
    page.wait_for_function("() => document.querySelector('#dataset-status')?.textContent === 'ready'",
                           timeout=60_000)
    counts = page.inner_text("#dataset-counts")
    assert "2319 rows (1000 train, 1319 dev), version 1 (imported" in counts
    assert page.get_attribute("#dataset-progress", "value") == "100"
    screenshot("dataset-upload-done")
    dataset = Dataset.objects.get(name="gsm8k-browser")
    assert (dataset.row_count, dataset.status) == (2319, "ready")
