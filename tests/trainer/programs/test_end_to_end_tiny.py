"""Every built-in program, one training step on the tiny random model against ../shared/data.

The random model writes garbage, so most trajectories are format failures: the point is that every
program and strategy runs the whole loop (sampling, rewards, groups, advantages, LoRA update)
without crashing, records failures as partial trajectories, and produces finite metrics.
"""

from __future__ import annotations

import json
import math

import pytest

from tests.conftest import SHARED_DATA
from trainer.config import RunConfig

pytestmark = pytest.mark.usefixtures("torch_setup")

CORPUS = str(SHARED_DATA / "hotpotqa" / "corpus.jsonl")
CASES = {
    "banking77-grpo": dict(program="banking77", train_data=str(SHARED_DATA / "banking77" / "train.jsonl"),
                           rewards=[{"name": "label_match"}]),
    "math-gdpo": dict(program="math", train_data=str(SHARED_DATA / "gsm8k" / "train.jsonl"), estimator="gdpo",
                      rewards=[{"name": "numeric_match"}, {"name": "length", "params": {"limit": 400},
                                                           "condition_on": "numeric_match"}]),
    "toolcall-gdpo": dict(program="toolcall", train_data=str(SHARED_DATA / "toolrl" / "test.jsonl"), estimator="gdpo",
                          rewards=[{"name": "toolrl_format"}, {"name": "toolrl_correctness"}]),
    "hover-mmgrpo": dict(program="hover", train_data=str(SHARED_DATA / "hover" / "dev.jsonl"), corpus_data=CORPUS,
                         strategy="mmgrpo", padding="fill", rollouts_per_example=3, group_size=2,
                         rewards=[{"name": "title_recall", "params": {"prediction_field": "titles"}}]),
    "search-mhgpo-fof": dict(program="search", train_data=str(SHARED_DATA / "hotpotqa" / "train.jsonl"),
                             corpus_data=CORPUS, strategy="mhgpo", sampling="fof"),
    "search-mhgpo-is": dict(program="search", train_data=str(SHARED_DATA / "hotpotqa" / "train.jsonl"),
                            corpus_data=CORPUS, strategy="mhgpo", sampling="is"),
    "search-mhgpo-rr": dict(program="search", train_data=str(SHARED_DATA / "hotpotqa" / "train.jsonl"),
                            corpus_data=CORPUS, strategy="mhgpo", sampling="rr", fork_probabilities=[0.7, 0.1, 0.2]),
}
SEARCH_REWARDS = [{"name": "token_f1", "params": {"prediction_field": "answer"}}, {"name": "mhgpo_penalty_rewriter"},
                  {"name": "mhgpo_penalty_reranker"}, {"name": "mhgpo_penalty_answerer"}]


class Events:
    def __init__(self):
        self.steps = []

    def status(self, state, **info):
        pass

    def step(self, event):
        json.dumps(event, allow_nan=False)
        self.steps.append(event)

    def should_stop(self):
        return False


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_program_trains_one_step_on_real_data(case, tmp_path, tiny_model_path):
    from trainer.run.loop import Trainer

    fields = {"rewards": SEARCH_REWARDS, **CASES[case]}
    fields.setdefault("group_size", 2)
    fields.setdefault("rollouts_per_example", fields["group_size"])
    config = RunConfig(model=str(tiny_model_path), steps=1, examples_per_step=2, max_new_tokens=16,
                       max_context_length=2048, temperature=1.5, eval_every=0, checkpoint_every=0, **fields)
    events = Events()
    assert Trainer(config, tmp_path / case, events).run() == "succeeded"
    event = events.steps[0]
    metrics = event["metrics"]
    assert math.isfinite(metrics["loss"]) and metrics["groups"] >= 1 and metrics["reward/mean"] is not None
    for trajectory in event["rollouts"]:
        calls = trajectory["calls"]
        assert calls, "every rollout records at least its first call"
        if trajectory["failed"]:
            assert calls[-1]["parsed_ok"] is False and all(c["parsed_ok"] for c in calls[:-1])
            assert trajectory["reward"] == config.format_failure_reward
        else:
            assert trajectory["reward"] is not None
