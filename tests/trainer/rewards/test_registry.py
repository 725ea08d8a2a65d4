"""The reward registry, the shared contract, and the no-web-framework import rule."""

import math
import subprocess
import sys
from types import SimpleNamespace

import pytest

from trainer.rewards import REWARDS, Reward, get_reward, list_rewards, reward_defaults
from trainer.rewards.base import calls_of, gold_value, prediction_text, whitespace_token_count

EXPECTED = {
    "exact_match": (0.0, 1.0),
    "token_f1": (0.0, 1.0),
    "char_f1": (0.0, 1.0),
    "regex_match": (0.0, 1.0),
    "label_match": (0.0, 1.0),
    "title_recall": (0.0, 1.0),
    "numeric_match": (0.0, 1.0),
    "toolrl_format": (0.0, 1.0),
    "toolrl_correctness": (-3.0, 3.0),
    "length": (0.0, 1.0),
    "conditioned_length": (0.0, 1.0),
    "mhgpo_penalty_rewriter": (-math.inf, 0.0),
    "mhgpo_penalty_reranker": (-math.inf, 0.0),
    "mhgpo_penalty_answerer": (-math.inf, 0.0),
}


def test_registry_names_and_ranges():
    # Installed plugins (the test plugins among them) add theirs; the built-ins are exactly these.
    assert {r["name"] for r in list_rewards() if r["distribution"] == "cohort"} == set(EXPECTED)
    assert set(EXPECTED) <= set(REWARDS)
    for name, value_range in EXPECTED.items():
        assert REWARDS[name].value_range == value_range
        reward = get_reward(name)
        assert isinstance(reward, Reward)
        assert reward.name == name
        assert reward.value_range == value_range


def test_unknown_name_lists_known():
    with pytest.raises(ValueError) as info:
        get_reward("bleu")
    for name in EXPECTED:
        assert name in str(info.value)
    with pytest.raises(ValueError):
        get_reward(None)


def test_unknown_parameter_lists_accepted():
    with pytest.raises(ValueError, match="accepted: gold_field, prediction_field"):
        get_reward("exact_match", gold="answer")


def test_defaults_and_params():
    assert reward_defaults("exact_match") == {"gold_field": "answer", "prediction_field": None}
    assert reward_defaults("toolrl_correctness") == {
        "gold_field": "gt_tool_calls",
        "prediction_field": None,
        "skip_without_gold_calls": False,
    }
    assert reward_defaults("mhgpo_penalty_rewriter") == {
        "module": "rewriter",
        "max_queries": 4,
        "penalty": -0.5,
        "aggregate": "sum",
    }
    assert reward_defaults("mhgpo_penalty_reranker")["penalty"] == -0.5
    assert reward_defaults("mhgpo_penalty_answerer")["penalty"] == -1.0
    assert reward_defaults("length")["limit"] == 4000
    assert get_reward("length", limit=7).params["limit"] == 7
    assert "_condition" not in get_reward("conditioned_length").params


def test_every_reward_survives_garbage():
    """Malformed predictions and trajectories never raise; values stay within the declared range."""
    examples = [
        {},
        {
            "answer": "18",
            "label": "x",
            "supporting_titles": ["A"],
            "gt_tool_calls": [{"name": "f", "parameters": {}}],
        },
    ]
    predictions = [None, "", "💥\x00", "<tool_call>\n{bad", 3, [1, None], {"answer": None}, object()]
    trajectories = [
        None,
        SimpleNamespace(calls=None),
        SimpleNamespace(
            calls=[
                SimpleNamespace(module=m, invocation_index=0, completion=None, parsed_ok=False, parsed=None)
                for m in ("rewriter", "reranker", "answerer")
            ]
        ),
    ]
    for name in EXPECTED:  # the built-ins (plugins answer for their own rewards)
        reward = get_reward(name)
        low, high = reward.value_range
        for example in examples:
            for prediction in predictions:
                for trajectory in trajectories:
                    value = reward(example, prediction, trajectory)
                    assert value is None or (isinstance(value, float) and low <= value <= high), (name, value)


def test_base_helpers():
    assert whitespace_token_count("  a b\n c ") == 3
    assert prediction_text(18) == "18"
    assert prediction_text([1]) is None
    assert prediction_text(SimpleNamespace(answer="x"), "answer") == "x"
    assert gold_value({"a": 1}, "a") == 1
    assert gold_value(SimpleNamespace(a=2), "a") == 2
    assert gold_value(None, "a") is None
    calls = [SimpleNamespace(module="a"), SimpleNamespace(module="b")]
    assert calls_of(SimpleNamespace(calls=calls), "b") == calls[1:]
    assert calls_of(object()) == []


def test_rewards_import_no_web_framework():
    code = (
        "import sys, trainer.rewards, trainer.rewards.toolrl;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('django', 'celery', 'channels', 'torch')];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
