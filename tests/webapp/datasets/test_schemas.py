"""Each kind's schema stores exactly the fields its program reads, so imported data trains as is."""

import pytest

from trainer.programs import PROGRAMS, program_info
from trainer.rewards import get_reward
from webapp.datasets.models import Dataset
from webapp.datasets.schemas import SCHEMAS, get_schema, validate_record


def test_one_schema_per_dataset_kind():
    assert set(SCHEMAS) == set(Dataset.Kind.values)


@pytest.mark.parametrize("name", sorted(n for n, cls in PROGRAMS.items() if getattr(cls, "dataset_kind", None)))
def test_every_program_reads_fields_its_kind_declares(name):
    info = program_info(name)
    schema = get_schema(info["dataset_kind"])
    assert name in schema.programs
    declared = set(schema.field_names)
    assert set(info["example_fields"]) <= declared, set(info["example_fields"]) - declared
    # Fields every example has are required: what start()/prompt() index directly.
    optional_reads = {"system", "supporting_titles"}  # read with .get() or only by a reward
    assert set(info["example_fields"]) - optional_reads <= set(schema.required)
    # Each default reward finds its gold value in a declared field.
    for spec in info["default_rewards"]:
        gold = getattr(get_reward(spec["name"], **spec.get("params", {})), "gold_field", None)
        assert gold is None or gold in declared, (spec["name"], gold)


def test_programs_that_search_read_a_corpus_of_title_and_text():
    for name in ("search", "hover"):
        assert PROGRAMS[name].needs_corpus and name in SCHEMAS["corpus"].programs
    assert SCHEMAS["corpus"].required == ["title", "text"]


def test_privacy_kind_matches_the_pupa_fields():
    assert SCHEMAS["privacy"].required == ["user_query", "target_response", "pii_units"]
    assert SCHEMAS["privacy"].programs == ()


@pytest.mark.parametrize("kind, record, textual, expected", [
    ("math", {"question": "q", "answer": "1,234"}, False, {"question": "q", "answer": "1,234"}),
    ("math", {"question": "q", "answer": 7.5}, False, {"question": "q", "answer": 7.5}),
    ("classification", {"text": "t", "label": "l", "label_id": "3"}, True, {"text": "t", "label": "l", "label_id": 3}),
    ("toolcall", {"question": "q", "tools": '[{"name": "f"}]', "gt_tool_calls": "[]", "gt_response": ""}, True,
     {"question": "q", "tools": [{"name": "f"}], "gt_tool_calls": []}),
    ("qa", {"id": 12, "question": "q", "answer": "a", "extra": [1]}, False,
     {"id": "12", "question": "q", "answer": "a", "extra": [1]}),
])
def test_valid_records_are_typed_and_keep_extra_fields(kind, record, textual, expected):
    data, _, problems, _ = validate_record(get_schema(kind), record, textual=textual)
    assert problems == [] and data == expected


@pytest.mark.parametrize("kind, record, field, message", [
    ("math", {"question": "q", "answer": "about five"}, "answer", "expected a number"),
    ("math", {"question": " ", "answer": "1"}, "question", "is empty"),
    ("classification", {"text": "t", "label": "l", "label_id": True}, "label_id", "got a boolean"),
    ("claim", {"claim": "c", "label": "S", "supporting_titles": ["a", 3]}, "supporting_titles", "item 1"),
    ("toolcall", {"question": "q", "tools": [{"description": "x"}], "gt_tool_calls": []}, "tools", "'name'"),
    ("toolcall", {"question": "q", "tools": [], "gt_tool_calls": [{"name": "f", "parameters": "x"}]},
     "gt_tool_calls", "'parameters' must be an object"),
    ("corpus", {"title": "t", "text": "x", "sent_starts": [0, "5"]}, "sent_starts", "whole number"),
    ("qa", {"id": {"a": 1}, "question": "q", "answer": "a"}, "id", "expected text or a whole number"),
])
def test_invalid_records_name_the_field(kind, record, field, message):
    _, _, problems, _ = validate_record(get_schema(kind), record)
    assert [p.field for p in problems] == [field] and message in problems[0].message
