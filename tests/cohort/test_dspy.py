"""Cohort as a DSPy optimizer (issue 26, item 1): `cohort.dspy.MMGRPO` compiles a real DSPy program on
the real SmolLM2 (builtin:smollm2-135m-instruct) in this process, alone and as the `w` of DSPy's own
`BetterTogether` after a real MIPROv2. No optimizer or LM is mocked; the budgets are tiny."""

from __future__ import annotations

import json

import dspy
import pytest

from cohort.dspy import MMGRPO, CohortLM
from tests.trainer.dspy.programs import Add
from trainer.config import ConfigError
from trainer.dspy.adapters import MarkerFallbackAdapter

MODEL = "builtin:smollm2-135m-instruct"
PAIRS = [(1, 2), (3, 4), (2, 2), (5, 1), (2, 6), (4, 4), (3, 3), (1, 7)]
TINY = {"steps": 2, "group_size": 2, "rollouts_per_example": 2, "examples_per_step": 2, "max_new_tokens": 16}


def contains_answer(example, prediction, trace=None):
    return float(str(example.answer) in str(getattr(prediction, "answer", "")))


def examples():
    return [dspy.Example(question=f"What is {a} + {b}?", answer=str(a + b)).with_inputs("question")
            for a, b in PAIRS]


@pytest.fixture
def student(smollm2_dir):
    """The program on the real model, formatted with the small-model adapter (an unmarked answer is
    read as the answer instead of failing every rollout)."""
    program = Add()
    program.set_lm(CohortLM(MODEL, max_tokens=16))
    with dspy.context(adapter=MarkerFallbackAdapter()):
        yield program


def events(run_dir):
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_compile_trains_the_students_prompts_and_returns_it_on_the_trained_adapter(student, tmp_path):
    # What a prompt optimizer leaves behind: instructions and a demo. The weights must learn this program.
    student.solve.signature = student.solve.signature.with_instructions("Add the two numbers. Reply with the sum.")
    student.solve.demos = [dspy.Example(question="What is 1 + 1?", answer="2")]
    before = student.solve.lm
    optimizer = MMGRPO(contains_answer, run_dir=tmp_path / "run", **TINY)
    trained = optimizer.compile(student, trainset=examples()[:4])

    lm = trained.solve.lm
    assert isinstance(lm, CohortLM) and lm.cohort_model == MODEL
    assert lm.adapter == str((tmp_path / "run" / "adapter").resolve())
    assert (tmp_path / "run" / "adapter" / "adapter_config.json").is_file() and lm.model.endswith("/adapter")
    assert student.solve.lm is before and before.adapter is None  # the student itself is left as it was
    assert trained.solve.signature.instructions == "Add the two numbers. Reply with the sum."
    assert trained.solve.demos[0].answer == "2"

    log = events(tmp_path / "run")
    steps = [e for e in log if e["type"] == "step"]
    assert [s["step"] for s in steps] == [1, 2] and log[-1] == {"type": "status", "state": "succeeded", "step": 2}
    prompt = steps[0]["rollouts"][0]["calls"][0]["messages"]
    text = json.dumps(prompt)
    assert "Add the two numbers. Reply with the sum." in text and "What is 1 + 1?" in text  # trained as optimized
    assert all(len(s["rollouts"]) == 4 for s in steps)
    assert "reward/mean" in steps[0]["metrics"]

    answer = trained(question="What is 2 + 5?")  # sampled with the adapter, through the trained LM
    assert isinstance(answer.answer, str) and len(lm.history) == 1 and lm.history[0]["model"] == lm.model


@pytest.mark.slow
def test_better_together_prompts_then_weights_returns_the_program_on_the_trained_adapter(student, tmp_path):
    """dspy.BetterTogether(p=MIPROv2, w=cohort.dspy.MMGRPO, "p -> w"), as a DSPy user writes it. No
    validation set, so BetterTogether returns the last program (p -> w) rather than the best-scoring one."""
    lm = student.solve.lm  # the same weights propose instructions, run the trials and are trained
    mipro = dspy.MIPROv2(contains_answer, prompt_model=lm, task_model=lm, auto=None, num_candidates=2, max_bootstrapped_demos=1,
                         max_labeled_demos=1, num_threads=1)
    mmgrpo = MMGRPO(contains_answer, run_dir=tmp_path / "w", **{**TINY, "steps": 1})
    optimizer = dspy.BetterTogether(contains_answer, p=mipro, w=mmgrpo)
    compiled = optimizer.compile(
        student, trainset=examples(), valset_ratio=0, strategy="p -> w", num_threads=1,
        optimizer_compile_args={"p": {"num_trials": 2, "minibatch": False, "program_aware_proposer": False,
                                      "data_aware_proposer": False}})

    assert [c["strategy"] for c in compiled.candidate_programs] == ["", "p", "p -> w"]
    lm = compiled.solve.lm
    assert isinstance(lm, CohortLM) and lm.adapter == str((tmp_path / "w" / "adapter").resolve())
    prompt_optimized = compiled.candidate_programs[1]["program"]
    assert compiled.solve.signature.instructions == prompt_optimized.solve.signature.instructions
    assert [d.toDict() for d in compiled.solve.demos] == [d.toDict() for d in prompt_optimized.solve.demos]
    assert isinstance(compiled(question="What is 3 + 5?").answer, str) and lm.history[-1]["model"] == lm.model


def test_a_bad_run_setting_fails_when_the_optimizer_is_made():
    with pytest.raises(ConfigError, match="group_size"):
        MMGRPO(contains_answer, group_size=0)
    with pytest.raises(TypeError, match="rewards"):
        MMGRPO(contains_answer, rewards=[{"name": "exact_match"}])


def test_compile_needs_a_model_to_train():
    program = Add()
    with pytest.raises(ValueError, match="model="):
        MMGRPO(contains_answer).compile(program, trainset=examples())
    with pytest.raises(ValueError, match="trainset is empty"):
        MMGRPO(contains_answer, model=MODEL).compile(program, trainset=[])
