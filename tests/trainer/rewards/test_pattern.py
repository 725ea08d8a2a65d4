"""The regex_match format reward (trainer/rewards/pattern.py)."""

from __future__ import annotations

import pytest

from trainer.config import RunConfig
from trainer.rewards import get_reward, list_rewards


def test_whole_stripped_text_must_match():
    ends_with_period = get_reward("regex_match")  # default pattern: ends with "."
    assert ends_with_period({}, "apple.") == 1.0
    assert ends_with_period({}, "  apple .\n") == 1.0
    assert ends_with_period({}, "apple. more") == 0.0
    assert ends_with_period({}, "line one.\nline two.") == 1.0  # "." matches newlines too
    one_word = get_reward("regex_match", pattern=r"\S+")
    assert one_word({}, "apple") == 1.0 and one_word({}, "apple pie") == 0.0


def test_a_field_of_the_prediction_and_non_text_predictions():
    reward = get_reward("regex_match", pattern=r"\[\w+\]", prediction_field="text")
    assert reward({}, {"text": "[apple]"}) == 1.0
    assert reward({}, {"answer": "[apple]"}) == 0.0  # no such field: a wrong format, not None
    assert get_reward("regex_match")({}, None) == 0.0
    assert get_reward("regex_match")({}, ["a."]) == 0.0


@pytest.mark.parametrize("pattern", ["[unclosed", "", 3])
def test_an_invalid_pattern_is_refused_with_a_message(pattern):
    with pytest.raises(ValueError, match="regex_match: pattern"):
        get_reward("regex_match", pattern=pattern)
    with pytest.raises(ValueError, match="regex_match: pattern"):
        RunConfig(rewards=[{"name": "regex_match", "params": {"pattern": pattern}}])


def test_listed_with_its_parameters():
    listed = {r["name"]: r for r in list_rewards()}["regex_match"]
    assert listed["params"] == {"pattern": r".*\.", "prediction_field": None}
    assert listed["value_range"] == (0.0, 1.0)
