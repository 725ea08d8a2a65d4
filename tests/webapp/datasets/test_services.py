"""The import service: the real files import with their README row counts; splits, mapping, ids;
every failure leaves nothing (or the previous version) behind."""

import json

import pytest

from tests.webapp.datasets.conftest import README_COUNTS, kind_of
from webapp.datasets.builtin import BUILTIN_DATASETS, builtin_dataset_import
from webapp.datasets.models import Dataset, DatasetRow
from webapp.datasets.services import (
    MAX_ERRORS,
    ImportOptions,
    SourceFile,
    dataset_import,
    dataset_preview,
    parse_mapping,
)

pytestmark = pytest.mark.django_db


def make(name="ds", kind="classification"):
    return Dataset.objects.create(name=name, kind=kind)


def run_import(dataset, path, kind=None, **options):
    return dataset_import(dataset, [SourceFile(str(path), path.name)], ImportOptions(kind=kind or dataset.kind, **options))


@pytest.mark.parametrize("relative", sorted(README_COUNTS))
def test_every_shared_file_imports_with_its_readme_row_count(relative, shared_data):
    dataset = make(relative.replace("/", "-").replace(".", "-"), kind_of(relative))
    result = run_import(dataset, shared_data / relative)
    assert result.ok, result.problems[:3]
    dataset.refresh_from_db()
    assert (dataset.status, dataset.row_count, dataset.version) == ("ready", README_COUNTS[relative], 1)
    assert DatasetRow.objects.filter(dataset=dataset).count() == README_COUNTS[relative]
    # Rows keep their line numbers and their own ids, and store exactly the file's records.
    first_line = (shared_data / relative).read_text(encoding="utf-8").splitlines()[0]
    first = DatasetRow.objects.get(dataset=dataset, line_number=1)
    assert first.data == json.loads(first_line) and first.ext_id == json.loads(first_line)["id"]
    assert DatasetRow.objects.filter(dataset=dataset).order_by("-line_number").first().line_number == README_COUNTS[relative]


def test_builtin_datasets_split_their_files(shared_data):
    counts = {}
    for spec in BUILTIN_DATASETS:
        dataset, result = builtin_dataset_import(spec, shared_data)
        assert result.ok, (spec.name, result.problems[:3])
        counts[spec.name] = (dataset.train_count, dataset.dev_count)
    assert counts == {
        "banking77": (10_003, 3_080), "gsm8k": (1_000, 1_319), "hotpotqa": (300, 150), "hotpotqa-corpus": (4_429, 0),
        "hover": (480, 120), "toolrl": (399, 80), "pupa": (300, 237),
    }
    # The dev file's rows keep their own line numbers (part 1).
    row = DatasetRow.objects.get(dataset__name="banking77", part=1, line_number=1)
    assert (row.split, row.ext_id) == ("dev", "banking77-test-00000")


def test_split_by_field_and_mapping_and_generated_ids(tmp_path):
    path = tmp_path / "intents.csv"
    path.write_text("utterance,intent,which\nhello,greet,train\nbye,leave,test\n\"multi\nline\",greet,dev\n")
    dataset = make()
    result = run_import(dataset, path, mapping=parse_mapping("utterance=text, intent=label"), split_field="which")
    assert result.ok, result.problems
    rows = list(DatasetRow.objects.filter(dataset=dataset).values_list("line_number", "split", "ext_id", "data"))
    assert rows == [
        (2, "train", "line-2", {"id": "line-2", "text": "hello", "label": "greet", "which": "train"}),
        (3, "dev", "line-3", {"id": "line-3", "text": "bye", "label": "leave", "which": "test"}),
        (4, "dev", "line-4", {"id": "line-4", "text": "multi\nline", "label": "greet", "which": "dev"}),
    ]


def test_ratio_split_is_seeded_and_exact(write_jsonl):
    path = write_jsonl([{"id": f"r{i}", "text": "t", "label": "l"} for i in range(200)])
    splits = []
    for name in ("a", "b", "c"):
        dataset = make(name)
        assert run_import(dataset, path, dev_ratio=0.25, seed=0 if name != "c" else 1).ok
        dataset.refresh_from_db()
        assert (dataset.train_count, dataset.dev_count) == (150, 50)
        splits.append(set(dataset.rows.filter(split="dev").values_list("ext_id", flat=True)))
    assert splits[0] == splits[1] != splits[2]


def test_csv_and_parquet_typed_fields(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"id": "a", "claim": "c1", "label": "SUPPORTED", "supporting_titles": ["T1", "T2"], "num_hops": 2},
            {"id": "b", "claim": "c2", "label": "NOT_SUPPORTED", "supporting_titles": [], "num_hops": None}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "claims.parquet")
    csv_path = tmp_path / "claims.csv"
    csv_path.write_text('id,claim,label,supporting_titles,num_hops\na,c1,SUPPORTED,"[""T1"", ""T2""]",2\n'
                        'b,c2,NOT_SUPPORTED,[],\n')
    for name, path in (("pq", tmp_path / "claims.parquet"), ("csv", csv_path)):
        dataset = make(name, "claim")
        assert run_import(dataset, path).ok
        stored = [r.data for r in dataset.rows.all()]
        assert stored[0] == rows[0]
        assert stored[1]["supporting_titles"] == [] and stored[1].get("num_hops") is None


@pytest.mark.parametrize("content, line, field, message", [
    ('{"id": "a", "text": "x", "label": "y"}\n{"id": "a", "text": "x2", "label": "y"}\n', 2, "id", "duplicate id 'a'"),
    ('{"id": "a", "text": "x"}\n', 1, "label", "missing (required text)"),
    ('{"id": "a", "text": 5, "label": "y"}\n', 1, "text", "expected text, got the number 5"),
    ('{"id": "a", "text": "x", "label": "y"}\n{"id": "b", "text": "x"\n', 2, None, "not valid JSON"),
    ('{"id": "a", "text": "x", "label": "y"}\n["a"]\n', 2, None, "must be a JSON object"),
    ('{"id": "a", "text": NaN, "label": "y"}\n', 1, None, "NaN is not a JSON value"),
    ('{"id": "a", "text": "x\\u0000", "label": "y"}\n', 1, "text", "NUL character"),
    ('{"id": "a", "text": "\\ud800", "label": "y"}\n', 1, "text", "not UTF-8"),
])
def test_bad_rows_name_line_and_field_and_store_nothing(tmp_path, content, line, field, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    dataset = make()
    result = run_import(dataset, path)
    assert not result.ok
    problem = result.problems[0]
    assert (problem.file, problem.line, problem.field) == ("bad.jsonl", line, field)
    assert message in problem.message
    dataset.refresh_from_db()
    assert (dataset.status, dataset.row_count, dataset.rows.count()) == ("failed", 0, 0)
    assert dataset.errors[0]["line"] == line and dataset.error_count == 1


@pytest.mark.parametrize("name, content, message", [
    ("data.txt", b"hello", "unsupported file type (.txt)"),
    ("data.jsonl", b"", "the file is empty"),
    ("data.jsonl", b"\n\n  \n", "only blank lines"),
    ("data.jsonl", b"text,label\nhi,greet\n", "Is it a CSV file? Rename it to .csv"),
    ("data.csv", b'{"text": "a"}\n', "looks like JSON Lines"),
    ("data.parquet", b"text,label\n", "not a Parquet file"),
    ("data.jsonl", b"PAR1....", "this is a Parquet file"),
    ("data.csv", b"text,text\na,b\n", "repeated column names"),
    ("data.jsonl", b'{"text": "\xff\xfe", "label": "x"}\n', "not UTF-8 text (byte 0xff at column 11)"),
    ("data.csv", b"text,label\nok,a\n\xe9t\xe9,b\n", "not UTF-8 text (byte 0xe9)"),
    ("data.csv", b"text,label\na,b,c\n", "has 3 values but the header has 2 columns"),
])
def test_bad_files_are_refused_clearly(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    dataset = make()
    result = run_import(dataset, path)
    assert not result.ok and message in str(result.problems[0]), result.problems
    assert dataset.rows.count() == 0


def test_too_many_errors_keeps_the_first_50_and_the_total(write_jsonl):
    path = write_jsonl([{"id": str(i), "text": "t"} for i in range(120)])
    dataset = make()
    result = run_import(dataset, path)
    dataset.refresh_from_db()
    assert result.problem_count == dataset.error_count == 120
    assert len(dataset.errors) == MAX_ERRORS
    assert [e["line"] for e in dataset.errors] == list(range(1, 51))
    assert dataset.errors[0]["text"] == "data.jsonl, line 1, field 'label': missing (required text)"


def test_size_limit(write_jsonl):
    path = write_jsonl([{"text": "t" * 100, "label": "l"}] * 20)
    dataset = make()
    result = dataset_import(dataset, [SourceFile(str(path), path.name)], ImportOptions(kind="classification"),
                            max_bytes=1000)
    assert not result.ok and "over the limit of" in result.problems[0].message
    assert dataset.rows.count() == 0


def test_failed_reupload_leaves_the_previous_version_untouched(write_jsonl):
    dataset = make()
    assert run_import(dataset, write_jsonl([{"id": "a", "text": "one", "label": "x"},
                                            {"id": "b", "text": "two", "label": "y"}], "v1.jsonl")).ok
    before = list(dataset.rows.values_list("pk", "ext_id", "data"))
    bad = write_jsonl([{"id": "c", "text": "three", "label": "z"}] * 3, "v2.jsonl")
    result = run_import(dataset, bad)
    assert not result.ok and result.problems[0].message.startswith("duplicate id 'c'")
    dataset.refresh_from_db()
    assert (dataset.status, dataset.version, dataset.row_count) == ("failed", 1, 2)
    assert list(dataset.rows.values_list("pk", "ext_id", "data")) == before
    # A good re-upload replaces the rows: a new version.
    assert run_import(dataset, write_jsonl([{"id": "n", "text": "new", "label": "x"}], "v3.jsonl")).ok
    dataset.refresh_from_db()
    assert (dataset.status, dataset.version, dataset.row_count) == ("ready", 2, 1)
    assert list(dataset.rows.values_list("ext_id", flat=True)) == ["n"]


def test_a_database_failure_mid_write_rolls_back_to_the_previous_version(write_jsonl, monkeypatch):
    """The write is one transaction: a failure after the old rows were deleted restores them."""
    from django.db import DatabaseError

    from webapp.datasets import row_writes

    dataset = make()
    assert run_import(dataset, write_jsonl([{"id": "a", "text": "one", "label": "x"}], "v1.jsonl")).ok
    real = row_writes._copy_rows if row_writes.connection.vendor == "postgresql" else row_writes._insert_rows

    def write_then_fail(dataset_id, rows, *args):
        real(dataset_id, rows[:1])
        raise DatabaseError("disk full (simulated after the first row)")

    monkeypatch.setattr(row_writes, "_copy_rows", write_then_fail)
    monkeypatch.setattr(row_writes, "_insert_rows", write_then_fail)
    result = run_import(dataset, write_jsonl([{"id": f"n{i}", "text": "t", "label": "x"} for i in range(5)], "v2.jsonl"))
    assert not result.ok and "disk full" in result.problems[0].message
    dataset.refresh_from_db()
    assert (dataset.version, dataset.row_count, dataset.status) == (1, 1, "failed")
    assert list(dataset.rows.values_list("ext_id", flat=True)) == ["a"]


def test_kind_of_a_dataset_used_by_a_task_cannot_change(write_jsonl):
    from webapp.runs.launch.catalog import programs_sync
    from webapp.runs.models import Program, Task

    programs_sync()
    dataset = make()
    assert run_import(dataset, write_jsonl([{"text": "one", "label": "x"}])).ok
    Task.objects.create(name="t", title="t", program=Program.objects.get(name="banking77"), dataset=dataset)
    result = run_import(dataset, write_jsonl([{"question": "q", "answer": "1"}]), kind="math")
    assert not result.ok and "must keep that kind" in result.problems[0].message
    assert dataset.rows.count() == 1


def test_preview_maps_the_first_rows_and_flags_a_missing_mapped_column(tmp_path):
    path = tmp_path / "q.csv"
    path.write_text("q,a\n" + "".join(f"question {i},{i}\n" for i in range(30)))
    options = ImportOptions(kind="math", mapping={"q": "question", "a": "answer", "nope": "solution"})
    preview = dataset_preview([SourceFile(str(path), "q.csv")], options)
    assert len(preview.rows) == 10 and preview.rows[0]["line"] == 2
    assert preview.fields[:3] == ["id", "question", "answer"]
    assert preview.rows[0]["cells"][:3] == ["line-2", "question 0", "0"]
    assert [str(p) for p in preview.problems] == [
        "field mapping names column 'nope', which the file does not have (columns: q, a)."]


@pytest.mark.parametrize("options, message", [
    ({"kind": "poetry"}, "unknown dataset kind 'poetry'"),
    ({"kind": "qa", "dev_ratio": 1.0}, "dev ratio must be at least 0 and below 1"),
    ({"kind": "qa", "dev_ratio": 0.1, "split_field": "s"}, "not both"),
    ({"kind": "qa", "mapping": {"a": "x", "b": "x"}}, "several columns are mapped to x"),
])
def test_invalid_options_say_how_to_fix_them(options, message):
    with pytest.raises(ValueError, match=message):
        ImportOptions(**options)
