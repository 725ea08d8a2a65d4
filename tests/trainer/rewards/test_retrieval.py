"""Recall of gold titles among retrieved passages."""

from types import SimpleNamespace

import pytest

from trainer.rewards import get_reward
from trainer.rewards.retrieval import normalize_title, title_of, title_recall


def make_call(module, parsed, parsed_ok=True, index=0):
    return SimpleNamespace(
        module=module, invocation_index=index, completion="", parsed_ok=parsed_ok, parsed=parsed
    )


def test_title_of():
    assert title_of("Miss Potter | a 2006 film") == "Miss Potter"
    assert title_of("No separator") == "No separator"
    assert title_of({"title": "T", "text": "x"}) == "T"
    assert title_of({"text": "x"}) is None
    assert title_of(3) is None


def test_normalize_title():
    assert normalize_title("The Beatles") == normalize_title("beatles") == "beatles"
    assert normalize_title("Cafe\u0301") == normalize_title("Café")  # NFC


def test_title_recall():
    gold = ["Miss Potter", "Chris Noonan"]
    assert title_recall(["Miss Potter | film", "Babe | film"], gold) == 0.5
    assert title_recall(["Babe | x", "Chris Noonan | y", "Miss Potter | z"], gold) == 1.0
    assert title_recall(["Babe | x", "Chris Noonan | y", "Miss Potter | z"], gold, k=2) == 0.5
    assert (
        title_recall(["Miss Potter | a", "Miss Potter | b"], gold + ["Miss Potter"]) == 0.5
    )  # distinct gold
    assert title_recall([], gold) == 0.0
    with pytest.raises(ValueError):
        title_recall(["x"], [])


def test_title_recall_reward_from_prediction():
    reward = get_reward("title_recall")
    example = {"supporting_titles": ["Life Goes On (Fergie song)", "M.I.L.F. $"]}
    assert reward(example, ["Life Goes On (Fergie song) | text", "milf | other"], None) == 1.0
    assert reward(example, ["Life Goes On (Fergie song) | text"], None) == 0.5
    assert reward(example, "Life Goes On (Fergie song) | a single passage", None) == 0.5
    assert reward(example, None, None) == 0.0
    assert reward(example, [None, 3, {"no": "title"}, "💥"], None) == 0.0
    assert reward({}, ["x"], None) is None
    assert reward({"supporting_titles": []}, ["x"], None) is None
    strict = get_reward("title_recall", all_or_nothing=True)
    assert strict(example, ["Life Goes On (Fergie song) | text"], None) == 0.0
    field = get_reward("title_recall", prediction_field="retrieved_docs")
    assert field(example, SimpleNamespace(retrieved_docs=["M.I.L.F. $ | t"]), None) == 0.5


def test_title_recall_reward_from_trajectory():
    reward = get_reward("title_recall", module="retrieve")
    example = {"supporting_titles": ["A", "B", "C", "D"]}
    trajectory = SimpleNamespace(
        calls=[
            make_call("retrieve", ["A | x", {"title": "B"}]),
            make_call("summarize", ["C | x"]),  # another module: ignored
            make_call("retrieve", None, parsed_ok=False),  # failed parse: ignored
            make_call("retrieve", "D | single passage", index=1),
        ]
    )
    assert reward(example, None, trajectory) == 0.75
    assert get_reward("title_recall", module="retrieve", k=2)(example, None, trajectory) == 0.5
    assert reward(example, None, None) == 0.0


def test_invalid_k():
    with pytest.raises(ValueError):
        get_reward("title_recall", k=-1)
