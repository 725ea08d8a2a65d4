"""Parsing helpers and modules: total functions of any model output (never an exception)."""

from __future__ import annotations

import doctest

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trainer.programs as programs
import trainer.programs.base as base
import trainer.programs.registry as registry
import trainer.programs.toy as toy
from trainer.programs.base import (
    Module,
    dedupe,
    freeze,
    json_list,
    last_line,
    one_line,
    require_fields,
    sections,
    tag_block,
    tagged_line,
    tagged_lines,
)

# Text that looks like what models write: field headers, tags, brackets, quotes, newlines, unicode.
MODEL_TEXT = st.text(
    alphabet=st.sampled_from(list("abc Label:Query:Notes:###;[]{}\"',\n\t<>/0123456789-*é😀\x00"))
    | st.characters(),
    max_size=120,
)


@pytest.mark.parametrize("module", [base, registry, toy, programs], ids=lambda m: m.__name__)
def test_doctests(module):
    assert doctest.testmod(module).failed == 0


@settings(max_examples=150, deadline=None, derandomize=True)
@given(MODEL_TEXT)
def test_helpers_accept_any_text(text):
    for value in (tagged_line(text, "label"), last_line(text), tag_block(text, "think")):
        assert value is None or isinstance(value, str)
    assert all(isinstance(v, str) and v for v in tagged_lines(text, "query"))
    assert set(sections(text, ["notes", "enough"])) <= {"", "notes", "enough"}
    assert json_list(text) is None or isinstance(json_list(text), list)
    assert len(one_line(text, 10)) <= 10


def test_tagged_fields_read_what_models_write():
    text = "Let me think.\n**Label:** card_arrival\n"
    assert tagged_line(text, "label") == "card_arrival"
    assert tagged_line("label: a\nLabel: b", "label") == "b"  # the last one is the answer
    assert tagged_line("My label: x", "label") is None  # a header starts its line
    assert sections("Notes: a\nb\n# Enough: no", ["notes", "enough"]) == {
        "": "",
        "notes": "a\nb",
        "enough": "no",
    }


def test_json_list_skips_brackets_that_are_not_json():
    assert json_list('see [1] or ["a", "b"]') == [1]
    assert json_list('see [x] then ["a", "b"]') == ["a", "b"]
    assert json_list("[" * 5000) is None  # deep nesting is not a crash


def test_dedupe_and_one_line():
    assert dedupe(["A b", "a  B", "", "c"]) == ["A b", "c"]
    assert one_line("a\n b\tc", 100) == "a b c"
    assert one_line("abcdefghij", 8) == "abcde..."


def test_module_read_normalizes_missing_output():
    module = Module("m", lambda x: f"X: {x}", lambda text: (text == "ok", text))
    assert module.render(x=1) == "X: 1"
    assert module.read("ok") == (True, "ok")
    assert module.read(None) == (False, "")


def test_frozen_examples_and_required_fields():
    frozen = freeze({"a": 1})
    try:
        frozen["a"] = 2  # type: ignore[index]
    except TypeError:
        pass
    assert frozen["a"] == 1
    require_fields({"a": 1}, ["a"], "p")
    for bad, message in (
        ({"b": 1}, "needs example field"),
        ({"a": None}, "needs example field"),
        ("text", "JSON object"),
    ):
        try:
            require_fields(bad, ["a"], "p")
        except ValueError as error:
            assert message in str(error)
        else:
            raise AssertionError("expected a ValueError")


def test_degenerate_long_outputs_parse_in_linear_time():
    import time

    n = 50_000  # a model stuck repeating one token until max_new_tokens
    texts = [
        "[" * n,
        "[ " * n,
        "<think>" * (n // 7),
        "Label:" + " \t*" * n + "x",
        "*" * n,
        "Label: a\n" * (n // 9),
    ]
    started = time.perf_counter()
    for text in texts:
        (
            tagged_line(text, "label"),
            sections(text, ["notes", "label"]),
            json_list(text),
            tag_block(text, "think"),
        )
    assert time.perf_counter() - started < 2.0  # quadratic parsing took seconds per text
