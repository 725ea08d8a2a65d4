"""ToolRL format and correctness rewards (GDPO Appendix C)."""

import itertools
import json
import os
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.rewards import get_reward
from trainer.rewards.toolrl import (
    ToolRLCorrectness,
    ToolRLFormat,
    correctness,
    format_ok,
    json_equal,
    parse_tool_calls,
)

DATA_DIR = Path(os.environ.get("COHORT_DATA_DIR", Path(__file__).resolve().parents[4] / "shared" / "data"))


def call(name, **parameters):
    return {"name": name, "parameters": parameters}


def wrap(*calls, think="plan", response=None):
    text = f"<think> {think} </think>\n"
    if calls:
        text += (
            "<tool_call>\n" + "\n".join(json.dumps(c, ensure_ascii=False) for c in calls) + "\n</tool_call>"
        )
    if response is not None:
        text += f"\n<response> {response} </response>"
    return text


# ---------------------------------------------------------------- format_ok


@pytest.mark.parametrize(
    "text",
    [
        '<think> t </think>\n<tool_call>\n{"name": "f", "parameters": {}}\n</tool_call>',
        "<think> t </think>\n<response> hi </response>",
        '<think> t </think>\n<tool_call>\n{"name": "f", "parameters": {}}\n</tool_call>\n<response> r </response>',
        "  \n<think>t</think><response>r</response>\n",
        "<think> 思考 </think>\n<response> Grüße 👋 </response>",
        "<think> the <b>bold</b> plan </think><response> ok </response>",
    ],
)
def test_format_ok_accepts(text):
    assert format_ok(text) == 1.0


@pytest.mark.parametrize(
    "text",
    [
        "",
        "garbage",
        "<think> t </think>",  # neither tool call nor response
        "<response> r </response>",  # no think
        "<response> r </response>\n<think> t </think>",  # wrong order
        "<think> t </think>\n<response> r </response>\n<tool_call>\n{}\n</tool_call>",  # wrong order
        "<think> t </think>\n<tool_call>\n",  # truncated
        "<think> t </think>\n<response> r",  # truncated
        "<think> t \n<response> r </response>",  # think never closed
        "preamble <think> t </think><response> r </response>",  # text before think
        "<think> t </think><response> r </response> trailing",  # text after
        "<think> t </think><think> u </think><response> r </response>",  # think twice
        "<think> t </think><response> r </response><response> s </response>",  # response twice
        "<think> t </think><tool_call>a</tool_call><tool_call>b</tool_call>",  # two tool_call blocks
        "<think>   </think><response> r </response>",  # empty think
        "<think> t </think><tool_call>\n\n</tool_call>",  # empty tool call
        "<think> t </think><response></response>",  # empty response
        "<think> t </think><response> </think> </response>",  # stray closing tag
        "<think> <response> r </response> </think><tool_call>\nx\n</tool_call>",  # response inside think
    ],
)
def test_format_ok_rejects(text):
    assert format_ok(text) == 0.0


def test_format_ok_adversarial_inputs_are_fast():
    # Repeated or unclosed tags must not make the regex backtrack quadratically.
    assert format_ok("<think>" + "</think>" * 200_000 + "x") == 0.0
    assert format_ok("<think>a</think><tool_call>" + "x" * 2_000_000) == 0.0
    assert format_ok("<think>" + "a" * 2_000_000 + "</think><response>r</response>") == 1.0


@pytest.mark.parametrize("value", [None, 3, b"<think>t</think><response>r</response>", ["<think>"]])
def test_format_ok_non_text_is_zero(value):
    assert format_ok(value) == 0.0


# ---------------------------------------------------------------- parse_tool_calls


def test_parse_one_object_per_line():
    text = '<think> t </think>\n<tool_call>\n{"name": "f", "parameters": {"x": 1}}\n{"name": "g", "parameters": {}}\n</tool_call>'
    assert parse_tool_calls(text) == [call("f", x=1), call("g")]


def test_parse_multiline_json_and_unicode():
    text = '<tool_call>\n{\n  "name": "翻訳",\n  "parameters": {"text": "Grüße 👋", "n": [1, 2.5]}\n}\n</tool_call>'
    assert parse_tool_calls(text) == [call("翻訳", text="Grüße 👋", n=[1, 2.5])]


@pytest.mark.parametrize(
    "text", ["", "garbage", "<think> t </think>\n<response> r </response>", "{ not json"]
)
def test_parse_without_tool_call_block_is_empty(text):
    assert parse_tool_calls(text) == []


@pytest.mark.parametrize(
    "text",
    [
        "<tool_call>\n",  # truncated: never closed
        '<tool_call>\n{"name": "f", "parameters": {}}',  # truncated
        '</tool_call>{"name": "f", "parameters": {}}<tool_call>',  # reversed tags
        '<tool_call>{"name": "f", "parameters": {}}</tool_call><tool_call>{"name": "g", "parameters": {}}</tool_call>',
        '<tool_call>\n{"name": "f", "parameters": {"x": 1}\n</tool_call>',  # missing brace
        "<tool_call>\n{'name': 'f', 'parameters': {}}\n</tool_call>",  # python repr, not JSON
        '<tool_call>\n{"name": "f", "parameters": {}},\n{"name": "g", "parameters": {}}\n</tool_call>',  # comma
        '<tool_call>\n[{"name": "f", "parameters": {}}]\n</tool_call>',  # array, not objects
        '<tool_call>\n{"name": "f", "parameters": {}} trailing words\n</tool_call>',
        '<tool_call>\n{"name": 3, "parameters": {}}\n</tool_call>',  # name not a string
        '<tool_call>\n{"name": "f", "parameters": [1, 2]}\n</tool_call>',  # parameters not an object
        '<tool_call>\n{"name": "f"}\n</tool_call>',  # parameters missing
        '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>',  # wrong key
        '<tool_call>\n"f"\n</tool_call>',
        "<tool_call>\n" + "[" * 100_000 + "\n</tool_call>",  # pathological nesting
    ],
)
def test_parse_malformed_is_none(text):
    assert parse_tool_calls(text) is None


def test_parse_empty_block_is_empty_list():
    assert parse_tool_calls("<think> t </think><tool_call>\n\n</tool_call>") == []


@pytest.mark.parametrize("value", [None, 42, ["<tool_call>"]])
def test_parse_non_text_is_none(value):
    assert parse_tool_calls(value) is None


# ---------------------------------------------------------------- json_equal


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        (1, 1.0, True),
        (True, 1, False),
        (False, 0, False),
        (True, True, True),
        ("1", 1, False),
        (None, None, True),
        (None, "null", False),
        ([1, "a"], [1.0, "a"], True),
        ([1, 2], [2, 1], False),
        ({"a": [1, {"b": True}]}, {"a": [1, {"b": True}]}, True),
        ({"a": 1}, {"a": 1, "b": 2}, False),
        ("Grüße", "Grüße", True),
    ],
)
def test_json_equal(a, b, equal):
    assert json_equal(a, b) is equal


def test_json_equal_deep_nesting_does_not_raise():
    deep = []
    for _ in range(5000):
        deep = [deep]
    assert json_equal(deep, deep) is False


# ---------------------------------------------------------------- correctness: hand-made cases


def test_worked_example_from_docstring():
    # r_name 1, r_param |{a}|/|{a,b,c}| = 1/3, r_value 1 (a), S_max 4: 6 * (7/3) / 4 - 3 = 0.5.
    assert correctness([call("f", a=1, c=5)], [call("f", a=1, b=2)]) == 0.5


def test_exact_answer_is_three_and_nothing_is_minus_three():
    gold = [call("f", a=1, b="x"), call("g")]
    assert correctness(gold, gold) == 3.0
    assert correctness([], gold) == -3.0


def test_wrong_tool_name_is_unpaired():
    # Same parameters under another name earn nothing: r_name 0/2, no pairs.
    assert correctness([call("g", a=1)], [call("f", a=1)]) == -3.0
    # One right, one wrong name: r_name |{f}|/|{f,g,h}| = 1/3, pair f scores 2, S_max 5:
    # 6 * (7/3) / 5 - 3 = -0.2.
    assert correctness([call("f", a=1), call("h", b=2)], [call("f", a=1), call("g", b=2)]) == pytest.approx(
        -0.2, abs=1e-15
    )
    assert correctness([call("f", a=1), call("h", b=2)], [call("f", a=1), call("g", b=2)]) == float(
        Fraction(-1, 5)
    )


def test_reordered_calls_same_score():
    gold = [call("f", x=1), call("f", x=2), call("g", q="a")]
    predicted = [call("g", q="a"), call("f", x=2), call("f", x=1)]
    assert correctness(predicted, gold) == 3.0
    for perm in itertools.permutations(predicted):
        assert correctness(list(perm), gold) == 3.0


def test_optimal_pairing_beats_greedy():
    # Gold f(c=1) would greedily take P1 (score 1/3) and leave f(a=2, b=2) with P2 = f() (score 0).
    # Optimal: f(a=2, b=2) <-> P1 scores 2/3 (keys) + 1 (b) = 5/3; r_name 1; S_max 1 + 2 + 3 = 6;
    # 6 * (8/3) / 6 - 3 = -1/3 (greedy would give -5/3).
    gold = [call("f", c=1), call("f", a=2, b=2)]
    predicted = [call("f", a=1, b=2, c=2), call("f")]
    assert correctness(predicted, gold) == float(Fraction(-1, 3))
    assert correctness(predicted[::-1], gold[::-1]) == float(Fraction(-1, 3))


def test_value_types_matter():
    # r_name 1, r_param 1, r_value 0, S_max 3: 6 * 2 / 3 - 3 = 1.0.
    assert correctness([call("f", page=1)], [call("f", page="1")]) == 1.0
    assert correctness([call("f", flag=1)], [call("f", flag=True)]) == 1.0
    assert correctness([call("f", n=1.0)], [call("f", n=1)]) == 3.0


def test_parameterless_calls():
    assert correctness([call("f")], [call("f")]) == 3.0
    # keys {} vs {x}: r_param 0; R = 1, S_max 2: 6 / 2 - 3 = 0.0.
    assert correctness([call("f", x=1)], [call("f")]) == 0.0


def test_extra_calls_use_name_sets():
    # The paper's r_name is over *sets* of names, so a duplicated correct call is not penalized ...
    assert correctness([call("f", a=1), call("f", a=1)], [call("f", a=1)]) == 3.0
    # ... but an extra call to another tool is: r_name 1/2, pair 2, S_max 3: 6 * 2.5 / 3 - 3 = 2.0.
    assert correctness([call("f", a=1), call("g")], [call("f", a=1)]) == 2.0


def test_no_gold_calls():
    assert correctness([], []) == 3.0
    assert correctness([call("f")], []) == -3.0


@pytest.mark.parametrize(
    "predicted",
    [
        None,
        "f(a=1)",
        {"name": "f", "parameters": {}},
        [{"name": "f"}],
        [{"name": 3, "parameters": {}}],
        [{"name": "f", "parameters": "a=1"}],
        [["f", {}]],
        [call("f", a=1), None],
        42,
    ],
)
def test_malformed_predictions_score_minus_three(predicted):
    assert correctness(predicted, [call("f", a=1)]) == -3.0


@pytest.mark.parametrize("gold", [None, [{"name": "f"}], "text", [call("f"), 3]])
def test_malformed_gold_raises(gold):
    with pytest.raises(ValueError):
        correctness([], gold)


# ---------------------------------------------------------------- correctness: properties

NAMES = st.sampled_from(["f", "g", "h"])
KEYS = st.sampled_from(["a", "b", "c"])
VALUES = st.one_of(st.integers(0, 2), st.booleans(), st.sampled_from(["0", "1", "x"]), st.none())
CALLS = st.builds(lambda n, p: {"name": n, "parameters": p}, NAMES, st.dictionaries(KEYS, VALUES, max_size=3))


def reference_correctness(predicted, gold):
    """Independent Appendix C implementation: every injective same-name pairing, exhaustively."""

    def jaccard(a, b):
        return Fraction(len(a & b), len(a | b)) if a | b else Fraction(1)

    def pair(g, p):
        if g["name"] != p["name"]:
            return None
        gp, pp = g["parameters"], p["parameters"]
        values = sum(1 for k in gp if k in pp and json_equal(gp[k], pp[k]))
        return jaccard(set(gp), set(pp)) + values

    best = Fraction(0)
    # Assign each gold call a distinct predicted index or None.
    options = [None, *range(len(predicted))]
    for choice in itertools.product(options, repeat=len(gold)):
        used = [c for c in choice if c is not None]
        if len(used) != len(set(used)):
            continue
        total = Fraction(0)
        for g, c in zip(gold, choice, strict=True):
            if c is not None:
                score = pair(g, predicted[c])
                if score is None:
                    break
                total += score
        else:
            best = max(best, total)
    r_name = jaccard({g["name"] for g in gold}, {p["name"] for p in predicted})
    s_max = 1 + len(gold) + sum(len(g["parameters"]) for g in gold)
    return float(6 * (r_name + best) / s_max - 3)


@settings(max_examples=200, deadline=None)
@given(st.lists(CALLS, max_size=4), st.lists(CALLS, max_size=4), st.randoms(use_true_random=False))
def test_correctness_properties(predicted, gold, rnd):
    score = correctness(predicted, gold)
    assert -3.0 <= score <= 3.0
    shuffled = list(predicted)
    rnd.shuffle(shuffled)
    assert correctness(shuffled, gold) == score  # bit-identical: exact arithmetic
    gold_shuffled = list(gold)
    rnd.shuffle(gold_shuffled)
    assert correctness(predicted, gold_shuffled) == score
    assert score == reference_correctness(predicted, gold)
    assert correctness(gold, gold) == 3.0


# ---------------------------------------------------------------- reward wrappers


def test_reward_wrappers():
    example = {"gt_tool_calls": [call("f", a=1)], "answer": wrap(call("f", a=1))}
    fmt, corr = get_reward("toolrl_format"), get_reward("toolrl_correctness")
    assert isinstance(fmt, ToolRLFormat) and isinstance(corr, ToolRLCorrectness)
    assert fmt.value_range == (0.0, 1.0) and corr.value_range == (-3.0, 3.0)
    good = wrap(call("f", a=1))
    assert fmt(example, good, None) == 1.0
    assert corr(example, good, None) == 3.0
    assert corr(example, [call("f", a=1)], None) == 3.0  # already parsed calls
    assert corr(example, wrap(call("f", a=2)), None) == 1.0  # r_name 1, r_param 1, value 0: 6*2/3-3
    assert corr(example, "<think> t </think>\n<tool_call>\n{broken\n</tool_call>", None) == -3.0
    assert corr(example, "", None) == -3.0
    assert corr(example, None, None) == -3.0
    assert fmt(example, None, None) == 0.0
    assert fmt(example, "", None) == 0.0
    # The gold can be a full gold output string instead of parsed calls.
    assert get_reward("toolrl_correctness", gold_field="answer")(example, good, None) == 3.0
    # prediction_field for dict predictions.
    assert get_reward("toolrl_correctness", prediction_field="output")(example, {"output": good}, None) == 3.0


def test_reward_gold_edge_cases():
    corr = get_reward("toolrl_correctness")
    assert corr({}, wrap(call("f")), None) is None  # no gold field
    assert corr({"gt_tool_calls": [{"name": "f"}]}, wrap(call("f")), None) is None  # malformed gold
    response_only = {"gt_tool_calls": []}
    assert corr(response_only, wrap(response="hello"), None) == 3.0
    assert corr(response_only, wrap(call("f")), None) == -3.0
    skip = get_reward("toolrl_correctness", skip_without_gold_calls=True)
    assert skip(response_only, wrap(response="hello"), None) is None


# ---------------------------------------------------------------- the bundled ToolRL data


def _rows(name):
    path = DATA_DIR / "toolrl" / name
    if not path.exists():
        pytest.fail(f"ToolRL data not found at {path} (set COHORT_DATA_DIR)")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("name", "with_calls", "response_only"), [("test.jsonl", 71, 9), ("sft.jsonl", 345, 54)]
)
def test_gold_answers_score_maximum(name, with_calls, response_only):
    rows = _rows(name)
    assert sum(1 for r in rows if r["gt_tool_calls"]) == with_calls
    assert sum(1 for r in rows if not r["gt_tool_calls"]) == response_only
    fmt, corr = get_reward("toolrl_format"), get_reward("toolrl_correctness")
    for row in rows:
        answer = row["answer"]
        assert format_ok(answer) == 1.0, row["id"]
        assert parse_tool_calls(answer) == row["gt_tool_calls"], row["id"]
        assert correctness(parse_tool_calls(answer), row["gt_tool_calls"]) == 3.0, row["id"]
        assert fmt(row, answer, None) == 1.0, row["id"]
        assert corr(row, answer, None) == 3.0, row["id"]
        # Dropping any one gold call must cost something.
        for i in range(len(row["gt_tool_calls"])):
            partial = row["gt_tool_calls"][:i] + row["gt_tool_calls"][i + 1 :]
            assert correctness(partial, row["gt_tool_calls"]) < 3.0, row["id"]
