"""Length and conditioned length rewards (GDPO Section 4.2, Eq. 8)."""

from types import SimpleNamespace

import pytest

from trainer.rewards import get_reward
from trainer.rewards.length import ConditionedLength, Length, length_within, response_length


def make_call(module, completion, index=0):
    return SimpleNamespace(
        module=module, invocation_index=index, completion=completion, parsed_ok=True, parsed=None
    )


def trajectory(*calls):
    return SimpleNamespace(calls=list(calls))


def test_length_within():
    assert length_within("a b c", 3) == 1.0  # the limit itself is within
    assert length_within("a b c d", 3) == 0.0
    assert length_within("", 0) == 1.0
    assert length_within("abcd", 3, count_tokens=len) == 0.0
    assert length_within("abc", 3, count_tokens=len) == 1.0


def test_response_length_sources():
    traj = trajectory(make_call("think", "a b"), make_call("answer", "c"), make_call("answer", None))
    assert response_length(None, traj) == 3
    assert response_length(None, traj, module="answer") == 1
    assert response_length(None, traj, module="missing") is None
    assert response_length(None, None) is None
    assert response_length(None, SimpleNamespace(calls=None)) is None
    assert response_length("x y", None, source="prediction") == 2
    assert response_length({"a": "x"}, None, source="prediction", prediction_field="a") == 1
    assert response_length(None, traj, source="prediction") is None


def test_length_reward():
    reward = get_reward("length", limit=3)
    assert isinstance(reward, Length) and reward.value_range == (0.0, 1.0)
    assert reward({}, None, trajectory(make_call("m", "a b"), make_call("m", "c"))) == 1.0
    assert reward({}, None, trajectory(make_call("m", "a b"), make_call("m", "c d"))) == 0.0
    assert reward({}, None, trajectory(make_call("m", ""))) == 1.0  # empty output is short
    assert reward({}, None, trajectory()) is None
    by_prediction = get_reward("length", limit=3, source="prediction")
    assert by_prediction({}, "a b c", None) == 1.0
    assert by_prediction({}, "a b c d", None) == 0.0
    assert by_prediction({}, "🙂 " * 4, None) == 0.0
    assert by_prediction({}, None, None) is None
    chars = get_reward("length", limit=3, source="prediction", count_tokens=len)
    assert chars({}, "abcd", None) == 0.0


def test_default_limit_is_papers_l():
    reward = get_reward("length", source="prediction")
    assert reward.limit == 4000
    assert reward({}, "w " * 4000, None) == 1.0
    assert reward({}, "w " * 4001, None) == 0.0


@pytest.mark.parametrize(
    "params",
    [{"limit": -1}, {"limit": 2.5}, {"limit": True}, {"source": "tokens"}, {"count_tokens": 3}],
)
def test_length_invalid_params(params):
    with pytest.raises(ValueError):
        get_reward("length", **params)


def test_conditioned_length():
    reward = get_reward("conditioned_length", limit=5, source="prediction")
    assert isinstance(reward, ConditionedLength) and reward.value_range == (0.0, 1.0)
    example = {"answer": "18"}
    assert reward(example, "#### 18", None) == 1.0
    assert reward(example, "#### 17", None) == 0.0  # short but wrong: no length reward
    assert reward(example, "one two three four then #### 18", None) == 0.0  # right but too long
    assert reward(example, "", None) == 0.0
    assert reward({}, "#### 18", None) is None  # correctness not computable
    assert reward(example, None, None) is None  # length not computable


def test_conditioned_length_on_other_reward_and_threshold():
    reward = get_reward(
        "conditioned_length",
        condition="token_f1",
        condition_params={"gold_field": "gold"},
        threshold=0.5,
        limit=10,
        source="prediction",
    )
    example = {"gold": "a cat sat down"}
    assert reward(example, "the cat sat", None) == 1.0  # F1 0.8 >= 0.5
    assert reward(example, "cat", None) == 1.0  # F1 0.5 >= 0.5: Eq. 8 uses >=
    assert reward(example, "dog cat", None) == 0.0  # F1 0.4 < 0.5
    traj_reward = get_reward("conditioned_length", limit=2, module="answer")
    traj = trajectory(make_call("reason", "long long long"), make_call("answer", "#### 18"))
    assert traj_reward({"answer": "18"}, "#### 18", traj) == 1.0
    assert get_reward("conditioned_length", limit=2)({"answer": "18"}, "#### 18", traj) == 0.0


def test_conditioned_length_invalid():
    with pytest.raises(ValueError, match="unknown reward"):
        get_reward("conditioned_length", condition="nope")
    with pytest.raises(ValueError):
        get_reward("conditioned_length", condition="conditioned_length")
    with pytest.raises(ValueError, match="unknown parameter"):
        get_reward("conditioned_length", condition_params={"bogus": 1})
