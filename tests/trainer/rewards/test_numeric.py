"""Final-number extraction and numeric answer match (GSM8K)."""

import json
import os
from pathlib import Path

import pytest

from trainer.rewards import get_reward
from trainer.rewards.numeric import extract_final_number, numbers_match, parse_number

DATA_DIR = Path(os.environ.get("COHORT_DATA_DIR", Path(__file__).resolve().parents[4] / "shared" / "data"))


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("so 3 + 15 = 18\n#### 18", 18.0),
        ("#### 18", 18.0),
        ("The answer is 1,234.", 1234.0),
        ("The answer is: 7 apples", 7.0),
        ("Final Answer: 12.5", 12.5),
        ("\\boxed{18}", 18.0),
        ("thus \\boxed{1,000} dollars", 1000.0),
        ("\\boxed{\\frac{3}{4}}", 0.75),
        ("\\boxed{-\\dfrac{1}{2}}", -0.5),
        ("\\boxed{\\frac{1}{0}}", 1.0),  # a zero denominator is no fraction: the first number
        ("#### 3/4", 0.75),
        ("it costs -3.50.", -3.5),
        ("It is 18.", 18.0),
        ("pages 5-7", 7.0),
        ("x = \u22124", -4.0),  # unicode minus
        ("$1,234,567.89 total", 1234567.89),
        ("18km", 18.0),
        ("1e3", 1000.0),
        ("value .5", 0.5),
        ("first 3 then #### 42\nthen 7", 42.0),  # the marker wins over a later number
        ("#### 5\n\\boxed{6}", 6.0),  # the last marker wins
        ("The answer is not obvious; we get 42 apples", 42.0),  # 'answer is' without a number is ignored
        ("3 + 4 = 7", 7.0),
    ],
)
def test_extract_final_number(text, number):
    assert extract_final_number(text) == number


@pytest.mark.parametrize(
    "text", ["", "no idea", "#### eighteen", "\\boxed{x}", "\\boxed{", "####", "💥 ∞", "abc123", None, 18]
)
def test_no_number(text):
    assert extract_final_number(text) is None


def test_parse_number():
    assert parse_number("1,234.5") == 1234.5
    assert parse_number("-.5") == -0.5
    assert parse_number("abc") is None
    assert parse_number("1e999") is None  # infinite


def test_numbers_match():
    assert numbers_match(18.0000001, 18.0)
    assert not numbers_match(17.99, 18.0)
    assert not numbers_match(1_000_001.0, 1_000_000.0)


def test_numeric_match_reward():
    reward = get_reward("numeric_match")
    assert reward.value_range == (0.0, 1.0)
    assert reward({"answer": "1234"}, "The answer is 1,234.", None) == 1.0
    assert reward({"answer": "18"}, "#### 18.0", None) == 1.0
    assert reward({"answer": "18"}, "#### 17", None) == 0.0
    assert reward({"answer": "18"}, "", None) == 0.0
    assert reward({"answer": "18"}, "<garbage \x00>", None) == 0.0
    assert reward({"answer": "18"}, None, None) == 0.0
    assert reward({"answer": 18}, 18, None) == 1.0
    assert reward({"answer": "-3.5"}, "it costs -3.50.", None) == 1.0
    assert reward({"answer": "so 6 * 3\n#### 18"}, "\\boxed{18}", None) == 1.0  # a full solution as gold
    assert reward({"answer": "eighteen"}, "18", None) is None
    assert reward({"answer": True}, "1", None) is None
    assert reward({}, "18", None) is None
    with pytest.raises(ValueError):
        get_reward("numeric_match", abs_tol=-1)


def test_gsm8k_gold_solutions():
    path = DATA_DIR / "gsm8k" / "test.jsonl"
    if not path.exists():
        pytest.fail(f"GSM8K data not found at {path} (set COHORT_DATA_DIR)")
    reward = get_reward("numeric_match")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 1319
    for row in rows:
        # The upstream worked solution ends in "#### <answer>": extraction must recover the gold number.
        assert reward(row, row["solution"], None) == 1.0, row["id"]
