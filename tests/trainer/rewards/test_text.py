"""SQuAD normalization, token F1 and exact match rewards."""

import pytest

from trainer.rewards import get_reward
from trainer.rewards.text import exact_match, gold_answers, normalize_answer, token_f1


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("The  Eiffel-Tower!", "eiffeltower"),
        ("An apple, a day", "apple day"),
        ("  THE\tBeatles \n", "beatles"),
        ("theatre", "theatre"),  # articles only as whole words
        ("A.", ""),
        ("", ""),
        ("Grüße, “quoted”", "grüße “quoted”"),  # non-ASCII punctuation is kept, as in SQuAD
    ],
)
def test_normalize_answer(text, normalized):
    assert normalize_answer(text) == normalized


@pytest.mark.parametrize(
    ("prediction", "gold", "f1"),
    [
        ("the cat sat", "a cat sat down", 0.8),
        ("cat sat down", "cat sat down", 1.0),
        ("dog", "cat", 0.0),
        ("cat cat", "cat", 2 / 3),  # P = 1/2, R = 1: multiplicity counts
        ("", "", 1.0),
        ("the", "a", 1.0),  # both normalize to nothing
        ("", "cat", 0.0),
        ("cat", "", 0.0),
    ],
)
def test_token_f1(prediction, gold, f1):
    assert token_f1(prediction, gold) == pytest.approx(f1, abs=1e-12)
    assert token_f1(gold, prediction) == pytest.approx(f1, abs=1e-12)


def test_exact_match():
    assert exact_match("The Beatles.", "beatles") == 1.0
    assert exact_match("Beatles band", "beatles") == 0.0


def test_gold_answers():
    assert gold_answers("x") == ["x"]
    assert gold_answers(18) == ["18"]
    assert gold_answers(["NYC", "New York", None]) == ["NYC", "New York"]
    assert gold_answers([]) is None
    assert gold_answers(None) is None
    assert gold_answers(True) is None


def test_exact_match_reward():
    em = get_reward("exact_match")
    assert em.value_range == (0.0, 1.0)
    example = {"answer": "Paris"}
    assert em(example, "paris.", None) == 1.0
    assert em(example, "Paris, France", None) == 0.0
    assert em(example, "", None) == 0.0
    assert em(example, None, None) == 0.0  # no prediction is a wrong answer
    assert em(example, ["Paris"], None) == 0.0  # not text
    assert em({}, "Paris", None) is None  # no gold: not applicable
    assert em({"answer": ["NYC", "New York City"]}, "new york city", None) == 1.0
    assert get_reward("exact_match", prediction_field="answer")(example, {"answer": "PARIS"}, None) == 1.0
    assert get_reward("exact_match", gold_field="label")({"label": "x"}, "X", None) == 1.0


def test_token_f1_reward():
    f1 = get_reward("token_f1")
    assert f1({"answer": "a cat sat down"}, "the cat sat", None) == pytest.approx(0.8, abs=1e-12)
    assert f1({"answer": ["dog", "a cat sat down"]}, "the cat sat", None) == pytest.approx(0.8, abs=1e-12)
    assert f1({"answer": "cat"}, "\x00\ufffd garbage 💥", None) == 0.0
    assert f1({"answer": "cat"}, None, None) == 0.0
    assert f1({"answer": None}, "cat", None) is None


def test_char_f1_gives_partial_credit_for_near_misses():
    from trainer.rewards import get_reward
    from trainer.rewards.text import char_f1

    assert char_f1("appl", "apple") == pytest.approx(2 * 1 * 0.8 / 1.8)
    assert char_f1("The Apple!", "apple") == 1.0  # normalized like SQuAD first
    assert char_f1("xyz", "apple") == 0.0 and char_f1("", "apple") == 0.0
    reward = get_reward("char_f1")
    assert reward({"answer": "apple"}, "aple", None) == pytest.approx(char_f1("aple", "apple"))
    assert reward({}, "aple", None) is None  # no gold answer: not applicable
