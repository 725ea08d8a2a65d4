"""Property test: malformed files of every kind and format end in a validation error that names the
line (and the field, when one is at fault), store no row, and never make the admin answer 500."""

import csv
import io
import itertools
import json

import pytest
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webapp.datasets.models import Dataset
from webapp.datasets.schemas import (
    SCHEMAS,
    check_int,
    check_int_list,
    check_list,
    check_numeric,
    check_string,
)
from webapp.datasets.services import ImportOptions, SourceFile, dataset_import

pytestmark = pytest.mark.django_db

TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=12).filter(str.strip)
CORRUPTIONS = ("missing", "wrong_type", "duplicate_id", "bad_line", "bad_bytes", "not_object")
names = itertools.count()


def valid_value(spec):
    """A strategy for a valid value of a schema field, from its checker."""
    if spec.check is check_string:
        return TEXT
    if spec.check is check_int:
        return st.integers(-1000, 1000)
    if spec.check is check_numeric:
        return st.one_of(st.integers(-10**6, 10**6), st.integers(0, 9999).map(str))
    if spec.check is check_int_list:
        return st.lists(st.integers(0, 500), max_size=3)
    if spec.check is check_list:
        return st.lists(st.integers(), max_size=3)
    if spec.name == "gt_tool_calls":
        return st.lists(st.fixed_dictionaries({"name": TEXT, "parameters": st.just({"q": "1"})}), max_size=2)
    if spec.name == "tools":
        return st.lists(st.fixed_dictionaries({"name": TEXT, "description": TEXT}), max_size=2)
    return st.lists(TEXT, max_size=3)  # lists of texts


def record_of(kind):
    fields = {f.name: valid_value(f) for f in SCHEMAS[kind].fields if f.required}
    return st.fixed_dictionaries(fields)


@st.composite
def malformed_upload(draw):
    kind = draw(st.sampled_from(sorted(SCHEMAS)))
    fmt = draw(st.sampled_from(["jsonl", "csv"]))
    rows = draw(st.lists(record_of(kind), min_size=1, max_size=5))
    for i, row in enumerate(rows):
        row["id"] = f"row-{i}"
    bad = draw(st.integers(0, len(rows) - 1))
    corruption = draw(st.sampled_from(CORRUPTIONS))
    required = SCHEMAS[kind].required
    field = draw(st.sampled_from(required))
    spec = SCHEMAS[kind].by_name[field]
    if corruption == "wrong_type" and fmt == "csv" and spec.check is check_string:
        corruption = "missing"  # in CSV every value is text: a text field can only be missing
    if corruption == "duplicate_id" and bad == 0:
        corruption = "missing"
    return kind, fmt, rows, bad, corruption, field


def render(fmt, kind, rows, bad, corruption, field):
    """The file's bytes with row `bad` corrupted; returns (bytes, expected line, expected field)."""
    rows = [dict(r) for r in rows]
    target = rows[bad]
    expected_field = None
    if corruption == "missing":
        del target[field]
        expected_field = field
    elif corruption == "wrong_type":
        spec = SCHEMAS[kind].by_name[field]
        target[field] = 17 if spec.check is check_string else "not-a-valid-value"
        expected_field = field
    elif corruption == "duplicate_id":
        target["id"] = rows[0]["id"]
        expected_field = "id"
    columns = ["id", *SCHEMAS[kind].required]
    if fmt == "jsonl":
        lines = [json.dumps(r, ensure_ascii=False).encode() for r in rows]
        if corruption == "bad_line":
            lines[bad] = lines[bad][:-1]
        elif corruption == "bad_bytes":
            lines[bad] = lines[bad][:-1] + b', "x": "\xff\xfe"}'
        elif corruption == "not_object":
            lines[bad] = json.dumps(list(target.values())).encode()
        return b"\n".join(lines) + b"\n", bad + 1, expected_field
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for r in rows:
        writer.writerow([r.get(c, "") if isinstance(r.get(c, ""), str) else json.dumps(r[c]) for c in columns])
    lines = out.getvalue().encode().split(b"\n")
    if corruption in ("bad_line", "not_object"):
        lines[bad + 1] += b",one-value-too-many"
    elif corruption == "bad_bytes":
        lines[bad + 1] = b"\xff" + lines[bad + 1]
        expected_field = "id"
    return b"\n".join(lines), bad + 2, expected_field


@pytest.fixture
def admin_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("fuzz-admin", password="pw-for-tests-1"))
    return client


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(malformed_upload())
def test_malformed_files_fail_with_line_and_field_and_store_nothing(tmp_path, admin_client, case):
    kind, fmt, rows, bad, corruption, field = case
    content, line, expected_field = render(fmt, kind, rows, bad, corruption, field)
    path = tmp_path / f"upload-{next(names)}.{fmt}"
    path.write_bytes(content)

    dataset = Dataset.objects.create(name=f"fuzz-{next(names)}", kind=kind)
    result = dataset_import(dataset, [SourceFile(str(path), path.name)], ImportOptions(kind=kind))
    assert not result.ok
    problem = result.problems[0]
    assert problem.line == line, (corruption, result.problems)
    assert problem.field == expected_field, (corruption, result.problems)
    assert f"line {line}" in str(problem)
    dataset.refresh_from_db()
    assert dataset.status == "failed" and dataset.rows.count() == 0 and dataset.version == 0

    # The admin upload and preview of the same file answer with the problem, never a 500.
    with open(path, "rb") as handle:
        response = admin_client.post(reverse("admin:datasets_dataset_upload"),
                                     {"file": handle, "kind": kind, "name": f"fuzz-up-{next(names)}", "split": "none"})
    assert response.status_code == 302, response.content[:2000]
    preview = admin_client.get(response["Location"])
    assert preview.status_code == 200
    if line <= 11:  # within the previewed rows
        assert b"preview-problems" in preview.content
        assert b"preview-import" not in preview.content
