"""Trajectory data model: rewards, the format-failure fallback (MMGRPO 3.1), JSON round trips."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pytest

from trainer.rollouts.trajectory import ModuleCall, Trajectory, apply_format_failure, jsonable, unique_calls


def call(module, completion="out", ok=True, **kw):
    return ModuleCall(module, kw.pop("invocation_index", 0), f"prompt for {module}", completion, ok, **kw)


def test_module_call_final_reward_is_shared_plus_specific():
    c = call("answerer", specific_reward=-1.0)
    assert c.reward is None
    c.propagated_reward = 0.75
    assert c.reward == -0.25


def test_trajectory_reward_prefers_total_then_sums_known_components():
    t = Trajectory("e", rewards={"format": 1.0, "correct": None, "length": 0.25})
    assert t.reward == 1.25
    t.total_reward = 0.4
    assert t.reward == 0.4
    assert Trajectory("e", rewards={"a": None}).reward is None
    assert Trajectory("e").reward is None
    vec = Trajectory("e", rewards={"a": 1.0, "b": None}).reward_vector(["b", "a", "missing"])
    assert math.isnan(vec[0]) and vec[1] == 1.0 and math.isnan(vec[2])


def test_format_failure_keeps_the_prefix_up_to_and_including_the_failed_call():
    calls = [call("rewriter"), call("reranker", "garbage", ok=False), call("answerer")]
    t = Trajectory("e", calls, rewards={"f1": 0.9, "em": 1.0}, final_output="Paris", trajectory_id="t")
    out = apply_format_failure(t, -1.0)
    assert out.calls == calls[:2] and out.calls[1] is calls[1]
    assert out.failed and out.final_output is None
    assert out.total_reward == -1.0 and out.reward == -1.0
    assert out.rewards == {"f1": -1.0, "em": -1.0}
    assert out.trajectory_id == "t"
    assert t.calls == calls and not t.failed  # the input is left as it was


def test_format_failure_per_component_values_and_new_names():
    t = Trajectory("e", [call("m", ok=False)], rewards={"format": None})
    out = apply_format_failure(t, {"format": 0.0, "correct": -3.0}, ["format", "correct"])
    assert out.rewards == {"format": 0.0, "correct": -3.0}
    assert out.total_reward == -3.0


def test_no_failed_call_leaves_the_trajectory_alone():
    t = Trajectory("e", [call("a"), call("b")], rewards={"x": 1.0})
    assert apply_format_failure(t, -1.0) is t


def test_to_dict_is_plain_json_and_round_trips():
    c0 = call("rewriter", parsed=("q1", "q2"), call_id="c0", group_id="g0")
    c1 = call("answerer", parsed={"answer": np.float64(3.5)}, call_id="c1", parent_id="c0",
              propagated_reward=float("nan"), advantage=0.5, invocation_index=0)
    t = Trajectory("e1", [c0, c1], rewards={"f1": 0.5, "fmt": None, "bad": float("nan")},
                   final_output={"answer": "x"}, teacher="big", fork_point="rewriter", group_id="e1/fork",
                   parent_id="e1/t0", trajectory_id="e1/t1")
    data = t.to_dict()
    text = json.dumps(data, allow_nan=False)  # no NaN, no numpy types left
    again = json.loads(text)
    assert again["rewards"] == {"f1": 0.5, "fmt": None, "bad": None}
    assert again["reward"] == 0.5
    assert again["calls"][0]["parsed"] == ["q1", "q2"]
    assert again["calls"][1]["parsed"] == {"answer": 3.5}
    assert again["calls"][1]["propagated_reward"] is None and again["calls"][1]["reward"] is None
    back = Trajectory.from_dict(again)
    assert back.trajectory_id == "e1/t1" and back.parent_id == "e1/t0" and back.teacher == "big"
    assert [c.call_id for c in back.calls] == ["c0", "c1"] and back.calls[1].parent_id == "c0"
    assert back.calls[1].advantage == 0.5 and back.rewards["fmt"] is None
    assert back.to_dict() == again


def test_a_calls_tokens_are_in_its_dict_only_when_it_has_them():
    plain = call("echo")
    assert "tokens" not in plain.to_dict()
    tokens = {"pieces": ["He", "llo", "<|im_end|>"], "sampler": [-0.1, -2.0, float("nan")],
              "trainer": [-0.1, -2.0, -0.5], "entropy": [0.5, np.float32(1.25), 0.0], "topk": [[1, [["llo", 0.3]]]]}
    data = json.loads(json.dumps(call("echo", tokens=tokens).to_dict(), allow_nan=False))
    assert data["tokens"]["sampler"] == [-0.1, -2.0, None] and data["tokens"]["entropy"] == [0.5, 1.25, 0.0]
    assert ModuleCall.from_dict(data).tokens == data["tokens"]


def test_jsonable_covers_common_shapes():
    @dataclass
    class Doc:
        title: str
        score: float

    assert jsonable({"a": (1, np.int64(2)), "b": {3}, "c": np.array([0.5, np.nan]), "d": Doc("t", math.inf)}) == {
        "a": [1, 2], "b": [3], "c": [0.5, None], "d": {"title": "t", "score": None}}
    assert jsonable(object.__new__(type("Opaque", (), {"__str__": lambda s: "opaque"}))) == "opaque"


def test_unique_calls_dedupes_shared_prefix_calls():
    shared = call("rewriter", call_id="c0")
    a = Trajectory("e", [shared, call("answerer", call_id="c1")])
    b = Trajectory("e", [shared, call("answerer", call_id="c2")])
    copy = Trajectory("e", [call("rewriter", call_id="c0")])  # same id, another object (from JSON)
    assert [c.call_id for c in unique_calls([a, b, copy])] == ["c0", "c1", "c2"]
    anon = [call("x"), call("x")]
    assert len(unique_calls([Trajectory("e", anon), Trajectory("e", anon)])) == 2


@pytest.mark.parametrize("value", [1, "s", None, True])
def test_jsonable_passes_scalars(value):
    assert jsonable(value) == value


def test_docstring_examples():
    import doctest

    import trainer.rollouts.trajectory

    result = doctest.testmod(trainer.rollouts.trajectory)
    assert result.failed == 0 and result.attempted > 0
