"""`word_math` (issue 36): Cohort's two-module DSPy task for the Experiment page. Its generated problems,
the plain chat prompts it is measured with, the demos-only phase 1, and at a tiny budget on the real
SmolLM2 both phases of a run of it: phase 1 searches demos and reports every candidate, phase 2 trains
both modules, and both rewards are scored before and after."""

from __future__ import annotations

import dspy
import pytest
from dspy.utils.exceptions import AdapterParseError

from trainer.config import RunConfig
from trainer.dspy.adapters import PlainChatAdapter
from trainer.dspy.prompt_phase import full_score
from trainer.dspy.word_math import SUGGESTED_CONFIG, WordMath, word_problems
from trainer.programs import get_program, program_info
from trainer.rewards import get_reward
from trainer.run.loop import Trainer
from trainer.run.reporting import JsonlReporter, read_events


def test_the_problems_are_generated_reproducibly_with_their_calculation_and_answer():
    problems = word_problems(200, seed=5)
    assert problems == word_problems(200, seed=5) and problems != word_problems(200, seed=6)
    for problem in problems:
        a, op, b = problem["expression"].split()
        assert int(problem["answer"]) == (int(a) + int(b) if op == "+" else int(a) - int(b)) >= 0
        assert f"{a} " in problem["question"] and f" {b} " in problem["question"]
    assert {p["expression"].split()[1] for p in problems} == {"+", "-"}


def test_the_program_is_registered_with_its_two_modules_and_generated_splits():
    info = program_info("word_math")
    assert info["agents"] == ["extract", "solve"] and info["optimizes_prompts"] and info["generates_examples"]
    assert info["distribution"] == "cohort"
    program = get_program("word_math")
    train, dev = program.generate_examples("train", seed=0), program.generate_examples("dev", seed=0)
    assert len(train) == 512 and len(dev) == 64 and dev != train[:64]
    RunConfig.from_dict({**SUGGESTED_CONFIG, "program": "word_math"})  # the suggested settings are valid


def test_the_format_and_correctness_rewards_read_the_final_answer():
    example = {"question": "…", "expression": "7 + 5", "answer": "12"}
    fmt, correct = (get_reward(r["name"], **r["params"]) for r in program_info("word_math")["default_rewards"])
    assert (fmt(example, {"answer": "12"}), correct(example, {"answer": "12"})) == (1.0, 1.0)
    assert (fmt(example, {"answer": "7 + 5 = 12"}), correct(example, {"answer": "7 + 5 = 12"})) == (0.0, 1.0)
    assert (fmt(example, {"answer": "11"}), correct(example, {"answer": "11"})) == (1.0, 0.0)
    assert full_score({"f": fmt, "c": correct}, {"f": 1.0, "c": 1.0}) == 2.0


def test_full_score_weighs_each_rewards_best_value():
    class Ranged:
        def __init__(self, low, high):
            self.value_range = (low, high)

    assert full_score({"a": Ranged(0, 1), "b": Ranged(-1, 0)}, {"a": 2.0, "b": -3.0}) == 5.0
    assert full_score({"a": Ranged(0, float("inf"))}, {}) is None
    assert full_score({"a": lambda e, o, t: 1.0}, {}) is None  # no range: DSPy's own rule (any positive score)


def test_plain_chat_turns_carry_the_instructions_the_inputs_and_the_demos_without_markers():
    predictor = WordMath().solve
    predictor.demos = [dspy.Example(expression="2 + 2", answer="4")]
    messages = PlainChatAdapter().format(predictor.signature, predictor.demos, {"expression": "7 + 5"})
    assert messages == [
        {"role": "system", "content": "Compute the expression. Reply with only the number."},
        {"role": "user", "content": "2 + 2"}, {"role": "assistant", "content": "4"},
        {"role": "user", "content": "7 + 5"},
    ]
    assert PlainChatAdapter().parse(predictor.signature, " 12\n") == {"answer": "12"}
    with pytest.raises(AdapterParseError):
        PlainChatAdapter().parse(predictor.signature, "  ")
    with pytest.raises(ValueError, match="one output field"):
        PlainChatAdapter().parse(dspy.Signature("question -> a, b"), "x")


def test_two_inputs_are_named_one_per_line():
    signature = dspy.Signature("question, hint -> answer", "Answer.")
    content = PlainChatAdapter().format_user_message_content(signature, {"question": "q?", "hint": "h"})
    assert content == "question: q?\nhint: h"


@pytest.mark.slow
@pytest.mark.usefixtures("smollm2_dir")
def test_both_phases_of_a_word_math_run_at_a_tiny_budget(tmp_path):
    config = RunConfig.from_dict({
        **SUGGESTED_CONFIG, "program": "word_math", "steps": 1, "group_size": 2, "rollouts_per_example": 2,
        "examples_per_step": 1, "eval_size": 2, "eval_every": 1, "eval_before": True, "checkpoint_every": 0,
        "prompt_optimizer": "bootstrap_rs", "prompt_optimizer_trials": 1, "prompt_optimizer_demos": 1,
        "prompt_optimizer_labeled_demos": 1})
    trainer = Trainer(config, tmp_path, JsonlReporter(tmp_path / "events.jsonl"))
    try:
        assert trainer.run() == "succeeded"
    finally:
        trainer.close()
    events = read_events(tmp_path / "events.jsonl")
    phase = [e for e in events if e["type"] == "prompts"]
    assert phase[0]["optimizer"] == "bootstrap_rs"
    # zero-shot, labeled demos only, the unshuffled bootstrap, one shuffled bootstrap: each scored
    assert [e["trial"] for e in phase if e["event"] == "trial"] == [1, 2, 3, 4]
    chosen = phase[-1]["modules"]
    assert set(chosen) == {"extract", "solve"} and all(len(m["demos"]) <= 1 for m in chosen.values())
    steps = [e for e in events if e["type"] == "step"]
    evaluations = {e["step"]: e["metrics"] for e in steps if "eval/reward/mean" in e["metrics"]}
    assert set(evaluations) == {0, 1}
    for metrics in evaluations.values():
        assert {"eval/reward/regex_match", "eval/reward/numeric_match"} <= set(metrics)
    trained = next(e for e in steps if e["step"] == 1)
    assert {call["module"] for r in trained["rollouts"] for call in r["calls"]} == {"extract", "solve"}
