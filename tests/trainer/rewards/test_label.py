"""Label match (Banking77 intents, HoVer labels)."""

import pytest

from trainer.rewards import get_reward
from trainer.rewards.label import normalize_label


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        (' "Card Arrival". ', "card_arrival"),
        ("card-arrival", "card_arrival"),
        ("NOT_SUPPORTED", "not_supported"),
        ("not supported", "not_supported"),
        ("Supported", "supported"),
        ("", ""),
    ],
)
def test_normalize_label(text, normalized):
    assert normalize_label(text) == normalized


def test_label_match():
    reward = get_reward("label_match")
    example = {"label": "card_arrival"}
    assert reward(example, "card_arrival", None) == 1.0
    assert reward(example, "Card arrival", None) == 1.0
    assert reward(example, "card_linking", None) == 0.0
    assert reward(example, "", None) == 0.0
    assert reward(example, "I think card_arrival", None) == 0.0  # extra words are not the label
    assert reward(example, "💳 card_arrival ???", None) == 1.0  # surrounding symbols are trimmed
    assert reward(example, None, None) == 0.0
    assert reward({}, "card_arrival", None) is None
    assert reward({"label": ["a"]}, "a", None) is None


def test_supported_is_not_not_supported():
    reward = get_reward("label_match")
    assert reward({"label": "SUPPORTED"}, "not supported", None) == 0.0
    assert reward({"label": "NOT_SUPPORTED"}, "Not Supported", None) == 1.0


def test_strict_label_match():
    reward = get_reward("label_match", strict=True)
    assert reward({"label": "card_arrival"}, " card_arrival\n", None) == 1.0
    assert reward({"label": "card_arrival"}, "Card arrival", None) == 0.0


def test_label_from_prediction_field():
    reward = get_reward("label_match", prediction_field="label")
    assert reward({"label": "card_arrival"}, {"reasoning": "...", "label": "card_arrival"}, None) == 1.0
    assert reward({"label": "card_arrival"}, {"reasoning": "..."}, None) == 0.0
