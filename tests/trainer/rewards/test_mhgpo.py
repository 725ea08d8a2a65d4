"""MHGPO agent-specific format penalties (Appendix B)."""

import math
from types import SimpleNamespace

import pytest

from trainer.rewards import get_reward
from trainer.rewards.mhgpo import (
    answerer_penalty,
    parse_reranker_ids,
    parse_rewriter_queries,
    reranker_penalty,
    rewriter_penalty,
)


def make_call(module, parsed=None, parsed_ok=True, completion="", index=0):
    return SimpleNamespace(
        module=module, invocation_index=index, completion=completion, parsed_ok=parsed_ok, parsed=parsed
    )


# ---------------------------------------------------------------- rewriter


def test_parse_rewriter_queries():
    assert parse_rewriter_queries("### who is X; where was X born ###") == ["who is X", "where was X born"]
    assert parse_rewriter_queries("Sure!\n### a;; b; ###\nthanks") == ["a", "b"]
    assert parse_rewriter_queries("### ###") == []
    assert parse_rewriter_queries("### 東京; Zürich ###") == ["東京", "Zürich"]
    assert parse_rewriter_queries("a; b") is None
    assert parse_rewriter_queries("### a; b") is None  # truncated
    assert parse_rewriter_queries("") is None
    assert parse_rewriter_queries(None) is None


@pytest.mark.parametrize(
    ("parsed", "value"),
    [
        (["q1", "q2", "q3", "q4"], 0.0),
        (["q1", "q2", "q3", "q4", "q5"], -0.5),
        ([], 0.0),
        ("### a; b; c; d; e ###", -0.5),
        ("### a; b ###", 0.0),
        ({"queries": ["a"] * 5}, -0.5),
        ("no hashes at all", -0.5),  # format violated
        (None, -0.5),
        (42, -0.5),
    ],
)
def test_rewriter_penalty(parsed, value):
    assert rewriter_penalty(parsed) == value


def test_rewriter_penalty_parameters():
    assert rewriter_penalty(["a", "b", "c"], max_queries=2, penalty=-1.0) == -1.0


# ---------------------------------------------------------------- reranker


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("0, 3, 2", [0, 3, 2]),
        ("[Document0, Document3]", [0, 3]),
        ("Document 1, doc 4; 2", [1, 4, 2]),
        ("1 2 3.", [1, 2, 3]),
        ("", []),
        ("0, 3, maybe 2", None),
        ("none of them", None),
        ("1.5", None),
        ("٣", None),  # non-ASCII digits are not ids
    ],
)
def test_parse_reranker_ids(text, ids):
    assert parse_reranker_ids(text) == ids


@pytest.mark.parametrize(
    ("parsed", "num_candidates", "value"),
    [
        ([0, 3], 5, 0.0),
        ([4, 0, 2], 5, 0.0),
        ([0, 3, 0], 5, -0.5),  # duplicate
        ([0, 5], 5, -0.5),  # index out of bound
        ([-1], 5, -0.5),
        ([-1], None, -0.5),
        ([99], None, 0.0),  # upper bound unknown
        (["1", "2"], 3, 0.0),
        (["1", "x"], 3, -0.5),
        ([True], 3, -0.5),
        ([], 5, 0.0),
        ("Document0, Document0", 5, -0.5),
        ("0, 7", 5, -0.5),
        ("garbage", 5, -0.5),
        ({"ids": [0, 4], "num_candidates": 4}, 10, -0.5),  # the mapping's count wins
        ({"ids": [0, 3], "num_candidates": 4}, None, 0.0),
        (None, 5, -0.5),
    ],
)
def test_reranker_penalty(parsed, num_candidates, value):
    assert reranker_penalty(parsed, num_candidates=num_candidates) == value


# ---------------------------------------------------------------- answerer


def test_answerer_penalty():
    assert answerer_penalty("Ed Wood") == 0.0
    assert answerer_penalty(" ".join(["w"] * 20)) == 0.0
    assert answerer_penalty(" ".join(["w"] * 21)) == -1.0
    assert answerer_penalty("") == 0.0
    assert answerer_penalty(None) == 0.0
    assert answerer_penalty("abcdef", max_tokens=5, count_tokens=len) == -1.0


# ---------------------------------------------------------------- trajectory-level rewards and per-call values


def test_rewriter_reward_and_per_call():
    reward = get_reward("mhgpo_penalty_rewriter")
    assert reward.value_range == (-math.inf, 0.0)
    ok, too_many = make_call("rewriter", ["a", "b"]), make_call("rewriter", list("abcde"), index=1)
    broken = make_call("rewriter", None, parsed_ok=False, index=2)
    assert reward.per_call(ok) == 0.0
    assert reward.per_call(too_many) == -0.5
    assert reward.per_call(broken) == -0.5
    traj = SimpleNamespace(calls=[ok, make_call("reranker", [0, 0]), too_many, broken])
    assert reward({}, None, traj) == -1.0  # the reranker call is not the rewriter's business
    assert reward.per_call(make_call("reranker", [0, 0])) == 0.0  # another agent's call: not penalized here
    assert get_reward("mhgpo_penalty_answerer").per_call(make_call("rewriter", "w " * 50)) == 0.0
    assert reward({}, None, SimpleNamespace(calls=[ok])) == 0.0
    assert reward({}, None, SimpleNamespace(calls=[])) is None  # agent absent: not applicable
    assert reward({}, None, None) is None
    mean = get_reward("mhgpo_penalty_rewriter", aggregate="mean")
    assert mean.value_range == (-0.5, 0.0)
    assert mean({}, None, SimpleNamespace(calls=[ok, too_many])) == -0.25
    assert (
        get_reward("mhgpo_penalty_rewriter", aggregate="min")({}, None, SimpleNamespace(calls=[ok, too_many]))
        == -0.5
    )


def test_reranker_reward_and_per_call():
    reward = get_reward("mhgpo_penalty_reranker", num_candidates=5)
    assert reward.per_call(make_call("reranker", [0, 4])) == 0.0
    assert reward.per_call(make_call("reranker", [0, 5])) == -0.5
    assert reward.per_call(make_call("reranker", "Document1, Document1")) == -0.5
    assert reward.per_call(make_call("reranker", None, parsed_ok=False, completion="💥")) == -0.5
    traj = SimpleNamespace(calls=[make_call("reranker", [1, 1]), make_call("reranker", [2], index=1)])
    assert reward({}, None, traj) == -0.5


def test_answerer_reward_and_per_call():
    reward = get_reward("mhgpo_penalty_answerer")
    assert reward.per_call(make_call("answerer", "Ed Wood")) == 0.0
    long_text = " ".join(["word"] * 30)
    assert reward.per_call(make_call("answerer", long_text)) == -1.0
    assert reward.per_call(make_call("answerer", {"answer": long_text})) == -1.0
    assert reward.per_call(make_call("answerer", SimpleNamespace(answer="short"))) == 0.0
    # When parsing failed, the raw completion is what was generated.
    assert reward.per_call(make_call("answerer", None, parsed_ok=False, completion=long_text)) == -1.0
    assert reward.per_call(make_call("answerer", None, parsed_ok=False, completion="ok")) == 0.0
    traj = SimpleNamespace(calls=[make_call("answerer", long_text), make_call("answerer", "x", index=1)])
    assert reward({}, None, traj) == -1.0
    custom = get_reward("mhgpo_penalty_answerer", module="answer", max_tokens=1, penalty=-2.0)
    assert custom({}, None, SimpleNamespace(calls=[make_call("answer", "two words")])) == -2.0


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("mhgpo_penalty_rewriter", {"penalty": 0.5}),
        ("mhgpo_penalty_rewriter", {"max_queries": -1}),
        ("mhgpo_penalty_rewriter", {"aggregate": "max"}),
        ("mhgpo_penalty_reranker", {"num_candidates": -3}),
        ("mhgpo_penalty_reranker", {"penalty": "x"}),
        ("mhgpo_penalty_answerer", {"max_tokens": 1.5}),
    ],
)
def test_invalid_parameters(name, params):
    with pytest.raises(ValueError):
        get_reward(name, **params)


def test_a_giant_reranker_id_is_malformed_not_a_crash():
    assert parse_reranker_ids("Document" + "9" * 5000) is None
    assert parse_reranker_ids("1, " + "7" * 19) is None
    assert parse_reranker_ids("1, " + "7" * 18) == [1, int("7" * 18)]
