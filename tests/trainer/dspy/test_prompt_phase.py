"""Phase 1 of a run that optimizes prompts first (issue 26, item 2), in the trainer: real MIPROv2 and
GEPA at tiny budgets on the real SmolLM2, every LM call through the run's own backend; the trials are
reported as they end and the chosen prompts at the end; phase 2 trains the optimized program; a run
stopped after phase 1 and resumed loads its result instead of searching again."""

from __future__ import annotations

import json

import dspy
import pytest

from tests.trainer.dspy.programs import Add
from trainer.config import ConfigError, RunConfig
from trainer.dspy import DSPyProgram
from trainer.dspy.adapters import MarkerFallbackAdapter
from trainer.dspy.prompt_phase import PHASE_STATE, run_metric
from trainer.rewards import register_reward
from trainer.run.loop import Trainer
from trainer.run.reporting import JsonlReporter, read_events

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("smollm2_dir")]

MODEL = "builtin:smollm2-135m-instruct"
PAIRS = [(1, 2), (3, 4), (2, 2), (5, 1), (2, 6), (4, 4)]


def sum_found(example, output, trajectory) -> float:
    return float(str(example["answer"]) in str(getattr(output, "answer", "")))


register_reward("test_sum_found", sum_found)


def program() -> DSPyProgram:
    return DSPyProgram(Add, name="add", inputs=("question",), adapter=MarkerFallbackAdapter())


@pytest.fixture
def data(tmp_path):
    rows = [{"id": f"a{i}", "question": f"What is {a} + {b}?", "answer": str(a + b)} for i, (a, b) in enumerate(PAIRS)]
    train, dev = tmp_path / "train.jsonl", tmp_path / "dev.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows[:4]))
    dev.write_text("".join(json.dumps(r) + "\n" for r in rows[4:]))
    return {"train_data": str(train), "dev_data": str(dev)}


def config(data, **changes) -> RunConfig:
    return RunConfig.from_dict({
        "program": "add", "model": MODEL, "rewards": [{"name": "test_sum_found"}], "steps": 1, "group_size": 2,
        "rollouts_per_example": 2, "examples_per_step": 2, "max_new_tokens": 16, "checkpoint_every": 0,
        "eval_every": 0, "prompt_optimizer": "mipro_light", "prompt_optimizer_trials": 2, **data, **changes})


def train(run_dir, cfg, **run):
    trainer = Trainer(cfg, run_dir, JsonlReporter(run_dir / "events.jsonl"), program=program())
    try:
        return trainer.run(**run)
    finally:
        trainer.close()


def test_mipro_reports_its_trials_and_a_run_stopped_after_phase_1_resumes_and_trains_the_chosen_prompts(
        tmp_path, data):
    # One MIPROv2 search serves both halves: a run stopped between the phases must not search again.
    assert train(tmp_path, config(data), stop_after=0) == "stopped"
    phase = [e for e in read_events(tmp_path / "events.jsonl") if e["type"] == "prompts"]
    assert phase[0] == {"type": "prompts", "attempt": 1, "event": "started", "optimizer": "mipro_light", "model": MODEL}
    trials = [e for e in phase if e["event"] == "trial"]
    assert len(trials) >= 2 and [t["trial"] for t in trials] == list(range(1, len(trials) + 1))
    assert all(0.0 <= t["score"] <= 100.0 for t in trials)
    chosen = phase[-1]
    assert chosen["event"] == "chosen" and set(chosen["modules"]) == {"solve"}
    assert [e for e in phase if e["event"] == "chosen"] == [chosen]
    assert (tmp_path / PHASE_STATE).is_file()

    assert train(tmp_path, config(data), resume=True) == "succeeded"
    events = read_events(tmp_path / "events.jsonl")
    assert [e["event"] for e in events if e["type"] == "prompts"].count("started") == 1
    # phase 1 ended before the first step, and phase 2 trains the program it chose
    assert events.index(chosen) < next(i for i, e in enumerate(events) if e["type"] == "step")
    step = next(e for e in events if e["type"] == "step")
    instructions = chosen["modules"]["solve"]["instructions"]
    assert all(instructions in r["calls"][0]["messages"][0]["content"] for r in step["rollouts"])


def test_gepa_as_phase_1_then_a_sampler_process_samples_the_prompts_it_chose(tmp_path, data):
    # BetterTogether's second half on the asynchronous pipeline: the sampler process starts after phase 1
    # and is handed the optimized program, so its rollouts carry GEPA's instructions.
    cfg = config(data, prompt_optimizer="gepa", prompt_optimizer_trials=2, steps=2, max_staleness=1)
    assert train(tmp_path, cfg) == "succeeded"
    events = read_events(tmp_path / "events.jsonl")
    phase = [e for e in events if e["type"] == "prompts"]
    assert phase[0]["optimizer"] == "gepa" and phase[-1]["event"] == "chosen"
    trials = [e for e in phase if e["event"] == "trial"]  # each candidate GEPA scored on the held-out rows
    assert trials and [t["trial"] for t in trials] == list(range(1, len(trials) + 1))
    steps = [e for e in events if e["type"] == "step"]
    instructions = phase[-1]["modules"]["solve"]["instructions"]
    assert [e["step"] for e in steps] == [1, 2]
    for step in steps:
        assert all(instructions in r["calls"][0]["messages"][0]["content"] for r in step["rollouts"])
        assert step["metrics"]["pipeline/staleness/max"] <= 1
        assert [s["lane"] for s in step["spans"]].count("sampler") == 1


def test_a_program_that_is_not_dspy_cannot_optimize_prompts_first(tmp_path, tiny_model_path):
    cfg = RunConfig(program="toy", model=str(tiny_model_path), prompt_optimizer="mipro_light")
    with pytest.raises(ConfigError, match="not a DSPy program"):
        Trainer(cfg, tmp_path, JsonlReporter(tmp_path / "events.jsonl"))


def test_the_phase_1_metric_is_the_runs_weighted_reward():
    metric = run_metric({"a": lambda e, o, t: 1.0, "b": lambda e, o, t: None, "c": lambda e, o, t: 1 / 0},
                        {"a": 2.0, "b": 5.0, "c": 1.0})
    assert metric(dspy.Example(question="q", answer="x"), dspy.Prediction(answer="x")) == 2.0
